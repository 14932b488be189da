"""`mms demo --closed-loop` (docs/closed-loop.md): the demo's simulator runs the robot in free flight with the
rig's measured wrench fed back (``mms serve --feedback``), and the thorax's motion is set against two offline
runs from the same start: the model alone (the open loop) and the plant's truth in free flight (the rig file's
``[emulator.physics.overrides]``, the stroke the model's own law: the structure is what the loop corrects).

The figures: the RMS over the run of the thorax's body-frame twist (V m/s, Omega rad/s) of each run minus the
truth's, per component, and their ratio closed over open (below 1: the closed loop is nearer the truth), the same
in the motion of each part of the stroke (its drift, its harmonics: :func:`part_distances`); and per component
whether the rig's sensor resolves the wrench the truth's departure asks of the loop, and the verdict that follows,
judged in the part that decides (:func:`resolvability`, :func:`entry_follows`), with how much the rig's gravity,
which the weightless simulation does not have, changes the model's error the loop measures
(:func:`gravity_mismatch`).
"""
from __future__ import annotations

import copy
import dataclasses
import json
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import msgpack
import numpy as np

from sim.config import load_toml
from sim.messages import (TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE,
                          TOPIC_SIM_STATUS)

#: the thorax twist components of a mirror-symmetric stroke (the others stay zero): forward and vertical speed,
#: pitch rate
COMPONENTS = {"vx": 0, "vz": 2, "wy": 4}
#: the closed loop's robot: free flight, weightless, its thorax ten times denser. The conditions under which the
#: captive approximation holds (docs/closed-loop.md): at the rig's 5 Hz the wings cannot carry the weight, and a
#: falling thorax's wings meet air the tethered ones never see (with weight the loop comes no nearer the truth even
#: offline and exact); a lighter thorax pitches +-5 deg a stroke instead of +-0.6
FREE = {"robot": {"base": "floating", "gravity": 0.0}, "thorax": {"density": 8000.0}}


#: `mms emulate` options the closed loop's rig runs with: its physics plant stepped on the telemetry samples
#: (firmware_interface.plant), which the model's twin follows sample for sample; on the wall clock's slices the
#: twin's error was 20-40x the structure's in the stroke's harmonics (docs/closed-loop.md)
PLANT_CLOCK = "--plant-clock samples"


#: `mms drive` options of the closed loop: each setpoint the newest state carried forward to its tick (at most 5 ms:
#: the states reach the driver 0.1-3 ms late, p1-p99, up to 6 ms). Taken as they came, the setpoints' simulated
#: times stepped by 0-21 ms between the driver's 2 ms ticks; the servos' kinks rang the wings at 42-53 Hz with an
#: amplitude that changed from stroke to stroke, and its leak into the phase table's harmonics (100-460 uN per
#: stroke in the mean of fx) was 3-10x the structure's error the loop feeds back (docs/closed-loop.md)
STATE_LEAD = ("--state-lead", "0.005")


def emulator_args(drive_args: tuple[str, ...]) -> tuple[str, ...]:
    """The demo rig's `mms drive` arguments with the closed loop's options (:data:`PLANT_CLOCK`,
    :data:`STATE_LEAD`)."""
    return tuple(f"{arg} {PLANT_CLOCK}" if arg.startswith("--plant physics") else arg
                 for arg in drive_args) + STATE_LEAD


def free_robot_config(config: dict) -> dict:
    """The demo robot's config in the closed loop's free flight (:data:`FREE`)."""
    from firmware_interface.rigs.mcu import deep_merge

    return deep_merge(copy.deepcopy(config), FREE)


def truth_config(robot_config: dict, rig_path: Path) -> dict:
    """The robot's config with the rig's truth (its [emulator.physics.overrides] tables but the base, which stays
    free)."""
    from firmware_interface.rigs.mcu import deep_merge

    overrides = copy.deepcopy(load_toml(rig_path)["emulator"]["physics"].get("overrides", {}))
    overrides.get("robot", {}).pop("base", None)
    return deep_merge(copy.deepcopy(robot_config), overrides)


def driver_stopped_ns(raw) -> int | None:
    """When the driver left tracking in ``raw`` (:class:`hil.recording.mcap_io.RawRecording` with hw/status and
    hw/command): the ``stamp_ns`` (host clock, ns) of the first message of either topic whose ``lifecycle`` is not
    ``active`` after one that was (the demo's stop: the servos ramp to neutral from there), or None while it never
    did. Both topics, because the driver sends the tick's first ramp command before the status that announces the
    change (40-70 us idle; under load long enough for states to come in between)."""
    stops = []
    for topic in (TOPIC_HW_STATUS, TOPIC_HW_COMMAND):
        lifecycle = [(message["stamp_ns"], message.get("lifecycle")) for message in
                     (msgpack.unpackb(data, raw=False) for _log_ns, _publish_ns, data in raw.messages.get(topic, []))]
        active = [stamp for stamp, state in lifecycle if state == "active"]
        stops += [next((stamp for stamp, state in lifecycle if active and stamp > active[0] and state != "active"),
                       None)]
    return min((stamp for stamp in stops if stamp is not None), default=None)


