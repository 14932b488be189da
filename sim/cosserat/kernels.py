"""Compiled passes along X of the Cosserat rod (numba, ``cache=True``): the same algorithms and arithmetic as
sim/cosserat/rod.py, algorithms.py and contacts.py (the Python path, the reference), one instant or one chunk of
time steps per call. docs/cosserat.md, "The compiled path".

Shapes and frames as in rod.py: nodes along X (N,), twists, strains, wrenches (N, 6) in the paper's order (linear
first), frame X; ``g_rel`` (N, 4, 4) the section poses in the head frame (``k^-1``); ``Adk`` = Ad(k), ``Adk_inv`` =
Ad(k)^-1 (N, 6, 6). A strain law is given by its kind id and packed parameters (sim/cosserat/laws/) and the
indices of the components it actuates (``actuated``, Table I); the other components are the reference
``(1, 0, 0, 0, 0, 0)``.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..dense_loops import mat_mat, mat_vec
from .laws import LEGENDRE, law_kernel

#: As rod.MAGNUS_NODES and rod.SAME_ABSCISSA_M (numba reads module globals as compile-time constants).
GAUSS_LOW = 0.5 - math.sqrt(3.0) / 6.0
GAUSS_HIGH = 0.5 + math.sqrt(3.0) / 6.0
MAGNUS_CROSS = math.sqrt(3.0) / 12.0
SAME_ABSCISSA_M = 1e-12
#: As lie.SERIES_ANGLE.
SERIES_ANGLE = 1e-4
#: As contacts.HOLD_TOLERANCE.
HOLD_TOLERANCE = 1e-8
#: The passive rod's strain law (laws/legendre.py) writes all six components (case 1).
LEGENDRE_KIND = LEGENDRE
ALL_COMPONENTS = np.arange(6)
#: Smallest normal double and the machine epsilon (scale floors, the least-squares cut-off).
TINY = float(np.finfo(np.float64).tiny)
EPS = float(np.finfo(np.float64).eps)
#: Status of :func:`instant`: the supports held the body / no support could exert a nonzero reaction / the
#: minimum-norm split leaves a residual (contacts.CannotHold in the Python path) / a support's abscissa is off the
#: body (rod.Nodes.at's ValueError).
HELD, NO_SUPPORT, CANNOT_HOLD, NOT_A_NODE = 0, 1, 2, 3


# ----------------------------------------------------------------------------------------------- strains
@njit(cache=True)
def strain_row(kind, params, actuated, X, t, out, xi, xi_X, xi_t, xi_tt, j):
    """Row j of the four strain arrays at abscissa X (m), time t (s); out (4, m) scratch."""
    law_kernel(kind, params, X, t, out)
    for c in range(6):
        xi[j, c] = 1.0 if c == 0 else 0.0
        xi_X[j, c] = 0.0
        xi_t[j, c] = 0.0
        xi_tt[j, c] = 0.0
    for m in range(actuated.size):
        xi[j, actuated[m]] = out[0, m]
        xi_X[j, actuated[m]] = out[1, m]
        xi_t[j, actuated[m]] = out[2, m]
        xi_tt[j, actuated[m]] = out[3, m]


# ----------------------------------------------------------------------------------------------- the X grid
@njit(cache=True)
def grid(length, n_X, cuts, end):
    """rod.build_nodes' grid: X (N,) m over [0, end] split at the cuts inside (0, end) (a node each side), and
    the segments' (start, stop) index ranges (S, 2); each segment has an even share of n_X steps (>= 2)."""
    inner = np.sort(cuts)
    points = np.empty(inner.size + 2)
    points[0] = 0.0
    k = 1
    for c in inner:
        if SAME_ABSCISSA_M < c < end - SAME_ABSCISSA_M and c != points[k - 1]:
            points[k] = c
            k += 1
    if end != 0.0:
        points[k] = end
        k += 1
    if k == 1:
        head = np.zeros((1, 2), np.int64)
        head[0, 1] = 1
        return np.zeros(1), head
    counts = np.empty(k - 1, np.int64)
    for s in range(k - 1):
        counts[s] = max(2, 2 * int(math.ceil(n_X * (points[s + 1] - points[s]) / length / 2.0)))
    X = np.empty(int(np.sum(counts + 1)))
    segments = np.empty((k - 1, 2), np.int64)
    start = 0
    for s in range(k - 1):
        a, b, steps = points[s], points[s + 1], counts[s]
        step = (b - a) / steps
        for i in range(steps):
            X[start + i] = i * step + a
        X[start + steps] = b
        segments[s, 0], segments[s, 1] = start, start + steps + 1
        start += steps + 1
    return X, segments


