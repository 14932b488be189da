"""The JSON Schema of robot files (configs/robots/*.toml), assembled from the pieces each part declares.

A robot file is checked against its schema before any builder reads it (:func:`check_robot_config`), so a
misspelt key, a wrong type or a value outside what the physics accepts is refused with one line naming the
file and the key (``sim.config.ConfigError``). The pieces:

- each builder module of :data:`sim.robots.KINDS` declares ``config_schema(config) -> dict``, the schema of
  the whole file for its kind (it uses :func:`robot_table` and :data:`SIMULATION` for the shared tables);
- motion and joint laws declare theirs in :data:`MOTION_LAWS` / :data:`JOINT_LAWS` (a new law registers
  itself with :func:`register_motion_law` / :func:`register_joint_law` from its own module);
- force models: ``gravity`` is in :data:`FORCES`; a ``"module:Class"`` plug-in contributes the class attribute
  ``CONFIG_SCHEMA`` (the JSON Schema of its keyword arguments, without ``type``), or, when it has none, the
  names of its constructor's parameters are the accepted keys (:func:`force_schema`).
Adding a robot kind, a law or a force plug-in therefore touches no file of this module's.
"""
from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path
from typing import Any

from ..config import (BOOLEAN, EXPECTED, ConfigError, array, check_schema, number, one_of, refuse_other_kind, string,
                      table)
from ..integrator_names import INTEGRATORS

#: Fastest actuation the models accept, Hz: the fastest insect wingbeats are near 1 kHz (midges); a faster
#: stroke or tail beat is a unit slip (rad/s for Hz, or an exponent), which would only make the solver diverge.
MAX_ACTUATION_HZ = 1000.0
MAX_OMEGA_RAD_S = 2.0 * math.pi * MAX_ACTUATION_HZ
#: Largest length, position or depth accepted, m: far beyond any robot or tank of this project, small enough
#: that a value in mm or µm written as m is caught.
MAX_LENGTH_M = 100.0
#: Largest mass, kg (a small car); larger is a unit slip.
MAX_MASS_KG = 1000.0
#: Largest material or fluid density, kg/m^3 (osmium is 22 590).
MAX_DENSITY_KG_M3 = 25_000.0
#: Largest gravity, m/s^2: Jupiter's surface gravity is 24.8; ten times that is a unit slip.
MAX_GRAVITY_M_S2 = 250.0
#: Largest joint angle, offset or phase, rad (several turns; larger loses float precision in sin/cos).
MAX_ANGLE_RAD = 100.0
#: Largest stiffness (N m/rad) and damping (N m s/rad) of a joint law: far beyond any compliant joint of these
#: robots (the flapper's are ~1e-2); a stiffer joint is a rigid one (model it fixed), and a larger value is a
#: unit slip.
MAX_STIFFNESS = 1e6
MAX_DAMPING = 1e4
#: Longest fixed time step, s: longer than any period the models resolve.
MAX_DT_S = 1.0
#: Longest run in periods or seconds that a config may ask for by default (a day of 1 kHz steps is ~1e8).
MAX_PERIODS = 1e6
MAX_DURATION_S = 86_400.0

#: Largest coefficient of a polynomial motion law (rad/s^k): beyond it the joint leaves any servo's reach at once.
MAX_POLYNOMIAL_COEFFICIENT = 1e6

BASE_MODES = ("floating", "free", "fixed", "tethered")

#: [simulation]: the defaults of `mms sim` / `mms serve` (sim/cli_sim.py, sim/server.py).
SIMULATION = table({
    "integrator": one_of(*INTEGRATORS),
    "dt": number(above=0.0, maximum=MAX_DT_S, expected=f"a time step in (0, {MAX_DT_S:g}] s"),
    "periods": number(above=0.0, maximum=MAX_PERIODS, expected=f"a number of periods in (0, {MAX_PERIODS:g}]"),
    "duration": number(above=0.0, maximum=MAX_DURATION_S, expected=f"a duration in (0, {MAX_DURATION_S:g}] s"),
})


def length(minimum: float | None = None, *, above: float | None = 0.0) -> dict[str, Any]:
    """A length in m: positive by default, at most :data:`MAX_LENGTH_M`."""
    if minimum is not None:
        return number(minimum, MAX_LENGTH_M, expected=f"a length in [{minimum:g}, {MAX_LENGTH_M:g}] m")
    return number(maximum=MAX_LENGTH_M, above=above, expected=f"a length in (0, {MAX_LENGTH_M:g}] m")


