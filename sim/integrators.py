"""Time integrators for the simulation state (flat vector y, see sim/simulation.py).

- :func:`rk4_step`: classical fixed-step Runge-Kutta of order 4.
- :func:`dopri5_advance`: adaptive Dormand-Prince 5(4) (Dormand & Prince 1980; Hairer, Norsett & Wanner,
  "Solving ODEs I", section II.4-II.5) with the standard step-size controller, advancing exactly to t_end.

The state holds a unit quaternion; ``normalize(y)`` is called after every accepted step (the derivative
function itself normalises the quaternion it reads), which keeps the base rotation on SO(3) without
changing the order of the method.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

Derivative = Callable[[float, np.ndarray], np.ndarray]


def rk4_step(f: Derivative, t: float, y: np.ndarray, dt: float) -> np.ndarray:
    """One classical RK4 step of size dt (s) from (t, y); returns y(t + dt)."""
    k1 = f(t, y)
    k2 = f(t + 0.5 * dt, y + (0.5 * dt) * k1)
    k3 = f(t + 0.5 * dt, y + (0.5 * dt) * k2)
    k4 = f(t + dt, y + dt * k3)
    return y + (dt / 6.0) * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


# Dormand-Prince 5(4) tableau.
_C = np.array([0.0, 1 / 5, 3 / 10, 4 / 5, 8 / 9, 1.0, 1.0])
_A = [
    [],
    [1 / 5],
    [3 / 40, 9 / 40],
    [44 / 45, -56 / 15, 32 / 9],
    [19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729],
    [9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656],
    [35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84],
]
_B5 = np.array([35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84, 0.0])
_B4 = np.array([5179 / 57600, 0.0, 7571 / 16695, 393 / 640, -92097 / 339200, 187 / 2100, 1 / 40])
_E = _B5 - _B4

#: Step-size controller constants (Hairer & Wanner): safety factor and bounds of the step ratio.
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 5.0


@dataclass
class AdaptiveState:
    """Carried between calls of :func:`dopri5_advance`: the last proposed step h (s) and statistics."""
    h: float
    accepted: int = 0
    rejected: int = 0
    evaluations: int = 0
    history: list = field(default_factory=list)


def dopri5_step(f: Derivative, t: float, y: np.ndarray, h: float, k1: np.ndarray):
    """One Dormand-Prince step: returns (y5 (order 5), error estimate (order 4 difference), k7 = f(t+h, y5))."""
    k = [k1]
    for stage in range(1, 7):
        increment = np.zeros_like(y)
        for coef, ks in zip(_A[stage], k):
            if coef != 0.0:
                increment += coef * ks
        k.append(f(t + _C[stage] * h, y + h * increment))
    y5 = y + h * sum(b * ks for b, ks in zip(_B5, k) if b != 0.0)
    err = h * sum(e * ks for e, ks in zip(_E, k) if e != 0.0)
    return y5, err, k[6]


def dopri5_advance(f: Derivative, t: float, y: np.ndarray, t_end: float, state: AdaptiveState, *,
                   rtol: float = 1e-8, atol: float = 1e-10, h_min: float = 1e-12,
                   normalize: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Integrate from t to t_end (s) with adaptive Dormand-Prince steps; returns y(t_end).

    Error norm: RMS of err / (atol + rtol max(|y|, |y_new|)); a step is accepted when the norm is <= 1.
    ``state.h`` is the next proposed step size, updated in place. Raises RuntimeError below ``h_min``.
    """
    k1 = f(t, y)
    state.evaluations += 1
    while t < t_end:
        h = min(state.h, t_end - t)
        last = h >= t_end - t
        y_new, err, k7 = dopri5_step(f, t, y, h, k1)
        state.evaluations += 6
        scale = atol + rtol * np.maximum(np.abs(y), np.abs(y_new))
        norm = float(np.sqrt(np.mean((err / scale) ** 2))) if y.size else 0.0
        if not np.isfinite(norm):
            norm = np.inf
        factor = MAX_FACTOR if norm == 0.0 else min(MAX_FACTOR, max(MIN_FACTOR, SAFETY * norm ** -0.2))
        if norm <= 1.0:
            t = t_end if last else t + h
            y = y_new if normalize is None else normalize(y_new)
            k1 = k7  # first-same-as-last; normalisation moves y by the (already accepted) rounding only
            state.accepted += 1
            # Do not let the final (possibly truncated) step shrink the proposal for the next call.
            if not last or factor * h > state.h:
                state.h = factor * h
        else:
            state.rejected += 1
            state.h = max(h * min(1.0, factor), 0.0)
            if state.h < h_min:
                raise RuntimeError(f"adaptive step size fell below {h_min} s at t = {t} s")
    return y
