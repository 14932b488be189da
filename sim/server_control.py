"""The control protocol of ``mms serve``: request bytes to a checked command, a reply map to bytes.

Pure functions, no sockets (the transport is in :mod:`sim.server`). Requests and replies are read and written
as every server of the project does (sim/control.py); this module adds the simulator's commands and checks their
arguments, raising :class:`sim.control.ControlError`, which the server turns into an error reply.
"""
from __future__ import annotations

import copy
import math
from typing import Any

from sim import control
from sim.config import ConfigError, short_repr
from sim.control import ControlError
from sim.robots import check_robot

#: command -> (its arguments, what it does); the reply of ``help`` and the table of docs/messages.md.
COMMANDS: dict[str, tuple[str, str]] = {
    "start": ("", "start the simulation (from idle, or from paused like resume)"),
    "pause": ("", "stop advancing simulated time; the state stream stops, sim/status goes on"),
    "resume": ("", "continue after pause; real time is re-anchored at the current state"),
    "reset": ("", "t = 0, initial state; the next sim/state carries joint_names and actuated"),
    "step": ("n: int >= 1 (default 1)", "advance n publish periods, publishing each state (lockstep mode, "
                                        "or any mode while idle or paused); the reply comes after the last"),
    "set": ("key: dotted str, value", "change a robot-config parameter; the model is rebuilt and the "
                                       "simulation reset; a bad value is refused and the old model kept"),
    "get": ("what: schema | joint_names | config | status", "read the message schemas, joint names, the "
                                                             "current robot config or the latest status"),
    "help": ("", "list the commands"),
    "shutdown": ("", "publish a last sim/status (state stopped) and exit"),
}

GET_WHAT = ("schema", "joint_names", "config", "status")
MAX_STEP_PERIODS = 100_000          # one request may advance at most this many publish periods


def parse_request(frames: list[bytes]) -> dict[str, Any]:
    """The request map of a received message, with ``cmd`` checked against :data:`COMMANDS` (sim/control.py)."""
    return control.parse_request(frames, COMMANDS)


def step_count(request: dict[str, Any]) -> int:
    """The ``n`` of a ``step`` request (default 1), checked."""
    n = request.get("n", 1)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_STEP_PERIODS:
        raise ControlError(f'"n" is {n!r}, expected an integer from 1 to {MAX_STEP_PERIODS}')
    return n


def get_what(request: dict[str, Any]) -> str:
    """The ``what`` of a ``get`` request, checked."""
    what = request.get("what")
    if what not in GET_WHAT:
        raise ControlError(f'"what" is {what!r}, expected one of {", ".join(GET_WHAT)}')
    return what


def set_arguments(request: dict[str, Any]) -> tuple[str, Any]:
    """The ``key`` and ``value`` of a ``set`` request, checked for type (the model builder checks meaning)."""
    key = request.get("key")
    if not isinstance(key, str) or not key or any(not part for part in key.split(".")):
        raise ControlError(f'"key" is {key!r}, expected a dotted key of the robot config like "joints.j1.k"')
    if "value" not in request:
        raise ControlError('"value" is missing')
    value = request["value"]
    if not _is_toml_value(value):
        raise ControlError(f'"value" {value!r} is not a TOML value (number, string, boolean, array or table)')
    return key, value


def _is_toml_value(value: Any) -> bool:
    if value is None or isinstance(value, bytes):
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, list):
        return all(_is_toml_value(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_toml_value(v) for k, v in value.items())
    return False


def with_value(config: dict[str, Any], key: str, value: Any) -> tuple[dict[str, Any], Any]:
    """A deep copy of ``config`` with the dotted ``key`` set to ``value``, and the value it replaces.

    The key must exist already: a misspelt key would otherwise be added, ignored by the builder, and the user
    would believe a parameter changed that did not. The changed config must pass the robot file's schema
    (:func:`sim.robots.check_robot`, the check every robot file passes before it is built).
    """
    parts = key.split(".")
    changed = copy.deepcopy(config)
    table = changed
    for depth, part in enumerate(parts[:-1]):
        child = table.get(part) if isinstance(table, dict) else None
        if not isinstance(child, dict):
            where = ".".join(parts[:depth + 1])
            raise ControlError(f"{key}: {where} is not a table of the robot config")
        table = child
    if parts[-1] not in table:
        known = ", ".join(sorted(table)) or "none"
        raise ControlError(f"{key}: no such key in the robot config (keys here: {known})")
    previous = table[parts[-1]]
    table[parts[-1]] = value
    try:
        check_robot(changed)
    except ConfigError as exc:
        raise ControlError(f"{key} = {short_repr(value)} refused, model unchanged: {exc}") from None
    return changed, previous
