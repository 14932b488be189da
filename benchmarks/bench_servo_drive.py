"""The flapper rig's servo drive and the wings' ringing (issue 21; docs/closed-loop.md, "A servo drive that does not
ring the wings"): setpoints held until the next frame (``[rates] setpoints = "step"``) against interpolated on the
device (``"interpolate"``), in the closed-loop demo.

Figures of one run folder of ``mms demo --closed-loop`` (its ``run.mcap``, ``report/closed_loop.json``), over the
driver's tracking stretch less its first second and last 0.2 s:

- the servo acceleration: the second difference of the telemetry's servo angles on consecutive 1 kHz samples,
  |a| p50 and p99 over both servos, rad/s^2 (the 5 Hz stroke alone: ~440 at p50), and the right servo's RMS at
  40-60 Hz (where the wings ring) and at 100-500 Hz (the steps' own band), rad/s^2 (the tracking stretch has no gap
  in the device's samples: ``sample_gaps``);
- the model's error ``m - m_hat`` on ``fx``: the recorded telemetry re-run through the model's twin as the loop
  runs it (hil.feedback.loop.ModelTwin, the run's robot file, tared over ``tare_s``), its RMS at 40-60 Hz (the
  wings' ringing) and at 4-21 Hz, uN;
- the phase table's noise: the tared error through the loop's PhaseTable (the rig's ``[feedback]``); each period
  once full, the table's fed-back ``fx`` over a period; the RMS of the difference of two tables ``periods`` periods
  apart (independent samples) over sqrt 2: the noise the loop feeds back, uN (the structure's own error in the
  kept harmonics: ~22 uN);
- the servo's lag behind the simulated stroke: each sample's wall time (device clock moved onto the host's receipt,
  as the loop does) mapped onto simulated time through the sim/state stamps, the first harmonic of the servo angle
  against the robot's stroke law there, ms (what ``[feedback] latency_s`` is);
- the driver's setpoint intervals (hw/command stamps), p1/p50/p99, ms;
- the comparison of ``report/closed_loop.json``: closed / open ratios (the whole motion's and the stroke
  harmonics') and gains on vx, vz, wy, the server's misses.

``--live N``: N alternating pairs of 10 s demo runs, ``step`` then ``interpolate``, each with the worktree's
configs copied and its flapper rig's ``setpoints`` set (the copy's folder the demo's working folder and first on
PYTHONPATH, so that ``import configs`` finds it: ``mms demo`` runs the shipped rigs only), the load average before
and after each; then every run's figures and the means of each kind.
``--captive``: hil.experiment.closed_loop.captive_loop with ``stroke="rig"``, exact sensors, 8 s, for both kinds
(deterministic). ``--lag``: the Python device alone, frames of a 5 Hz stroke every 2 ms arriving 0-1, 0-2, 0-4 ms late
(uniform): its target's first-harmonic lag, step and interpolate (deterministic). ``--replay RUN_DIR ...``: a run's
setpoint frames through the Python device and its servos offline, both kinds, as sent, on a regular grid, and with
the stroke's harmonics only (``replay_drive``). ``RUN_DIR ...``: the figures of existing run folders (their kind from the rig they name).

    python benchmarks/bench_servo_drive.py [--live N] [--captive] [--lag] [--replay RUN_DIR ...] [--out DIR]
        [RUN_DIR ...]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import msgpack
import numpy as np

from sim.config import load_toml
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("step", "interpolate")
#: s of the tracking stretch left out at its start (the stroke's soft start, the loop's tare) and at its end (the
#: driver's ramp to neutral)
SKIP_START_S, SKIP_END_S = 1.0, 0.2
#: Hz: the wings' ringing and the stroke's kept harmonics (5-20 Hz, with a margin)
RINGING_BAND, STROKE_BAND = (40.0, 60.0), (4.0, 21.0)
#: Hz: what 500 Hz setpoint steps on 1 kHz samples put into the servo motion
STEP_BAND = (100.0, 500.0)
DEMO_DURATION_S = 10.0


def _messages(raw, topic: str) -> list[dict]:
    return [msgpack.unpackb(data, raw=False) for _log_ns, _publish_ns, data in raw.messages.get(topic, [])]


def _telemetry(raw, rig, spec) -> dict[str, np.ndarray]:
    """The recorded samples in order: wall s, device us, servo rad (k, n_servo), the feedback channels (k, 6)."""
    wall, device, servo, load = [], [], [], []
    for m in _messages(raw, TOPIC_HW_TELEMETRY):
        us = np.asarray(m["device_us"], dtype=np.int64)
        wall.append(m["host_ns"] * 1e-9 - (us[-1] - us) * 1e-6)
        device.append(us)
        servo.append(np.asarray(m["servo_rad"])[:, [m["servo_names"].index(s.name) for s in rig.servos]])
        load.append(np.asarray(m["load"])[:, [m["load_names"].index(name) for name in spec.channels]])
    return {"wall": np.concatenate(wall), "device_us": np.concatenate(device), "servo": np.concatenate(servo),
            "load": np.concatenate(load)}


def _band_rms(x: np.ndarray, dt: float, band: tuple[float, float]) -> float:
    """RMS (x's unit) of the part of x (n,) sampled every dt (s) in the frequency band (Hz), by Parseval."""
    spectrum = np.fft.rfft(x - x.mean())
    f = np.fft.rfftfreq(x.size, dt)
    inside = (f >= band[0]) & (f <= band[1])
    return float(np.sqrt(2.0 * np.sum(np.abs(spectrum[inside]) ** 2)) / x.size)


def _first_harmonic(t: np.ndarray, x: np.ndarray, omega: float) -> complex:
    """The complex amplitude of x (n,) at angular frequency omega on times t (n,) s, least squares with a mean."""
    basis = np.column_stack([np.ones_like(t), np.cos(omega * t), np.sin(omega * t)])
    c = np.linalg.lstsq(basis, x, rcond=None)[0]
    return complex(c[1], -c[2])


def analyse(run_dir: Path, rig_path: Path) -> dict:
    """The figures of one demo run folder (module docstring)."""
    from firmware_interface.emulator import US_PER_S
    from hil.feedback.loop import ModelTwin, fed_channels, load_feedback, phase_table
    from hil.recording.mcap_io import read_recording
    from sim.robots import build_robot

    rig, spec = load_feedback(rig_path)
    robot = run_dir / "flapper.toml"
    config = load_toml(robot)
    raw = read_recording(run_dir / "run.mcap", topics={TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE, TOPIC_HW_COMMAND})
    samples = _telemetry(raw, rig, spec)
    commands = [m for m in _messages(raw, TOPIC_HW_COMMAND) if m.get("mode") == "track"]
    sent_s = np.array([m["stamp_ns"] for m in commands]) * 1e-9
    first, last = sent_s[0] + SKIP_START_S, sent_s[-1] - SKIP_END_S
    keep = (samples["wall"] >= first) & (samples["wall"] <= last)
    sample_s = 1.0 / rig.telemetry_hz
    figures: dict = {"run": str(run_dir), "setpoints": rig.setpoints, "tracked_s": float(last - first)}

    # the servo acceleration on consecutive samples
    du = np.diff(samples["device_us"])
    consecutive = (du[:-1] == round(sample_s * US_PER_S)) & (du[1:] == round(sample_s * US_PER_S)) & keep[1:-1]
    acceleration = np.abs(np.diff(samples["servo"], 2, axis=0)[consecutive]) / sample_s ** 2
    figures["servo_acceleration_p50"] = float(np.percentile(acceleration, 50))
    figures["servo_acceleration_p99"] = float(np.percentile(acceleration, 99))
    figures["sample_gaps"] = int(np.sum(du[keep[1:]] != round(sample_s * US_PER_S)))
    stretch = np.diff(samples["servo"][keep, 0], 2) / sample_s ** 2    # the right servo, rad/s^2
    figures["servo_acceleration_40_60_hz"] = _band_rms(stretch, sample_s, RINGING_BAND)
    figures["servo_acceleration_100_500_hz"] = _band_rms(stretch, sample_s, STEP_BAND)

    # the model's error, through the twin as the loop steps it, tared
    dt = max(config["simulation"]["dt"], sample_s)
    twin = ModelTwin(rig, spec, robot, dt, config["simulation"]["integrator"])
    t_twin = (samples["device_us"] - samples["device_us"][0]) * 1e-6
    error = np.empty_like(samples["load"])
    previous = None
    for k in range(t_twin.size):
        rate = np.zeros(len(rig.servos)) if previous is None else (samples["servo"][k] - previous) / (t_twin[k] - t_twin[k - 1])
        previous = samples["servo"][k]
        error[k] = (samples["load"][k] - twin.predict(t_twin[k], samples["servo"][k], rate)) / spec.scale
    error -= error[t_twin - t_twin[0] < spec.tare_s].mean(axis=0)
    fx = error[keep, 0]
    figures["error_fx_ringing_uN"] = 1e6 * _band_rms(fx, sample_s, RINGING_BAND)
    figures["error_fx_stroke_band_uN"] = 1e6 * _band_rms(fx, sample_s, STROKE_BAND)

    # the phase table's noise: tables `periods` periods apart
    table, fed = phase_table(spec, sample_s), fed_channels(spec)
    snapshots = []
    for t, value in zip(t_twin[keep], error[keep]):
        table.add(t - spec.latency_s, fed * value)
        if table.full() and table.added % table.n == 0:
            snapshots.append(table.smooth[:, 0].copy())
    snapshots = np.array(snapshots)
    if len(snapshots) > spec.periods:
        difference = snapshots[spec.periods:] - snapshots[:-spec.periods]
        figures["table_fx_noise_uN"] = 1e6 * float(np.sqrt(np.mean(difference ** 2) / 2.0))
        figures["table_fx_rms_uN"] = 1e6 * float(np.sqrt(np.mean(snapshots ** 2)))
        figures["tables"] = int(len(snapshots))

    # the servo's lag behind the simulated stroke
    states = _messages(raw, TOPIC_SIM_STATE)
    stamps = np.array([s["stamp_ns"] for s in states]) * 1e-9
    simulated = np.interp(samples["wall"][keep], stamps, np.array([s["t"] for s in states]))
    model = build_robot(config, robot)
    omega = 2.0 * np.pi / spec.period_s
    lags = []
    for joint in rig.joints:
        law = model.motion_laws[model.joint_names.index(joint.joint)]
        commanded = np.array([joint.servo_angle(law.evaluate(t)[0]) for t in simulated])
        measured = samples["servo"][keep, rig.servo_names.index(joint.servo)]
        ratio = _first_harmonic(simulated, measured, omega) / _first_harmonic(simulated, commanded, omega)
        lags.append(-np.angle(ratio) / omega)
    figures["servo_lag_ms"] = 1e3 * float(np.mean(lags))
    intervals = np.diff(sent_s) * 1e3
    figures["setpoint_interval_ms"] = [float(np.percentile(intervals, q)) for q in (1, 50, 99)]

    report = run_dir / "report" / "closed_loop.json"
    if report.is_file():
        comparison = json.loads(report.read_text())
        for name, entry in comparison["components"].items():
            figures[f"{name}_ratio"] = entry["ratio"]
            figures[f"{name}_harmonics_ratio"] = entry["distances"]["harmonics"]["ratio"]
            figures[f"{name}_gain"] = entry["gain"]
        misses = comparison.get("health", {}).get("deadline_miss_fraction")
        figures["misses_pct"] = None if misses is None else 100.0 * misses
        figures["valid"] = comparison.get("health", {}).get("valid")
    return figures


def _variant(root: Path, kind: str) -> Path:
    """A copy of the worktree's configs package with the flapper rig's ``setpoints`` set to ``kind``: its root."""
    base = root / kind
    shutil.copytree(ROOT / "configs", base / "configs")
    rig = base / "configs" / "rigs" / "flapper_rig.toml"
    text = re.sub(r"^setpoints = .*\n", "", rig.read_text(), flags=re.M)
    text = text.replace("[rates]\n", f'[rates]\nsetpoints = "{kind}"\n', 1)
    rig.write_text(text)
    return base


def _load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def live(pairs: int, out: Path) -> list[dict]:
    """``pairs`` alternating demo runs of each kind (module docstring); their figures."""
    results = []
    with tempfile.TemporaryDirectory(prefix="servo-drive-") as tmp:
        bases = {kind: _variant(Path(tmp), kind) for kind in KINDS}
        for pair in range(pairs):
            for kind in KINDS:
                run_dir = out / f"{kind}{pair + 1}"
                env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(bases[kind]), str(ROOT)])}
                before = _load()
                result = subprocess.run([sys.executable, "-m", "hil.cli", "demo", "--closed-loop", "--duration",
                                         f"{DEMO_DURATION_S:g}", "--out", str(run_dir)], env=env, cwd=bases[kind],
                                        capture_output=True, text=True)
                (out / f"{kind}{pair + 1}.log").write_text(result.stdout + result.stderr)
                after = _load()
                if result.returncode != 0 or not (run_dir / "run.mcap").is_file():
                    print(f"{kind}{pair + 1}: the demo failed (exit {result.returncode}); see its log", flush=True)
                    continue
                figures = analyse(run_dir, bases[kind] / "configs" / "rigs" / "flapper_rig.toml")
                figures["load"] = f"{before} -> {after}"
                results.append(figures)
                print(json.dumps(figures), flush=True)
    return results


