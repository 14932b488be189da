"""The hybrid (mixed forward/inverse) Newton-Euler algorithm of a Mobile Multibody System.

Porez, Boyer, Belkhiri, ICRA 2014, section III (restated in docs/theory/hybrid-algorithm.md, whose notation
and signs are used here: M*, Pi*, H, K, alpha, zeta). Three recursions on the tree, O(N):
1. forward kinematics: g_j, eta_j, zeta_j (:func:`_kinematics`);
   then the force models add f_ext / M_added (Python plug-ins);
2. backward recursion of the articulated inertias M*_j and wrenches Pi*_j (:func:`_recursions`);
3. base acceleration (floating: eta_d_0 = -(M*_0)^-1 Pi*_0; fixed: 0; imposed: given) and the second forward
   recursion giving r_dd of passive joints and tau of actuated joints.

All arrays are flat numpy arrays (Model / Data, sim/model.py); the kernels are numba ``@njit(cache=True)``
with explicit loops on 6-vectors (no BLAS, no allocation per body) so that one evaluation costs two kernel
calls and no Python per body.
"""
from __future__ import annotations

import weakref

import numpy as np
from numba import njit

from .model import (DATA_DIMS, DATA_INDEX, DIM_BODIES, DIM_JOINTS, MODEL_DIMS, MODEL_INDEX, Data, DataViews, Model,
                    ModelViews)
from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Joint-axis components below this are treated as zero when classifying a unit twist (revolute/prismatic).
AXIS_ZERO = 1e-12

#: Options of the kernels on every evaluation's path. numpy's error model: a division by zero (a joint of zero
#: articulated inertia H, a singular base inertia) gives inf/nan, which the server's finiteness check (a
#: diverged state is never published) and the user see, instead of a ZeroDivisionError test on every division
#: (measured: 0.3-0.5 us of an 11 us evaluation of the 17-body tree).
_HOT_KERNEL = {"cache": True, "error_model": "numpy"}


@njit(**_HOT_KERNEL)
def _joint_pose(placement, A, r, out):
    """out (4, 4) = placement (4, 4) @ exp(hat(A) r) for a unit twist A (6,) that is a pure rotation
    (0, a) or a pure translation (a, 0). The exponential E is held in scalars (no array per body)."""
    e00, e01, e02, e10, e11, e12, e20, e21, e22 = 1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0
    wx, wy, wz = A[3] * r, A[4] * r, A[5] * r
    theta2 = wx * wx + wy * wy + wz * wz
    if theta2 > 0.0:
        theta = np.sqrt(theta2)
        s = np.sin(theta) / theta
        c = (1.0 - np.cos(theta)) / theta2
        e00 = 1.0 - c * (wy * wy + wz * wz)
        e01 = -s * wz + c * wx * wy
        e02 = s * wy + c * wx * wz
        e10 = s * wz + c * wx * wy
        e11 = 1.0 - c * (wx * wx + wz * wz)
        e12 = -s * wx + c * wy * wz
        e20 = -s * wy + c * wx * wz
        e21 = s * wx + c * wy * wz
        e22 = 1.0 - c * (wx * wx + wy * wy)
    e03, e13, e23 = A[0] * r, A[1] * r, A[2] * r
    for a in range(4):
        p0, p1, p2, p3 = placement[a, 0], placement[a, 1], placement[a, 2], placement[a, 3]
        # the terms of the 4x4 product in its order (the zero entries of E's last row add exact zeros)
        out[a, 0] = p0 * e00 + p1 * e10 + p2 * e20 + p3 * 0.0
        out[a, 1] = p0 * e01 + p1 * e11 + p2 * e21 + p3 * 0.0
        out[a, 2] = p0 * e02 + p1 * e12 + p2 * e22 + p3 * 0.0
        out[a, 3] = p0 * e03 + p1 * e13 + p2 * e23 + p3 * 1.0


