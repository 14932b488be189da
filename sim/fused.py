"""Fused time stepping: whole RK4 or ROS34PW2 steps (kinematics, force-model kernels, recursions, state update) in one
compiled call, for the models whose every ingredient has a numba form (docs/sim-core.md, "Fused stepping").

Same numbers as the Python-orchestrated path of :class:`sim.simulation.Simulation` (same kernels, same
operation order; compared to ~1e-12 in tests/sim_core/test_sim_core_fused.py), without the Python around
each RK stage (which costs as much as the kernels for a 17-body flapper).

A model qualifies (:func:`fused_unsupported` returns None) when
- the integrator is "rk4" or "rosw" (sim/integrators.py);
- the base is floating, fixed, or imposed by a :class:`sim.model.StaticBase`;
- every actuated joint's motion law is a :class:`Sinusoid`, :class:`Polynomial` or :class:`RampedSinusoid`
  (evaluated in the kernel at every stage time) or a :class:`Constant` / :class:`ExternalMotion` (its values,
  read once per call, are held over the call, as the Python path does since nothing changes them during a
  step), or has a method ``fused_form()`` returning such an equivalent law, or is a :class:`ScaledMotion`
  (``ratio * source(t)``, the kernel multiplying its row by ratio) of a law that qualifies;
- every passive joint law is :class:`ViscoElastic` / :class:`Free` (kernel arrays of the model) or a
  :class:`TrackingSpring` (spring about ``ratio * source(t)``) or has ``fused_form()`` returning one, whose
  source law qualifies as above;
- every force model implements the kernel protocol (docs/sim-api.md): a class attribute
  ``fused_kernel`` naming one of :data:`KERNEL_KINDS` and a method ``kernel_args()`` returning the arguments
  of that kernel other than the workspace arrays; at most one force model of each kind (BladeAero and the
  four hydrodynamic plug-ins of sim/hydro.py implement it).
Otherwise :class:`Simulation` keeps its Python path.

The derivative of the last call's final state is kept (first-same-as-last): the next call reuses it as its
first stage when the inputs did not change (time, state, applied torques, held law values, checked in the
kernel), so a call of n steps costs 4 n evaluations and leaves ``Data`` holding the evaluation at the final
state, which makes ``Simulation.outputs()`` free.

Why kinds and not function arguments: numba cannot cache (``cache=True``) a function that receives another
compiled function as an argument (the dispatcher's type is per process), so the kernels a fused step may
call are the fixed set below, each with one argument slot (an empty slot does nothing).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .aero import blade_aero_kernel
from .dynamics import _data_views, _kinematics_packed, _recursions_packed
from .hydro import added_mass_kernel, buoyancy_kernel, drag_kernel, lift_kernel
from .integrators import JACOBIAN_FD_STEP, PASSIVE_OFFSET, ROSW_ALPHA, ROSW_B, ROSW_C, ROSW_GAMMA, ROSW_GAMMA_DIAG
from .laws import Constant, ExternalMotion, JointLaw, MotionLaw, Polynomial, RampedSinusoid, ScaledMotion, Sinusoid
from .model import Model, StaticBase
from .spatial import quat_derivative, quat_to_matrix
from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Force-model kernels a fused step can call (value of a plug-in's ``fused_kernel`` attribute), in the order
#: the fused step applies them (f_ext sums in another order differ by rounding only).
KERNEL_KINDS = ("blade_aero", "buoyancy", "added_mass", "drag", "lift")

#: Motion-law codes in the kernel: held (values read once per call), sinusoid, polynomial, ramped sinusoid.
LAW_HELD, LAW_SINUSOID, LAW_POLYNOMIAL, LAW_RAMPED_SINUSOID = 0, 1, 2, 3
#: Integration methods of the fused path: classical RK4; the Rosenbrock-W ROS34PW2 (sim/integrators.py).
METHOD_RK4, METHOD_ROSW = 0, 1
#: Simulation integrator name -> fused method code.
FUSED_METHODS = {"rk4": METHOD_RK4, "rosw": METHOD_ROSW}
_HELD_LAWS = (Constant, ExternalMotion)
#: Laws with a kernel form (exact types: a subclass may override evaluate, so it needs its own fused_form).
_KERNEL_LAWS = (Sinusoid, Polynomial, RampedSinusoid) + _HELD_LAWS


# ----------------------------------------------------------------------------------------- state <-> inputs
@njit(cache=True)
def _state_to_inputs(y, passive_index, floating, q, qd, base_pose, base_twist):
    """Scatter the state y into the joint arrays q, qd (n,) (passive entries) and, for a floating base, the
    base pose (4, 4) (quaternion normalised) and twist (6,)."""
    n_p = passive_index.shape[0]
    for i in range(n_p):
        q[passive_index[i]] = y[13 + i]
        qd[passive_index[i]] = y[13 + n_p + i]
    if floating:
        norm = np.sqrt(y[3] * y[3] + y[4] * y[4] + y[5] * y[5] + y[6] * y[6])
        R = quat_to_matrix(y[3:7] / norm)
        for a in range(3):
            for b in range(3):
                base_pose[a, b] = R[a, b]
            base_pose[a, 3] = y[a]
            base_pose[3, a] = 0.0
        base_pose[3, 3] = 1.0
        for a in range(6):
            base_twist[a] = y[7 + a]


@njit(cache=True)
def _state_derivative(y, passive_index, floating, base_acc, qdd, dy):
    """dy/dt (same layout as y): p_dot = R V (world), quaternion rate, base acceleration, passive r_d and r_dd."""
    n_p = passive_index.shape[0]
    for a in range(13):
        dy[a] = 0.0
    if floating:
        norm = np.sqrt(y[3] * y[3] + y[4] * y[4] + y[5] * y[5] + y[6] * y[6])
        quat = y[3:7] / norm
        R = quat_to_matrix(quat)
        for a in range(3):
            dy[a] = R[a, 0] * y[7] + R[a, 1] * y[8] + R[a, 2] * y[9]
        dq = quat_derivative(quat, y[10:13])
        for a in range(4):
            dy[3 + a] = dq[a]
        for a in range(6):
            dy[7 + a] = base_acc[a]
    for i in range(n_p):
        dy[13 + i] = y[13 + n_p + i]
        dy[13 + n_p + i] = qdd[passive_index[i]]


# ----------------------------------------------------------------------------------------- motion laws
@njit(cache=True)
def _horner(coef, length, t):
    """sum_k coef[k] t^k for k < length, in numpy's polyval order (Horner from the highest power)."""
    acc = coef[length - 1]
    for i in range(length - 2, -1, -1):
        acc = coef[i] + acc * t
    return acc


