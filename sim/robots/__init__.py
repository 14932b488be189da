"""Robot registry: TOML robot configs -> :class:`sim.model.Model`.

A robot config has a ``[robot]`` table whose ``kind`` selects a builder module, imported lazily;
each builder module exposes ``build(config: dict, path) -> Model`` (path: the config file, for relative
file names and error messages). Kinds: see :data:`KINDS`.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from ..config import ConfigError, load_toml, require
from ..model import Model

#: kind -> module implementing ``build(config, path) -> Model``.
KINDS: dict[str, str] = {
    "urdf": "sim.robots.urdf_robot",
    "flapper": "sim.robots.flapper",
    "raybot": "sim.robots.raybot",
}


def load_robot(path: str | Path) -> Model:
    """Read a robot TOML file and build its Model (one-line ConfigError on any problem)."""
    return build_robot(load_toml(path), path)


def build_robot(config: dict[str, Any], path: str | Path | None = None) -> Model:
    """Build a Model from an already-parsed robot table (e.g. modified by the server's ``set``)."""
    robot = require(config, "robot", dict, path=path)
    kind = require(robot, "kind", str, path=path, prefix="robot", expected=f"one of {sorted(KINDS)}")
    if kind not in KINDS:
        raise ConfigError(path, "robot.kind", f"unknown kind {kind!r}, expected one of {sorted(KINDS)}")
    module = importlib.import_module(KINDS[kind])
    model = module.build(config, path)
    if not isinstance(model, Model):
        raise ConfigError(path, "robot.kind", f"builder {KINDS[kind]} returned {type(model).__name__}, not Model")
    return model


__all__ = ["KINDS", "load_robot", "build_robot"]