@njit(cache=True)
def _ad_inv(X, out):
    """out (6, 6) = Ad_{X^-1} = [[R^T, -R^T hat(p)], [0, R^T]] for X = (R, p) (4, 4)."""
    px, py, pz = X[0, 3], X[1, 3], X[2, 3]
    for a in range(3):
        r0, r1, r2 = X[0, a], X[1, a], X[2, a]  # row a of R^T
        out[a, 0] = r0
        out[a, 1] = r1
        out[a, 2] = r2
        out[a + 3, 3] = r0
        out[a + 3, 4] = r1
        out[a + 3, 5] = r2
        out[a + 3, 0] = 0.0
        out[a + 3, 1] = 0.0
        out[a + 3, 2] = 0.0
        # row a of -R^T hat(p) is p x (row a of R^T)
        out[a, 3] = -(r1 * pz - r2 * py)
        out[a, 4] = -(r2 * px - r0 * pz)
        out[a, 5] = -(r0 * py - r1 * px)


@njit(**_HOT_KERNEL)
def _kinematics(parent, placement, axis, q, qd, base_pose, base_twist, g, Xj, AdJ, eta, zeta):
    """First forward recursion (spec "Kinematics"): g_j = g_i * i g j(r_j); eta_j = Ad_{j g i} eta_i + A_j r_d_j;
    zeta_j = ad_{eta_j}(A_j) r_d_j. Shapes: see sim.model.Data."""
    nb = parent.shape[0]
    for a in range(4):
        for b in range(4):
            g[0, a, b] = base_pose[a, b]
    for a in range(6):
        eta[0, a] = base_twist[a]
        zeta[0, a] = 0.0
    for j in range(1, nb):
        i = parent[j]
        k = j - 1
        A = axis[j]
        _joint_pose(placement[j], A, q[k], Xj[j])
        _ad_inv(Xj[j], AdJ[j])
        for a in range(4):
            for b in range(4):
                acc = 0.0
                for c in range(4):
                    acc += g[i, a, c] * Xj[j, c, b]
                g[j, a, b] = acc
        rd = qd[k]
        for a in range(6):
            acc = 0.0
            for b in range(6):
                acc += AdJ[j, a, b] * eta[i, b]
            eta[j, a] = acc + A[a] * rd
        # zeta = ad_eta(A) rd = (Omega x A_v + V x A_w, Omega x A_w) rd
        vx, vy, vz = eta[j, 0], eta[j, 1], eta[j, 2]
        ox, oy, oz = eta[j, 3], eta[j, 4], eta[j, 5]
        zeta[j, 0] = (oy * A[2] - oz * A[1] + vy * A[5] - vz * A[4]) * rd
        zeta[j, 1] = (oz * A[0] - ox * A[2] + vz * A[3] - vx * A[5]) * rd
        zeta[j, 2] = (ox * A[1] - oy * A[0] + vx * A[4] - vy * A[3]) * rd
        zeta[j, 3] = (oy * A[5] - oz * A[4]) * rd
        zeta[j, 4] = (oz * A[3] - ox * A[5]) * rd
        zeta[j, 5] = (ox * A[4] - oy * A[3]) * rd


@njit(cache=True)
def _congruence_add(Ad, K, out, tmp):
    """out (6, 6) += Ad^T K Ad (tmp (6, 6) scratch) for Ad = [[R, B], [0, R]] (an adjoint: its lower-left
    block is zero, so those terms are skipped) and a symmetric K (the upper triangle is computed and
    mirrored, which keeps out exactly symmetric)."""
    for a in range(6):
        for b in range(3):
            acc = 0.0
            for c in range(3):
                acc += K[a, c] * Ad[c, b]
            tmp[a, b] = acc
        for b in range(3, 6):
            acc = 0.0
            for c in range(6):
                acc += K[a, c] * Ad[c, b]
            tmp[a, b] = acc
    for a in range(6):
        top = 3 if a < 3 else 6
        for b in range(a, 6):
            acc = 0.0
            for c in range(top):
                acc += Ad[c, a] * tmp[c, b]
            out[a, b] += acc
            if b != a:
                out[b, a] += acc