@njit(cache=True)
def _ramped_sinusoid(a, w, phase, ramp_time, t):
    """(r, r_d, r_dd) of :class:`sim.laws.RampedSinusoid` (amplitude a, omega w rad/s, phase rad, ramp_time s)
    at t (s), with its operations in its order (same rounding)."""
    angle = w * t + phase
    s, c = math.sin(angle), math.cos(angle)
    x, x_d, x_dd = a * s, a * w * c, -a * w * w * s
    if ramp_time > 0.0 and t < ramp_time:
        k = math.pi / ramp_time
        r, r_d, r_dd = 0.5 * (1.0 - math.cos(k * t)), 0.5 * k * math.sin(k * t), 0.5 * k * k * math.cos(k * t)
        return r * x, r_d * x + r * x_d, r_dd * x + 2.0 * r_d * x_d + r * x_dd
    return x, x_d, x_dd


@njit(cache=True)
def _motion_laws(t, index, law_kind, law_par, poly, poly_len, law_scale, row0, q, qd, qdd):
    """(r, r_d, r_dd) at t (s) of the laws in rows row0.. of the law table into q[index[i]], qd, qdd, with the
    formulas of sim.laws.

    index (m,) output indices; law_kind (rows,) LAW_*; law_par (rows, 4): held (r, r_d, r_dd), sinusoid
    (amplitude, omega, phase, offset) or ramped sinusoid (amplitude, omega, phase, ramp_time); poly (rows, 3, P)
    coefficients of r, r_d, r_dd in increasing powers, poly_len (rows, 3) their lengths (polynomial laws);
    law_scale (rows,) factor applied to the row's values (the ratio of a ScaledMotion, else 1: exact)."""
    for i in range(index.shape[0]):
        k = index[i]
        row = row0 + i
        kind = law_kind[row]
        if kind == LAW_SINUSOID:
            a, w = law_par[row, 0], law_par[row, 1]
            angle = w * t + law_par[row, 2]
            s = math.sin(angle)
            r = law_par[row, 3] + a * s
            r_d = a * w * math.cos(angle)
            r_dd = -a * w * w * s
        elif kind == LAW_POLYNOMIAL:
            r = _horner(poly[row, 0], poly_len[row, 0], t)
            r_d = _horner(poly[row, 1], poly_len[row, 1], t)
            r_dd = _horner(poly[row, 2], poly_len[row, 2], t)
        elif kind == LAW_RAMPED_SINUSOID:
            r, r_d, r_dd = _ramped_sinusoid(law_par[row, 0], law_par[row, 1], law_par[row, 2], law_par[row, 3], t)
        else:
            r = law_par[row, 0]
            r_d = law_par[row, 1]
            r_dd = law_par[row, 2]
        scale = law_scale[row]
        q[k] = scale * r
        qd[k] = scale * r_d
        qdd[k] = scale * r_dd


@njit(cache=True)
def _force_kernels(g, eta, f_ext, M_added, forces):
    """The force-model kernels (KERNEL_KINDS order) on their argument slots (an empty slot acts on no body)."""
    aero, buoy, added, drag, lift = forces
    blade_aero_kernel(eta, f_ext, M_added, *aero)
    buoyancy_kernel(g, buoy[0], buoy[1], buoy[2], buoy[3], buoy[4], buoy[5], buoy[6], f_ext, buoy[7])
    added_mass_kernel(added[0], added[1], M_added)
    drag_kernel(g, eta, drag[0], drag[1], drag[2], drag[3], drag[4], drag[5], drag[6], f_ext, drag[7])
    lift_kernel(g, eta, lift[0], lift[1], lift[2], lift[3], lift[4], lift[5], lift[6], lift[7], lift[8],
                lift[9], lift[10], f_ext, lift[11])


