"""The TMT (linear-vector Lagrange) equations of a tree Model: M(q) u_dot = d(q, u), O(n^3) (docs/tmt.md).

Sadati, Naghibi, Naraghi (IRIS 2015) build the equations of motion from the transformation matrix T = dx/dq
that maps the generalised velocities u to the bodies' Cartesian velocities x_dot = T u (per body i: the
centre of mass's velocity and the angular velocity, world axes):

    M = T^T M_x T,    d = T^T (f - M_x a_c) + Q,    M u_dot = d

with M_x = blockdiag(m_i 1, I_w,i = R_i I_i R_i^T), a_c = T_dot u the convective accelerations (the bodies'
accelerations when u_dot = 0), f_i = (m_i g, -omega_i x I_w,i omega_i) (gravity and the gyroscopic moment the
paper's planar examples do not need) and Q the generalised forces (here the model's viscoelastic joint laws
and applied joint torques). This is a second formulation beside the hybrid Newton-Euler algorithm
(sim/dynamics.py), sharing nothing with it but the Model and sim.spatial: each checks the other.

Generalised coordinates: a floating base contributes u_0 = (V, Omega) in the base frame (as
:class:`sim.simulation.Simulation`), then the joint rates in ``model.joint_names`` order. A fixed base
contributes nothing. An imposed base is out of scope: it is a rheonomic constraint.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np

from ..model import Model
from ..spatial import exp_so3, hat, inertia_parameters


@dataclass
class TreeKinematics:
    """Kinematics of every body at one state. For N + 1 bodies and n_u generalised velocities:
    ``R`` (N+1, 3, 3) body -> world; ``origin`` (N+1, 3) m, world; ``com`` (N+1, 3) m, world; ``omega`` (N+1, 3)
    rad/s, world; ``T`` (N+1, 6, n_u): rows 0-2 the centre of mass's velocity (m/s), rows 3-5 the angular
    velocity (rad/s), world axes; ``a_c`` (N+1, 6): T_dot u (m/s^2, rad/s^2); ``T_origin`` (N+1, 6, n_u) and
    ``acc_origin`` (N+1, 3), ``alpha`` (N+1, 3): the same for the body frames' origins (world axes)."""

    R: np.ndarray
    origin: np.ndarray
    com: np.ndarray
    omega: np.ndarray
    T: np.ndarray
    a_c: np.ndarray
    T_origin: np.ndarray
    acc_origin: np.ndarray
    alpha: np.ndarray


_INERTIAS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def body_inertias(model: Model) -> list[tuple[float, np.ndarray, np.ndarray]]:
    """(mass kg, centre of mass (3,) m in the body frame, inertia about it (3, 3) kg m^2) of every body, computed
    once per model (the model does not change)."""
    if model not in _INERTIAS:
        _INERTIAS[model] = [inertia_parameters(model.inertia[j]) for j in range(model.n_bodies)]
    return _INERTIAS[model]


def cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b for 3-vectors (numpy's general ``np.cross`` costs ~20 times more on one pair: this engine makes
    a dozen per body and evaluation)."""
    return np.array([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]])


def _joint_motion(model: Model, j: int, r: float) -> tuple[np.ndarray, np.ndarray]:
    """Pose of body j in its parent's frame at joint value r: rotation (3, 3) and position (3,) m."""
    placement = model.joint_placement[j]
    axis = model.joint_axis[j]
    R, p = placement[:3, :3], placement[:3, 3]
    if model.joint_types[j - 1] == "prismatic":
        return R.copy(), p + R @ (axis[:3] * r)
    return R @ exp_so3(axis[3:] * r), p.copy()