@njit(cache=True)
def _ad_times(x, y, out):
    """out (6,) = ad_x y = [x, y] (x, y twists (6,))."""
    out[0] = x[4] * y[2] - x[5] * y[1] + x[1] * y[5] - x[2] * y[4]
    out[1] = x[5] * y[0] - x[3] * y[2] + x[2] * y[3] - x[0] * y[5]
    out[2] = x[3] * y[1] - x[4] * y[0] + x[0] * y[4] - x[1] * y[3]
    out[3] = x[4] * y[5] - x[5] * y[4]
    out[4] = x[5] * y[3] - x[3] * y[5]
    out[5] = x[3] * y[4] - x[4] * y[3]


@njit(cache=True)
def _ad_transpose_times(x, y, out):
    """out (6,) = ad_x^T y (x a twist, y a wrench (6,))."""
    # ad_x = [[W, V], [0, W]] with W = hat(Omega), V = hat(v): ad_x^T = [[-W, 0], [-V, -W]]
    out[0] = -(x[4] * y[2] - x[5] * y[1])
    out[1] = -(x[5] * y[0] - x[3] * y[2])
    out[2] = -(x[3] * y[1] - x[4] * y[0])
    out[3] = -(x[1] * y[2] - x[2] * y[1]) - (x[4] * y[5] - x[5] * y[4])
    out[4] = -(x[2] * y[0] - x[0] * y[2]) - (x[5] * y[3] - x[3] * y[5])
    out[5] = -(x[0] * y[1] - x[1] * y[0]) - (x[3] * y[4] - x[4] * y[3])


@njit(cache=True)
def _exp_se3(W, out):
    """out (4, 4) = exp(hat(W)) (lie.exp_se3 for one twist W (6,), with hat(w)^2 = w w^T - theta^2 I)."""
    w0, w1, w2 = W[3], W[4], W[5]
    theta2 = w0 * w0 + w1 * w1 + w2 * w2
    theta = math.sqrt(theta2)
    if theta < SERIES_ANGLE:
        a = 1.0 - theta ** 2 / 6.0
        b = 0.5 - theta ** 2 / 24.0
        c = 1.0 / 6.0 - theta ** 2 / 120.0
    else:
        a = math.sin(theta) / theta
        b = (1.0 - math.cos(theta)) / theta2
        c = (theta - math.sin(theta)) / (theta2 * theta)
    w = (w0, w1, w2)
    for i in range(3):
        for k in range(3):
            square = w[i] * w[k] - (theta2 if i == k else 0.0)
            skew = 0.0
            if i != k:
                m = 3 - i - k                       # the third index; hat(w)_ik = -eps_ikm w_m
                skew = -w[m] if (k - i) % 3 == 1 else w[m]
            out[i, k] = (1.0 if i == k else 0.0) + a * skew + b * square
            out[3, k] = (1.0 if i == k else 0.0) + b * skew + c * square     # scratch: row i of V
        out[i, 3] = out[3, 0] * W[0] + out[3, 1] * W[1] + out[3, 2] * W[2]
    out[3, 0], out[3, 1], out[3, 2], out[3, 3] = 0.0, 0.0, 0.0, 1.0


@njit(cache=True)
def _adjoints(g, Adk, Adk_inv, j):
    """Adk[j] = Ad(g^-1) = [[R^T, -R^T hat(p)], [0, R^T]] and Adk_inv[j] = Ad(g) = [[R, hat(p) R], [0, R]] of the
    pose g (4, 4) (lie.Ad_inv, lie.Ad)."""
    p0, p1, p2 = g[0, 3], g[1, 3], g[2, 3]
    for k in range(3):
        # column k of R and of hat(p) R = p x (R e_k)
        r0, r1, r2 = g[0, k], g[1, k], g[2, k]
        x0, x1, x2 = p1 * r2 - p2 * r1, p2 * r0 - p0 * r2, p0 * r1 - p1 * r0
        for i in range(3):
            Adk_inv[j, i, k] = g[i, k]
            Adk_inv[j, 3 + i, 3 + k] = g[i, k]
            Adk_inv[j, 3 + i, k] = 0.0
            Adk[j, k, i] = g[i, k]
            Adk[j, 3 + k, 3 + i] = g[i, k]
            Adk[j, 3 + k, i] = 0.0
        Adk_inv[j, 0, 3 + k], Adk_inv[j, 1, 3 + k], Adk_inv[j, 2, 3 + k] = x0, x1, x2
        # -R^T hat(p) = (hat(p) R)^T
        Adk[j, k, 3], Adk[j, k, 4], Adk[j, k, 5] = x0, x1, x2


