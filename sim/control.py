"""Control requests, the one way every REP server of the project reads them: ``mms serve`` (sim/server.py),
``mms drive`` (hil/drive/driver.py) and ``mms record`` (hil/recording/recorder.py). Pure functions, no sockets.

A request is one ZeroMQ frame holding a MessagePack map ``{"cmd": NAME, ...arguments}``; the reply is one frame
holding ``{"ok": true, ...}`` or ``{"ok": false, "error": "one line"}`` (docs/messages.md, "Control commands of `mms serve`").
Anything else a client sends (several frames, too many bytes, bytes that are not MessagePack, a value that is not
a map, a map without a string ``cmd``, an unknown command, arguments of the wrong type) raises
:class:`ControlError`; its ``reason`` names the kind of fault (the driver counts refusals by it) and its message
becomes the reply's ``error``. It lives in ``sim`` because the simulator imports nothing of the other packages,
and all three servers may import ``sim``.
"""
from __future__ import annotations

import datetime
from typing import Any, Mapping

import msgpack

#: a request longer than this is refused unread, bytes (the longest real one, a ``set`` of a table, is ~1 kB)
MAX_REQUEST_BYTES = 65536
#: error replies are one line of at most this many characters
MAX_ERROR_CHARS = 300
#: the most characters of an unknown command echoed in the error reply
ECHO_CHARS = 40

#: ControlError reasons of a request that is not a well-formed command (the servers add their own, e.g. "refused")
REASONS = ("frames", "too_long", "not_msgpack", "not_a_request", "unknown_command", "bad_argument")


class ControlError(ValueError):
    """A request that cannot be served: the message is the reply's ``error``, ``reason`` its kind."""

    def __init__(self, message: str, reason: str = "bad_argument"):
        super().__init__(message)
        self.reason = reason


def one_line(text: str) -> str:
    """``text`` as a single line of bounded length, for error replies and stderr reports."""
    line = " ".join(str(text).split())
    return line if len(line) <= MAX_ERROR_CHARS else line[:MAX_ERROR_CHARS - 3] + "..."


def parse_request(frames: list[bytes], commands: Mapping[str, Any], *,
                  max_bytes: int = MAX_REQUEST_BYTES) -> dict[str, Any]:
    """The request map of a received message, with ``cmd`` one of ``commands`` (the server's command table);
    ControlError otherwise. The arguments are the server's to check."""
    names = ", ".join(commands)
    if len(frames) != 1:
        raise ControlError(f"expected one frame holding a MessagePack map, got {len(frames)} frames", "frames")
    if len(frames[0]) > max_bytes:
        raise ControlError(f"request of {len(frames[0])} bytes, at most {max_bytes}", "too_long")
    try:
        request = msgpack.unpackb(bytes(frames[0]), raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated exception types on bad bytes
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ControlError(f"request is not MessagePack ({detail})", "not_msgpack") from None
    if not isinstance(request, dict):
        raise ControlError(f'request is a MessagePack {type(request).__name__}, expected a map {{"cmd": NAME}}; '
                           f"commands: {names}", "not_a_request")
    if "cmd" not in request:
        raise ControlError(f'request has no "cmd" key; commands: {names}', "not_a_request")
    cmd = request["cmd"]
    if not isinstance(cmd, str):
        raise ControlError(f'"cmd" is a {type(cmd).__name__}, expected a string; commands: {names}',
                           "not_a_request")
    if cmd not in commands:
        raise ControlError(f"unknown command {cmd[:ECHO_CHARS]!r}; commands: {names}", "unknown_command")
    return request


def _plain(value: Any) -> Any:
    """A MessagePack-able stand-in for values msgpack cannot pack (TOML dates and times, numpy scalars)."""
    if isinstance(value, (datetime.date, datetime.time)):
        return value.isoformat()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def encode_reply(reply: dict[str, Any]) -> bytes:
    """The bytes of a reply map; a reply that cannot be packed becomes an error reply, never an exception."""
    try:
        return msgpack.packb(reply, use_bin_type=True, default=_plain)
    except Exception as exc:  # a value the packer refuses: still answer, so the client never waits forever
        return msgpack.packb({"ok": False, "error": one_line(f"reply could not be encoded: {exc}")},
                             use_bin_type=True)


def error_reply(message: str) -> dict[str, Any]:
    return {"ok": False, "error": one_line(message)}
