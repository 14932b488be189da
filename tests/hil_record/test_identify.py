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
    assert k["channel_error"] == 0.0 and document["block_ratio"] > 0.0   # one channel: no disagreement to count
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


def _linear_problem(gains, noise, seed, disturbed=None):
    """A linear fit ``y_c(t) = theta x(t)`` of one parameter (truth 1) on channels read with calibration ``gains``
    and white ``noise``; ``disturbed``: (t0, t1, extra) a stretch whose readings are ``extra`` times too large (a
    loaded run's late plant steps). Returns (J (C m, 1), r (C, m) at the joint least-squares optimum, t, estimate)."""
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, 20.0, 1e-2)
    x = np.sin(2 * np.pi * 5.0 * t + 0.3) + 0.5 * np.sin(2 * np.pi * 10.0 * t)
    y = np.array([g * x + noise * rng.standard_normal(t.size) for g in gains])
    if disturbed is not None:
        t0, t1, extra = disturbed
        y[:, (t >= t0) & (t < t1)] *= extra
    X = np.tile(x, len(gains))
    theta = float(X @ y.ravel() / (X @ X))
    return X[:, None], theta * x - y, t, theta


def _statistical_se(J, r):
    variance = float(np.sum(r ** 2)) / (r.size - 1)
    return math.sqrt(variance / float((J.T @ J)[0, 0]))


def test_the_channels_disagreement_widens_the_standard_error():
    """Two gauges, one reading 2 % high (the demo rig's left root gauge): the joint estimate is 1 % off, far outside
    the noise's standard error; the delete-one-channel jackknife is half the channels' 2 % disagreement, and the
    truth falls inside two of the combined standard errors. Agreeing channels add about the noise's share."""
    J, r, t, theta = _linear_problem([1.0, 1.02], 0.01, 1)
    statistical = _statistical_se(J, r)
    between = math.sqrt(identify.channel_jackknife(J, r)[0, 0])
    assert abs(theta - 1.0) > 10 * statistical
    assert between == pytest.approx(0.01, rel=0.05)
    assert abs(theta - 1.0) < 2 * math.hypot(statistical, between)
    J, r, t, _ = _linear_problem([1.0, 1.0], 0.01, 2)
    assert math.sqrt(identify.channel_jackknife(J, r)[0, 0]) < 3 * _statistical_se(J, r)
    assert identify.channel_jackknife(J[:r.shape[1]], r[:1]).shape == (1, 1)
    assert identify.channel_jackknife(J[:r.shape[1]], r[:1])[0, 0] == 0.0


def test_the_block_jackknife_sees_a_disturbed_stretch():
    """White noise: the blocks' scatter is the noise's standard error (ratio ~1); a 3 s stretch 6 % off (a loaded
    host's late plant steps in the demo moved the 1 s blocks' estimates by up to 6.5 %): it is several times that."""
    J, r, t, _ = _linear_problem([1.0], 0.05, 3)
    ratio = math.sqrt(identify.block_jackknife(J, r, t)[0, 0]) / _statistical_se(J, r)
    assert 0.5 < ratio < 1.6, ratio
    J, r, t, theta = _linear_problem([1.0], 0.05, 3, disturbed=(4.0, 7.0, 1.06))
    ratio = math.sqrt(identify.block_jackknife(J, r, t)[0, 0]) / _statistical_se(J, r)
    assert ratio > 2 * identify.UNSTEADY_RATIO, ratio


def test_the_device_clock_puts_the_samples_back_on_their_grid():
    """Eight samples a frame stamped by the host with one receive time that scatters by +-0.8 ms (more under load)
    and reorders samples: the device's microsecond clock, unwrapped and mapped by a line, gives the samples' true
    times within a microsecond of the recording axis's offset."""
    from hil.recording.series import Table
    from hil.validation.resim import device_clock_times

    rng = np.random.default_rng(4)
    true_s = 5.0 + np.arange(4000) * 1e-3
    device_us = (np.round((true_s - 5.0) * 1e6) + 2 ** 32 - 1_500_000) % 2 ** 32    # wraps after 1.5 s
    jitter = np.repeat(rng.uniform(-8e-4, 8e-4, true_s.size // 8), 8)
    table = Table("hw/telemetry")
    table.columns.update({"device_us": device_us.astype(np.int64), "time_s": true_s + jitter})
    assert np.any(np.diff(table.columns["time_s"]) < 0)
    recovered = device_clock_times(table)
    assert np.max(np.abs(recovered - true_s)) < 1e-4 and np.all(np.diff(recovered) > 0)
    assert np.std(np.diff(recovered) - 1e-3) < 1e-9
    table.columns["device_us"] = table.columns["device_us"][::-1].copy()   # not one clock's sequence: not used
    assert device_clock_times(table) is None
