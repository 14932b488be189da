"""The driver survives every input, trusts no measurement, and sends nothing outside the rig's limits.

A real driver object (hil.testing.LiveDriver: its ZeroMQ sockets bound, its serial link on a real emulator's pty,
the emulator writing its applied log) is fed device frames (valid CRC: encoded, then decoded by the protocol's
stream decoder) and sim/state messages (over a real PUB socket); the issue's crashes are reproduced one by one.
Every check of "nothing outside the limits" reads the emulator's applied log: what the firmware really took.
"""
from __future__ import annotations

import math
import random
import time
from pathlib import Path

import numpy as np
import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from firmware_interface import protocol as p
from firmware_interface.pty_device import read_applied_log
from hil.drive.inputs import SetpointLimits
from hil.drive.safety import Mode
from hil.testing import DEADLINE_S, LiveDriver, wait_for
from sim.messages import encode

ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"
JOINTS = ["stroke_r", "stroke_l"]
#: device frames per hypothesis example, and examples: 100 000 frames in all (issue 16)
FRAMES_PER_EXAMPLE, PACKET_EXAMPLES = 2000, 50
#: frames handled between two command ticks (200 ticks of 2 ms per example: time to hold, ramp and reach neutral)
FRAMES_PER_TICK = 10


@pytest.fixture
def live(tmp_path, network):
    made = LiveDriver(FLAPPER, network, tmp_path / "applied.jsonl", "--max-state-age", "5")
    yield made
    made.close()


def good_state(seq: int, q=(0.3, -0.2), stamp_ns: int | None = None) -> dict:
    return {"v": 1, "seq": seq, "t": seq * 1e-3, "stamp_ns": time.time_ns() if stamp_ns is None else stamp_ns,
            "joint_names": list(JOINTS), "q": list(q)}


def limits_of(live) -> SetpointLimits:
    return SetpointLimits(live.rig.servos)


def assert_applied_within_limits(live, at_least: int) -> list[dict]:
    """Every setpoint the emulated firmware applied is inside the rig's limits (float32 as on the wire), none
    was refused for its values, and at least ``at_least`` were applied (the check is not vacuous)."""
    wait_for(lambda: len(read_applied_log(live.applied_log)) >= at_least, what=f"{at_least} setpoints applied")
    records = read_applied_log(live.applied_log)
    limits = limits_of(live)
    raw = np.array([r["raw"] for r in records if r["result"] == "applied"], dtype=float)
    assert len(raw) >= at_least
    assert np.all(np.isfinite(raw)) and np.all(raw >= limits.lo) and np.all(raw <= limits.hi)
    assert [r for r in records if r["result"] != "applied"] == []
    return records


# ---- device frames ------------------------------------------------------------------------------------------
#: kinds of TELEMETRY frame the generator makes, and where the driver must count each
KINDS = ("valid", "wrong_count", "servo_nan", "servo_inf", "servo_range", "sensor_range")
EXPECTED = {"wrong_count": ("refused", "telemetry:channel_count"), "servo_nan": ("faults", "servo_non_finite"),
            "servo_inf": ("faults", "servo_non_finite"), "servo_range": ("faults", "servo_out_of_range"),
            "sensor_range": ("faults", "sensor_out_of_range")}


#: the ADC range of a channel the rig does not have (a frame with the wrong counts)
FOREIGN_COUNT_RANGE = (-2**15, 2**15 - 1)