@njit(cache=True)
def nodes(kind, params, actuated, length, n_X, t, cuts, end):
    """rod.build_nodes: the grid, the strain at every node (xi, xi_X, xi_t, xi_tt (N, 6)) and the poses g_rel
    (N, 4, 4) by Magnus-4 from the head, with Adk, Adk_inv (N, 6, 6)."""
    X, segments = grid(length, n_X, cuts, end)
    N = X.size
    out = np.empty((4, max(1, actuated.size)))
    xi, xi_X, xi_t, xi_tt = np.empty((N, 6)), np.empty((N, 6)), np.empty((N, 6)), np.empty((N, 6))
    for j in range(N):
        strain_row(kind, params, actuated, X[j], t, out, xi, xi_X, xi_t, xi_tt, j)
    gauss = np.empty((2, 6))
    scratch = np.empty((2, 6))
    cross = np.empty(6)
    W = np.empty(6)
    step = np.empty((4, 4))
    g_rel = np.empty((N, 4, 4))
    g_rel[0] = np.eye(4)
    for j in range(N - 1):
        h = X[j + 1] - X[j]
        strain_row(kind, params, actuated, X[j] + GAUSS_LOW * h, t, out, gauss, scratch, scratch, scratch, 0)
        strain_row(kind, params, actuated, X[j] + GAUSS_HIGH * h, t, out, gauss, scratch, scratch, scratch, 1)
        _ad_times(gauss[0], gauss[1], cross)
        for c in range(6):
            W[c] = 0.5 * h * (gauss[0, c] + gauss[1, c]) + MAGNUS_CROSS * (h ** 2) * cross[c]
        _exp_se3(W, step)
        mat_mat(g_rel[j], step, g_rel[j + 1])
    Adk, Adk_inv = np.empty((N, 6, 6)), np.empty((N, 6, 6))
    for j in range(N):
        _adjoints(g_rel[j], Adk, Adk_inv, j)
    return X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv


# ----------------------------------------------------------------------------------------------- quadratures
@njit(cache=True)
def cumulative_simpson(X, segments, f, jumps):
    """rod.cumulative_simpson: ``int_0^X f dX`` (N, m) per segment, continuous across cuts, plus jumps (S, m)
    added at each segment's first node."""
    N, m = f.shape
    out = np.empty((N, m))
    carry = np.zeros(m)
    for s in range(segments.shape[0]):
        a, b = segments[s, 0], segments[s, 1]
        for c in range(m):
            carry[c] = carry[c] + jumps[s, c]
            out[a, c] = carry[c]
        if b - a > 1:
            h = (X[b - 1] - X[a]) / (b - a - 1)
            for c in range(m):
                total = 0.0
                for i in range(b - a - 1):
                    if i % 2 == 0:
                        inc = h / 12.0 * (5.0 * f[a + i, c] + 8.0 * f[a + i + 1, c] - f[a + i + 2, c])
                    else:
                        inc = h / 12.0 * (-f[a + i - 1, c] + 8.0 * f[a + i, c] + 5.0 * f[a + i + 1, c])
                    total += inc
                    out[a + 1 + i, c] = carry[c] + total
        for c in range(m):
            carry[c] = out[b - 1, c]
    return out


@njit(cache=True)
def simpson_total(X, segments, f):
    """``int_0^l f dX`` (m,): the last row of :func:`cumulative_simpson` without jumps (Simpson's 1-4-2-...-4-1
    weights per segment)."""
    out = np.zeros(f.shape[1])
    for s in range(segments.shape[0]):
        a, b = segments[s, 0], segments[s, 1]
        if b - a < 3:
            continue
        h = (X[b - 1] - X[a]) / (b - a - 1)
        for j in range(a, b):
            weight = 1.0 if j == a or j == b - 1 else (4.0 if (j - a) % 2 == 1 else 2.0)
            for c in range(f.shape[1]):
                out[c] += h / 3.0 * weight * f[j, c]
    return out


