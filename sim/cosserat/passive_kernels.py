"""Compiled evaluation of the passive elastic rod (numba, ``cache=True``): the same algorithms and arithmetic as
sim/cosserat/passive.py (the Python path, the reference), a chunk of RK4 steps per call. docs/cosserat.md,
"The compiled path".

The model is passed unpacked (:func:`sim.cosserat.passive.kernel_model`): l m, n_X, Mc (6,) kg/m and kg m,
gravity (3,) m/s^2 world, H (6,) N and N m^2, free (F,) int strain components, modes, tip_force (3,) N world,
free_head. The state y is (head position m (3), unit quaternion (w, x, y, z) (4), q (n_q,), v (n_v,)) with
``v = (eta_o, q_dot)`` (free head) or ``q_dot`` (clamped head). Twists and wrenches (6,) linear first, frame X.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .kernels import (ALL_COMPONENTS, EPS, GAUSS_HIGH, GAUSS_LOW, LEGENDRE_KIND, MAGNUS_CROSS, _ad_times,
                      _ad_transpose_times, _pose_rate, _quat_matrix, cumulative_simpson, nodes)
from .laws.legendre import legendre_values
from ..dense_loops import mat_mat, mat_vec


@njit(cache=True)
def _shape_functions(X, length, free, modes, out):
    """out (6, n_q) = Phi(X) (passive.basis at one abscissa X m): P_j(2X/l - 1) in row free[f], column f modes + j."""
    P, dP = np.empty(modes), np.empty(modes)
    legendre_values(2.0 * X / length - 1.0, P, dP)
    out[:] = 0.0
    for f in range(free.size):
        for j in range(modes):
            out[free[f], f * modes + j] = P[j]


@njit(cache=True)
def _ad_matrix(x, out):
    """out (6, 6) = ad_x = [[hat(Omega), hat(V)], [0, hat(Omega)]] (lie.ad of one twist x = (V, Omega))."""
    out[:] = 0.0
    for block, row, column in ((3, 0, 0), (3, 3, 3), (0, 0, 3)):
        a0, a1, a2 = x[block], x[block + 1], x[block + 2]
        out[row, column + 1], out[row, column + 2] = -a2, a1
        out[row + 1, column], out[row + 1, column + 2] = a2, -a0
        out[row + 2, column], out[row + 2, column + 1] = -a1, a0


@njit(cache=True)
def dexp_coefficients(radius):
    """passive.dexp_series' coefficients ``c_k = (-1)^k / (k+1)!`` (K,), K the first whose next term's bound
    ``radius^k / (k+1)!`` is below double rounding (radius: the largest row sum of |ad_W| over the steps)."""
    k, factorial = 0, 2.0                       # factorial = (k + 2)!
    while radius ** (k + 1) / factorial > EPS:
        k += 1
        factorial *= k + 2
    c = np.empty(k + 1)
    factorial = 1.0                             # (m + 1)!
    for m in range(k + 1):
        factorial *= m + 1
        c[m] = (-1.0) ** m / factorial
    return c


@njit(cache=True)
def _dexp_matrix(adW, c, out):
    """out (6, 6) = ``T = sum_k c_k ad_W^k`` by Horner's rule (passive.dexp_matrix). ``ad_W`` and its powers are
    block upper triangular, ``[[P, R], [0, P]]``: the step ``T <- c_k I + ad_W T`` is done on the blocks P and R
    (the products with the zero block add exact zeros, so the sums are the full product's)."""
    K = c.size
    P, R = np.zeros((3, 3)), np.zeros((3, 3))
    P_next, R_next = np.empty((3, 3)), np.empty((3, 3))
    for i in range(3):
        P[i, i] = c[K - 1]
    for k in range(K - 2, -1, -1):
        for i in range(3):
            for j in range(3):
                top, right = 0.0, 0.0
                for m in range(3):
                    top += adW[i, m] * P[m, j]
                    right += adW[i, m] * R[m, j]
                for m in range(3):
                    right += adW[i, 3 + m] * P[m, j]
                P_next[i, j] = top + (c[k] if i == j else 0.0)
                R_next[i, j] = right
        P[:], R[:] = P_next, R_next
    out[3:, :3] = 0.0
    out[:3, :3] = P
    out[3:, 3:] = P
    out[:3, 3:] = R


@njit(cache=True)
def _dexp_rate(adW, c, W_dot, powers, z, out):
    """out (6,) = ``(d/dt T) W_dot`` (passive.dexp_rate: ``sum_i ad_W^i s_i``, s_i regrouped, Horner's rule);
    powers, z (K, 6) scratch."""
    K = c.size
    powers[0] = W_dot                           # ad_W^j W_dot
    for j in range(1, K - 1):
        mat_vec(adW, powers[j - 1], powers[j])
        _ad_times(W_dot, powers[j], z[j])
    out[:] = 0.0
    term = np.empty(6)
    for i in range(K - 3, -1, -1):
        mat_vec(adW, out, term)
        for m in range(6):
            s = 0.0
            for j in range(1, K - 1 - i):
                s += c[i + 1 + j] * z[j, m]
            out[m] = s + term[m]


@njit(cache=True)
def passive_motion(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, g_o, q, v):
    """passive.equations_of_motion: (M (n_v, n_v), Q (n_v,)) at (q (n_q,), v (n_v,)), head pose g_o (4, 4)
    world: the section kinematics (Magnus poses from :func:`kernels.nodes` with the Legendre law, their exact time
    derivatives through the dexp series), ``M = int J^T Mc J dX``, ``Q = J(l)^T F+ - int J^T (Mc zeta - ad_eta^T
    Mc eta - Fb) dX - int Phi^T H (xi - xi0) dX`` (Simpson, as the Python form)."""
    n_free = free.size
    n_q, n_v = n_free * modes, v.size
    head = n_v - n_q
    eta_o = np.zeros(6)
    if free_head:
        eta_o[:] = v[:6]
    q_dot = v[head:]
    params = np.zeros(3 + n_free + 3 * n_q)               # laws.legendre.legendre_params, q_ddot = 0
    params[0], params[1], params[2] = length, modes, n_free
    for f in range(n_free):
        params[3 + f] = free[f]
    params[3 + n_free:3 + n_free + n_q] = q
    params[3 + n_free + n_q:3 + n_free + 2 * n_q] = q_dot
    X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv = nodes(LEGENDRE_KIND, params, ALL_COMPONENTS, length,
                                                                     n_X, 0.0, np.empty(0), length)
    N = X.size
    # the Magnus steps W_j, B_j = d W_dot_j / d q_dot, W_dot_j and the velocity part of W_ddot_j
    B = np.empty((N - 1, 6, n_q))
    adW = np.empty((N - 1, 6, 6))
    W_dot, W_ddot = np.empty((N - 1, 6)), np.empty((N - 1, 6))
    Phi1, Phi2 = np.empty((6, n_q)), np.empty((6, n_q))
    ad1, ad2 = np.empty((6, 6)), np.empty((6, 6))
    cross12, cross21 = np.empty((6, n_q)), np.empty((6, n_q))
    xi1, xi2, rate1, rate2, cross, W = (np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6),
                                        np.empty(6))
    radius = 0.0
    for j in range(N - 1):
        h = X[j + 1] - X[j]
        _shape_functions(X[j] + GAUSS_LOW * h, length, free, modes, Phi1)
        _shape_functions(X[j] + GAUSS_HIGH * h, length, free, modes, Phi2)
        mat_vec(Phi1, q, xi1)
        mat_vec(Phi2, q, xi2)
        xi1[0] += 1.0                                       # the reference strain (1, 0, 0, 0, 0, 0)
        xi2[0] += 1.0
        mat_vec(Phi1, q_dot, rate1)
        mat_vec(Phi2, q_dot, rate2)
        magnus = MAGNUS_CROSS * h ** 2
        _ad_times(xi1, xi2, cross)
        W[:] = 0.5 * h * (xi1 + xi2) + magnus * cross
        _ad_matrix(xi1, ad1)
        _ad_matrix(xi2, ad2)
        mat_mat(ad1, Phi2, cross12)
        mat_mat(ad2, Phi1, cross21)
        B[j] = 0.5 * h * (Phi1 + Phi2) + magnus * (cross12 - cross21)
        mat_vec(B[j], q_dot, W_dot[j])
        _ad_times(rate1, rate2, cross)
        W_ddot[j] = 2.0 * magnus * cross
        _ad_matrix(W, adW[j])
        for i in range(6):
            row = 0.0
            for k in range(6):
                row += abs(adW[j, i, k])
            radius = max(radius, row)
    c = dexp_coefficients(radius)
    # the head-frame sums u (twists), u_dot (their rates at v_dot = 0) and J_strain = d u / d q_dot
    u, u_dot = np.zeros((N, 6)), np.zeros((N, 6))
    u[0] = eta_o
    J_strain = np.zeros((N, 6, n_q))
    T, to_head = np.empty((6, 6)), np.empty((6, 6))
    powers, z = np.empty((c.size, 6)), np.empty((c.size, 6))
    step = np.empty((6, n_q))
    T_W_dot, T_dot_W_dot, moved, relative, growth = np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6)
    for j in range(N - 1):
        _dexp_matrix(adW[j], c, T)
        mat_vec(T, W_dot[j], T_W_dot)
        _dexp_rate(adW[j], c, W_dot[j], powers, z, T_dot_W_dot)
        mat_vec(Adk_inv[j + 1], T_W_dot, moved)
        u[j + 1] = u[j] + moved
        mat_vec(Adk[j + 1], u[j + 1] - eta_o, relative)              # eta_rel at X_{j+1}
        _ad_times(relative, T_W_dot, growth)
        mat_vec(T, W_ddot[j], moved)
        growth += T_dot_W_dot + moved
        mat_vec(Adk_inv[j + 1], growth, moved)
        u_dot[j + 1] = u_dot[j] + moved
        mat_mat(Adk_inv[j + 1], T, to_head)
        mat_mat(to_head, B[j], step)
        J_strain[j + 1] = J_strain[j] + step
    # per node: eta, zeta, J = Ad(k) [I | J_strain] and the integrands of M, Q and the elastic term
    Rg = g_o[:3, :3]
    F_plus = np.zeros(6)
    R = np.empty((3, 3))
    mat_mat(Rg, g_rel[N - 1, :3, :3], R)
    mat_vec(R.T, tip_force, F_plus[:3])
    mass = np.empty((N, n_v * n_v))
    force = np.empty((N, n_v))
    elastic = np.empty((N, n_q))
    Jj = np.empty((6, n_v))
    eta, relative, zeta, bias, inertial, stress = (np.empty(6), np.empty(6), np.empty(6), np.empty(6), np.empty(6),
                                                   np.empty(6))
    Phi = np.empty((6, n_q))
    J_last = np.empty((6, n_v))
    for j in range(N):
        A = Adk[j]
        mat_vec(A, u[j], eta)
        mat_vec(A, u[j] - eta_o, relative)
        mat_vec(A, u_dot[j], zeta)
        _ad_times(relative, eta, cross)
        zeta -= cross
        if free_head:
            Jj[:, :6] = A
        mat_mat(A, J_strain[j], Jj[:, head:])
        _ad_transpose_times(eta, Mc * eta, bias)
        mat_mat(Rg, g_rel[j, :3, :3], R)
        inertial[:] = Mc * zeta - bias
        for i in range(3):
            inertial[i] -= Mc[0] * (R[0, i] * gravity[0] + R[1, i] * gravity[1] + R[2, i] * gravity[2])
        for i in range(n_v):
            acc = 0.0
            for m in range(6):
                acc += Jj[m, i] * inertial[m]
            force[j, i] = acc
            for k in range(n_v):
                acc = 0.0
                for m in range(6):
                    acc += Jj[m, i] * Mc[m] * Jj[m, k]
                mass[j, n_v * i + k] = acc
        _shape_functions(X[j], length, free, modes, Phi)
        for m in range(6):
            stress[m] = 0.0 - H[m] * (xi[j, m] - (1.0 if m == 0 else 0.0))
        mat_vec(Phi.T, stress, elastic[j])
        if j == N - 1:
            J_last[:] = Jj
    no_jumps = np.zeros((segments.shape[0], n_v * n_v))
    M = cumulative_simpson(X, segments, mass, no_jumps)[N - 1].reshape((n_v, n_v))
    Q = np.empty(n_v)
    mat_vec(J_last.T, F_plus, Q)
    Q -= cumulative_simpson(X, segments, force, no_jumps[:, :n_v])[N - 1]
    Q[head:] += cumulative_simpson(X, segments, elastic, no_jumps[:, :n_q])[N - 1]
    return M, Q