def telemetry_frame(rng: random.Random, rig, kind: str) -> p.Telemetry:
    n_servo, n_strain, n_load = len(rig.servos), len(rig.strain), len(rig.load)
    if kind == "wrong_count":
        while (counts := tuple(rng.randrange(7) for _ in range(3))) == (n_servo, n_strain, n_load):
            pass
        n_servo, n_strain, n_load = counts
    k = rng.randint(1, p.max_samples_per_frame(n_servo, n_strain, n_load))
    servo_ranges = ([(s.min_raw, s.max_raw) for s in rig.servos] + [(800.0, 2200.0)] * n_servo)[:n_servo]
    ranges = ([s.count_range for s in [*rig.strain, *rig.load]] + [FOREIGN_COUNT_RANGE] * (n_strain + n_load))
    ranges = ranges[:n_strain + n_load]
    # valid measurements anywhere in the servos' range (some off the position limits) and the ADCs' ranges
    servo = [[rng.uniform(a, b) for a, b in servo_ranges] for _ in range(k)]
    counts = [[a + int(rng.random() * (b - a + 1)) for a, b in ranges] for _ in range(k)]
    i = rng.randrange(k)
    if kind in ("servo_nan", "servo_inf", "servo_range"):
        bad = {"servo_nan": [math.nan], "servo_inf": [math.inf, -math.inf],
               "servo_range": [3000.0, -5.0, 3.0e38, 2200.5]}[kind]
        servo[i][rng.randrange(n_servo)] = rng.choice(bad)
    elif kind == "sensor_range":
        c = rng.randrange(n_strain + n_load)
        a, b = ranges[c]
        counts[i][c] = b + rng.randint(1, 1000) if rng.random() < 0.5 else a - rng.randint(1, 1000)
    flags = rng.randrange(256) if rng.random() < 0.2 else p.FLAG_CONFIGURED
    samples = tuple(p.TelemetrySample(int(rng.random() * 2**32), tuple(servo[s]), tuple(counts[s][:n_strain]),
                                      tuple(counts[s][n_strain:])) for s in range(k))
    return p.Telemetry(flags, n_servo, n_strain, n_load, samples)


def other_frame(rng: random.Random) -> p.Message:
    """Any other message a device (or line noise that passes the CRC) could send."""
    u8, u16, u32 = (lambda: rng.randrange(256)), (lambda: rng.randrange(2**16)), (lambda: rng.randrange(2**32))
    choice = rng.randrange(10)
    if choice == 0:
        return p.Heartbeat(u8() if rng.random() < 0.3 else p.FLAG_CONFIGURED, u32())
    if choice == 1:
        return p.EStop(u8())
    if choice == 2:
        return p.Ack(u8(), u16())
    if choice == 3:
        return p.Nack(u8(), u16(), u8())
    if choice == 4:
        return p.LinkStats(*(u32() for _ in range(9)))
    if choice == 5:
        return p.DeviceInfo(u8(), (u8(), u8(), u8()), "x" * rng.randrange(20), u8(), u8(), u8())
    if choice == 6:
        return p.Setpoints(tuple(rng.uniform(-1e6, 1e6) for _ in range(rng.randint(1, 8))))
    if choice == 7:
        return p.Configure(u16(), u8(), u16())
    return rng.choice([p.Hello(), p.EStopReset(), p.GetLinkStats()])


#: distinct frames generated per telemetry kind, and of the other messages; each example draws its 2000 frames
#: from them in a random order (generating 100 000 frames one by one would cost more than handling them)
LIBRARY_PER_KIND, LIBRARY_OTHERS = 300, 900


def frame_library(rig, seed: int = 16) -> list[tuple[bytes, str | None]]:
    """Encoded frames and the telemetry kind of each (None: another message)."""
    rng = random.Random(seed)
    library = [(p.encode(telemetry_frame(rng, rig, kind), 0, 0), kind)
               for kind in KINDS for _ in range(LIBRARY_PER_KIND)]
    return library + [(p.encode(other_frame(rng), 0, 0), None) for _ in range(LIBRARY_OTHERS)]


def frames_of(rng: random.Random, library, n: int) -> tuple[list[p.Packet], dict]:
    """``n`` valid-CRC packets drawn from ``library`` (decoded by the protocol's own stream decoder) and how
    many of each telemetry kind they hold."""
    drawn = rng.choices(library, k=n)
    kinds = dict.fromkeys(KINDS, 0)
    for _, kind in drawn:
        if kind is not None:
            kinds[kind] += 1
    packets = p.StreamDecoder().feed(b"".join(frame for frame, _ in drawn))
    assert len(packets) == n
    return packets, kinds


