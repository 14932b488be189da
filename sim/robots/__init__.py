"""Robot registry: TOML robot configs -> :class:`sim.model.Model`.

A robot config has a ``[robot]`` table whose ``kind`` selects a builder module, imported lazily;
each builder module exposes ``config_schema(config, path) -> dict`` (the JSON Schema of the whole file for its
kind, checked before anything is built: sim/robots/schema.py) and ``build(config: dict, path) -> Model`` (path:
the config file, for relative file names and error messages). Kinds: see :data:`KINDS`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config import ConfigError, load_toml
from ..model import Model
from .schema import check_robot_config

#: kind -> module implementing ``build(config, path) -> Model``.
KINDS: dict[str, str] = {
    "urdf": "sim.robots.urdf_robot",
    "flapper": "sim.robots.flapper",
    "raybot": "sim.robots.raybot",
    "fish": "sim.robots.fish",
    "cosserat": "sim.robots.cosserat",
    "biped": "sim.robots.biped",
    "flapper2link": "sim.robots.flapper2link",
    "clemens": "sim.robots.clemens",
}


def check_robot(config: dict[str, Any], path: str | Path | None = None) -> None:
    """Check a parsed robot file against its kind's schema (one-line ConfigError), without building it."""
    check_robot_config(config, path, KINDS)


def load_robot(path: str | Path) -> Model:
    """Read a robot TOML file and build its Model (one-line ConfigError on any problem)."""
    return build_robot(load_toml(path), path)


def build_robot(config: dict[str, Any], path: str | Path | None = None) -> Model:
    """Build a Model from an already-parsed robot table (e.g. modified by the server's ``set``), checked first
    against its kind's schema."""
    module = check_robot_config(config, path, KINDS)
    model = module.build(config, path)
    if not isinstance(model, Model):
        raise ConfigError(path, "robot.kind", f"builder {module.__name__} returned {type(model).__name__}, not Model")
    return model


def build_rigid_robot(config: dict[str, Any], path: str | Path | None, refused: str) -> Model:
    """:func:`build_robot` for the tools that take rigid trees only: a model with modal (flexible) bodies is a
    one-line ConfigError, ``modal (flexible) bodies <refused>`` (``refused`` says why this tool cannot take them)."""
    model = build_robot(config, path)
    if model.flexible is not None:
        raise ConfigError(path, "wing.body" if "wing" in config else "robot.kind", f"modal (flexible) bodies {refused}")
    return model


__all__ = ["KINDS", "check_robot", "load_robot", "build_robot", "build_rigid_robot"]
