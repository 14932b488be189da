"""The passive elastic rod (footnote 1 of Boyer et al. 2012): the strain is a state, not a law.

``Lam_c = H (xi - xi0)`` with ``H = diag(EA, kGA, kGA, GJ, EI_Y, EI_Z)`` (no damping); the free strain
components are expanded on Legendre polynomials of X, ``xi = xi0 + Phi(X) q`` (``modes`` per free component),
and the generalized coordinates q obey the weak form ``int Phi^T (Lam - Lam_c) dX = 0`` where ``Lam`` is Block 2
run from the tail (``Lam(l) = F+``). That residual is linear in ``q_ddot``: its matrix is built from unit
vectors and solved, and (q, q_dot) advance by RK4. The head is clamped (a cantilever, head pose ``g_o``).
Statics: the same residual at rest, solved by ``scipy.optimize.root``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numpy.polynomial import legendre

from . import kernels, lie
from .laws.legendre import legendre_params
from .rod import Nodes, Rod, accelerations, build_nodes, cumulative_simpson, distributed_load, twists
from .strains import REFERENCE_STRAIN, TABLE_I, StrainField


#: Relative tolerance of the static solve (on q's steps and on the residual relative to the unloaded rod's):
#: rounding of the weak residual is ~1e-15 of the load, so 1e-12 is reachable and far below any check's band.
STATIC_TOLERANCE = 1e-12


@dataclass(frozen=True)
class PassiveRod:
    """rod: geometry and inertia; H (6,) section stiffness (N, N, N, N m^2, N m^2, N m^2); free: the elastic
    strain components (indices into xi; the others stay at the reference); modes: Legendre polynomials per free
    component; tip_force (3,) N, a dead load in world axes at X = l; g_o (4, 4) the clamp's world pose."""
    rod: Rod
    H: np.ndarray
    free: tuple[int, ...]
    modes: int = 4
    tip_force: np.ndarray = field(default_factory=lambda: np.zeros(3))
    g_o: np.ndarray = field(default_factory=lambda: np.eye(4))

    @property
    def n_q(self) -> int:
        return len(self.free) * self.modes


def round_section_stiffness(radius: float, E: float, G: float, shear_factor: float) -> np.ndarray:
    """H (6,) of a round section: ``(EA, kGA, kGA, G J, E I, E I)``, ``J = 2 I``, ``I = pi r^4 / 4``."""
    A, I = np.pi * radius ** 2, np.pi * radius ** 4 / 4.0
    return np.array([E * A, shear_factor * G * A, shear_factor * G * A, 2.0 * G * I, E * I, E * I])