def recorded_thorax(raw) -> tuple[np.ndarray, np.ndarray, dict | None]:
    """The closed loop's sim/state in ``raw`` (:class:`hil.recording.mcap_io.RawRecording`), those published before
    the driver left tracking (:func:`driver_stopped_ns`; all when it never did: after it the rig ramps its servos to
    neutral while the simulation runs on, no longer the experiment; both stamps the host's clock, the publishers on
    one machine): times (n,) s and thorax twists (n, 6) (body frame; m/s, rad/s), and the state at which the loop
    closed (the first at or after the last sim/status ``feedback.closed_at_s``; None if it never did)."""
    closed_at = -1.0
    for _log_ns, _publish_ns, data in raw.messages.get(TOPIC_SIM_STATUS, []):
        closed_at = msgpack.unpackb(data, raw=False).get("feedback", {}).get("closed_at_s", closed_at)
    stopped = driver_stopped_ns(raw)
    states = [state for state in (msgpack.unpackb(data, raw=False)
                                  for _log_ns, _publish_ns, data in raw.messages.get(TOPIC_SIM_STATE, []))
              if stopped is None or state["stamp_ns"] < stopped]
    closing = next((state for state in states if 0.0 <= closed_at <= state["t"]), None)
    return (np.asarray([state["t"] for state in states]), np.asarray([state["base_twist"] for state in states]),
            closing)


def simulated_thorax(config: dict, path: Path, times: np.ndarray, start: dict | None = None) -> np.ndarray:
    """Thorax twists (n, 6) of ``config`` run offline at ``times`` (n,) s, the publish times k T of the server
    (which the step divides: the demo's 0.5 ms into 1 ms), from rest at t = 0 or from ``start``: a sim/state
    (``t`` s, ``q``, ``qd`` (n,), ``base_pos`` (3,) m, ``base_quat`` (4,) (w, x, y, z), ``base_twist`` (6,) body
    frame), every time after its ``t``."""
    from sim.robots import build_robot
    from sim.simulation import Simulation
    from sim.spatial import quat_to_matrix

    dt = config["simulation"]["dt"]
    period = float(np.median(np.diff(times))) if times.size > 1 else dt
    every = round(period / dt)
    simulation = Simulation(build_robot(config, path), integrator=config["simulation"]["integrator"], dt=dt)
    t0 = 0.0
    if start is None:
        simulation.reset()
    else:
        pose = np.eye(4)
        pose[:3, :3], pose[:3, 3] = quat_to_matrix(np.asarray(start["base_quat"], dtype=float)), start["base_pos"]
        simulation.reset(q=start["q"], qd=start["qd"], base_pose=pose, base_twist=start["base_twist"])
        simulation.t = t0 = float(start["t"])
    at, outputs = simulation.record(round((times[-1] - t0) / period), every)
    rows = np.rint((times - t0) / period).astype(int) - 1
    if not np.allclose(at[rows], times):
        raise ValueError(f"the recorded states are not on the publish grid of {period:g} s")
    return outputs["base_twist"][rows]


def compare(recording: Path, robot: Path, rig: Path, out: Path, say) -> dict:
    """The closed loop's thorax against the open loop and the truth, each component's resolvability and verdict
    (figures in ``out``/closed_loop.json and a plot closed_loop.png); the figures."""
    from hil.feedback.loop import load_feedback
    from hil.recording.mcap_io import read_recording
    from hil.recording.series import build_tables

    raw = read_recording(recording, topics={TOPIC_SIM_STATE, TOPIC_SIM_STATUS, TOPIC_HW_TELEMETRY, TOPIC_HW_COMMAND,
                                            TOPIC_HW_STATUS})
    times, closed, closing = recorded_thorax(raw)
    if closing is None:
        raise ValueError(f"{recording}: the loop never closed (no sim/status feedback.closed_at_s)")
    keep = times > closing["t"]
    times, closed = times[keep], closed[keep]
    config = load_toml(robot)
    say(f"closed loop: {times.size} states from its closing at {closing['t']:.3f} s to {times[-1]:.2f} s (the "
        "driver's stop); running the open loop and the truth offline from its thorax there")
    truth_config_ = truth_config(config, rig)
    open_loop = simulated_thorax(config, robot, times, closing)
    truth = simulated_thorax(truth_config_, robot, times, truth_start(config, truth_config_, robot, closing))
    rig_table, spec = load_feedback(rig)
    rms = lambda x: float(np.sqrt(np.mean(x * x)))  # noqa: E731 - one-line local
    figures = {"duration_s": float(times[-1]), "closed_at_s": float(closing["t"]), "states": int(times.size),
               "components": {}}
    for name, k in COMPONENTS.items():
        closed_error, open_error = rms(closed[:, k] - truth[:, k]), rms(open_loop[:, k] - truth[:, k])
        figures["components"][name] = {"truth_rms": rms(truth[:, k]), "closed_error_rms": closed_error,
                                       "open_error_rms": open_error,
                                       "closed_minus_open_rms": rms(closed[:, k] - open_loop[:, k]),
                                       "ratio": closed_error / open_error if open_error > 0 else float("inf"),
                                       "distances": part_distances(times, closed[:, k] - truth[:, k],
                                                                   open_loop[:, k] - truth[:, k], spec.period_s,
                                                                   spec.harmonics),
                                       **following(closed[:, k] - open_loop[:, k], truth[:, k] - open_loop[:, k])}
    health = run_health(raw, spec.period_s, (closing["t"], float(times[-1])))
    figures["health"] = health
    tables = build_tables(raw, topics=[TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE],
                          keys={TOPIC_HW_TELEMETRY: {"device_us", "servo_rad", "load"}, TOPIC_SIM_STATE: {"t"}})
    state = tables.tables[TOPIC_SIM_STATE].columns
    resolved = resolvability(times, truth - open_loop, base_inertia(config, robot, closing, spec.period_s),
                             measured_error(tables, rig_table, spec, robot, config), (state["time_s"], state["t"]),
                             health["compared_s"], spec)
    mismatch = gravity_mismatch(config, truth_config_, robot, spec.gravity, spec.period_s, spec.harmonics)
    for name, entry in figures["components"].items():
        entry["resolvability"] = resolved[name] | {
            "gravity_mismatch": float(mismatch[spec.channels.index(resolved[name]["channel"])])}
        entry["verdict"] = verdict(entry)
    figures["verdict"] = overall_verdict(figures["components"])
    out.mkdir(parents=True, exist_ok=True)
    (out / "closed_loop.json").write_text(json.dumps(figures, indent=2))
    _plot(times, closed, open_loop, truth, out / "closed_loop.png")
    for name, entry in figures["components"].items():
        say(f"thorax {name}: closed loop {entry['closed_error_rms']:.4g} from the truth, open loop "
            f"{entry['open_error_rms']:.4g} (ratio {entry['ratio']:.3f}; the truth's RMS {entry['truth_rms']:.4g}); "
            f"of the truth's departure from the model the loop took {entry['gain']:.2f} (correlation "
            f"{entry['correlation']:.2f})")
        say(f"thorax {name}: {entry['verdict']}")
    say(f"verdict: {figures['verdict']}")
    for line in health_summary(health):
        say(line)
    return figures


