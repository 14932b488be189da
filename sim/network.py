"""Endpoints of the ZeroMQ sockets, from ``configs/network.toml`` (architecture.md, "Default endpoints")."""
from __future__ import annotations

import socket
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from sim.config import ConfigError, load_toml, require

DEFAULT_NETWORK_CONFIG = Path(__file__).resolve().parent.parent / "configs" / "network.toml"
_LOOPBACK_HOSTS = ("127.", "localhost", "[::1]", "ipc://", "inproc://")


@dataclass(frozen=True)
class Endpoints:
    sim_pub: str = "tcp://127.0.0.1:5556"
    sim_control: str = "tcp://127.0.0.1:5557"
    driver_pub: str = "tcp://127.0.0.1:5558"
    driver_control: str = "tcp://127.0.0.1:5559"
    recorder_control: str = "tcp://127.0.0.1:5560"


def load_endpoints(path: str | Path | None = None) -> Endpoints:
    """Endpoints from a network TOML file; missing sections or keys keep their defaults."""
    path = Path(path) if path is not None else DEFAULT_NETWORK_CONFIG
    if not path.exists() and path == DEFAULT_NETWORK_CONFIG:
        return Endpoints()
    table = load_toml(path)
    defaults = Endpoints()
    values = {}
    for section, key, field in (("sim", "pub", "sim_pub"), ("sim", "control", "sim_control"),
                                ("driver", "pub", "driver_pub"), ("driver", "control", "driver_control"),
                                ("recorder", "control", "recorder_control")):
        sub = table.get(section, {})
        if not isinstance(sub, dict):
            raise ConfigError(path, section, "expected a table")
        values[field] = require(sub, key, str, path=path, prefix=section, default=getattr(defaults, field),
                                check=lambda s: "://" in s, expected="a ZeroMQ endpoint like tcp://127.0.0.1:5556")
    return Endpoints(**values)


def warn_if_not_loopback(endpoint: str, what: str) -> None:
    """Say loudly when a socket binds beyond loopback: there is no authentication yet."""
    address = endpoint.split("://", 1)[-1]
    if not (endpoint.startswith(("ipc://", "inproc://")) or address.startswith(_LOOPBACK_HOSTS)):
        print(f"WARNING: {what} binds to {endpoint}, beyond loopback, WITHOUT authentication: "
              f"anyone on this network can read and command it", file=sys.stderr, flush=True)


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


def write_loopback_network(path: str | Path) -> dict[str, str]:
    """A network TOML at ``path`` on free loopback ports (a demo or a test never collides with a running
    experiment or with each other); returns its endpoints by :class:`Endpoints` field name."""
    endpoints = Endpoints(*(f"tcp://127.0.0.1:{port}" for port in free_loopback_ports(5)))
    Path(path).write_text(f'[sim]\npub = "{endpoints.sim_pub}"\ncontrol = "{endpoints.sim_control}"\n\n'
                          f'[driver]\npub = "{endpoints.driver_pub}"\ncontrol = "{endpoints.driver_control}"\n\n'
                          f'[recorder]\ncontrol = "{endpoints.recorder_control}"\n')
    return asdict(endpoints)
