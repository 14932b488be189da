"""A time-invariant, X-uniform strain (the rigid-limit and free-rod checks, :func:`sim.cosserat.strains.constant_field`):
the actuated components are the parameters, their derivatives zero. The Python form is in strains.py."""
from __future__ import annotations

from numba import njit


@njit(cache=True)
def constant_kernel(params, X, t, out):
    """out (4, m): the m actuated values ``params`` (m,), then zeros (d/dX, d/dt, d2/dt2)."""
    for m in range(params.size):
        out[0, m] = params[m]
        out[1, m] = 0.0
        out[2, m] = 0.0
        out[3, m] = 0.0