def captive() -> None:
    """captive_loop with the rig's servo chain, exact sensors, 8 s, for each kind: closed / open ratios."""
    from hil.experiment.closed_loop import COMPONENTS, captive_loop
    from hil.experiment.demo import RIGS, write_demo_robot

    rms = lambda x: float(np.sqrt(np.mean(x * x)))  # noqa: E731 - one-line local
    with tempfile.TemporaryDirectory(prefix="servo-drive-") as tmp:
        robot = write_demo_robot(RIGS["flapper"], Path(tmp) / "flapper.toml", closed_loop=True)
        for kind in KINDS:
            rig = _variant(Path(tmp), kind) / "configs" / "rigs" / "flapper_rig.toml"
            text = rig.read_text().replace('robot = "../robots/flapper.toml"',
                                           f'robot = "{ROOT / "configs" / "robots" / "flapper.toml"}"')
            rig.write_text(text)
            run = captive_loop(robot, rig, 8.0, stroke="rig", seed=None)
            ratios = {name: rms(run.closed[:, k] - run.truth[:, k]) / rms(run.open_loop[:, k] - run.truth[:, k])
                      for name, k in COMPONENTS.items()}
            ringing = 1e6 * _band_rms(run.error[:, 0], 1e-3, RINGING_BAND)
            print(f"captive, {kind}: " + ", ".join(f"{name} {ratio:.3f}" for name, ratio in ratios.items())
                  + f"; error fx at 40-60 Hz {ringing:.1f} uN", flush=True)