def following(moved: np.ndarray, departure: np.ndarray) -> dict[str, float]:
    """How far the closed loop moved along the truth's departure from the model: ``moved`` (n,) the closed loop
    minus the open loop, ``departure`` (n,) the truth minus the open loop (one twist component). ``gain``: the
    projection ``<moved, departure> / <departure, departure>`` (1: the whole departure, 0: the model's path, or
    motion unrelated to it); ``correlation``: their normalised inner product (1: the same shape)."""
    inner = float(moved @ departure)
    norms = float(np.linalg.norm(moved) * np.linalg.norm(departure))
    return {"gain": inner / float(departure @ departure) if departure.any() else float("nan"),
            "correlation": inner / norms if norms > 0 else float("nan")}


def run_health(raw, period_s: float | None, compared: tuple[float, float]) -> dict:
    """The live run's health in ``raw`` (:class:`hil.recording.mcap_io.RawRecording`; hil/validation/health.py, the
    default criteria; ``period_s``: the drive's period, which turns the command latency limit into degrees of the
    stroke) as metrics.json states it, with ``compared_disturbances``: those that overlap the compared stretch,
    ``compared`` (first, last) simulated s."""
    from hil.recording.series import build_tables
    from hil.validation.health import HealthCriteria, health_keys, recording_health

    keys = health_keys()
    tables = build_tables(raw, topics=list(keys), keys=keys)
    health = recording_health(raw, tables, HealthCriteria(), 1.0 / period_s if period_s else None).as_dict()
    state = tables.tables[TOPIC_SIM_STATE].columns
    start_s, end_s = np.interp(compared, state["t"], state["time_s"])      # simulated -> recording clock
    health["compared_s"] = [float(start_s), float(end_s)]
    health["compared_disturbances"] = [d for d in health["disturbances"]
                                       if d["start_s"] < end_s and d["start_s"] + d["length_s"] > start_s]
    return health


def health_summary(health: dict, compared: bool = True) -> list[str]:
    """What the run's health means for the comparison, from its figures: the free thorax integrates every
    disturbance of the loop (a stall, a late state, a held servo) into the rest of its path, so the figures of a run
    that is not healthy throughout measure the disturbance as much as the loop (``compared`` False: there are no
    figures, the run's health alone)."""
    misses = health.get("deadline_miss_fraction")
    inside = health["compared_disturbances"]
    lines = [f"run health: {'VALID' if health['valid'] else 'INVALID'}, {len(health['disturbances'])} disturbances "
             f"({len(inside)} inside the compared stretch"
             + "".join(f"; {d['source']}: {d['what']}, {d['length_s']:.3f} s" for d in inside) + "), "
             f"server deadline misses {'unknown' if misses is None else f'{100 * misses:.1f} %'}"]
    lines += [f"  {reason}" for reason in health["reasons"]]
    start_s, end_s = health["compared_s"]
    if not compared:
        return lines
    if not inside:
        lines.append(f"the {end_s - start_s:.2f} s compared (from the loop's closing to the driver's stop) hold none "
                     "of the disturbances: the figures measure the loop")
    else:
        first = max(0.0, min(d["start_s"] for d in inside) - start_s)
        lines.append(f"the free thorax carries a disturbance into the rest of its path: the last "
                     f"{end_s - start_s - first:.2f} s of the {end_s - start_s:.2f} s compared measure it as well "
                     "as the loop")
    return lines


