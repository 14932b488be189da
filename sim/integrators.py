"""Time integrators for the simulation state (flat vector y, see sim/simulation.py).

- :func:`rk4_step`: classical fixed-step Runge-Kutta of order 4.
- :func:`dopri5_advance`: adaptive Dormand-Prince 5(4) (Dormand & Prince 1980; Hairer, Norsett & Wanner,
  "Solving ODEs I", section II.4-II.5) with the standard step-size controller, advancing exactly to t_end.
- :func:`rosw_step`: the linearly implicit Rosenbrock-W method ROS34PW2 (Rang & Angermann 2005, BIT 45; 4 stages,
  order 3, L-stable), with an approximate Jacobian of the coordinates' block (passive joints and the modal
  coordinates of modal bodies, then their rates): the stiff, fast-decaying modes (structural damping on small
  inertias, a modal wing's high modes) are damped by the implicit part instead of bounding the step,
  which is then set by accuracy. A W-method keeps its order for any approximate Jacobian, so a linearisation at
  rest (:func:`coordinate_jacobian`) serves the whole run; time enters only through f (the autonomised system's
  Jacobian is taken with a zero time column), so no time derivative of f is needed.

The state holds a unit quaternion; ``normalize(y)`` is called after every accepted step (the derivative
function itself normalises the quaternion it reads), which keeps the base rotation on SO(3) without
changing the order of the method.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from numba import njit

from .integrator_names import INTEGRATORS  # noqa: F401 (the names, kept importable from here)
from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache


Derivative = Callable[[float, np.ndarray], np.ndarray]


# The arithmetic of the fixed-step methods is written once, in these kernels: the Python path (the functions
# below, stages evaluated by a Python f) and the fused path (sim/fused.py, stages evaluated in the kernel) call
# the same ones, so both give the same numbers.
@njit(cache=True)
def rk4_stage_input(stage, t, dt, y, k, out):
    """State of RK4 stage ``stage`` (1..3) into out (ny,): y + c dt k[stage - 1] (c = 1/2, 1/2, 1); returns the
    stage time (s)."""
    coef = dt if stage == 3 else 0.5 * dt
    for i in range(y.shape[0]):
        out[i] = y[i] + coef * k[stage - 1, i]
    return t + coef


@njit(cache=True)
def rk4_update(y, dt, k, out):
    """out (ny,) = y + dt/6 (k1 + 2 k2 + 2 k3 + k4) for the stages k (4, ny); out may be y."""
    sixth = dt / 6.0
    for i in range(y.shape[0]):
        out[i] = y[i] + sixth * (k[0, i] + 2.0 * k[1, i] + 2.0 * k[2, i] + k[3, i])


def rk4_step(f: Derivative, t: float, y: np.ndarray, dt: float) -> np.ndarray:
    """One classical RK4 step of size dt (s) from (t, y); returns y(t + dt)."""
    k = np.empty((4, y.shape[0]))
    state = np.empty(y.shape[0])
    k[0] = f(t, y)
    for stage in range(1, 4):
        k[stage] = f(rk4_stage_input(stage, t, dt, y, k, state), state)
    out = np.empty(y.shape[0])
    rk4_update(y, dt, k, out)
    return out


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


# ROS34PW2 (Rang & Angermann 2005, Table 4.2) in the standard form of Hairer & Wanner (Solving ODEs II, IV.7):
# (I - h gamma J) k_i = f(t + c_i h, y + h sum_j ALPHA[i, j] k_j) + h J sum_j GAMMA[i, j] k_j ; y1 = y + h sum b_i k_i.
ROSW_GAMMA_DIAG = 0.43586652150845900
ROSW_ALPHA = np.array([[0.0, 0.0, 0.0],
                       [0.87173304301691801, 0.0, 0.0],
                       [0.84457060015369423, -0.11299064236484185, 0.0],
                       [0.0, 0.0, 1.0]])
ROSW_GAMMA = np.array([[0.0, 0.0, 0.0],
                       [-0.87173304301691801, 0.0, 0.0],
                       [-0.90338057013044082, 0.054180672388095326, 0.0],
                       [0.24212380706095346, -1.2232505839045147, 0.54526025533510214]])
ROSW_B = np.array([0.24212380706095346, -1.2232505839045147, 1.5452602553351020, ROSW_GAMMA_DIAG])
ROSW_C = ROSW_ALPHA.sum(axis=1)
#: Offset of the coordinates' block (passive joints and modal coordinates, then their rates) in the state vector
#: (sim/simulation.py); the Jacobian's columns and rows are that block's.
PASSIVE_OFFSET = 13
#: Steps between two refreshes of the Jacobian (one evaluation per column group each): the air's forces change
#: with the stroke's speed and the blades' angles, and a Jacobian of another phase of the stroke costs the
#: method its accuracy (flapper at 400 us, Jacobian held: 2.3 % deviation with that of stroke reversal, 0.2 %
#: with that of mid-stroke).
JACOBIAN_REFRESH_STEPS = 20
#: Absolute increment (rad or m, rad/s or m/s) of the finite differences of the linearisation: the states are
#: O(1) angles and velocities; 1e-7 balances truncation and rounding (errors ~1e-7 relative, harmless to a
#: W-method, which only needs an approximate Jacobian).
JACOBIAN_FD_STEP = 1e-7


def coordinate_branches(parent: np.ndarray, bodies: np.ndarray) -> np.ndarray:
    """Branch (n_g,) int of each coordinate of the state's coordinate block, given the body it moves (``bodies``
    (n_g,): a passive joint's child body, a modal coordinate's modal body): the index of the child of the base
    that carries it (0 for the base's own modes). Coordinates of two branches act on each other only through the
    base (not at all when it is fixed or imposed)."""
    branch = np.empty(len(bodies), dtype=np.int64)
    for i, body in enumerate(bodies):
        body = int(body)
        while body != 0 and parent[body] != 0:
            body = int(parent[body])
        branch[i] = body
    return branch


def column_groups(branch: np.ndarray) -> np.ndarray:
    """Columns of the coordinate block (positions 0..n_g-1, velocities n_g..2n_p-1) perturbed together by
    :func:`refresh_jacobian`: (groups, branches) int, one column per branch per group, -1 for none."""
    n_g = branch.size
    ids = sorted(set(branch.tolist()))
    columns = [[c for c in range(2 * n_g) if branch[c % n_g] == b] for b in ids]
    width = max((len(c) for c in columns), default=0)
    return np.array([[c[g] if g < len(c) else -1 for c in columns] for g in range(width)],
                    dtype=np.int64).reshape(width, len(ids))


def coordinate_jacobian(f: Derivative, t: float, y: np.ndarray, branch: np.ndarray) -> np.ndarray:
    """Jacobian (2 n_g, 2 n_g) of the coordinate block of dy/dt with respect to the coordinate block of y at (t, y)
    (d(q_p)/dt = qd_p exactly; the rest by :func:`refresh_jacobian`)."""
    n2 = y.size - PASSIVE_OFFSET
    n_g = n2 // 2
    J = np.zeros((n2, n2))
    J[:n_g, n_g:] = np.eye(n_g)
    refresh_jacobian(f, t, y, f(t, y), J, column_groups(branch), branch)
    return J


@njit(cache=True)
def jacobian_shift(y, group, out):
    """out (ny,) = y with the coordinate-block columns of ``group`` (-1: none) moved by JACOBIAN_FD_STEP."""
    for i in range(y.shape[0]):
        out[i] = y[i]
    for c in range(group.shape[0]):
        if group[c] >= 0:
            out[PASSIVE_OFFSET + group[c]] += JACOBIAN_FD_STEP


@njit(cache=True)
def jacobian_store(J, group, branch, column, f0):
    """The forward differences (column - f0) / JACOBIAN_FD_STEP into the acceleration rows of J for the columns
    of ``group``, each keeping the response of its own branch only."""
    o = PASSIVE_OFFSET
    n_g = branch.shape[0]
    for c in range(group.shape[0]):
        a = group[c]
        if a < 0:
            continue
        for r in range(n_g):
            if branch[r] == branch[a % n_g]:
                J[n_g + r, a] = (column[o + n_g + r] - f0[o + n_g + r]) / JACOBIAN_FD_STEP


def refresh_jacobian(f: Derivative, t: float, y: np.ndarray, f0: np.ndarray, J: np.ndarray, groups: np.ndarray,
                     branch: np.ndarray) -> None:
    """Recompute in place the acceleration rows of J by forward differences at (t, y), f0 = f(t, y), one
    evaluation per group of columns (:func:`column_groups`): a group perturbs one column of every branch, and
    each column keeps only the response of its own branch (the coupling between branches through a floating
    base is left out: a W-method needs an approximate Jacobian only)."""
    shifted = np.empty(y.shape[0])
    for group in groups:
        jacobian_shift(y, group, shifted)
        jacobian_store(J, group, branch, f(t, shifted), f0)


@njit(cache=True)
def invert_w(J, h_gamma, out):
    """out = (I - h_gamma J)^-1 by Gauss-Jordan elimination with partial pivoting (J (m, m); W is close to the
    identity for the small steps and diagonally dominant for the stiff ones, so pivoting on rows is enough).
    numba's np.linalg.inv would do, at several times the compile time."""
    m = J.shape[0]
    W = np.empty((m, m))
    for a in range(m):
        for b in range(m):
            W[a, b] = (1.0 if a == b else 0.0) - h_gamma * J[a, b]
            out[a, b] = 1.0 if a == b else 0.0
    for c in range(m):
        pivot = c
        for r in range(c + 1, m):
            if abs(W[r, c]) > abs(W[pivot, c]):
                pivot = r
        if pivot != c:
            for b in range(m):
                W[c, b], W[pivot, b] = W[pivot, b], W[c, b]
                out[c, b], out[pivot, b] = out[pivot, b], out[c, b]
        scale = 1.0 / W[c, c]
        for b in range(m):
            W[c, b] *= scale
            out[c, b] *= scale
        for r in range(m):
            if r != c and W[r, c] != 0.0:
                factor = W[r, c]
                for b in range(m):
                    W[r, b] -= factor * W[c, b]
                    out[r, b] -= factor * out[c, b]


def rosw_matrix(J: np.ndarray, h: float) -> np.ndarray:
    """(I - h gamma J)^-1 (2 n_g, 2 n_g) for the coordinate-block Jacobian J and the step h (s)."""
    out = np.empty(J.shape)
    invert_w(np.ascontiguousarray(J, dtype=float), h * ROSW_GAMMA_DIAG, out)
    return out


@njit(cache=True)
def rosw_stage_input(i, t, h, y, k, out):
    """State of ROS34PW2 stage i (1..3) into out (ny,): y + h sum_j<i ALPHA[i, j] k[j]; returns its time (s)."""
    for a in range(y.shape[0]):
        acc = y[a]
        for j in range(i):
            acc += (h * ROSW_ALPHA[i, j]) * k[j, a]
        out[a] = acc
    return t + ROSW_C[i] * h


@njit(cache=True)
def rosw_stage_solve(i, h, J, W_inv, k, coupling, rhs):
    """Stage i's linear solve on the coordinate block, in place in k[i] (which holds f at the stage state):
    k_i = W^-1 (f_i + h J sum_j<i GAMMA[i, j] k_j); coupling, rhs (2 n_g,) scratch."""
    o = PASSIVE_OFFSET
    n2 = coupling.shape[0]
    for a in range(n2):
        acc = 0.0
        for j in range(i):
            acc += ROSW_GAMMA[i, j] * k[j, o + a]
        coupling[a] = acc
    for a in range(n2):
        acc = 0.0
        for b in range(n2):
            acc += J[a, b] * coupling[b]
        rhs[a] = k[i, o + a] + h * acc
    for a in range(n2):
        acc = 0.0
        for b in range(n2):
            acc += W_inv[a, b] * rhs[b]
        k[i, o + a] = acc


@njit(cache=True)
def rosw_update(y, h, k, out):
    """out (ny,) = y + h sum_j B[j] k[j] for the stages k (4, ny); out may be y."""
    for a in range(y.shape[0]):
        acc = 0.0
        for j in range(4):
            acc += ROSW_B[j] * k[j, a]
        out[a] = y[a] + h * acc


def rosw_step(f: Derivative, t: float, y: np.ndarray, h: float, J: np.ndarray, W_inv: np.ndarray,
              refresh: tuple | None = None) -> np.ndarray:
    """One ROS34PW2 step of size h (s) from (t, y) with the coordinate-block Jacobian J and W_inv =
    :func:`rosw_matrix` (J, h) (the base block's Jacobian is taken as zero); returns y(t + h). ``refresh``:
    (groups, branch) to first recompute J at (t, y) and W_inv in place (:func:`refresh_jacobian`)."""
    ny = y.shape[0]
    k = np.empty((4, ny))
    state = np.empty(ny)
    coupling = np.empty(ny - PASSIVE_OFFSET)
    rhs = np.empty(ny - PASSIVE_OFFSET)
    for i in range(4):
        if i == 0:
            k[0] = f(t, y)
            if refresh is not None:
                refresh_jacobian(f, t, y, k[0], J, *refresh)
                invert_w(J, h * ROSW_GAMMA_DIAG, W_inv)
        else:
            k[i] = f(rosw_stage_input(i, t, h, y, k, state), state)
        rosw_stage_solve(i, h, J, W_inv, k, coupling, rhs)
    out = np.empty(ny)
    rosw_update(y, h, k, out)
    return out