@njit(**_HOT_KERNEL)
def _solve_spd6(M, b, out):
    """out (6,) = M^-1 b for a symmetric positive definite M (6, 6) (Cholesky, no allocation beyond L)."""
    L = np.zeros((6, 6))
    for a in range(6):
        for c in range(a + 1):
            s = M[a, c]
            for k in range(c):
                s -= L[a, k] * L[c, k]
            if a == c:
                L[a, a] = np.sqrt(s)
            else:
                L[a, c] = s / L[c, c]
    y = np.zeros(6)
    for a in range(6):
        s = b[a]
        for k in range(a):
            s -= L[a, k] * y[k]
        y[a] = s / L[a, a]
    for a in range(5, -1, -1):
        s = y[a]
        for k in range(a + 1, 6):
            s -= L[k, a] * out[k]
        out[a] = s / L[a, a]


@njit(**_HOT_KERNEL)
def _recursions(parent, axis, inertia, actuated, law_k, law_mu, law_r0, q, qd, qdd_in, tau_in, gravity,
                base_mode, base_acc_in, g, AdJ, eta, zeta, f_ext, f_gravity, M_added,
                Mstar, Pistar, H, eta_d, qdd, tau, base_acc, base_wrench):
    """Backward recursion, base acceleration and second forward recursion (spec sections "Body dynamics",
    "Backward recursion", "Second forward recursion"; Porez et al. 2014, section III).

    Inputs: qdd_in (n,) accelerations of actuated joints; tau_in (n,) applied torques of passive joints, to
    which the viscoelastic law ``-k (q - r0) - mu qd`` is added; gravity (3,) world frame m/s^2, applied as
    the body wrench M_j [R_j^T g; 0]; base_mode 0 floating / 1 fixed / 2 imposed (then base_acc_in (6,)).
    Outputs: qdd (n,), tau (n,) complete, base_acc (6,), base_wrench (6,) (support on base, base frame).
    """
    nb = parent.shape[0]
    tmp = np.zeros((6, 6))
    K = np.zeros((6, 6))
    P = np.zeros(6)
    v = np.zeros(6)
    MA = np.zeros((nb, 6))
    # Initialise M*_j = M_j + M_added_j and Pi*_j = -ad^T_{eta_j}((M_j + M_added_j) eta_j) - F_ext_j.
    for j in range(nb):
        ga0 = g[j, 0, 0] * gravity[0] + g[j, 1, 0] * gravity[1] + g[j, 2, 0] * gravity[2]
        ga1 = g[j, 0, 1] * gravity[0] + g[j, 1, 1] * gravity[1] + g[j, 2, 1] * gravity[2]
        ga2 = g[j, 0, 2] * gravity[0] + g[j, 1, 2] * gravity[1] + g[j, 2, 2] * gravity[2]
        for a in range(6):
            acc = 0.0
            for b in range(6):
                m = inertia[j, a, b] + M_added[j, a, b]
                Mstar[j, a, b] = m
                acc += m * eta[j, b]
            P[a] = acc
        vx, vy, vz = eta[j, 0], eta[j, 1], eta[j, 2]
        ox, oy, oz = eta[j, 3], eta[j, 4], eta[j, 5]
        # -ad^T(P) = (Omega x P_f, V x P_f + Omega x P_m); gravity wrench = M_j (R^T g, 0).
        Pistar[j, 0] = oy * P[2] - oz * P[1]
        Pistar[j, 1] = oz * P[0] - ox * P[2]
        Pistar[j, 2] = ox * P[1] - oy * P[0]
        Pistar[j, 3] = vy * P[2] - vz * P[1] + oy * P[5] - oz * P[4]
        Pistar[j, 4] = vz * P[0] - vx * P[2] + oz * P[3] - ox * P[5]
        Pistar[j, 5] = vx * P[1] - vy * P[0] + ox * P[4] - oy * P[3]
        for a in range(6):
            fg = inertia[j, a, 0] * ga0 + inertia[j, a, 1] * ga1 + inertia[j, a, 2] * ga2
            Pistar[j, a] -= f_ext[j, a] + f_gravity[j, a] + fg
    # Passive joint torques: applied + viscoelastic law.
    for j in range(1, nb):
        k = j - 1
        if actuated[k]:
            qdd[k] = qdd_in[k]
        else:
            tau[k] = tau_in[k] - law_k[k] * (q[k] - law_r0[k]) - law_mu[k] * qd[k]
    # Backward recursion j = N..1.
    for j in range(nb - 1, 0, -1):
        i = parent[j]
        k = j - 1
        A = axis[j]
        Ms = Mstar[j]
        if actuated[k]:
            for a in range(6):
                v[a] = A[a] * qdd[k] + zeta[j, a]
            for a in range(6):
                acc = Pistar[j, a]
                for b in range(6):
                    acc += Ms[a, b] * v[b]
                P[a] = acc
            _congruence_add(AdJ[j], Ms, Mstar[i], tmp)
        else:
            for a in range(6):
                acc = 0.0
                for b in range(6):
                    acc += Ms[a, b] * A[b]
                MA[j, a] = acc
            h = 0.0
            ApI = 0.0
            for a in range(6):
                h += A[a] * MA[j, a]
                ApI += A[a] * Pistar[j, a]
            H[j] = h
            # K = M* - MA MA^T / H ; alpha = K zeta + MA (tau - A^T Pi*) / H + Pi*
            for a in range(6):
                for b in range(6):
                    K[a, b] = Ms[a, b] - MA[j, a] * MA[j, b] / h
            coef = (tau[k] - ApI) / h
            for a in range(6):
                acc = Pistar[j, a] + MA[j, a] * coef
                for b in range(6):
                    acc += K[a, b] * zeta[j, b]
                P[a] = acc
            _congruence_add(AdJ[j], K, Mstar[i], tmp)
        # Pi*_i += Ad^T P
        for a in range(6):
            acc = 0.0
            for c in range(6):
                acc += AdJ[j, c, a] * P[c]
            Pistar[i, a] += acc
    # Reference body.
    if base_mode == 0:
        for a in range(6):
            v[a] = -Pistar[0, a]
        _solve_spd6(Mstar[0], v, base_acc)
        for a in range(6):
            base_wrench[a] = 0.0
    else:
        for a in range(6):
            base_acc[a] = base_acc_in[a] if base_mode == 2 else 0.0
        for a in range(6):
            acc = Pistar[0, a]
            for b in range(6):
                acc += Mstar[0, a, b] * base_acc[b]
            base_wrench[a] = acc
    for a in range(6):
        eta_d[0, a] = base_acc[a]
    # Second forward recursion j = 1..N.
    for j in range(1, nb):
        i = parent[j]
        k = j - 1
        A = axis[j]
        Ms = Mstar[j]
        for a in range(6):
            acc = 0.0
            for b in range(6):
                acc += AdJ[j, a, b] * eta_d[i, b]
            eta_d[j, a] = acc
        if actuated[k]:
            for a in range(6):
                eta_d[j, a] += A[a] * qdd[k] + zeta[j, a]
            s = 0.0
            for a in range(6):
                acc = Pistar[j, a]
                for b in range(6):
                    acc += Ms[a, b] * eta_d[j, b]
                s += A[a] * acc
            tau[k] = s
        else:
            s = 0.0
            for a in range(6):
                acc = Pistar[j, a]
                for b in range(6):
                    acc += Ms[a, b] * (eta_d[j, b] + zeta[j, b])
                s += A[a] * acc
            qdd[k] = (tau[k] - s) / H[j]
            for a in range(6):
                eta_d[j, a] += A[a] * qdd[k] + zeta[j, a]