def test_packet_fuzz_never_crashes_counts_every_refusal_and_sends_only_within_limits(live):
    """100 000 device frames in all, through ``handle_packet`` of a driver whose setpoints go to a real emulator:
    bad channel counts are refused, impossible measurements counted as faults and never taken as the servos'
    position; between frames the command clock ticks (tracking, hold, ramp, from measured starts found
    anywhere in the servo's range) and the applied log proves every setpoint stayed within the limits."""
    d = live.driver
    modes, frames = set(), []
    library = frame_library(live.rig)

    @settings(max_examples=PACKET_EXAMPLES, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow])
    @given(seed=st.integers(0, 2**32 - 1))
    def example(seed):
        rng = random.Random(seed)
        packets, kinds = frames_of(rng, library, FRAMES_PER_EXAMPLE)
        refused_before, faults_before = dict(d.refused), dict(d.measurement_faults)
        now = time.monotonic()
        seq = rng.randrange(2**40)
        # how often a fresh state comes: mostly, half the time (hold), never (hold, ramp, neutral); and in some
        # examples a deactivate half-way (the ramp of an inactive driver)
        fresh = rng.choice([0.9, 0.5, 0.0])
        deactivate_at = rng.choice([None, None, len(packets) // 2])
        for start in range(0, len(packets), FRAMES_PER_TICK):
            for packet in packets[start:start + FRAMES_PER_TICK]:
                d.handle_packet(packet, now)
            if d.core.estop.latched and rng.random() < 0.5:         # a fuzzed ESTOP or flag latched it: go on
                d.core.estop.reset()
            if start == deactivate_at and d.core.lifecycle.state.value == "active":
                d.core.deactivate()
            elif d.core.lifecycle.state.value == "inactive" and not d.core.estop.latched and not d.core.ramping \
                    and (deactivate_at is None or start < deactivate_at):
                d.core.activate(now)
            if rng.random() < fresh:
                seq += 1
                d.core.on_state(good_state(seq, (rng.uniform(-2, 2), rng.uniform(-2, 2))), now, time.time_ns())
            d.command_tick(now)
            modes.add(d.core.mode)
            measured = d.core.measured
            assert measured is None or np.all(np.isfinite(measured))
            now += d.period
        for where, key in set(EXPECTED.values()):
            counter, before = (d.refused, refused_before) if where == "refused" else (d.measurement_faults,
                                                                                       faults_before)
            expected = sum(n for k, n in kinds.items() if EXPECTED.get(k) == (where, key))
            assert counter.get(key, 0) - before.get(key, 0) == expected, key
        frames.append(len(packets))

    example()
    assert sum(frames) == FRAMES_PER_EXAMPLE * PACKET_EXAMPLES
    assert set(Mode) <= modes
    health = d.status_payload()["health"]
    assert health["measurement_faults"] == dict(d.measurement_faults)
    assert health["refused"]["telemetry:channel_count"] == d.refused["telemetry:channel_count"] > 0
    assert_applied_within_limits(live, at_least=100)


# ---- the issue's crashes and blind trust, one by one ------------------------------------------------------------
@pytest.fixture
def sim_pub(live):
    """A real PUB socket on the simulator's endpoint, joined: the driver has heard from it."""
    sock = zmq.Context.instance().socket(zmq.PUB)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(live.driver.endpoints.sim_pub)
    sent = []

    def joined():
        sent.append(len(sent))
        sock.send_multipart(encode("sim/state", good_state(sent[-1])))
        live.step()
        return live.driver.states_received > 0
    wait_for(joined, what="the driver subscribed")
    # states sent before the subscription took are queued behind the first one read: a test's deliver() must
    # not see one of them arrive and take it for its own message
    wait_for(lambda: live.step() or live.driver.sim_seq.last_seq.get("sim/state") == sent[-1],
             what="the states sent while joining read")
    yield sock
    sock.close(0)


#: how often :func:`deliver` looks whether the driver has read the message, s (loopback: well under a ms)
DELIVERY_POLL_S = 2e-4


def deliver(live, sock, frames: list[bytes]) -> None:
    """Publish one message and wait until the driver has read it (as a state, a status or an undecodable one)."""
    d = live.driver
    seen = lambda: d.states_received + d.sim_malformed + sum(d.refused.values())  # noqa: E731
    before = (seen(), d.sim_seq.received.get("sim/status", 0))
    sock.send_multipart(frames)
    wait_for(lambda: live.step() or (seen(), d.sim_seq.received.get("sim/status", 0)) != before
             or d.core.joint_names is not None and frames[0] == b"sim/status", poll_s=DELIVERY_POLL_S,
             what="the message read")


def state_with(**changes) -> dict:
    payload = good_state(0)
    payload.update(changes)
    return {k: v for k, v in payload.items() if v is not ...}


#: the issue's crashing or wrongly accepted states, and the reason each is now refused for
CRASHERS = {
    "q with one non-numeric extra element": (state_with(q=[0.3, -0.2, "x"], joint_names=[*JOINTS, "extra"]),
                                             "malformed"),
    "integer joint names": (state_with(joint_names=[1, 2]), "malformed"),
    "unhashable joint names": (state_with(joint_names=[[1], [2]]), "malformed"),
    "strings in q": (state_with(q=["0.6", "0.2"]), "malformed"),
    "seq and stamp 2^63-1": (state_with(seq=2**63 - 1, stamp_ns=2**63 - 1), "future"),
}


@pytest.mark.parametrize("name", CRASHERS)
def test_each_crashing_state_of_the_issue_is_refused_and_later_states_are_used(live, sim_pub, name):
    payload, reason = CRASHERS[name]
    d = live.driver
    d.core.activate(time.monotonic())
    used, rejected = d.core.states_used, d.core.rejections.get(reason, 0)
    payload["stamp_ns"] = payload["stamp_ns"] if payload["seq"] == 2**63 - 1 else time.time_ns()
    payload["seq"] = payload["seq"] if payload["seq"] == 2**63 - 1 else 10**6
    deliver(live, sim_pub, encode("sim/state", payload))
    assert d.core.rejections[reason] == rejected + 1 and d.core.states_used == used
    assert d.status_payload()["health"]["refused"][f"state:{reason}"] == rejected + 1
    # good states right after are used: nothing is locked out, and no seq gap of 9e18 is counted
    for seq in range(10**6 + 1, 10**6 + 4):
        deliver(live, sim_pub, encode("sim/state", good_state(seq, (0.5, -0.1))))
    assert d.core.states_used == used + 3
    assert d.core.goal == pytest.approx(d.map.joints_to_angles(np.array([0.5, -0.1]), np.array([0, 1])))
    assert d.sim_seq.gaps.get("sim/state", 0) < 10**6 + 10


def test_a_forged_huge_seq_is_refused_and_a_restarted_publisher_is_followed(live, sim_pub):
    d = live.driver
    deliver(live, sim_pub, encode("sim/state", good_state(100)))
    used = d.core.states_used
    deliver(live, sim_pub, encode("sim/state", good_state(2**63 - 1)))       # a plausible stamp, forged seq
    assert d.core.rejections["seq_jump"] == 1 and d.core.states_used == used
    deliver(live, sim_pub, encode("sim/state", good_state(101)))
    assert d.core.states_used == used + 1 and d.core.goal_seq == 101
    assert d.status_payload()["states"]["seq_jumps"] == 1
    # a publisher that restarts far ahead (another numbering) is followed after STREAM_RESTART_STATES states
    for seq in range(5 * 10**9, 5 * 10**9 + 3):
        deliver(live, sim_pub, encode("sim/state", good_state(seq)))
    assert d.core.goal_seq == 5 * 10**9 + 2 and d.core.state_check.stream_restarts == 1


def test_bad_sim_status_and_undecodable_messages_are_counted(live, sim_pub):
    d = live.driver
    deliver(live, sim_pub, encode("sim/status", {"v": 1, "seq": 0, "joint_names": [[1], 2]}))
    assert d.refused["sim_status:joint_names"] == 1 and d.core.joint_names is None
    deliver(live, sim_pub, [b"sim/state", b"\xc1not msgpack"])
    deliver(live, sim_pub, [b"sim/state"])
    assert d.sim_malformed == 2
    assert d.status_payload()["health"]["refused"]["sim:undecodable"] == 2


def telemetry_with(rig, servo: tuple[float, ...], k: int = 3) -> p.Packet:
    sample = p.TelemetrySample(0, servo, (0,) * len(rig.strain), (0,) * len(rig.load))
    return p.Packet(0, 0, p.Telemetry(p.FLAG_CONFIGURED, len(servo), len(rig.strain), len(rig.load),
                                      (sample,) * k))


def test_wrong_channel_counts_in_a_valid_frame_are_refused(live):
    """hil/drive/driver.py ~l.501 crashed on these (the counts were only checked at the handshake)."""
    d, rig = live.driver, live.rig
    for servo in ((1500.0,), (1500.0, 1500.0, 1500.0), ()):
        d.handle_packet(telemetry_with(rig, servo), time.monotonic())
    wrong_sensors = p.Telemetry(0, 2, 0, 0, (p.TelemetrySample(0, (1500.0, 1500.0), (), ()),))
    d.handle_packet(p.Packet(0, 0, wrong_sensors), time.monotonic())
    assert d.refused["telemetry:channel_count"] == 4
    assert d.status_payload()["health"]["refused"]["telemetry:channel_count"] == 4


def test_nan_and_3000us_measurements_never_become_setpoints(live):
    """The issue: NaN servo positions made every setpoint NaN, readings of 3000 us setpoints outside 800-2200 us.
    Here the driver has just come up (nothing sent yet: a hold or ramp would start from the measurement)."""
    d, rig = live.driver, live.rig
    now = time.monotonic()
    d.core.link_reset(now)          # as after a (re)connect: nothing sent, nothing measured on this link
    d.core.activate(now)
    for bad in ((math.nan, 1500.0), (3000.0, 3000.0), (1500.0, math.inf)):
        d.handle_packet(telemetry_with(rig, bad), now)
        for _ in range(5):
            now += d.period
            d.command_tick(now)
        assert d.core.previous is None and d.core.measured is None        # nothing sent, nothing believed
    assert d.measurement_faults == {"servo_non_finite": 2, "servo_out_of_range": 1}
    # a valid measurement off the position limits: the setpoints start inside them, never beyond
    d.handle_packet(telemetry_with(rig, (2190.0, 810.0)), now)
    for k in range(200):
        now += d.period
        d.core.on_state(good_state(10**7 + k, (5.0, -5.0)), now, time.time_ns())
        d.command_tick(now)
    records = assert_applied_within_limits(live, at_least=150)
    limits = limits_of(live)
    last = np.float32(records[-1]["raw"])              # tracking the far joints: held on a limit, not beyond
    assert np.all((last == np.float32(limits.lo)) | (last == np.float32(limits.hi)))
    # a telemetry stream that stays bad: hold, then ramp to neutral, as for stale states, though states are fresh
    modes = []
    for k in range(200):
        now += d.period
        d.handle_packet(telemetry_with(rig, (math.nan, 1500.0)), now)
        d.core.on_state(good_state(10**8 + k, (0.2, 0.1)), now, time.time_ns())
        d.command_tick(now)
        modes.append(d.core.mode)
    assert modes[0] is Mode.TRACK and Mode.HOLD in modes and modes[-1] in (Mode.RAMP, Mode.NEUTRAL)
    health = d.status_payload()["health"]
    assert health["measurement_faults"] == {"servo_non_finite": 202, "servo_out_of_range": 1}
    assert health["holds"] == 1 and health["hold_s"] > 0.1
    assert_applied_within_limits(live, at_least=300)


# ---- sim/state fuzz through a real socket -------------------------------------------------------------------------
STATE_EXAMPLES = 500
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=6), st.binary(max_size=6),
                 st.lists(st.floats(), max_size=3),
                 st.dictionaries(st.text(max_size=3), st.integers(-2**63, 2**64 - 1), max_size=2))
