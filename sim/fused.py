"""Fused time stepping: whole RK4 or ROS34PW2 steps (kinematics, force-model kernels, recursions, state update) in one
compiled call, for the models whose every ingredient has a numba form (docs/sim-core.md, "Fused stepping").

Same numbers as the Python-orchestrated path of :class:`sim.simulation.Simulation` (the same kernels: the force
models' registered kernels, the integrators' arithmetic of sim/integrators.py; compared to ~1e-12 in
tests/sim_core/test_sim_core_fused.py), without the Python around each RK stage (which costs as much as the kernels
for a 17-body flapper).

A model qualifies (:func:`fused_unsupported` returns None) when
- the integrator is "rk4" or "rosw" (sim/integrators.py);
- the base is floating, fixed, or imposed by a :class:`sim.model.StaticBase`;
- every actuated joint's motion law runs a kernel registered in sim/plugins.py (its class names it:
  ``fused_kernel``; the built-in ones are in sim/laws.py: Constant, Sinusoid, Polynomial, RampedSinusoid,
  ExternalMotion, whose parameters, set from outside, are read once per call and held over it, as the Python
  path does since nothing changes them during a step), or has a method ``fused_form()`` returning such a law, or
  is a :class:`sim.laws.ScaledMotion` (``ratio * source(t)``, the kernel multiplying its row by ratio) of a law
  that qualifies;
- every passive joint law is :class:`ViscoElastic` / :class:`Free` (kernel arrays of the model) or runs a
  registered joint-law kernel (e.g. :class:`sim.laws.TrackingSpring`, a spring about ``ratio * source(t)``) or
  has ``fused_form()`` returning one, whose reference motion law, if any, qualifies as above;
- every force model runs a registered kernel (``fused_kernel`` names it, its parameters are packed).
Modal (flexible) bodies qualify too (sim/flexible.py): the evaluation then runs sim/flexible_kernels.py's
recursions in place of the rigid ones, and the force models with ``on_sections`` on the sections' arrays
(:class:`FlexArrays`); the state holds the modal coordinates with the joints' (sim/simulation.py).
The stepper calls the force models, motion laws and joint laws through integer switches over the registries'
slots (docs/extending.md): adding a force model or a law is one file; this module does not change.
Otherwise :class:`Simulation` keeps its Python path.

The derivative of the last call's final state is kept (first-same-as-last): the next call reuses it as its
first stage when the inputs did not change (time, state, applied torques, live law parameters, checked in the
kernel), so a call of n steps costs 4 n evaluations and leaves ``Data`` holding the evaluation at the final
state, which makes ``Simulation.outputs()`` free.

Why switches and not function arguments: numba cannot cache (``cache=True``) a function that receives another
compiled function as an argument (the dispatcher's type is per process), and first-class function values cost
milliseconds per call to pass from Python. So the kernels that call the plug-ins are compiled against the
registries (:func:`bound_kernels`), keyed on their fingerprint.
"""
from __future__ import annotations

import math
import types as pytypes
from typing import NamedTuple

import numpy as np
from numba import njit

from .dynamics import _data_views, _kinematics_packed, _model_views, _recursions_packed
from .flexible import FlexData, Packed as FlexPacked, packed as flex_packed
from .flexible_kernels import flex_backward, flex_forward
from .integrators import (PASSIVE_OFFSET, ROSW_GAMMA_DIAG, invert_w, jacobian_shift, jacobian_store, rk4_stage_input,
                          rk4_update, rosw_stage_input, rosw_stage_solve, rosw_update)
from .laws import Constant, JointLaw, MotionLaw, ScaledMotion, TrackingSpring  # noqa: F401  (TrackingSpring: re-export)
from .model import Model, StaticBase
from .plugins import (FORCE_KERNEL_SIGNATURE, FORCE_KERNELS, JOINT_LAW_SIGNATURE, JOINT_LAWS, MOTION_LAW_SIGNATURE,
                      MOTION_LAWS, Packed)
from .spatial import quat_derivative, quat_to_matrix
from .kernel_cache import discard_stale_kernels

# the force models' kernels register on import: a model built from them needs them in the registry (the measured
# wrench of the closed loop too: its processes then share the shipped robots' compiled stepper, warmed at install).
# All of them, here: a kernel registered later (RayBot's Lighthill slices, imported when RayBot is built) changes the
# registries' fingerprint, and every process that has built a RayBot ran (and the warm-up compiled) a second stepper
from . import aero, hydro, lighthill, measured_wrench  # noqa: E402,F401  (isort: skip)

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Integration methods of the fused path: classical RK4; the Rosenbrock-W ROS34PW2 (sim/integrators.py).
METHOD_RK4, METHOD_ROSW = 0, 1
#: Simulation integrator name -> fused method code.
FUSED_METHODS = {"rk4": METHOD_RK4, "rosw": METHOD_ROSW}