@njit(cache=True)
def _dim(code, nb, n):
    """A dimension of a kernel layout (sim.model.kernel_dims): the size itself, or N+1 / n for their codes."""
    if code == DIM_BODIES:
        return nb
    if code == DIM_JOINTS:
        return n
    return code


@njit(cache=True)
def _offsets(dims, nb, n):
    """Start of every field of a layout (dims: sim.model.kernel_dims) in its flat buffer, and the end (fields + 1,)."""
    o = np.zeros(len(dims) + 1, dtype=np.int64)
    for i in range(len(dims)):
        o[i + 1] = o[i] + _dim(dims[i][0], nb, n) * _dim(dims[i][1], nb, n) * _dim(dims[i][2], nb, n)
    return o


@njit(cache=True)
def _view1(buf, o, dims, i, nb, n):
    return buf[o[i]:o[i + 1]]


@njit(cache=True)
def _view2(buf, o, dims, i, nb, n):
    return buf[o[i]:o[i + 1]].reshape((_dim(dims[i][0], nb, n), _dim(dims[i][1], nb, n)))


@njit(cache=True)
def _view3(buf, o, dims, i, nb, n):
    return buf[o[i]:o[i + 1]].reshape((_dim(dims[i][0], nb, n), _dim(dims[i][1], nb, n), _dim(dims[i][2], nb, n)))


