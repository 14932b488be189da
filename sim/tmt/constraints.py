"""Constraints and impacts on the TMT equations (docs/tmt.md, "Constraints and impacts").

A fixed-base tree (its coordinates q are the joint positions, u = q_dot) with m holonomic constraints
c(q, t) = 0 of Jacobian T_c = dc/dq:

    [[M, -T_c^T], [T_c, 0]] [u_dot; lambda] = [d; -gamma - 2 omega_b c_dot - omega_b^2 c]

where gamma = T_c_dot u + 2 (dT_c/dt) u + d2c/dt2 (the terms of c_ddot without u_dot), omega_b the Baumgarte
frequency (0: none) and T_c^T lambda the constraint forces in generalised coordinates (lambda: for a point
pinned to the world, the world force on that point; for a rheonomic joint constraint, the actuator torque).
:func:`project` pulls a state back onto c = 0 and c_dot = 0 (Gauss-Newton with the pseudo-inverse).

An impact with new contact rows T_r (normal last) while the constraints T_c persist:

    [[M, -T_c^T, -T_r^T], [T_c, 0, 0], [T_r, 0, 0]] [u+; P_lambda; P] = [M u-; -dc/dt; -E T_r u-]

with E = diag(restitution) (0: plastic, sticking). :func:`impact` returns u+, the impulses and the kinetic energy
change, and flags what a physical impact cannot do (a negative normal impulse, an energy gain).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..model import Model
from ..spatial import hat
from .engine import TreeKinematics, cross, mass_matrix_and_bias, tree_kinematics

#: Default Baumgarte frequency (1/s, or per unit of non-dimensional time): errors decay as t exp(-omega_b t).
BAUMGARTE_OMEGA = 10.0
#: Projection stops when |c| (max-norm, the constraint's units) is below this.
PROJECTION_TOLERANCE = 1e-12
#: Projection gives up after this many Gauss-Newton steps (it converges quadratically near c = 0).
PROJECTION_STEPS = 20
#: Impacts: an energy gain above this fraction of the kinetic energy before is flagged (rounding stays ~1e-15).
ENERGY_GAIN_TOLERANCE = 1e-12


@dataclass(frozen=True)
class PointOnBody:
    """A point fixed on body ``body`` at ``offset`` (3,) m in the body's frame."""

    body: int
    offset: np.ndarray


