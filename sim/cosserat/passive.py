"""The passive elastic rod (footnote 1 of Boyer et al. 2012): the strain is a state, not a law.

``Lam_c = H (xi - xi0)`` with ``H = diag(EA, kGA, kGA, GJ, EI_Y, EI_Z)`` (no damping); the free strain
components are expanded on Legendre polynomials of X, ``xi = xi0 + Phi(X) q`` (``modes`` per free component),
and the generalized coordinates q obey the weak form ``int Phi^T (Lam - Lam_c) dX = 0`` where ``Lam`` is Block 2
run from the tail (``Lam(l) = F+``); with a free head, the head's own equation ``Lam(0) + F- = 0`` (F- = 0) joins
them. Both are linear in the accelerations ``v_dot`` of ``v = (eta_o, q_dot)`` (free head) or ``v = q_dot``
(clamped head, pose ``g_o``).

Swapping the order of the two X-integrals (``int_0^l Phi^T Ad(k)^-T int_X^l ... = int_0^l J^T ...``) writes that
residual as ``J(l)^T F+ - int J^T (Mc etad - ad_eta^T Mc eta - Fb) dX - int Phi^T Lam_c dX`` with
``J(X) = d eta(X) / d v``: the head columns are ``Ad(k)`` and the strain columns the kinematics pass of a unit
``xi_t``. Its ``v_dot`` matrix is then the mass matrix ``M = int J^T Mc J dX`` (symmetric, positive definite: the
head block is Block 1's ``Mo``) and the rest ``Q`` comes from one kinematics pass; ``M v_dot = Q`` is solved and the
state advances by RK4 (the head pose as position + unit quaternion). The section twists are the exact time
derivatives of the Magnus poses (:func:`section_kinematics`), so the discrete rod is a chain of rigid sections and
conserves momentum and energy up to RK4's error. :func:`weak_residual` of :func:`tail_wrench` is the residual in its
Block 2 form (the paper's; it agrees to O(h^4)), kept for the internal wrench and as the check of the identity.
Statics: ``Q = 0`` at rest, solved by ``scipy.optimize.root``.

``compiled=True`` (the default of :func:`run` and :func:`generalized_accelerations`) evaluates ``M``, ``Q`` and the
solve in sim/cosserat/passive_kernels.py (the same arithmetic; ``run`` then takes the RK4 steps between two records
in one compiled call); ``compiled=False`` runs the Python functions here, the reference.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from numpy.polynomial import legendre

from . import lie, passive_kernels
from .algorithms import _packed, pose_rate, pose_to_state, rk4, state_to_pose
from .rod import MAGNUS_NODES, Nodes, Rod, build_nodes, cumulative_simpson, distributed_load
from .strains import REFERENCE_STRAIN, TABLE_I, StrainField

#: Relative tolerance of the static solve (on q's steps and on the residual relative to the unloaded rod's):
#: rounding of the weak residual is ~1e-15 of the load, so 1e-12 is reachable and far below any check's band.
STATIC_TOLERANCE = 1e-12
#: Length of the head pose in the state vector: position (3) m and unit quaternion (w, x, y, z) (4).
POSE_SIZE = 7


@dataclass(frozen=True)
class PassiveRod:
    """rod: geometry and inertia; H (6,) section stiffness (N, N, N, N m^2, N m^2, N m^2); free: the elastic
    strain components (indices into xi; the others stay at the reference); modes: Legendre polynomials per free
    component; tip_force (3,) N, a dead load in world axes at X = l; g_o (4, 4) the clamp's world pose (the
    initial head pose of a free head); free_head: the head is a free body (6 more DOF) instead of clamped."""
    rod: Rod
    H: np.ndarray
    free: tuple[int, ...]
    modes: int = 4
    tip_force: np.ndarray = field(default_factory=lambda: np.zeros(3))
    g_o: np.ndarray = field(default_factory=lambda: np.eye(4))
    free_head: bool = False

    @property
    def n_q(self) -> int:
        return len(self.free) * self.modes

    @property
    def n_v(self) -> int:
        """Velocities: the head twist eta_o (6, free head only) then q_dot (n_q)."""
        return self.n_q + (6 if self.free_head else 0)


def round_section_stiffness(radius: float, E: float, G: float, shear_factor: float) -> np.ndarray:
    """H (6,) of a round section: ``(EA, kGA, kGA, G J, E I, E I)``, ``J = 2 I``, ``I = pi r^4 / 4``."""
    A, I = np.pi * radius ** 2, np.pi * radius ** 4 / 4.0
    return np.array([E * A, shear_factor * G * A, shear_factor * G * A, 2.0 * G * I, E * I, E * I])


def basis(model: PassiveRod, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phi (N, 6, n_q) and dPhi/dX (N, 6, n_q) at X (N,) m: Legendre P_j(2X/l - 1) per free component
    (read-only: the tables are cached, a step evaluates them on the same few grids thousands of times)."""
    X = np.ascontiguousarray(X, dtype=float)
    return _legendre_tables(model.free, model.modes, model.rod.length, X.tobytes())


