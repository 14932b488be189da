"""``mms validate --sim``: the model re-simulated offline, driven by the measured servo angles (hil/validation/resim.py).

Known answer: the rig is the double pendulum of configs/robots/pendulum.toml (its elbow damped more, so that the
start-up transient dies within the re-simulation's warm-up) whose shoulder servo lags the commanded motion by
LAG_S. The "measured" channels are that model driven by the lagged motion (the elbow's
strain, the support's wrench, the shoulder angle with sensor noise); the recorded sim/state is the model driven
by the commanded motion. Against the recorded stream the elbow shows the servo's lag; against the
re-simulation it matches, since the same model now moves as the servo did."""
from __future__ import annotations

import json
import math
from pathlib import Path

import msgpack
import numpy as np
import pytest

from hil.validation import validate
from hil.cli import main as mms_main
from sim.config import ConfigError, load_toml
from sim.laws import Sinusoid
from sim.robots import build_robot
from sim.simulation import Simulation

PENDULUM = Path(__file__).resolve().parents[2] / "configs" / "robots" / "pendulum.toml"
#: the elbow's damping, N m s/rad: 0.3 takes its free swing (period 0.89 s) down 50 % per half period (the file's
#: 0.05: 12 %, still 9 % after the 8 s run)
ELBOW_MU = 0.3
#: the model's step, s: the slowest thing here is the elbow's 0.89 s swing
DT_S = 1e-3
LAG_S = 0.08                 # the servo's lag behind the command, s (13.8 deg at the shoulder's 3 rad/s)
SERVO_NOISE_RAD = 2e-4       # the servo angle sensor's noise, rad
DURATION_S = 8.0
SAMPLE_HZ, FRAME = 1000.0, 10
ORIGIN_NS = 1_700_000_000_000_000_000


def write_robot(folder: Path) -> Path:
    """The pendulum config with the damped elbow, its URDF named by absolute path."""
    import tomli_w

    config = load_toml(PENDULUM)
    config["robot"]["urdf"] = str(PENDULUM.parent / config["robot"]["urdf"])
    config["joints"]["elbow"]["law"]["mu"] = ELBOW_MU
    config["simulation"] = {"dt": DT_S, "integrator": "rk4"}
    path = folder / "pendulum_damped.toml"
    path.write_text(tomli_w.dumps(config))
    return path


def _run(robot: Path, lag_s: float) -> tuple[np.ndarray, list[dict], list[str], list[str]]:
    """The pendulum with its shoulder law delayed by ``lag_s``: sample times (s) and outputs every 1 ms."""
    model = build_robot(load_toml(robot), robot)
    shoulder = model.joint_names.index("shoulder")
    law = model.motion_laws[shoulder]
    model = model.replace(motion_laws={shoulder: Sinusoid(law.amplitude, law.omega, law.phase - law.omega * lag_s,
                                                          law.offset)})
    sim = Simulation(model, "rk4", DT_S)
    sim.reset()
    times, rows = [], []
    for _ in range(int(DURATION_S * SAMPLE_HZ)):
        sim.advance(1.0 / SAMPLE_HZ)
        times.append(sim.t)
        rows.append(sim.outputs())
    passive = [n for n, a in zip(model.joint_names, model.actuated) if not a]
    return np.array(times), rows, list(model.joint_names), passive


def _state(seq: int, t: float, row: dict, joints: list[str], actuated: list[bool]) -> dict:
    """A schema-valid sim/state payload of ``row`` (Simulation.outputs())."""
    return {"v": 1, "seq": seq, "t": t, "stamp_ns": ORIGIN_NS + int(round(t * 1e9)), "joint_names": joints,
            "actuated": actuated, **{k: [float(x) for x in row[k]] for k in ("q", "qd", "qdd", "tau", "strain",
                                                                         "base_pos", "base_quat", "base_twist",
                                                                         "base_wrench", "ext_wrench")}}


