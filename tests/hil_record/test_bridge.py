"""`mms bridge` on real ZeroMQ traffic (the test publisher), with real peers: a WebSocket client (the websockets
package) speaking Foxglove's WebSocket protocol subscribes and decodes the messages, and a ZeroMQ SUB socket reads
what PlotJuggler's ZMQ subscriber reads. The bridge runs in a thread of the test (its sockets and server are the
real ones; a subprocess would add its start-up, seconds of imports, to the suite)."""
from __future__ import annotations

import json
import math
import socket
import struct
import threading
import time
from pathlib import Path

import jsonschema
import pytest
import zmq
from websockets.sync.client import connect

from hil.bridge import plotjuggler
from hil.bridge.bridge import open_bridge
from hil.bridge.bridge_args import add_arguments
from sim.cli_options import make_parser
from sim.config import ConfigError
from sim import messages
from sim.messages import SCHEMAS

#: Foxglove's WebSocket subprotocol (foxglove-sdk: rust/foxglove/src/websocket/handshake.rs)
SUBPROTOCOL = "foxglove.sdk.v1"
#: binary opcode of a server's message data: u8 opcode, u32 subscription id, u64 log time, payload (little endian)
MESSAGE_DATA = 1
_MESSAGE_HEAD = struct.Struct("<BIQ")
PUBLISHED = Path(__file__).resolve().parents[2] / "hil" / "foxglove" / "schemas"
#: messages each client must decode before the test is satisfied
WANTED = 50


def _expected_q(t: float) -> list[float]:
    """The test publisher's joint positions at time t (tests/hil_record/conftest.py: Publisher)."""
    return [0.5 * math.sin(2 * math.pi * 2.0 * t), 0.1 * math.cos(2 * math.pi * 2.0 * t)]


def _foxglove_client(port: int, deadline: float) -> dict[str, list]:
    """Connect, read the advertised channels, subscribe to sim/state and foxglove/poses, decode WANTED of each."""
    with connect(f"ws://127.0.0.1:{port}", subprotocols=[SUBPROTOCOL], open_timeout=10) as ws:
        assert ws.subprotocol == SUBPROTOCOL
        channels: dict[str, dict] = {}
        while not {"sim/state", "foxglove/poses"} <= set(channels):
            message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(message, str) and json.loads(message)["op"] == "advertise":
                channels.update({c["topic"]: c for c in json.loads(message)["channels"]})
        assert json.loads(channels["sim/state"]["schema"]) == SCHEMAS["sim/state"]
        assert channels["foxglove/poses"]["schemaName"] == "foxglove.FrameTransforms"
        assert channels["foxglove/poses"]["encoding"] == "json"
        subscriptions = {1: "sim/state", 2: "foxglove/poses"}
        ws.send(json.dumps({"op": "subscribe", "subscriptions": [
            {"id": sid, "channelId": channels[topic]["id"]} for sid, topic in subscriptions.items()]}))
        received: dict[str, list] = {topic: [] for topic in subscriptions.values()}
        while min(len(v) for v in received.values()) < WANTED:
            assert time.monotonic() < deadline, {t: len(v) for t, v in received.items()}
            message = ws.recv(timeout=max(0.1, deadline - time.monotonic()))
            if isinstance(message, bytes) and message[0] == MESSAGE_DATA:
                _op, sid, log_time = _MESSAGE_HEAD.unpack_from(message)
                received[subscriptions[sid]].append((log_time, json.loads(message[_MESSAGE_HEAD.size:])))
        return received


