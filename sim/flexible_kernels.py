"""The compiled (numba) form of the recursions with modal bodies (sim/flexible.py, docs/flexible.md).

Two kernels, as the rigid algorithm's (sim/dynamics.py): :func:`flex_forward` (first forward recursion: poses,
twists and velocity products of the bodies and of every section of every modal body) and :func:`flex_backward`
(body sums, backward recursion with the modes condensed, root, second forward recursion); the force plug-ins run
between them, in Python, on the section arrays. The modal bodies' data are packed (:class:`sim.flexible.Packed`):
sections of all modal bodies in one array (``sec0[m]:sec0[m+1]`` are body m's), modes padded to ``ne_max`` per
body, the padding's diagonal of E* held at 1 and its K_e, C*, Pe* at 0 so that the padded modes stay at zero.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .dense_loops import mat_mat, mat_vec
from .dynamics import _ad_inv, _joint_pose
from .kernel_cache import discard_stale_kernels
from .spatial import exp_so3

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache


@njit(cache=True)
def _ad6(eta, x, out):
    """out (6,) = ad_eta x = (Omega x x_v + V x x_w, Omega x x_w)."""
    V0, V1, V2, W0, W1, W2 = eta[0], eta[1], eta[2], eta[3], eta[4], eta[5]
    out[0] = W1 * x[2] - W2 * x[1] + V1 * x[5] - V2 * x[4]
    out[1] = W2 * x[0] - W0 * x[2] + V2 * x[3] - V0 * x[5]
    out[2] = W0 * x[1] - W1 * x[0] + V0 * x[4] - V1 * x[3]
    out[3] = W1 * x[5] - W2 * x[4]
    out[4] = W2 * x[3] - W0 * x[5]
    out[5] = W0 * x[4] - W1 * x[3]


@njit(cache=True)
def _minus_coad6(eta, P, out):
    """out (6,) = -ad^T_eta P = (Omega x P_f, V x P_f + Omega x P_m)."""
    V0, V1, V2, W0, W1, W2 = eta[0], eta[1], eta[2], eta[3], eta[4], eta[5]
    out[0] = W1 * P[2] - W2 * P[1]
    out[1] = W2 * P[0] - W0 * P[2]
    out[2] = W0 * P[1] - W1 * P[0]
    out[3] = V1 * P[2] - V2 * P[1] + W1 * P[5] - W2 * P[4]
    out[4] = V2 * P[0] - V0 * P[2] + W2 * P[3] - W0 * P[5]
    out[5] = V0 * P[1] - V1 * P[0] + W0 * P[4] - W1 * P[3]


@njit(cache=True)
def _nu6(eta_s, xi, out):
    """out (6,) = ad_{eta_s} xi - blkdiag(hat w, hat w) xi, w = xi[3:] (a section's velocity product)."""
    _ad6(eta_s, xi, out)
    w0, w1, w2 = xi[3], xi[4], xi[5]
    out[0] -= w1 * xi[2] - w2 * xi[1]
    out[1] -= w2 * xi[0] - w0 * xi[2]
    out[2] -= w0 * xi[1] - w1 * xi[0]
    out[3] -= w1 * xi[5] - w2 * xi[4]
    out[4] -= w2 * xi[3] - w0 * xi[5]
    out[5] -= w0 * xi[4] - w1 * xi[3]


@njit(cache=True)
def _add_transposed_product(X, Y, weight, out):
    """out (r, c) += weight X^T Y for X (k, r), Y (k, c)."""
    for a in range(X.shape[1]):
        for b in range(Y.shape[1]):
            acc = 0.0
            for c in range(X.shape[0]):
                acc += X[c, a] * Y[c, b]
            out[a, b] += weight * acc


@njit(cache=True)
def _add_transposed_matvec(X, y, weight, out):
    """out (r,) += weight X^T y for X (k, r), y (k,)."""
    for a in range(X.shape[1]):
        acc = 0.0
        for c in range(X.shape[0]):
            acc += X[c, a] * y[c]
        out[a] += weight * acc


@njit(cache=True)
def _section(X, Psi, qe, qed, o, ne, G, A, J, xi):
    """Pose G (4, 4) of a section at X in the floating frame, A = Ad_{G^-1} (6, 6), J (6, ne_max) and its relative
    twist xi = J q_d (6,), for the modal coordinates qe[o:o+ne], rates qed[o:o+ne]."""
    u = np.zeros(6)
    for a in range(6):
        acc = 0.0
        for c in range(ne):
            acc += Psi[a, c] * qe[o + c]
        u[a] = acc
    R = exp_so3(u[3:].copy())
    for a in range(3):
        for b in range(3):
            G[a, b] = R[a, b]
        G[3, a] = 0.0
    G[0, 3], G[1, 3], G[2, 3], G[3, 3] = X + u[0], u[1], u[2], 1.0
    _ad_inv(G, A)
    for c in range(Psi.shape[1]):
        for a in range(3):
            J[a, c] = R[0, a] * Psi[0, c] + R[1, a] * Psi[1, c] + R[2, a] * Psi[2, c]
            J[a + 3, c] = R[0, a] * Psi[3, c] + R[1, a] * Psi[4, c] + R[2, a] * Psi[5, c]
    for a in range(6):
        acc = 0.0
        for c in range(ne):
            acc += J[a, c] * qed[o + c]
        xi[a] = acc


@njit(cache=True)
def flex_forward(parent, axis, placement, modal_of, mode0, sec0, X, Psi, Xa, psi_a, q, qd, qe, qed, base_pose,
                 base_twist, g, Xj, AdJ, eta, zeta, S, sec_A, sec_J, sec_eta, sec_nu, g_sec):
    """First forward recursion with modal bodies (sim/flexible.py): g, Xj (joint pose), AdJ (Ad_{(G_a P E)^-1}),
    eta, zeta (velocity products nu_j), S (N+1, 6, ne_max) of every body; sec_A, sec_J, sec_eta, sec_nu, g_sec
    of every section of every modal body."""
    nb = parent.shape[0]
    ne_max = S.shape[2]
    PE = np.zeros((4, 4))
    B = np.zeros((6, 6))
    G = np.zeros((4, 4))
    A_a = np.zeros((6, 6))
    J_a = np.zeros((6, ne_max))
    xi = np.zeros(6)
    eta_a = np.zeros(6)
    nu_a = np.zeros(6)
    tmp = np.zeros(6)
    g[0] = base_pose
    eta[0] = base_twist
    zeta[0] = 0.0
    for j in range(nb):
        if j > 0:
            i = parent[j]
            k = j - 1
            _joint_pose(placement[j], axis[j], q[k], PE)
            _ad_inv(PE, B)
            mi = modal_of[i]
            if mi >= 0:
                o = mode0[mi]
                _section(Xa[j], psi_a[j], qe, qed, o, mode0[mi + 1] - o, G, A_a, J_a, xi)
                eta_a[:] = A_a @ eta[i] + xi
                AdJ[j] = B @ A_a
                S[j] = B @ J_a
                _nu6(eta_a, xi, tmp)
                nu_a[:] = B @ tmp
                g[j] = (g[i] @ G) @ PE
            else:
                eta_a[:] = eta[i]
                AdJ[j] = B
                S[j] = 0.0
                nu_a[:] = 0.0
                g[j] = g[i] @ PE
            Xj[j] = PE
            rd = axis[j] * qd[k]
            eta[j] = B @ eta_a + rd
            _ad6(eta[j], rd, tmp)
            zeta[j] = nu_a + tmp
        mj = modal_of[j]
        if mj >= 0:
            o = mode0[mj]
            for s in range(sec0[mj], sec0[mj + 1]):
                _section(X[s], Psi[s], qe, qed, o, mode0[mj + 1] - o, G, sec_A[s], sec_J[s], xi)
                mat_vec(sec_A[s], eta[j], sec_eta[s])
                for a in range(6):
                    sec_eta[s, a] += xi[a]
                _nu6(sec_eta[s], xi, sec_nu[s])
                mat_mat(g[j], G, g_sec[s])


@njit(cache=True)
def _cholesky_solve(E, rhs, out):
    """out (n, m) = E^-1 rhs for a symmetric positive definite E (n, n), rhs (n, m)."""
    n = E.shape[0]
    L = np.zeros((n, n))
    for a in range(n):
        for c in range(a + 1):
            s = E[a, c]
            for k in range(c):
                s -= L[a, k] * L[c, k]
            L[a, c] = np.sqrt(s) if a == c else s / L[c, c]
    for col in range(rhs.shape[1]):
        y = np.zeros(n)
        for a in range(n):
            s = rhs[a, col]
            for k in range(a):
                s -= L[a, k] * y[k]
            y[a] = s / L[a, a]
        for a in range(n - 1, -1, -1):
            s = y[a]
            for k in range(a + 1, n):
                s -= L[k, a] * out[k, col]
            out[a, col] = s / L[a, a]


@njit(cache=True)
def flex_backward(parent, axis, inertia, actuated, law_k, law_mu, law_r0, modal_of, mode0, sec0, w, Ms, K, D,
                  gravity, base_mode, base_acc_in, q, qd, qe, qed, qdd_in, tau_in, use_laws, g, AdJ, eta, zeta, S,
                  f_ext, f_gravity, M_added, sec_A, sec_J, sec_eta, sec_nu, g_sec, f_sec, M_sec, Mstar, Pistar, C, E,
                  Pe, Mt, Pt, EinvC, EinvP, H, eta_d, qdd, tau, qedd, base_acc, base_wrench):
    """Body sums, backward recursion (modes condensed), root and second forward recursion with modal bodies
    (sim/flexible.py). tau_in (n,): applied passive torques (the viscoelastic law added when use_laws);
    results in qdd, tau, qedd, base_acc, base_wrench, eta_d; f_ext of modal bodies gains their sections'
    integrated wrench densities at the end (for the outputs)."""
    nb = parent.shape[0]
    n = nb - 1
    ne_max = S.shape[2]
    v = np.zeros(6)
    P = np.zeros(6)
    h = np.zeros(6)
    ga = np.zeros(3)
    qpad = np.zeros(ne_max)
    qdpad = np.zeros(ne_max)
    rhs = np.zeros((ne_max, 7))
    sol = np.zeros((ne_max, 7))
    Mse = np.zeros((6, 6))
    MA = np.zeros((6, 6))
    MJ = np.zeros((6, ne_max))
    Me = np.zeros(6)
    mnu = np.zeros(6)
    # ---- body sums
    for j in range(nb):
        M = inertia[j] + M_added[j]
        Mstar[j] = M
        _minus_coad6(eta[j], M @ eta[j], P)
        for a in range(3):
            ga[a] = g[j, 0, a] * gravity[0] + g[j, 1, a] * gravity[1] + g[j, 2, a] * gravity[2]
        for a in range(6):
            fg = inertia[j, a, 0] * ga[0] + inertia[j, a, 1] * ga[1] + inertia[j, a, 2] * ga[2]
            Pistar[j, a] = P[a] - f_ext[j, a] - f_gravity[j, a] - fg
        mj = modal_of[j]
        if mj < 0:
            continue
        o = mode0[mj]
        ne = mode0[mj + 1] - o
        C[j] = 0.0
        E[j] = 0.0
        Pe[j] = 0.0
        for s in range(sec0[mj], sec0[mj + 1]):
            A, Js, ws = sec_A[s], sec_J[s], w[s]
            for a in range(6):
                for b in range(6):
                    Mse[a, b] = Ms[s, a, b] + M_sec[s, a, b]
            for a in range(3):
                ga[a] = g_sec[s, 0, a] * gravity[0] + g_sec[s, 1, a] * gravity[1] + g_sec[s, 2, a] * gravity[2]
            mat_vec(Mse, sec_eta[s], Me)
            _minus_coad6(sec_eta[s], Me, P)
            mat_vec(Mse, sec_nu[s], mnu)
            for a in range(6):
                fg = Ms[s, a, 0] * ga[0] + Ms[s, a, 1] * ga[1] + Ms[s, a, 2] * ga[2]
                h[a] = mnu[a] + P[a] - f_sec[s, a] - fg
            mat_mat(Mse, A, MA)
            mat_mat(Mse, Js, MJ)
            _add_transposed_product(A, MA, ws, Mstar[j])
            _add_transposed_product(Js, MA, ws, C[j])
            _add_transposed_product(Js, MJ, ws, E[j])
            _add_transposed_matvec(A, h, ws, Pistar[j])
            _add_transposed_matvec(Js, h, ws, Pe[j])
        qpad[:] = 0.0
        qdpad[:] = 0.0
        qpad[:ne] = qe[o:o + ne]
        qdpad[:ne] = qed[o:o + ne]
        Pe[j] += K[mj] @ qpad + D[mj] @ qdpad
        for c in range(ne, ne_max):
            E[j, c, c] = 1.0     # padding: E* = 1, C* = Pe* = 0 keep the padded modes at rest
    # ---- passive torques, backward recursion
    for k in range(n):
        if actuated[k]:
            qdd[k] = qdd_in[k]
            tau[k] = 0.0
        else:
            tau[k] = tau_in[k]
            if use_laws:
                tau[k] += -law_k[k] * (q[k] - law_r0[k]) - law_mu[k] * qd[k]
    for j in range(nb - 1, -1, -1):
        # condense j's modes (all its children are in)
        if modal_of[j] >= 0:
            for a in range(ne_max):
                for b in range(6):
                    rhs[a, b] = C[j, a, b]
                rhs[a, 6] = Pe[j, a]
            _cholesky_solve(E[j], rhs, sol)
            for a in range(ne_max):
                for b in range(6):
                    EinvC[j, a, b] = sol[a, b]
                EinvP[j, a] = sol[a, 6]
            Mt[j] = Mstar[j] - C[j].T @ EinvC[j]
            Mt[j] = 0.5 * (Mt[j] + Mt[j].T)
            Pt[j] = Pistar[j] - C[j].T @ EinvP[j]
        else:
            Mt[j] = Mstar[j]
            Pt[j] = Pistar[j]
        if j == 0:
            break
        i = parent[j]
        k = j - 1
        Aj = axis[j]
        if actuated[k]:
            Kj = Mt[j].copy()
            alpha = Pt[j] + Mt[j] @ (Aj * qdd[k] + zeta[j])
        else:
            MA = Mt[j] @ Aj
            H[j] = Aj @ MA
            Kj = Mt[j] - np.outer(MA, MA) / H[j]
            alpha = Kj @ zeta[j] + MA * ((tau[k] - Aj @ Pt[j]) / H[j]) + Pt[j]
        KAd = Kj @ AdJ[j]
        Mstar[i] += AdJ[j].T @ KAd
        Pistar[i] += AdJ[j].T @ alpha
        if modal_of[i] >= 0:
            St = S[j].T.copy()
            C[i] += St @ KAd
            E[i] += St @ (Kj @ S[j])
            Pe[i] += St @ alpha
    # ---- root
    if base_mode == 0:
        for a in range(6):
            v[a] = -Pt[0, a]
        sol6 = np.zeros((6, 1))
        rhs6 = np.zeros((6, 1))
        rhs6[:, 0] = v
        _cholesky_solve(Mt[0], rhs6, sol6)
        eta_d[0] = sol6[:, 0]
        base_wrench[:] = 0.0
    else:
        if base_mode == 2:
            eta_d[0] = base_acc_in
        else:
            eta_d[0] = 0.0
        base_wrench[:] = Mt[0] @ eta_d[0] + Pt[0]
    base_acc[:] = eta_d[0]
    # ---- second forward recursion
    for j in range(nb):
        if j > 0:
            i = parent[j]
            k = j - 1
            Aj = axis[j]
            mu = AdJ[j] @ eta_d[i] + zeta[j]
            mi = modal_of[i]
            if mi >= 0:
                o = mode0[mi]
                qpad[:] = 0.0
                qpad[:mode0[mi + 1] - o] = qedd[o:mode0[mi + 1]]
                mu += S[j] @ qpad
            if actuated[k]:
                eta_d[j] = mu + Aj * qdd[k]
                tau[k] = Aj @ (Mt[j] @ eta_d[j] + Pt[j])
            else:
                qdd[k] = (tau[k] - Aj @ (Mt[j] @ mu + Pt[j])) / H[j]
                eta_d[j] = mu + Aj * qdd[k]
        mj = modal_of[j]
        if mj >= 0:
            o = mode0[mj]
            ne = mode0[mj + 1] - o
            acc = -(EinvC[j] @ eta_d[j] + EinvP[j])
            qedd[o:o + ne] = acc[:ne]
            for s in range(sec0[mj], sec0[mj + 1]):
                _add_transposed_matvec(sec_A[s], f_sec[s], w[s], f_ext[j])