# ----------------------------------------------------------------------------------------- state <-> inputs
@njit(cache=True)
def _state_to_inputs(y, passive_index, floating, q, qd, qe, qed, base_pose, base_twist):
    """Scatter the state y into the joint arrays q, qd (n,) (passive entries), the modal coordinates and rates
    qe, qed (n_e,) (empty for a rigid model) and, for a floating base, the base pose (4, 4) (quaternion
    normalised) and twist (6,). Layout (sim/simulation.py): base (13) | q_p (n_p) | q_e | qd_p | qd_e."""
    n_p = passive_index.shape[0]
    n_e = qe.shape[0]
    velocities = 13 + n_p + n_e
    for i in range(n_p):
        q[passive_index[i]] = y[13 + i]
        qd[passive_index[i]] = y[velocities + i]
    for i in range(n_e):
        qe[i] = y[13 + n_p + i]
        qed[i] = y[velocities + n_p + i]
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
def _state_derivative(y, passive_index, floating, base_acc, qdd, qedd, dy):
    """dy/dt (same layout as y): p_dot = R V (world), quaternion rate, base acceleration, the coordinates' rates
    (passive r_d, modal q_e_d: the velocity block of y), passive r_dd and modal q_e_dd (n_e,)."""
    n_p = passive_index.shape[0]
    n_g = n_p + qedd.shape[0]
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
    for i in range(n_g):
        dy[13 + i] = y[13 + n_g + i]
    for i in range(n_p):
        dy[13 + n_g + i] = qdd[passive_index[i]]
    for i in range(qedd.shape[0]):
        dy[13 + n_g + n_p + i] = qedd[i]


@njit(cache=True)
def pack_modal(y, n_p, out):
    """The modal coordinates then their rates (n_e, n_e) of the state y into the last 2 n_e entries of the
    output row out (the ``modal_q``, ``modal_qd`` fields, after the sim/state ones)."""
    n_g = (y.shape[0] - 13) // 2
    n_e = n_g - n_p
    start = out.shape[0] - 2 * n_e
    for i in range(n_e):
        out[start + i] = y[13 + n_p + i]
        out[start + n_e + i] = y[13 + n_g + n_p + i]


# ----------------------------------------------------------------------------------------- plug-in tables
class KernelTable(NamedTuple):
    """Plug-in instances (force models, or law rows) packed for a kernel switch: kinds (m,) int64 their slots in
    the registry; fpar, ipar every instance's packed parameters, concatenated; offsets (m + 1, 2) int64 the start
    of each instance's in fpar and ipar."""
    kinds: np.ndarray
    fpar: np.ndarray
    ipar: np.ndarray
    offsets: np.ndarray


class LawTable(NamedTuple):
    """The joint laws of a fused model. ``motions``: the rows of motion laws (their kernel forms): rows
    0..n_a-1 the actuated joints' (``act_index`` (n_a,) their joints), then one row per compiled joint law, its
    reference (a zero :class:`Constant` for a law without one); ``scale`` (rows,) each row's factor (a
    ScaledMotion's ratio, else 1: exact). ``joints``: the compiled joint laws (``joint_index`` (n_j,) their
    joints), added to the applied torques in this order (the Python path's, ``Model.python_laws``)."""
    motions: KernelTable
    scale: np.ndarray
    act_index: np.ndarray
    joints: KernelTable
    joint_index: np.ndarray


class Scratch(NamedTuple):
    """Work arrays of an evaluation: qdd_in (n,) the imposed accelerations, tau_eff (n,) applied + joint-law
    torques."""
    qdd_in: np.ndarray
    tau_eff: np.ndarray



class FlexArrays(NamedTuple):
    """A model's modal bodies for the stepper (sim/flexible.py, docs/flexible.md; a rigid model passes None, and
    its stepper is compiled without them): ``model`` the packed modal bodies (:class:`sim.flexible.Packed`); the
    evaluation's modal coordinates, rates, accelerations qe, qed, qedd (n_e,) and work arrays (sim.flexible.FlexData: S, C, E,
    Pe, Mt, Pt, EinvC, EinvP; the sections' sec_A, sec_J, sec_eta, sec_nu, g_sec, f_sec, M_sec); ``forces`` the
    KernelTable of the force models on sections (their kernels receive the section arrays,
    ``ForceModel.on_sections``)."""
    model: FlexPacked
    qe: np.ndarray
    qed: np.ndarray
    qedd: np.ndarray
    S: np.ndarray
    C: np.ndarray
    E: np.ndarray
    Pe: np.ndarray
    Mt: np.ndarray
    Pt: np.ndarray
    EinvC: np.ndarray
    EinvP: np.ndarray
    sec_A: np.ndarray
    sec_J: np.ndarray
    sec_eta: np.ndarray
    sec_nu: np.ndarray
    g_sec: np.ndarray
    f_sec: np.ndarray
    M_sec: np.ndarray
    forces: KernelTable



# ----------------------------------------------------------------------------------------- step bookkeeping
@njit(cache=True)
def inputs_match(cache_t, t, y_cached, y, cache_tau, tau, cache_par, law_par):
    """Whether the kept evaluation (cache_t = (t s, valid flag)) was made at time t, state y, applied torques
    tau and motion-law parameters law_par (LawTable.motions.fpar)."""
    if cache_t[1] != 1.0 or cache_t[0] != t or y.shape[0] != y_cached.shape[0]:
        return False
    for i in range(y.shape[0]):
        if y_cached[i] != y[i]:
            return False
    for i in range(tau.shape[0]):
        if cache_tau[i] != tau[i]:
            return False
    for i in range(law_par.shape[0]):
        if cache_par[i] != law_par[i]:
            return False
    return True


