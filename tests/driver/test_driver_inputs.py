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
import pytest
import zmq
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from firmware_interface import protocol as p
from firmware_interface.pty_device import read_applied_log
from hil.driver_inputs import SetpointLimits
from hil.driver_safety import Mode
from hil.testing import LiveDriver, wait_for
from sim.messages import encode

ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"
JOINTS = ["stroke_r", "stroke_l"]
#: device frames per hypothesis example, and examples: 100 000 frames in all (issue 16)
FRAMES_PER_EXAMPLE, PACKET_EXAMPLES = 2000, 50
#: frames handled between two command ticks
FRAMES_PER_TICK = 20


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
        for start in range(0, len(packets), FRAMES_PER_TICK):
            for packet in packets[start:start + FRAMES_PER_TICK]:
                d.handle_packet(packet, now)
            if d.core.estop.latched and rng.random() < 0.5:         # a fuzzed ESTOP or flag latched it: go on
                d.core.estop.reset()
            if d.core.lifecycle.state.value == "inactive" and not d.core.estop.latched:
                d.core.activate(now)
            if rng.random() < 0.5:                                  # fresh states half the time: hold, ramp
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
    assert {Mode.TRACK, Mode.HOLD, Mode.RAMP} <= modes
    health = d.status_payload()["health"]
    assert health["measurement_faults"] == dict(d.measurement_faults)
    assert health["refused"]["telemetry:channel_count"] == d.refused["telemetry:channel_count"] > 0
    assert_applied_within_limits(live, at_least=100)