def write_recording(path: Path, robot: Path) -> None:
    from hil.recording.mcap_io import RecordingWriter

    rng = np.random.default_rng(5)
    t, commanded, joints, passive = _run(robot, 0.0)
    _, measured, _, _ = _run(robot, LAG_S)
    writer = RecordingWriter(path, overwrite=True)
    writer.add_metadata("robot_config", {"path": str(robot), "text": robot.read_text()})
    for k, (tk, row) in enumerate(zip(t, commanded)):
        stamp = ORIGIN_NS + int(round(tk * 1e9))
        payload = _state(k, float(tk), row, joints, [n not in passive for n in joints])
        writer.add("sim/state", msgpack.packb(payload), stamp + 1_000_000, stamp, k)
        if k % FRAME == FRAME - 1:
            frame = range(k - FRAME + 1, k + 1)
            servo = [[float(measured[i]["q"][joints.index("shoulder")] + SERVO_NOISE_RAD * rng.standard_normal())]
                     for i in frame]
            telemetry = {"v": 1, "seq": k // FRAME, "stamp_ns": stamp + 200_000, "host_ns": stamp,
                         "device_us": [int(round(t[i] * 1e6)) for i in frame],
                         "servo_names": ["shoulder"], "servo_rad": servo,
                         "strain_names": passive, "strain": [[float(x) for x in measured[i]["strain"]] for i in frame],
                         "load_names": ["fx", "fz", "my"],
                         "load": [[float(measured[i]["base_wrench"][j]) for j in (0, 2, 4)] for i in frame]}
            writer.add("hw/telemetry", msgpack.packb(telemetry), stamp + 1_000_000, stamp + 200_000, k // FRAME)
    writer.close()


@pytest.fixture(scope="module")
def robot(tmp_path_factory) -> Path:
    return write_robot(tmp_path_factory.mktemp("robot"))


@pytest.fixture(scope="module")
def run(tmp_path_factory, robot) -> Path:
    path = tmp_path_factory.mktemp("run") / "run.mcap"
    write_recording(path, robot)
    return path


def _channels(document: dict) -> dict:
    return {c["name"].split(" vs ")[0]: c for c in document["channels"]}


def test_against_the_recorded_stream_the_elbow_shows_the_servo_lag_and_against_the_resimulation_it_matches(
        tmp_path, run, robot):
    settings = validate.load_settings(None)
    _results, recorded = validate.validate_run(run, tmp_path / "recorded", settings, None, "none", progress=False)
    _results, replayed = validate.validate_run(run, tmp_path / "replayed", settings, None, "none", progress=False,
                                               resim=validate.Resim(str(robot)))
    lag_deg = math.degrees(3.0 * LAG_S)                       # the shoulder's omega is 3 rad/s
    before, after = _channels(recorded), _channels(replayed)
    # the servo channel: lagging the command; the re-simulation moves as the servo did
    assert before["shoulder"]["metrics"]["phase_lag_deg"] == pytest.approx(lag_deg, abs=1.0)
    assert abs(after["shoulder"]["metrics"]["phase_lag_deg"]) < 0.5
    # the elbow (the structure's response): lagged against the recorded stream, matched by the re-simulation
    assert before["elbow"]["metrics"]["phase_lag_deg"] == pytest.approx(lag_deg, abs=2.0)
    elbow = after["elbow"]["metrics"]
    assert abs(elbow["phase_lag_deg"]) < 1.0 and elbow["amplitude_ratio"] == pytest.approx(1.0, abs=0.02)
    assert elbow["r2"] > 0.995 and before["elbow"]["metrics"]["r2"] < 0.97 and after["elbow"]["passed"]
    assert after["fx"]["metrics"]["r2"] > 0.99 and before["fx"]["metrics"]["r2"] < after["fx"]["metrics"]["r2"]
    assert "re-simulation" in replayed["reference"] and "recorded" in recorded["reference"]
    report = (tmp_path / "replayed" / "report.md").read_text()
    assert "offline re-simulation of" in report and "measured servo angles" in report


def test_the_recorded_robot_config_and_the_command_line(tmp_path, run, robot, capsys):
    out = tmp_path / "cli"
    code = mms_main(["validate", str(run), "--sim", "recorded", "--out", str(out), "--no-plots",
                     "--quiet"])
    assert code == 0, capsys.readouterr().err
    document = json.loads((out / "metrics.json").read_text())
    assert _channels(document)["elbow"]["metrics"]["r2"] > 0.99 and str(robot) in document["reference"]
    capsys.readouterr()
    assert mms_main(["validate", str(run), "--sim-cutoff", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--sim-cutoff" in err[0]
    # a cutoff below the motion's own frequency removes the motion: the elbow no longer matches
    code = mms_main(["validate", str(run), "--sim", str(robot), "--sim-cutoff", "0.1", "--out", str(tmp_path / "low"),
                     "--no-plots", "--quiet"])
    document = json.loads((tmp_path / "low" / "metrics.json").read_text())
    assert code == 1 and _channels(document)["elbow"]["metrics"]["amplitude_ratio"] > 1.5


def test_a_recording_without_a_robot_config_or_servo_angles(tmp_path, kit):
    from hil.recording.mcap_io import RecordingWriter
    from hil.validation.resim import load_config

    with pytest.raises(ConfigError, match="--sim: recorded: the recording holds no robot config"):
        load_config("recorded", {})
    path = tmp_path / "states_only.mcap"
    writer = RecordingWriter(path, overwrite=True)
    for k in range(2000):
        stamp = ORIGIN_NS + k * 1_000_000
        payload = {**kit.sim_state(k, k * 1e-3, [0.1 * math.sin(k * 1e-2), 0.0]), "stamp_ns": stamp}
        writer.add("sim/state", msgpack.packb(payload), stamp, stamp, k)
        if k % FRAME == FRAME - 1:
            telemetry = {"v": 1, "seq": k // FRAME, "stamp_ns": stamp, "host_ns": stamp,
                         "device_us": [i * 1000 for i in range(k - FRAME + 1, k + 1)], "servo_names": [],
                         "servo_rad": [[] for _ in range(FRAME)], "strain_names": ["tail_pitch"],
                         "strain": [[0.0] for _ in range(FRAME)], "load_names": [], "load": [[] for _ in range(FRAME)]}
            writer.add("hw/telemetry", msgpack.packb(telemetry), stamp, stamp, k // FRAME)
    writer.close()
    with pytest.raises(validate.RecordingError, match="--sim: "):
        validate.validate_run(path, tmp_path / "out", validate.load_settings(None), None, "none", progress=False,
                              resim=validate.Resim(str(PENDULUM)))


def test_a_joint_moved_through_a_mechanism_is_driven_through_its_source():
    """RayBot's tail joint is ``ratio * servo(t)`` and its caudal fin's spring reads the same servo law: the replay
    drives that source, so the tail moves as measured and the spring follows the same spline."""
    from hil.validation.resim import _drive_with_splines

    raybot_path = PENDULUM.parent / "raybot.toml"
    model = build_robot(load_toml(raybot_path), raybot_path)
    tail = model.joint_names.index("tail_yaw")
    times = np.linspace(0.0, 2.0, 201)
    angles = 0.2 * np.sin(2 * math.pi * 1.5 * times)                   # joint angles, rad
    driven = _drive_with_splines(model, {"tail_yaw": (times, angles)})
    law = driven.motion_laws[tail]
    springs = [j for j in driven.joint_laws.values() if getattr(j, "source", None) is law.source]
    assert type(law).__name__ == "ScaledMotion" and type(law.source).__name__ == "CompiledSpline" and springs
    for t in (0.3, 0.77, 1.5):
        assert law.evaluate(t)[0] == pytest.approx(float(np.interp(t, times, angles)), abs=1e-4)
    # the model given is untouched: its tail and spring still read the beat law
    assert type(model.motion_laws[tail].source).__name__ == "ServoBeat"
    assert all(type(getattr(j, "source", None)).__name__ != "Spline" for j in model.joint_laws.values())