@njit(cache=True)
def _model_views(nb, n, mf):
    """Views of Model.kernel_floats (layout: sim.model.MODEL_FIELDS) as a ModelViews (``views.inertia``)."""
    d, m = MODEL_DIMS, MODEL_INDEX
    o = _offsets(d, nb, n)
    return ModelViews(_view3(mf, o, d, m.joint_placement, nb, n), _view2(mf, o, d, m.joint_axis, nb, n),
                      _view3(mf, o, d, m.inertia, nb, n), _view1(mf, o, d, m.law_k, nb, n),
                      _view1(mf, o, d, m.law_mu, nb, n), _view1(mf, o, d, m.law_r0, nb, n))


@njit(cache=True)
def _data_views(nb, n, buf):
    """Views of Data.buffer (layout: sim.model.DATA_FIELDS) as a DataViews (``views.f_ext``)."""
    d, x = DATA_DIMS, DATA_INDEX
    o = _offsets(d, nb, n)
    return DataViews(_view3(buf, o, d, x.g, nb, n), _view2(buf, o, d, x.eta, nb, n), _view3(buf, o, d, x.Xj, nb, n),
                     _view3(buf, o, d, x.AdJ, nb, n), _view2(buf, o, d, x.zeta, nb, n),
                     _view2(buf, o, d, x.f_ext, nb, n), _view2(buf, o, d, x.f_gravity, nb, n),
                     _view3(buf, o, d, x.M_added, nb, n), _view3(buf, o, d, x.Mstar, nb, n),
                     _view2(buf, o, d, x.Pistar, nb, n), _view1(buf, o, d, x.H, nb, n),
                     _view2(buf, o, d, x.eta_d, nb, n), _view1(buf, o, d, x.q, nb, n), _view1(buf, o, d, x.qd, nb, n),
                     _view1(buf, o, d, x.qdd, nb, n), _view1(buf, o, d, x.tau, nb, n),
                     _view2(buf, o, d, x.base_pose, nb, n), _view1(buf, o, d, x.base_twist, nb, n),
                     _view1(buf, o, d, x.base_acc, nb, n), _view1(buf, o, d, x.base_wrench, nb, n))


@njit(cache=True)
def _kinematics_packed(parent, mf, buf):
    """:func:`_kinematics` on Model.kernel_floats and Data.buffer (one cheap call from Python)."""
    nb = parent.shape[0]
    m, v = _model_views(nb, nb - 1, mf), _data_views(nb, nb - 1, buf)
    _kinematics(parent, m.joint_placement, m.joint_axis, v.q, v.qd, v.base_pose, v.base_twist, v.g, v.Xj, v.AdJ,
                v.eta, v.zeta)


@njit(**_HOT_KERNEL)
def _recursions_on_views(parent, m, v, actuated, qdd_in, tau_in, gravity, base_mode, base_acc_in, use_laws):
    """:func:`_recursions` on the buffers' views (a ModelViews m, a DataViews v); ``use_laws`` False drops the joint
    laws."""
    n = parent.shape[0] - 1
    if use_laws:
        law_k, law_mu, law_r0 = m.law_k, m.law_mu, m.law_r0
    else:
        law_k = law_mu = law_r0 = np.zeros(n)
    _recursions(parent, m.joint_axis, m.inertia, actuated, law_k, law_mu, law_r0, v.q, v.qd, qdd_in, tau_in, gravity,
                base_mode, base_acc_in, v.g, v.AdJ, v.eta, v.zeta, v.f_ext, v.f_gravity, v.M_added, v.Mstar, v.Pistar,
                v.H, v.eta_d, v.qdd, v.tau, v.base_acc, v.base_wrench)