@njit(cache=True)
def _mtv(A, x, out):
    """out (6,) = A^T x."""
    mat_vec(A.T, x, out)


@njit(cache=True)
def _transported(X, segments, Adk, Adk_inv, source, head):
    """The solution (N, 6) frame X of ``y' = -ad_xi y + source`` from ``y(0) = head``: in the head frame a
    quadrature, ``y = Ad(k) (head + int Ad(k)^-1 source dX)``."""
    N = X.size
    moved = np.empty((N, 6))
    for j in range(N):
        mat_vec(Adk_inv[j], source[j], moved[j])
    moved = cumulative_simpson(X, segments, moved, np.zeros((segments.shape[0], 6)))
    out = np.empty((N, 6))
    for j in range(N):
        mat_vec(Adk[j], head + moved[j], out[j])
    return out


@njit(cache=True)
def twists(X, segments, xi_t, Adk, Adk_inv, eta_o):
    """rod.twists: eta (N, 6) frame X = ``Ad(k) (eta_o + int Ad(k)^-1 xi_t dX)``."""
    return _transported(X, segments, Adk, Adk_inv, xi_t, eta_o)


@njit(cache=True)
def accelerations(X, segments, xi_t, xi_tt, Adk, Adk_inv, eta, etad_o):
    """rod.accelerations: etad (N, 6) frame X, ``etad' = -ad_xi etad - ad_{xi_t} eta + xi_tt``."""
    source = np.empty((X.size, 6))
    cross = np.empty(6)
    for j in range(X.size):
        _ad_times(xi_t[j], eta[j], cross)
        source[j] = xi_tt[j] - cross
    return _transported(X, segments, Adk, Adk_inv, source, etad_o)


# ----------------------------------------------------------------------------------------------- Block 0
@njit(cache=True)
def head_from_point(kind, params, actuated, length, n_X, t, C, eta_C, etad_C):
    """contacts.head_from_point: (eta_o, etad_o (6,) head frame, g_rel(C) (4, 4)) from the twist and
    acceleration (6,) frame C of the material point C (m)."""
    X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv = nodes(kind, params, actuated, length, n_X, t,
                                                                     np.empty(0), C)
    last = X.size - 1
    zero = np.zeros(6)
    eta_o, etad_o = np.empty(6), np.empty(6)
    mat_vec(Adk_inv[last], eta_C - twists(X, segments, xi_t, Adk, Adk_inv, zero)[last], eta_o)
    eta = twists(X, segments, xi_t, Adk, Adk_inv, eta_o)
    zeta = accelerations(X, segments, xi_t, xi_tt, Adk, Adk_inv, eta, zero)
    mat_vec(Adk_inv[last], etad_C - zeta[last], etad_o)
    return eta_o, etad_o, g_rel[last].copy()


@njit(cache=True)
def sweeping_head(kind, params, actuated, length, n_X, t, C, C_dot, C_ddot):
    """contacts.SweepingAnchor.head_motion: Block 0 for ``eta(C) + xi(C) C_dot = 0`` (and its time derivative)."""
    out = np.empty((4, max(1, actuated.size)))
    at = np.empty((4, 1, 6))
    strain_row(kind, params, actuated, C, t, out, at[0], at[1], at[2], at[3], 0)
    xi, xi_X, xi_t = at[0, 0], at[1, 0], at[2, 0]
    eta_C = -xi * C_dot
    cross = np.empty(6)
    _ad_times(xi, eta_C, cross)
    etad_C = -C_dot * (-cross + 2.0 * xi_t) - xi_X * C_dot ** 2 - xi * C_ddot
    eta_o, etad_o, _ = head_from_point(kind, params, actuated, length, n_X, t, C, eta_C, etad_C)
    return eta_o, etad_o


@njit(cache=True)
def guided_head(kind, params, actuated, V_o, t):
    """contacts.HeadGuide.head_motion: ``eta_o = (V_o, 0, 0, 0, V_o K_Y(0), V_o K_Z(0))``, ``etad_o`` likewise."""
    out = np.empty((4, max(1, actuated.size)))
    at = np.empty((4, 1, 6))
    strain_row(kind, params, actuated, 0.0, t, out, at[0], at[1], at[2], at[3], 0)
    eta_o, etad_o = np.zeros(6), np.zeros(6)
    eta_o[0] = V_o
    for c in range(4, 6):
        eta_o[c] = V_o * at[0, 0, c]
        etad_o[c] = V_o * at[2, 0, c]
    return eta_o, etad_o