def position() -> dict[str, Any]:
    """A coordinate in m, either sign."""
    return number(-MAX_LENGTH_M, MAX_LENGTH_M, expected=f"a position in [-{MAX_LENGTH_M:g}, {MAX_LENGTH_M:g}] m")


def mass() -> dict[str, Any]:
    return number(above=0.0, maximum=MAX_MASS_KG, expected=f"a mass in (0, {MAX_MASS_KG:g}] kg")


def density(zero_allowed: bool = False) -> dict[str, Any]:
    """A density in kg/m^3, > 0 (>= 0 with ``zero_allowed``: no fluid)."""
    if zero_allowed:
        return number(0.0, MAX_DENSITY_KG_M3, expected=f"a density in [0, {MAX_DENSITY_KG_M3:g}] kg/m^3")
    return number(above=0.0, maximum=MAX_DENSITY_KG_M3, expected=f"a density in (0, {MAX_DENSITY_KG_M3:g}] kg/m^3")


def degrees(low: float = -360.0, high: float = 360.0) -> dict[str, Any]:
    return number(low, high, expected=f"an angle in [{low:g}, {high:g}] deg")


def angle() -> dict[str, Any]:
    return number(-MAX_ANGLE_RAD, MAX_ANGLE_RAD, expected=f"an angle in [-{MAX_ANGLE_RAD:g}, {MAX_ANGLE_RAD:g}] rad")


def stiffness(positive: bool = False) -> dict[str, Any]:
    """A joint stiffness in N m/rad, >= 0 (> 0 when ``positive``)."""
    if positive:
        return number(above=0.0, maximum=MAX_STIFFNESS, expected=f"a stiffness in (0, {MAX_STIFFNESS:g}] N m/rad")
    return number(0.0, MAX_STIFFNESS, expected=f"a stiffness in [0, {MAX_STIFFNESS:g}] N m/rad")


def damping() -> dict[str, Any]:
    return number(0.0, MAX_DAMPING, expected=f"a damping in [0, {MAX_DAMPING:g}] N m s/rad")


def frequency_hz(minimum: float | None = None) -> dict[str, Any]:
    """A frequency in Hz up to :data:`MAX_ACTUATION_HZ`: > 0, or >= ``minimum``."""
    if minimum is not None:
        return number(minimum, MAX_ACTUATION_HZ, expected=f"a frequency in [{minimum:g}, {MAX_ACTUATION_HZ:g}] Hz")
    return number(above=0.0, maximum=MAX_ACTUATION_HZ, expected=f"a frequency in (0, {MAX_ACTUATION_HZ:g}] Hz")


def robot_table(kind: str, properties: dict[str, Any], required=()) -> dict[str, Any]:
    """The [robot] table of a kind: ``kind``, ``name`` and the kind's own keys."""
    return table({"kind": {"const": kind}, "name": string(), **properties}, ["kind", *required])


def gravity_vector() -> dict[str, Any]:
    return array(number(-MAX_GRAVITY_M_S2, MAX_GRAVITY_M_S2), 3, 3,
                 expected=f"3 numbers, m/s^2, each in [-{MAX_GRAVITY_M_S2:g}, {MAX_GRAVITY_M_S2:g}]")


# ------------------------------------------------------------------------------------------- laws
#: Motion laws of actuated joints (sim.laws.motion_law_from_config): type -> schema of the other keys.
MOTION_LAWS: dict[str, dict[str, Any]] = {
    "constant": {"properties": {"value": angle()}},
    "sinusoid": {"properties": {"amplitude": angle(), "phase": angle(), "offset": angle(),
                                "omega": number(-MAX_OMEGA_RAD_S, MAX_OMEGA_RAD_S, expected=(
                                    f"an angular frequency in [-{MAX_OMEGA_RAD_S:.6g}, {MAX_OMEGA_RAD_S:.6g}] rad/s "
                                    f"({MAX_ACTUATION_HZ:g} Hz)"))},
                 "required": ["amplitude", "omega"]},
    "polynomial": {"properties": {"coefficients": array(
        number(-MAX_POLYNOMIAL_COEFFICIENT, MAX_POLYNOMIAL_COEFFICIENT), 1,
        expected=f"a non-empty array of numbers in [-{MAX_POLYNOMIAL_COEFFICIENT:g}, {MAX_POLYNOMIAL_COEFFICIENT:g}]")},
                   "required": ["coefficients"]},
    "spline": {"properties": {"times": array(number(0.0, MAX_DURATION_S), 2,
                                             expected=f"an array of at least 2 times in [0, {MAX_DURATION_S:g}] s"),
                              "values": array(angle(), 2, expected="an array of at least 2 positions"),
                              "bc": one_of("not-a-knot", "clamped", "natural", "periodic"), "hold": BOOLEAN},
               "required": ["times", "values"]},
}
#: Joint laws of passive joints (sim.laws.joint_law_from_config).
JOINT_LAWS: dict[str, dict[str, Any]] = {
    "viscoelastic": {"properties": {"k": stiffness(), "mu": damping(), "r0": angle()}},
    "free": {"properties": {}},
}