@functools.lru_cache(maxsize=64)
def _legendre_tables(free: tuple[int, ...], m: int, length: float, X_bytes: bytes) -> tuple[np.ndarray, np.ndarray]:
    X = np.frombuffer(X_bytes, dtype=float)
    V = legendre.legvander(2.0 * X / length - 1.0, m - 1)                      # (N, m): P_j at X
    D = np.zeros((m, m))                                                       # d/ds of P_j in the P basis
    D[:m - 1] = legendre.legder(np.eye(m), axis=0)[:m - 1]
    Phi = np.zeros((X.size, 6, len(free) * m))
    Phi_X = np.zeros_like(Phi)
    for c, component in enumerate(free):
        Phi[:, component, c * m:(c + 1) * m] = V
        Phi_X[:, component, c * m:(c + 1) * m] = V @ D * (2.0 / length)
    Phi.flags.writeable = Phi_X.flags.writeable = False
    return Phi, Phi_X


def strain_field(model: PassiveRod, q, q_dot, q_ddot) -> StrainField:
    """The rod's strain field (case 1: all six components) at the generalized state."""
    q, q_dot, q_ddot = (np.asarray(v, dtype=float) for v in (q, q_dot, q_ddot))

    def law(X, t):
        Phi, Phi_X = basis(model, X)
        return REFERENCE_STRAIN + Phi @ q, Phi_X @ q, Phi @ q_dot, Phi @ q_ddot
    return StrainField(TABLE_I["reissner"], law)


