"""The rig firmware core in C (firmware_interface/firmware/rig/rig_fw.c) under AddressSanitizer and
UndefinedBehaviorSanitizer: its unit tests on a fake HAL (tests/firmware/test_rig_fw.c: fake clock, watchdog
timing, e-stop latch and button, raw limits and rate limits, frame corruption, the 32-bit clock's wrap,
interpolated setpoints and the interpolation's bounds), the
protocol vectors shared with Python, and a seeded random fuzz run over its receiver for a bounded count.
Compiled with gcc (all CI has) into a temporary folder."""
from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from firmware_interface import protocol as p
from firmware_interface.c_firmware import FIRMWARE, RIG_DIR, SANITIZE, compile_c

HERE = Path(__file__).resolve().parent
#: bounded: about 1.5 s with the sanitizers on the shared 2-core machine
FUZZ_ITERATIONS = 50_000
FUZZ_SEED = 20261123
#: the fake HAL's rig (test_rig_fw.c: test_config): 2 servos, raw limits per channel, 2 strain + 1 load channels
TEST_RIG = {"n_servo": 2, "min_raw": (800.0, 800.0), "max_raw": (2200.0, 2000.0), "channels": 5}
#: TELEMETRY sample bytes of TEST_RIG: time + 5 channels, 4 bytes each; (502 - 5) // 24 fit a frame
TEST_MAX_PER_FRAME = (p.MAX_PAYLOAD_BYTES - 5) // (4 * (1 + TEST_RIG["channels"]))


@pytest.fixture(scope="module")
def program(tmp_path_factory) -> Path:
    return compile_c([HERE / "test_rig_fw.c", RIG_DIR / "rig_fw.c", FIRMWARE / "mms_proto.c"],
                     tmp_path_factory.mktemp("rig_fw") / "test_rig_fw", "-g", "-O1", *SANITIZE)


def test_the_firmware_unit_tests_pass_under_sanitizers(program):
    result = subprocess.run([str(program), "units"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["failed"] == 0 and summary["checks"] >= 250


def _expected_reply(vector: dict) -> list[list[int]]:
    """What docs/protocol.md says the device answers to one frame of vectors.json, as [type, msg_type, seq, reason]."""
    type_id, seq, fields = vector["type_id"], vector["seq"], vector["fields"]
    nack = lambda reason: [[p.T_NACK, type_id, seq, reason]]
    if type_id not in p.REQUEST_TYPES:
        return nack(p.NACK_NOT_A_REQUEST)
    if type_id == p.T_HELLO:
        return [[p.T_DEVICE_INFO, 0, 0, 0]]
    if type_id == p.T_HEARTBEAT:
        return [[p.T_HEARTBEAT, 0, 0, 0]]
    if type_id == p.T_GET_LINK_STATS:
        return [[p.T_LINK_STATS, 0, 0, 0]]
    if type_id == p.T_SETPOINTS:
        raw = [math.nan if v is None else v for v in fields["raw"]]
        if len(raw) != TEST_RIG["n_servo"]:
            return nack(p.NACK_CHANNEL_COUNT)
        inside = all(lo <= v <= hi for v, lo, hi in zip(raw, TEST_RIG["min_raw"], TEST_RIG["max_raw"]))
        return [] if inside else nack(p.NACK_OUT_OF_RANGE)
    if type_id == p.T_CONFIGURE:
        ok = (1 <= fields["sample_rate_hz"] <= 20_000 and 1 <= fields["samples_per_frame"] <= TEST_MAX_PER_FRAME
              and fields["watchdog_ms"] >= 1)
        return [[p.T_ACK, type_id, seq, 0]] if ok else nack(p.NACK_BAD_CONFIG)
    return [[p.T_ACK, type_id, seq, 0]]                  # ESTOP, ESTOP_RESET (no button held)


def test_every_protocol_vector_is_received_and_answered_as_the_protocol_says(program):
    vectors = json.loads((FIRMWARE.parent / "vectors.json").read_text())["vectors"]
    result = subprocess.run([str(program), "vectors"], input="".join(v["wire_hex"] + "\n" for v in vectors),
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    outcomes = [json.loads(line) for line in result.stdout.splitlines()]
    assert len(outcomes) == len(vectors)
    kinds = set()
    for vector, outcome in zip(vectors, outcomes):
        assert (outcome["frames"], outcome["errors"]) == (1, 0), vector["name"]
        assert outcome["replies"] == _expected_reply(vector), vector["name"]
        kinds.add(vector["type_id"])
    assert {p.T_HELLO, p.T_SETPOINTS, p.T_CONFIGURE, p.T_TELEMETRY, p.T_LINK_STATS} <= kinds


def test_fuzzing_the_firmware_receiver_under_sanitizers_finds_nothing(program):
    """Random bytes, random chunking, requests with payloads of random size, a bit flipped or another version,
    clock steps (and stalls), the button toggled, setpoints interpolated: no sanitizer report, every frame sent
    decodes, the servo outputs never leave their raw limits (checked in the harness after every input)."""
    result = subprocess.run([str(program), "fuzz", str(FUZZ_SEED), str(FUZZ_ITERATIONS)], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0 and result.stderr == "", result.stderr[-3000:]
    summary = json.loads(result.stdout)
    assert summary["iterations"] == FUZZ_ITERATIONS
    # every path was taken: good frames handled, bad runs counted, frames sent, the catch-up after a stall
    assert summary["frames"] > 1000 and summary["errors"] > 1000 and summary["sent"] > 1000
    assert summary["overruns"] > 0
