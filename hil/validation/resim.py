"""Offline re-simulation for validation: the robot model driven by the servo motion the rig measured
(``mms validate --sim CONFIG``).

The recorded ``sim/*`` stream is what the model did with the motion it commanded; the rig's servos lag and
round that motion off, so its strains and loads differ from the model's partly because of the servos. Driving
the model with the *measured* servo angles takes the servos out of the comparison: what remains is the
structure's and the fluid's mismatch (stiffness, damping, aerodynamics). Steps:

1. the measured servo angles (hw/telemetry ``servo_rad``, on the recording's time axis) become joint angles
   through the rig's joint map (without a rig: servo channels named as the model's joints);
2. they are resampled on a uniform grid at the telemetry rate and low-pass filtered forward and backward (zero
   phase; a 4th-order Butterworth at ``cutoff_hz``, default CUTOFF_HARMONICS times the motion's dominant
   frequency), so that the accelerations imposed on the joints are the motion's, not the sensor noise
   differentiated twice;
3. each servo-driven joint's motion law becomes a cubic spline through them (:class:`sim.laws.CompiledSpline`,
   which keeps the model on the fused path); a joint moved
   through a linear mechanism (``ratio * source``) gets it as its source, so that every law reading that source
   (RayBot's caudal spring) follows the measured motion too;
4. the model runs from the first measured sample to the last, passive joints starting at rest; the first
   ``warmup_s`` (default WARMUP_S) are dropped (the start-up transient), the rest sampled every OUTPUT_PERIOD_S;
5. the outputs form a ``sim/state`` table on the recording's time axis, which replaces the recorded one.
"""
from __future__ import annotations

import copy
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.signal import butter, sosfiltfilt

from hil.validation.analysis import dominant_frequency, median_rate
from hil.recording.mcap_io import stored_robot_config
from hil.recording.series import WRENCH_NAMES, Table, Tables
from sim.config import load_toml, require
from sim.messages import TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE

#: default low-pass cutoff, in multiples of the measured motion's dominant frequency: keeps the harmonics a
#: stroke or tail beat has (a triangle-like wave's first few), removes the sensor noise above them
CUTOFF_HARMONICS = 8.0
FILTER_ORDER = 4
#: default start-up transient of the passive joints (they start at rest while the rig's were moving), dropped, s:
#: a damping ratio of 0.2 at 1 Hz leaves 8 % of the first swing after 2 s (more lightly damped models want more)
WARMUP_S = 2.0
#: output sampling period of the re-simulated sim/state table, s (at least the model's step)
OUTPUT_PERIOD_S = 1e-3
#: rounding allowance when times are compared with multiples of the step, s (far below any step)
TIME_TOLERANCE_S = 1e-9
#: outputs recorded per compiled call of the re-simulation (Simulation.record)
RECORD_CHUNK = 2000
#: the recorded sim/state keys the re-simulation gives: joint arrays and the support's wrench
JOINT_KEYS = ("q", "qd", "qdd", "tau")


@dataclass
class Resimulation:
    table: Table          # the sim/state table that replaces the recorded one
    description: str      # one line for the report: model, input, filter, warm-up


def load_config(source: str, metadata: dict) -> tuple[dict, Path]:
    """The robot config to re-simulate: a TOML file, or ``"recorded"``: the one stored in the recording."""
    if source != "recorded":
        return load_toml(source), Path(source)
    return stored_robot_config(metadata, "--sim")