def register_motion_law(name: str, schema: dict[str, Any]) -> None:
    """Declare the config schema of a motion law type (``{"properties": {...}, "required": [...]}``)."""
    MOTION_LAWS[name] = schema


def register_joint_law(name: str, schema: dict[str, Any]) -> None:
    """Declare the config schema of a joint law type."""
    JOINT_LAWS[name] = schema


def by_type(registry: dict[str, dict[str, Any]], type_schema: dict[str, Any] | None = None) -> dict[str, Any]:
    """A table whose ``type`` (one of ``registry`` unless ``type_schema`` says otherwise) selects exactly which
    other keys it has: ``registry[type]`` (``{"properties": {...}, "required": [...]}``)."""
    return {"type": "object", "required": ["type"], "properties": {"type": type_schema or one_of(*registry)},
            "allOf": [{"if": {"properties": {"type": {"const": name}}, "required": ["type"]},
                       "then": table({"type": {"const": name}, **body["properties"]}, body.get("required", ()))}
                      for name, body in registry.items()]}


# ------------------------------------------------------------------------------------------- force models
#: Built-in force entries of ``[[forces]]``: type -> schema of the other keys.
FORCES: dict[str, dict[str, Any]] = {"gravity": {"properties": {"g": gravity_vector()}}}


def force_schema(entry: Any, path, prefix: str) -> dict[str, Any]:
    """The schema of one ``[[forces]]`` entry: a built-in type, or a ``"module:Class"`` plug-in's own
    ``CONFIG_SCHEMA`` (or its constructor's parameter names, each any TOML value, when it declares none)."""
    kind = entry.get("type") if isinstance(entry, dict) else None
    if not isinstance(kind, str) or kind in FORCES or ":" not in kind:
        names = " or ".join(f'"{name}"' for name in FORCES)
        return by_type(FORCES, {"type": "string", "pattern": rf"^({'|'.join(FORCES)}|[\w.]+:\w+)$",
                                EXPECTED: f'{names} or "module:Class"'})
    module_name, _, class_name = kind.partition(":")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(path, f"{prefix}.type", f"cannot load {kind!r}: {exc}") from None
    declared = getattr(cls, "CONFIG_SCHEMA", None)
    if declared is not None:
        return table({"type": {"const": kind}, **declared.get("properties", {})}, declared.get("required", ()))
    parameters = inspect.signature(cls).parameters.values()
    names = {p.name: {} for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    required = [p.name for p in parameters if p.name in names and p.default is p.empty]
    return table({"type": {"const": kind}, **names}, required)


def forces_schema(config: dict[str, Any], path) -> dict[str, Any]:
    """``[[forces]]``: an array whose entries each follow :func:`force_schema`."""
    entries = config.get("forces")
    if not isinstance(entries, list):
        return array({"type": "object"})
    return {"type": "array", "prefixItems": [force_schema(entry, path, f"forces[{k}]")
                                             for k, entry in enumerate(entries)],
            "items": False}


# ------------------------------------------------------------------------------------------- the file
def check_robot_config(config: dict[str, Any], path: str | Path | None, kinds: dict[str, str]) -> Any:
    """Check a robot file against the schema of its kind and return the kind's builder module.

    ``kinds``: kind -> module (:data:`sim.robots.KINDS`). A rig or network file is named as such."""
    refuse_other_kind(config, path, "robot")
    # the kind selects the schema: check it first (a misspelt [robot] or kind gets its did-you-mean here)
    check_schema(config, {"type": "object", "required": ["robot"], "properties": {"robot": {
        "type": "object", "required": ["kind"], "properties": {"kind": one_of(*kinds)}}}}, path)
    module = importlib.import_module(kinds[config["robot"]["kind"]])
    check_schema(config, module.config_schema(config, path), path)
    return module