# ----------------------------------------------------------------------------------------- one evaluation
@njit(cache=True)
def _evaluate(t, y, dy, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
              held_pose, held_twist, acc_in, has_forces, forces):
    """dy/dt (Simulation state layout) at (t, y) with the hybrid algorithm (Porez et al. 2014, section III):
    motion laws -> kinematics -> force-model kernels -> tracking springs -> recursions, all results left in
    the Data buffer. laws: see FusedStepper.laws; scratch: (qdd_in (n,), tau_eff (n,), source r, r_d, r_dd
    (n_s,)); held_pose (4, 4), held_twist (6,), acc_in (6,): base of a fixed / static imposed base."""
    nb = parent.shape[0]
    n = nb - 1
    (g, eta, Xj, AdJ, zeta, f_ext, f_gravity, M_added, Mstar, Pistar, H, eta_d, q, qd, qdd, tau,
     base_pose, base_twist, base_acc, base_wrench) = _data_views(nb, n, buf)
    act_index, law_kind, law_par, poly, poly_len, spring_index, spring_par, source_index, law_scale = laws
    qdd_in, tau_eff, src_r, src_rd, src_rdd = scratch
    floating = base_mode == 0
    _state_to_inputs(y, passive, floating, q, qd, base_pose, base_twist)
    _motion_laws(t, act_index, law_kind, law_par, poly, poly_len, law_scale, 0, q, qd, qdd_in)
    if not floating:
        for a in range(4):
            for b in range(4):
                base_pose[a, b] = held_pose[a, b]
        for a in range(6):
            base_twist[a] = held_twist[a]
    _kinematics_packed(parent, mf, buf)
    if has_forces:
        f_ext[:] = 0.0
        f_gravity[:] = 0.0
        M_added[:] = 0.0
        _force_kernels(g, eta, f_ext, M_added, forces)
    tau_passive = tau_in
    if spring_index.shape[0] > 0:
        # TrackingSpring.torque, added to the applied torques as hybrid_step does for Python joint laws.
        _motion_laws(t, source_index, law_kind, law_par, poly, poly_len, law_scale, act_index.shape[0], src_r,
                     src_rd, src_rdd)
        for k in range(n):
            tau_eff[k] = tau_in[k]
        for i in range(spring_index.shape[0]):
            k = spring_index[i]
            stiffness, damping, ratio = spring_par[i, 0], spring_par[i, 1], spring_par[i, 2]
            tau_eff[k] += -stiffness * (q[k] - ratio * src_r[i]) - damping * (qd[k] - ratio * src_rd[i])
        tau_passive = tau_eff
    _recursions_packed(parent, mf, buf, actuated, qdd_in, tau_passive, gravity, base_mode, acc_in, True)
    _state_derivative(y, passive, floating, base_acc, qdd, dy)


@njit(cache=True)
def inputs_match(cache_t, t, y_cached, y, cache_tau, tau, cache_par, law_par):
    """Whether the kept evaluation (cache_t = (t s, valid flag)) was made at time t, state y, applied torques
    tau and law values law_par."""
    if cache_t[1] != 1.0 or cache_t[0] != t or y.shape[0] != y_cached.shape[0]:
        return False
    for i in range(y.shape[0]):
        if y_cached[i] != y[i]:
            return False
    for i in range(tau.shape[0]):
        if cache_tau[i] != tau[i]:
            return False
    for i in range(law_par.shape[0]):
        for c in range(law_par.shape[1]):
            if cache_par[i, c] != law_par[i, c]:
                return False
    return True