def device_lag(mode: str, jitter_us: int, frames: int = 2000, seed: int = 1) -> float:
    """The Python device's servo target's first-harmonic lag (ms) behind a 5 Hz stroke whose setpoint for the driver's
    tick k (every 2 ms) arrives 0..``jitter_us`` late (uniform, seeded), ``mode`` ``[rates] setpoints``."""
    import dataclasses

    from firmware_interface import protocol as p
    from firmware_interface.emulator import Device
    from firmware_interface.plant import KinematicPlant
    from firmware_interface.rigs.mcu import load_rig

    rig = dataclasses.replace(load_rig(ROOT / "configs" / "rigs" / "flapper_rig.toml"), setpoints=mode)
    device, servo = Device(rig, KinematicPlant(rig), np.random.default_rng(0)), rig.servos[0]
    device.receive(p.encode(p.Hello(), 0), 0.0)
    rng, omega = np.random.default_rng(seed), 2.0 * np.pi * 5.0
    times, targets, sample_us = [], [], 0
    for k in range(1, frames):
        tick_us = 2000 * k
        arrival_us = tick_us + int(rng.integers(0, jitter_us + 1))
        while sample_us <= arrival_us:
            device.tick(sample_us / 1e6)
            times.append(sample_us / 1e6)
            targets.append(device.target[0])
            sample_us += 1000
        setpoint = servo.to_raw(0.6 * np.sin(omega * tick_us / 1e6))
        device.receive(p.encode(p.Setpoints((setpoint, rig.servos[1].neutral_raw)), k), arrival_us / 1e6)
    t, y = np.array(times), np.array(targets)
    keep = t > 0.5
    return 1e3 * float(np.angle(_first_harmonic(t[keep], 0.6 * np.sin(omega * t[keep]), omega)
                                / _first_harmonic(t[keep], y[keep], omega))) / omega