def tree_kinematics(model: Model, base_pose: np.ndarray, q: np.ndarray, u: np.ndarray) -> TreeKinematics:
    """Positions, T and T_dot u of every body (module docstring), by one pass from the base to the leaves.

    Joint k (body j = k + 1) has the world axis a_k through the body's origin o_j. T's column for joint k, for a
    point p on a descendant: revolute (a_k x (p - o_j), a_k), prismatic (a_k, 0). T_dot u with u_dot = 0, parent
    i, d = o_j - o_i: alpha_j = alpha_i + omega_i x a_k u_k (revolute); a_oj = a_oi + alpha_i x d +
    omega_i x (omega_i x d) (+ 2 omega_i x a_k u_k, prismatic); a point at rho = p - o_j on body j:
    a_p = a_oj + alpha_j x rho + omega_j x (omega_j x rho)."""
    nb, n = model.n_bodies, model.n
    floating = model.base_mode == "floating"
    offset = 6 if floating else 0
    n_u = offset + n
    R = np.zeros((nb, 3, 3))
    origin = np.zeros((nb, 3))
    omega = np.zeros((nb, 3))
    alpha = np.zeros((nb, 3))        # convective angular accelerations, world
    acc_origin = np.zeros((nb, 3))   # convective accelerations of the origins, world
    # (nb, 6, n_u) columns for the origin's velocity (rows 0-2) and the angular velocity (rows 3-5)
    T_origin = np.zeros((nb, 6, n_u))
    axes = np.zeros((nb, 3))
    g0 = np.asarray(base_pose, dtype=float)
    R[0], origin[0] = g0[:3, :3], g0[:3, 3]
    if floating:
        V, Omega = u[:3], u[3:6]
        omega[0] = R[0] @ Omega
        acc_origin[0] = R[0] @ cross(Omega, V)
        T_origin[0, :3, :3] = R[0]
        T_origin[0, 3:, 3:6] = R[0]
    for j in range(1, nb):
        i, k = model.parent[j], j - 1
        R_rel, p_rel = _joint_motion(model, j, q[k])
        R[j] = R[i] @ R_rel
        origin[j] = origin[i] + R[i] @ p_rel
        d = origin[j] - origin[i]
        prismatic = model.joint_types[k] == "prismatic"
        a = R[j] @ (model.joint_axis[j, :3] if prismatic else model.joint_axis[j, 3:])
        axes[j] = a
        rate = u[offset + k]
        # velocities of the parent's frame carried to o_j, plus this joint's column
        T_origin[j, :3] = T_origin[i, :3] - hat(d) @ T_origin[i, 3:]
        T_origin[j, 3:] = T_origin[i, 3:]
        if prismatic:
            T_origin[j, :3, offset + k] += a
            omega[j] = omega[i]
            alpha[j] = alpha[i]
            acc_origin[j] = (acc_origin[i] + cross(alpha[i], d) + cross(omega[i], cross(omega[i], d))
                             + 2.0 * cross(omega[i], a * rate))
        else:
            T_origin[j, 3:, offset + k] += a
            omega[j] = omega[i] + a * rate
            alpha[j] = alpha[i] + cross(omega[i], a * rate)
            acc_origin[j] = acc_origin[i] + cross(alpha[i], d) + cross(omega[i], cross(omega[i], d))
    com = np.zeros((nb, 3))
    T = np.zeros((nb, 6, n_u))
    a_c = np.zeros((nb, 6))
    inertias = body_inertias(model)
    for j in range(nb):
        _, c_local, _ = inertias[j]
        rho = R[j] @ c_local
        com[j] = origin[j] + rho
        T[j, :3] = T_origin[j, :3] - hat(rho) @ T_origin[j, 3:]
        T[j, 3:] = T_origin[j, 3:]
        a_c[j, :3] = acc_origin[j] + cross(alpha[j], rho) + cross(omega[j], cross(omega[j], rho))
        a_c[j, 3:] = alpha[j]
    return TreeKinematics(R=R, origin=origin, com=com, omega=omega, T=T, a_c=a_c, T_origin=T_origin,
                          acc_origin=acc_origin, alpha=alpha)