@njit(cache=True)
def _quat_matrix(q):
    """sim.spatial.quat_to_matrix of q / |q|."""
    n = math.sqrt(q[0] ** 2 + q[1] ** 2 + q[2] ** 2 + q[3] ** 2)
    w, x, y, z = q[0] / n, q[1] / n, q[2] / n, q[3] / n
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


@njit(cache=True)
def _pose_rate(y, eta, out):
    """algorithms.pose_rate: d/dt (position, quaternion) (7,) for the body twist eta (6,)."""
    w, x, y_, z = y[3], y[4], y[5], y[6]
    ox, oy, oz = eta[3], eta[4], eta[5]
    R = _quat_matrix(y[3:7])
    for i in range(3):
        out[i] = R[i, 0] * eta[0] + R[i, 1] * eta[1] + R[i, 2] * eta[2]
    out[3] = 0.5 * (-x * ox - y_ * oy - z * oz)
    out[4] = 0.5 * (w * ox + y_ * oz - z * oy)
    out[5] = 0.5 * (w * oy - x * oz + z * ox)
    out[6] = 0.5 * (w * oz + x * oy - y_ * ox)


@njit(cache=True)
def guided_steps(kind, params, actuated, V_o, first, count, dt, y):
    """algorithms.advance_head for a head guide, ``count`` steps from step index ``first`` (t = n dt): RK4 on
    (position m, unit quaternion) y (7,) with the twist of :func:`guided_head`; returns the new y."""
    y = y.copy()
    k1, k2, k3, k4 = np.empty(7), np.empty(7), np.empty(7), np.empty(7)
    for n in range(first, first + count):
        t = n * dt
        start, _ = guided_head(kind, params, actuated, V_o, t)
        middle, _ = guided_head(kind, params, actuated, V_o, t + dt / 2)
        end, _ = guided_head(kind, params, actuated, V_o, t + dt)
        _pose_rate(y, start, k1)
        _pose_rate(y + dt / 2 * k1, middle, k2)
        _pose_rate(y + dt / 2 * k2, middle, k3)
        _pose_rate(y + dt * k3, end, k4)
        y = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
        y[3:7] /= math.sqrt(y[3] ** 2 + y[4] ** 2 + y[5] ** 2 + y[6] ** 2)
    return y