def replay_drive(run_dir: Path) -> None:
    """A run's setpoint frames (hw/command: the right servo's values and their send stamps) replayed through the
    Python device and its emulated servos offline, held and interpolated, arriving as sent and on a regular 2 ms grid
    (the same values), and on the grid with the values' fit of the stroke's first four harmonics: the servo
    acceleration's RMS at 40-60 Hz and 100-500 Hz, rad/s^2. What the frames' timing, and what their values beyond
    the stroke, put into the servo motion."""
    import dataclasses

    from firmware_interface import protocol as p
    from firmware_interface.emulator import Device
    from firmware_interface.plant import KinematicPlant
    from firmware_interface.rigs.mcu import load_rig
    from hil.recording.mcap_io import read_recording

    raw = read_recording(run_dir / "run.mcap", topics={TOPIC_HW_COMMAND})
    commands = [m for m in _messages(raw, TOPIC_HW_COMMAND) if m.get("mode") == "track"]
    sent_s = np.array([m["stamp_ns"] for m in commands]) * 1e-9
    values = np.array([m["setpoint_rad"][0] for m in commands])
    keep = (sent_s > sent_s[0] + SKIP_START_S) & (sent_s < sent_s[-1] - SKIP_END_S)
    sent_us = np.rint((sent_s[keep] - sent_s[keep][0]) * 1e6).astype(np.int64) + 1000
    values = values[keep]
    period_us = round(np.median(np.diff(sent_us)))
    regular_us = 1000 + period_us * np.arange(sent_us.size)
    # the stroke's first four harmonics fitted to the values as sent: the values without what is not the stroke's
    omega = 2.0 * np.pi * 5.0
    basis = lambda t_us: np.column_stack([np.ones(t_us.size)] + [f(k * omega * t_us * 1e-6)  # noqa: E731
                                                                 for k in range(1, 5) for f in (np.cos, np.sin)])
    smooth = basis(regular_us) @ np.linalg.lstsq(basis(sent_us), values, rcond=None)[0]
    rig0 = load_rig(ROOT / "configs" / "rigs" / "flapper_rig.toml")
    for mode in KINDS:
        rig = dataclasses.replace(rig0, setpoints=mode)
        for timing, arrivals, stream in (("as sent", sent_us, values), ("regular", regular_us, values),
                                         ("regular, the stroke's harmonics only", regular_us, smooth)):
            device, servo = Device(rig, KinematicPlant(rig), np.random.default_rng(0)), rig.servos[0]
            device.receive(p.encode(p.Hello(), 0), 0.0)
            angles, sample_us = [], 0
            for k, (arrival_us, value) in enumerate(zip(arrivals, stream)):
                while sample_us <= arrival_us:
                    device.tick(sample_us / 1e6)
                    angles.append(device.servos.angle[0])
                    sample_us += 1000
                device.receive(p.encode(p.Setpoints((servo.to_raw(value), rig.servos[1].neutral_raw)), k + 1),
                               int(arrival_us) / 1e6)
            acceleration = np.diff(np.array(angles[1000:]), 2) * 1e6
            print(f"{run_dir.name}, {mode}, frames {timing}: servo acceleration at 40-60 Hz "
                  f"{_band_rms(acceleration, 1e-3, RINGING_BAND):.0f}, at 100-500 Hz "
                  f"{_band_rms(acceleration, 1e-3, STEP_BAND):.0f} rad/s^2 RMS", flush=True)


