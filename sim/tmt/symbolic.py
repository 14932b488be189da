"""The TMT equations derived symbolically with sympy, the paper's way (Sadati et al. 2015): an oracle for tests.

For point masses whose positions x_i(q) are sympy expressions of the coordinates q: T = dx/dq
(``x.jacobian(q)``), the convective term T_dot u = d(T u)/dq u (u_dot = 0), M = T^T m T and
d = T^T (m g - m T_dot u) + Q. ``lambdify`` (with common subexpressions) turns them into numeric functions.
Slow beyond about ten coordinates; the numeric engine (sim/tmt/engine.py) is the one to use.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def point_mass_equations(positions: Sequence, masses: Sequence[float], coordinates: Sequence, gravity: Sequence[float],
                         generalized_force=None) -> Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """``f(q, u) -> (M (n, n), d (n,))`` for point masses at ``positions`` (sympy 3-vectors in the coordinates
    ``coordinates``), of ``masses`` (kg), in ``gravity`` (3,) m/s^2, with an optional generalised force
    ``generalized_force(q, u)`` (sympy expressions, (n,))."""
    import sympy

    q = sympy.Matrix(list(coordinates))
    u = sympy.Matrix(sympy.symbols(f"u0:{len(coordinates)}"))
    g = sympy.Matrix(list(gravity))
    n = len(coordinates)
    M = sympy.zeros(n, n)
    d = sympy.zeros(n, 1) if generalized_force is None else sympy.Matrix(generalized_force(q, u))
    for x, m in zip(positions, masses):
        x = sympy.Matrix(list(x))
        T = x.jacobian(q)
        convective = (T * u).jacobian(q) * u
        M += m * T.T * T
        d += T.T * (m * g - m * convective)
    function = sympy.lambdify((list(q), list(u)), (M, d), modules="numpy", cse=True)

    def evaluate(q_value: np.ndarray, u_value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        M_value, d_value = function(list(q_value), list(u_value))
        return np.asarray(M_value, dtype=float), np.asarray(d_value, dtype=float).reshape(n)

    return evaluate