def _plot(times, closed, open_loop, truth, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(len(COMPONENTS), 1, sharex=True, figsize=(8, 7))
    units = {"vx": "m/s", "vz": "m/s", "wy": "rad/s"}
    for axis, (name, k) in zip(axes, COMPONENTS.items()):
        axis.plot(times, truth[:, k] - open_loop[:, k], label="truth - open loop", color="0.6")
        axis.plot(times, closed[:, k] - open_loop[:, k], label="closed loop - open loop", color="C3", lw=0.8)
        axis.set_ylabel(f"{name} ({units[name]})")
    axes[0].legend(loc="upper left")
    axes[-1].set_xlabel("t (s)")
    axes[0].set_title("Thorax twist: the closed loop and the truth, each minus the open loop")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


@dataclass(frozen=True)
class CaptiveRun:
    """An offline closed loop (:func:`captive_loop`) and its references, on the publish grid."""
    times: np.ndarray          # (n,) s
    closed: np.ndarray         # (n, 6) thorax twist of the model with the fed-back error (body frame; m/s, rad/s)
    open_loop: np.ndarray      # (n, 6) ... of the model alone
    truth: np.ndarray          # (n, 6) ... of the rig's truth in free flight, driven by the simulation's stroke
    error: np.ndarray          # (n, 6) the tared error m - m_hat of each sample (N, N m; body frame, about O_body)


def captive_loop(robot: Path, rig_path: Path, duration_s: float, stroke: str = "model", seed: int | None = 1,
                 gain: float = 1.0, lag_error_s: float = 0.0, **feedback) -> CaptiveRun:
    """The closed loop of docs/closed-loop.md without sockets or wall clock: the rig's physics plant (its truth,
    tethered: firmware_interface.plant.SimulatorCore) and the model's twin (hil.feedback.loop.ModelTwin) step by
    step on the telemetry grid, the error ``m - m_hat`` (the rig's sensor model on ``m``, seeded) tared and put
    through the rig's ``[feedback]`` compensation (its PhaseTable) onto the free model ``robot``, one publish
    period at a time. ``stroke``: what drives the plant and the twin: ``"model"`` the simulation's stroke itself,
    ``"rig"`` that stroke through the rig's command rate, the device's setpoint target (``[rates] setpoints``: held
    or interpolated, the frames arriving on samples) and emulated servos (``[emulator.servo]``: lag, rate limit,
    deadband), the table then reading each sample the servos' first-harmonic lag earlier."""
    from firmware_interface.emulator import US_PER_S, SensorBank, ServoBank, SetpointRamp
    from firmware_interface.plant import SimulatorCore
    from hil.feedback.loop import ModelTwin, attitude, fed_channels, load_feedback, phase_table
    from sim.measured_wrench import MeasuredWrench
    from sim.robots import build_robot
    from sim.simulation import Simulation
    from sim.spatial import matrix_to_quat

    rig, spec = load_feedback(rig_path)
    spec = dataclasses.replace(spec, **feedback)
    config = load_toml(robot)
    dt, integrator = config["simulation"]["dt"], config["simulation"]["integrator"]
    sample_s = 1.0 / rig.telemetry_hz               # the telemetry period, also the publish period here
    model = build_robot(config, robot)
    laws = [(model.motion_laws[model.joint_names.index(j.joint)], j) for j in rig.joints]
    servo_order = [rig.servo_names.index(j.servo) for j in rig.joints]

    def commanded(t: float) -> np.ndarray:
        """The servo angles (n_servo,) rad the simulation's stroke asks for at t (s)."""
        angles = np.array([s.neutral_rad for s in rig.servos])
        for (law, joint), k in zip(laws, servo_order):
            angles[k] = joint.servo_angle(law.evaluate(t)[0])
        return angles

    plant, twin = SimulatorCore(rig), ModelTwin(rig, spec, robot, sample_s, integrator)
    sensors, servos = SensorBank(rig, np.random.default_rng(seed)), ServoBank(rig)
    names = [s.name for s in rig.sensors]
    columns = [names.index(name) for name in spec.channels]
    to_units = np.array([s.gain for s in rig.sensors])[columns]
    zero = np.array([s.offset_counts for s in rig.sensors])[columns]
    ramp = SetpointRamp(commanded(0.0), rig.setpoints == "interpolate", round(rig.watchdog_timeout_s * US_PER_S))
    lag_s = 0.0
    if stroke == "rig":
        omega = 2.0 * np.pi / spec.period_s
        tau = float(np.mean(servos.tau))
        lag_s = np.arctan(omega * tau) / omega + ramp.delay_intervals / rig.command_hz + 0.5 * sample_s
    lag_s += lag_error_s + spec.sensor_delay_samples * sample_s
    table = phase_table(spec, sample_s)
    fed = fed_channels(spec)
    wrench = MeasuredWrench(spec.body)
    held = attitude(spec)       # frame = "averaged": the thorax's attitude over the last period
    closed = Simulation(model.replace(force_models=[*model.force_models, wrench]), integrator=integrator, dt=dt)
    closed.reset()
    # the rig at rest at the stroke's start (the driver ramps the servos there before the loop starts)
    previous = commanded(0.0)
    for core in (plant, twin.core):     # both at the start before their first step (no jump from neutral)
        core.set_inputs(previous, np.zeros_like(previous))
    # the plant's readings, sensor_delay_samples late (as its "samples" clock reads it one sample late)
    readings = deque([plant.read()] * (spec.sensor_delay_samples + 1), maxlen=spec.sensor_delay_samples + 1)
    servos.angle, servos.held = previous.copy(), previous.copy()

    def sample(t_rig: float, command: np.ndarray) -> np.ndarray:
        """One telemetry sample at the rig's time ``t_rig`` (s) for the servo command (n_servo,) rad: the error
        m - m_hat (6,) of the plant and the twin driven by the stroke (``stroke``)."""
        nonlocal previous
        if stroke == "rig":
            servos.step(command, sample_s)
            angle = servos.angle.copy()
        else:
            angle = command
        rate, previous = (angle - previous) / sample_s, angle
        plant.set_inputs(angle, rate)
        plant.advance_to(t_rig)
        readings.append(plant.read())
        truth = readings[0]
        m = truth[columns] if seed is None else \
            (np.asarray(sensors.sample(truth, t_rig), dtype=float)[columns] - zero) * to_units
        return (m - twin.predict(t_rig, angle, rate)) / spec.scale

    # the tare: the rig at the stroke's start while the simulation waits at t = 0 (as mms serve --feedback)
    taring = round(spec.tare_s / sample_s)
    tare = np.mean([sample(k * sample_s, commanded(0.0)) for k in range(1, taring + 1)], axis=0)
    n = round(duration_s / sample_s)
    twists, errors, closing = np.empty((n, 6)), np.zeros((n, 6)), None
    for k in range(1, n + 1):
        t = k * sample_s
        if stroke == "rig":              # a setpoint frame at each command tick, on the sample it falls on
            tick = np.floor(t * rig.command_hz) / rig.command_hz
            if round(tick * US_PER_S) != ramp.arrived_us or k == 1:
                ramp.set(commanded(tick), round(tick * US_PER_S), continuing=k > 1)
            command = ramp.at(round(t * US_PER_S))
        else:
            command = commanded(t)
        errors[k - 1] = fed * (sample(t + taring * sample_s, command) - tare)
        table.add(t - lag_s, errors[k - 1])
        periodic = spec.compensation == "periodic"
        if closing is None and (table.full() or not periodic):    # the loop closes: the references start from here
            closing = {"t": closed.t, "q": closed.q, "qd": closed.qd, "base_pos": closed.base_pose[:3, 3],
                       "base_quat": matrix_to_quat(closed.base_pose[:3, :3]), "base_twist": closed.y[7:13].copy()}
        # "none": the newest error at the period's start, held (a lockstep loop's; errors[-1] is zero at k = 1)
        value, slope = table.at(closed.t) if periodic else (errors[k - 2], np.zeros(6))
        if held is not None:
            held.add(closed.t, closed.base_pose[:3, :3])
            value, slope = held.held(value, slope)
        wrench.set(closed.t, gain * value, gain * slope)
        closed.inputs_changed()
        twists[k - 1] = closed.advance_to(t)["base_twist"]
    times = sample_s * np.arange(1, n + 1)
    if closing is None:
        raise ValueError(f"the loop did not close within {duration_s:g} s (the phase table fills in "
                         f"{spec.tare_s + spec.periods * spec.period_s:g} s and more)")
    after = times > closing["t"] + 0.5 * sample_s
    times = times[after]
    truth = truth_config(config, rig_path)
    return CaptiveRun(times, twists[after], simulated_thorax(config, robot, times, closing),
                      simulated_thorax(truth, robot, times, truth_start(config, truth, robot, closing)),
                      errors[after])


def truth_start(config: dict, truth: dict, path: Path, start: dict) -> dict:
    """The truth's start from the closed loop's state ``start`` (a sim/state of ``config``'s robot): its own wings
    (:func:`joint_state`), the thorax's pose, and the thorax twist that gives it the closed loop's total momentum
    (:func:`momentum_twist`). With the closed loop's thorax twist instead, the truth's stiffer wings carry other
    momentum and the free thorax starts off by the difference: 9 um/s on vx in a demo run, about the whole of the
    open loop's error from the truth, which no fed-back force reproduces (docs/closed-loop.md)."""
    own = start | joint_state(truth, path, start["t"])
    return own | {"base_twist": momentum_twist(truth, path, own, momentum(config, path, start))}


def _state_simulation(config: dict, path: Path, state: dict):
    """A Simulation of ``config`` at ``state`` (a sim/state: ``t``, ``q``, ``qd``, ``base_pos``, ``base_quat``,
    ``base_twist``)."""
    from sim.robots import build_robot
    from sim.simulation import Simulation
    from sim.spatial import quat_to_matrix

    simulation = Simulation(build_robot(config, path), integrator=config["simulation"]["integrator"],
                            dt=config["simulation"]["dt"])
    pose = np.eye(4)
    pose[:3, :3], pose[:3, 3] = quat_to_matrix(np.asarray(state["base_quat"], dtype=float)), state["base_pos"]
    simulation.reset(q=state["q"], qd=state["qd"], base_pose=pose, base_twist=state["base_twist"])
    simulation.t = float(state["t"])
    return simulation


def momentum(config: dict, path: Path, state: dict) -> np.ndarray:
    """Total momentum (6,) (kg m/s, kg m^2/s about the world origin; world frame) of ``config``'s robot at
    ``state`` (a sim/state; the driven joints at their laws' values at its ``t``)."""
    from sim.dynamics import momentum_world

    simulation = _state_simulation(config, path, state)
    simulation.outputs()             # evaluates the state into simulation.data
    return momentum_world(simulation.model, simulation.data)


def momentum_twist(config: dict, path: Path, state: dict, target: np.ndarray) -> np.ndarray:
    """The base twist (6,) (base frame; m/s, rad/s) at which ``config``'s robot at ``state`` has the total momentum
    ``target`` (6,) (world frame). The momentum is affine in the base twist, ``h(V) = h(0) + A V``: A's six columns
    from six unit twists, then ``V = A^-1 (target - h(0))``."""
    at = lambda twist: momentum(config, path, state | {"base_twist": twist})  # noqa: E731 - one-line local
    h0 = at(np.zeros(6))
    columns = np.column_stack([at(unit) - h0 for unit in np.eye(6)])
    return np.linalg.solve(columns, np.asarray(target, dtype=float) - h0)


def joint_state(config: dict, path: Path, t: float) -> dict[str, np.ndarray]:
    """``q``, ``qd`` (n,) of ``config`` run from rest to ``t`` (s): the truth's own wings when it starts from the
    closed loop's thorax (the model's wings would set the truth's stiffer ones ringing)."""
    from sim.robots import build_robot
    from sim.simulation import Simulation

    simulation = Simulation(build_robot(config, path), integrator=config["simulation"]["integrator"],
                            dt=config["simulation"]["dt"])
    simulation.reset()
    simulation.advance(t)
    return {"q": simulation.q, "qd": simulation.qd}


#: the wrench channel that drives each thorax twist component most directly (body frame, about O_0): the forward
#: force the forward speed, the vertical force the vertical speed, the pitching moment the pitch rate
DRIVING_CHANNEL = {"vx": "fx", "vz": "fz", "wy": "my"}
#: a part of the truth's departure is resolvable when the wrench it needs is at least this many standard deviations
#: of the measured channel's noise in the loop's phase table (a two-sided 95 % test of "the table holds it")
RESOLVING_SNR = 2.0
#: the parts of a stroke-periodic wrench the loop feeds back ([feedback] mean, harmonics): the stroke's mean
#: (a drift of the free thorax's speed) and its harmonics 1..H (a periodic speed)
PARTS = ("mean", "harmonics")
#: the motion each part makes in a twist component, in the verdict's words
PART_MOTION = {"mean": "drift", "harmonics": "stroke harmonics"}
#: a stroke counts in the noise's scatter when at least this fraction of its samples arrived (a telemetry gap leaves
#: a stroke's mean to part of its shape, which would scatter by the stroke's load, not by the noise)
WHOLE_STROKE = 0.9


def stroke_parts(times: np.ndarray, x: np.ndarray, period_s: float, harmonics: int) -> tuple[float, float, float]:
    """Least-squares fit of ``x`` (n,) at ``times`` (n,) s on a ramp and the stroke's harmonics 1..H:
    ``x ~ a + b (t - mean t) + sum_h (c_h cos h w t + s_h sin h w t)``, w = 2 pi / period. Returns (a, b, the
    harmonics' RMS ``sqrt(sum_h (c_h^2 + s_h^2) / 2)``) in the units of ``x`` (b: per second)."""
    coefficients = _stroke_fit(times, x, period_s, harmonics)
    return (float(coefficients[0]), float(coefficients[1]),
            float(np.sqrt(np.sum(coefficients[2:] ** 2) / 2.0)))


def part_motion(times: np.ndarray, x: np.ndarray, period_s: float, harmonics: int) -> dict[str, float]:
    """The motion each part of :data:`PARTS` makes in ``x`` (n,) at ``times`` (n,) s, by RMS over the stretch, in
    the units of ``x``: ``mean``: the ramp a stroke-mean wrench leaves, ``|b| T / sqrt(12)`` of the fitted ramp over
    the stretch's span T; ``harmonics``: the harmonics' RMS (:func:`stroke_parts`)."""
    _, slope, harmonics_rms = stroke_parts(times, x, period_s, harmonics)
    return {"mean": abs(slope) * float(times[-1] - times[0]) / np.sqrt(12.0), "harmonics": harmonics_rms}


def part_distances(times: np.ndarray, closed_error: np.ndarray, open_error: np.ndarray, period_s: float,
                   harmonics: int) -> dict[str, dict[str, float]]:
    """Per part of :data:`PARTS`, the closed and the open loop's distance from the truth in the motion that part
    makes (:func:`part_motion`) and their ratio (below 1: the closed loop nearer): ``closed_error``,
    ``open_error`` (n,) one twist component of each run minus the truth's at ``times`` (n,) s. The part the loop
    feeds is judged by its own distance: the whole RMS adds the parts the loop does not feed (the drift of the
    stroke mean with ``[feedback] mean = false``) and the loop's noise outside the stroke's harmonics."""
    closed, opened = (part_motion(times, x, period_s, harmonics) for x in (closed_error, open_error))
    return {part: {"closed": closed[part], "open": opened[part],
                   "ratio": closed[part] / opened[part] if opened[part] > 0.0 else float("inf")} for part in PARTS}


def _stroke_fit(times: np.ndarray, x: np.ndarray, period_s: float, harmonics: int) -> np.ndarray:
    """The least-squares coefficients (2 + 2 H,) or (2 + 2 H, m) of :func:`stroke_parts`' fit of ``x`` (n,) or
    (n, m): a, b, c_1..c_H, s_1..s_H."""
    omega = 2.0 * np.pi / period_s
    h = np.arange(1, harmonics + 1)
    columns = [np.ones_like(times), times - times.mean(), *np.cos(np.outer(h, omega * times)),
               *np.sin(np.outer(h, omega * times))]
    return np.linalg.lstsq(np.column_stack(columns), x, rcond=None)[0]


def stroke_harmonics(times: np.ndarray, x: np.ndarray, period_s: float, harmonics: int) -> np.ndarray:
    """The stroke's harmonics 1..H of ``x`` (n, m) at ``times`` (n,) s, fitted with a constant and a ramp
    (:func:`stroke_parts`): (H, m) complex, ``c_h - i s_h`` (``x ~ Re(z_h exp(i h w t))``), in the units of ``x``."""
    coefficients = _stroke_fit(times, x, period_s, harmonics)
    return coefficients[2:2 + harmonics] - 1j * coefficients[2 + harmonics:]


def base_inertia(config: dict, path: Path, start: dict, period_s: float, samples: int = 10) -> np.ndarray:
    """The thorax's effective inertia (6, 6) (body frame, about O_0; kg, kg m, kg m^2): its articulated inertia
    M*_0 (the whole robot as the thorax feels it, the servo-driven joints following their law and the passive ones
    articulated, added mass included), averaged over one stroke from the state ``start`` (a sim/state). A wrench
    dw on the thorax changes its acceleration by M*_0^-1 dw."""
    simulation = _state_simulation(config, path, start)
    t0 = simulation.t
    inertias = []
    for k in range(samples):
        simulation.advance_to(t0 + k * period_s / samples)
        simulation.outputs()
        inertias.append(simulation.data.Mstar[0].copy())
    return np.mean(inertias, axis=0)


#: s: the held runs of :func:`gravity_mismatch`: from rest, the wings' ringing of the start left out, then the
#: harmonics fitted over 5 strokes (fitted over 2-8 s of an 8 s run instead: the same to 3 digits)
HELD_SETTLE_S, HELD_FIT_S = 1.0, 1.0


def held_error(config: dict, truth: dict, path: Path, gravity: float, duration_s: float) -> tuple[np.ndarray,
                                                                                                   np.ndarray]:
    """The model's error as a held rig under ``gravity`` (m/s^2) measures it, offline and exact: the model
    (``config``) and the truth (``truth``) tethered at the thorax from rest, both driven by the model's own stroke;
    ``m - m_hat`` (n, 6) at the step times (n,) s: the support's wrench on the model's thorax less that on the
    truth's (the sensor reads the opposite of the support's; thorax frame, about O_0; N, N m)."""
    from sim.robots import build_robot
    from sim.simulation import Simulation

    wrenches = []
    for robot_config in (config, truth):
        held = copy.deepcopy(robot_config)
        held["robot"] |= {"base": "fixed", "gravity": gravity}
        simulation = Simulation(build_robot(held, path), integrator=held["simulation"]["integrator"],
                                dt=held["simulation"]["dt"])
        simulation.reset()
        times, outputs = simulation.record(round(duration_s / simulation.dt))
        wrenches.append(outputs["base_wrench"])
    return times, wrenches[0] - wrenches[1]


def gravity_mismatch(config: dict, truth: dict, path: Path, rig_gravity: float | None, period_s: float,
                     harmonics: int) -> np.ndarray:
    """How much the rig's gravity changes the model's error the loop feeds back, per channel (6,): the held error's
    stroke harmonics 1..H under the rig's gravity ``rig_gravity`` (m/s^2; ``[feedback] gravity``, None: the
    simulation's) less those under the simulation's
    (``config``'s), in norm over the harmonics, over the latter's (:func:`held_error`). The demo's thorax flies
    weightless while the rig stands on the Earth: the wings' weight bends the truth's stiffer roots less than the
    model's, a stroke-periodic load the weightless free flight does not have (docs/closed-loop.md, "What keeps the
    pitch rate from the truth"). Zero when the two gravities are the same."""
    from sim.robots import build_robot

    simulation_gravity = float(np.linalg.norm(build_robot(config, path).gravity))
    if rig_gravity is None or simulation_gravity == rig_gravity:
        return np.zeros(6)
    held = []
    for gravity in (rig_gravity, simulation_gravity):
        times, error = held_error(config, truth, path, gravity, HELD_SETTLE_S + HELD_FIT_S)
        fitted = times > HELD_SETTLE_S
        held.append(stroke_harmonics(times[fitted], error[fitted], period_s, harmonics))
    change, weightless = np.linalg.norm(held[0] - held[1], axis=0), np.linalg.norm(held[1], axis=0)
    return np.divide(change, weightless, out=np.zeros(6), where=weightless > 0.0)   # fy, mx, mz: none either way


def measured_error(tables, rig, spec, robot: Path, config: dict) -> tuple[np.ndarray, np.ndarray]:
    """The model's error as the loop measured it, re-run from the recording: each hw/telemetry sample's load
    channels less the model's twin (:class:`hil.feedback.loop.ModelTwin`, driven by the recorded servo angles as
    the live loop drives it, on the device's sample clock). Returns the samples' recording times (n,) s and the
    errors m - m_hat (n, 6) in ``[feedback.wrench] channels`` order (N, N m; not tared: a constant). ``rig``,
    ``spec``: the rig file's (:func:`hil.feedback.loop.load_feedback`)."""
    from hil.feedback.loop import ModelTwin

    telemetry = tables.tables[TOPIC_HW_TELEMETRY].columns
    device_s = (np.asarray(telemetry["device_us"], dtype=float) - float(telemetry["device_us"][0])) * 1e-6
    servo = np.column_stack([np.asarray(telemetry[f"servo_rad_{s.name}"], dtype=float) for s in rig.servos])
    load = np.column_stack([np.asarray(telemetry[f"load_{name}"], dtype=float) for name in spec.channels])
    twin = ModelTwin(rig, spec, robot, max(config["simulation"]["dt"], 1.0 / rig.telemetry_hz),
                     config["simulation"]["integrator"])
    rates = np.vstack([np.zeros((1, servo.shape[1])), np.diff(servo, axis=0) / np.diff(device_s)[:, None]])
    predicted = np.array([twin.predict(t, angle, rate) for t, angle, rate in zip(device_s, servo, rates)])
    return np.asarray(telemetry["time_s"], dtype=float), (load - predicted) / spec.scale


def stroke_noise(time_s: np.ndarray, error: np.ndarray, state_time_s: np.ndarray, state_t: np.ndarray,
                 compared: tuple[float, float], spec) -> tuple[float, int]:
    """The measured error's noise on one channel: the scatter (standard deviation, N or N m) of its mean over each
    stroke of the compared stretch ``compared`` (recording clock s), ``error`` (n,) at ``time_s`` (n,) s through
    the loop's moving average (``smoothing_s``), each sample placed in its stroke as the loop places it (its
    recording time mapped onto simulated time through sim/state ``state_time_s`` -> ``state_t``, less
    ``latency_s``), whole strokes only; and the number of strokes. The structure's error is periodic and its
    stroke mean the same in every stroke: what scatters is what is not locked to the drive (the sensor's noise,
    the wings' ringing)."""
    rate_hz = 1.0 / float(np.median(np.diff(time_s)))
    width = max(1, round(spec.smoothing_s * rate_hz))
    smoothed = np.convolve(error, np.ones(width) / width, mode="same")
    inside = (time_s >= compared[0]) & (time_s <= compared[1])
    phase = np.interp(time_s[inside], state_time_s, state_t) - spec.latency_s
    stroke = np.floor(phase / spec.period_s).astype(int)
    full = round(spec.period_s * rate_hz)
    means = [smoothed[inside][stroke == j].mean() for j in np.unique(stroke)
             if np.count_nonzero(stroke == j) >= WHOLE_STROKE * full]
    return (float(np.std(means, ddof=1)) if len(means) > 2 else float("nan")), len(means)


def resolvability(times: np.ndarray, departure: np.ndarray, inertia: np.ndarray, measured: tuple, state: tuple,
                  compared: tuple[float, float], spec) -> dict[str, dict]:
    """Per thorax component (:data:`COMPONENTS`), whether the rig's sensor resolves the wrench that the truth's
    departure from the model, ``departure`` (n, 6) (truth minus open loop, body frame twist at ``times`` (n,) s),
    asks of the loop (docs/closed-loop.md, "Which channels the rig resolves"): that wrench is
    ``dw = M*_0 d(departure)/dt`` (``inertia``: :func:`base_inertia`), on the component's :data:`DRIVING_CHANNEL`
    split into the stroke's mean and harmonics 1..H; the noise of each part in a table of ``periods`` strokes is
    the measured stroke-to-stroke scatter sigma (:func:`stroke_noise`) over sqrt(periods), times sqrt(2 H) for the
    harmonics (a flat noise spectrum below the stroke's H-th harmonic: each harmonic's cosine and sine take twice
    the mean's variance). The part that dominates the departure (the ramp a mean force leaves, or the periodic
    motion of the harmonics, by their RMS) decides."""
    wrench = np.gradient(departure, times, axis=0) @ inertia.T            # (n, 6) N, N m: M*_0 d(departure)/dt
    result = {}
    for name, k in COMPONENTS.items():
        channel = DRIVING_CHANNEL[name]
        column = spec.channels.index(channel)
        mean_w, _, harmonics_w = stroke_parts(times, wrench[:, column], spec.period_s, spec.harmonics)
        motion = part_motion(times, departure[:, k], spec.period_s, spec.harmonics)
        sigma, strokes = stroke_noise(measured[0], measured[1][:, column], *state, compared, spec)
        noise = sigma / np.sqrt(spec.periods)
        parts = {"mean": {"signal": abs(mean_w), "noise": noise, "motion_rms": motion["mean"],
                          "fed": channel not in spec.left_out and spec.mean},
                 "harmonics": {"signal": harmonics_w, "noise": noise * np.sqrt(2.0 * spec.harmonics),
                               "motion_rms": motion["harmonics"], "fed": channel not in spec.left_out}}
        dominant = max(PARTS, key=lambda part: parts[part]["motion_rms"])
        result[name] = {"channel": channel, "unit": "N" if channel.startswith("f") else "N m",
                        "stroke_noise": sigma, "strokes": strokes, "parts": parts, "dominant": dominant,
                        "resolvable": bool(parts[dominant]["signal"] >= RESOLVING_SNR * parts[dominant]["noise"])}
    return result


def verdict(entry: dict) -> str:
    """The component's verdict in words, from its figures (``entry``: a closed_loop.json component)."""
    resolved = entry["resolvability"]
    part = resolved["parts"][resolved["dominant"]]
    scale, unit = (1e6, "uN") if resolved["unit"] == "N" else (1e9, "nN m")
    what = (f"the stroke {resolved['dominant']} of {resolved['channel']}: signal {scale * part['signal']:.3g} vs "
            f"noise {scale * part['noise']:.3g} {unit}")
    if not resolved["resolvable"]:
        return f"not resolvable by this rig's sensor ({what})"
    if not part["fed"]:
        return f"does not follow: resolvable ({what}) but not fed back ([feedback] mean / left_out)"
    limit = ""
    if resolved["dominant"] == "harmonics" and resolved["gravity_mismatch"] > 0.0:
        limit = (f"; the rig's gravity, which the simulation does not have, changes the held model error there by "
                 f"{100 * resolved['gravity_mismatch']:.0f} %")
    distance = (f"from the truth, closed over open: {entry['distances'][resolved['dominant']]['ratio']:.3f} in the "
                f"{PART_MOTION[resolved['dominant']]}, {entry['ratio']:.3f} over the whole motion")
    return f"{'follows the truth' if entry_follows(entry) else 'does not follow'} ({what}; {distance}{limit})"


def overall_verdict(components: dict[str, dict]) -> str:
    """The run's verdict: the closed loop follows the truth where the rig resolves the truth's departure."""
    resolvable = [name for name, entry in components.items() if entry["resolvability"]["resolvable"]]
    unresolvable = [name for name in components if name not in resolvable]
    failing = [name for name in resolvable if not entry_follows(components[name])]
    tail = f"; not resolvable by the rig's sensor: {', '.join(unresolvable)}" if unresolvable else ""
    if not resolvable:
        return "no thorax component's departure is resolvable by the rig's sensor in this run" + tail
    if failing:
        return f"the closed loop does not follow the truth on {', '.join(failing)}, which the rig resolves" + tail
    return f"the closed loop follows the truth on every component the rig resolves ({', '.join(resolvable)})" + tail


def entry_follows(entry: dict) -> bool:
    """A resolvable component follows the truth: the part that decides its resolvability is fed back and the
    closed loop nearer the truth than the open loop in the motion of that part (:func:`part_distances`)."""
    dominant = entry["resolvability"]["dominant"]
    return entry["resolvability"]["parts"][dominant]["fed"] and entry["distances"][dominant]["ratio"] < 1.0
