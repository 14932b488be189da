"""Recordings that Foxglove draws (hil/foxglove, docs/foxglove.md): `mms record --robot` writes the robot's poses and
shapes as Foxglove's well-known JSON messages beside the project's topics, and `mms export --to foxglove` adds them
to a recording made without. Files read back by the mcap package's reader; every Foxglove message validated against
Foxglove's published JSON schema, and the bodies' world poses it implies compared with the simulator's own forward
kinematics (sim.dynamics) at the recorded joint positions."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import jsonschema
import msgpack
import numpy as np
from mcap.reader import make_reader

from hil.cli import main as mms_main
from hil.foxglove.scene import PoseStream, PoseTranslator, pose_period_ns
from hil.recording.mcap_io import RecordingWriter, read_recording
from hil.recording.recorder import Recorder
from hil.recording.series import build_tables
from sim.config import resolve_config
from sim.dynamics import hybrid_dynamics
from sim.model import Data
from sim.network import load_endpoints
from sim.robots import load_robot
from sim.spatial import quat_to_matrix

ROBOT = "pendulum"          # two joints, as the test publisher's states
#: the published schemas, as Foxglove's repository generates them (the files the recorder registers are these)
PUBLISHED = Path(__file__).resolve().parents[2] / "hil" / "foxglove" / "schemas"
#: world poses from the transforms equal the simulator's forward kinematics to round-off (m, and rotation entries)
POSE_TOLERANCE = 1e-12


def _published(name: str) -> dict:
    return json.loads((PUBLISHED / f"{name}.json").read_text())


def _world_poses(transforms: list[dict]) -> dict[str, np.ndarray]:
    world = {"world": np.eye(4)}
    for transform in transforms:         # parents come first, as Foxglove's tree needs no particular order
        r, p = transform["rotation"], transform["translation"]
        g = np.eye(4)
        g[:3, :3] = quat_to_matrix(np.array([r["w"], r["x"], r["y"], r["z"]]))
        g[:3, 3] = [p["x"], p["y"], p["z"]]
        world[transform["child_frame_id"]] = world[transform["parent_frame_id"]] @ g
    return world


def _check(path: Path, model) -> dict[str, int]:
    """Read ``path`` back: every Foxglove message valid against the published schema, each pose message equal to the
    forward kinematics of the sim/state it comes from (same stamp); returns messages per topic."""
    validators = {name: jsonschema.Draft7Validator(_published(name.split(".")[1]))
                  for name in ("foxglove.FrameTransforms", "foxglove.SceneUpdate")}
    states, counts = {}, {}
    poses = []
    with open(path, "rb") as handle:
        reader = make_reader(handle)
        for schema, channel, message in reader.iter_messages(log_time_order=True):
            counts[channel.topic] = counts.get(channel.topic, 0) + 1
            if channel.message_encoding == "msgpack":
                payload = msgpack.unpackb(message.data, raw=False)
                if channel.topic == "sim/state":
                    states[payload["stamp_ns"]] = payload
                continue
            assert channel.message_encoding == "json" and schema.encoding == "jsonschema"
            assert json.loads(schema.data) == _published(schema.name.split(".")[1])
            decoded = json.loads(message.data)
            validators[schema.name].validate(decoded)
            if schema.name == "foxglove.FrameTransforms":
                poses.append((message.publish_time, decoded))
            else:
                assert {e["id"] for e in decoded["entities"]} == set(model.body_names)
                assert all(e["cubes"] or e["spheres"] for e in decoded["entities"])
    data = Data(model)
    for stamp, decoded in poses:
        state = states[stamp]
        g0 = np.eye(4)
        g0[:3, :3], g0[:3, 3] = quat_to_matrix(np.array(state["base_quat"])), state["base_pos"]
        zeros = np.zeros(model.n)
        hybrid_dynamics(model, g0, np.zeros(6), state["q"], zeros, model.actuated, zeros, zeros, data=data)
        world = _world_poses(decoded["transforms"])
        for body, name in enumerate(model.body_names):
            assert np.abs(world[name] - data.g[body]).max() < POSE_TOLERANCE, name
    return counts


def test_record_writes_poses_and_scene_foxglove_can_draw(tmp_path, network, kit):
    """The recorder runs in a thread of the test (its sockets and file are the real ones; a subprocess would add
    seconds of imports to the suite)."""
    out = tmp_path / "run.mcap"
    recorder = Recorder(load_endpoints(network["path"]), robot=resolve_config("robot", ROBOT), progress=False,
                        run_dir=tmp_path, poses_rate_hz=0.0)
    recorder.start(out)
    thread = threading.Thread(target=recorder.run, daemon=True)
    with kit.Publisher(network, rate_hz=500):
        thread.start()
        try:
            kit.wait_for(lambda: recorder.session is None or recorder.session.poses.posed >= 200, "200 states posed")
        finally:
            recorder.stop_requested = True
            thread.join(timeout=kit.DEADLINE_S)
    assert not thread.is_alive()
    counts = _check(out, load_robot(resolve_config("robot", ROBOT)))
    assert counts["foxglove/poses"] == counts["sim/state"]          # --poses-rate 0: one per state
    assert 1 <= counts["foxglove/scene"] <= counts["sim/state"] // 100 + 1      # again once per second
    with open(out, "rb") as handle:
        stats = {m.name: m.metadata for m in make_reader(handle).iter_metadata()}["recorder_stats"]
    assert json.loads(stats["foxglove"])["refused"] == {}
    # the tools that read the project's topics (exports, validation) see them alone, none malformed
    tables = build_tables(read_recording(out))
    assert set(tables.tables) == {"sim/state", "sim/status", "hw/command", "hw/status", "hw/telemetry"}
    assert not any(tables.malformed.values())


def _old_recording(path: Path, kit, version: int = 1, states: int = 300) -> list[dict]:
    """A recording without Foxglove channels (as every recording before them): sim/state at 1 kHz and sim/status."""
    rng = np.random.default_rng(5)
    robot = resolve_config("robot", ROBOT)
    writer = RecordingWriter(path)
    writer.add_metadata("robot_config", {"path": str(robot), "text": robot.read_text()})
    payloads = []
    base = 1_700_000_000_000_000_000
    for k in range(states):
        payload = kit.sim_state(k, k * 1e-3, rng.uniform(-2.0, 2.0, 2).tolist())
        payload["v"], payload["stamp_ns"] = version, base + k * 1_000_000
        payloads.append(payload)
        writer.add("sim/state", msgpack.packb(payload), payload["stamp_ns"] + 1000, payload["stamp_ns"], k)
        if k % 100 == 0:
            status = kit.sim_status(k // 100, k * 1e-3)
            writer.add("sim/status", msgpack.packb(status), payload["stamp_ns"] + 500, status["stamp_ns"], k // 100)
    writer.close()
    return payloads


def test_export_to_foxglove_adds_poses_to_an_old_recording(tmp_path, kit):
    run = tmp_path / "old.mcap"
    payloads = _old_recording(run, kit)
    assert mms_main(["export", str(run), "--to", "foxglove", "--out", str(tmp_path / "fox"), "--poses-rate", "200",
                     "--quiet"]) == 0
    path = tmp_path / "fox" / "old.foxglove.mcap"
    counts = _check(path, load_robot(resolve_config("robot", ROBOT)))
    # the recording's own messages copied as they were, bytes and sequence; states 1 ms apart posed every 5 ms
    with open(path, "rb") as handle:
        copied = [(m.sequence, msgpack.unpackb(m.data, raw=False)) for _s, c, m in
                  make_reader(handle).iter_messages(topics=["sim/state"])]
    assert copied == [(p["seq"], p) for p in payloads]
    assert counts["sim/status"] == 3 and counts["foxglove/poses"] == len(payloads) // 5


def test_export_refuses_an_unknown_schema_version_in_one_line(tmp_path, kit, capsys):
    run = tmp_path / "future.mcap"
    _old_recording(run, kit, version=2, states=20)
    assert mms_main(["export", str(run), "--to", "foxglove", "--out", str(tmp_path / "fox"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [f"mms export: error: {run}: no poses: sim/state schema version 2 is not supported "
                     "(this mms reads version 1)"]
    assert not (tmp_path / "fox" / "future.foxglove.mcap").exists()


def test_poses_keep_their_rate_through_jittery_stamps_and_restart_after_a_pause(kit):
    """States at 1 kHz whose stamps jitter by 20 us: at --poses-rate 100 exactly one pose per 10 ms (the schedule
    does not slip to 11 states when a stamp comes early); after a 1 s pause the schedule starts afresh."""
    stream = PoseStream(PoseTranslator(load_robot(resolve_config("robot", ROBOT))), pose_period_ns(100.0))
    rng = np.random.default_rng(3)
    base = 1_700_000_000_000_000_000
    stamps = base + np.arange(2000) * 1_000_000 + rng.integers(-20_000, 20_000, 2000)
    stamps = np.concatenate([stamps, stamps[-1] + 1_000_000_000 + np.arange(500) * 1_000_000])
    for k, stamp in enumerate(stamps.tolist()):
        payload = kit.sim_state(k, k * 1e-3, [0.1, 0.2])
        payload["stamp_ns"] = stamp
        stream.messages(payload)
    assert stream.posed == 200 + 50
    assert stream.refused == {}


def test_export_refuses_a_robot_with_modal_bodies_in_one_line(tmp_path, kit, capsys):
    run = tmp_path / "old.mcap"
    _old_recording(run, kit, states=20)
    assert mms_main(["export", str(run), "--to", "foxglove", "--robot", "flapper-flexible", "--out",
                     str(tmp_path / "fox"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "modal (flexible) bodies are not posed" in lines[0], lines