def split_velocity(model: PassiveRod, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(eta_o (6,) head frame, q_dot (n_q,)) of the velocities v (n_v,); a clamped head has eta_o = 0."""
    v = np.asarray(v, dtype=float)
    return (v[:6], v[6:]) if model.free_head else (np.zeros(6), v)


def tip_force_at_tip(model: PassiveRod, nodes: Nodes, g_o: np.ndarray) -> np.ndarray:
    """F+ (6,) frame l: the world tip force in the tip section's axes (no moment)."""
    F_plus = np.zeros(6)
    F_plus[:3] = (g_o[:3, :3] @ nodes.g_rel[-1, :3, :3]).T @ model.tip_force
    return F_plus


def tail_wrench(model: PassiveRod, nodes: Nodes, eta: np.ndarray, etad: np.ndarray,
                g_o: np.ndarray | None = None) -> np.ndarray:
    """Block 2 from the tail: Lam (N, 6) frame X with ``Lam(l) = F+`` (the tip force in frame l) and (13), for
    the twists eta and accelerations etad (N, 6) frame X, head pose g_o (default: the model's)."""
    rod = model.rod
    g_o = model.g_o if g_o is None else g_o
    source = rod.Mc * etad - lie.mtv(lie.ad(eta), rod.Mc * eta) - distributed_load(rod, nodes, g_o)
    inside = cumulative_simpson(nodes, lie.mtv(nodes.Adk, source))
    L = nodes.Adk[-1].T @ tip_force_at_tip(model, nodes, g_o) - (inside[-1] - inside)
    return lie.mtv(nodes.Adk_inv, L)


def weak_residual(model: PassiveRod, nodes: Nodes, Phi: np.ndarray, Lam: np.ndarray) -> np.ndarray:
    """``int Phi^T (Lam - H (xi - xi0)) dX`` (n_q,) for Lam (N, 6) frame X and Phi (N, 6, n_q) at the nodes."""
    stress = Lam - model.H * (nodes.xi - REFERENCE_STRAIN)
    return cumulative_simpson(nodes, np.einsum("nij,ni->nj", Phi, stress))[-1]


def dexp_series(W: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ad_W`` (N, 6, 6) and the coefficients c_k = ``(-1)^k / (k+1)!`` of the right-trivialised tangent
    ``exp(W)^-1 d exp(W) = sum_k c_k ad_W^k dW`` for steps W (N, 6); the series stops when its next term's bound
    ``|ad_W|^k / (k+1)!`` (infinity norm) is below double rounding."""
    adW = lie.ad(W)
    radius = float(np.max(np.abs(adW).sum(axis=-1)))
    coefficients, k = [1.0], 0
    while radius ** (k + 1) / math.factorial(k + 2) > np.finfo(float).eps:
        k += 1
        coefficients.append((-1.0) ** k / math.factorial(k + 1))
    return adW, np.array(coefficients)


def dexp_matrix(adW: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``T = sum_k c_k ad_W^k`` (N, 6, 6) by Horner's rule."""
    T = np.broadcast_to(c[-1] * np.eye(6), adW.shape)
    for ck in c[-2::-1]:
        T = ck * np.eye(6) + adW @ T
    return T


def dexp_rate(adW: np.ndarray, c: np.ndarray, W_dot: np.ndarray) -> np.ndarray:
    """``(d/dt T) W_dot`` (N, 6) for ``T = sum_k c_k ad_W^k``: ``sum_k c_k sum_i ad_W^i ad_{W_dot} ad_W^(k-1-i)
    W_dot``, regrouped as ``sum_i ad_W^i s_i`` with ``s_i = sum_{j>=1} c_{i+1+j} ad_{W_dot} ad_W^j W_dot`` (the
    j = 0 terms end in ``ad_{W_dot} W_dot = 0``) and evaluated by Horner's rule."""
    K = c.size
    ad_W_dot = lie.ad(W_dot)
    powers = [W_dot]                                      # ad_W^j W_dot
    for _ in range(1, K - 1):
        powers.append(lie.mv(adW, powers[-1]))
    z = [None] + [lie.mv(ad_W_dot, y) for y in powers[1:]]
    s = [sum((c[i + 1 + j] * z[j] for j in range(1, K - 1 - i)), np.zeros_like(W_dot)) for i in range(K - 2)]
    out = np.zeros_like(W_dot)
    for si in reversed(s):
        out = si + lie.mv(adW, out)
    return out


@dataclass
class SectionKinematics:
    """Twists of the sections as the exact time derivatives of the Magnus poses (so the discrete rod is a chain of
    rigid sections and its momentum and energy are invariants of the semi-discrete equations): nodes (the X grid,
    strain at q, q_dot); J (N, 6, n_v) ``d eta / d v``, frame X; eta (N, 6) frame X (m/s, rad/s); zeta (N, 6) the
    acceleration at ``v_dot = 0``, frame X (m/s^2, rad/s^2); Phi (N, 6, n_q) the shape functions at the nodes."""
    nodes: Nodes
    J: np.ndarray
    eta: np.ndarray
    zeta: np.ndarray
    Phi: np.ndarray


def section_kinematics(model: PassiveRod, q: np.ndarray, v: np.ndarray) -> SectionKinematics:
    """Differentiate ``g_{j+1} = g_j exp(W_j)``, ``W_j = h/2 (xi1 + xi2) + sqrt(3) h^2/12 ad_xi1 xi2`` (Magnus-4,
    xi at the step's Gauss points, ``xi = xi0 + Phi q``) in time: ``eta_{j+1} = Ad(exp(-W_j)) eta_j + T_j W_dot_j``,
    ``T = dexp_{-W}``. In the head frame (``u = Ad(g_rel) eta``) the recursion is a sum,
    ``u_{j+1} = u_j + Ad(g_rel_{j+1}) T_j W_dot_j``, and its time derivative gives zeta with
    ``eta_dot = Ad(g_rel)^-1 u_dot - ad_{eta_rel} eta`` (``eta_rel = eta - Ad(k) eta_o``, the twist relative to the
    head)."""
    eta_o, q_dot = split_velocity(model, v)
    nodes = build_nodes(model.rod, strain_field(model, q, q_dot, np.zeros(model.n_q)), 0.0)
    X, h = nodes.X, np.diff(nodes.X)[:, None]
    Phi1, Phi2 = (basis(model, X[:-1] + c * h[:, 0])[0] for c in MAGNUS_NODES)
    xi1, xi2 = REFERENCE_STRAIN + Phi1 @ q, REFERENCE_STRAIN + Phi2 @ q
    rate1, rate2 = Phi1 @ q_dot, Phi2 @ q_dot
    magnus = np.sqrt(3.0) / 12.0 * h ** 2
    W = 0.5 * h * (xi1 + xi2) + magnus * lie.mv(lie.ad(xi1), xi2)
    B = 0.5 * h[:, :, None] * (Phi1 + Phi2) + magnus[:, :, None] * (lie.ad(xi1) @ Phi2 - lie.ad(xi2) @ Phi1)
    W_dot = lie.mv(B, q_dot)                                         # (N-1, 6): B = d W_dot / d q_dot
    adW, coefficients = dexp_series(W)
    T = dexp_matrix(adW, coefficients)
    T_dot_W_dot = dexp_rate(adW, coefficients, W_dot)
    to_head = nodes.Adk_inv[1:]                                      # Ad(g_rel_{j+1})
    zero = np.zeros((1, 6))
    u = eta_o + np.concatenate([zero, np.cumsum(lie.mv(to_head, lie.mv(T, W_dot)), axis=0)])
    eta = lie.mv(nodes.Adk, u)
    eta_rel = lie.mv(nodes.Adk, u - eta_o)
    W_ddot = 2.0 * magnus * lie.mv(lie.ad(rate1), rate2)            # the velocity part of W's second derivative
    growth = lie.mv(lie.ad(eta_rel[1:]), lie.mv(T, W_dot)) + T_dot_W_dot + lie.mv(T, W_ddot)
    u_dot = np.concatenate([zero, np.cumsum(lie.mv(to_head, growth), axis=0)])
    zeta = lie.mv(nodes.Adk, u_dot) - lie.mv(lie.ad(eta_rel), eta)
    J_strain = np.concatenate([np.zeros((1, 6, model.n_q)), np.cumsum(to_head @ T @ B, axis=0)])
    J = np.concatenate([np.broadcast_to(np.eye(6), nodes.Adk.shape), J_strain], axis=2) if model.free_head \
        else J_strain
    Phi, _ = basis(model, X)
    return SectionKinematics(nodes, nodes.Adk @ J, eta, zeta, Phi)


@dataclass
class Motion:
    """The rod's equations of motion ``M v_dot = Q`` at one instant: the section kinematics; M (n_v, n_v) kg,
    kg m, kg m^2 (per unit of the strain coordinates); Q (n_v,) the generalized force (N, N m, ... conjugate to
    v)."""
    kinematics: SectionKinematics
    M: np.ndarray
    Q: np.ndarray


def equations_of_motion(model: PassiveRod, q: np.ndarray, v: np.ndarray, g_o: np.ndarray | None = None) -> Motion:
    """``M = int J^T Mc J dX``, ``Q = J(l)^T F+ - int J^T (Mc zeta - ad_eta^T Mc eta - Fb) dX
    - int Phi^T H (xi - xi0) dX`` at (q (n_q,), v (n_v,)), head pose g_o (4, 4) world (default: the model's);
    the integrals by Simpson's rule on the nodes (so the rod is a chain of sections of weights w_j: its
    kinetic energy is ``1/2 v^T M v`` and ``Q`` holds the exact gradient of its elastic energy)."""
    rod, g_o = model.rod, model.g_o if g_o is None else g_o
    kin = section_kinematics(model, q, v)
    nodes, J, eta = kin.nodes, kin.J, kin.eta
    inertial = rod.Mc * kin.zeta - lie.mtv(lie.ad(eta), rod.Mc * eta) - distributed_load(rod, nodes, g_o)
    M = cumulative_simpson(nodes, np.einsum("nji,j,njk->nik", J, rod.Mc, J))[-1]
    Q = J[-1].T @ tip_force_at_tip(model, nodes, g_o) - cumulative_simpson(nodes, lie.mtv(J, inertial))[-1]
    Q[model.n_v - model.n_q:] += weak_residual(model, nodes, kin.Phi, np.zeros_like(eta))     # - int Phi^T Lam_c
    return Motion(kin, M, Q)


def kernel_model(model: PassiveRod) -> tuple:
    """The model as the compiled kernels take it (sim/cosserat/passive_kernels.py): l m, n_X, Mc (6,), gravity (3,)
    m/s^2, H (6,), free (F,) int64, modes, tip_force (3,) N, free_head."""
    rod = model.rod
    return (float(rod.length), int(rod.n_X), _packed(rod.Mc), _packed(rod.gravity), _packed(model.H),
            np.array(model.free, dtype=np.int64), int(model.modes), _packed(model.tip_force), bool(model.free_head))


def generalized_accelerations(model: PassiveRod, q: np.ndarray, v: np.ndarray, g_o: np.ndarray | None = None, *,
                              compiled: bool = True) -> np.ndarray:
    """v_dot (n_v,) at (q, v): ``M^-1 Q`` (``compiled``: M and Q from the compiled kernel)."""
    g_o = model.g_o if g_o is None else g_o
    if compiled:
        M, Q = passive_kernels.passive_motion(*kernel_model(model), _packed(g_o), _packed(q), _packed(v))
        return np.linalg.solve(M, Q)
    motion = equations_of_motion(model, q, v, g_o)
    return np.linalg.solve(motion.M, motion.Q)


def energy(model: PassiveRod, q: np.ndarray, v: np.ndarray, g_o: np.ndarray | None = None) -> tuple[float, float]:
    """(kinetic ``1/2 v^T M v = 1/2 int eta^T Mc eta``, elastic ``1/2 int (xi - xi0)^T H (xi - xi0)`` + gravity
    and tip-load potential) in J, at head pose g_o (default: the model's)."""
    g_o = model.g_o if g_o is None else g_o
    motion = equations_of_motion(model, q, v, g_o)
    nodes = motion.kinematics.nodes
    kinetic = 0.5 * float(np.asarray(v) @ motion.M @ np.asarray(v))
    strain = nodes.xi - REFERENCE_STRAIN
    elastic = 0.5 * cumulative_simpson(nodes, np.einsum("ni,i,ni->n", strain, model.H, strain))[-1]
    world = (g_o @ nodes.g_rel)[:, :3, 3]
    weight = -model.rod.Mc[0] * cumulative_simpson(nodes, world @ model.rod.gravity)[-1]
    return kinetic, float(elastic + weight - model.tip_force @ world[-1])


def world_momentum(model: PassiveRod, q: np.ndarray, v: np.ndarray, g_o: np.ndarray) -> np.ndarray:
    """The rod's momentum (6,) (kg m/s, kg m^2/s), world axes, about the world origin: ``Ad(g_o^-1)^T`` of the
    head-frame momentum ``int Ad(k)^T Mc eta dX`` (the head rows of ``M v``)."""
    kin = section_kinematics(model, q, v)
    head = cumulative_simpson(kin.nodes, lie.mtv(kin.nodes.Adk, model.rod.Mc * kin.eta))[-1]
    return lie.Ad_inv(g_o[None])[0].T @ head


def static_equilibrium(model: PassiveRod, q_guess=None) -> np.ndarray:
    """q (n_q,) of the clamped rod at rest under the loads: ``Q = 0`` at zero velocity, by scipy's root."""
    from scipy.optimize import root

    if model.free_head:
        raise ValueError("static_equilibrium: a free-head rod has no equilibrium under a load (it accelerates)")

    def residual(q):
        return equations_of_motion(model, q, np.zeros(model.n_v)).Q

    start = np.zeros(model.n_q) if q_guess is None else np.asarray(q_guess, dtype=float)
    solution = root(residual, start, method="hybr", tol=STATIC_TOLERANCE)
    load = max(float(np.max(np.abs(residual(np.zeros(model.n_q))))), np.finfo(float).tiny)
    if float(np.max(np.abs(solution.fun))) > STATIC_TOLERANCE * load:
        raise RuntimeError(f"static equilibrium not found: {solution.message}")
    return solution.x


def backbone(model: PassiveRod, q: np.ndarray, g_o: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(X (N,) m, world positions (N, 3) m) of the section centres at the coordinates q."""
    g_o = model.g_o if g_o is None else g_o
    nodes = build_nodes(model.rod, strain_field(model, q, np.zeros(model.n_q), np.zeros(model.n_q)), 0.0)
    return nodes.X, (g_o @ nodes.g_rel)[:, :3, 3]


def tip_position(model: PassiveRod, q: np.ndarray, g_o: np.ndarray | None = None) -> np.ndarray:
    """World position (3,) m of the tip at the generalized coordinates q."""
    return backbone(model, q, g_o)[1][-1]


@dataclass
class PassiveRun:
    """A run at the recorded times (T,) s: g_o (T, 4, 4) head pose, world; q (T, n_q); v (T, n_v)."""
    times: np.ndarray
    g_o: np.ndarray
    q: np.ndarray
    v: np.ndarray


def run(model: PassiveRod, q0: np.ndarray, duration: float, dt: float, record_every: int = 1,
        v0: np.ndarray | None = None, *, compiled: bool = True) -> PassiveRun:
    """RK4 on (head pose, q, v) from q0 (n_q,) and v0 (n_v,) (default rest), the head at ``model.g_o``; a clamped
    head's pose stays there (its rate is zero). Records every ``record_every`` steps (and the last);
    ``compiled``: the steps between two records in one compiled call (sim/cosserat/passive_kernels.py)."""
    n_q = model.n_q
    y = np.concatenate([pose_to_state(model.g_o), np.asarray(q0, dtype=float),
                        np.zeros(model.n_v) if v0 is None else np.asarray(v0, dtype=float)])
    steps = max(1, int(round(duration / dt)))
    if compiled:
        return _run_compiled(model, y, steps, float(dt), record_every)

    def rate(t, y):
        q, v = y[POSE_SIZE:POSE_SIZE + n_q], y[POSE_SIZE + n_q:]
        eta_o, q_dot = split_velocity(model, v)
        v_dot = generalized_accelerations(model, q, v, state_to_pose(y), compiled=False)
        return np.concatenate([pose_rate(y, eta_o), q_dot, v_dot])

    times, states = [0.0], [y.copy()]
    for k in range(steps):
        y = rk4(rate, k * dt, y, dt)
        if (k + 1) % record_every == 0 or k + 1 == steps:
            times.append((k + 1) * dt)
            states.append(y.copy())
    return _recorded(model, times, states)


def _run_compiled(model: PassiveRod, y: np.ndarray, steps: int, dt: float, record_every: int) -> PassiveRun:
    """:func:`run` through ``passive_kernels.passive_steps``: one call per stretch between two records."""
    arguments = kernel_model(model)
    times, states, done = [0.0], [y.copy()], 0
    while done < steps:
        count = min(record_every, steps - done)
        y = passive_kernels.passive_steps(*arguments, y, dt, count)
        done += count
        times.append(done * dt)
        states.append(y.copy())
    return _recorded(model, times, states)


def _recorded(model: PassiveRod, times: list[float], states: list[np.ndarray]) -> PassiveRun:
    """The run of the recorded times (s) and states (7 + n_q + n_v,)."""
    n_q = model.n_q
    states = np.array(states)
    poses = np.array([state_to_pose(s) for s in states])
    return PassiveRun(np.array(times), poses, states[:, POSE_SIZE:POSE_SIZE + n_q], states[:, POSE_SIZE + n_q:])
