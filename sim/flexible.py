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

The recursions are compiled (numba, sim/flexible_kernels.py). :func:`flexible_step` calls them from Python with
the force models in between (``Simulation``'s Python-orchestrated path); the fused stepper (sim/fused.py) runs
the same kernels, with the force models' registered kernels, inside whole compiled RK4 / ROSW steps.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from .flexible_kernels import flex_backward, flex_forward
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

    def section_rows(self) -> dict[int, np.ndarray]:
        """{modal body index: the rows (n_s,) int64 of its sections in the packed section arrays} (bodies in
        index order, each body's sections contiguous: :func:`packed`, FlexData's ``sec``)."""
        rows, start = {}, 0
        for j in sorted(self.bodies):
            n_s = self.bodies[j].n_s
            rows[int(j)] = np.arange(start, start + n_s, dtype=np.int64)
            start += n_s
        return rows

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


# ----------------------------------------------------------------------------------------- packed form
class Packed(NamedTuple):
    """A model's modal bodies packed for the kernels (sim/flexible_kernels.py). Modal body m (0..n_m-1, in body
    order) is body ``bodies[m]``; ``modal_of`` (N+1,) its m or -1 (rigid); ``mode0`` (n_m + 1,) its modes'
    offset in q_e; ``sec0`` (n_m + 1,) its sections' offset; sections of all: ``X`` (n_S,) m, ``w`` (n_S,) m,
    ``Psi`` (n_S, 6, ne_max), ``Ms`` (n_S, 6, 6); ``K``, ``D`` (n_m, ne_max, ne_max) (zero-padded); per child of
    a modal body: ``Xa`` (N+1,) its section, ``psi_a`` (N+1, 6, ne_max) Psi there; ``placement`` (N+1, 4, 4):
    the model's joint placements, a modal body's children's in their attachment section's rest frame."""
    bodies: np.ndarray
    modal_of: np.ndarray
    mode0: np.ndarray
    sec0: np.ndarray
    X: np.ndarray
    w: np.ndarray
    Psi: np.ndarray
    Ms: np.ndarray
    K: np.ndarray
    D: np.ndarray
    Xa: np.ndarray
    psi_a: np.ndarray
    placement: np.ndarray


_PACKED: dict = {}


def packed(model: Model) -> Packed:
    """The :class:`Packed` form of ``model.flexible`` (computed once per model)."""
    cached = _PACKED.get(id(model))
    if cached is not None and cached[0] is model:
        return cached[1]
    parts = model.flexible
    order = sorted(parts.bodies)
    nb = model.n_bodies
    ne_max = max(1, max(parts.bodies[j].n_e for j in order))
    modal_of = np.full(nb, -1, dtype=np.int64)
    mode0, sec0 = np.zeros(len(order) + 1, dtype=np.int64), np.zeros(len(order) + 1, dtype=np.int64)
    K, D = np.zeros((len(order), ne_max, ne_max)), np.zeros((len(order), ne_max, ne_max))
    for m, j in enumerate(order):
        body = parts.bodies[j]
        modal_of[j] = m
        mode0[m + 1], sec0[m + 1] = mode0[m] + body.n_e, sec0[m] + body.n_s
        K[m, :body.n_e, :body.n_e], D[m, :body.n_e, :body.n_e] = body.K, body.D

    def pad(Psi):
        out = np.zeros(Psi.shape[:-1] + (ne_max,))
        out[..., :Psi.shape[-1]] = Psi
        return out

    placement = np.array(model.joint_placement)
    Xa, psi_a = np.zeros(nb), np.zeros((nb, 6, ne_max))
    for j in range(1, nb):
        i = int(model.parent[j])
        if i in parts.bodies:
            Xa[j] = float(parts.attachments.get(j, 0.0))
            placement[j, 0, 3] -= Xa[j]   # the rest section frame is the floating frame translated by X_a e1
            psi_a[j] = pad(np.asarray(parts.bodies[i].field(Xa[j]), dtype=float))
    bodies = [parts.bodies[j] for j in order]
    result = Packed(np.array(order, dtype=np.int64), modal_of, mode0, sec0, np.concatenate([b.X for b in bodies]),
                    np.concatenate([b.w for b in bodies]), np.concatenate([pad(b.Psi) for b in bodies]),
                    np.concatenate([b.M_s for b in bodies]), K, D, Xa, psi_a, placement)
    _PACKED[id(model)] = (model, result)
    return result


# ----------------------------------------------------------------------------------------- workspace
class FlexData(Data):
    """:class:`sim.model.Data` plus the modal bodies' arrays: ``qe``, ``qed``, ``qedd`` (n_e total,) modal
    coordinates, rates, accelerations (body order, each body's modes contiguous, ``offset[j]`` body j's first);
    per modal body j (dicts of views into the packed section arrays ``sec``): ``g_sec[j]`` (n_s, 4, 4) world poses
    and ``eta_sec[j]`` (n_s, 6) twists of the sections; ``f_sec[j]`` (n_s, 6) and ``M_sec[j]`` (n_s, 6, 6) the
    force plug-ins' wrench and added-inertia densities (zeroed before they run). ``work``: the kernels' other
    arrays (section Ad and Jacobians, velocity products, S_j, C*, E*, Pe*, condensed Mt, Pt, E*^-1 C*, E*^-1 Pe*)."""

    def __init__(self, model: Model):
        super().__init__(model)
        parts = model.flexible
        if parts is None:
            extra = dict(offset={}, n_e=0, qe=np.zeros(0), qed=np.zeros(0), qedd=np.zeros(0), g_sec={}, eta_sec={},
                         f_sec={}, M_sec={})
        else:
            pk = packed(model)
            n_S, ne_max, nb = pk.X.shape[0], pk.Psi.shape[2], model.n_bodies
            sec = dict(A=np.zeros((n_S, 6, 6)), J=np.zeros((n_S, 6, ne_max)), eta=np.zeros((n_S, 6)),
                       nu=np.zeros((n_S, 6)), g=np.zeros((n_S, 4, 4)), f=np.zeros((n_S, 6)), M=np.zeros((n_S, 6, 6)))
            work = dict(S=np.zeros((nb, 6, ne_max)), C=np.zeros((nb, ne_max, 6)), E=np.zeros((nb, ne_max, ne_max)),
                        Pe=np.zeros((nb, ne_max)), Mt=np.zeros((nb, 6, 6)), Pt=np.zeros((nb, 6)),
                        EinvC=np.zeros((nb, ne_max, 6)), EinvP=np.zeros((nb, ne_max)))
            views = {j: slice(pk.sec0[m], pk.sec0[m + 1]) for m, j in enumerate(pk.bodies)}
            n_e = int(pk.mode0[-1])
            extra = dict(offset={int(j): int(pk.mode0[m]) for m, j in enumerate(pk.bodies)}, n_e=n_e,
                         qe=np.zeros(n_e), qed=np.zeros(n_e), qedd=np.zeros(n_e), sec=sec, work=work,
                         g_sec={j: sec["g"][v] for j, v in views.items()},
                         eta_sec={j: sec["eta"][v] for j, v in views.items()},
                         f_sec={j: sec["f"][v] for j, v in views.items()},
                         M_sec={j: sec["M"][v] for j, v in views.items()})
        for name, value in extra.items():
            object.__setattr__(self, name, value)


# ----------------------------------------------------------------------------------------- one evaluation
def store_inputs(model: Model, data: FlexData, t, base_pose, base_twist, q, qd, qe, qed, tau_passive,
                 use_laws: bool) -> np.ndarray:
    """Copy an evaluation's inputs into ``data`` (a fixed base's twist held at zero); return the passive torques
    (n,): ``tau_passive`` plus the Python joint laws' when ``use_laws`` (the viscoelastic law is the kernel's)."""
    data.t = t
    data.q[:] = q
    data.qd[:] = qd
    data.qe[:] = qe
    data.qed[:] = qed
    data.base_pose[:] = base_pose
    data.base_twist[:] = 0.0 if model._mode_code == 1 else base_twist
    tau = np.array(tau_passive, dtype=float)
    if use_laws:
        for k, law in model.python_laws:
            tau[k] += law.torque(t, q[k], qd[k])
    return tau


def flexible_step(model: Model, data: FlexData, t: float, base_pose, base_twist, q, qd, qe, qed, qdd_actuated,
                  tau_passive, *, base_acc=None, use_laws: bool = True) -> FlexData:
    """One evaluation of the hybrid algorithm with modal bodies, in place on ``data`` (module docstring): the
    compiled first forward recursion, the force models (Python), the compiled rest (sim/flexible_kernels.py).

    Inputs as :func:`sim.dynamics.hybrid_step`, plus ``qe``, ``qed`` (n_e total,) the modal coordinates and
    rates (``data.offset[j]``: body j's first). Results: ``data.base_acc``, ``data.qdd``, ``data.tau``,
    ``data.base_wrench``, ``data.qedd`` (n_e,), ``data.eta_d`` (N+1, 6) floating-frame accelerations;
    ``data.f_ext[j]`` of a modal body ends holding its sections' wrench densities integrated too (floating frame,
    for the outputs' ``ext_wrench``).
    """
    pk = packed(model)
    sec, work = data.sec, data.work
    mode = model._mode_code
    tau = store_inputs(model, data, t, base_pose, base_twist, q, qd, qe, qed, tau_passive, use_laws)
    flex_forward(model.parent, model.joint_axis, pk.placement, pk.modal_of, pk.mode0, pk.sec0, pk.X, pk.Psi, pk.Xa,
                 pk.psi_a, data.q, data.qd, data.qe, data.qed, data.base_pose, data.base_twist, data.g, data.Xj,
                 data.AdJ, data.eta, data.zeta, work["S"], sec["A"], sec["J"], sec["eta"], sec["nu"], sec["g"])
    data.f_ext.fill(0.0)
    data.f_gravity.fill(0.0)
    data.M_added.fill(0.0)
    sec["f"].fill(0.0)
    sec["M"].fill(0.0)
    for force_model in model.force_models:
        force_model.apply(model, data, t)
    if mode == 2:
        acc_in = np.asarray(model.base_motion.evaluate(t)[2] if base_acc is None else base_acc, dtype=float)
    else:
        acc_in = np.zeros(6)
    flex_backward(model.parent, model.joint_axis, model.inertia, model.actuated, model.law_k, model.law_mu,
                  model.law_r0, pk.modal_of, pk.mode0, pk.sec0, pk.w, pk.Ms, pk.K, pk.D, model.gravity, mode, acc_in,
                  data.q, data.qd, data.qe, data.qed, np.ascontiguousarray(qdd_actuated, dtype=float), tau,
                  bool(use_laws), data.g, data.AdJ, data.eta, data.zeta, work["S"], data.f_ext, data.f_gravity,
                  data.M_added, sec["A"], sec["J"], sec["eta"], sec["nu"], sec["g"], sec["f"], sec["M"], data.Mstar,
                  data.Pistar, work["C"], work["E"], work["Pe"], work["Mt"], work["Pt"], work["EinvC"],
                  work["EinvP"], data.H, data.eta_d, data.qdd, data.tau, data.qedd, data.base_acc, data.base_wrench)
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
        ang = np.einsum("sab,sb->sa", R, h[:, 3:]) + np.cross(p, lin)
        total += np.concatenate([lin.sum(0), ang.sum(0)])
    return total