def measured_joint_angles(tables: Tables, rig, joint_names: list[str]) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Sample times (s, recording axis) and joint angles (rad) per servo-driven joint, from hw/telemetry."""
    telemetry = tables.tables.get(TOPIC_HW_TELEMETRY)
    if telemetry is None or "servo_rad" not in telemetry.groups:
        raise ValueError("the recording has no hw/telemetry servo angles to drive the model with")
    servo_names = telemetry.element_names["servo_rad"]
    maps = rig.joints if rig is not None else []
    t = telemetry.columns["time_s"]
    order = np.argsort(t, kind="stable")
    t = t[order]
    angles = {}
    for jm in maps:
        if jm.servo in servo_names and jm.joint in joint_names:
            angles[jm.joint] = jm.joint_angle(telemetry.element("servo_rad", jm.servo)[order])   # element-wise
    if rig is None:
        for name in servo_names:
            if name in joint_names:
                angles[name] = telemetry.element("servo_rad", name)[order]
    if not angles:
        hint = "" if rig is not None else "; without a rig, servos must be named as joints"
        raise ValueError(f"no servo channel drives a joint of the model (servos {servo_names}, joints "
                         f"{joint_names}{hint})")
    keep = np.isfinite(t) & np.all([np.isfinite(a) for a in angles.values()], axis=0)
    t, unique = np.unique(t[keep], return_index=True)
    return t, {name: a[keep][unique] for name, a in angles.items()}


def device_clock_times(telemetry: Table) -> np.ndarray | None:
    """The telemetry samples' times (s, recording axis) from the device's own sample clock (``device_us``, unwrapped
    at the protocol's 32-bit modulus) mapped onto the recording's axis by a straight line (offset and rate) fitted
    to the host's ``time_s``; None without a device clock. The host stamps a whole frame with one receive-time
    estimate, which scatters by a millisecond from frame to frame (more on a loaded host) and can reorder samples;
    the device samples on a regular grid, so its clock keeps the servo angles and the gauges in their true order
    and spacing (docs/identify.md, "Why the fit was biased")."""
    from firmware_interface.protocol import TIME_MODULUS

    if "device_us" not in telemetry.columns or "time_s" not in telemetry.columns:
        return None
    device = np.asarray(telemetry.columns["device_us"], dtype=float)
    host = np.asarray(telemetry.columns["time_s"], dtype=float)
    keep = np.isfinite(device) & np.isfinite(host)
    if keep.sum() < 2:
        return None
    steps = np.diff(device)
    steps[steps < -TIME_MODULUS / 2] += TIME_MODULUS                # one wrap of the 32-bit microsecond counter
    device_s = (device[0] + np.concatenate(([0.0], np.cumsum(steps)))) * 1e-6
    if np.any(np.diff(device_s) <= 0):                             # two devices' clocks, or a device restarted
        return None
    rate, offset = np.polyfit(device_s[keep] - device_s[keep][0], host[keep], 1)
    return offset + rate * (device_s - device_s[keep][0])


def on_device_clock(tables: Tables) -> Tables:
    """``tables`` with hw/telemetry's ``time_s`` replaced by :func:`device_clock_times` (the other tables and the
    caller's are untouched); unchanged without a usable device clock."""
    telemetry = tables.tables.get(TOPIC_HW_TELEMETRY)
    times = device_clock_times(telemetry) if telemetry is not None else None
    if times is None:
        return tables
    table = copy.copy(telemetry)
    table.columns = {**telemetry.columns, "time_s": times}
    out = copy.copy(tables)
    out.tables = {**tables.tables, TOPIC_HW_TELEMETRY: table}
    return out


def smoothed(t: np.ndarray, x: np.ndarray, cutoff_hz: float | None) -> tuple[np.ndarray, np.ndarray, float]:
    """``x(t)`` on a uniform grid at the samples' median rate, zero-phase low-passed; (grid, values, cutoff)."""
    rate = median_rate(t)
    grid = t[0] + np.arange(int(math.floor((t[-1] - t[0]) * rate)) + 1) / rate
    values = np.interp(grid, t, x)
    if cutoff_hz is None:
        f = dominant_frequency(values - values.mean(), rate)
        cutoff_hz = CUTOFF_HARMONICS * f if np.isfinite(f) and f > 0 else 0.1 * rate
    cutoff_hz = min(cutoff_hz, 0.45 * rate)
    sos = butter(FILTER_ORDER, cutoff_hz, fs=rate, output="sos")
    return grid, sosfiltfilt(sos, values), cutoff_hz


def _drive_with_splines(model, samples: dict[str, tuple[np.ndarray, np.ndarray]]):
    """The model with each named joint driven by a cubic spline through its ``(times s, angles rad)``. A joint
    moved through a linear mechanism (``r = ratio * source(t)``, e.g. RayBot's tail through its rack) gets the
    spline as the mechanism's *source* (angles / ratio), so every law reading that source (the caudal spring)
    follows the measured motion too."""
    from sim.laws import CompiledSpline

    motion_laws = dict(model.motion_laws)
    index = {name: j for j, name in enumerate(model.joint_names)}
    sources = {}                                # id(replaced source law) -> its spline
    for name, (times, angles) in samples.items():
        j = index[name]
        if not model.actuated[j]:
            raise ValueError(f"joint {name!r} is passive in the model: a servo can only drive an actuated joint")
        law = motion_laws[j]
        source, ratio = getattr(law, "source", None), getattr(law, "ratio", None)
        if source is not None and isinstance(ratio, (int, float)) and ratio != 0:
            sources[id(source)] = CompiledSpline(times, angles / ratio, hold=True)
        else:
            motion_laws[j] = CompiledSpline(times, angles, hold=True)
    joint_laws = dict(model.joint_laws)
    for laws in (motion_laws, joint_laws):
        for j, law in laws.items():
            source = getattr(law, "source", None)
            if source is not None and id(source) in sources:
                laws[j] = copy.copy(law)            # the caller's model keeps its own laws
                laws[j].source = sources[id(source)]
    return model.replace(motion_laws=motion_laws, joint_laws=joint_laws)


@dataclass
class Drive:
    """The measured servo motion as the model's joints take it: ``samples`` joint -> (times s from ``t0``, angles
    rad), smoothed (steps 1-2 of the module docstring); ``t0`` on the recording's time axis, s."""
    t0: float
    duration_s: float
    samples: dict[str, tuple[np.ndarray, np.ndarray]]
    cutoff_hz: float


def measured_drive(tables: Tables, rig, joint_names: list[str], cutoff_hz: float | None, warmup_s: float) -> Drive:
    """Steps 1-2 of the module docstring; ValueError (one line) when the recording cannot drive the model."""
    t_meas, joint_angles = measured_joint_angles(tables, rig, joint_names)
    if t_meas.size < 4 or t_meas[-1] - t_meas[0] <= warmup_s:
        raise ValueError(f"the measured servo motion lasts {t_meas[-1] - t_meas[0]:.3g} s, not more than the "
                         f"{warmup_s:g} s warm-up")
    t0 = float(t_meas[0])
    samples, cutoffs = {}, []
    for name, angles in joint_angles.items():
        grid, values, cutoff = smoothed(t_meas, angles, cutoff_hz)
        samples[name] = (grid - t0, values)
        cutoffs.append(cutoff)
    return Drive(t0, float(t_meas[-1] - t0), samples, min(cutoffs))


def model_step(config: dict, config_path, model) -> tuple[str, float]:
    """The config's ``[simulation]`` integrator and step, the step cut to the robot module's stable one."""
    from sim.robots import KINDS

    table_t = config.get("simulation", {})
    integrator = require(table_t, "integrator", str, path=config_path, prefix="simulation", default="rk4")
    dt = require(table_t, "dt", float, path=config_path, prefix="simulation", default=1e-4)
    module = importlib.import_module(KINDS[config["robot"]["kind"]])
    advise = getattr(module, "stable_dt", None)
    limit = advise(model, integrator) if advise is not None else None
    return integrator, (limit if limit is not None and dt > limit else dt)


def run_driven(model, integrator: str, dt: float, duration_s: float, warmup_s: float,
               progress: bool = False) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Step 4 of the module docstring: the (driven) model from rest for ``duration_s``; simulation times (n,) s
    after the warm-up, every OUTPUT_PERIOD_S, and the outputs there {key: (n, ...)}."""
    from sim.simulation import Simulation

    sim = Simulation(model, integrator, dt)
    sim.reset()
    every = max(1, int(round(max(OUTPUT_PERIOD_S, dt) / dt)))
    total = int(math.floor(duration_s / (every * dt) + TIME_TOLERANCE_S / (every * dt)))
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=total, desc="re-simulating", unit="output", leave=False)
    times, chunks = [], []
    done = 0
    while done < total:
        count = min(RECORD_CHUNK, total - done)
        t, out = sim.record(count, every)
        times.append(t)
        chunks.append(out)
        done += count
        if bar is not None:
            bar.update(count)
    if bar is not None:
        bar.close()
    t = np.concatenate(times) if times else np.zeros(0)
    keep = t >= warmup_s - TIME_TOLERANCE_S
    arrays = {key: np.concatenate([c[key] for c in chunks])[keep] for key in chunks[0]} if chunks else {}
    return t[keep], arrays


def resimulate(tables: Tables, config: dict, config_path: Path, rig, *, cutoff_hz: float | None = None,
               warmup_s: float = WARMUP_S, progress: bool = False) -> Resimulation:
    """The module docstring's steps; ValueError (one line) when the recording cannot drive the model."""
    from sim.robots import build_robot

    model = build_robot(config, config_path)
    drive = measured_drive(tables, rig, list(model.joint_names), cutoff_hz, warmup_s)
    model = _drive_with_splines(model, drive.samples)
    integrator, dt = model_step(config, config_path, model)
    times, arrays = run_driven(model, integrator, dt, drive.duration_s, warmup_s, progress)
    table = _state_table(times, drive.t0, arrays, list(model.joint_names), model.actuated, tables.origin_ns)
    description = (f"offline re-simulation of {config_path} driven by the measured servo angles "
                   f"({', '.join(drive.samples)}; zero-phase low-pass at {drive.cutoff_hz:.3g} Hz; the first "
                   f"{warmup_s:g} s dropped; {integrator} at dt {dt:g} s)")
    return Resimulation(table, description)


def _state_table(sim_t: np.ndarray, t0: float, arrays: dict[str, np.ndarray], joint_names: list[str], actuated,
                 origin_ns: int) -> Table:
    """A sim/state :class:`Table` (hil/recording/series.py layout) of the re-simulated outputs at simulation times ``sim_t``
    (s), which start at ``t0`` on the recording's time axis (s from ``origin_ns``)."""
    table = Table(TOPIC_SIM_STATE)
    time_s = sim_t + t0
    stamp = origin_ns + np.round(time_s * 1e9).astype(np.int64)
    table.columns.update({"log_time": stamp, "stamp_ns": stamp, "time_s": time_s, "t": sim_t})
    passive = [name for name, a in zip(joint_names, actuated) if not a]
    for key, names in [*((k, joint_names) for k in JOINT_KEYS), ("strain", passive), ("base_wrench", WRENCH_NAMES),
                       ("ext_wrench", WRENCH_NAMES)]:
        if key not in arrays or not len(sim_t):
            continue
        matrix = np.asarray(arrays[key], dtype=float).reshape(len(sim_t), len(names))
        table.element_names[key] = list(names)
        table.groups[key] = [f"{key}_{name}" for name in names]
        for i, column in enumerate(table.groups[key]):
            table.columns[column] = matrix[:, i]
    return table
