"""Flexible (modal) bodies in the hybrid algorithm: the floating frame of reference (FFA).

Boyer et al. 2017 (J. Nonlinear Sci.), Appendices 2 and 3, restated in docs/flexible.md. A modal body j is a
floating frame (its twist eta_j, as a rigid body's) plus a displacement field that is a sum of ``n_e`` shape
functions weighted by modal coordinates ``q_e`` (state: ``q_e``, ``q_e_d``). Along its axis e1, X in [0, l],
Gauss sections s carry ``Psi(X) = [Phi_d; Phi_r]`` (6, n_e) (displacement and rotation of the section, clamped
root: ``Psi(0) = 0``) and a section inertia per length ``M_s`` (6, 6) about the section origin. Then
(project signs; docs/theory/hybrid-algorithm.md for the rigid part):

    G_s = (exp(hat(Phi_r q)), X_s e1 + Phi_d q)       section pose in the floating frame
    A_s = Ad_{G_s^-1};  J_s = blkdiag(R_s^T, R_s^T) Psi(X_s);  eta_s = A_s eta_j + J_s q_d
    nu_s = ad_{eta_s}(J_s q_d) - blkdiag(hat(w), hat(w)) J_s q_d      (w: angular part of J_s q_d)
    h_s = M_s nu_s - ad^T_{eta_s}(M_s eta_s) - F_s                      (F_s: gravity + force densities)
    M* = S w A^T M_s A,  C* = S w J^T M_s A,  E* = S w J^T M_s J,  Pi* = S w A^T h_s,
    Pe* = S w J^T h_s + K_e q + D_e q_d.

The three recursions (:func:`flexible_step`) are the rigid algorithm's with a child j hung on a section ``X_a``
of its parent i (``G_a(q_i)``, ``J_a``), each flexible body's modes condensed in the backward pass
(``Mt = M* - C*^T E*^-1 C*``, ``Pt = Pi* - C*^T E*^-1 Pe*``) and recovered in the second forward pass
(``q_dd = -E*^-1 (C* eta_d + Pe*)``). A model without modal bodies gives the rigid algorithm's numbers.

A modal body is a *body kind* carried by the model (``Model.flexible``, a :class:`FlexibleParts`): the rigid
tree (parents, joints, placements, rigid inertias, laws, force models) stays the Model's; the rigid inertia of a
modal body is whatever it carries rigidly at its floating frame (zero for a bare beam). The placement of a child
of a modal body is given in the parent's floating frame at rest (``q_e = 0``): with the modes locked, the model
is the rigid one. Force plug-ins see the section kinematics of every modal body (``data.g_sec[j]`` (n_s, 4, 4)
world poses, ``data.eta_sec[j]`` (n_s, 6) section twists) and add wrench densities ``data.f_sec[j]`` (n_s, 6)
(N/m, N m/m; section frame, about the section origin) and added inertia densities ``data.M_sec[j]``
(n_s, 6, 6); ``data.f_ext[j]`` still acts on the floating frame (no modal force).

This is the Python path (numpy, vectorised over the sections); the fused numba stepper does not take modal bodies
yet (``sim.fused.fused_unsupported`` says so).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from .dynamics import _ad_inv, _joint_pose
from .model import Data, Model

#: Shape-function families of :func:`beam_modes`: "polynomial" (X/l)^p (p >= 2 bending, >= 1 torsion).
BENDING_PLANES = ("y", "z")
#: Gauss points of the stiffness integrals: exact for the polynomial modes of :func:`beam_modes` up to degree 15
#: (``K_e`` integrates products of second derivatives; more points than sections keeps K_e exact when the
#: sections are few).
STIFFNESS_QUADRATURE_POINTS = 16
#: Largest number of modes per family accepted from a config: (X/l)^p with p > 9 is numerically dependent on
#: the lower powers in double precision (E* becomes singular).
MAX_MODES_PER_FAMILY = 8


# ----------------------------------------------------------------------------------------- the modal body
@dataclass(frozen=True)
class ModalBody:
    """One flexible body's modal description (all arrays read-only after construction).

    length l (m); ``X`` (n_s,) section abscissae (m) and ``w`` (n_s,) their quadrature weights (m);
    ``Psi`` (n_s, 6, n_e) displacement (rows 0-2, m per modal unit) and rotation (rows 3-5, rad per unit) fields
    at the sections, floating frame; ``M_s`` (n_s, 6, 6) section inertia per length about the section origin,
    section frame (kg/m, kg, kg m); ``K`` (n_e, n_e) modal stiffness, ``D`` (n_e, n_e) modal damping;
    ``field`` X -> (6, n_e): Psi anywhere along the axis (for children's attachment sections);
    ``mode_names`` (n_e) labels ("bend_y1", "torsion1", ...).
    """
    length: float
    X: np.ndarray
    w: np.ndarray
    Psi: np.ndarray
    M_s: np.ndarray
    K: np.ndarray
    D: np.ndarray
    field: Callable[[float], np.ndarray]
    mode_names: tuple = ()

    def __post_init__(self):
        n_s = self.X.shape[0]
        n_e = self.K.shape[0]
        shapes = {"X": (n_s,), "w": (n_s,), "Psi": (n_s, 6, n_e), "M_s": (n_s, 6, 6), "K": (n_e, n_e),
                  "D": (n_e, n_e)}
        for name, shape in shapes.items():
            array = getattr(self, name)
            if array.shape != shape:
                raise ValueError(f"modal body: {name} has shape {array.shape}, expected {shape}")
            if not np.all(np.isfinite(array)):
                raise ValueError(f"modal body: {name} has non-finite values")
            array.setflags(write=False)
        if not self.length > 0.0:
            raise ValueError(f"modal body: length must be > 0 m, got {self.length}")
        root = np.asarray(self.field(0.0))
        if root.shape != (6, n_e) or np.any(np.abs(root) > 0.0):
            raise ValueError("modal body: the modes must vanish at the clamped root (Psi(0) = 0)")

    @property
    def n_e(self) -> int:
        return self.K.shape[0]

    @property
    def n_s(self) -> int:
        return self.X.shape[0]

    def mass(self) -> float:
        """Distributed mass (kg) of the body: the integral of the sections' mass per length."""
        return float(self.w @ self.M_s[:, 0, 0])

    def frequencies_hz(self) -> np.ndarray:
        """Natural frequencies (Hz, ascending) of the modes with the floating frame clamped: eig(K, E*)."""
        E = np.einsum("s,sai,sab,sbk->ik", self.w, self.Psi, self.M_s, self.Psi)
        L = np.linalg.cholesky(E)
        Li = np.linalg.inv(L)
        omega2 = np.linalg.eigvalsh(Li @ self.K @ Li.T)
        return np.sqrt(np.clip(omega2, 0.0, None)) / (2.0 * math.pi)


def _powers(p: np.ndarray, X, length: float, derivative: int) -> np.ndarray:
    """(X/l)^p and its X-derivatives, (..., len(p)), for exponents p >= derivative (or zero)."""
    X = np.asarray(X, dtype=float)[..., None]
    coef = np.ones_like(p, dtype=float)
    for d in range(derivative):
        coef = coef * (p - d)
    exponent = np.maximum(p - derivative, 0)
    return np.where(p >= derivative, coef * X ** exponent / length ** p, 0.0)


def beam_modes(length: float, *, rho_A, rho_I, EI_y=None, EI_z=None, GJ=None, bending_y: int = 0,
               bending_z: int = 0, torsion: int = 0, sections: int = 8, centroid=None, damping_ratio: float = 0.0,
               rotary_inertia: bool = True) -> ModalBody:
    """A straight beam along e1 of the floating frame, clamped at X = 0, with polynomial modes (the spec's
    default shape functions): ``bending_y`` modes ``(X/l)^p``, p = 2.. in the (e1, e2) plane (Phi_d = phi e2,
    Phi_r = phi' e3), ``bending_z`` in the (e1, e3) plane (Phi_d = phi e3, Phi_r = -phi' e2), ``torsion`` modes
    ``(X/l)^p``, p = 1.. about e1 (Phi_r = phi e1).

    Properties are functions of X (m) or constants: rho_A (kg/m); rho_I (3,) rotary inertia per length about the
    centroid's section axes (kg m); EI_y, EI_z (N m^2): bending stiffness for the y- and z-plane modes; GJ (N m^2)
    torsion stiffness; ``centroid`` (3,) (or X -> (3,)) the section's centre of mass in the section frame (m;
    default on the axis). ``sections`` Gauss-Legendre points; ``damping_ratio`` beta_d, D_e = beta_d K_e (s);
    ``rotary_inertia=False`` drops rho_I.
    """
    for count, name in ((bending_y, "bending_y"), (bending_z, "bending_z"), (torsion, "torsion")):
        if not 0 <= count <= MAX_MODES_PER_FAMILY:
            raise ValueError(f"beam_modes: {name} = {count}, expected 0..{MAX_MODES_PER_FAMILY}")
    if not length > 0.0 or sections < 1:
        raise ValueError(f"beam_modes: length {length} m and sections {sections}: expected > 0 and >= 1")
    families = [("y", np.arange(2, 2 + bending_y)), ("z", np.arange(2, 2 + bending_z)),
                ("t", np.arange(1, 1 + torsion))]
    names = tuple(f"bend_{f}{i + 1}" if f != "t" else f"torsion{i + 1}" for f, p in families for i in range(len(p)))
    n_e = len(names)

    def psi(X, derivative: int = 0) -> np.ndarray:
        """(..., 6, n_e) field (derivative 0) or its X-derivative of order ``derivative``."""
        X = np.asarray(X, dtype=float)
        out = np.zeros(X.shape + (6, n_e))
        col = 0
        for family, p in families:
            if p.size == 0:
                continue
            phi, dphi = _powers(p, X, length, derivative), _powers(p, X, length, derivative + 1)
            block = slice(col, col + p.size)
            if family == "y":
                out[..., 1, block], out[..., 5, block] = phi, dphi
            elif family == "z":
                out[..., 2, block], out[..., 4, block] = phi, -dphi
            else:
                out[..., 3, block] = phi
            col += p.size
        return out

    def prop(value, X) -> np.ndarray:
        if value is None:
            return np.zeros_like(X)
        return np.asarray(value(X) if callable(value) else np.full_like(X, float(value)), dtype=float)

    nodes, weights = np.polynomial.legendre.leggauss(sections)
    X = 0.5 * length * (nodes + 1.0)
    w = 0.5 * length * weights
    m = prop(rho_A, X)
    inertia = np.array([rho_I(x) if callable(rho_I) else rho_I for x in X], dtype=float).reshape(sections, 3)
    if not rotary_inertia:
        inertia[:] = 0.0
    c = np.zeros((sections, 3)) if centroid is None else np.array(
        [centroid(x) if callable(centroid) else centroid for x in X], dtype=float).reshape(sections, 3)
    M_s = np.zeros((sections, 6, 6))
    for s in range(sections):
        C = np.array([[0.0, -c[s, 2], c[s, 1]], [c[s, 2], 0.0, -c[s, 0]], [-c[s, 1], c[s, 0], 0.0]])
        M_s[s, :3, :3] = m[s] * np.eye(3)
        M_s[s, :3, 3:] = -m[s] * C
        M_s[s, 3:, :3] = m[s] * C
        M_s[s, 3:, 3:] = np.diag(inertia[s]) - m[s] * (C @ C)
    # K_e: EI phi'' phi'' per bending plane (the curvature is d(Phi_r)/dX), GJ phi_t' phi_t' for torsion.
    nodes_k, weights_k = np.polynomial.legendre.leggauss(max(STIFFNESS_QUADRATURE_POINTS, sections))
    Xk = 0.5 * length * (nodes_k + 1.0)
    wk = 0.5 * length * weights_k
    curvature = psi(Xk, 1)[:, 3:, :]                            # (n_k, 3, n_e): d(Phi_r)/dX
    stiffness = np.stack([prop(GJ, Xk), prop(EI_z, Xk), prop(EI_y, Xk)], axis=1)   # about e1, e2, e3
    K = np.einsum("k,kai,ka,kaj->ij", wk, curvature, stiffness, curvature)
    K = 0.5 * (K + K.T)
    return ModalBody(length=float(length), X=X, w=w, Psi=psi(X), M_s=M_s, K=K, D=damping_ratio * K,
                     field=lambda x: psi(np.asarray(x, dtype=float)), mode_names=names)


@dataclass(frozen=True)
class FlexibleParts:
    """The modal bodies of a model (``Model.flexible``): ``bodies`` {body index: ModalBody}; ``attachments``
    {child body index: X_a (m)}: the section of its (modal) parent the child hangs on (a child of a modal body
    not listed hangs on the root section, X_a = 0)."""
    bodies: dict = field(default_factory=dict)
    attachments: dict = field(default_factory=dict)

    def check(self, model: Model) -> None:
        """ValueError naming the body when the parts do not fit the model's tree."""
        for j, body in self.bodies.items():
            if not (isinstance(j, (int, np.integer)) and 0 <= j < model.n_bodies):
                raise ValueError(f"flexible: body index {j!r} is not a body of the model (0..{model.n_bodies - 1})")
            if not isinstance(body, ModalBody):
                raise ValueError(f"flexible: body {model.body_names[j]!r}: {body!r} is not a ModalBody")
        for child, X_a in self.attachments.items():
            if not (isinstance(child, (int, np.integer)) and 1 <= child < model.n_bodies):
                raise ValueError(f"flexible: attachment of {child!r}: not a child body of the model")
            parent = int(model.parent[child])
            if parent not in self.bodies:
                raise ValueError(f"flexible: body {model.body_names[child]!r} is attached at a section but its "
                                 f"parent {model.body_names[parent]!r} is not a modal body")
            length = self.bodies[parent].length
            if not 0.0 <= X_a <= length:
                raise ValueError(f"flexible: body {model.body_names[child]!r} attached at X = {X_a} m, outside "
                                 f"[0, {length}] of {model.body_names[parent]!r}")


# ----------------------------------------------------------------------------------------- workspace
class FlexData(Data):
    """:class:`sim.model.Data` plus the modal bodies' arrays (per modal body j, dicts by body index):
    ``qe``, ``qed``, ``qedd`` (n_e total,) modal coordinates, rates, accelerations (body order, each body's
    modes contiguous, ``offset[j]`` its first); ``g_sec[j]`` (n_s, 4, 4) world poses and ``eta_sec[j]`` (n_s, 6)
    twists of the sections; ``f_sec[j]`` (n_s, 6) and ``M_sec[j]`` (n_s, 6, 6) the force plug-ins' wrench and
    added-inertia densities (zeroed before they run)."""

    def __init__(self, model: Model):
        super().__init__(model)
        parts = model.flexible
        bodies = {} if parts is None else parts.bodies
        offset, start = {}, 0
        for j in sorted(bodies):
            offset[j] = start
            start += bodies[j].n_e
        extra = dict(offset=offset, n_e=start, qe=np.zeros(start), qed=np.zeros(start), qedd=np.zeros(start),
                     g_sec={j: np.zeros((b.n_s, 4, 4)) for j, b in bodies.items()},
                     eta_sec={j: np.zeros((b.n_s, 6)) for j, b in bodies.items()},
                     f_sec={j: np.zeros((b.n_s, 6)) for j, b in bodies.items()},
                     M_sec={j: np.zeros((b.n_s, 6, 6)) for j, b in bodies.items()})
        for name, value in extra.items():
            object.__setattr__(self, name, value)


# ----------------------------------------------------------------------------------------- Lie algebra
def _hat3(v: np.ndarray) -> np.ndarray:
    """Skew matrices (..., 3, 3) of vectors (..., 3)."""
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def _exp_so3(w: np.ndarray) -> np.ndarray:
    """Rodrigues (..., 3, 3) of rotation vectors (..., 3) (series below the small-angle bound)."""
    theta2 = np.einsum("...a,...a->...", w, w)
    theta = np.sqrt(theta2)
    small = theta < SMALL_ROTATION
    safe = np.where(small, 1.0, theta)
    a = np.where(small, 1.0 - theta2 / 6.0, np.sin(safe) / safe)
    b = np.where(small, 0.5 - theta2 / 24.0, (1.0 - np.cos(safe)) / (safe * safe))
    W = _hat3(w)
    return np.eye(3) + a[..., None, None] * W + b[..., None, None] * (W @ W)


#: Below this rotation (rad) Rodrigues' coefficients are taken from their series (sin x / x to O(x^4): exact in
#: double precision there, and no 0/0).
SMALL_ROTATION = 1e-4


def _ad_inv_many(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ad_{G^-1} (..., 6, 6) = [[R^T, -R^T hat(p)], [0, R^T]] of poses G = (R (..., 3, 3), p (..., 3))."""
    Rt = np.swapaxes(R, -1, -2)
    out = np.zeros(R.shape[:-2] + (6, 6))
    out[..., :3, :3] = Rt
    out[..., 3:, 3:] = Rt
    out[..., :3, 3:] = -Rt @ _hat3(p)
    return out


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b (..., 3) (np.cross's axis handling costs more than the product for these small arrays)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def _ad(eta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ad_eta x (..., 6) = (Omega x x_v + V x x_w, Omega x x_w)."""
    V, W = eta[..., :3], eta[..., 3:]
    return np.concatenate([_cross(W, x[..., :3]) + _cross(V, x[..., 3:]), _cross(W, x[..., 3:])], axis=-1)


def _minus_coad(eta: np.ndarray, P: np.ndarray) -> np.ndarray:
    """-ad^T_eta P (..., 6) = (Omega x P_f, V x P_f + Omega x P_m) for a momentum-like wrench P (..., 6)."""
    V, W = eta[..., :3], eta[..., 3:]
    return np.concatenate([_cross(W, P[..., :3]), _cross(V, P[..., :3]) + _cross(W, P[..., 3:])], axis=-1)


def _nu(eta_s: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Velocity-product acceleration of a section (..., 6): ad_{eta_s} xi - blkdiag(hat w, hat w) xi, where
    xi = J q_d (..., 6) is its twist relative to the floating frame and w = xi's angular part."""
    w = xi[..., 3:]
    return _ad(eta_s, xi) - np.concatenate([_cross(w, xi[..., :3]), _cross(w, xi[..., 3:])], axis=-1)


def section_poses(X, Psi: np.ndarray, qe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R (..., 3, 3), p (..., 3)) of the sections at X (...) (m) whose field is Psi (..., 6, n_e), in the
    floating frame, for modal coordinates qe (n_e,)."""
    u = Psi @ qe
    R = _exp_so3(u[..., 3:])
    p = u[..., :3].copy()
    p[..., 0] += X
    return R, p


def _section_jacobian(R: np.ndarray, Psi: np.ndarray) -> np.ndarray:
    """J = blkdiag(R^T, R^T) Psi (..., 6, n_e): modal rates -> section twist in the section frame."""
    Rt = np.swapaxes(R, -1, -2)
    return np.concatenate([Rt @ Psi[..., :3, :], Rt @ Psi[..., 3:, :]], axis=-2)


# ----------------------------------------------------------------------------------------- the recursions
@dataclass
class _Tree:
    """Per-model constants of the recursion: the rest pose of each child in its attachment section's frame
    (``placement`` (N+1, 4, 4)), its section X_a, and the attachment field Psi(X_a) (6, n_e of the parent)."""
    placement: np.ndarray
    X_a: np.ndarray
    psi_a: dict


_TREES: dict = {}


def _tree(model: Model) -> _Tree:
    key = id(model)
    cached = _TREES.get(key)
    if cached is not None and cached[0] is model:
        return cached[1]
    parts = model.flexible
    placement = np.array(model.joint_placement)
    X_a = np.zeros(model.n_bodies)
    psi_a = {}
    for j in range(1, model.n_bodies):
        i = int(model.parent[j])
        if i in parts.bodies:
            X_a[j] = float(parts.attachments.get(j, 0.0))
            placement[j, 0, 3] -= X_a[j]   # rest section frame = floating frame translated by X_a e1
            psi_a[j] = np.asarray(parts.bodies[i].field(X_a[j]), dtype=float)
    tree = _Tree(placement, X_a, psi_a)
    _TREES[key] = (model, tree)
    return tree


def flexible_step(model: Model, data: FlexData, t: float, base_pose, base_twist, q, qd, qe, qed, qdd_actuated,
                  tau_passive, *, base_acc=None, use_laws: bool = True) -> FlexData:
    """One evaluation of the hybrid algorithm with modal bodies, in place on ``data`` (module docstring).

    Inputs as :func:`sim.dynamics.hybrid_step`, plus ``qe``, ``qed`` (n_e total,) the modal coordinates and
    rates (``data.offset[j]``: body j's first). Results: ``data.base_acc``, ``data.qdd``, ``data.tau``,
    ``data.base_wrench``, ``data.qedd`` (n_e,), ``data.eta_d`` (N+1, 6) floating-frame accelerations;
    ``data.f_ext[j]`` of a modal body ends holding its sections' wrench densities integrated too (floating frame,
    for the outputs' ``ext_wrench``).
    """
    parts = model.flexible
    bodies = parts.bodies
    tree = _tree(model)
    nb, n = model.n_bodies, model.n
    data.t = t
    data.q[:] = q
    data.qd[:] = qd
    data.qe[:] = qe
    data.qed[:] = qed
    data.base_pose[:] = base_pose
    mode = model._mode_code
    data.base_twist[:] = 0.0 if mode == 1 else base_twist
    tau = np.zeros(n)
    tau[:] = tau_passive
    if use_laws:
        for k, law in model.python_laws:
            tau[k] += law.torque(t, q[k], qd[k])
    axis = model.joint_axis

    def modal(j):
        o = data.offset[j]
        return slice(o, o + bodies[j].n_e)

    # ---- forward 1: poses, twists, velocity products (children hang on their parent's section G_a)
    g, eta = data.g, data.eta
    Ad = np.zeros((nb, 6, 6))                        # Ad_{(G_a P E)^-1}: parent floating frame -> child frame
    S = [None] * nb                                  # B J_a (6, n_e parent): parent modal rates -> child twist
    nu = np.zeros((nb, 6))                           # velocity-product acceleration of the child's frame
    g[0] = base_pose
    eta[0] = data.base_twist
    PE = np.zeros((4, 4))
    B = np.zeros((6, 6))
    sec = {}
    for j in range(nb):
        if j > 0:
            i = int(model.parent[j])
            k = j - 1
            _joint_pose(tree.placement[j], axis[j], q[k], PE)
            _ad_inv(PE, B)
            if i in bodies:
                R_a, p_a = section_poses(tree.X_a[j], tree.psi_a[j], qe[modal(i)])
                G_a = np.eye(4)
                G_a[:3, :3], G_a[:3, 3] = R_a, p_a
                A_a = _ad_inv_many(R_a, p_a)
                J_a = _section_jacobian(R_a, tree.psi_a[j])
                xi = J_a @ qed[modal(i)]
                eta_a = A_a @ eta[i] + xi
                Ad[j] = B @ A_a
                S[j] = B @ J_a
                nu_a = B @ _nu(eta_a, xi)
                g[j] = g[i] @ G_a @ PE
            else:
                eta_a, nu_a = eta[i], 0.0
                Ad[j] = B
                g[j] = g[i] @ PE
            data.Xj[j] = PE
            data.AdJ[j] = Ad[j]
            rd = axis[j] * qd[k]
            eta[j] = B @ eta_a + rd
            nu[j] = nu_a + _ad(eta[j], rd)
            data.zeta[j] = nu[j]
        if j in bodies:
            body = bodies[j]
            R, p = section_poses(body.X, body.Psi, qe[modal(j)])
            A = _ad_inv_many(R, p)                               # (n_s, 6, 6)
            J = _section_jacobian(R, body.Psi)                       # (n_s, 6, n_e)
            xi = J @ qed[modal(j)]
            eta_s = A @ eta[j] + xi
            sec[j] = (R, A, J, eta_s, _nu(eta_s, xi))
            data.g_sec[j][:, :3, :3] = g[j, :3, :3] @ R
            data.g_sec[j][:, :3, 3] = p @ g[j, :3, :3].T + g[j, :3, 3]
            data.g_sec[j][:, 3, 3] = 1.0
            data.eta_sec[j][:] = eta_s

    # ---- force models (rigid wrenches on the frames, densities on the sections)
    data.f_ext.fill(0.0)
    data.f_gravity.fill(0.0)
    data.M_added.fill(0.0)
    for j in bodies:
        data.f_sec[j].fill(0.0)
        data.M_sec[j].fill(0.0)
    for force_model in model.force_models:
        force_model.apply(model, data, t)

    # ---- body sums: M*, Pi* (floating frame), C*, E*, Pe* (modes)
    gravity = model.gravity
    Mstar, Pistar = data.Mstar, data.Pistar
    C, E, Pe = {}, {}, {}
    for j in range(nb):
        M = model.inertia[j] + data.M_added[j]
        Mstar[j] = M
        Pistar[j] = _minus_coad(eta[j], M @ eta[j]) - data.f_ext[j] - data.f_gravity[j]
        Pistar[j] -= model.inertia[j][:, :3] @ (g[j, :3, :3].T @ gravity)
        if j in bodies:
            body = bodies[j]
            R, A, J, eta_s, nu_s = sec[j]
            M_s = body.M_s + data.M_sec[j]
            g_sec = np.einsum("sba,b->sa", data.g_sec[j][:, :3, :3], gravity)     # R_ws^T g
            F = data.f_sec[j] + np.einsum("sab,sb->sa", body.M_s[:, :, :3], g_sec)
            h = (np.einsum("sab,sb->sa", M_s, nu_s) + _minus_coad(eta_s, np.einsum("sab,sb->sa", M_s, eta_s)) - F)
            MA = M_s @ A
            wA = body.w[:, None, None] * A
            wJ = body.w[:, None, None] * J
            Mstar[j] += np.einsum("sca,scb->ab", wA, MA)
            Pistar[j] += np.einsum("sca,sc->a", wA, h)
            C[j] = np.einsum("sci,scb->ib", wJ, MA)
            E[j] = np.einsum("sci,scd,sdk->ik", wJ, M_s, J)
            Pe[j] = np.einsum("sci,sc->i", wJ, h) + body.K @ qe[modal(j)] + body.D @ qed[modal(j)]

    # ---- passive torques, backward recursion (condensing the modes)
    actuated = model.actuated
    qdd, qedd = data.qdd, data.qedd
    for k in range(n):
        if actuated[k]:
            qdd[k] = qdd_actuated[k]
        elif use_laws:
            tau[k] += -model.law_k[k] * (q[k] - model.law_r0[k]) - model.law_mu[k] * qd[k]
    Mt = np.zeros((nb, 6, 6))
    Pt = np.zeros((nb, 6))
    H = data.H
    Einv_C, Einv_P = {}, {}

    def condense(j):
        if j in bodies and bodies[j].n_e > 0:
            Einv_C[j] = np.linalg.solve(E[j], C[j])
            Einv_P[j] = np.linalg.solve(E[j], Pe[j])
            Mt[j] = Mstar[j] - C[j].T @ Einv_C[j]
            Mt[j] = 0.5 * (Mt[j] + Mt[j].T)
            Pt[j] = Pistar[j] - C[j].T @ Einv_P[j]
        else:
            Mt[j], Pt[j] = Mstar[j], Pistar[j]

    for j in range(nb - 1, 0, -1):
        condense(j)
        i = int(model.parent[j])
        k = j - 1
        Aj = axis[j]
        if actuated[k]:
            K = Mt[j]
            alpha = Pt[j] + Mt[j] @ (Aj * qdd[k] + nu[j])
        else:
            MA = Mt[j] @ Aj
            H[j] = Aj @ MA
            K = Mt[j] - np.outer(MA, MA) / H[j]
            alpha = K @ nu[j] + MA * (tau[k] - Aj @ Pt[j]) / H[j] + Pt[j]
        KAd = K @ Ad[j]
        Mstar[i] += Ad[j].T @ KAd
        Pistar[i] += Ad[j].T @ alpha
        if i in bodies:
            C[i] += S[j].T @ KAd
            E[i] += S[j].T @ K @ S[j]
            Pe[i] += S[j].T @ alpha
    condense(0)

    # ---- root
    eta_d = data.eta_d
    if mode == 0:
        eta_d[0] = -np.linalg.solve(Mt[0], Pt[0])
        data.base_wrench[:] = 0.0
    else:
        eta_d[0] = 0.0 if mode == 1 else (model.base_motion.evaluate(t)[2] if base_acc is None else base_acc)
        data.base_wrench[:] = Mt[0] @ eta_d[0] + Pt[0]
    data.base_acc[:] = eta_d[0]
    if 0 in bodies and bodies[0].n_e > 0:
        qedd[modal(0)] = -(Einv_C[0] @ eta_d[0] + Einv_P[0])

    # ---- forward 2
    for j in range(1, nb):
        i = int(model.parent[j])
        k = j - 1
        Aj = axis[j]
        mu = Ad[j] @ eta_d[i] + nu[j]
        if i in bodies:
            mu = mu + S[j] @ qedd[modal(i)]
        if actuated[k]:
            eta_d[j] = mu + Aj * qdd[k]
            tau[k] = Aj @ (Mt[j] @ eta_d[j] + Pt[j])
        else:
            qdd[k] = (tau[k] - Aj @ (Mt[j] @ mu + Pt[j])) / H[j]
            eta_d[j] = mu + Aj * qdd[k]
        if j in bodies and bodies[j].n_e > 0:
            qedd[modal(j)] = -(Einv_C[j] @ eta_d[j] + Einv_P[j])
    data.tau[:] = tau
    # The outputs' ext_wrench sums data.f_ext: the sections' force densities join it now, moved to the floating
    # frame (after the recursions, which took them per section).
    for j in bodies:
        data.f_ext[j] += np.einsum("s,sca,sc->a", bodies[j].w, sec[j][1], data.f_sec[j])
    return data


def modal_energy(model: Model, data: FlexData) -> tuple[float, float]:
    """(kinetic energy J of the modal bodies' distributed mass, modal strain energy J) at the last evaluation:
    ``sum_s w eta_s^T M_s eta_s / 2`` and ``q_e^T K_e q_e / 2`` (the rigid inertias' share: sim.dynamics)."""
    kinetic, strain = 0.0, 0.0
    for j, body in model.flexible.bodies.items():
        eta_s = data.eta_sec[j]
        kinetic += 0.5 * float(np.einsum("s,sa,sab,sb->", body.w, eta_s, body.M_s, eta_s))
        o = data.offset[j]
        qe = data.qe[o:o + body.n_e]
        strain += 0.5 * float(qe @ body.K @ qe)
    return kinetic, strain


def modal_gravity_energy(model: Model, data: FlexData) -> float:
    """Gravity potential energy (J) of the modal bodies' distributed mass: ``-sum_s w m_s g . x_Gs``."""
    total = 0.0
    for j, body in model.flexible.bodies.items():
        m = body.M_s[:, 0, 0]
        c = np.stack([body.M_s[:, 5, 1], body.M_s[:, 3, 2], body.M_s[:, 4, 0]], axis=1)   # m c, section frame
        gs = data.g_sec[j]
        x = m[:, None] * gs[:, :3, 3] + np.einsum("sab,sb->sa", gs[:, :3, :3], c)
        total -= float(body.w @ (x @ model.gravity))
    return total


def modal_momentum_world(model: Model, data: FlexData) -> np.ndarray:
    """Momentum (6,) (linear kg m/s, angular about the world origin kg m^2/s, world frame) of the modal bodies'
    distributed mass at the last evaluation (add sim.dynamics.momentum_world for the rigid inertias)."""
    total = np.zeros(6)
    for j, body in model.flexible.bodies.items():
        h = np.einsum("sab,sb->sa", body.M_s, data.eta_sec[j]) * body.w[:, None]
        R, p = data.g_sec[j][:, :3, :3], data.g_sec[j][:, :3, 3]
        lin = np.einsum("sab,sb->sa", R, h[:, :3])
        ang = np.einsum("sab,sb->sa", R, h[:, 3:]) + _cross(p, lin)
        total += np.concatenate([lin.sum(0), ang.sum(0)])
    return total
