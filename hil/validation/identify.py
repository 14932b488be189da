"""``mms identify RUN.mcap --params stiffness.bend_root,stiffness.damping,aero.rho_air,servo.lag_s``: fit a robot
model's parameters to a recorded run, with uncertainties (docs/identify.md).

Method:

1. The run's health (hil/validation/health.py) gives its healthy windows; a run that is not valid is refused with
   the reasons, before anything is fitted. Only samples inside the healthy windows, after the re-simulation's
   warm-up, enter the fit.
2. The telemetry goes on the device's own sample clock (:func:`hil.validation.resim.on_device_clock`): the host's
   per-frame receive stamps scatter by a millisecond and reorder samples. The health (step 1) keeps the host's.
3. The model is re-simulated driven by the measured servo motion (hil/validation/resim.py, the replay of
   ``mms validate --sim``), with the parameters set in its config; ``servo.lag_s`` (not a config key) shifts the
   measured motion in time: the joints move at ``t`` as the servos were measured at ``t + lag`` (a positive lag: the
   servo angle is reported late).
4. The residuals are the differences between each fitted channel (a rig sensor with a declared map to a simulated
   signal: ``measured = scale * simulated + offset``) and its prediction, both low-passed forward and backward at
   ``--cutoff`` (default :data:`FIT_HARMONICS` times the drive's dominant frequency): the smoothed servo motion
   determines the response at the stroke's first harmonics, not the structure's free vibration above them, which
   the rig's own servo jitter excites and the smooth drive cannot (on the demo's rig the wing's ~50 Hz bending
   vibration would otherwise pull the stiffness to detune the model's mode). Each channel is divided by its
   filtered measured standard deviation over the fitted samples (so that strains and forces weigh alike).
5. ``scipy.optimize.least_squares`` (trust region reflective, bounded) minimises their sum of squares, in units
   of each parameter's scale (its start value; :data:`LAG_SCALE_S` for the lag). The Jacobian is by forward
   differences of :data:`DIFF_STEP` scales, its columns evaluated as one batch of independent simulations
   (:mod:`sim.studies`: a local Dask cluster by default, ``--scheduler``).
6. Uncertainty: the sum of a part over time and a part between channels (both linearised at the optimum, no
   further simulation). Over time: the larger of ``s^2 (J^T J)^-1`` (``s^2`` the residual variance, sum of squares
   over samples minus parameters, multiplied by the residuals' integrated autocorrelation time: samples a
   millisecond apart do not carry independent errors; white noise gives a factor 1) and the delete-one-block
   jackknife over :data:`BLOCK_S` blocks (:func:`block_jackknife`: a run disturbed in stretches). Between channels:
   the delete-one-channel jackknife (:func:`channel_jackknife`: a gauge whose calibration is off). Standard errors
   are the diagonal's roots, correlations the normalised off-diagonal.
7. The corrected config is the robot config with the estimates written in (``servo.lag_s``, not a config key, is
   written as a comment).
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from hil.recording.series import WRENCH_NAMES, Tables
from hil.validation.identify_args import BOUND_FACTOR, FIT_HARMONICS, LAG_BOUND_S, SERVO_LAG
from sim.config import ConfigError

#: the lag's scale, s: a servo or its sensor is late by milliseconds
LAG_SCALE_S = 1e-3
#: forward-difference step of the Jacobian, in parameter scales: the re-simulation is a fixed-step integration,
#: smooth in its parameters, so the step's truncation error (~1e-3 relative) dominates round-off (~1e-12)
DIFF_STEP = 1e-3
#: the optimiser's stopping tolerances (relative change of the parameters, of the cost): far below the standard
#: errors of any real recording
X_TOLERANCE, F_TOLERANCE = 1e-6, 1e-8
#: the most simulations one fit may run (each is a re-simulation of the fitted stretch)
MAX_SIMULATIONS = 200
#: the channels fitted by default: the rig's strain gauges (the structure's response to the stroke)
DEFAULT_KEYS = ("strain",)
#: the time blocks of the fit's block jackknife, s: many of the residuals' correlation times (36-62 ms on the demo)
#: and five of the demo's strokes, so that a run of 20 s gives some twenty blocks
BLOCK_S = 1.0
#: a block ratio (:attr:`Fit.block_ratio`) above this: the run's stretches disagree beyond their noise, the blocks'
#: scatter is the standard error's time part, and the report says so (measured on the demo: idle 0.06, on a loaded
#: host 1.4 and more; docs/identify.md)
UNSTEADY_RATIO = 1.0
#: the zero-phase filter's start and end transients are kept out of the fitted samples, in periods of the cutoff
FILTER_EDGE_PERIODS = 5.0


@dataclass(frozen=True)
class Parameter:
    """One fitted parameter: a config key (``table.key``, any depth) or :data:`SERVO_LAG`; start value and bounds
    in the key's unit; ``scale`` the optimiser's unit."""
    name: str
    start: float
    lower: float
    upper: float
    scale: float


@dataclass(frozen=True)
class Channel:
    """A fitted channel: the measured telemetry signal and the simulated one (``measured = scale * simulated +
    offset``); ``sim_column`` indexes the simulated key's components."""
    name: str
    measured_key: str
    simulated_key: str
    sim_column: int
    scale: float
    offset: float


