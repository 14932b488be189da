"""The passive elastic rod's strain (sim/cosserat/passive.py): ``xi = xi0 + Phi(X) q`` with ``Phi`` the Legendre
polynomials ``P_j(2 X / l - 1)``, j < modes, per free component (case 1: all six components written, the others
at the reference). The Python form is passive.strain_field (numpy's legvander); :func:`legendre_kernel` evaluates
the polynomials by their three-term recurrence, parameters packed by :func:`legendre_params`."""
from __future__ import annotations

import numpy as np
from numba import njit


def legendre_params(length: float, modes: int, free, q, q_dot, q_ddot) -> np.ndarray:
    """(l m, modes, n_free, free components..., q, q_dot, q_ddot (n_free modes each)) of :func:`legendre_kernel`."""
    return np.concatenate([[length, modes, len(free)], np.asarray(free, dtype=float), q, q_dot, q_ddot])


@njit(cache=True)
def legendre_values(s, P, dP):
    """P (modes,) the Legendre polynomials P_j(s) and dP (modes,) their d/ds, j < modes, for s in [-1, 1] (the
    three-term recurrence, as numpy's legvander)."""
    for j in range(P.size):
        if j == 0:
            P[j], dP[j] = 1.0, 0.0
        elif j == 1:
            P[j], dP[j] = s, 1.0
        else:
            P[j] = ((2 * j - 1) * s * P[j - 1] - (j - 1) * P[j - 2]) / j
            dP[j] = dP[j - 2] + (2 * j - 1) * P[j - 1]


@njit(cache=True)
def legendre_kernel(params, X, t, out):
    """out (4, 6): xi, d/dX, d/dt, d2/dt2 of all six components at abscissa X (m)."""
    length, modes, n_free = params[0], int(params[1]), int(params[2])
    n_q = modes * n_free
    first = 3 + n_free
    for c in range(6):
        out[0, c] = 1.0 if c == 0 else 0.0
        out[1, c] = 0.0
        out[2, c] = 0.0
        out[3, c] = 0.0
    P = np.empty(modes)
    dP = np.empty(modes)            # d P_j / ds
    legendre_values(2.0 * X / length - 1.0, P, dP)
    for f in range(n_free):
        c = int(params[3 + f])
        for j in range(modes):
            k = f * modes + j
            out[0, c] += P[j] * params[first + k]
            out[1, c] += dP[j] * 2.0 / length * params[first + k]
            out[2, c] += P[j] * params[first + n_q + k]
            out[3, c] += P[j] * params[first + 2 * n_q + k]
