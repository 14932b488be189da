"""The control socket of a real `mms serve`: pause, resume, reset, step, set and get do what they say, and
malformed requests (random bytes, bad MessagePack, non-maps, maps without cmd, wrong types) each get an error
reply while the server goes on."""
from __future__ import annotations

import random
import time
import tomllib
from pathlib import Path

import msgpack
import numpy as np
import pytest

from sim.messages import SCHEMAS, TOPIC_SIM_STATE, TOPIC_SIM_STATUS, validate
from sim.server_control import COMMANDS

PERIOD_S = 1e-3                 # --rate 1000 (the default)
REALTIME_RATE_HZ = 200.0
REALTIME_PERIOD_S = 1.0 / REALTIME_RATE_HZ
QUIET_S = 0.5                   # how long "nothing more arrives" is watched for
RANDOM_REQUESTS = 1000
SUBSCRIBE_TIMEOUT_S = 20.0
PHYSICS_RTOL = 1e-9             # the model's qdd against the closed form: same arithmetic up to rounding


def _states(messages):
    return [payload for topic, payload in messages if topic == TOPIC_SIM_STATE]


def _live(server, sub, lockstep: bool) -> None:
    """Return once ``sub`` receives (its subscription is established); in lockstep, step until it does."""
    deadline = time.monotonic() + SUBSCRIBE_TIMEOUT_S
    while time.monotonic() < deadline:
        if lockstep:
            server.ok("step")
        if sub.poll(200):
            server.collect(sub, 0.05)
            return
    raise AssertionError(f"subscriber received nothing within {SUBSCRIBE_TIMEOUT_S} s")


def _state_with_seq(server, sub, seq):
    received = server.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATE and p["seq"] >= seq,
                              what=f"sim/state seq {seq}")
    state = received[-1][1]
    assert state["seq"] == seq
    return state


@pytest.fixture(scope="module")
def lockstep(serve_shared, pendulum):
    """A lockstep server shared by the tests that do not change its model."""
    return serve_shared(pendulum.config, "--mode", "lockstep", "--stall-timeout", "600")


@pytest.fixture(scope="module")
def realtime(serve_shared, pendulum):
    return serve_shared(pendulum.config, "--mode", "realtime", "--rate", str(REALTIME_RATE_HZ))


# ---------------------------------------------------------------------------------------------- lockstep step
def test_lockstep_step_advances_exactly_n_periods_and_publishes_each_state(lockstep):
    sub = lockstep.subscriber(b"sim/state")
    _live(lockstep, sub, lockstep=True)
    first = lockstep.ok("get", what="status")       # seq and t of the last state published
    reply = lockstep.ok("step", n=5)
    assert reply["steps"] == 5 and reply["state"] == "running"
    assert reply["seq"] == first["seq"] + 5
    assert reply["t"] == pytest.approx(first["t"] + 5 * PERIOD_S, abs=1e-12)
    states = [p for _, p in lockstep.receive(sub, lambda topic, p: p["seq"] == reply["seq"], what="5 states")
              if p["seq"] > first["seq"]]
    assert [p["seq"] for p in states] == list(range(first["seq"] + 1, reply["seq"] + 1))
    np.testing.assert_allclose([p["t"] for p in states], first["t"] + PERIOD_S * np.arange(1, 6), atol=1e-12)
    # lockstep does not advance on its own
    assert _states(lockstep.collect(sub, QUIET_S)) == []
    assert lockstep.ok("get", what="status")["t"] == reply["t"]


@pytest.mark.parametrize("n", [0, -1, "3", 1.5, True, None, 10**9])
def test_step_with_a_bad_n_is_refused(lockstep, n):
    before = lockstep.ok("get", what="status")["t"]
    reply = lockstep.request("step", n=n)
    assert reply["ok"] is False and '"n"' in reply["error"]
    assert lockstep.ok("get", what="status")["t"] == before


# ---------------------------------------------------------------------------------------------- get, help
def test_get_schema_joint_names_config_status_and_help(lockstep, pendulum):
    schema = lockstep.ok("get", what="schema")
    assert schema["schemas"] == {TOPIC_SIM_STATE: SCHEMAS[TOPIC_SIM_STATE],
                                 TOPIC_SIM_STATUS: SCHEMAS[TOPIC_SIM_STATUS]}
    names = lockstep.ok("get", what="joint_names")
    assert names["joint_names"] == ["hinge"] and names["actuated"] == [False]
    config = lockstep.ok("get", what="config")
    assert config["config"] == tomllib.loads(pendulum.config.read_text())
    status = lockstep.ok("get", what="status")["status"]
    validate(TOPIC_SIM_STATUS, status)
    assert status["mode"] == "lockstep" and status["state"] == "running" and status["robot"] == "test_pendulum"
    assert set(lockstep.ok("help")["commands"]) == set(COMMANDS)
    bad = lockstep.request("get", what="everything")
    assert bad["ok"] is False and "schema" in bad["error"]