NUMBER = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2**63, 2**64 - 1),
                   st.sampled_from(["0.6", None, True, [0.1]]))
KEYS = ("seq", "stamp_ns", "t", "q", "joint_names")
#: one change to a good state: junk in any key, or a value of the right type that is still wrong
MUTATION = st.one_of(
    st.tuples(st.sampled_from(KEYS), JUNK),
    st.tuples(st.just("q"), st.lists(NUMBER, max_size=5)),
    st.tuples(st.just("q"), st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=2, max_size=2)),
    st.tuples(st.just("joint_names"), st.lists(st.one_of(st.sampled_from([*JOINTS, "x"]), JUNK), max_size=4)),
    st.tuples(st.just("seq"), st.sampled_from([2**63 - 1, 2**64 - 1, -1, 0, 10**12])),
    st.tuples(st.just("stamp_ns"), st.sampled_from(["future", "past", 2**63 - 1, 0])),
    st.tuples(st.just("t"), st.sampled_from([math.nan, math.inf, -math.inf])))
#: a stamp this far from now for the "future" and "past" markers, s
FAR_S = 60.0


def test_state_fuzz_never_crashes_accounts_for_every_state_and_locks_nothing_out(live, sim_pub):
    """NaN, inf, strings, wrong shapes and types, future and past stamps, huge and negative seqs, missing keys:
    each state is used or refused by reason, the goal is always finite, and good states after the storm are
    used at once or, after a forged future stamp or seq, within STREAM_RESTART_STATES states."""
    d = live.driver
    d.core.activate(time.monotonic())
    counter = iter(range(10**6, 10**9))
    last: list[dict] = []

    @settings(max_examples=STATE_EXAMPLES, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(changes=st.lists(MUTATION, max_size=2), dropped=st.sets(st.sampled_from(KEYS), max_size=1),
           repeat=st.integers(0, 9))
    def example(changes, dropped, repeat):
        payload = good_state(next(counter))
        if repeat == 0 and last:                            # a repeat of the last state sent: a duplicate
            payload = dict(last[-1])
        last[:] = [payload]
        payload = dict(payload)
        payload.update(changes)
        marker = {"future": FAR_S, "past": -FAR_S}.get(payload["stamp_ns"]) \
            if isinstance(payload["stamp_ns"], str) else None
        if marker is not None:
            payload["stamp_ns"] = time.time_ns() + int(marker * 1e9)
        for key in dropped:
            payload.pop(key)
        deliver(live, sim_pub, encode("sim/state", payload))
        assert d.core.states_used + sum(d.core.rejections.values()) + d.states_superseded == d.states_received
        assert d.core.goal is None or np.all(np.isfinite(d.core.goal))

    example()
    refused = d.status_payload()["health"]["refused"]
    for reason in ("malformed", "non_finite", "future", "stale", "duplicate"):
        assert refused.get(f"state:{reason}", 0) > 0, reason
    used = d.core.states_used
    for _ in range(3):
        deliver(live, sim_pub, encode("sim/state", good_state(next(counter), (0.1, 0.2))))
    assert d.core.states_used > used and d.core.goal_seq == next(counter) - 1
    assert d.sim_seq.gaps.get("sim/state", 0) < 10**9


# ---- control requests -------------------------------------------------------------------------------------
#: requests per hypothesis example, and examples: 5 000 requests (issue 16)
REQUESTS_PER_EXAMPLE, REQUEST_EXAMPLES = 100, 50
#: the driver reads its port and ticks its command clock once per this many requests
TICK_EVERY_REQUESTS = 5
#: commands the fuzz sends as well-formed requests: all but cleanup and shutdown (which end the run under test)
SAFE_COMMANDS = ["status", "help", "configure", "activate", "deactivate", "estop", "reset_estop"]
JUNK = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**63, 2**64 - 1), st.floats(),
                              st.text(max_size=8), st.binary(max_size=8)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3),
                                            st.dictionaries(st.text(max_size=4), inner, max_size=3)),
                    max_leaves=6)