@dataclass
class Problem:
    """Everything a worker needs to predict the fitted channels for a parameter vector (picklable)."""
    config: dict
    config_path: str
    names: list[str]
    drive: dict[str, tuple[np.ndarray, np.ndarray]]   # joint -> (times s from t0, angles rad), smoothed
    duration_s: float
    warmup_s: float
    channels: list[Channel]
    sample_t: np.ndarray        # (m,) simulation times (s from t0) of the fitted samples, the same for every channel
    cutoff_hz: float            # the low-pass both the measured and the simulated channels go through

    @property
    def edge_s(self) -> float:
        return FILTER_EDGE_PERIODS / self.cutoff_hz


@dataclass
class Fit:
    parameters: list[Parameter]
    estimates: np.ndarray           # (p,) in the parameters' units
    standard_errors: np.ndarray     # (p,)
    correlations: np.ndarray        # (p, p)
    residual_rms: dict[str, float]  # per channel, in the channel's unit
    start_rms: dict[str, float]     # the same at the start values
    correlation_time: float         # the residuals' integrated autocorrelation time, samples (the SE inflation)
    samples: int                    # per channel
    windows: list[tuple[float, float]]
    simulations: int
    message: str
    where: str
    extra: dict = field(default_factory=dict)
    #: (p,) the standard errors' part from the channels' disagreement (:func:`channel_jackknife`), parameter units
    channel_errors: np.ndarray | None = None
    #: the 1 s blocks' scatter (:func:`block_jackknife`) over the stationary noise's standard error: below 1 when
    #: the run is alike throughout (0.06-0.57 on the demo), above UNSTEADY_RATIO when stretches disagree (loaded host)
    block_ratio: float = 1.0

    @property
    def channel_parts(self) -> np.ndarray:
        """(p,) :attr:`channel_errors`, zeros when not computed."""
        return self.channel_errors if self.channel_errors is not None else np.zeros(len(self.parameters))

    def as_dict(self) -> dict:
        return {"parameters": [{"name": p.name, "start": p.start, "lower": p.lower, "upper": p.upper,
                                "estimate": float(e), "standard_error": float(s),
                                "channel_error": float(c)}
                               for p, e, s, c in zip(self.parameters, self.estimates, self.standard_errors,
                                                     self.channel_parts)],
                "correlations": self.correlations.tolist(), "residual_rms": self.residual_rms,
                "start_rms": self.start_rms, "correlation_time_samples": self.correlation_time,
                "samples_per_channel": self.samples, "windows": [list(w) for w in self.windows],
                "block_ratio": self.block_ratio, "simulations": self.simulations, "optimizer": self.message,
                "evaluated_on": self.where,
                **self.extra}


# ------------------------------------------------------------------------------------------- parameters
def config_value(config: dict, name: str):
    """The value at dotted ``name`` in ``config``, or KeyError."""
    node = config
    for part in name.split("."):
        if not isinstance(node, dict) or part not in node:
            raise KeyError(name)
        node = node[part]
    return node


