"""Endpoints of the ZeroMQ sockets, from ``configs/network.toml`` (architecture.md, "Default endpoints")."""
from __future__ import annotations

import sys
from dataclasses import dataclass
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