# ----------------------------------------------------------------------------------------------- one instant
@njit(cache=True)
def instant(kind, params, actuated, length, n_X, Mc, gravity, t, g_o, eta_o, etad_o, C, active, S, columns,
            dynamics):
    """algorithms.kinematic_instant after Block 0: the grid cut at the active supports, Block 1 (gravity the
    only non-contact load), ``Fc = Mo etad_o - Fo``, the minimum-norm split over the active supports
    (contacts.split_reaction), Block 2 with the point wrenches (F- at X = 0, F+ at X = l, jumps inside).

    Supports: C (p,) m, active (p,) bool, S (p, 6, 6) reaction columns (the first ``columns[i]`` used).
    Returns the nodes (X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv), eta, etad, Lam (N, 6),
    Fc (6,) head frame, F (p, 6) frame C_i, the closure, a status (HELD, NO_SUPPORT, CANNOT_HOLD) and per
    support the largest reacting component of the twist at C, ``max |S^T eta(C)|`` (p,) (0 when inactive).
    A support off the body stops it at once (status NOT_A_NODE)."""
    p = C.size
    cuts = np.empty(p)
    n_cuts = 0
    for i in range(p):
        if active[i]:
            cuts[n_cuts] = C[i]
            n_cuts += 1
    X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv = nodes(kind, params, actuated, length, n_X, t,
                                                                     cuts[:n_cuts], length)
    N = X.size
    eta = twists(X, segments, xi_t, Adk, Adk_inv, eta_o)
    F = np.zeros((p, 6))
    # each support's reacting components of the twist at C (its residual when it holds those at zero)
    residuals = np.zeros(p)
    for i in range(p):
        if active[i]:
            j = _node(X, C[i], False)
            if j < 0:
                return (X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv, eta, np.zeros((N, 6)),
                        np.zeros((N, 6)), np.zeros(6), F, 0.0, NOT_A_NODE, residuals)
            for m in range(columns[i]):
                component = 0.0
                for c in range(6):
                    component += S[i, c, m] * eta[j, c]
                residuals[i] = max(residuals[i], abs(component))
    if not dynamics:
        return (X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv, eta, np.zeros((N, 6)), np.zeros((N, 6)),
                np.zeros(6), F, 0.0, HELD, residuals)
    zeta = accelerations(X, segments, xi_t, xi_tt, Adk, Adk_inv, eta, np.zeros(6))
    # Block 1: Fb, Mo, Fo
    Fb = np.zeros((N, 6))
    Rg = g_o[:3, :3]
    R = np.empty((3, 3))
    for j in range(N):
        mat_mat(Rg, g_rel[j, :3, :3], R)
        for i in range(3):
            Fb[j, i] = Mc[0] * (R[0, i] * gravity[0] + R[1, i] * gravity[1] + R[2, i] * gravity[2])
    integrand = np.empty((N, 6))
    inertia = np.empty((N, 36))
    bias, work = np.empty(6), np.empty(6)
    for j in range(N):
        _ad_transpose_times(eta[j], Mc * eta[j], bias)
        work[:] = bias + Fb[j] - Mc * zeta[j]
        _mtv(Adk[j], work, integrand[j])
        A = Adk[j]
        for i in range(6):
            for k in range(6):
                acc = 0.0
                for m in range(6):
                    acc += A[m, i] * Mc[m] * A[m, k]
                inertia[j, 6 * i + k] = acc
    Mo = simpson_total(X, segments, inertia).reshape((6, 6))
    Fo = simpson_total(X, segments, integrand)
    Fc = Mo @ etad_o - Fo
    # the minimum-norm split of Fc over the active supports
    status = HELD
    scale = max(np.max(np.abs(Fc)), TINY)
    width = 0
    for i in range(p):
        if active[i]:
            width += columns[i]
    if width == 0:
        if np.max(np.abs(Fc)) > 0.0:
            status = NO_SUPPORT
    else:
        A = np.empty((6, width))
        k = 0
        for i in range(p):
            if active[i]:
                j = _node(X, C[i], False)
                for m in range(columns[i]):
                    _mtv(Adk[j], S[i, :, m].copy(), A[:, k + m])
                k += columns[i]
        f = np.linalg.lstsq(A, Fc, rcond=EPS * max(6, width))[0]
        if np.max(np.abs(A @ f - Fc)) > HOLD_TOLERANCE * scale and np.max(np.abs(Fc)) > 0.0:
            status = CANNOT_HOLD
        k = 0
        for i in range(p):
            if active[i]:
                for m in range(columns[i]):
                    F[i] += S[i, :, m] * f[k + m]
                k += columns[i]
    # Block 2: Lam from Lam(0) = -F-, jumps -Ad(k)^T F_i at the supports inside
    F_minus, F_plus = np.zeros(6), np.zeros(6)
    jumps = np.zeros((segments.shape[0], 6))
    back = np.empty(6)
    for i in range(p):
        if not active[i]:
            continue
        if C[i] <= SAME_ABSCISSA_M:
            F_minus += F[i]
        elif C[i] >= length - SAME_ABSCISSA_M:
            F_plus += F[i]
        else:
            j = _node(X, C[i], True)
            for s in range(segments.shape[0]):
                if segments[s, 0] == j:
                    _mtv(Adk[j], F[i], back)
                    jumps[s] -= back
    etad = np.empty((N, 6))
    source = np.empty((N, 6))
    for j in range(N):
        mat_vec(Adk[j], etad_o, etad[j])
        etad[j] += zeta[j]
        _ad_transpose_times(eta[j], Mc * eta[j], bias)
        work[:] = Mc * etad[j] - bias - Fb[j]
        _mtv(Adk[j], work, source[j])
    L = cumulative_simpson(X, segments, source, jumps)
    Lam = np.empty((N, 6))
    for j in range(N):
        _mtv(Adk_inv[j], L[j] - F_minus, Lam[j])
    big = max(np.max(np.abs(Lam)), np.max(np.abs(F_plus)), TINY)
    closure = np.max(np.abs(Lam[N - 1] - F_plus)) / big
    return X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv, eta, etad, Lam, Fc, F, closure, status, residuals


@njit(cache=True)
def _node(X, C, right):
    """rod.Nodes.at: the first (left) or last (right) node within SAME_ABSCISSA_M of C; -1 if none."""
    found = -1
    for j in range(X.size):
        if abs(X[j] - C) <= SAME_ABSCISSA_M:
            if not right:
                return j
            found = j
    return found