def summary(results: list[dict]) -> None:
    keys = ("servo_acceleration_p50", "servo_acceleration_p99", "servo_acceleration_40_60_hz",
            "servo_acceleration_100_500_hz", "error_fx_ringing_uN", "error_fx_stroke_band_uN",
            "table_fx_noise_uN", "table_fx_rms_uN", "servo_lag_ms", "vx_ratio", "vx_harmonics_ratio", "wy_ratio",
            "wy_harmonics_ratio", "vz_ratio", "vx_gain", "misses_pct")
    for kind in KINDS:
        runs = [r for r in results if r["setpoints"] == kind]
        if not runs:
            continue
        print(f"{kind} ({len(runs)} runs):")
        for key in keys:
            values = [r[key] for r in runs if r.get(key) is not None]
            if values:
                print(f"  {key}: mean {np.mean(values):.4g}, range {min(values):.4g} .. {max(values):.4g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="*", type=Path, help="existing demo run folders to analyse")
    parser.add_argument("--rig", type=Path, default=ROOT / "configs" / "rigs" / "flapper_rig.toml",
                        help="the rig file the existing runs ran with (default: the shipped flapper rig)")
    parser.add_argument("--live", type=int, default=0, metavar="N", help="N alternating pairs of demo runs")
    parser.add_argument("--captive", action="store_true", help="captive_loop, stroke through the rig, both kinds")
    parser.add_argument("--lag", action="store_true",
                        help="the Python device's lag behind a jittered 500 Hz stroke, step and interpolate")
    parser.add_argument("--replay", type=Path, nargs="*", default=[], metavar="RUN_DIR",
                        help="replay runs' setpoint frames through the device offline, as sent and regular")
    parser.add_argument("--out", type=Path, default=Path("servo-drive-runs"), help="folder of the live runs")
    args = parser.parse_args()
    results = []
    for run_dir in args.runs:
        figures = analyse(run_dir, args.rig)
        results.append(figures)
        print(json.dumps(figures), flush=True)
    if args.lag:
        for jitter_us in (0, 1000, 2000, 4000):
            print(f"arrivals 0-{jitter_us} us late: the target's lag behind the stroke, step "
                  f"{device_lag('step', jitter_us):.2f} ms, interpolate {device_lag('interpolate', jitter_us):.2f} ms")
    for run_dir in args.replay:
        replay_drive(run_dir)
    if args.captive:
        captive()
    if args.live:
        args.out.mkdir(parents=True, exist_ok=True)
        results += live(args.live, args.out)
    summary(results)


if __name__ == "__main__":
    main()