def generalized_forces(model: Model, q: np.ndarray, u: np.ndarray, tau: np.ndarray, use_laws: bool = True
                       ) -> np.ndarray:
    """Q (n_u,): the applied joint torques ``tau`` (n,) N m or N, plus, with ``use_laws``, the model's
    viscoelastic laws -k (q - r0) - mu q_dot on the joints that have one (zero on the base's rows)."""
    offset = 6 if model.base_mode == "floating" else 0
    Q = np.zeros(offset + model.n)
    joint = np.asarray(tau, dtype=float).copy()
    if use_laws:
        joint += -model.law_k * (q - model.law_r0) - model.law_mu * u[offset:]
    Q[offset:] = joint
    return Q


def _body_frame_terms(kin: TreeKinematics, j: int, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Body j's twist in its own frame as J u: J (6, n_u), the twist eta (6,) (V, Omega) and J_dot u (6,)
    (u_dot = 0): d/dt (R^T x) = R^T (x_dot - omega x x)."""
    Rt = kin.R[j].T
    J = np.vstack([Rt @ kin.T_origin[j, :3], Rt @ kin.T_origin[j, 3:]])
    v_origin = kin.T_origin[j, :3] @ u
    convective = np.concatenate([Rt @ (kin.acc_origin[j] - cross(kin.omega[j], v_origin)), Rt @ kin.alpha[j]])
    return J, J @ u, convective


def mass_matrix_and_bias(model: Model, base_pose: np.ndarray, q: np.ndarray, u: np.ndarray, tau: np.ndarray,
                         gravity: np.ndarray | None = None, use_laws: bool = True, *,
                         extra_inertia: np.ndarray | None = None, body_wrench: np.ndarray | None = None
                         ) -> tuple[np.ndarray, np.ndarray, TreeKinematics]:
    """M (n_u, n_u) and d (n_u,) of M u_dot = d (module docstring) at one state; also the kinematics.

    ``extra_inertia`` (N+1, 6, 6) (e.g. a fluid's added mass) and ``body_wrench`` (N+1, 6) (force models' wrenches,
    force then moment), both about each body's origin in its own frame, enter through the body-frame twist
    eta_j = J_j u: M += J^T M_a J and d += J^T (F - b(M_a eta) - M_a J_dot u), b(P) = (Omega x P_f,
    V x P_f + Omega x P_m) (the Newton-Euler equations of a body with a general 6 x 6 inertia)."""
    g = model.gravity if gravity is None else np.asarray(gravity, dtype=float)
    kin = tree_kinematics(model, base_pose, q, u)
    n_u = kin.T.shape[2]
    M = np.zeros((n_u, n_u))
    d = generalized_forces(model, q, u, tau, use_laws)
    for j, (mass, _, I_local) in enumerate(body_inertias(model)):
        I_world = kin.R[j] @ I_local @ kin.R[j].T
        M_x = np.zeros((6, 6))
        M_x[:3, :3] = mass * np.eye(3)
        M_x[3:, 3:] = I_world
        f = np.concatenate([mass * g, -cross(kin.omega[j], I_world @ kin.omega[j])])
        T = kin.T[j]
        M += T.T @ M_x @ T
        d += T.T @ (f - M_x @ kin.a_c[j])
        extra = None if extra_inertia is None else extra_inertia[j]
        wrench = None if body_wrench is None else body_wrench[j]
        if (extra is not None and extra.any()) or (wrench is not None and wrench.any()):
            J, eta, convective = _body_frame_terms(kin, j, u)
            rhs = np.zeros(6) if wrench is None else np.asarray(wrench, dtype=float).copy()
            if extra is not None:
                P = extra @ eta
                rhs -= np.concatenate([cross(eta[3:], P[:3]), cross(eta[:3], P[:3]) + cross(eta[3:], P[3:])])
                rhs -= extra @ convective
                M += J.T @ extra @ J
            d += J.T @ rhs
    return 0.5 * (M + M.T), d, kin


@dataclass
class TMTResult:
    """``u_dot`` (n_u,) generalised accelerations (floating base first: (V_dot, Omega_dot) in the base frame);
    ``qdd`` (n,) joint accelerations; ``tau`` (n,) joint torques (the actuated joints' from the constraint that
    imposes their motion, the passive joints' as applied); ``base_acc`` (6,) (zero unless floating); ``condition``
    the 2-norm condition number of the free block M_ff solved for (inf when singular: e.g. a passive joint
    that moves no inertia, such as the flapper's stroke joint with its massless link)."""

    u_dot: np.ndarray
    qdd: np.ndarray
    tau: np.ndarray
    base_acc: np.ndarray
    condition: float


def tmt_dynamics(model: Model, base_pose, base_twist, q, qd, actuated, qdd, tau, gravity=None, *,
                 use_laws: bool = False, extra_inertia: np.ndarray | None = None,
                 body_wrench: np.ndarray | None = None) -> TMTResult:
    """The hybrid problem solved with the TMT equations (same arguments and meaning as
    :func:`sim.dynamics.hybrid_dynamics`): the actuated joints' accelerations are imposed (rheonomic
    constraints whose multipliers are their torques), the passive joints and a floating base accelerate under
    ``tau`` (and the laws, with ``use_laws``; ``extra_inertia`` and ``body_wrench``: see
    :func:`mass_matrix_and_bias`; the model's force models are not evaluated here). Partitioned solve: M_ff u_dot_f = d_f - M_fa qdd_a, then
    tau_a = M_af u_dot_f + M_aa qdd_a - d_a."""
    if model.base_mode == "imposed":
        raise ValueError("tmt_dynamics: an imposed base is a rheonomic constraint, not supported here")
    q, qd = np.asarray(q, dtype=float), np.asarray(qd, dtype=float)
    floating = model.base_mode == "floating"
    offset = 6 if floating else 0
    u = np.concatenate([np.asarray(base_twist, dtype=float) if floating else np.zeros(0), qd])
    act = np.asarray(actuated, dtype=bool)
    tau_in = np.where(act, 0.0, np.asarray(tau, dtype=float))
    M, d, _ = mass_matrix_and_bias(model, np.asarray(base_pose, dtype=float), q, u, tau_in, gravity, use_laws,
                                   extra_inertia=extra_inertia, body_wrench=body_wrench)
    imposed = np.concatenate([np.zeros(offset, dtype=bool), act])
    free = ~imposed
    u_dot = np.zeros(offset + model.n)
    u_dot[imposed] = np.asarray(qdd, dtype=float)[act]
    condition = 1.0
    if free.any():
        M_free = M[np.ix_(free, free)]
        condition = float(np.linalg.cond(M_free))
        rhs = d[free] - M[np.ix_(free, imposed)] @ u_dot[imposed]
        u_dot[free] = np.linalg.lstsq(M_free, rhs, rcond=None)[0]
    joint_tau = generalized_forces(model, q, u, tau_in, use_laws)[offset:]    # passive: applied + laws
    residual = M @ u_dot - d                   # the constraint forces: nonzero on the imposed rows only
    joint_tau[act] = residual[offset:][act]
    base_acc = u_dot[:6].copy() if floating else np.zeros(6)
    return TMTResult(u_dot=u_dot, qdd=u_dot[offset:].copy(), tau=joint_tau, base_acc=base_acc,
                     condition=condition)


def kinetic_energy(model: Model, base_pose, q, u) -> float:
    """1/2 u^T M u (J)."""
    M, _, _ = mass_matrix_and_bias(model, np.asarray(base_pose, dtype=float), np.asarray(q, dtype=float),
                                   np.asarray(u, dtype=float), np.zeros(model.n), np.zeros(3), use_laws=False)
    return 0.5 * float(u @ M @ u)