@njit(cache=True)
def _recursions_packed(parent, mf, buf, actuated, qdd_in, tau_in, gravity, base_mode, base_acc_in, use_laws):
    """:func:`_recursions` on Model.kernel_floats and Data.buffer; ``use_laws`` False drops the joint laws."""
    nb = parent.shape[0]
    n = nb - 1
    m, v = _model_views(nb, n, mf), _data_views(nb, n, buf)
    _recursions_on_views(parent, m, v, actuated, qdd_in, tau_in, gravity, base_mode, base_acc_in, use_laws)


@njit(**_HOT_KERNEL)
def _evaluate_packed(parent, mf, buf, base_pose, base_twist, q, qd, actuated, qdd_in, tau_in, gravity, base_mode,
                     base_acc_in, use_laws):
    """One whole evaluation of a model without force models in one call from Python: the state copied into
    Data.buffer, :func:`_kinematics`, :func:`_recursions` (the buffers' views made once). Returns
    (6 + n + n + 6,) = base_acc, qdd, tau, base_wrench (a new array: the caller's result does not alias the
    workspace)."""
    nb = parent.shape[0]
    n = nb - 1
    m, v = _model_views(nb, n, mf), _data_views(nb, n, buf)
    v.base_pose[:] = base_pose
    v.base_twist[:] = base_twist
    v.q[:] = q
    v.qd[:] = qd
    _kinematics(parent, m.joint_placement, m.joint_axis, v.q, v.qd, v.base_pose, v.base_twist, v.g, v.Xj, v.AdJ,
                v.eta, v.zeta)
    _recursions_on_views(parent, m, v, actuated, qdd_in, tau_in, gravity, base_mode, base_acc_in, use_laws)
    result = np.empty(12 + 2 * n)
    result[:6] = v.base_acc
    result[6:6 + n] = v.qdd
    result[6 + n:6 + 2 * n] = v.tau
    result[6 + 2 * n:] = v.base_wrench
    return result


_ZERO6 = np.zeros(6)


def _read_only(array: np.ndarray) -> np.ndarray:
    if array.flags.writeable:
        array = array.copy()
        array.setflags(write=False)
    return array


def hybrid_step(model: Model, data: Data, t: float, base_pose: np.ndarray, base_twist: np.ndarray,
                q: np.ndarray, qd: np.ndarray, qdd_actuated: np.ndarray, tau_passive: np.ndarray, *,
                base_acc: np.ndarray | None = None, gravity: np.ndarray | None = None,
                actuated: np.ndarray | None = None, use_laws: bool = True) -> Data:
    """One evaluation of the hybrid algorithm in place on ``data`` (Porez et al. 2014, section III).

    t (s); base_pose (4, 4) world pose of body 0 (m); base_twist (6,) = (V, Omega) in the base frame;
    q, qd (n,) joint positions/velocities (rad, m; rad/s, m/s); qdd_actuated (n,) accelerations of the actuated
    joints (other entries ignored); tau_passive (n,) torques applied to passive joints in addition to their
    joint laws (other entries ignored; N m or N). ``base_acc`` (6,) is the imposed base acceleration for an
    imposed base (default: from ``model.base_motion``). ``gravity`` (3,) overrides ``model.gravity``;
    ``actuated`` (n,) bool overrides ``model.actuated``; ``use_laws=False`` skips the passive joint laws.

    Sequence: kinematics -> every ``model.force_models[m].apply(model, data, t)`` -> recursions.
    Results in ``data.base_acc``, ``data.qdd``, ``data.tau``, ``data.base_wrench``.
    """
    if model.flexible is not None:
        raise ValueError(f"hybrid_step is the rigid algorithm: {model!r} has modal bodies "
                         f"(use sim.flexible.flexible_step or Simulation)")
    mode = model._mode_code
    # Overrides are made read-only like the model's arrays, so the kernels are compiled for one type only.
    grav = model.gravity if gravity is None else _read_only(gravity)
    act = model.actuated if actuated is None else _read_only(actuated)
    if mode == 2 and base_acc is None:
        base_acc = model.base_motion.evaluate(t)[2]
    acc_in = _ZERO6 if base_acc is None else base_acc
    data.t = t
    if q is not data.q:
        data.q[:] = q
    if qd is not data.qd:
        data.qd[:] = qd
    if base_pose is not data.base_pose:
        data.base_pose[:] = base_pose
    if base_twist is not data.base_twist:
        data.base_twist[:] = base_twist
    if use_laws and model.python_laws:
        tau_passive = np.array(tau_passive, dtype=float)
        for k, law in model.python_laws:
            tau_passive[k] += law.torque(t, q[k], qd[k])
    _kinematics_packed(model.parent, model.kernel_floats, data.buffer)
    if model.force_models:
        data.f_ext.fill(0.0)
        data.f_gravity.fill(0.0)
        data.M_added.fill(0.0)
        for force_model in model.force_models:
            force_model.apply(model, data, t)
    _recursions_packed(model.parent, model.kernel_floats, data.buffer, act, qdd_actuated, tau_passive, grav,
                       mode, acc_in, use_laws)
    return data


