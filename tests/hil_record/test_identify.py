"""``mms identify``: parameters fitted to a recording, with standard errors (hil/validation/identify.py).

Known answer: the double pendulum of configs/robots/pendulum.toml (its elbow a damped spring) is the rig. Its
truth has the elbow TRUE_K stiff and TRUE_MU damped, and its servo-angle sensor reports the shoulder TRUE_LAG_S
late; the model starts from the file's k and a guessed mu. The recording is a real MCAP file: the truth's elbow
strain with white noise, the (late) servo angle, sim/state and hw/status, whose link goes down for a stretch in
which the strain is garbage: the fit must leave that stretch out (its healthy windows only)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import msgpack
import numpy as np
import pytest

from hil.cli import main as mms_main
from hil.validation import identify
from sim.config import ConfigError, load_toml
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.studies import Evaluator

PENDULUM = Path(__file__).resolve().parents[2] / "configs" / "robots" / "pendulum.toml"
TRUE_K, TRUE_MU, TRUE_LAG_S = 2.4, 0.3, 0.005    # N m/rad, N m s/rad, s
START_MU = 0.2                                   # the model's guess, N m s/rad (its k: the file's 2.0)
DT_S = 1e-3                                      # the truth's step, s
MODEL_DT_S = 2e-3                                # the fitted model's: RK4 error ~1e-7 on the 1 Hz swing
DURATION_S = 11.0
SAMPLE_HZ, FRAME = 1000.0, 10
NOISE = 5e-4                                     # the strain sensor's white noise, rad (0.3 % of the swing)
LINK_DOWN_S = (7.5, 7.7)                         # hw/status link "down", the strain garbage meanwhile
ORIGIN_NS = 1_700_000_000_000_000_000
#: the fit's low-pass, Hz: the shoulder's 0.48 Hz motion and the elbow's 1.1 Hz swing, well inside
CUTOFF_HZ = "10"
#: the re-simulation's warm-up, s: the model's start from rest (driven by the late servo samples) differs from the
#: truth's; with the elbow's damping that transient is down to 0.2 % after 4 s (2 %, and a bias, after 2 s)
WARMUP_S = "4"
#: noise seeds of the coverage check (each a fit of a few simulated 11 s runs)
SEEDS = 3
PARAMS = "joints.elbow.law.k,joints.elbow.law.mu,servo.lag_s"


def pendulum_config(k: float, mu: float, dt: float) -> dict:
    config = load_toml(PENDULUM)
    config["robot"]["urdf"] = str(PENDULUM.parent / config["robot"]["urdf"])
    config["joints"]["elbow"]["law"].update(k=k, mu=mu)
    config["simulation"] = {"dt": dt, "integrator": "rk4"}
    return config


def truth_run() -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict], list[str]]:
    """The truth every 1 ms: times (s), shoulder angle, elbow strain, outputs, joint names."""
    config = pendulum_config(TRUE_K, TRUE_MU, DT_S)
    model = build_robot(config, PENDULUM)
    sim = Simulation(model, "rk4", DT_S)
    sim.reset()
    n = int(DURATION_S * SAMPLE_HZ)
    t, out = sim.record(n, int(round(1.0 / (SAMPLE_HZ * DT_S))))
    shoulder = model.joint_names.index("shoulder")
    rows = [{k: out[k][i] for k in out} for i in range(n)]
    return t, out["q"][:, shoulder], out["strain"][:, 0], rows, list(model.joint_names)


def write_recording(path: Path, robot_text: str, truth, seed: int) -> None:
    from hil.recording.mcap_io import RecordingWriter

    t, shoulder, strain, rows, joints = truth
    rng = np.random.default_rng(seed)
    measured_strain = strain + NOISE * rng.standard_normal(t.size)
    down = (t >= LINK_DOWN_S[0]) & (t <= LINK_DOWN_S[1])
    measured_strain[down] = 1.0                                         # garbage while the link is down
    reported = np.interp(t - TRUE_LAG_S, t, shoulder)                   # the sensor reports late
    writer = RecordingWriter(path, overwrite=True)
    writer.add_metadata("robot_config", {"path": str(PENDULUM), "text": robot_text})
    for k, tk in enumerate(t):
        stamp = ORIGIN_NS + int(round(tk * 1e9))
        state = {"v": 1, "seq": k, "t": float(tk), "stamp_ns": stamp, "joint_names": joints,
                 "actuated": [True, False], **{key: [float(x) for x in rows[k][key]] for key in (
                     "q", "qd", "qdd", "tau", "strain", "base_pos", "base_quat", "base_twist", "base_wrench",
                     "ext_wrench")}}
        writer.add("sim/state", msgpack.packb(state), stamp, stamp, k)
        if k % FRAME == FRAME - 1:
            frame = range(k - FRAME + 1, k + 1)
            telemetry = {"v": 1, "seq": k // FRAME, "stamp_ns": stamp, "host_ns": stamp,
                         "device_us": [int(round(t[i] * 1e6)) for i in frame], "servo_names": ["shoulder"],
                         "servo_rad": [[float(reported[i])] for i in frame], "strain_names": ["elbow"],
                         "strain": [[float(measured_strain[i])] for i in frame], "load_names": [],
                         "load": [[] for _ in frame]}
            writer.add("hw/telemetry", msgpack.packb(telemetry), stamp, stamp, k // FRAME)
        if k % 100 == 0:
            link = "down" if down[k] else "up"
            status = {"v": 1, "seq": k // 100, "stamp_ns": stamp, "lifecycle": "active", "rig": "pendulum-rig",
                      "estop": False, "watchdog": "track",
                      "link": {"state": link, "frames_ok": k, "crc_errors": 0, "seq_gaps": 0, "reconnects": 0}}
            writer.add("hw/status", msgpack.packb(status), stamp, stamp, k // 100)
    writer.close()


@pytest.fixture(scope="module")
def truth():
    return truth_run()


@pytest.fixture(scope="module")
def robot(tmp_path_factory) -> Path:
    import tomli_w

    path = tmp_path_factory.mktemp("robot") / "pendulum_model.toml"
    path.write_text(tomli_w.dumps(pendulum_config(2.0, START_MU, MODEL_DT_S)))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, truth, robot) -> Path:
    path = tmp_path_factory.mktemp("run") / "run.mcap"
    write_recording(path, robot.read_text(), truth, 11)
    return path


def _fit(run: Path, robot: Path):
    problem, parameters, measured, health, config, path = identify.prepare(
        run, PARAMS, str(robot), None, None, float(WARMUP_S), None, 1, float(CUTOFF_HZ))
    result, _final = identify.fit(problem, parameters, measured, Evaluator())
    return result, health, problem, identify.corrected_config(config, path, result, run)


def test_the_fit_recovers_known_parameters_within_their_standard_errors_over_noise_seeds(tmp_path, truth, robot):
    """Seed 0 from the model's start (k 17 % low, mu 33 % low, no lag); the other seeds from seed 0's corrected
    config (the coverage is a property of the optimum, not of the way there: a near start keeps the test cheap)."""
    truths = np.array([TRUE_K, TRUE_MU, TRUE_LAG_S])
    estimates, errors = [], []
    start = robot
    for seed in range(SEEDS):
        run = tmp_path / f"run{seed}.mcap"
        write_recording(run, robot.read_text(), truth, seed)
        result, health, problem, corrected = _fit(run, start)
        estimates.append(result.estimates)
        errors.append(result.standard_errors)
        # the link-down stretch (and the settling after it) is out of the fit
        assert health.valid and len(health.windows) == 2
        assert not np.any((problem.sample_t > LINK_DOWN_S[0] - 0.1) & (problem.sample_t < LINK_DOWN_S[1] + 1.0))
        if seed == 0:
            start = tmp_path / "corrected.toml"
            start.write_text(corrected)
    estimates, errors = np.array(estimates), np.array(errors)
    # close to the truth (measured: k within 0.3 %, mu 3 %, lag 2 ms), with standard errors small enough to mean
    # something (measured: k 0.3 %, mu 3 %, lag 2.4 ms)
    assert np.all(np.abs(estimates - truths) < [0.01 * TRUE_K, 0.06 * TRUE_MU, 0.004]), estimates
    assert np.all(errors < [0.01 * TRUE_K, 0.06 * TRUE_MU, 0.004]) and np.all(errors > 0), errors
    # coverage: the truth within two standard errors in at least 8 of the 9 (seed, parameter) cases (95 % each)
    assert np.sum(np.abs(estimates - truths) <= 2.0 * errors) >= 8, (estimates, errors)
    # the estimates scatter across seeds as their standard errors say (neither far tighter nor far wider)
    ratio = estimates.std(axis=0, ddof=1) / errors.mean(axis=0)
    assert np.all((ratio > 0.2) & (ratio < 3.0)), ratio


def test_the_command_writes_the_corrected_config_and_the_residuals(tmp_path, recorded, robot, capsys):
    out = tmp_path / "fit"
    code = mms_main(["identify", str(recorded), "--params", "joints.elbow.law.k", "--robot", str(robot), "--cutoff",
                     CUTOFF_HZ, "--warmup", WARMUP_S, "--scheduler", "serial", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert printed.startswith("VALID") and "joints.elbow.law.k" in printed
    document = json.loads((out / "identify.json").read_text())
    (k,) = document["parameters"]
    corrected = load_toml(out / "pendulum_model_identified.toml")
    assert corrected["joints"]["elbow"]["law"]["k"] == pytest.approx(k["estimate"], rel=1e-9)
    # k alone, with the model's damping and lag wrong: a biased estimate whose residuals say so
    assert abs(k["estimate"] - TRUE_K) > 0.0 and document["residual_rms"]["elbow"] < document["start_rms"]["elbow"]
    residuals = np.load(out / "residuals.npz")
    assert residuals["measured"].shape == residuals["fitted"].shape == (1, residuals["time_s"].size)


@pytest.mark.parametrize("params, expected", [
    ("joints.elbow.law.stiffness", "joints.elbow.law.stiffness: the robot config has no such parameter; did you "
                                   "mean joints.elbow.law.k?"),
    ("joints.elbow.law.k=3:5", "--params: joints.elbow.law.k: bounds [3, 5] exclude the start value 2"),
    ("servo.lag_s=0.01:0.02", "--params: servo.lag_s: bounds [0.01, 0.02] exclude the start value 0"),
    ("robot.kind", ""),
])
def test_bad_parameters_are_one_line_each(params, expected, robot, recorded, capsys):
    if params == "robot.kind":
        with pytest.raises(ConfigError, match="robot.kind: is 'urdf', not a number"):
            identify.parse_parameters(params, load_toml(robot), robot)
        return
    code = mms_main(["identify", str(recorded), "--params", params, "--robot", str(robot), "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0], err


def test_the_residuals_correlation_time():
    rng = np.random.default_rng(3)
    white = rng.standard_normal((2, 20000))
    assert identify.correlation_time(white) == pytest.approx(1.0, abs=0.2)
    smooth = np.array([np.convolve(w, np.ones(20) / 20, mode="same") for w in white])
    assert 15 < identify.correlation_time(smooth) < 30          # a 20-sample moving average: tau = 20
    assert math.isclose(identify.correlation_time(np.zeros((1, 100))), 1.0)