REQUEST = st.one_of(
    st.lists(st.binary(max_size=32), min_size=1, max_size=3),                           # raw bytes, 1-3 frames
    st.builds(lambda x: [msgpack.packb(x)], JUNK),                                       # any MessagePack
    st.builds(lambda c: [msgpack.packb({"cmd": c})], st.one_of(st.text(max_size=12), JUNK)),
    st.builds(lambda c, extra: [msgpack.packb({**extra, "cmd": c})], st.sampled_from(SAFE_COMMANDS),
              st.dictionaries(st.text(max_size=4), JUNK, max_size=3)),
    st.builds(lambda n: [b"\x91" + b"\x00" * n], st.integers(4000, 9000)))               # too long


def test_five_thousand_control_requests_are_each_answered_and_every_refusal_counted(live):
    """Through a real REQ socket to the driver's REP socket, served by the driver's own handler; the command
    clock ticks between requests (activate, estop and deactivate really move or stop the emulated rig)."""
    d = live.driver
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(DEADLINE_S * 1000))
    sock.connect(d.endpoints.driver_control)
    answered = {"ok": 0, "error": 0}
    seq = iter(range(10**6, 10**9))

    @settings(max_examples=REQUEST_EXAMPLES, deadline=None, derandomize=True, phases=[Phase.generate],
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(requests=st.lists(REQUEST, min_size=REQUESTS_PER_EXAMPLE, max_size=REQUESTS_PER_EXAMPLE))
    def example(requests):
        for k, frames in enumerate(requests):
            sock.send_multipart(frames)
            assert d.rep.poll(DEADLINE_S * 1000)
            now = time.monotonic()
            d.serve_control(now)
            if k % TICK_EVERY_REQUESTS == 0:
                if d.core.estop.latched and d.reset_seq is None:
                    d.local_reset(now)                   # the operator confirms on the driver's host
                d.core.on_state(good_state(next(seq), (0.4, -0.1)), now, time.time_ns())
                live.step(now)
                d.command_tick(now)
            reply = msgpack.unpackb(sock.recv(), raw=False)
            assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool)
            answered["ok" if reply["ok"] else "error"] += 1
            assert reply["ok"] or isinstance(reply.get("error"), str) and "\n" not in reply["error"]

    try:
        example()
    finally:
        sock.close(0)
    assert sum(answered.values()) == REQUESTS_PER_EXAMPLE * REQUEST_EXAMPLES
    refused = d.status_payload()["health"]["refused"]
    control = {k: v for k, v in refused.items() if k.startswith("control:")}
    assert sum(control.values()) == answered["error"], control
    for reason in ("frames", "not_msgpack", "not_a_request", "unknown_command", "too_long", "remote_reset",
                   "refused"):
        assert control.get(f"control:{reason}", 0) > 0, reason
    assert answered["ok"] > 0
    assert_applied_within_limits(live, at_least=100)


