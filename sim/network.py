"""ZeroMQ endpoints and their security, from ``configs/network.toml`` (architecture.md, "Default endpoints").

Every process opens its sockets through :func:`open_socket`, the one place where a socket is bound or connected:

* a bind beyond loopback is refused (a :class:`sim.config.ConfigError`, which ``mms`` prints in one line and exits
  2) unless the network file configures ZeroMQ CURVE keys (``mms keys`` creates them, docs/security.md);
* with keys, every bound socket is a CURVE server and a ``zmq.auth`` ZAP handler admits only the public keys of
  the ``[clients.*]`` allow-list, so an unknown client completes no handshake: no data on a PUB, no reply on a REP;
  every connecting socket is a CURVE client with this host's ``client_key``;
* a bound REP socket knows each request's client from the ZAP ``User-Id`` (the client's Z85 public key) and refuses
  anything but :data:`OBSERVER_COMMANDS` to a client whose role is ``observer``.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from sim.config import EXPECTED, ConfigError, check_schema, load_toml, refuse_other_kind, shipped_config

DEFAULT_NETWORK_CONFIG = shipped_config("network", "network")
#: transports that never leave the host
_LOCAL_TRANSPORTS = ("ipc://", "inproc://")
_LOOPBACK_NAMES = ("localhost", "[::1]", "::1")
#: TCP ports a socket may name (0 is "any port", which a fixed endpoint never means)
PORT_RANGE = (1, 65535)
ROLES = ("operator", "observer")
#: the control commands a client with the observer role may send (to `mms serve`, `mms drive`, `mms record`)
OBSERVER_COMMANDS = frozenset({"status", "get", "help"})
#: the length of a Z85-encoded CURVE key (32 bytes)
Z85_KEY_LENGTH = 40

_ENDPOINT = {"type": "string", "pattern": "^(tcp|ipc|inproc)://.+$",
             EXPECTED: "an endpoint string tcp://HOST:PORT, ipc://PATH or inproc://NAME"}
NETWORK_SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "sim": {"type": "object", "additionalProperties": False,
                "properties": {"pub": _ENDPOINT, "control": _ENDPOINT}},
        "driver": {"type": "object", "additionalProperties": False,
                   "properties": {"pub": _ENDPOINT, "control": _ENDPOINT}},
        "recorder": {"type": "object", "additionalProperties": False, "properties": {"control": _ENDPOINT}},
        "security": {"type": "object", "additionalProperties": False, "required": ["server_key"],
                     "properties": {"server_key": {"type": "string", "minLength": 1},
                                    "client_key": {"type": "string", "minLength": 1}}},
        "clients": {"type": "object", "additionalProperties": {
            "type": "object", "additionalProperties": False, "required": ["public_key", "role"],
            "properties": {"public_key": {"type": "string", "minLength": Z85_KEY_LENGTH,
                                          "maxLength": Z85_KEY_LENGTH},
                           "role": {"enum": list(ROLES)}}}},
    },
}


@dataclass(frozen=True)
class Curve:
    """The CURVE keys of this host (raw Z85 bytes as ``zmq.auth.load_certificate`` returns them) and the allow-list.

    ``server_secret`` is None on a host that only connects (it holds the server's public key file only).
    ``clients`` maps a client's Z85 public key to its (name, role).
    """
    server_public: bytes
    server_secret: bytes | None
    client_public: bytes | None
    client_secret: bytes | None
    clients: dict[bytes, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Endpoints:
    sim_pub: str = "tcp://127.0.0.1:5556"
    sim_control: str = "tcp://127.0.0.1:5557"
    driver_pub: str = "tcp://127.0.0.1:5558"
    driver_control: str = "tcp://127.0.0.1:5559"
    recorder_control: str = "tcp://127.0.0.1:5560"
    #: the keys and allow-list of the network file's [security] and [clients.*]; None: no authentication
    curve: Curve | None = None

    def addresses(self) -> dict[str, str]:
        """The five endpoints by field name."""
        return {name: getattr(self, name) for name in _ENDPOINT_KEYS.values()}


#: (section, key) in the network file -> Endpoints field
_ENDPOINT_KEYS = {("sim", "pub"): "sim_pub", ("sim", "control"): "sim_control", ("driver", "pub"): "driver_pub",
                  ("driver", "control"): "driver_control", ("recorder", "control"): "recorder_control"}


def load_endpoints(path: str | Path | None = None) -> Endpoints:
    """Endpoints (and CURVE keys) from a network TOML file; missing sections or keys keep their defaults.

    The file is checked against :data:`NETWORK_SCHEMA` first: an unknown key (with a did-you-mean), a wrong type,
    a TCP port outside 1..65535 or an unreadable key file is a one-line :class:`ConfigError`.
    """
    path = Path(path) if path is not None else DEFAULT_NETWORK_CONFIG
    if not path.exists() and path == DEFAULT_NETWORK_CONFIG:
        return Endpoints()
    table = _load_text_toml(path)
    refuse_other_kind(table, path, "network")
    check_schema(table, NETWORK_SCHEMA, path)
    values = {}
    for (section, key), name in _ENDPOINT_KEYS.items():
        endpoint = table.get(section, {}).get(key)
        if endpoint is not None:
            _check_port(endpoint, path, f"{section}.{key}")
            values[name] = endpoint
    return Endpoints(**values, curve=_load_curve(table, path))


def _load_text_toml(path: Path) -> dict[str, Any]:
    """:func:`load_toml`, with a binary or non-UTF-8 file named as such rather than a decode traceback."""
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(path, None, f"not a UTF-8 text file (byte {exc.start}), expected a TOML file") from None
    except OSError:
        pass    # load_toml names a missing file or a directory
    return load_toml(path)


def _check_port(endpoint: str, path: Path, key: str) -> None:
    if not endpoint.startswith("tcp://"):
        return
    port = endpoint.rsplit(":", 1)[-1]
    if not (port.isdigit() and PORT_RANGE[0] <= int(port) <= PORT_RANGE[1]):
        raise ConfigError(path, key, f"got {endpoint!r}, expected a TCP port in {PORT_RANGE[0]}..{PORT_RANGE[1]}")


def _load_curve(table: dict[str, Any], path: Path) -> Curve | None:
    security = table.get("security")
    clients = table.get("clients", {})
    if security is None:
        if clients:
            raise ConfigError(path, "clients", "an allow-list needs keys: add [security] server_key (mms keys)")
        return None
    server_public, server_secret = _load_key(security["server_key"], path, "security.server_key")
    client_public = client_secret = None
    if "client_key" in security:
        client_public, client_secret = _load_key(security["client_key"], path, "security.client_key")
        if client_secret is None:
            raise ConfigError(path, "security.client_key", "holds no secret key, expected a NAME.key_secret file")
    allowed = {}
    for name, client in clients.items():
        key = client["public_key"].encode("ascii")
        try:
            zmq.utils.z85.decode(key)
        except (ValueError, KeyError):
            raise ConfigError(path, f"clients.{name}.public_key", "not a Z85-encoded CURVE key") from None
        allowed[key] = (name, client["role"])
    return Curve(server_public, server_secret, client_public, client_secret, allowed)


def _load_key(value: str, path: Path, key: str) -> tuple[bytes, bytes | None]:
    """A certificate written by ``mms keys`` (``zmq.auth``); a relative path is taken from the network file's folder."""
    cert = Path(os.path.expanduser(value))
    if not cert.is_absolute():
        cert = path.parent / cert
    try:
        return zmq.auth.load_certificate(cert)
    except (OSError, ValueError) as exc:
        raise ConfigError(path, key, f"cannot read the key file {cert}: {exc}") from None


def is_loopback(endpoint: str) -> bool:
    """True when ``endpoint`` cannot be reached from another host (ipc, inproc, 127.x, localhost, ::1)."""
    if endpoint.startswith(_LOCAL_TRANSPORTS):
        return True
    host = endpoint.split("://", 1)[-1].rsplit(":", 1)[0]
    return host in _LOOPBACK_NAMES or host.startswith("127.")


# ---------------------------------------------------------------------------------------------- sockets
class _NetworkSocket(zmq.Socket):
    """A socket opened by :func:`open_socket`: closing the last CURVE server socket of a context stops its ZAP
    handler, so that ``context.term()`` does not wait forever on the handler's own sockets."""

    _releases_authenticator: bool = False

    def close(self, linger: int | None = None) -> None:
        if self._releases_authenticator and not self.closed:
            self._releases_authenticator = False
            _release_authenticator(self.context)
        super().close(linger)


class _RoleCheckedSocket(_NetworkSocket):
    """A bound REP socket that answers an observer's non-read-only request itself (an error reply) and hides it
    from the caller (``recv`` raises ``zmq.Again``, as if nothing had come). The check is made on a message's
    first frame, before the caller sees any of it; an observer's request must be one frame."""

    _clients: dict = {}
    _in_message: bool = False       # True between the first and the last frame of an admitted message

    def recv(self, flags: int = 0, copy: bool = True, track: bool = False):
        frame = super().recv(flags, copy=False, track=track)
        more = bool(self.get(zmq.RCVMORE))
        if not self._in_message and not self._allowed(frame, more):
            while more:             # the rest of the refused message: parts of a message arrive together
                super().recv(copy=False)
                more = bool(self.get(zmq.RCVMORE))
            super().send(msgpack.packb({"ok": False, "error": self._refusal(frame)}, use_bin_type=True))
            raise zmq.Again("request refused to an observer")
        self._in_message = more
        return frame.bytes if copy else frame

    def _allowed(self, frame: zmq.Frame, more: bool) -> bool:
        if self._client(frame)[1] != "observer":
            return True
        return not more and _command(frame.bytes) in OBSERVER_COMMANDS

    def _client(self, frame: zmq.Frame) -> tuple[str, str]:
        """(name, role) of the request's sender from its ZAP User-Id (its Z85 public key)."""
        try:
            user = frame.get("User-Id")
        except zmq.ZMQError:    # no metadata: not a CURVE connection, which the ZAP handler never lets through
            return "unauthenticated", "observer"
        return self._clients.get(user.encode("ascii"), ("unknown", "observer"))

    def _refusal(self, frame: zmq.Frame) -> str:
        return (f"client {self._client(frame)[0]!r} has the observer role: {_command(frame.bytes)!r} refused "
                f"(allowed: {', '.join(sorted(OBSERVER_COMMANDS))})")


def _command(raw: bytes) -> str | None:
    try:
        request = msgpack.unpackb(raw, raw=False)
    except Exception:  # noqa: BLE001 - msgpack raises several unrelated types; undecodable has no command
        return None
    cmd = request.get("cmd") if isinstance(request, dict) else None
    return cmd if isinstance(cmd, str) else None


class _AllowList:
    """The ZAP credentials provider: a client is admitted iff its Z85 public key is in the network file."""

    def __init__(self, clients: dict[bytes, tuple[str, str]]):
        self.clients = clients

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.clients


#: id(context) -> [ThreadAuthenticator, number of open CURVE server sockets]
_AUTHENTICATORS: dict[int, list] = {}


def _acquire_authenticator(context: zmq.Context, curve: Curve) -> None:
    entry = _AUTHENTICATORS.get(id(context))
    if entry is None:
        authenticator = ThreadAuthenticator(context)
        authenticator.start()
        authenticator.configure_curve_callback(domain="*", credentials_provider=_AllowList(curve.clients))
        entry = _AUTHENTICATORS[id(context)] = [authenticator, 0]
    entry[1] += 1


def _release_authenticator(context: zmq.Context) -> None:
    entry = _AUTHENTICATORS.get(id(context))
    if entry is None:
        return
    entry[1] -= 1
    if entry[1] <= 0:
        del _AUTHENTICATORS[id(context)]
        entry[0].stop()


def open_socket(context: zmq.Context, kind: int, endpoint: str, *, bind: bool, curve: Curve | None, what: str,
                options: dict[int, Any] | None = None) -> zmq.Socket:
    """A socket of ``kind`` with ``options`` set, bound to or connected to ``endpoint``, secured by ``curve``.

    ``what`` names the socket in errors (``"sim.pub"``). A bind beyond loopback without keys, a bind without the
    server's secret key, a connect with keys but no client key and a failed bind are one-line ConfigErrors.
    """
    if bind and curve is None and not is_loopback(endpoint):
        raise ConfigError(None, what, f"refusing to bind {endpoint} beyond loopback without authentication: "
                                      f"create CURVE keys with `mms keys` and name them in the network file "
                                      f"[security] (docs/security.md)")
    if curve is not None and bind and curve.server_secret is None:
        raise ConfigError(None, what, f"binding {endpoint} needs the server's secret key: [security] server_key "
                                      f"must name a .key_secret file")
    if curve is not None and not bind and curve.client_secret is None:
        raise ConfigError(None, what, f"connecting to {endpoint} needs this host's client key: "
                                      f"[security] client_key")
    socket_class = _RoleCheckedSocket if (bind and curve is not None and kind == zmq.REP) else _NetworkSocket
    sock = context.socket(kind, socket_class=socket_class)
    try:
        for option, value in (options or {}).items():
            sock.setsockopt(option, value)
        if curve is not None and bind:
            sock.curve_server = True
            sock.curve_publickey = curve.server_public
            sock.curve_secretkey = curve.server_secret
            _acquire_authenticator(context, curve)
            sock._releases_authenticator = True
            if socket_class is _RoleCheckedSocket:
                sock._clients = {key: value for key, value in curve.clients.items()}
        elif curve is not None:
            sock.curve_serverkey = curve.server_public
            sock.curve_publickey = curve.client_public
            sock.curve_secretkey = curve.client_secret
        if bind:
            sock.bind(endpoint)
        else:
            sock.connect(endpoint)
    except zmq.ZMQError as exc:
        sock.close(0)
        raise ConfigError(None, what, f"cannot {'bind' if bind else 'connect'} {endpoint}: {exc}") from None
    return sock


def free_loopback_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 now (all bound at once, so none is handed out twice)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind(("127.0.0.1", 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def write_loopback_network(path: str | Path, extra: str = "") -> dict[str, str]:
    """A network TOML at ``path`` on free loopback ports (a demo or a test never collides with a running
    experiment or with each other), with ``extra`` TOML appended (e.g. the ``[security]`` of ``mms keys``);
    returns its endpoints by :class:`Endpoints` field name."""
    endpoints = Endpoints(*(f"tcp://127.0.0.1:{port}" for port in free_loopback_ports(5)))
    Path(path).write_text(f'[sim]\npub = "{endpoints.sim_pub}"\ncontrol = "{endpoints.sim_control}"\n\n'
                          f'[driver]\npub = "{endpoints.driver_pub}"\ncontrol = "{endpoints.driver_control}"\n\n'
                          f'[recorder]\ncontrol = "{endpoints.recorder_control}"\n' + extra)
    return endpoints.addresses()
