"""The earthworm's strain law (Sec. 5A, docs/cosserat.md): ``Gamma_X = 1 + eps sin(phi)``,
``phi = (2 pi / lambda)(s(t) - X)``, ``s = b_c t + a_c t^2 / 2`` (axial case, one actuated component).

:func:`earthworm_law` is the Python form (the reference); :func:`earthworm_kernel` the compiled one, the same
arithmetic on one abscissa, parameters packed by :func:`earthworm_params`."""
from __future__ import annotations

import math

import numpy as np
from numba import njit


def earthworm_params(eps: float, wavelength: float, a_c: float, b_c: float) -> np.ndarray:
    """(eps, k = 2 pi / lambda 1/m, a_c m/s^2, b_c m/s) of :func:`earthworm_kernel`."""
    return np.array([eps, 2.0 * math.pi / wavelength, a_c, b_c])


def earthworm_law(eps: float, wavelength: float, a_c: float, b_c: float):
    """(X (N,) m, t s) -> (Gamma_X, d/dX, d/dt, d2/dt2), each (N, 1)."""
    k = 2.0 * math.pi / wavelength

    def law(X, t):
        s, c = b_c * t + 0.5 * a_c * t * t, b_c + a_c * t
        phi = k * (s - X)
        sin, cos = np.sin(phi), np.cos(phi)
        value = 1.0 + eps * sin
        return (value[:, None], (-eps * k * cos)[:, None], (eps * k * c * cos)[:, None],
                (eps * (-(k * c) ** 2 * sin + k * a_c * cos))[:, None])
    return law


@njit(cache=True)
def earthworm_kernel(params, X, t, out):
    """out (4, 1): Gamma_X and its d/dX, d/dt, d2/dt2 at abscissa X (m), time t (s)."""
    eps, k, a_c, b_c = params[0], params[1], params[2], params[3]
    s, c = b_c * t + 0.5 * a_c * t * t, b_c + a_c * t
    phi = k * (s - X)
    sin, cos = math.sin(phi), math.cos(phi)
    out[0, 0] = 1.0 + eps * sin
    out[1, 0] = -eps * k * cos
    out[2, 0] = eps * k * c * cos
    out[3, 0] = eps * (-(k * c) ** 2 * sin + k * a_c * cos)
