"""Periodic orbits of a periodically driven simulation: Newton shooting on the period map (docs/periodic.md).

A robot whose actuated joints repeat with period T (the flapper's stroke, RayBot's tail beat) has a periodic
flight or swim when its state after one period equals its initial state up to the motions that leave the
dynamics unchanged: a translation (uniform gravity, fluid at rest) and a turn about the vertical. The solver
finds such an initial state:

- :func:`newton_shooting` is generic: given the period map ``F`` on reduced coordinates x (m,), it solves
  ``F(x) = x`` by Newton's method with a central-difference Jacobian and a backtracking (damped) step, and
  returns the monodromy matrix ``dF/dx`` at the solution and its eigenvalues, the Floquet multipliers (moduli
  < 1: small deviations from the orbit decay period after period; > 1: they grow).
- :func:`multiple_shooting` solves the same problem with the period cut into K parts joined by continuity
  conditions (same solver, block Jacobian), for orbits whose multipliers are too large for one period map.
- :class:`ShootingCoordinates` maps a :class:`sim.simulation.Simulation`'s state to the reduced coordinates:
  for a floating base x = (roll, pitch, base twist (6), passive joint positions, passive joint velocities); the
  base position and heading are left out (they are the symmetries). For a fixed or imposed base x = (passive
  joint positions, velocities).
- :func:`periodic_orbit` puts the two together for a simulation and reports the orbit: the named initial
  state, the residual, the multipliers, and the net motion over one period (mean velocity and heading change)
  which tells a hover (none) from a steady climb, sink or drift.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from .spatial import exp_so3, matrix_to_quat, quat_to_matrix

#: Relative size of the central-difference perturbation of each coordinate (of max(1, |x_i|)): its truncation
#: error (~h^2) and its rounding error (~1e-16 / h) are then both ~1e-10 of the Jacobian's entries.
FD_RELATIVE_STEP = 1e-5
#: Default convergence tolerance on the scaled residual max_i |F(x)_i - x_i| / max(1, |x_i|).
RESIDUAL_TOLERANCE = 1e-10
#: Default number of Newton iterations before giving up.
MAX_ITERATIONS = 30
#: Levenberg-Marquardt damping: initial lambda (relative to the largest diagonal entry of A^T A), its factor
#: down after a step that lowers the residual and up after one that does not, and the most retries per
#: iteration. Far from the orbit (a multiplier near 1 makes A = M - I nearly singular and the plain Newton step
#: huge) the damping shortens the step toward gradient descent; near it the step becomes Newton's.
INITIAL_DAMPING = 1e-6
DAMPING_DOWN, DAMPING_UP = 0.2, 8.0
MAX_RETRIES = 16
#: Periods of a tethered run (fixed base) that give a free flight's first guess of the passive joints: their
#: multipliers are ~1e-3 (docs/periodic.md), so three periods leave ~1e-9 of the start's transient.
TETHERED_GUESS_PERIODS = 3

PeriodMap = Callable[[np.ndarray], np.ndarray]


@dataclass
class SolveResult:
    """Outcome of :func:`levenberg_marquardt`: ``z`` the last iterate; ``residual`` its weighted max-norm;
    ``history`` that norm at every accepted iterate (first: the guess); ``evaluations`` residuals computed."""

    z: np.ndarray
    residual: float
    converged: bool
    iterations: int
    history: list[float]
    evaluations: int


@dataclass
class ShootingResult:
    """Outcome of :func:`newton_shooting`. ``x`` (m,) the last iterate (the periodic point if ``converged``);
    ``residual`` the scaled residual there; ``history`` the scaled residual at every iterate (first = the
    initial guess); ``monodromy`` (m, m) dF/dx at ``x``; ``multipliers`` (m,) its eigenvalues (complex),
    sorted by decreasing modulus; ``evaluations`` period maps computed."""

    x: np.ndarray
    residual: float
    converged: bool
    iterations: int
    history: list[float]
    monodromy: np.ndarray
    multipliers: np.ndarray
    evaluations: int


def coordinate_weights(x: np.ndarray) -> np.ndarray:
    """1 / max(1, |x_i|): residuals absolute for small coordinates, relative for large ones."""
    return 1.0 / np.maximum(1.0, np.abs(x))


def scaled_residual(x: np.ndarray, image: np.ndarray) -> float:
    """max_i |F(x)_i - x_i| / max(1, |x_i|)."""
    return float(np.max(np.abs(image - x) * coordinate_weights(x))) if x.size else 0.0


def central_jacobian(function: Callable[[np.ndarray], np.ndarray], x: np.ndarray) -> np.ndarray:
    """d function / dx (k, m) at x (m,) by central differences (2 m evaluations)."""
    columns = []
    for i in range(x.size):
        h = FD_RELATIVE_STEP * max(1.0, abs(x[i]))
        plus, minus = x.copy(), x.copy()
        plus[i] += h
        minus[i] -= h
        columns.append((function(plus) - function(minus)) / (2.0 * h))
    return np.column_stack(columns) if columns else np.zeros((0, 0))


def levenberg_marquardt(residual: Callable[[np.ndarray], np.ndarray], z0: np.ndarray,
                        weights: Callable[[np.ndarray], np.ndarray], *, tolerance: float = RESIDUAL_TOLERANCE,
                        max_iterations: int = MAX_ITERATIONS, log: Callable[[str], None] | None = None,
                        jacobian: Callable[[np.ndarray], np.ndarray] | None = None) -> SolveResult:
    """Solve residual(z) = 0 (as many equations as unknowns, or more) from the guess ``z0``.

    Each iteration weights the residual (``weights(z)``, held for the iteration), linearises it, A = d(w r)/dz
    (by central differences of ``residual``, or ``jacobian(z)`` = dr/dz when given: a caller that knows the
    Jacobian's structure computes it cheaper; its cost is the caller's to count), and takes the
    Levenberg-Marquardt step (A^T A + lambda diag(A^T A)) dz = -A^T w r, raising lambda until the weighted
    residual's norm decreases: far from a root (or along a nearly singular direction) the step shortens toward
    gradient descent, near it it becomes Newton's. Stops when the weighted max-norm is below ``tolerance``."""
    z = np.array(z0, dtype=float)
    evaluations = 0

    def evaluate(point: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        return np.asarray(residual(point), dtype=float)

    value = evaluate(z)
    history = [float(np.max(np.abs(value * weights(z)))) if z.size else 0.0]
    iterations = 0
    damping = None
    while history[-1] > tolerance and iterations < max_iterations:
        iterations += 1
        w = weights(z)
        linear = w[:, None] * (central_jacobian(evaluate, z) if jacobian is None else jacobian(z))
        weighted = w * value
        normal, gradient = linear.T @ linear, linear.T @ weighted
        diagonal = np.maximum(np.diag(normal), np.finfo(float).tiny)
        if damping is None:
            damping = INITIAL_DAMPING * float(diagonal.max())
        norm = float(np.linalg.norm(weighted))
        for _ in range(MAX_RETRIES):
            trial = z + np.linalg.solve(normal + damping * np.diag(diagonal), -gradient)
            trial_value = evaluate(trial)
            if np.all(np.isfinite(trial_value)) and np.linalg.norm(w * trial_value) < norm:
                damping *= DAMPING_DOWN
                break
            damping *= DAMPING_UP
        else:
            if log is not None:
                log(f"no decrease after {MAX_RETRIES} damped steps at iteration {iterations}: stopping")
            break
        z, value = trial, trial_value
        history.append(float(np.max(np.abs(value * weights(z)))))
        if log is not None:
            log(f"iteration {iterations}: residual {history[-1]:.3e} (damping {damping:.2g})")
    return SolveResult(z=z, residual=history[-1], converged=history[-1] <= tolerance, iterations=iterations,
                       history=history, evaluations=evaluations)


def floquet_multipliers(monodromy: np.ndarray) -> np.ndarray:
    """Eigenvalues (complex) of the monodromy matrix, by decreasing modulus."""
    multipliers = np.linalg.eigvals(monodromy) if monodromy.size else np.zeros(0, dtype=complex)
    return multipliers[np.argsort(-np.abs(multipliers), kind="stable")]


def newton_shooting(period_map: PeriodMap, x0: np.ndarray, *, tolerance: float = RESIDUAL_TOLERANCE,
                    max_iterations: int = MAX_ITERATIONS, log: Callable[[str], None] | None = None
                    ) -> ShootingResult:
    """Solve F(x) = x for the period map F from the guess ``x0`` (m,) (:func:`levenberg_marquardt` on
    F(x) - x with the weights of :func:`coordinate_weights`), then compute the monodromy matrix dF/dx at the
    result by central differences and its eigenvalues, the Floquet multipliers."""
    solved = levenberg_marquardt(lambda x: period_map(x) - x, x0, coordinate_weights, tolerance=tolerance,
                                 max_iterations=max_iterations, log=log)
    monodromy = central_jacobian(period_map, solved.z)
    return ShootingResult(x=solved.z, residual=solved.residual, converged=solved.converged,
                          iterations=solved.iterations, history=solved.history, monodromy=monodromy,
                          multipliers=floquet_multipliers(monodromy), evaluations=solved.evaluations + 2 * solved.z.size)


SegmentMap = Callable[[int, np.ndarray], np.ndarray]


def multiple_shooting(segment_map: SegmentMap, x0: np.ndarray, segments: int, *,
                      tolerance: float = RESIDUAL_TOLERANCE, max_iterations: int = MAX_ITERATIONS,
                      log: Callable[[str], None] | None = None) -> ShootingResult:
    """Solve F(x) = x by multiple shooting: the period cut into ``segments`` (K) equal parts, ``segment_map(k,
    s)`` carrying the coordinates s (m,) from the start of part k to its end (F is their composition).

    Unknowns: the coordinates s_0 .. s_{K-1} (K m,) at the start of every part; equations: the K continuity
    conditions segment_map(k, s_k) = s_{k+1} (s_K = s_0: periodicity), weighted by :func:`coordinate_weights`
    of s_{k+1}, solved by the same :func:`levenberg_marquardt`. Where single shooting fails because one
    period amplifies errors too much (large multipliers: the period map's rounding alone exceeds the tolerance,
    or Newton's linearisation holds only very near the orbit), each part amplifies them only by its K-th root.
    The Jacobian is block-bidiagonal, built from the K part Jacobians (2 m part maps each, 2 m period maps
    in all: as single shooting's); the monodromy matrix is their product. The guess s_k: the parts run in
    sequence from ``x0`` (m,). ``ShootingResult.x`` is s_0; ``evaluations`` counts period maps (K part maps
    each)."""
    if segments < 1:
        raise ValueError(f"multiple shooting needs at least one segment, got {segments}")
    x0 = np.asarray(x0, dtype=float)
    m = x0.size
    starts = [x0]
    for k in range(segments - 1):
        starts.append(np.asarray(segment_map(k, starts[-1]), dtype=float))
    part_maps = 0

    def ends(z: np.ndarray) -> np.ndarray:
        nonlocal part_maps
        part_maps += segments
        return np.concatenate([segment_map(k, z[k * m:(k + 1) * m]) for k in range(segments)])

    def residual(z: np.ndarray) -> np.ndarray:
        return ends(z) - np.roll(z, -m)

    def weights(z: np.ndarray) -> np.ndarray:
        return coordinate_weights(np.roll(z, -m))

    def part_jacobians(z: np.ndarray) -> list[np.ndarray]:
        nonlocal part_maps
        part_maps += 2 * m * segments
        return [central_jacobian(lambda s, k=k: segment_map(k, s), z[k * m:(k + 1) * m]) for k in range(segments)]

    def jacobian(z: np.ndarray) -> np.ndarray:
        """d(ends(z) - roll(z)) / dz: the part Jacobians on the diagonal, -I one block to the right (cyclic)."""
        blocks = np.zeros((segments * m, segments * m))
        for k, part in enumerate(part_jacobians(z)):
            rows = slice(k * m, (k + 1) * m)
            blocks[rows, k * m:(k + 1) * m] += part
            following = (k + 1) % segments
            blocks[rows, following * m:(following + 1) * m] -= np.eye(m)
        return blocks

    solved = levenberg_marquardt(residual, np.concatenate(starts), weights, tolerance=tolerance,
                                 max_iterations=max_iterations, log=log, jacobian=jacobian)
    monodromy = np.eye(m)
    for part in part_jacobians(solved.z):
        monodromy = part @ monodromy
    return ShootingResult(x=solved.z[:m].copy(), residual=solved.residual, converged=solved.converged,
                          iterations=solved.iterations, history=solved.history, monodromy=monodromy,
                          multipliers=floquet_multipliers(monodromy), evaluations=math.ceil(part_maps / segments))


# ----------------------------------------------------------------------------------------- base orientation
def yaw_pitch_roll(R: np.ndarray) -> tuple[float, float, float]:
    """Z-Y-X Euler angles (rad) of a rotation matrix (3, 3), base -> world: R = Rz(yaw) Ry(pitch) Rx(roll).
    ``pitch`` turns the base's x axis about its y axis (positive: x toward -z, nose down for an x-forward
    body)."""
    yaw = math.atan2(R[1, 0], R[0, 0])
    pitch = math.atan2(-R[2, 0], math.hypot(R[0, 0], R[1, 0]))
    roll = math.atan2(R[2, 1], R[2, 2])
    return yaw, pitch, roll


@dataclass
class ShootingCoordinates:
    """The reduced coordinates of a Simulation's state for shooting (see the module's docstring).

    ``names`` (m,) name of each coordinate with its unit; ``origin`` (4, 4) world pose at which every shot
    starts (the model's base pose with its heading and tilt removed: position kept)."""

    sim: object
    names: list[str] = field(init=False)
    origin: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        model = self.sim.model
        self.floating = model.base_mode == "floating"
        self.passive = [model.joint_names[k] for k in self.sim.passive_index]
        base = ["roll_rad", "pitch_rad", "vx_m_s", "vy_m_s", "vz_m_s", "wx_rad_s", "wy_rad_s", "wz_rad_s"]
        self.names = (base if self.floating else []) + [f"q:{name}" for name in self.passive] \
            + [f"qd:{name}" for name in self.passive]
        self.origin = np.eye(4)
        self.origin[:3, 3] = np.asarray(model.base_pose)[:3, 3]

    @property
    def size(self) -> int:
        return len(self.names)

    def from_state(self, y: np.ndarray) -> np.ndarray:
        """Reduced coordinates (m,) of the simulation state y (13 + 2 n_p,)."""
        joints = y[13:]
        if not self.floating:
            return joints.copy()
        _, pitch, roll = yaw_pitch_roll(quat_to_matrix(y[3:7] / np.linalg.norm(y[3:7])))
        return np.concatenate([[roll, pitch], y[7:13], joints])

    def to_state(self, x: np.ndarray) -> np.ndarray:
        """The simulation state (13 + 2 n_p,) at the origin, heading 0, for reduced coordinates x (m,)."""
        n_joint = 2 * len(self.passive)
        y = np.zeros(13 + n_joint)
        y[0:3] = self.origin[:3, 3]
        if self.floating:
            y[3:7] = matrix_to_quat(exp_so3(np.array([0.0, x[1], 0.0])) @ exp_so3(np.array([x[0], 0.0, 0.0])))
            y[7:13] = x[2:8]
        else:
            y[3:7] = matrix_to_quat(np.asarray(self.sim.model.base_pose)[:3, :3])
        y[13:] = x[-n_joint:] if n_joint else []
        return y

    def start(self, x: np.ndarray, t: float = 0.0) -> None:
        """Put the simulation at time ``t`` (s; the drive's phase) in the state of coordinates x."""
        y = self.to_state(x)
        model, n_p = self.sim.model, len(self.passive)
        q, qd = np.zeros(model.n), np.zeros(model.n)
        q[self.sim.passive_index] = y[13:13 + n_p]
        qd[self.sim.passive_index] = y[13 + n_p:]
        pose = np.eye(4)
        pose[:3, :3] = quat_to_matrix(y[3:7])
        pose[:3, 3] = y[0:3]
        self.sim.reset(q=q, qd=qd, base_pose=pose, base_twist=y[7:13] if self.floating else None)
        self.sim.t = t

    def named(self, x: np.ndarray) -> dict[str, float]:
        return {name: float(value) for name, value in zip(self.names, x)}


@dataclass
class PeriodicOrbit:
    """A periodic orbit of a simulation (or the closest point found): ``initial_state`` {coordinate name: value}
    (units in the names); ``shooting`` the solver's record; ``displacement_m`` (3,) world translation of the
    base over one period and ``heading_change_rad`` its turn about the vertical (floating base; zero otherwise);
    ``period_s``."""

    coordinates: ShootingCoordinates
    shooting: ShootingResult
    period_s: float
    displacement_m: np.ndarray
    heading_change_rad: float

    @property
    def initial_state(self) -> dict[str, float]:
        return self.coordinates.named(self.shooting.x)

    @property
    def mean_velocity_m_s(self) -> np.ndarray:
        """(3,) world frame: the net translation over one period divided by the period (zero for a hover)."""
        return self.displacement_m / self.period_s

    def summary(self) -> dict:
        """JSON-ready figures of the orbit (the keys `mms sim --periodic --summary` adds)."""
        moduli = np.abs(self.shooting.multipliers)
        return {
            "periodic_converged": bool(self.shooting.converged),
            "periodic_residual": self.shooting.residual,
            "periodic_iterations": self.shooting.iterations,
            "floquet_multipliers": [float(m) for m in moduli],
            "floquet_stable": bool(moduli.size == 0 or moduli.max() < 1.0),
            "initial_state": self.initial_state,
            "periodic_mean_velocity_mm_s": {axis: 1e3 * float(v) for axis, v in zip("xyz", self.mean_velocity_m_s)},
            "periodic_heading_change_deg": math.degrees(self.heading_change_rad),
        }


def first_guess(sim, period: float, coordinates: ShootingCoordinates) -> np.ndarray:
    """Rest for a fixed or imposed base; for a floating one, the base level and at rest with the passive joints
    in the state they reach after :data:`TETHERED_GUESS_PERIODS` periods of the same model on a fixed base."""
    sim.reset()
    x0 = coordinates.from_state(sim.y)
    if not coordinates.floating:
        return x0
    from .simulation import Simulation

    tethered = Simulation(sim.model.replace(base_mode="fixed"), sim.integrator, sim.dt)
    tethered.reset()
    tethered.advance(TETHERED_GUESS_PERIODS * period)
    n_joint = 2 * len(coordinates.passive)
    if n_joint:
        x0[-n_joint:] = tethered.y[13:]
    return x0


def periodic_orbit(sim, period: float, x0: np.ndarray | None = None, *, tolerance: float = RESIDUAL_TOLERANCE,
                   max_iterations: int = MAX_ITERATIONS, log: Callable[[str], None] | None = None,
                   segments: int = 1) -> PeriodicOrbit:
    """Find the periodic orbit of ``sim`` (a :class:`sim.simulation.Simulation`) for the drive period
    ``period`` (s; a whole number of the simulation's steps) from the guess ``x0`` (reduced coordinates;
    default: the state after ``sim.reset()``, rest). ``segments`` > 1: :func:`multiple_shooting` with the
    period cut into that many parts (each a whole number of steps; the reduced coordinates drop the same
    symmetries at every part's start, so each part starts at the origin, heading 0, at its own time)."""
    steps = period / sim.dt
    if abs(steps - round(steps)) > 1e-9 * steps:
        raise ValueError(f"the period {period:g} s is not a whole number of steps of dt = {sim.dt:g} s")
    if segments < 1 or round(steps) % segments:
        raise ValueError(f"the period's {round(steps)} steps do not split into {segments} equal segments")
    coordinates = ShootingCoordinates(sim)
    if x0 is None:
        x0 = first_guess(sim, period, coordinates)
    part = period / segments

    def segment_map(k: int, x: np.ndarray) -> np.ndarray:
        coordinates.start(x, k * part)
        sim.advance(part)
        return coordinates.from_state(sim.y)

    if segments == 1:
        result = newton_shooting(lambda x: segment_map(0, x), x0, tolerance=tolerance,
                                 max_iterations=max_iterations, log=log)
    else:
        result = multiple_shooting(segment_map, x0, segments, tolerance=tolerance, max_iterations=max_iterations,
                                   log=log)
    coordinates.start(result.x)
    start = sim.y.copy()
    sim.advance(period)
    displacement = sim.y[0:3] - start[0:3]
    heading = yaw_pitch_roll(quat_to_matrix(sim.y[3:7] / np.linalg.norm(sim.y[3:7])))[0] \
        if coordinates.floating else 0.0
    return PeriodicOrbit(coordinates=coordinates, shooting=result, period_s=period, displacement_m=displacement,
                         heading_change_rad=heading)


@dataclass
class TrimmedOrbit:
    """A periodic orbit with no net translation along the chosen axes, found by adjusting open parameters of
    the model: ``orbit`` (the periodic orbit at the trimmed parameters, multipliers included), ``parameters``
    {name: value} the trimmed values, ``solve`` the solver's record on the augmented unknowns."""

    orbit: PeriodicOrbit
    parameters: dict[str, float]
    solve: SolveResult


def trimmed_orbit(simulation_for: Callable[[np.ndarray], object], parameter_names: list[str],
                  parameters0: np.ndarray, period: float, *, axes: tuple[int, ...] = (0, 2),
                  x0: np.ndarray | None = None, tolerance: float = RESIDUAL_TOLERANCE,
                  max_iterations: int = MAX_ITERATIONS, log: Callable[[str], None] | None = None) -> TrimmedOrbit:
    """A periodic orbit whose base returns to its starting position along ``axes`` (world x = 0, y = 1, z = 2;
    default x and z: a hover, free to drift sideways only if the robot is not symmetric), found by adjusting
    ``len(axes)`` model parameters with the orbit: unknowns (x, p), equations F_p(x) = x and the net
    translation over one period along ``axes`` = 0 (in m/s: divided by the period).

    ``simulation_for(p)`` builds the Simulation for parameters p (k,) (cached here: the Jacobian's columns
    that move x reuse one simulation); ``x0`` defaults to :func:`first_guess` at ``parameters0``."""
    if len(parameter_names) != len(axes) or len(parameters0) != len(axes):
        raise ValueError(f"{len(axes)} axes to hold need as many parameters, got {len(parameter_names)}")
    cache: dict[tuple, tuple] = {}

    def setup(p: np.ndarray):
        key = tuple(float(v) for v in p)
        if key not in cache:
            cache.clear()
            sim = simulation_for(np.array(key))
            cache[key] = (sim, ShootingCoordinates(sim))
        return cache[key]

    sim, coordinates = setup(np.asarray(parameters0, dtype=float))
    if x0 is None:
        x0 = first_guess(sim, period, coordinates)
    m = coordinates.size

    def residual(z: np.ndarray) -> np.ndarray:
        try:
            sim, coordinates = setup(z[m:])
        except ValueError:      # parameters the model refuses (out of their range): a failed trial step
            return np.full(m + len(axes), np.nan)
        coordinates.start(z[:m])
        start = sim.y[0:3].copy()
        sim.advance(period)
        drift = (sim.y[0:3] - start)[list(axes)] / period
        return np.concatenate([coordinates.from_state(sim.y) - z[:m], drift])

    def weights(z: np.ndarray) -> np.ndarray:
        return np.concatenate([coordinate_weights(z[:m]), np.ones(len(axes))])

    solved = levenberg_marquardt(residual, np.concatenate([x0, parameters0]), weights, tolerance=tolerance,
                                 max_iterations=max_iterations, log=log)
    sim, _ = setup(solved.z[m:])
    orbit = periodic_orbit(sim, period, solved.z[:m], tolerance=tolerance, max_iterations=0)
    return TrimmedOrbit(orbit=orbit, parameters=dict(zip(parameter_names, map(float, solved.z[m:]))), solve=solved)