# ---------------------------------------------------------------------------------------------- malformed
def _malformed_requests() -> list[list[bytes]]:
    rng = random.Random(4)
    requests = [[rng.randbytes(rng.randint(0, 200))] for _ in range(RANDOM_REQUESTS)]
    pack = msgpack.packb
    requests += [[frame] for frame in (
        b"", b"\xc1", b"\x92\x01", b"\xdc\xff\xff", b"\x81", b"\x81\xa3cmd", b"\xdf\xff\xff\xff\xff",
        pack({"cmd": "help"}) + b"\x00",                                  # trailing bytes
        pack(1), pack("start"), pack([1, 2]), pack(None), pack(True), pack(3.5), pack(b"start"),   # not maps
        pack({}), pack({"command": "start"}), pack({1: 2}), pack({"CMD": "start"}),              # no cmd
        pack({"cmd": None}), pack({"cmd": 5}), pack({"cmd": ["start"]}), pack({"cmd": b"start"}),  # cmd type
        pack({"cmd": {"nested": "start"}}), pack({"cmd": "nope"}), pack({"cmd": ""}),
        pack({"cmd": "get"}), pack({"cmd": "get", "what": 3}), pack({"cmd": "step", "n": "many"}),
        pack({"cmd": "step", "n": [1]}), pack({"cmd": "set"}), pack({"cmd": "set", "key": 5, "value": 1}),
        pack({"cmd": "set", "key": "robot.gravity"}), pack({"cmd": "set", "key": "", "value": 1}),
        pack({"cmd": "set", "key": "robot..gravity", "value": 1}),
        pack({"cmd": "set", "key": "robot.gravity", "value": None}),
        pack({"cmd": "set", "key": "robot.gravity", "value": b"\x00\x01"}),
        pack({"cmd": "set", "key": "robot.gravity", "value": float("nan")}),
    )]
    requests += [[b"two", b"frames"], [pack({"cmd": "help"}), b""]]
    return requests


def test_malformed_requests_each_get_an_error_reply_and_the_server_survives(lockstep):
    sub = lockstep.subscriber(b"sim/state")
    _live(lockstep, sub, lockstep=True)
    before = lockstep.ok("get", what="status")
    for frames in _malformed_requests():
        reply = lockstep.request_raw(frames)
        assert reply["ok"] is False, (frames, reply)
        assert isinstance(reply["error"], str) and reply["error"] and "\n" not in reply["error"]
        assert set(reply) == {"ok", "error"}
    assert lockstep.process.poll() is None
    # unchanged, and still working: a step advances and publishes
    after = lockstep.ok("get", what="status")
    assert after["t"] == before["t"] and after["seq"] == before["seq"]
    reply = lockstep.ok("step")
    assert reply["t"] == pytest.approx(before["t"] + PERIOD_S, abs=1e-12)
    assert _state_with_seq(lockstep, sub, reply["seq"])["t"] == reply["t"]