@njit(cache=True)
def passive_rate(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y, out):
    """out = dy/dt (passive.run's rate): the head pose's rate for eta_o, q_dot, and ``v_dot = M^-1 Q`` at the
    head pose of y."""
    n_q = free.size * modes
    g_o = np.eye(4)
    g_o[:3, :3] = _quat_matrix(y[3:7])
    g_o[:3, 3] = y[:3]
    q, v = y[7:7 + n_q], y[7 + n_q:]
    M, Q = passive_motion(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, g_o, q, v)
    eta_o = np.zeros(6)
    if free_head:
        eta_o[:] = v[:6]
    _pose_rate(y, eta_o, out[:7])
    out[7:7 + n_q] = v[v.size - n_q:]
    out[7 + n_q:] = np.linalg.solve(M, Q)


@njit(cache=True)
def passive_steps(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y, dt, count):
    """``count`` RK4 steps of dt s from the state y (algorithms.rk4, the quaternion renormalised after each);
    returns the new state."""
    y = y.copy()
    k1, k2, k3, k4 = np.empty(y.size), np.empty(y.size), np.empty(y.size), np.empty(y.size)
    for _ in range(count):
        passive_rate(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y, k1)
        passive_rate(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y + dt / 2 * k1, k2)
        passive_rate(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y + dt / 2 * k2, k3)
        passive_rate(length, n_X, Mc, gravity, H, free, modes, tip_force, free_head, y + dt * k3, k4)
        y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        y[3:7] /= math.sqrt(y[3] ** 2 + y[4] ** 2 + y[5] ** 2 + y[6] ** 2)
    return y
