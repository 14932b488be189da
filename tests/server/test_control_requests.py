"""sim/control.py, the one reader of control requests for the simulator, the driver and the recorder: each kind
of malformed request is refused with its reason and a one-line error; a well-formed one comes back as its map."""
from __future__ import annotations

import msgpack
import pytest

from sim.control import ControlError, parse_request

COMMANDS = {"start": "", "stop": ""}


def pack(value) -> bytes:
    return msgpack.packb(value, use_bin_type=True)


@pytest.mark.parametrize("frames, reason", [
    ([pack({"cmd": "start"}), b""], "frames"),
    ([], "frames"),
    ([pack({"cmd": "start", "pad": "x" * 100})], "too_long"),
    ([b"\xc1"], "not_msgpack"),
    ([pack([1, 2])], "not_a_request"),
    ([pack({"command": "start"})], "not_a_request"),
    ([pack({"cmd": 5})], "not_a_request"),
    ([pack({"cmd": "dance" * 10})], "unknown_command"),
])
def test_each_malformed_request_has_its_reason(frames, reason):
    with pytest.raises(ControlError) as refused:
        parse_request(frames, COMMANDS, max_bytes=64)
    assert refused.value.reason == reason
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 200
    if reason == "unknown_command":
        assert "start, stop" in str(refused.value)


def test_a_request_is_its_map():
    assert parse_request([pack({"cmd": "stop", "n": 3})], COMMANDS) == {"cmd": "stop", "n": 3}