# ---------------------------------------------------------------------------------------------- set
def test_set_rebuilds_the_model_and_a_bad_value_keeps_the_old_one(serve, pendulum):
    server = serve(pendulum.config, "--mode", "lockstep", "--stall-timeout", "600")
    sub = server.subscriber(b"sim/state")
    _live(server, sub, lockstep=True)

    reply = server.ok("set", key="joints.hinge.rest", value=0.3)
    assert reply["previous"] == 0.0 and reply["value"] == 0.3 and reply["t"] == 0.0
    state = _state_with_seq(server, sub, reply["seq"])      # the reset state, published at once
    assert state["t"] == 0.0 and state["joint_names"] == ["hinge"]
    assert state["q"] == [0.3] and state["qd"] == [0.0] and state["strain"] == [0.0]
    assert state["qdd"][0] == pytest.approx(pendulum.qdd(0.3, 9.81), rel=PHYSICS_RTOL)

    reply = server.ok("set", key="robot.gravity", value=[0.0, 0.0, -1.62])
    state = _state_with_seq(server, sub, reply["seq"])
    assert state["q"] == [0.3]
    assert state["qdd"][0] == pytest.approx(pendulum.qdd(0.3, 1.62), rel=PHYSICS_RTOL)
    # Newton on the arm at qd = 0: the support's force is m (a_c - g), with the bob's centre at
    # c = (-l sin q, 0, -l cos q), so a_c = qdd (-l cos q, 0, l sin q); no moment about the pivot O_0
    q, qdd, m, l = 0.3, state["qdd"][0], pendulum.mass, pendulum.length
    expected_force = m * np.array([-l * np.cos(q) * qdd, 0.0, l * np.sin(q) * qdd + 1.62])
    np.testing.assert_allclose(state["base_wrench"][:3], expected_force, rtol=PHYSICS_RTOL, atol=1e-12)
    np.testing.assert_allclose(state["base_wrench"][3:], 0.0, atol=1e-12)
    assert server.ok("get", what="config")["config"]["robot"]["gravity"] == [0.0, 0.0, -1.62]

    for key, value, says in (("robot.gravity", "down", "robot.gravity"),
                             ("robot.gravity", [0.0, 1.0], "robot.gravity"),
                             ("robot.kind", "submarine", "robot.kind"),
                             ("joints.hinge.mode", "sometimes", "mode"),
                             ("joints.hinge.stiffness", 3.0, "no such key"),
                             ("robot.gravity.z", 1.0, "not a table")):
        refused = server.request("set", key=key, value=value)
        assert refused["ok"] is False and says in refused["error"], (key, refused)
    assert server.ok("get", what="config")["config"]["robot"]["gravity"] == [0.0, 0.0, -1.62]
    # the old model keeps running: the next state follows g = 1.62 m/s^2
    reply = server.ok("step")
    state = _state_with_seq(server, sub, reply["seq"])
    assert state["t"] == pytest.approx(PERIOD_S)
    assert state["qdd"][0] == pytest.approx(pendulum.qdd(state["q"][0], 1.62), rel=PHYSICS_RTOL)


def test_a_diverging_simulation_is_paused_with_its_reason_not_published(serve, pendulum):
    # mu = 1e4 N m s/rad (the schema's largest damping) on I = 0.25 kg m^2: the mode -mu/I = -4e4 1/s gives
    # lambda dt = -40 at dt = 1 ms, far outside RK4's stability region (-2.78)
    server = serve(pendulum.config, "--mode", "lockstep", "--stall-timeout", "600")
    sub = server.subscriber()
    _live(server, sub, lockstep=True)
    server.ok("set", key="joints.hinge.law.mu", value=1e4)
    server.ok("set", key="joints.hinge.rest", value=0.3)
    failed = server.request("step", n=1000)
    assert failed["ok"] is False and failed["error"].startswith("stopped after"), failed
    assert "diverged" in failed["error"] or "simulation failed" in failed["error"], failed
    status = server.ok("get", what="status")
    assert status["state"] == "paused" and status["status"]["reason"] in failed["error"]
    received = server.collect(sub, QUIET_S)
    assert all(np.isfinite(p["q"]).all() and np.isfinite(p["qd"]).all() for p in _states(received))
    assert any(topic == TOPIC_SIM_STATUS and p["state"] == "paused" for topic, p in received)
    assert "paused: simulation" in server.wait_stderr("paused: simulation")
    # a sane value and a reset bring it back
    server.ok("set", key="joints.hinge.law.k", value=1.0)
    assert server.ok("step", n=10)["steps"] == 10


# ---------------------------------------------------------------------------------------------- realtime
def test_pause_stops_the_stream_and_resume_continues_it(realtime):
    sub = realtime.subscriber()
    realtime.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATE, what="a first state")
    paused = realtime.ok("pause")
    assert paused["state"] == "paused"
    quiet = realtime.collect(sub, QUIET_S)
    assert all(p["seq"] <= paused["seq"] for p in _states(quiet))
    assert any(topic == TOPIC_SIM_STATUS and p["state"] == "paused" and p["reason"] == "pause command"
               for topic, p in quiet)
    status = realtime.ok("get", what="status")
    assert status["t"] == paused["t"] and status["status"]["state"] == "paused"

    resumed = realtime.ok("resume")
    assert resumed["state"] == "running" and resumed["t"] == paused["t"]
    state = _state_with_seq(realtime, sub, paused["seq"] + 1)
    assert state["t"] == pytest.approx(paused["t"] + REALTIME_PERIOD_S, abs=1e-12)   # no jump, no catch-up