# ---- e-stop authority without --allow-remote-reset ------------------------------------------------------------
def test_without_the_option_only_a_local_confirmation_resets_and_never_while_the_button_is_held(live):
    d = live.driver
    live.emulator.press_button()
    wait_for(lambda: live.step() or d.core.estop.latched and d.button_held(), what="the button e-stop")
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(d.endpoints.driver_control)
    try:
        sock.send(msgpack.packb({"cmd": "reset_estop"}))
        assert d.rep.poll(DEADLINE_S * 1000)
        d.serve_control(time.monotonic())
        reply = msgpack.unpackb(sock.recv(), raw=False)
    finally:
        sock.close(0)
    assert not reply["ok"] and "--allow-remote-reset" in reply["error"] and "kill -USR1" in reply["error"]
    assert d.refused["control:remote_reset"] == 1
    d.local_reset(time.monotonic())                     # held: refused before anything is sent
    assert d.reset_seq is None and d.core.estop.latched
    live.emulator.release_button()
    wait_for(lambda: live.step() or not d.button_held(), what="the button released")
    assert d.core.estop.latched                         # a release alone does not reset
    d.local_reset(time.monotonic())
    wait_for(lambda: live.step() or not d.core.estop.latched, what="the local reset acknowledged")
    assert d.core.lifecycle.state.value == "inactive"


def test_a_lagging_plant_is_in_health_and_said_once_per_ten_seconds(live, capsys):
    """The emulator child's statistics file as `serve` writes it (firmware_interface.pty_device.write_stats)."""
    from firmware_interface.pty_device import write_stats
    from hil.drive.driver import PLANT_LAG_WARN_EVERY_S
    from hil.drive.emulator_child import EmulatorChild, emulate_argv

    d = live.driver
    d.emulator = EmulatorChild(emulate_argv(live.rig.path))
    write_stats(d.emulator.stats_path, {"plant": {"plant": "physics", "rtf": 0.6, "lag_s": 2.5, "alive": True}})
    now = time.monotonic()
    for k in range(3):                                 # within the 10 s: one line
        d.read_plant(now + k)
    d.read_plant(now + PLANT_LAG_WARN_EVERY_S + 1)     # and again after them
    lines = [line for line in capsys.readouterr().err.splitlines() if "physics plant lags" in line]
    assert len(lines) == 2 and "2.50 s" in lines[0]
    plant = d.status_payload()["health"]["plant"]
    assert plant == {"rtf": 0.6, "lag_s": 2.5, "alive": False, "restarts": 0}     # no child process: not alive
    d.emulator.cleanup()
    d.emulator = None
