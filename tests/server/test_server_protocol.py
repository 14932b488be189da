"""The control protocol of `mms serve` as pure functions (sim/server_control.py): any bytes give a request or a
ControlError, never another exception; `set` edits a copy of the config and refuses unknown keys."""
from __future__ import annotations

import datetime

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.control import MAX_ERROR_CHARS, ControlError, encode_reply, error_reply
from sim.server_control import COMMANDS, parse_request, step_count, with_value

msgpack_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1) | st.floats() | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_to_a_request_or_a_control_error(data):
    try:
        request = parse_request([data])
    except ControlError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        assert isinstance(request, dict) and request["cmd"] in COMMANDS


@settings(max_examples=300, deadline=None)
@given(msgpack_values)
def test_any_msgpack_value_but_a_command_map_is_refused(value):
    frames = [msgpack.packb(value, use_bin_type=True)]
    if isinstance(value, dict) and isinstance(value.get("cmd"), str) and value["cmd"] in COMMANDS:
        assert parse_request(frames)["cmd"] == value["cmd"]
    else:
        with pytest.raises(ControlError):
            parse_request(frames)


def test_several_frames_are_refused():
    with pytest.raises(ControlError, match="one frame"):
        parse_request([msgpack.packb({"cmd": "help"}), b""])


def test_step_count_bounds():
    assert step_count({"cmd": "step"}) == 1 and step_count({"cmd": "step", "n": 7}) == 7
    for n in (0, -3, 2.0, "2", True, 10**12):
        with pytest.raises(ControlError):
            step_count({"cmd": "step", "n": n})


def test_with_value_changes_a_copy_and_refuses_unknown_keys():
    config = {"robot": {"kind": "urdf", "urdf": "pendulum.urdf", "gravity": [0.0, 0.0, -9.81]},
              "joints": {"hinge": {"rest": 0.0}}}
    changed, previous = with_value(config, "joints.hinge.rest", 0.5)
    assert previous == 0.0 and changed["joints"]["hinge"]["rest"] == 0.5
    assert config["joints"]["hinge"]["rest"] == 0.0                    # the original is untouched
    with pytest.raises(ControlError, match="no such key"):
        with_value(config, "joints.hinge.stiffness", 1.0)
    with pytest.raises(ControlError, match="not a table"):
        with_value(config, "robot.kind.name", 1.0)
    with pytest.raises(ControlError, match="not a table"):
        with_value(config, "nothing.here", 1.0)


def test_replies_always_encode_and_errors_are_one_bounded_line():
    reply = msgpack.unpackb(encode_reply({"ok": True, "when": datetime.date(2026, 1, 2)}), raw=False)
    assert reply == {"ok": True, "when": "2026-01-02"}
    error = error_reply("first line\nsecond line " + "x" * 1000)["error"]
    assert "\n" not in error and len(error) == MAX_ERROR_CHARS and error.startswith("first line second line")