@njit(cache=True)
def normalize_quaternion(y):
    """Renormalise in place the base quaternion y[3:7] of a state y (after every step, on both paths)."""
    norm = math.sqrt(y[3] * y[3] + y[4] * y[4] + y[5] * y[5] + y[6] * y[6])
    for i in range(3, 7):
        y[i] /= norm


@njit(cache=True)
def _end_of_step(y, tmp):
    """Renormalise the quaternion of the new state y and copy y into tmp (the state of the evaluation that ends
    the step)."""
    normalize_quaternion(y)
    for i in range(y.shape[0]):
        tmp[i] = y[i]


@njit(cache=True)
def _keep_inputs(t, y, work, tau_in, law_par, cache_t, cache_tau, cache_par):
    """Remember the inputs of the kept derivative (see :func:`inputs_match`)."""
    y_cached = work[4]
    for i in range(y.shape[0]):
        y_cached[i] = y[i]
    for i in range(tau_in.shape[0]):
        cache_tau[i] = tau_in[i]
    for i in range(law_par.shape[0]):
        cache_par[i] = law_par[i]
    cache_t[0] = t
    cache_t[1] = 1.0


# ----------------------------------------------------------------------------------------- the stepping kernels
@njit(FORCE_KERNEL_SIGNATURE, cache=True)
def _no_force(t, g, eta, f_ext, M_added, fpar, ipar):
    """The kernel of an empty slot of the force switch (never called: no force model has its kind)."""


@njit(MOTION_LAW_SIGNATURE, cache=True)
def _no_motion(t, fpar, ipar):
    """The kernel of an empty slot of the motion-law switch (never called)."""
    return 0.0, 0.0, 0.0


@njit(JOINT_LAW_SIGNATURE, cache=True)
def _no_joint_law(t, r, r_d, ref_r, ref_rd, ref_rdd, fpar, ipar):
    """The kernel of an empty slot of the joint-law switch (never called)."""
    return 0.0