def test_reset_publishes_the_initial_state_with_the_joint_names(realtime):
    sub = realtime.subscriber(b"sim/state")
    realtime.receive(sub, lambda topic, p: p["t"] > 0.1, what="a state after t = 0.1 s")
    reply = realtime.ok("reset")
    assert reply["t"] == 0.0 and reply["state"] == "running"
    state = _state_with_seq(realtime, sub, reply["seq"])
    assert state["t"] == 0.0 and state["q"] == [0.0] and state["qd"] == [0.0]
    assert state["joint_names"] == ["hinge"] and state["actuated"] == [False]
    following = _state_with_seq(realtime, sub, reply["seq"] + 1)
    assert following["t"] == pytest.approx(REALTIME_PERIOD_S, abs=1e-12)


def test_step_needs_a_pause_in_realtime_and_then_single_steps(realtime):
    sub = realtime.subscriber(b"sim/state")
    _live(realtime, sub, lockstep=False)
    refused = realtime.request("step")
    assert refused["ok"] is False and "pause" in refused["error"]
    paused = realtime.ok("pause")
    reply = realtime.ok("step", n=3)
    assert reply["state"] == "paused" and reply["seq"] == paused["seq"] + 3
    assert reply["t"] == pytest.approx(paused["t"] + 3 * REALTIME_PERIOD_S, abs=1e-12)
    states = [p for _, p in realtime.receive(sub, lambda topic, p: p["seq"] == reply["seq"], what="3 states")]
    assert [p["seq"] for p in states[-3:]] == [paused["seq"] + 1, paused["seq"] + 2, paused["seq"] + 3]
    assert _states(realtime.collect(sub, QUIET_S)) == []
    assert realtime.ok("resume")["state"] == "running"


# ---------------------------------------------------------------------------------------------- the flapper
FLAPPER = Path(__file__).resolve().parents[2] / "configs" / "robots" / "flapper.toml"
FLAPPER_STEPS = 8               # publish periods of 1 ms (ROSW steps of 0.4 ms: states interpolated at t)
LAW_ATOL_RAD = 1e-12


def _stroke(t: np.ndarray, amplitude_deg: float, frequency_hz: float) -> np.ndarray:
    """The flapper's actuated stroke law, r = -A cos(2 pi f t) (rad), spec flapper-hawkmoth.md."""
    return -np.radians(amplitude_deg) * np.cos(2 * np.pi * frequency_hz * t)


def test_flapper_in_lockstep_follows_its_stroke_law_and_set_changes_it(serve):
    config = tomllib.loads(FLAPPER.read_text())
    amplitude, frequency = config["stroke"]["amplitude_deg"], config["stroke"]["frequency_hz"]
    server = serve(FLAPPER, "--mode", "lockstep", "--stall-timeout", "600")
    names = server.ok("get", what="joint_names")
    strokes = [names["joint_names"].index("stroke_r"), names["joint_names"].index("stroke_l")]
    assert [names["actuated"][k] for k in strokes] == [True, True] and sum(names["actuated"]) == 2
    sub = server.subscriber(b"sim/state")
    _live(server, sub, lockstep=True)

    for frequency_now in (frequency, 2 * frequency):
        start = server.ok("get", what="status")
        reply = server.ok("step", n=FLAPPER_STEPS)
        states = [p for _, p in server.receive(sub, lambda topic, p: p["seq"] == reply["seq"])
                  if p["seq"] > start["seq"]]
        assert len(states) == FLAPPER_STEPS
        for state in states:
            validate(TOPIC_SIM_STATE, state)
        t = np.array([p["t"] for p in states])
        np.testing.assert_allclose(np.diff(t), PERIOD_S, atol=1e-12)
        q = np.array([p["q"] for p in states])
        for k in strokes:
            np.testing.assert_allclose(q[:, k], _stroke(t, amplitude, frequency_now), atol=LAW_ATOL_RAD)
        assert all(len(p["strain"]) == len(names["joint_names"]) - 2 for p in states)
        if frequency_now == frequency:
            reply = server.ok("set", key="stroke.frequency_hz", value=2 * frequency)
            assert reply["previous"] == frequency and reply["t"] == 0.0
            state_0 = _state_with_seq(server, sub, reply["seq"])
            assert state_0["t"] == 0.0 and state_0["joint_names"] == names["joint_names"]
    refused = server.request("set", key="stroke.frequency_hz", value=-1.0)
    assert refused["ok"] is False and "stroke.frequency_hz" in refused["error"]
    assert server.ok("get", what="config")["config"]["stroke"]["frequency_hz"] == 2 * frequency