def with_values(config: dict, names: list[str], values) -> dict:
    """A copy of ``config`` with each dotted config key of ``names`` set (``servo.lag_s`` skipped)."""
    out = copy.deepcopy(config)
    for name, value in zip(names, values):
        if name == SERVO_LAG:
            continue
        *tables, key = name.split(".")
        node = out
        for part in tables:
            node = node[part]
        node[key] = float(value)
    return out


def _numeric_keys(config: dict, prefix: str = "") -> list[str]:
    keys = []
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            keys += _numeric_keys(value, name + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            keys.append(name)
    return keys


def _float(text: str, item: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise ConfigError(None, "--params", f"{item}: bound {text!r} is not a finite number")
    return value


def parse_parameters(text: str, config: dict, config_path) -> list[Parameter]:
    """``NAME[=LOWER:UPPER],...`` -> parameters, the start values from ``config``; a name the config does not have
    (as a number) or bounds that exclude the start value are a one-line :class:`ConfigError`."""
    from sim.cli_options import suggestion

    parameters = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, _, bounds = item.partition("=")
        name = name.strip()
        if name in (p.name for p in parameters):
            raise ConfigError(None, "--params", f"{name} is given twice")
        if name == SERVO_LAG:
            start, scale = 0.0, LAG_SCALE_S
            lower, upper = -LAG_BOUND_S, LAG_BOUND_S
        else:
            try:
                start = config_value(config, name)
            except KeyError:
                known = _numeric_keys(config)
                raise ConfigError(config_path, name, f"the robot config has no such parameter"
                                  f"{suggestion(name, known + [SERVO_LAG])} (--params takes numeric config keys "
                                  f"such as {', '.join(known[:4])}, or {SERVO_LAG})") from None
            if isinstance(start, bool) or not isinstance(start, (int, float)) or not math.isfinite(start):
                raise ConfigError(config_path, name, f"is {start!r}, not a number: it cannot be fitted")
            start = float(start)
            if start == 0.0 and not bounds:
                raise ConfigError(None, "--params", f"{name} starts at 0: give its bounds ({name}=LOWER:UPPER)")
            scale = abs(start) if start != 0.0 else None
            low, high = sorted((start / BOUND_FACTOR, start * BOUND_FACTOR))
            lower, upper = low, high
        if bounds:
            low_text, colon, high_text = bounds.partition(":")
            if not colon:
                raise ConfigError(None, "--params", f"{item}: expected {name}=LOWER:UPPER")
            lower, upper = _float(low_text, item), _float(high_text, item)
            if not lower < upper:
                raise ConfigError(None, "--params", f"{item}: the lower bound must be below the upper one")
            if scale is None:
                scale = max(abs(lower), abs(upper))
        if not lower <= start <= upper:
            raise ConfigError(None, "--params", f"{name}: bounds [{lower:g}, {upper:g}] exclude the start value "
                                                f"{start:g} (the config's)")
        parameters.append(Parameter(name, start, lower, upper, scale))
    if not parameters:
        raise ConfigError(None, "--params", "no parameter named (e.g. --params stiffness.bend_root)")
    return parameters


# ------------------------------------------------------------------------------------------- the model
def predict(problem: Problem, values) -> np.ndarray:
    """The fitted channels' predictions (n_channels, m) at ``problem.sample_t`` for parameter ``values`` (p,) in
    their units: a module-level function, so that a Dask worker can run it."""
    from hil.validation.resim import _drive_with_splines, model_step, run_driven, smoothed
    from sim.robots import build_robot

    values = [float(v) for v in values]
    config = with_values(problem.config, problem.names, values)
    lag = values[problem.names.index(SERVO_LAG)] if SERVO_LAG in problem.names else 0.0
    model = build_robot(config, problem.config_path)
    # joints at t as the servos were measured at t + lag: the samples move to earlier times
    model = _drive_with_splines(model, {j: (t - lag, a) for j, (t, a) in problem.drive.items()})
    integrator, dt = model_step(config, problem.config_path, model)
    end = min(problem.duration_s, float(problem.sample_t[-1]) + problem.edge_s)
    times, arrays = run_driven(model, integrator, dt, end, max(problem.warmup_s - problem.edge_s, 0.0))
    out = np.empty((len(problem.channels), problem.sample_t.size))
    for i, channel in enumerate(problem.channels):
        grid, simulated, _ = smoothed(times, np.asarray(arrays[channel.simulated_key])[:, channel.sim_column],
                                      problem.cutoff_hz)
        out[i] = channel.scale * np.interp(problem.sample_t, grid, simulated) + channel.offset
    if not np.all(np.isfinite(out)):
        raise FloatingPointError(f"the simulation diverged at {dict(zip(problem.names, values))}")
    return out


def _predict_item(item: tuple[Problem, np.ndarray]) -> np.ndarray:
    problem, values = item
    return predict(problem, values)


def _leave_out_steps(J: np.ndarray, r: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per group g of the residuals (``groups`` (n,) labels of ``r`` (n,)), the Gauss-Newton step (p,) from the
    joint optimum that all the other residuals take (the linearised leave-one-group-out estimate, no simulation)."""
    steps = []
    for g in np.unique(groups):
        keep = groups != g
        Jg = J[keep]
        steps.append(-np.linalg.pinv(Jg.T @ Jg) @ (Jg.T @ r[keep]))
    return np.array(steps)


def _jackknife(steps: np.ndarray) -> np.ndarray:
    """The delete-one jackknife covariance ``(G-1)/G sum_g (d_g - d)(d_g - d)^T`` of G leave-one-out steps (G, p)."""
    deviations = steps - steps.mean(axis=0)
    return (len(steps) - 1) / len(steps) * deviations.T @ deviations


def block_jackknife(J: np.ndarray, r: np.ndarray, sample_t: np.ndarray) -> np.ndarray:
    """The estimates' covariance (p, p), in the optimiser's units, from their scatter over time: the delete-one-block
    jackknife (Kunsch 1989; Shao & Tu 1995, ch. 9) over blocks of :data:`BLOCK_S` of the fitted samples' times
    ``sample_t`` (m,) s, ``J`` (C m, p) and ``r`` (C, m) as in :func:`channel_jackknife`. Blocks far longer than
    the residuals' correlation time make it the sampling variance of dependent errors; when a stretch of the run
    was disturbed (a loaded host's late plant steps), the blocks disagree and it grows. Zero with one block."""
    blocks = np.floor((sample_t - sample_t[0]) / BLOCK_S).astype(int)
    if np.unique(blocks).size < 2:
        return np.zeros((J.shape[1], J.shape[1]))
    return _jackknife(_leave_out_steps(J, r.ravel(), np.tile(blocks, r.shape[0])))


def channel_jackknife(J: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The estimates' covariance (p, p), in the optimiser's units, from the fitted channels' disagreement: the
    delete-one-channel jackknife (Efron & Stein 1981; Shao & Tu 1995, ch. 2) ``(C-1)/C sum_c (d_c - d)(d_c - d)^T``
    over the C channels, ``d_c`` the Gauss-Newton step from the joint optimum that the residuals ``r`` (C, m) of
    all channels but ``c`` take (``J`` (C m, p): the residuals' Jacobian, channel-major as ``r.ravel()``), ``d``
    their mean. Zero for a single channel. Why: a gauge whose calibration is off (the demo rig's left root gauge
    reads 2 % high) pulls every estimate by a bias the sensor noise and the residuals' correlation time do not
    show; the channels then disagree, and this term says by how much (docs/identify.md, "Why the fit was biased").
    """
    channels, m = r.shape
    if channels < 2:
        return np.zeros((J.shape[1], J.shape[1]))
    return _jackknife(_leave_out_steps(J, r.ravel(), np.repeat(np.arange(channels), m)))


def correlation_time(residuals: np.ndarray) -> float:
    """Integrated autocorrelation time of residual series (n_channels, m), in samples, pooled over channels:
    ``1 + 2 sum_k rho_k`` summed while the autocorrelation stays positive (the initial positive sequence); at
    least 1."""
    taus = []
    for r in residuals:
        r = r - r.mean()
        n = r.size
        spectrum = np.fft.rfft(r, 2 * n)
        acf = np.fft.irfft(spectrum * np.conj(spectrum))[:n]
        if acf[0] <= 0:
            continue
        rho = acf / acf[0]
        negative = np.flatnonzero(rho[1:] <= 0.0)
        stop = negative[0] + 1 if negative.size else n
        taus.append(1.0 + 2.0 * float(rho[1:stop].sum()))
    return max(1.0, float(np.mean(taus))) if taus else 1.0


# ------------------------------------------------------------------------------------------- the recording
def channels_from_rig(rig, names: list[str] | None, model) -> list[Channel]:
    """The fitted channels: the rig's declared sensor maps (``names``: those channels; default the strain
    gauges); a name without a map is a one-line ConfigError."""
    from firmware_interface.rigs.host import channel_maps

    maps = {m.channel: m for m in channel_maps(rig) if m.telemetry_key in ("strain", "load")}
    wanted = names or [name for name, m in maps.items() if m.telemetry_key in DEFAULT_KEYS]
    channels = []
    for name in wanted:
        if name not in maps:
            raise ConfigError(None, "--channels", f"{name!r} has no declared map to a simulated signal in the "
                                                  f"rig (mapped: {', '.join(maps) or 'none'})")
        m = maps[name]
        channels.append(Channel(name, m.telemetry_key, m.signal, _sim_column(model, m.signal, m.element), m.scale,
                                m.offset))
    return channels


def channels_by_name(tables: Tables, names: list[str] | None, model) -> list[Channel]:
    """Without a rig: measured strains named as the model's passive joints, loads named as wrench components
    (fx ... mz) against the support's wrench."""
    from sim.messages import TOPIC_HW_TELEMETRY

    telemetry = tables.tables.get(TOPIC_HW_TELEMETRY)
    passive = [n for n, a in zip(model.joint_names, model.actuated) if not a]
    available = {}
    for name in (telemetry.element_names.get("strain", []) if telemetry else []):
        if name in passive:
            available[name] = Channel(name, "strain", "strain", passive.index(name), 1.0, 0.0)
    for name in (telemetry.element_names.get("load", []) if telemetry else []):
        if name in WRENCH_NAMES:
            available[name] = Channel(name, "load", "base_wrench", WRENCH_NAMES.index(name), 1.0, 0.0)
    wanted = names or [n for n, c in available.items() if c.measured_key in DEFAULT_KEYS]
    missing = [n for n in wanted if n not in available]
    if missing or not wanted:
        raise ConfigError(None, "--channels", f"no simulated counterpart for {missing or 'any strain channel'} "
                                              f"(without a rig: {', '.join(available) or 'none'})")
    return [available[n] for n in wanted]


def _sim_column(model, signal: str, element) -> int:
    if isinstance(element, int):
        return element
    if signal == "strain":
        return [n for n, a in zip(model.joint_names, model.actuated) if not a].index(element)
    return list(model.joint_names).index(element)


def fitted_samples(telemetry_t: np.ndarray, windows: list[tuple[float, float]], t0: float, warmup_s: float,
                   end_s: float, edge_s: float, stride: int) -> np.ndarray:
    """Indices of the telemetry samples inside the healthy ``windows`` (recording clock, s), ``edge_s`` (the
    filter's transient) clear of each window's ends, after the warm-up and before the drive's end less
    ``edge_s``, every ``stride``-th."""
    inside = np.zeros(telemetry_t.size, dtype=bool)
    for start, stop in windows:
        inside |= (telemetry_t >= start + edge_s) & (telemetry_t <= stop - edge_s)
    inside &= (telemetry_t - t0 >= warmup_s) & (telemetry_t - t0 <= end_s - edge_s)
    return np.flatnonzero(inside)[::stride]


# ------------------------------------------------------------------------------------------- the fit
def fit(problem: Problem, parameters: list[Parameter], measured: np.ndarray, evaluator,
        progress: bool = False) -> tuple[Fit, np.ndarray]:
    """Least squares of :func:`predict` against ``measured`` (n_channels, m) (module docstring, steps 4-6);
    returns the fit and the predictions at the estimates."""
    from scipy.optimize import least_squares

    scales = np.array([p.scale for p in parameters])
    sigma = measured.std(axis=1, keepdims=True)
    sigma[sigma == 0] = 1.0
    cache: dict[bytes, np.ndarray] = {}
    count = [0]

    def batch(points: list[np.ndarray]) -> list[np.ndarray]:
        todo = [u for u in points if u.tobytes() not in cache]
        results = evaluator.map(_predict_item, [(problem, u * scales) for u in todo],
                                describe=lambda item: ", ".join(f"{n}={v:.6g}" for n, v in zip(problem.names,
                                                                                                  item[1])),
                                progress="identify" if progress and len(todo) > 1 else None)
        count[0] += len(todo)
        for u, result in zip(todo, results):
            if not isinstance(result, np.ndarray):   # a failed simulation: no step may go there
                result = np.full_like(measured, np.inf)
            cache[u.tobytes()] = result
        return [cache[u.tobytes()] for u in points]

    def residuals(u: np.ndarray) -> np.ndarray:
        (prediction,) = batch([u])
        return ((prediction - measured) / sigma).ravel()

    lower, upper = np.array([p.lower for p in parameters]) / scales, np.array([p.upper for p in parameters]) / scales

    def jacobian(u: np.ndarray) -> np.ndarray:
        steps = np.where(u + DIFF_STEP <= upper, DIFF_STEP, -DIFF_STEP)
        shifted = [u + steps[k] * np.eye(u.size)[k] for k in range(u.size)]
        base, *columns = batch([u] + shifted)
        return np.stack([((c - base) / sigma).ravel() / steps[k] for k, c in enumerate(columns)], axis=1)

    u0 = np.array([p.start for p in parameters]) / scales
    start_prediction = batch([u0])[0]
    if not np.all(np.isfinite(start_prediction)):
        raise ValueError("the model does not run at the start values (see the failure above)")
    result = least_squares(residuals, u0, jac=jacobian, bounds=(lower, upper), method="trf", x_scale=1.0,
                           xtol=X_TOLERANCE, ftol=F_TOLERANCE, max_nfev=MAX_SIMULATIONS)
    final = batch([result.x])[0]
    r = (final - measured) / sigma
    m, p = r.size, len(parameters)
    tau = correlation_time(r)
    variance = float(np.sum(r ** 2)) / max(m - p, 1)
    J = jacobian(result.x)
    statistical_u = variance * tau * np.linalg.pinv(J.T @ J)
    blocks_u = block_jackknife(J, r, problem.sample_t)
    # two estimates of the sampling variance over time: the larger (a run disturbed in stretches has the blocks'
    # scatter above the stationary noise's)
    over_time_u = blocks_u if np.trace(blocks_u) > UNSTEADY_RATIO ** 2 * np.trace(statistical_u) else statistical_u
    between_u = channel_jackknife(J, r)
    covariance = (over_time_u + between_u) * np.outer(scales, scales)
    se = np.sqrt(np.maximum(np.diag(covariance), 0.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        correlations = covariance / np.outer(se, se)
    names = [c.name for c in problem.channels]
    rms = lambda pred: {n: float(np.sqrt(np.mean((pr - me) ** 2)))  # noqa: E731 - one-line local helper
                        for n, pr, me in zip(names, pred, measured)}
    channel_se = np.sqrt(np.maximum(np.diag(between_u), 0.0)) * scales
    block_ratio = float(np.sqrt(np.trace(blocks_u) / np.trace(statistical_u))) if np.trace(statistical_u) > 0 else 1.0
    return Fit(parameters, result.x * scales, se, np.nan_to_num(correlations), rms(final), rms(start_prediction),
               tau, measured.shape[1], [], count[0], result.message, evaluator.where,
               channel_errors=channel_se, block_ratio=block_ratio), final


# ------------------------------------------------------------------------------------------- the command
def _positive(value, option: str, unit: str, allow_zero: bool = False) -> None:
    if value is not None and not (math.isfinite(value) and (value >= 0 if allow_zero else value > 0)):
        raise ConfigError(None, option, f"got {value!r}, expected {'>= 0' if allow_zero else '> 0'} {unit}")


def prepare(run: Path, params: str, robot: str, rig_path, channel_names: str | None, warmup_s: float | None,
            fit_seconds: float | None, stride: int, cutoff_hz: float | None = None, progress: bool = False):
    """Read the run, judge its health and set the problem up: (problem, parameters, measured (n_channels, m),
    health, config, config path)."""
    from hil.recording.mcap_io import read_recording
    from hil.recording.series import build_tables
    from hil.validation.health import HealthCriteria, recording_health
    from hil.validation.resim import (WARMUP_S, _drive_with_splines, load_config, measured_drive,
                                      on_device_clock, smoothed)
    from hil.validation.validate import RecordingError, run_rig
    from sim.cli_options import RECORDED, config_type
    from sim.messages import TOPIC_HW_TELEMETRY
    from sim.robots import build_robot

    _positive(warmup_s, "--warmup", "s", allow_zero=True)
    _positive(fit_seconds, "--fit-seconds", "s")
    _positive(cutoff_hz, "--cutoff", "Hz")
    if stride < 1:
        raise ConfigError(None, "--stride", f"got {stride}, expected at least 1")
    warmup_s = WARMUP_S if warmup_s is None else warmup_s
    recording = read_recording(run, progress=progress)
    tables = build_tables(recording, progress=progress)
    source = robot if robot == RECORDED else str(config_type("robot")(robot))
    config, config_path = load_config(source, recording.metadata)
    parameters = parse_parameters(params, config, config_path)
    rig, _origin = run_rig(recording.metadata, rig_path)
    model = build_robot(config, config_path)
    names = [n.strip() for n in channel_names.split(",") if n.strip()] if channel_names else None
    channels = channels_from_rig(rig, names, model) if rig is not None else channels_by_name(tables, names, model)
    health_tables, tables = tables, on_device_clock(tables)
    drive = measured_drive(tables, rig, list(model.joint_names), None, warmup_s)
    _drive_with_splines(model, drive.samples)    # a servo on a passive joint is said now, not in a worker
    frequency = _stroke_frequency(drive)
    health = recording_health(recording, health_tables, HealthCriteria(), frequency)
    if health.valid is False:
        raise RecordingError(f"{run}: INVALID: " + "; ".join(health.reasons))
    if cutoff_hz is None:
        if frequency is None:
            raise ConfigError(None, "--cutoff", "the measured servo motion has no dominant frequency: give the "
                                                "fit's low-pass cutoff (Hz)")
        cutoff_hz = FIT_HARMONICS * frequency
    telemetry = tables.tables[TOPIC_HW_TELEMETRY]
    t = telemetry.columns["time_s"]
    order = np.argsort(t, kind="stable")
    t_sorted, unique = np.unique(t[order], return_index=True)
    edge_s = FILTER_EDGE_PERIODS / cutoff_hz
    index = fitted_samples(t_sorted, health.windows, drive.t0, warmup_s, drive.duration_s, edge_s, stride)
    if fit_seconds is not None and index.size:
        index = index[t_sorted[index] <= t_sorted[index[0]] + fit_seconds]
    measured = []
    for channel in channels:
        x = telemetry.element(channel.measured_key, channel.name)[order][unique]
        finite = np.isfinite(x)
        grid, filtered, _ = smoothed(t_sorted[finite], x[finite], cutoff_hz)
        measured.append(np.interp(t_sorted[index], grid, filtered))
    measured = np.array(measured)
    if index.size <= len(parameters):
        raise RecordingError(f"{run}: {index.size} healthy samples after the {warmup_s:g} s warm-up: too few to "
                             f"fit {len(parameters)} parameters")
    problem = Problem(config, str(config_path), [p.name for p in parameters], drive.samples, drive.duration_s,
                      warmup_s, channels, t_sorted[index] - drive.t0, cutoff_hz)
    return problem, parameters, measured, health, config, config_path


def _stroke_frequency(drive) -> float | None:
    from hil.validation.analysis import dominant_frequency, median_rate

    times, angles = next(iter(drive.samples.values()))
    f = dominant_frequency(angles - angles.mean(), median_rate(times))
    return f if np.isfinite(f) and f > 0 else None


def corrected_config(config: dict, config_path, fit_result: Fit, run: Path) -> str:
    """The robot config with the estimates written in, as TOML text (the lag, not a config key, as a comment)."""
    import tomli_w

    names = [p.name for p in fit_result.parameters]
    text = tomli_w.dumps(with_values(config, names, fit_result.estimates))
    lines = [f"# {Path(config_path).name} with the parameters identified from {run} by mms identify:"]
    for p, e, s in zip(fit_result.parameters, fit_result.estimates, fit_result.standard_errors):
        lines.append(f"#   {p.name} = {e:.6g} +- {s:.2g} (was {p.start:.6g})")
    return "\n".join(lines) + "\n" + text


def report_lines(fit_result: Fit) -> list[str]:
    lines = [f"fitted {fit_result.samples} samples per channel in {len(fit_result.windows)} healthy window(s) "
             f"({', '.join(f'{a:.1f}-{b:.1f} s' for a, b in fit_result.windows)}); {fit_result.simulations} "
             f"simulations on {fit_result.where}; {fit_result.message}",
             f"{'parameter':28} {'start':>12} {'estimate':>12} {'std error':>10} {'ratio':>8}"]
    for p, e, s in zip(fit_result.parameters, fit_result.estimates, fit_result.standard_errors):
        ratio = f"{e / p.start:8.4f}" if p.start else "       -"
        lines.append(f"{p.name:28} {p.start:12.6g} {e:12.6g} {s:10.3g} {ratio}")
    names = [p.name for p in fit_result.parameters]
    if len(names) > 1:
        lines.append("correlations: " + "; ".join(f"{names[i]} ~ {names[j]} {fit_result.correlations[i, j]:+.2f}"
                                                  for i in range(len(names)) for j in range(i + 1, len(names))))
    lines.append("residual rms per channel (start -> fit): " + "; ".join(
        f"{n} {fit_result.start_rms[n]:.3g} -> {v:.3g}" for n, v in fit_result.residual_rms.items()))
    if fit_result.block_ratio > UNSTEADY_RATIO:
        lines.append(f"warning: the estimates scatter over the run's {BLOCK_S:g} s blocks {fit_result.block_ratio:.1f}x "
                     "more than the noise explains (a disturbed run: a loaded host?); the standard errors include "
                     "that scatter, the estimates may still be biased")
    lines.append(f"standard errors include the residuals' correlation time ({fit_result.correlation_time:.1f} "
                 "samples) and the channels' disagreement (delete-one-channel jackknife: " + ", ".join(
                     f"{p.name} {c:.3g}" for p, c in zip(fit_result.parameters, fit_result.channel_parts)) + ")")
    return lines


def run(args: argparse.Namespace) -> int:
    from hil.validation.validate import RecordingError, health_verdict
    from sim.studies import open_evaluator

    out = args.out or args.run.with_suffix(".identify")
    try:
        problem, parameters, measured, health, config, config_path = prepare(
            args.run, args.params, args.robot, args.rig, args.channels, args.warmup, args.fit_seconds, args.stride,
            args.cutoff, progress=not args.quiet)
    except RecordingError as exc:
        print(f"mms identify: error: {exc}", file=sys.stderr)
        return 3 if "INVALID" in str(exc) else 2
    except ValueError as exc:
        if isinstance(exc, ConfigError):
            raise
        print(f"mms identify: error: {args.run}: {exc}", file=sys.stderr)
        return 2
    print(health_verdict(health.as_dict()))
    with open_evaluator(args.scheduler, args.workers) as evaluator:
        try:
            result, final = fit(problem, parameters, measured, evaluator, progress=not args.quiet)
        except ValueError as exc:
            print(f"mms identify: error: {exc}", file=sys.stderr)
            return 2
    result = replace(result, windows=health.windows, extra={"run": str(args.run), "robot": str(config_path),
                                                            "channels": [c.name for c in problem.channels]})
    out.mkdir(parents=True, exist_ok=True)
    (out / "identify.json").write_text(json.dumps(result.as_dict(), indent=1))
    corrected = out / f"{Path(config_path).stem}_identified.toml"
    corrected.write_text(corrected_config(config, config_path, result, args.run))
    np.savez_compressed(out / "residuals.npz", time_s=problem.sample_t, channels=[c.name for c in problem.channels],
                        measured=measured, fitted=final)
    for line in report_lines(result):
        print(line)
    print(f"wrote {corrected}, {out / 'identify.json'}, {out / 'residuals.npz'}")
    return 0