def _stepper_templates(fingerprint):
    """The stepping kernels that call the plug-in kernels, as plain functions: :func:`bound_kernels` compiles them
    against the registries (the globals ``_FORCE_0`` .. ``_FORCE_15``, ``_MOTION_0`` .., ``_JOINT_0`` .. set to
    their kernels). Each names the registries' ``fingerprint``, its only closure variable: numba keys a cached
    closure on the values of its closure variables, so the code compiled for one registry is never loaded for
    another, and a process with the shipped registries loads the code the warm-up compiled. They call one another
    by their global names (the bound dispatchers), never as closure variables."""

    def _apply_forces_(t, g, eta, f_ext, M_added, forces):
        """Every force model of the model (forces: a KernelTable), in its order, on its slice of the packed
        parameters."""
        fingerprint
        for m in range(forces.kinds.shape[0]):
            fp = forces.fpar[forces.offsets[m, 0]:forces.offsets[m + 1, 0]]
            ip = forces.ipar[forces.offsets[m, 1]:forces.offsets[m + 1, 1]]
            kind = forces.kinds[m]
            if kind == 0:
                _FORCE_0(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 1:
                _FORCE_1(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 2:
                _FORCE_2(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 3:
                _FORCE_3(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 4:
                _FORCE_4(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 5:
                _FORCE_5(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 6:
                _FORCE_6(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 7:
                _FORCE_7(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 8:
                _FORCE_8(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 9:
                _FORCE_9(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 10:
                _FORCE_10(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 11:
                _FORCE_11(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 12:
                _FORCE_12(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 13:
                _FORCE_13(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 14:
                _FORCE_14(t, g, eta, f_ext, M_added, fp, ip)
            elif kind == 15:
                _FORCE_15(t, g, eta, f_ext, M_added, fp, ip)

    def _motion_law_(kind, t, fp, ip):
        """(r, r_d, r_dd) of the motion-law kernel in slot ``kind`` with parameters (fp, ip) at t (s)."""
        fingerprint
        if kind == 0:
            return _MOTION_0(t, fp, ip)
        elif kind == 1:
            return _MOTION_1(t, fp, ip)
        elif kind == 2:
            return _MOTION_2(t, fp, ip)
        elif kind == 3:
            return _MOTION_3(t, fp, ip)
        elif kind == 4:
            return _MOTION_4(t, fp, ip)
        elif kind == 5:
            return _MOTION_5(t, fp, ip)
        elif kind == 6:
            return _MOTION_6(t, fp, ip)
        elif kind == 7:
            return _MOTION_7(t, fp, ip)
        elif kind == 8:
            return _MOTION_8(t, fp, ip)
        elif kind == 9:
            return _MOTION_9(t, fp, ip)
        elif kind == 10:
            return _MOTION_10(t, fp, ip)
        elif kind == 11:
            return _MOTION_11(t, fp, ip)
        elif kind == 12:
            return _MOTION_12(t, fp, ip)
        elif kind == 13:
            return _MOTION_13(t, fp, ip)
        elif kind == 14:
            return _MOTION_14(t, fp, ip)
        return _MOTION_15(t, fp, ip)

    def _joint_law_(kind, t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip):
        """Torque (N m or N) of the joint-law kernel in slot ``kind`` (its arguments: sim.plugins.JOINT_LAW_SIGNATURE)."""
        fingerprint
        if kind == 0:
            return _JOINT_0(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 1:
            return _JOINT_1(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 2:
            return _JOINT_2(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 3:
            return _JOINT_3(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 4:
            return _JOINT_4(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 5:
            return _JOINT_5(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 6:
            return _JOINT_6(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 7:
            return _JOINT_7(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 8:
            return _JOINT_8(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 9:
            return _JOINT_9(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 10:
            return _JOINT_10(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 11:
            return _JOINT_11(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 12:
            return _JOINT_12(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 13:
            return _JOINT_13(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        elif kind == 14:
            return _JOINT_14(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)
        return _JOINT_15(t, r, r_d, ref_r, ref_rd, ref_rdd, fp, ip)

    def _motion_row_(t, laws, row):
        """(r, r_d, r_dd) at t (s) of row ``row`` of the law table (LawTable), times the row's scale."""
        fingerprint
        m = laws.motions
        r, r_d, r_dd = _motion_law(m.kinds[row], t, m.fpar[m.offsets[row, 0]:m.offsets[row + 1, 0]],
                                   m.ipar[m.offsets[row, 1]:m.offsets[row + 1, 1]])
        scale = laws.scale[row]
        return scale * r, scale * r_d, scale * r_dd

    def _evaluate_(t, y, dy, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
                   held_pose, held_twist, acc_in, forces, flex):
        """dy/dt (Simulation state layout) at (t, y) with the hybrid algorithm (Porez et al. 2014, section III):
        motion laws -> kinematics -> force-model kernels -> joint-law kernels -> recursions, all results left in
        the Data buffer. laws: a LawTable; scratch: a Scratch; held_pose (4, 4), held_twist (6,), acc_in (6,):
        base of a fixed / static imposed base; forces: a KernelTable; flex: a FlexArrays (a model with modal
        bodies runs sim/flexible_kernels.py's recursions and the force models on sections, as
        sim.flexible.flexible_step does)."""
        fingerprint
        nb = parent.shape[0]
        n = nb - 1
        v = _data_views(nb, n, buf)
        q, qd, base_pose, base_twist = v.q, v.qd, v.base_pose, v.base_twist
        floating = base_mode == 0
        # flex is None for a rigid model: numba prunes every `flex is (not) None` branch at compile time, so a rigid
        # model's stepper holds none of the modal recursions (compiling them tripled its compile time)
        if flex is None:
            no_modes = np.empty(0)
            _state_to_inputs(y, passive, floating, q, qd, no_modes, no_modes, base_pose, base_twist)
        else:
            _state_to_inputs(y, passive, floating, q, qd, flex.qe, flex.qed, base_pose, base_twist)
        n_a = laws.act_index.shape[0]
        for i in range(n_a):
            k = laws.act_index[i]
            r, r_d, r_dd = _motion_row(t, laws, i)
            q[k] = r
            qd[k] = r_d
            scratch.qdd_in[k] = r_dd
        if not floating:
            for a in range(4):
                for b in range(4):
                    base_pose[a, b] = held_pose[a, b]
            for a in range(6):
                base_twist[a] = held_twist[a]
        m = _model_views(nb, n, mf)
        if flex is not None:
            pk = flex.model
            flex_forward(parent, m.joint_axis, pk.placement, pk.modal_of, pk.mode0, pk.sec0, pk.X, pk.Psi, pk.Xa,
                         pk.psi_a, q, qd, flex.qe, flex.qed, base_pose, base_twist, v.g, v.Xj,
                         v.AdJ, v.eta, v.zeta, flex.S, flex.sec_A, flex.sec_J, flex.sec_eta, flex.sec_nu, flex.g_sec)
        else:
            _kinematics_packed(parent, mf, buf)
        if forces.kinds.shape[0] > 0 or flex is not None:     # flex_backward adds the sections' wrenches to f_ext
            v.f_ext[:] = 0.0
            v.f_gravity[:] = 0.0
            v.M_added[:] = 0.0
            _apply_forces(t, v.g, v.eta, v.f_ext, v.M_added, forces)
        if flex is not None:
            flex.f_sec[:] = 0.0
            flex.M_sec[:] = 0.0
            _apply_forces(t, flex.g_sec, flex.sec_eta, flex.f_sec, flex.M_sec, flex.forces)
        tau_passive = tau_in
        joints = laws.joints
        if joints.kinds.shape[0] > 0:
            # the joint laws' torques added to the applied torques, as hybrid_step does for Python joint laws
            tau_eff = scratch.tau_eff
            for k in range(n):
                tau_eff[k] = tau_in[k]
            for i in range(joints.kinds.shape[0]):
                k = laws.joint_index[i]
                ref_r, ref_rd, ref_rdd = _motion_row(t, laws, n_a + i)
                tau_eff[k] += _joint_law(joints.kinds[i], t, q[k], qd[k], ref_r, ref_rd, ref_rdd,
                                         joints.fpar[joints.offsets[i, 0]:joints.offsets[i + 1, 0]],
                                         joints.ipar[joints.offsets[i, 1]:joints.offsets[i + 1, 1]])
            tau_passive = tau_eff
        if flex is not None:
            pk = flex.model
            flex_backward(parent, m.joint_axis, m.inertia, actuated, m.law_k, m.law_mu, m.law_r0, pk.modal_of,
                          pk.mode0, pk.sec0, pk.w, pk.Ms, pk.K, pk.D, gravity, base_mode, acc_in, q, qd,
                          flex.qe, flex.qed, scratch.qdd_in, tau_passive, True, v.g, v.AdJ, v.eta, v.zeta, flex.S,
                          v.f_ext, v.f_gravity, v.M_added, flex.sec_A, flex.sec_J, flex.sec_eta, flex.sec_nu,
                          flex.g_sec, flex.f_sec, flex.M_sec, v.Mstar, v.Pistar, flex.C, flex.E, flex.Pe, flex.Mt,
                          flex.Pt, flex.EinvC, flex.EinvP, v.H, v.eta_d, v.qdd, v.tau, flex.qedd, v.base_acc,
                          v.base_wrench)
        else:
            _recursions_packed(parent, mf, buf, actuated, scratch.qdd_in, tau_passive, gravity, base_mode, acc_in,
                               True)
        if flex is None:
            _state_derivative(y, passive, floating, v.base_acc, v.qdd, no_modes, dy)
        else:
            _state_derivative(y, passive, floating, v.base_acc, v.qdd, flex.qedd, dy)

    def _first_stage_(t, y, k1, fsal, work, cache_t, cache_tau, cache_par, parent, mf, buf, actuated, gravity,
                      base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, forces, flex):
        """k1 = f(t, y): the kept derivative when the inputs match (first-same-as-last), else a new evaluation;
        returns the number of evaluations made (0 or 1)."""
        fingerprint
        if inputs_match(cache_t, t, work[4], y, cache_tau, tau_in, cache_par, laws.motions.fpar):
            for i in range(y.shape[0]):
                k1[i] = fsal[i]
            return 0
        _evaluate(t, y, k1, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
                  held_pose, held_twist, acc_in, forces, flex)
        return 1

    def _rk4_steps_(n_steps, t, dt, y, work, fsal, tmp, parent, mf, buf, actuated, gravity, base_mode, passive,
                    laws, scratch, tau_in, held_pose, held_twist, acc_in, forces, flex):
        """n_steps RK4 steps (sim.integrators: rk4_stage_input, rk4_update, the arithmetic of rk4_step) from
        (t, y) with k1 = work[0] already f(t, y); y updated in place (quaternion renormalised after every step, as
        ``Simulation._normalize``). On return ``buf`` holds the evaluation at the final state, fsal its derivative
        (= work[0] when n_steps == 0); returns t_end (s). One evaluation call site (stages 2-4, then the next
        step's first stage at the new state): numba inlines every site, and each costs compile time."""
        fingerprint
        ny = y.shape[0]
        for step in range(n_steps):
            if step > 0:
                for i in range(ny):
                    work[0, i] = fsal[i]
            for stage in range(1, 5):
                if stage < 4:
                    t_stage = rk4_stage_input(stage, t, dt, y, work, tmp)
                    target = work[stage]
                else:
                    rk4_update(y, dt, work, y)
                    _end_of_step(y, tmp)
                    t = t + dt
                    t_stage = t
                    target = fsal
                _evaluate(t_stage, tmp, target, parent, mf, buf, actuated, gravity, base_mode, passive, laws,
                          scratch, tau_in, held_pose, held_twist, acc_in, forces, flex)
        if n_steps == 0:
            for i in range(ny):
                fsal[i] = work[0, i]
        return t

    def _refresh_jacobian_(t, y, f0, J, W_inv, dt, groups, branch, tmp, column, parent, mf, buf, actuated,
                           gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, forces,
                           flex):
        """:func:`sim.integrators.refresh_jacobian` of J at (t, y) (f0 = f(t, y)) and W_inv = (I - dt gamma J)^-1,
        in place, with the same kernels; returns the evaluations made."""
        fingerprint
        for g in range(groups.shape[0]):
            jacobian_shift(y, groups[g], tmp)
            _evaluate(t, tmp, column, parent, mf, buf, actuated, gravity, base_mode, passive, laws, scratch,
                      tau_in, held_pose, held_twist, acc_in, forces, flex)
            jacobian_store(J, groups[g], branch, column, f0)
        invert_w(J, dt * ROSW_GAMMA_DIAG, W_inv)
        return groups.shape[0]

    def _rosw_steps_(n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf,
                     actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in,
                     forces, flex):
        """n_steps ROS34PW2 steps (sim.integrators: rosw_stage_input, rosw_stage_solve, rosw_update, the
        arithmetic of rosw_step) from (t, y), with work[0] already f(t, y); J, W_inv (2 n_g, 2 n_g) the coordinate
        block's Jacobian and (I - h gamma J)^-1; refresh (3,) int64: (steps since J was refreshed, steps between
        refreshes (0: never), evaluations spent refreshing, added to); groups, branch: see
        :func:`sim.integrators.column_groups`. Same contract as :func:`_rk4_steps` otherwise."""
        fingerprint
        ny = y.shape[0]
        n2 = ny - PASSIVE_OFFSET
        k = work[0:4]
        coupling = np.empty(n2)
        rhs = np.empty(n2)
        column = np.empty(ny)
        for step in range(n_steps):
            if step > 0:
                for a in range(ny):
                    k[0, a] = fsal[a]
            if refresh[1] > 0 and refresh[0] >= refresh[1]:
                refresh[2] += _refresh_jacobian(t, y, k[0], J, W_inv, dt, groups, branch, tmp, column, parent, mf,
                                                buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in,
                                                held_pose, held_twist, acc_in, forces, flex)
                refresh[0] = 0
            refresh[0] += 1
            for i in range(5):
                # stage i (0: k[0] is f(t, y) already), then (i == 4) the update and the evaluation at the new state
                if i == 4:
                    rosw_update(y, dt, k, y)
                    _end_of_step(y, tmp)
                    t = t + dt
                    t_stage = t
                    target = fsal
                elif i > 0:
                    t_stage = rosw_stage_input(i, t, dt, y, k, tmp)
                    target = k[i]
                if i > 0:       # one evaluation call site (each inlined copy costs compile time)
                    _evaluate(t_stage, tmp, target, parent, mf, buf, actuated, gravity, base_mode, passive, laws,
                              scratch, tau_in, held_pose, held_twist, acc_in, forces, flex)
                if i == 4:
                    break
                rosw_stage_solve(i, dt, J, W_inv, k, coupling, rhs)
        if n_steps == 0:
            for a in range(ny):
                fsal[a] = work[0, a]
        return t

    def _steps_(method, n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf,
                actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, forces,
                flex):
        """n_steps of the method (METHOD_RK4: classical RK4; METHOD_ROSW: ROS34PW2 with J, W_inv, refresh)."""
        fingerprint
        if method == METHOD_ROSW:
            return _rosw_steps(n_steps, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf,
                               buf, actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose,
                               held_twist, acc_in, forces, flex)
        return _rk4_steps(n_steps, t, dt, y, work, fsal, tmp, parent, mf, buf, actuated, gravity, base_mode,
                          passive, laws, scratch, tau_in, held_pose, held_twist, acc_in, forces, flex)

    def fused_run_(method, every, pack, t, dt, y, J, W_inv, refresh, groups, branch, times, out, q_rest, work, fsal,
                   cache_t, cache_tau, cache_par, parent, mf, buf, actuated, gravity, base_mode, passive, laws,
                   scratch, tau_in, held_pose, held_twist, acc_in, forces, flex):
        """times.shape[0] records of ``every`` steps of dt (s) of the method (METHOD_*) from (t, y), y updated in
        place; after each record's last step its time (s) goes to times (records,) and, when ``pack``, the outputs
        (:func:`pack_outputs`) to out (records, output size): what a Python loop of ``step()`` + ``outputs()``
        gives, in one call (``advance`` is one record, unpacked). Returns (t_end, evaluations).

        J, W_inv, refresh, groups, branch: see :func:`_rosw_steps` (empty for RK4). work (5, ny) scratch; fsal
        (ny,): f(t, y) of the previous call's end, reused as the first stage when cache_t[0] (s) == t, cache_t[1]
        == 1 (valid), y unchanged (fsal's state is work[4]), tau_in == cache_tau and law_par == cache_par. On
        return ``buf`` holds the evaluation at (t_end, y_end) and fsal its derivative. The evaluations of Jacobian
        refreshes are counted in refresh[2], not in the returned number. One entry kernel for both uses: each
        entry compiles the whole step again."""
        fingerprint
        tmp = np.empty(y.shape[0])
        evaluations = _first_stage(t, y, work[0], fsal, work, cache_t, cache_tau, cache_par, parent, mf, buf,
                                   actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose,
                                   held_twist, acc_in, forces, flex)
        for r in range(times.shape[0]):
            if r > 0:
                for i in range(y.shape[0]):
                    work[0, i] = fsal[i]
            t = _steps(method, every, t, dt, y, work, fsal, tmp, J, W_inv, refresh, groups, branch, parent, mf, buf,
                       actuated, gravity, base_mode, passive, laws, scratch, tau_in, held_pose, held_twist, acc_in,
                       forces, flex)
            times[r] = t
            if pack:
                pack_outputs(parent, buf, q_rest, passive, out[r])
                pack_modal(y, passive.shape[0], out[r])
            evaluations += 4 * every
        _keep_inputs(t, y, work, tau_in, laws.motions.fpar, cache_t, cache_tau, cache_par)
        return t, evaluations

    return (_apply_forces_, _motion_law_, _joint_law_, _motion_row_, _evaluate_, _first_stage_, _rk4_steps_,
            _refresh_jacobian_, _rosw_steps_, _steps_, fused_run_)


# The names the templates call: placeholders here (for the reader and the linter); bound_kernels() gives each
# set of registries its own namespace where they are the compiled kernels (the _FORCE_*, _MOTION_*, _JOINT_* slots:
# the registered kernels).
_apply_forces = _motion_law = _joint_law = _motion_row = _evaluate = _first_stage = _rk4_steps = None
_refresh_jacobian = _rosw_steps = _steps = None
_FORCE_0 = _FORCE_1 = _FORCE_2 = _FORCE_3 = _FORCE_4 = _FORCE_5 = _FORCE_6 = _FORCE_7 = _no_force
_FORCE_8 = _FORCE_9 = _FORCE_10 = _FORCE_11 = _FORCE_12 = _FORCE_13 = _FORCE_14 = _FORCE_15 = _no_force
_MOTION_0 = _MOTION_1 = _MOTION_2 = _MOTION_3 = _MOTION_4 = _MOTION_5 = _MOTION_6 = _MOTION_7 = _no_motion
_MOTION_8 = _MOTION_9 = _MOTION_10 = _MOTION_11 = _MOTION_12 = _MOTION_13 = _MOTION_14 = _MOTION_15 = _no_motion
_JOINT_0 = _JOINT_1 = _JOINT_2 = _JOINT_3 = _JOINT_4 = _JOINT_5 = _JOINT_6 = _JOINT_7 = _no_joint_law
_JOINT_8 = _JOINT_9 = _JOINT_10 = _JOINT_11 = _JOINT_12 = _JOINT_13 = _JOINT_14 = _JOINT_15 = _no_joint_law
#: The switches: (slot prefix, registry, kernel of an empty slot).
_SWITCHES = (("_FORCE_", FORCE_KERNELS, _no_force), ("_MOTION_", MOTION_LAWS, _no_motion),
             ("_JOINT_", JOINT_LAWS, _no_joint_law))

#: The stepping kernels numba inlines into their callers (at its IR level): a law row is evaluated several times
#: per evaluation, and a call with its two parameter slices costs ~100 ns (measured on a 16-row tree).
_INLINED = ("_motion_row", "_motion_law")

#: fingerprint of the registries -> {name: the stepping kernels compiled against them}
_BOUND: dict[str, dict] = {}


def bound_kernels() -> dict:
    """{name: numba dispatcher} of the stepping kernels (``fused_run`` the entry) compiled against the kernels
    registered now (force models, motion laws, joint laws: sim.plugins.KernelRegistry), and "slots",
    "motion_slots", "joint_slots": {kernel name: its kind in the switch}; made once per registry content and
    process."""
    tables = [(prefix, registry, registry.table(), empty) for prefix, registry, empty in _SWITCHES]
    fingerprint = "-".join(table[2] for _, _, table, _ in tables)
    bound = _BOUND.get(fingerprint)
    if bound is not None:
        return bound
    templates = _stepper_templates(fingerprint)
    called = set().union(*(template.__code__.co_names for template in templates))
    namespace = dict(globals())
    for prefix, registry, (kernels, _, _), empty in tables:
        if f"{prefix}{registry.capacity - 1}" not in called:
            raise RuntimeError(f"the switch {prefix}* of sim/fused.py has fewer than {registry.capacity} slots")
        for slot in range(registry.capacity):
            namespace[f"{prefix}{slot}"] = kernels[slot] if slot < len(kernels) else empty
    bound = {"slots": tables[0][2][1], "motion_slots": tables[1][2][1], "joint_slots": tables[2][2][1]}
    for template in templates:
        if template.__code__.co_freevars != ("fingerprint",):
            raise RuntimeError(f"{template.__name__}: closure variables {template.__code__.co_freevars}, expected "
                               "the fingerprint only")
        name = template.__name__[:-1]
        function = pytypes.FunctionType(template.__code__, namespace, name, template.__defaults__,
                                        (pytypes.CellType(fingerprint),))
        function.__qualname__ = template.__qualname__
        function.__doc__ = template.__doc__
        inline = "always" if name in _INLINED else "never"
        namespace[name] = bound[name] = njit(cache=True, inline=inline)(function)
    _BOUND[fingerprint] = bound
    return bound


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
    v = _data_views(nb, n, buf)
    q, g = v.q, v.g
    o = 0
    for arr in (q, v.qd, v.qdd, v.tau):
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
        out[o + a] = v.eta[0, a]
        out[o + 6 + a] = v.base_wrench[a]
    o += 12
    ext = wrench_sum_world(g, v.f_ext)
    for a in range(6):
        out[o + a] = ext[a]


# ----------------------------------------------------------------------------------------- planning
def _compiled(law) -> bool:
    """Whether a law runs its registered kernel: its own class names one (sim.plugins.Packed.declares_kernel; a
    subclass that does not may compute otherwise) and its parameters are packed."""
    return isinstance(law, Packed) and type(law).declares_kernel() and law.packed is not None


def _kernel_motion_law(law):
    """(kernel-form law, scale) of a motion law: the law itself or its ``fused_form()`` if that runs a registered
    kernel, with scale 1.0; for a :class:`ScaledMotion` the kernel form of its source and scale = ratio (the
    product of the ratios of nested ScaledMotions: equal to the Python path's numbers to rounding only, one level
    exactly). None if the law has no kernel form."""
    scale = 1.0
    while type(law) is ScaledMotion:
        scale *= law.ratio
        law = law.source
    if isinstance(law, MotionLaw) and _compiled(law):
        return law, scale
    form = getattr(law, "fused_form", None)
    if form is not None:
        law = form()
        if isinstance(law, MotionLaw) and _compiled(law):
            return law, scale
    return None


#: The reference row of a joint law without a reference (its kernel receives zeros, as JointLaw.torque passes).
_NO_REFERENCE_LAW = Constant(0.0)


def _kernel_joint_law(law):
    """The kernel form of a Python joint law (itself or its ``fused_form()``) when it runs a registered kernel and
    its reference motion law, if any, has a kernel form; else None."""
    form = law if _compiled(law) else getattr(law, "fused_form", lambda: None)()
    if isinstance(form, JointLaw) and _compiled(form) and (
            form.reference is None or _kernel_motion_law(form.reference) is not None):
        return form
    return None


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
    slots = bound_kernels()["slots"]
    for force_model in model.force_models:
        if getattr(force_model, "fused_kernel", None) not in slots or getattr(force_model, "packed", None) is None:
            return f"force model {type(force_model).__name__} has no registered kernel with packed parameters"
    return None


def kernel_table(instances, slots: dict[str, int], share: bool = False) -> KernelTable:
    """The KernelTable of plug-in instances (each with ``fused_kernel`` and ``packed``). With ``share``, each
    instance's packed arrays become views into the table's (the outputs its kernel writes, e.g. a force model's
    last wrenches, then show the steps of the stepper, as they show those of its Python form); without, the table
    holds a copy (a law may sit in several rows, or in several steppers)."""
    m = len(instances)
    kinds = np.array([slots[x.fused_kernel] for x in instances], dtype=np.int64)
    offsets = np.zeros((m + 1, 2), dtype=np.int64)
    for i, x in enumerate(instances):
        offsets[i + 1] = offsets[i] + (x.packed[0].size, x.packed[1].size)
    fpar = np.concatenate([x.packed[0] for x in instances] + [np.zeros(0)])
    ipar = np.concatenate([x.packed[1] for x in instances] + [np.zeros(0, dtype=np.int64)])
    if share:
        for i, x in enumerate(instances):
            x.packed = (fpar[offsets[i, 0]:offsets[i + 1, 0]], ipar[offsets[i, 1]:offsets[i + 1, 1]])
    return KernelTable(kinds, fpar, ipar, offsets)


def flex_arrays(model: Model, data, section_forces: KernelTable) -> FlexArrays | None:
    """The :class:`FlexArrays` of a model (its packed modal bodies, the work arrays of its FlexData ``data``, the
    force models on sections); None for a rigid model (its stepper is compiled without the modal recursions)."""
    if model.flexible is None:
        return None
    if not isinstance(data, FlexData):
        raise TypeError(f"a model with modal bodies needs a sim.flexible.FlexData, got {type(data).__name__}")
    sec, work = data.sec, data.work
    return FlexArrays(flex_packed(model), data.qe, data.qed, data.qedd, work["S"], work["C"], work["E"], work["Pe"],
                      work["Mt"], work["Pt"], work["EinvC"], work["EinvP"], sec["A"], sec["J"], sec["eta"], sec["nu"],
                      sec["g"], sec["f"], sec["M"], section_forces)


class FusedStepper:
    """The fused path for one Simulation (its Model, Data and state layout); see :func:`fused_run`.

    ``laws``: the :class:`LawTable` of the model's motion and joint laws; ``forces``: the :class:`KernelTable` of
    its force models."""

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
        bound = bound_kernels()
        self._run = bound["fused_run"]
        acts = sorted(model.motion_laws)
        joints = [(k, _kernel_joint_law(law)) for k, law in model.python_laws]
        references = [_NO_REFERENCE_LAW if law.reference is None else law.reference for _, law in joints]
        forms = [_kernel_motion_law(law) for law in [model.motion_laws[k] for k in acts] + references]
        rows = [law for law, _ in forms]
        motions = kernel_table(rows, bound["motion_slots"])
        # rows whose parameters are set from outside between calls (ExternalMotion): (fpar start, stop, law)
        self._live = [(int(motions.offsets[row, 0]), int(motions.offsets[row + 1, 0]), law)
                      for row, law in enumerate(rows) if law.live]
        self.laws = LawTable(motions, np.array([scale for _, scale in forms], dtype=float),
                             np.array(acts, dtype=np.int64), kernel_table([law for _, law in joints],
                                                                          bound["joint_slots"]),
                             np.array([k for k, _ in joints], dtype=np.int64))
        self.scratch = Scratch(np.zeros(model.n), np.zeros(model.n))
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
        on_bodies = [f for f in model.force_models if not getattr(f, "on_sections", False)]
        on_sections = [f for f in model.force_models if getattr(f, "on_sections", False)]
        self.forces = kernel_table(on_bodies, bound["slots"], share=True)
        self.flex = flex_arrays(model, data, kernel_table(on_sections, bound["slots"], share=True))
        self.cache_t = np.zeros(2)                 # (t of fsal s, valid flag)
        self.cache_tau = np.zeros(model.n)
        self.cache_par = np.zeros_like(motions.fpar)
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
        self._read_live()
        return inputs_match(self.cache_t, t, self.work[4], y, self.cache_tau, tau_applied, self.cache_par,
                            self.laws.motions.fpar)

    def _read_live(self) -> None:
        """The current parameters of the live laws into the law table (they hold over a call)."""
        fpar = self.laws.motions.fpar
        for start, stop, law in self._live:
            fpar[start:stop] = law.packed[0]

    def _prepare(self, t: float, y: np.ndarray) -> None:
        if self.work is None or self.work.shape[1] != y.shape[0]:
            self.work = np.zeros((5, y.shape[0]))
            self.fsal = np.zeros(y.shape[0])
            self.invalidate()
        self._read_live()
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
        t_end, evaluations = self._run(
            self.method, every, pack, t, dt, y, self.J, self.W_inv, self.refresh, self.groups, self.branch, times,
            out, model.q_rest, self.work, self.fsal, self.cache_t, self.cache_tau, self.cache_par, model.parent,
            model.kernel_floats, self.data.buffer, model.actuated, model.gravity, self.mode, self.passive, self.laws,
            self.scratch, tau_applied, self.held_pose, self.held_twist, self.acc_in, self.forces, self.flex)
        self.data.t = t_end
        return t_end, evaluations