class HybridResult:
    """Result of :func:`hybrid_dynamics`: ``base_acc`` (6,) d(base twist)/dt in the base frame (m/s^2,
    rad/s^2); ``qdd`` (n,) all joint accelerations; ``tau`` (n,) all joint torques (N m / N);
    ``base_wrench`` (6,) wrench (N, N m) the support exerts on the base, base frame, about O_0 (zero for a
    floating base). The four are views of one array ``packed`` (6 + n + n + 6,), made when read: building
    four arrays per call cost 0.6 us, about 5 % of an 11 us evaluation of the 17-body tree."""
    __slots__ = ("packed", "n")

    def __init__(self, packed: np.ndarray, n: int):
        self.packed = packed
        self.n = n

    @property
    def base_acc(self) -> np.ndarray:
        return self.packed[:6]

    @property
    def qdd(self) -> np.ndarray:
        return self.packed[6:6 + self.n]

    @property
    def tau(self) -> np.ndarray:
        return self.packed[6 + self.n:6 + 2 * self.n]

    @property
    def base_wrench(self) -> np.ndarray:
        return self.packed[6 + 2 * self.n:]

    def __repr__(self) -> str:
        return (f"HybridResult(base_acc={self.base_acc!r}, qdd={self.qdd!r}, tau={self.tau!r}, "
                f"base_wrench={self.base_wrench!r})")


def hybrid_dynamics(model: Model, base_pose, base_twist, q, qd, actuated, qdd, tau, gravity=None, *,
                    base_acc=None, t: float = 0.0, data: Data | None = None,
                    use_laws: bool = False) -> HybridResult:
    """The hybrid dynamics of ``model`` at one state (Porez et al. 2014, section III; spec hybrid-algorithm.md).

    base_pose (4, 4) world, m; base_twist (6,) (V, Omega) base frame; q, qd (n,); actuated (n,) bool mask over
    ``model.joint_names`` (may differ from ``model.actuated``); qdd (n,) imposed accelerations of the actuated
    joints; tau (n,) torques applied to the passive joints (complete: the model's joint laws are not added
    unless ``use_laws=True``); gravity (3,) world m/s^2 (default ``model.gravity``). The base follows
    ``model.base_mode``: floating (acceleration computed), fixed (zero twist and acceleration), imposed
    (``base_acc`` (6,) given, default from ``model.base_motion``). The model's force models are applied.
    Without ``data`` a workspace kept per model is reused (no Data built per call).
    """
    if model.flexible is not None:
        raise ValueError(f"hybrid_dynamics is the rigid algorithm: {model!r} has modal bodies "
                         f"(use sim.flexible.flexible_step or Simulation)")
    n = model.n
    data = _workspace(model) if data is None else data
    if actuated is model.actuated:
        act = None
    else:
        act = _vector(actuated, n, bool)
        if act.tobytes() == model.actuated.tobytes():
            act = None      # the model's own (read-only) mask: no copy, the kernels' usual argument type
    twist = _ZERO6 if model.base_mode == "fixed" else _vector(base_twist, 6)
    pose = base_pose if _is_float_array(base_pose, (4, 4)) and base_pose.flags.c_contiguous \
        else np.ascontiguousarray(base_pose, dtype=float).reshape(4, 4)
    base_acc = None if base_acc is None else _vector(base_acc, 6)
    gravity = None if gravity is None else _vector(gravity, 3)
    if model.force_models or (use_laws and model.python_laws):
        hybrid_step(model, data, t, pose, twist, _vector(q, n), _vector(qd, n), _vector(qdd, n), _vector(tau, n),
                    base_acc=base_acc, gravity=gravity, actuated=act, use_laws=use_laws)
        return HybridResult(np.concatenate((data.base_acc, data.qdd, data.tau, data.base_wrench)), n)
    # Nothing to call from Python between the kinematics and the recursions: one compiled call does it all.
    mode = model._mode_code
    if mode == 2 and base_acc is None:
        base_acc = model.base_motion.evaluate(t)[2]
    object.__setattr__(data, "t", t)   # a float, not one of the buffer views that Data.__setattr__ guards
    packed = _evaluate_packed(model.parent, model.kernel_floats, data.buffer, pose, twist,
                              _vector(q, n), _vector(qd, n), model.actuated if act is None else _read_only(act),
                              _vector(qdd, n), _vector(tau, n), model.gravity if gravity is None else _read_only(gravity),
                              mode, _ZERO6 if base_acc is None else base_acc, use_laws)
    return HybridResult(packed, n)