def basis(model: PassiveRod, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Phi (N, 6, n_q) and dPhi/dX (N, 6, n_q) at X (N,) m: Legendre P_j(2X/l - 1) per free component."""
    s = 2.0 * X / model.rod.length - 1.0
    Phi = np.zeros((X.size, 6, model.n_q))
    Phi_X = np.zeros_like(Phi)
    for c, component in enumerate(model.free):
        for j in range(model.modes):
            coef = np.zeros(j + 1)
            coef[j] = 1.0
            Phi[:, component, c * model.modes + j] = legendre.legval(s, coef)
            Phi_X[:, component, c * model.modes + j] = legendre.legval(s, legendre.legder(coef)) * 2.0 / model.rod.length
    return Phi, Phi_X


def strain_field(model: PassiveRod, q, q_dot, q_ddot) -> StrainField:
    """The rod's strain field (case 1: all six components) at the generalized state."""
    q, q_dot, q_ddot = (np.asarray(v, dtype=float) for v in (q, q_dot, q_ddot))

    def law(X, t):
        Phi, Phi_X = basis(model, X)
        return REFERENCE_STRAIN + Phi @ q, Phi_X @ q, Phi @ q_dot, Phi @ q_ddot
    return StrainField(TABLE_I["reissner"], law)


def tail_wrench(model: PassiveRod, nodes: Nodes, eta: np.ndarray, etad: np.ndarray, loads: bool = True) -> np.ndarray:
    """Block 2 from the tail: Lam (N, 6) frame X with ``Lam(l) = F+`` (the tip force in frame l) and (13);
    ``loads=False``: inertia only (no gravity, no tip force), for the q_ddot matrix."""
    rod = model.rod
    Fb = distributed_load(rod, nodes, model.g_o) if loads else np.zeros_like(eta)
    source = rod.Mc * etad - lie.mtv(lie.ad(eta), rod.Mc * eta) - Fb
    inside = cumulative_simpson(nodes, lie.mtv(nodes.Adk, source))
    F_plus = np.zeros(6)
    if loads:
        R_l = model.g_o[:3, :3] @ nodes.g_rel[-1, :3, :3]
        F_plus[:3] = R_l.T @ model.tip_force
    L = nodes.Adk[-1].T @ F_plus - (inside[-1] - inside)
    return lie.mtv(nodes.Adk_inv, L)


def weak_residual(model: PassiveRod, nodes: Nodes, Phi: np.ndarray, Lam: np.ndarray, elastic: bool = True):
    """``int Phi^T (Lam - H (xi - xi0)) dX`` (n_q,)."""
    stress = Lam - (model.H * (nodes.xi - REFERENCE_STRAIN) if elastic else 0.0)
    return cumulative_simpson(nodes, np.einsum("nij,ni->nj", Phi, stress))[-1]


def accelerations_q(model: PassiveRod, q: np.ndarray, q_dot: np.ndarray, t: float = 0.0, *,
                    compiled: bool = False) -> np.ndarray:
    """q_ddot (n_q,) of the clamped rod at (q, q_dot): the weak form is ``r0 + A q_ddot = 0``. ``compiled``: the
    same recursions in one call of sim/cosserat/kernels.py (``passive_accelerations``)."""
    if compiled:
        rod = model.rod
        params = legendre_params(rod.length, model.modes, model.free, np.asarray(q, dtype=float),
                                 np.asarray(q_dot, dtype=float), np.zeros(model.n_q))
        return kernels.passive_accelerations(params, float(rod.length), int(rod.n_X), rod.Mc,
                                             np.ascontiguousarray(rod.gravity, dtype=float),
                                             np.ascontiguousarray(model.g_o, dtype=float), model.H,
                                             np.ascontiguousarray(model.tip_force, dtype=float),
                                             np.array(model.free, dtype=np.int64), int(model.modes), float(t))
    nodes = build_nodes(model.rod, strain_field(model, q, q_dot, np.zeros(model.n_q)), t)
    Phi, _ = basis(model, nodes.X)
    eta = twists(nodes, np.zeros(6))
    r0 = weak_residual(model, nodes, Phi, tail_wrench(model, nodes, eta, accelerations(nodes, eta, np.zeros(6))))
    A = np.empty((model.n_q, model.n_q))
    for k in range(model.n_q):
        unit = nodes.xi_tt
        nodes.xi_tt = Phi[:, :, k]
        # the part of etad that q_ddot_k adds (linear): the zeta of xi_tt = Phi_k with no velocity terms
        etad_k = accelerations(nodes, np.zeros_like(eta), np.zeros(6))
        nodes.xi_tt = unit
        A[:, k] = weak_residual(model, nodes, Phi, tail_wrench(model, nodes, np.zeros_like(eta), etad_k, False), False)
    return np.linalg.solve(A, -r0)


def energy(model: PassiveRod, q: np.ndarray, q_dot: np.ndarray) -> tuple[float, float]:
    """(kinetic ``1/2 int eta^T Mc eta``, elastic ``1/2 int (xi - xi0)^T H (xi - xi0)`` + gravity and tip-load
    potential) in J."""
    nodes = build_nodes(model.rod, strain_field(model, q, q_dot, np.zeros(model.n_q)), 0.0)
    eta = twists(nodes, np.zeros(6))
    kinetic = 0.5 * cumulative_simpson(nodes, np.einsum("ni,i,ni->n", eta, model.rod.Mc, eta))[-1]
    strain = nodes.xi - REFERENCE_STRAIN
    elastic = 0.5 * cumulative_simpson(nodes, np.einsum("ni,i,ni->n", strain, model.H, strain))[-1]
    world = (model.g_o @ nodes.g_rel)[:, :3, 3]
    weight = -model.rod.Mc[0] * cumulative_simpson(nodes, world @ model.rod.gravity)[-1]
    return float(kinetic), float(elastic + weight - model.tip_force @ world[-1])


def static_equilibrium(model: PassiveRod, q_guess=None) -> np.ndarray:
    """q (n_q,) at rest under the loads: the weak residual with zero velocity and acceleration, by scipy's root."""
    from scipy.optimize import root

    def residual(q):
        nodes = build_nodes(model.rod, strain_field(model, q, np.zeros(model.n_q), np.zeros(model.n_q)), 0.0)
        Phi, _ = basis(model, nodes.X)
        zero = np.zeros((nodes.X.size, 6))
        return weak_residual(model, nodes, Phi, tail_wrench(model, nodes, zero, zero))

    start = np.zeros(model.n_q) if q_guess is None else np.asarray(q_guess, dtype=float)
    solution = root(residual, start, method="hybr", tol=STATIC_TOLERANCE)
    load = max(float(np.max(np.abs(residual(np.zeros(model.n_q))))), np.finfo(float).tiny)
    if float(np.max(np.abs(solution.fun))) > STATIC_TOLERANCE * load:
        raise RuntimeError(f"static equilibrium not found: {solution.message}")
    return solution.x


def tip_position(model: PassiveRod, q: np.ndarray) -> np.ndarray:
    """World position (3,) m of the tip at the generalized coordinates q."""
    nodes = build_nodes(model.rod, strain_field(model, q, np.zeros(model.n_q), np.zeros(model.n_q)), 0.0)
    return (model.g_o @ nodes.g_rel[-1])[:3, 3]


def run(model: PassiveRod, q0: np.ndarray, duration: float, dt: float, record_every: int = 1, *,
        compiled: bool = False):
    """RK4 on (q, q_dot) from rest at q0: times (T,) s, q (T, n_q), q_dot (T, n_q). ``compiled``: each
    stage's q_ddot through sim/cosserat/kernels.py."""
    y = np.concatenate([np.asarray(q0, dtype=float), np.zeros(model.n_q)])
    n = model.n_q

    def rate(t, y):
        return np.concatenate([y[n:], accelerations_q(model, y[:n], y[n:], t, compiled=compiled)])

    steps = max(1, int(round(duration / dt)))
    times, states = [0.0], [y.copy()]
    for k in range(steps):
        t = k * dt
        k1 = rate(t, y)
        k2 = rate(t + dt / 2, y + dt / 2 * k1)
        k3 = rate(t + dt / 2, y + dt / 2 * k2)
        k4 = rate(t + dt, y + dt * k3)
        y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        if (k + 1) % record_every == 0 or k + 1 == steps:
            times.append((k + 1) * dt)
            states.append(y.copy())
    states = np.array(states)
    return np.array(times), states[:, :n], states[:, n:]
