"""Robot kind "urdf": a URDF file plus a TOML overlay (modes, laws, base, gravity, force models).

```toml
[robot]
kind = "urdf"
urdf = "pendulum.urdf"         # relative to this TOML file
base = "fixed"                 # floating | fixed | imposed (imposed: held at its initial pose)
gravity = [0.0, 0.0, -9.81]    # m/s^2, world frame
base_position = [0, 0, 0]      # m, initial base pose in the world
base_rpy = [0, 0, 0]           # rad

[joints.hinge]                 # a joint name of the URDF
mode = "passive"               # passive (default) | actuated
rest = 0.0                     # q_rest, rad or m (strain = q - rest)
law = { type = "viscoelastic", k = 0.0, mu = 0.0, r0 = 0.0 }   # passive: viscoelastic | free
# actuated: law = { type = "sinusoid", amplitude = 0.5, omega = 6.28, phase = 0.0, offset = 0.0 }
#           (or constant / polynomial / spline, see sim.laws.motion_law_from_config)

[[forces]]                     # optional: "gravity" (sets the model gravity) or "module:Class" plug-ins
type = "gravity"
g = [0.0, 0.0, -9.81]
```
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..config import ConfigError, array, one_of, require, string, table, tables_by_name, unknown_key_message
from ..forces import Gravity, force_model_from_config
from ..laws import joint_law_from_config, motion_law_from_config
from ..model import Model, StaticBase
from ..spatial import pose, rpy_to_matrix
from ..urdf import check_solvable, load_urdf
from .schema import (JOINT_LAWS, MOTION_LAWS, SIMULATION, angle, by_type, forces_schema, gravity_vector, position,
                     robot_table)


def config_schema(config: dict, path) -> dict:
    """The JSON Schema of a URDF robot file (sim/robots/schema.py); a joint's ``law`` follows the motion laws
    when its mode is actuated, the joint laws otherwise."""
    joint = {"type": "object", "additionalProperties": False,
             "properties": {"mode": one_of("passive", "actuated"), "rest": angle(), "law": {"type": "object"}},
             "if": {"properties": {"mode": {"const": "actuated"}}, "required": ["mode"]},
             "then": {"properties": {"law": by_type(MOTION_LAWS)}},
             "else": {"properties": {"law": by_type(JOINT_LAWS)}}}
    return table({
        "robot": robot_table("urdf", {
            "urdf": string("a URDF file name"), "base": one_of("floating", "fixed", "imposed"),
            "gravity": gravity_vector(), "base_position": array(position(), 3, 3, expected="3 numbers, m"),
            "base_rpy": array(angle(), 3, 3, expected="3 angles, rad")}, ["urdf"]),
        "joints": tables_by_name(joint),
        "forces": forces_schema(config, path),
        "simulation": SIMULATION,
    }, ["robot"])


def _vector(table, key, path, prefix, default):
    values = require(table, key, list, path=path, prefix=prefix, default=list(default), expected="3 numbers")
    if len(values) != 3 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ConfigError(path, f"{prefix}.{key}", f"got {values!r}, expected 3 numbers")
    return np.array(values, dtype=float)


def build(config: dict, path) -> Model:
    """Build the Model of a URDF robot config (see the module docstring for the tables)."""
    robot = require(config, "robot", dict, path=path)
    urdf_name = require(robot, "urdf", str, path=path, prefix="robot", expected="a URDF file name")
    base_dir = Path(path).parent if path is not None else Path.cwd()
    urdf_path = Path(urdf_name) if Path(urdf_name).is_absolute() else base_dir / urdf_name
    if not urdf_path.is_file():
        raise ConfigError(path, "robot.urdf", f"URDF file {str(urdf_path)!r} not found")
    base = require(robot, "base", str, path=path, prefix="robot", default="floating",
                   check=lambda v: v in ("floating", "fixed", "imposed"), expected="floating, fixed or imposed")
    gravity = _vector(robot, "gravity", path, "robot", (0.0, 0.0, -9.81))
    base_pose = pose(rpy_to_matrix(_vector(robot, "base_rpy", path, "robot", (0.0, 0.0, 0.0))),
                     _vector(robot, "base_position", path, "robot", (0.0, 0.0, 0.0)))

    joints = require(config, "joints", dict, path=path, default={})
    model = load_urdf(urdf_path, base_mode=base, gravity=gravity, check=False)  # checked below, with the modes
    actuated = model.actuated.copy()
    q_rest = model.q_rest.copy()
    motion_laws, joint_laws = {}, {}
    for name, joint_table in joints.items():
        prefix = f"joints.{name}"
        if name not in model.joint_names:
            raise ConfigError(path, prefix, f"no moving joint {name!r} in {urdf_path.name}: "
                                            + unknown_key_message(name, model.joint_names))
        if not isinstance(joint_table, dict):
            raise ConfigError(path, prefix, "expected a table")
        k = model.joint_index(name)
        mode = require(joint_table, "mode", str, path=path, prefix=prefix, default="passive",
                       check=lambda v: v in ("passive", "actuated"), expected="passive or actuated")
        actuated[k] = mode == "actuated"
        q_rest[k] = require(joint_table, "rest", float, path=path, prefix=prefix, default=0.0)
        if "law" in joint_table:
            law_table = require(joint_table, "law", dict, path=path, prefix=prefix)
            if actuated[k]:
                motion_laws[k] = motion_law_from_config(law_table, path, f"{prefix}.law")
            else:
                joint_laws[k] = joint_law_from_config(law_table, path, f"{prefix}.law")
    force_models = []
    forces = require(config, "forces", list, path=path, default=[])
    for index, entry in enumerate(forces):
        prefix = f"forces[{index}]"
        if not isinstance(entry, dict):
            raise ConfigError(path, prefix, "expected a table")
        force = force_model_from_config(entry, path, prefix)
        if isinstance(force, Gravity):
            gravity = force.g  # the core applies gravity itself; listing it sets the field
        else:
            force_models.append(force)
    metadata = dict(model.metadata, kind="urdf", config=str(path), name=robot.get("name", model.metadata["name"]))
    model = model.replace(actuated=actuated, q_rest=q_rest, motion_laws=motion_laws, joint_laws=joint_laws,
                          force_models=force_models, gravity=gravity, base_pose=base_pose,
                          base_motion=StaticBase(base_pose) if base == "imposed" else None, metadata=metadata)
    check_solvable(model, urdf_path)
    return model