def test_bridge_serves_foxglove_websocket_and_plotjuggler_zmq(tmp_path, network, kit):
    port, pj_port = kit.free_port(), kit.free_port()
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"sim/state")
    sub.setsockopt(zmq.LINGER, 0)
    sub.connect(f"tcp://127.0.0.1:{pj_port}")
    args = make_parser("mms bridge")
    add_arguments(args)
    bridge = open_bridge(args.parse_args(["--network", network["path"], "--foxglove", str(port), "--plotjuggler",
                                          f"tcp://127.0.0.1:{pj_port}", "--robot", "pendulum", "--poses-rate", "0"]))
    thread = threading.Thread(target=bridge.run, daemon=True)
    with kit.Publisher(network, rate_hz=500, malformed=True):      # two bad messages after the 25th state
        thread.start()
        try:
            deadline = time.monotonic() + kit.DEADLINE_S
            received = _foxglove_client(port, deadline)
            plotjuggler = []
            while len(plotjuggler) < WANTED:
                assert sub.poll(int(max(0.0, deadline - time.monotonic()) * 1000)), "no PlotJuggler message"
                plotjuggler.append(sub.recv_multipart())
        finally:
            bridge.stop_requested = True
            thread.join(timeout=kit.DEADLINE_S)
            sub.close()
    assert not thread.is_alive()
    # the bad messages (a pair every 50 states; those sent before the bridge's subscription was live are lost)
    # counted and dropped, the states after them forwarded to both clients
    assert set(bridge.stats.refused) == {"malformed"} and bridge.stats.refused["malformed"] >= 2, bridge.summary()
    assert bridge.poses.refused == {}
    # Foxglove: sim/state decoded as JSON, valid against its schema, its values the publisher's, log time = stamp
    for log_time, state in received["sim/state"]:
        messages.validate(messages.TOPIC_SIM_STATE, state)
        assert log_time == state["stamp_ns"]
        assert max(abs(a - b) for a, b in zip(state["q"], _expected_q(state["t"]))) < 1e-12
    poses_schema = json.loads((PUBLISHED / "FrameTransforms.json").read_text())
    # one validator for all the messages: jsonschema.validate checks the schema itself again on every call (~25 ms)
    poses_validator = jsonschema.validators.validator_for(poses_schema)
    poses_validator.check_schema(poses_schema)
    poses_validator = poses_validator(poses_schema)
    for _log_time, poses in received["foxglove/poses"]:
        poses_validator.validate(poses)
        assert [t["child_frame_id"] for t in poses["transforms"]] == ["support", "upper_rod", "lower_rod"]
    # PlotJuggler: [topic, flat JSON of numbers named by joint, epoch seconds as text]
    for topic, payload, stamp in plotjuggler:
        flat = json.loads(payload)
        assert topic == b"sim/state"
        assert all(isinstance(v, (int, float)) for v in flat.values())
        assert abs(float(stamp) - flat["stamp_ns"] / 1e9) < 1e-6
        q = _expected_q(flat["t"])
        assert abs(flat["q/tail_yaw"] - q[0]) < 1e-12 and abs(flat["q/tail_pitch"] - q[1]) < 1e-12
        assert flat["base_quat/w"] == 1.0 and flat["base_wrench/fz"] == 0.0
        assert flat["strain/tail_pitch"] == 0.0 and "actuated/tail_yaw" in flat      # arrays named by joint



def test_plotjuggler_names_passive_strains_and_stamps_each_telemetry_sample(kit):
    """The flattening on its own: a sim/state whose strain has one entry per passive joint (as `mms serve` sends it)
    names them after those joints, from the names remembered from an earlier state; a hw/telemetry frame of five
    samples becomes five messages, each stamped with its sample's time."""
    names: dict[str, list[str]] = {}
    first = kit.sim_state(0, 0.0, [0.1, 0.2])
    plotjuggler.messages("sim/state", first, names)
    later = kit.sim_state(1, 0.001, [0.3, 0.4], strain=[0.05])
    del later["joint_names"], later["actuated"]
    [(_topic, payload, _stamp)] = plotjuggler.messages("sim/state", later, names)
    flat = json.loads(payload)
    assert flat["strain/tail_pitch"] == 0.05 and flat["q/tail_yaw"] == 0.3 and "strain/0" not in flat
    frame = kit.hw_telemetry(3, [0, 2000, 4000, 6000, 8000], [[0.1 * i] for i in range(5)])
    samples = plotjuggler.messages("hw/telemetry", frame, names)
    assert [float(stamp) for _t, _p, stamp in samples] == pytest.approx(
        [(frame["host_ns"] - 1000 * (8000 - us)) / 1e9 for us in frame["device_us"]], abs=1e-6)
    assert [json.loads(p)["servo_rad/tail"] for _t, p, _s in samples] == pytest.approx([0.1 * i for i in range(5)])
    assert [json.loads(p)["device_us"] for _t, p, _s in samples] == frame["device_us"]


def test_a_taken_port_or_nothing_to_serve_is_one_line(network, kit):
    parser = make_parser("mms bridge")
    add_arguments(parser)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ConfigError, match=f"--foxglove: cannot serve on 127.0.0.1:{port}: .*in use"):
            open_bridge(parser.parse_args(["--network", network["path"], "--foxglove", str(port)]))
    with pytest.raises(ConfigError, match="nothing to serve"):
        open_bridge(parser.parse_args(["--network", network["path"]]))