#: Model -> the Data that :func:`hybrid_dynamics` reuses when no ``data=`` is given (one per model, dropped with
#: it). Not for concurrent calls on one model from several threads: give each thread its own ``data=``.
_WORKSPACES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _workspace(model: Model) -> Data:
    data = _WORKSPACES.get(model)
    if data is None:
        data = _WORKSPACES[model] = Data(model)
    return data


def _is_float_array(value, shape: tuple) -> bool:
    return type(value) is np.ndarray and value.dtype == np.float64 and value.shape == shape


def _vector(value, size: int, dtype=float) -> np.ndarray:
    """value as an array (size,) of dtype, without a copy when it already is one (the kernels only read it)."""
    if type(value) is np.ndarray and value.dtype == dtype and value.shape == (size,):
        return value
    return np.asarray(value, dtype=dtype).reshape(size)


def momentum_world(model: Model, data: Data) -> np.ndarray:
    """Total momentum (6,) = (linear kg m/s, angular kg m^2/s about the world origin), world frame, of the
    bodies at the state of the last evaluation in ``data`` (rigid inertias, added mass excluded)."""
    h_body = np.einsum("jab,jb->ja", model.inertia, data.eta)
    R = data.g[:, :3, :3]
    linear = np.einsum("jab,jb->ja", R, h_body[:, :3])
    angular = np.einsum("jab,jb->ja", R, h_body[:, 3:]) + np.cross(data.g[:, :3, 3], linear)
    return np.concatenate([linear.sum(axis=0), angular.sum(axis=0)])


def kinetic_energy(model: Model, data: Data) -> float:
    """Kinetic energy (J) ``sum_j eta_j^T M_j eta_j / 2`` at the last evaluation in ``data``."""
    return 0.5 * float(np.einsum("ja,jab,jb->", data.eta, model.inertia, data.eta))


def potential_energy(model: Model, data: Data, gravity=None) -> float:
    """Gravity plus viscoelastic-spring potential energy (J) at the last evaluation in ``data``:
    ``-sum_j m_j g . x_Gj + sum_k k_k (q_k - r0_k)^2 / 2`` (x_Gj world centre of mass of body j, m)."""
    g = model.gravity if gravity is None else np.asarray(gravity, dtype=float)
    mass = model.inertia[:, 0, 0]
    # First moment m c (N+1, 3) in frame j, from the block M[3:, :3] = m hat(c).
    mc = np.stack([model.inertia[:, 5, 1], model.inertia[:, 3, 2], model.inertia[:, 4, 0]], axis=1)
    world_first_moment = mass[:, None] * data.g[:, :3, 3] + np.einsum("jab,jb->ja", data.g[:, :3, :3], mc)
    gravity_energy = -float(np.sum(world_first_moment @ g))
    strain = data.q - model.law_r0
    spring_energy = 0.5 * float(np.sum(model.law_k * strain * strain))
    return gravity_energy + spring_energy
