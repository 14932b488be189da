"""The snakes' strain law (Sec. 5C-D, eq. 54, docs/cosserat.md): ``K_Z = a cos(omega u) + b B(u - t_o - T_o/2)``,
``u = t + X / V_o`` (so ``K_t = V_o K'``: every section follows the head), B the turn's bump; the 3-D snake adds
``K_Y = b_y B(u - t_o - T_o/2)`` (case 4: actuated (K_Y, K_Z); the 2-D one is case 5: K_Z).

:func:`snake_law` is the Python form (the reference); :func:`snake_kernel` the compiled one, the same arithmetic
on one abscissa, parameters packed by :func:`snake_params`."""
from __future__ import annotations

import math
from typing import Callable

import numpy as np
from numba import njit


def snake_params(a: float, b: float, omega: float, t_o: float, T_o: float, V_o: float,
                 b_y: float | None) -> np.ndarray:
    """(a 1/m, b 1/m, omega rad/s, t_o s, T_o s, V_o m/s, b_y 1/m, 3-D flag) of :func:`snake_kernel`."""
    return np.array([a, b, omega, t_o, T_o, V_o, 0.0 if b_y is None else b_y, 0.0 if b_y is None else 1.0])


def bump(tau: np.ndarray, T_o: float):
    """``B(tau) = exp(tau^2 / (tau^2 - T_o^2 / 4))`` on |tau| < T_o / 2, else 0; with its first two derivatives."""
    a = T_o * T_o / 4.0
    inside = np.abs(tau) < T_o / 2.0
    tt = np.where(inside, tau, 0.0)
    u = tt * tt - a
    B = np.where(inside, np.exp(tt * tt / u), 0.0)
    f1 = -2.0 * a * tt / (u * u)
    f2 = -2.0 * a * (u - 4.0 * tt * tt) / (u * u * u)
    return B, np.where(inside, B * f1, 0.0), np.where(inside, B * (f2 + f1 * f1), 0.0)


def travelling(V_o: float, profile: Callable[[np.ndarray], tuple]):
    """A strain ``K = f(u)``, ``u = t + X / V_o`` (so ``K_t = V_o K'``: every section follows the head):
    returns (X, t) -> (K, K', K_t, K_tt) with profile(u) = (f, f', f'')."""
    def law(X, t):
        f, f1, f2 = profile(t + X / V_o)
        return f, f1 / V_o, f1, f2
    return law


def snake_profile(a: float, b: float, omega: float, t_o: float, T_o: float):
    """Eq. 54: ``a cos(omega u) + b B(u - t_o - T_o / 2)``."""
    def profile(u):
        B, B1, B2 = bump(u - t_o - T_o / 2.0, T_o)
        return (a * np.cos(omega * u) + b * B, -a * omega * np.sin(omega * u) + b * B1,
                -a * omega * omega * np.cos(omega * u) + b * B2)
    return profile


def snake_law(a: float, b: float, omega: float, t_o: float, T_o: float, V_o: float, b_y: float | None):
    """(X (N,) m, t s) -> (K, d/dX, d/dt, d2/dt2): each (N,) K_Z (2-D, ``b_y`` None) or (N, 2) (K_Y, K_Z)."""
    turn = travelling(V_o, snake_profile(a, b, omega, t_o, T_o))
    if b_y is None:
        return turn
    lift = travelling(V_o, snake_profile(0.0, b_y, omega, t_o, T_o))

    def law(X, t):
        return tuple(np.stack([y, z], axis=1) for y, z in zip(lift(X, t), turn(X, t)))
    return law


@njit(cache=True)
def _bump(tau, T_o):
    """Scalar :func:`bump`: (B, B', B'')."""
    a = T_o * T_o / 4.0
    if not abs(tau) < T_o / 2.0:
        return 0.0, 0.0, 0.0
    u = tau * tau - a
    B = math.exp(tau * tau / u)
    f1 = -2.0 * a * tau / (u * u)
    f2 = -2.0 * a * (u - 4.0 * tau * tau) / (u * u * u)
    return B, B * f1, B * (f2 + f1 * f1)


@njit(cache=True)
def _travelling(a, b, omega, t_o, T_o, V_o, X, t, out, column):
    """Column ``column`` of out (4, m): K, K', K_t, K_tt of the profile ``a cos(omega u) + b B`` at (X, t)."""
    u = t + X / V_o
    B, B1, B2 = _bump(u - t_o - T_o / 2.0, T_o)
    f1 = -a * omega * math.sin(omega * u) + b * B1
    out[0, column] = a * math.cos(omega * u) + b * B
    out[1, column] = f1 / V_o
    out[2, column] = f1
    out[3, column] = -a * omega * omega * math.cos(omega * u) + b * B2


@njit(cache=True)
def snake_kernel(params, X, t, out):
    """out (4, 1) K_Z (2-D) or (4, 2) (K_Y, K_Z) (3-D), with d/dX, d/dt, d2/dt2, at abscissa X (m), time t (s)."""
    a, b, omega, t_o, T_o, V_o, b_y = params[0], params[1], params[2], params[3], params[4], params[5], params[6]
    if params[7] == 0.0:
        _travelling(a, b, omega, t_o, T_o, V_o, X, t, out, 0)
    else:
        _travelling(0.0, b_y, omega, t_o, T_o, V_o, X, t, out, 0)
        _travelling(a, b, omega, t_o, T_o, V_o, X, t, out, 1)
