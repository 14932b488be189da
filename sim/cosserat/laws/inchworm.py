"""The inchworm's strain law (Sec. 5B, docs/cosserat.md): ``K_Z = theta'``,
``theta = alpha sin^2(omega t) sin(2 pi (X - l) / l)`` (planar case, one actuated component).

:func:`inchworm_law` is the Python form (the reference); :func:`inchworm_kernel` the compiled one, the same
arithmetic on one abscissa, parameters packed by :func:`inchworm_params`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit


def inchworm_params(alpha: float, omega: float, length: float) -> np.ndarray:
    """(alpha rad, omega rad/s, l m, k = 2 pi / l 1/m) of :func:`inchworm_kernel`."""
    return np.array([alpha, omega, length, 2.0 * math.pi / length])


def inchworm_law(alpha: float, omega: float, length: float):
    """(X (N,) m, t s) -> (K_Z, d/dX, d/dt, d2/dt2), each (N, 1)."""
    k = 2.0 * math.pi / length

    def law(X, t):
        shape = alpha * k * np.cos(k * (X - length))
        shape_X = -alpha * k * k * np.sin(k * (X - length))
        s2, ds2, dds2 = (math.sin(omega * t) ** 2, omega * math.sin(2 * omega * t),
                         2 * omega * omega * math.cos(2 * omega * t))
        return (s2 * shape)[:, None], (s2 * shape_X)[:, None], (ds2 * shape)[:, None], (dds2 * shape)[:, None]
    return law


@njit(cache=True)
def inchworm_kernel(params, X, t, out):
    """out (4, 1): K_Z and its d/dX, d/dt, d2/dt2 at abscissa X (m), time t (s)."""
    alpha, omega, length, k = params[0], params[1], params[2], params[3]
    shape = alpha * k * math.cos(k * (X - length))
    shape_X = -alpha * k * k * math.sin(k * (X - length))
    s2, ds2, dds2 = (math.sin(omega * t) ** 2, omega * math.sin(2 * omega * t),
                     2 * omega * omega * math.cos(2 * omega * t))
    out[0, 0] = s2 * shape
    out[1, 0] = s2 * shape_X
    out[2, 0] = ds2 * shape
    out[3, 0] = dds2 * shape