@njit(cache=True)
def _first_stage(t, y, k1, fsal, work, cache_t, cache_tau, cache_par, parent, mf, buf, actuated, gravity, base_mode,
                 passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """k1 = f(t, y): the kept derivative when the inputs match (first-same-as-last), else a new evaluation;
    returns the number of evaluations made (0 or 1)."""
    if inputs_match(cache_t, t, work[4], y, cache_tau, tau_in, cache_par, laws[2]):
        for i in range(y.shape[0]):
            k1[i] = fsal[i]
        return 0
    _evaluate(t, y, k1, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
              held_pose, held_twist, acc_in, has_forces, forces)
    return 1


@njit(cache=True)
def _end_of_step(y, tmp):
    """Renormalise the quaternion of the new state y (as ``Simulation._normalize``) and copy y into tmp (the
    state of the evaluation that ends the step)."""
    norm = math.sqrt(y[3] * y[3] + y[4] * y[4] + y[5] * y[5] + y[6] * y[6])
    for i in range(3, 7):
        y[i] /= norm
    for i in range(y.shape[0]):
        tmp[i] = y[i]


@njit(cache=True)
def _rk4_steps(n_steps, t, dt, y, work, fsal, tmp, parent, mf, buf, actuated, gravity, base_mode, passive, laws,
               scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """n_steps RK4 steps from (t, y) with k1 = work[0] already f(t, y); y updated in place (quaternion
    renormalised after every step, as :func:`sim.integrators.rk4_step` + ``Simulation._normalize``). On return
    ``buf`` holds the evaluation at the final state, fsal its derivative (= work[0] when n_steps == 0);
    returns t_end (s). One evaluation call site (stages 2-4, then the next step's first stage at the new state):
    numba inlines every site, and each costs compile time."""
    ny = y.shape[0]
    half = 0.5 * dt
    sixth = dt / 6.0
    for step in range(n_steps):
        if step > 0:
            for i in range(ny):
                work[0, i] = fsal[i]
        for stage in range(1, 5):
            if stage < 4:
                coef = dt if stage == 3 else half
                for i in range(ny):
                    tmp[i] = y[i] + coef * work[stage - 1, i]
                t_stage = t + coef
                target = work[stage]
            else:
                for i in range(ny):
                    y[i] = y[i] + sixth * (work[0, i] + 2.0 * work[1, i] + 2.0 * work[2, i] + work[3, i])
                _end_of_step(y, tmp)
                t = t + dt
                t_stage = t
                target = fsal
            _evaluate(t_stage, tmp, target, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch,
                      tau_in, held_pose, held_twist, acc_in, has_forces, forces)
    if n_steps == 0:
        for i in range(ny):
            fsal[i] = work[0, i]
    return t


@njit(cache=True)
def _refresh_jacobian(t, y, f0, J, W_inv, dt, groups, branch, tmp, column, parent, mf, buf, actuated, gravity,
                      base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """:func:`sim.integrators.refresh_jacobian` of J at (t, y) (f0 = f(t, y)) and W_inv = (I - dt gamma J)^-1,
    in place, with the same operations; returns the evaluations made."""
    ny = y.shape[0]
    o = PASSIVE_OFFSET
    n_p = branch.shape[0]
    for g in range(groups.shape[0]):
        for i in range(ny):
            tmp[i] = y[i]
        for c in range(groups.shape[1]):
            if groups[g, c] >= 0:
                tmp[o + groups[g, c]] += JACOBIAN_FD_STEP
        _evaluate(t, tmp, column, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
                  held_pose, held_twist, acc_in, has_forces, forces)
        for c in range(groups.shape[1]):
            a = groups[g, c]
            if a < 0:
                continue
            for r in range(n_p):
                if branch[r] == branch[a % n_p]:
                    J[n_p + r, a] = (column[o + n_p + r] - f0[o + n_p + r]) / JACOBIAN_FD_STEP
    _invert_w(J, dt * ROSW_GAMMA_DIAG, W_inv)
    return groups.shape[0]


@njit(cache=True)
def _invert_w(J, h_gamma, out):
    """out = (I - h_gamma J)^-1 by Gauss-Jordan elimination with partial pivoting (J (m, m); W is close to the
    identity for the small steps and diagonally dominant for the stiff ones, so pivoting on rows is enough).
    numba's np.linalg.inv would do, at several times the compile time."""
    m = J.shape[0]
    W = np.empty((m, m))
    for a in range(m):
        for b in range(m):
            W[a, b] = (1.0 if a == b else 0.0) - h_gamma * J[a, b]
            out[a, b] = 1.0 if a == b else 0.0
    for c in range(m):
        pivot = c
        for r in range(c + 1, m):
            if abs(W[r, c]) > abs(W[pivot, c]):
                pivot = r
        if pivot != c:
            for b in range(m):
                W[c, b], W[pivot, b] = W[pivot, b], W[c, b]
                out[c, b], out[pivot, b] = out[pivot, b], out[c, b]
        scale = 1.0 / W[c, c]
        for b in range(m):
            W[c, b] *= scale
            out[c, b] *= scale
        for r in range(m):
            if r != c and W[r, c] != 0.0:
                factor = W[r, c]
                for b in range(m):
                    W[r, b] -= factor * W[c, b]
                    out[r, b] -= factor * out[c, b]


@njit(cache=True)
def _rosw_steps(n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf, actuated,
                gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """n_steps ROS34PW2 steps (:func:`sim.integrators.rosw_step`, same operation order) from (t, y), with
    work[0] already f(t, y); J, W_inv (2 n_p, 2 n_p) the passive block's Jacobian and (I - h gamma J)^-1;
    refresh (3,) int64: (steps since J was refreshed, steps between refreshes (0: never), evaluations spent
    refreshing, added to); groups, branch: see :func:`sim.integrators.column_groups`. Same contract as
    :func:`_rk4_steps` otherwise."""
    ny = y.shape[0]
    o = PASSIVE_OFFSET
    n2 = ny - o
    k = work[0:4]
    coupling = np.empty(n2)
    rhs = np.empty(n2)
    column = np.empty(ny)
    for step in range(n_steps):
        if step > 0:
            for a in range(ny):
                k[0, a] = fsal[a]
        if refresh[1] > 0 and refresh[0] >= refresh[1]:
            refresh[2] += _refresh_jacobian(t, y, k[0], J, W_inv, dt, groups, branch, tmp, column, parent, mf, buf,
                                            actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose,
                                            held_twist, acc_in, has_forces, forces)
            refresh[0] = 0
        refresh[0] += 1
        for i in range(5):
            # stage i (0: k[0] is f(t, y) already), then (i == 4) the update and the evaluation at the new state
            if i == 4:
                for a in range(ny):
                    acc = 0.0
                    for j in range(4):
                        acc += ROSW_B[j] * k[j, a]
                    y[a] = y[a] + dt * acc
                _end_of_step(y, tmp)
                t = t + dt
                t_stage = t
                target = fsal
            elif i > 0:
                for a in range(ny):
                    acc = y[a]
                    for j in range(i):
                        acc += (dt * ROSW_ALPHA[i, j]) * k[j, a]
                    tmp[a] = acc
                t_stage = t + ROSW_C[i] * dt
                target = k[i]
            if i > 0:       # one evaluation call site (each inlined copy costs compile time)
                _evaluate(t_stage, tmp, target, parent, mf, buf, actuated, gravity, base_mode, passive, laws,
                          scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces)
            if i == 4:
                break
            for a in range(n2):
                acc = 0.0
                for j in range(i):
                    acc += ROSW_GAMMA[i, j] * k[j, o + a]
                coupling[a] = acc
            for a in range(n2):
                acc = 0.0
                for b in range(n2):
                    acc += J[a, b] * coupling[b]
                rhs[a] = k[i, o + a] + dt * acc
            for a in range(n2):
                acc = 0.0
                for b in range(n2):
                    acc += W_inv[a, b] * rhs[b]
                k[i, o + a] = acc
    if n_steps == 0:
        for a in range(ny):
            fsal[a] = work[0, a]
    return t


@njit(cache=True)
def _steps(method, n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf, actuated,
           gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """n_steps of the method (METHOD_RK4: classical RK4; METHOD_ROSW: ROS34PW2 with J, W_inv, refresh)."""
    if method == METHOD_ROSW:
        return _rosw_steps(n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf,
                           actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist,
                           acc_in, has_forces, forces)
    return _rk4_steps(n_steps, t, dt, y, work, fsal, tmp, parent, mf, buf, actuated, gravity, base_mode, passive,
                      laws, scratch, tau_in, held_pose, held_twist, acc_in, has_forces, forces)


@njit(cache=True)
def _keep_inputs(t, y, work, tau_in, law_par, cache_t, cache_tau, cache_par):
    """Remember the inputs of the kept derivative (see :func:`inputs_match`)."""
    y_cached = work[4]
    for i in range(y.shape[0]):
        y_cached[i] = y[i]
    for i in range(tau_in.shape[0]):
        cache_tau[i] = tau_in[i]
    for i in range(law_par.shape[0]):
        for c in range(law_par.shape[1]):
            cache_par[i, c] = law_par[i, c]
    cache_t[0] = t
    cache_t[1] = 1.0


@njit(cache=True)
def fused_run(method, every, pack, t, dt, y, J, W_inv, refresh, groups, branch, times, out, q_rest, work, fsal,
              cache_t, cache_tau, cache_par, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch,
              tau_in, held_pose, held_twist, acc_in, has_forces, forces):
    """times.shape[0] records of ``every`` steps of dt (s) of the method (METHOD_*) from (t, y), y updated in
    place; after each record's last step its time (s) goes to times (records,) and, when ``pack``, the outputs
    (:func:`pack_outputs`) to out (records, output size): what a Python loop of ``step()`` + ``outputs()``
    gives, in one call (``advance`` is one record, unpacked). Returns (t_end, evaluations).

    J, W_inv, refresh, groups, branch: see :func:`_rosw_steps` (empty for RK4). work (5, ny) scratch; fsal
    (ny,): f(t, y) of the previous call's end, reused as the first stage when cache_t[0] (s) == t, cache_t[1]
    == 1 (valid), y unchanged (fsal's state is work[4]), tau_in == cache_tau and law_par == cache_par. On return
    ``buf`` holds the evaluation at (t_end, y_end) and fsal its derivative. The evaluations of Jacobian
    refreshes are counted in refresh[2], not in the returned number. One entry kernel for both uses: each
    entry compiles the whole step again."""
    tmp = np.empty(y.shape[0])
    evaluations = _first_stage(t, y, work[0], fsal, work, cache_t, cache_tau, cache_par, parent, mf, buf, actuated,
                               gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in,
                               has_forces, forces)
    for r in range(times.shape[0]):
        if r > 0:
            for i in range(y.shape[0]):
                work[0, i] = fsal[i]
        t = _steps(method, every, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf,
                   actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in,
                   has_forces, forces)
        times[r] = t
        if pack:
            pack_outputs(parent, buf, q_rest, passive, out[r])
        evaluations += 4 * every
    _keep_inputs(t, y, work, tau_in, laws[2], cache_t, cache_tau, cache_par)
    return t, evaluations


# ----------------------------------------------------------------------------------------- outputs
def output_layout(n: int, n_p: int) -> list[tuple[str, int]]:
    """Order and sizes of the sim/state fields in the flat array written by :func:`pack_outputs`."""
    return [("q", n), ("qd", n), ("qdd", n), ("tau", n), ("strain", n_p), ("base_pos", 3), ("base_quat", 4),
            ("base_twist", 6), ("base_wrench", 6), ("ext_wrench", 6)]


@njit(cache=True)
def _matrix_to_quat(R, out):
    """Unit quaternion (w, x, y, z), w >= 0, of a rotation matrix (3, 3) into out (4,) (Shepperd's method,
    the formulas of sim.spatial.matrix_to_quat)."""
    tr = R[0, 0] + R[1, 1] + R[2, 2]
    if tr > 0.0:
        s = 2.0 * np.sqrt(tr + 1.0)
        out[0], out[1], out[2], out[3] = 0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, \
            (R[1, 0] - R[0, 1]) / s
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        out[0], out[1], out[2], out[3] = (R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, \
            (R[0, 2] + R[2, 0]) / s
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        out[0], out[1], out[2], out[3] = (R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, \
            (R[1, 2] + R[2, 1]) / s
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        out[0], out[1], out[2], out[3] = (R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, \
            (R[1, 2] + R[2, 1]) / s, 0.25 * s
    norm = np.sqrt(out[0] * out[0] + out[1] * out[1] + out[2] * out[2] + out[3] * out[3])
    sign = 1.0 if out[0] / norm >= 0.0 else -1.0
    for a in range(4):
        out[a] = sign * (out[a] / norm)


@njit(cache=True)
def wrench_sum_world(g, f):
    """Sum over bodies of the wrenches f (N+1, 6) (frame j, about O_j) in the world frame about O_0."""
    out = np.zeros(6)
    F = np.zeros(3)
    Mo = np.zeros(3)
    r = np.zeros(3)
    for j in range(g.shape[0]):
        for a in range(3):
            F[a] = g[j, a, 0] * f[j, 0] + g[j, a, 1] * f[j, 1] + g[j, a, 2] * f[j, 2]
            Mo[a] = g[j, a, 0] * f[j, 3] + g[j, a, 1] * f[j, 4] + g[j, a, 2] * f[j, 5]
            r[a] = g[j, a, 3] - g[0, a, 3]
        out[0] += F[0]
        out[1] += F[1]
        out[2] += F[2]
        out[3] += Mo[0] + r[1] * F[2] - r[2] * F[1]
        out[4] += Mo[1] + r[2] * F[0] - r[0] * F[2]
        out[5] += Mo[2] + r[0] * F[1] - r[1] * F[0]
    return out


@njit(cache=True)
def pack_outputs(parent, buf, q_rest, passive, out):
    """The sim/state fields of the evaluation held in the Data buffer, packed into out (see output_layout):
    q, qd, qdd, tau (n,); strain (n_p,) = q - q_rest of the passive joints; base_pos (3,) world m; base_quat
    (4,) (w, x, y, z), w >= 0; base_twist (6,) base frame; base_wrench (6,); ext_wrench (6,) = sum of f_ext
    in the world frame about O_0."""
    nb = parent.shape[0]
    n = nb - 1
    (g, eta, Xj, AdJ, zeta, f_ext, f_gravity, M_added, Mstar, Pistar, H, eta_d, q, qd, qdd, tau,
     base_pose, base_twist, base_acc, base_wrench) = _data_views(nb, n, buf)
    o = 0
    for arr in (q, qd, qdd, tau):
        for k in range(n):
            out[o + k] = arr[k]
        o += n
    for i in range(passive.shape[0]):
        out[o + i] = q[passive[i]] - q_rest[passive[i]]
    o += passive.shape[0]
    for a in range(3):
        out[o + a] = g[0, a, 3]
    o += 3
    _matrix_to_quat(g[0, :3, :3], out[o:o + 4])
    o += 4
    for a in range(6):
        out[o + a] = eta[0, a]
        out[o + 6 + a] = base_wrench[a]
    o += 12
    ext = wrench_sum_world(g, f_ext)
    for a in range(6):
        out[o + a] = ext[a]


# ----------------------------------------------------------------------------------------- planning
class TrackingSpring(JointLaw):
    """Spring-damper about a moving reference: ``tau = -k (r - ratio theta(t)) - mu (r_d - ratio theta_d(t))``
    (N m or N), with (theta, theta_d) from the motion law ``source`` (e.g. a fin driven through a linkage by
    a servo: k N m/rad, mu N m s/rad, ratio rad/rad). A Python joint law everywhere, evaluated in the kernel
    by the fused path when ``source`` has a kernel form."""

    def __init__(self, source: MotionLaw, ratio: float, k: float, mu: float):
        self.source = source
        self.ratio = float(ratio)
        self.k = float(k)
        self.mu = float(mu)

    def torque(self, t: float, r: float, r_d: float) -> float:
        theta, theta_d, _ = self.source.evaluate(t)
        return -self.k * (r - self.ratio * theta) - self.mu * (r_d - self.ratio * theta_d)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, ratio={self.ratio}, k={self.k}, mu={self.mu})"


def _kernel_motion_law(law):
    """(kernel-form law, scale) of a motion law: the law itself or its ``fused_form()`` if that has a kernel
    form, with scale 1.0; for a :class:`ScaledMotion` the kernel form of its source and scale = ratio (the
    product of the ratios of nested ScaledMotions: equal to the Python path's numbers to rounding only, one
    level exactly). A held law is returned as itself, so its values are read live at every call. None if the
    law has no kernel form."""
    scale = 1.0
    while type(law) is ScaledMotion:
        scale *= law.ratio
        law = law.source
    if type(law) in _KERNEL_LAWS:
        return law, scale
    form = getattr(law, "fused_form", None)
    if form is not None:
        law = form()
        if type(law) in _KERNEL_LAWS:
            return law, scale
    return None


def _kernel_joint_law(law):
    """The TrackingSpring equivalent of a Python joint law (itself or its ``fused_form()``), or None."""
    form = law if type(law) is TrackingSpring else getattr(law, "fused_form", lambda: None)()
    if type(form) is TrackingSpring and _kernel_motion_law(form.source) is not None:
        return form
    return None


def _empty_force_args() -> tuple:
    """Empty argument slots (no body) with the types of the plug-ins' ``kernel_args()``, KERNEL_KINDS order."""
    i0, f1, f2, f3 = (np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros((0, 3)), np.zeros((0, 3, 3)))
    aero = (i0, np.zeros((0, 1, 3)), np.zeros((0, 1)), np.zeros((0, 1)), f2, f2, 0.0, 0, np.zeros((0, 6, 6)),
            np.zeros((0, 6)))
    buoyancy = (i0, f1, f2, f1, 0.0, np.zeros(3), 0.0, f2)
    added_mass = (i0, np.zeros((0, 6, 6)))
    drag = (i0, f3, f2, f1, np.zeros((0, 6)), np.zeros((0, 6)), 0.0, np.zeros((0, 6)))
    lift = (i0, f2, f2, f2, f1, f1, f1, f1, f1, 0.0, 0.0, np.zeros((0, 6)))
    return aero, buoyancy, added_mass, drag, lift


def fused_unsupported(model: Model, integrator: str) -> str | None:
    """Why ``model`` cannot take the fused path with ``integrator`` (one line), or None if it can."""
    if integrator not in FUSED_METHODS:
        return f"integrator {integrator!r} (the fused path is RK4 or ROSW)"
    if model.base_mode == "imposed" and type(model.base_motion) is not StaticBase:
        return f"imposed base motion {type(model.base_motion).__name__} is not a StaticBase"
    for k, law in model.motion_laws.items():
        if _kernel_motion_law(law) is None:
            return f"joint {model.joint_names[k]}: motion law {type(law).__name__} has no kernel form"
    for k, law in model.python_laws:
        if _kernel_joint_law(law) is None:
            return f"joint {model.joint_names[k]}: joint law {type(law).__name__} has no kernel form"
    kinds = []
    for force_model in model.force_models:
        kind = getattr(force_model, "fused_kernel", None)
        if kind not in KERNEL_KINDS or not hasattr(force_model, "kernel_args"):
            return f"force model {type(force_model).__name__} has no fused kernel"
        if kind in kinds:
            return f"two force models of kernel kind {kind!r}"
        kinds.append(kind)
    return None


class FusedStepper:
    """The fused path for one Simulation (its Model, Data and state layout); see :func:`fused_run`.

    ``laws`` (the kernel's law table): act_index (n_a,) actuated joints; law_kind (n_a + n_s,) LAW_*;
    law_par (n_a + n_s, 4); poly (n_a + n_s, 3, P); poly_len (n_a + n_s, 3) -- rows 0..n_a-1 the actuated
    joints' laws, rows n_a.. the sources of the tracking springs; spring_index (n_s,) their joints;
    spring_par (n_s, 3) (k, mu, ratio); source_index (n_s,) = 0..n_s-1 (outputs of the source rows);
    law_scale (n_a + n_s,) each row's factor (a ScaledMotion's ratio, else 1)."""

    def __init__(self, model: Model, data, passive_index: np.ndarray, fixed_pose: np.ndarray,
                 integrator: str = "rk4", jacobian: np.ndarray | None = None, w_inverse: np.ndarray | None = None,
                 refresh: np.ndarray | None = None, groups: np.ndarray | None = None,
                 branch: np.ndarray | None = None):
        self.model, self.data = model, data
        self.method = FUSED_METHODS[integrator]
        self.J = np.zeros((0, 0)) if jacobian is None else np.ascontiguousarray(jacobian, dtype=float)
        self.W_inv = np.zeros((0, 0)) if w_inverse is None else np.ascontiguousarray(w_inverse, dtype=float)
        # (steps since the last Jacobian refresh, steps between refreshes, evaluations spent refreshing)
        self.refresh = np.zeros(3, dtype=np.int64) if refresh is None else refresh
        self.groups = np.zeros((0, 0), dtype=np.int64) if groups is None else groups
        self.branch = np.zeros(0, dtype=np.int64) if branch is None else branch
        acts = sorted(model.motion_laws)
        springs = [(k, _kernel_joint_law(law)) for k, law in model.python_laws]
        forms = [_kernel_motion_law(model.motion_laws[k]) for k in acts]
        forms += [_kernel_motion_law(spring.source) for _, spring in springs]
        rows = [law for law, _ in forms]
        law_scale = np.array([scale for _, scale in forms], dtype=float)
        n_rows = len(rows)
        law_kind = np.zeros(n_rows, dtype=np.int64)
        self.law_par = np.zeros((n_rows, 4))
        width = max([law.coefficients.size for law in rows if type(law) is Polynomial], default=1)
        poly = np.zeros((n_rows, 3, width))        # coefficients of r, r_d, r_dd (rad/s^k or m/s^k)
        poly_len = np.ones((n_rows, 3), dtype=np.int64)
        self._held = []                            # [(row, law)] values read once per call
        for row, law in enumerate(rows):
            if type(law) is Sinusoid:
                law_kind[row] = LAW_SINUSOID
                self.law_par[row] = (law.amplitude, law.omega, law.phase, law.offset)
            elif type(law) is RampedSinusoid:
                law_kind[row] = LAW_RAMPED_SINUSOID
                self.law_par[row] = (law.amplitude, law.omega, law.phase, law.ramp_time)
            elif type(law) is Polynomial:
                law_kind[row] = LAW_POLYNOMIAL
                for d, p in enumerate((law._poly, law._d1, law._d2)):
                    coef = np.asarray(p.coef, dtype=float)
                    poly[row, d, :coef.size] = coef
                    poly_len[row, d] = coef.size
            else:
                law_kind[row] = LAW_HELD
                self._held.append((row, law))
        n_s = len(springs)
        spring_par = np.array([(s.k, s.mu, s.ratio) for _, s in springs], dtype=float).reshape(n_s, 3)
        self.laws = (np.array(acts, dtype=np.int64), law_kind, self.law_par, poly, poly_len,
                     np.array([k for k, _ in springs], dtype=np.int64), spring_par, np.arange(n_s, dtype=np.int64),
                     law_scale)
        self.scratch = (np.zeros(model.n), np.zeros(model.n), np.zeros(n_s), np.zeros(n_s), np.zeros(n_s))
        self.passive = np.ascontiguousarray(passive_index, dtype=np.int64)
        self.mode = model._mode_code
        if self.mode == 2:
            pose, twist, acc = model.base_motion.evaluate(0.0)
            self.held_pose = np.array(pose, dtype=float)
            self.held_twist = np.array(twist, dtype=float)
            self.acc_in = np.array(acc, dtype=float)
        else:
            self.held_pose = np.array(fixed_pose, dtype=float)
            self.held_twist = np.zeros(6)
            self.acc_in = np.zeros(6)
        self.has_forces = bool(model.force_models)
        slots = list(_empty_force_args())
        for force_model in model.force_models:
            slot = KERNEL_KINDS.index(force_model.fused_kernel)
            slots[slot] = tuple(np.ascontiguousarray(a) if isinstance(a, np.ndarray) else a
                                for a in force_model.kernel_args())
        self.forces = tuple(slots)
        self.cache_t = np.zeros(2)                 # (t of fsal s, valid flag)
        self.cache_tau = np.zeros(model.n)
        self.cache_par = np.zeros_like(self.law_par)
        self.work = None
        self.fsal = None
        self._one_time = np.zeros(1)           # advance(): one record, its time (s) ...
        self._no_outputs = np.zeros((1, 0))    # ... and no outputs packed

    def set_fixed_pose(self, pose: np.ndarray) -> None:
        """New pose (4, 4) of a fixed base (after Simulation.set_state)."""
        if self.mode == 1:
            self.held_pose[:] = pose
        self.invalidate()

    def invalidate(self) -> None:
        """Forget the kept derivative (the state was set from outside)."""
        self.cache_t[1] = 0.0

    def valid_at(self, t: float, y: np.ndarray, tau_applied: np.ndarray) -> bool:
        """Whether Data holds the evaluation at (t, y) with these applied torques and the current law values."""
        if self.work is None:
            return False
        if self._held:
            self._read_held()
        return inputs_match(self.cache_t, t, self.work[4], y, self.cache_tau, tau_applied, self.cache_par,
                            self.law_par)

    def _read_held(self) -> None:
        for row, law in self._held:
            self.law_par[row, :3] = law.evaluate(0.0)

    def _prepare(self, t: float, y: np.ndarray) -> None:
        if self.work is None or self.work.shape[1] != y.shape[0]:
            self.work = np.zeros((5, y.shape[0]))
            self.fsal = np.zeros(y.shape[0])
            self.invalidate()
        if self._held:
            self._read_held()
        self.data.t = t

    def advance(self, t: float, y: np.ndarray, dt: float, n_steps: int, tau_applied: np.ndarray):
        """n_steps steps from (t, y) (y updated in place); returns (t_end s, evaluations)."""
        return self.record(t, y, dt, n_steps, tau_applied, self._one_time, self._no_outputs, pack=False)

    def record(self, t: float, y: np.ndarray, dt: float, every: int, tau_applied: np.ndarray, times: np.ndarray,
               out: np.ndarray, pack: bool = True):
        """times.shape[0] records of ``every`` steps from (t, y) (y updated in place), see :func:`fused_run`;
        returns (t_end s, evaluations)."""
        self._prepare(t, y)
        model = self.model
        t_end, evaluations = fused_run(
            self.method, every, pack, t, dt, y, self.J, self.W_inv, self.refresh, self.groups, self.branch, times,
            out, model.q_rest, self.work, self.fsal, self.cache_t, self.cache_tau, self.cache_par, model.parent,
            model.kernel_floats, self.data.buffer, model.actuated, model.gravity, self.mode, self.passive, self.laws,
            self.scratch, tau_applied, self.held_pose, self.held_twist, self.acc_in, self.has_forces, self.forces)
        self.data.t = t_end
        return t_end, evaluations