def point_kinematics(kin: TreeKinematics, point: PointOnBody, u: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """World position (3,) m, Jacobian T_p (3, n_u) and convective acceleration T_p_dot u (3,) of a point."""
    j = point.body
    rho = kin.R[j] @ np.asarray(point.offset, dtype=float)
    position = kin.origin[j] + rho
    jacobian = kin.T_origin[j, :3] - hat(rho) @ kin.T_origin[j, 3:]
    omega = kin.omega[j]
    convective = kin.acc_origin[j] + cross(kin.alpha[j], rho) + cross(omega, cross(omega, rho))
    return position, jacobian, convective


#: A constraint set: (model, kinematics, q, u, t) -> (c (m,), T_c (m, n), gamma (m,), dc/dt (m,)).
ConstraintSet = Callable[[Model, TreeKinematics, np.ndarray, np.ndarray, float],
                         tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


def pinned_points(points: list[tuple[PointOnBody, np.ndarray]], axes: tuple[int, ...] = (0, 1, 2)) -> ConstraintSet:
    """Points held at world positions (3,) m along the world ``axes``: c = p(q) - p_world (scleronomic)."""
    rows = list(axes)

    def constraints(model, kin, q, u, t):
        values, jacobians, gammas = [], [], []
        for point, target in points:
            position, jacobian, convective = point_kinematics(kin, point, u)
            values.append((position - target)[rows])
            jacobians.append(jacobian[rows])
            gammas.append(convective[rows])
        m = len(rows) * len(points)
        return (np.concatenate(values) if values else np.zeros(0),
                np.vstack(jacobians) if jacobians else np.zeros((0, len(u))),
                np.concatenate(gammas) if gammas else np.zeros(0), np.zeros(m))

    return constraints


@dataclass
class ConstrainedResult:
    """``u_dot`` (n,), ``multipliers`` lambda (m,), ``constraint`` c (m,) and its rate (m,) at the state;
    ``rank`` of T_c (smaller than m: redundant constraints, solved by least squares)."""

    u_dot: np.ndarray
    multipliers: np.ndarray
    constraint: np.ndarray
    constraint_rate: np.ndarray
    rank: int


def _require_fixed(model: Model) -> None:
    if model.base_mode != "fixed":
        raise ValueError("constrained TMT: the tree's base must be fixed (model every free coordinate as a joint)")


def constrained_dynamics(model: Model, q: np.ndarray, u: np.ndarray, t: float, constraints: ConstraintSet, *,
                         tau: np.ndarray | None = None, use_laws: bool = True,
                         baumgarte: float = BAUMGARTE_OMEGA) -> ConstrainedResult:
    """u_dot and the multipliers of the constrained TMT equations (module docstring) at (q, u, t)."""
    _require_fixed(model)
    tau = np.zeros(model.n) if tau is None else np.asarray(tau, dtype=float)
    M, d, kin = mass_matrix_and_bias(model, model.base_pose, q, u, tau, use_laws=use_laws)
    c, Tc, gamma, c_t = constraints(model, kin, q, u, t)
    n, m = M.shape[0], c.size
    rate = Tc @ u + c_t
    A = np.zeros((n + m, n + m))
    A[:n, :n], A[:n, n:], A[n:, :n] = M, -Tc.T, Tc
    rhs = np.concatenate([d, -gamma - 2.0 * baumgarte * rate - baumgarte ** 2 * c])
    solution, _, rank, _ = np.linalg.lstsq(A, rhs, rcond=None)
    # with M positive definite on the constraints' null space, rank(A) = n + rank(T_c)
    return ConstrainedResult(u_dot=solution[:n], multipliers=solution[n:], constraint=c, constraint_rate=rate,
                             rank=int(rank) - n)


def project(model: Model, q: np.ndarray, u: np.ndarray, t: float, constraints: ConstraintSet
            ) -> tuple[np.ndarray, np.ndarray]:
    """(q, u) moved onto c = 0 (q -= T_c^+ c until |c| < PROJECTION_TOLERANCE) and c_dot = 0
    (u -= T_c^+ (T_c u + dc/dt)). Raises ValueError when the constraints cannot be met from q."""
    _require_fixed(model)
    q, u = np.array(q, dtype=float), np.array(u, dtype=float)
    for _ in range(PROJECTION_STEPS):
        kin = tree_kinematics(model, model.base_pose, q, u)
        c, Tc, _, _ = constraints(model, kin, q, u, t)
        if c.size == 0 or np.abs(c).max() < PROJECTION_TOLERANCE:
            break
        q -= np.linalg.pinv(Tc) @ c
    else:
        raise ValueError(f"projection: the constraints are not met after {PROJECTION_STEPS} steps "
                         f"(|c| = {np.abs(c).max():.3g}): no configuration closes from this one")
    kin = tree_kinematics(model, model.base_pose, q, u)
    c, Tc, _, c_t = constraints(model, kin, q, u, t)
    if c.size:
        u -= np.linalg.pinv(Tc) @ (Tc @ u + c_t)
    return q, u


@dataclass
class ImpactResult:
    """``u_after`` (n,); ``impulse`` P (k,) of the new contact rows (normal last per contact) and
    ``persistent_impulse`` (m,); ``energy_change`` (J) of the kinetic energy; ``flags``: what a physical impact
    should not do (negative normal impulse, energy gain)."""

    u_after: np.ndarray
    impulse: np.ndarray
    persistent_impulse: np.ndarray
    energy_change: float
    flags: list[str]


def impact(model: Model, q: np.ndarray, u_before: np.ndarray, contact_rows: np.ndarray, restitution: np.ndarray,
           persistent: np.ndarray | None = None, normal_rows: tuple[int, ...] = (-1,)) -> ImpactResult:
    """The impact equations (module docstring) at q: new contact rows T_r (k, n), E = diag(``restitution``) (k,),
    persistent constraint rows T_c (m, n) (scleronomic). ``normal_rows``: indices in T_r of the normal rows."""
    _require_fixed(model)
    u_before = np.asarray(u_before, dtype=float)
    M, _, _ = mass_matrix_and_bias(model, model.base_pose, q, u_before, np.zeros(model.n), use_laws=False)
    Tr = np.atleast_2d(np.asarray(contact_rows, dtype=float))
    Tc = np.zeros((0, M.shape[0])) if persistent is None else np.atleast_2d(np.asarray(persistent, dtype=float))
    n, m, k = M.shape[0], Tc.shape[0], Tr.shape[0]
    A = np.zeros((n + m + k, n + m + k))
    A[:n, :n] = M
    A[:n, n:n + m], A[n:n + m, :n] = -Tc.T, Tc
    A[:n, n + m:], A[n + m:, :n] = -Tr.T, Tr
    rhs = np.concatenate([M @ u_before, np.zeros(m), -np.asarray(restitution, dtype=float) * (Tr @ u_before)])
    solution = np.linalg.solve(A, rhs)
    u_after, persistent_impulse, impulse = solution[:n], solution[n:n + m], solution[n + m:]
    energy_before = 0.5 * float(u_before @ M @ u_before)
    energy_change = 0.5 * float(u_after @ M @ u_after) - energy_before
    flags = []
    if any(impulse[row] < 0.0 for row in normal_rows):
        flags.append(f"negative normal impulse {min(impulse[row] for row in normal_rows):.3g}")
    if energy_change > ENERGY_GAIN_TOLERANCE * max(energy_before, np.finfo(float).tiny):
        flags.append(f"kinetic energy gained {energy_change:.3g} J")
    return ImpactResult(u_after=u_after, impulse=impulse, persistent_impulse=persistent_impulse,
                        energy_change=energy_change, flags=flags)


def coincident_points(pairs: list[tuple[PointOnBody, PointOnBody]]) -> ConstraintSet:
    """Pairs of points held together (a cut spherical joint of a closed loop): c = p_A - p_B (3 rows per pair, m,
    world); the multipliers are the forces on A from B (N, world)."""

    def constraints(model, kin, q, u, t):
        values, jacobians, gammas = [], [], []
        for a, b in pairs:
            position_a, jacobian_a, convective_a = point_kinematics(kin, a, u)
            position_b, jacobian_b, convective_b = point_kinematics(kin, b, u)
            values.append(position_a - position_b)
            jacobians.append(jacobian_a - jacobian_b)
            gammas.append(convective_a - convective_b)
        return np.concatenate(values), np.vstack(jacobians), np.concatenate(gammas), np.zeros(3 * len(pairs))

    return constraints


def joint_trajectories(indices: list[int], trajectory: Callable[[float], tuple[np.ndarray, np.ndarray, np.ndarray]]
                       ) -> ConstraintSet:
    """Rheonomic constraints q[indices] = r(t), ``trajectory(t) -> (r, r_dot, r_ddot)`` (each (k,)): T_c rows e_k,
    dc/dt = -r_dot, gamma = -r_ddot; the multipliers are the torques (forces) that impose the motion."""

    def constraints(model, kin, q, u, t):
        r, r_dot, r_ddot = (np.asarray(v, dtype=float) for v in trajectory(t))
        rows = np.zeros((len(indices), len(u)))
        rows[np.arange(len(indices)), indices] = 1.0
        return q[indices] - r, rows, -r_ddot, -r_dot

    return constraints
