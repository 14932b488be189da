"""URDF loader, TOML overlay and robot registry: structure, merged fixed joints and one-line errors."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import tomli_w

from sim import build_robot, load_robot, load_urdf
from sim.config import ConfigError, load_toml
from sim.laws import Sinusoid, ViscoElastic
from sim.spatial import pose, rpy_to_matrix, spatial_inertia, transform_inertia

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "robots"

INERTIAL = '<inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial>'


def urdf(links: dict[str, str], joints: list[str]) -> str:
    body = "".join(f'<link name="{name}">{inner}</link>' for name, inner in links.items())
    return f'<robot name="t">{body}{"".join(joints)}</robot>'


def joint(name, jtype, parent, child, extra=""):
    return (f'<joint name="{name}" type="{jtype}"><parent link="{parent}"/><child link="{child}"/>'
            f'{extra}</joint>')


def assert_one_line_error(exc_info, path, element):
    message = str(exc_info.value)
    assert "\n" not in message
    assert str(path) in message, message
    assert element in message, message


@pytest.mark.parametrize("case, element, words", [
    ("cycle", "link 'b'", "cycle"),
    ("loop", "robot", "cycle"),
    ("unknown_type", "joint 'j1'", "type 'planar' (2 translations + 1 rotation) is not supported: write it as two "
                                   "prismatic joints and a revolute joint"),
    ("floating_type", "joint 'j1'", "type 'floating' (6 DoF) is not supported between links"),
    ("made_up_type", "joint 'j1'", "unknown or unsupported type 'ball'"),
    ("mimic", "joint 'j2' <mimic>", "coupled joints are not supported"),
    ("massless_leaf", "joint 'j1'", "passive, but what it moves has no inertia about its axis (0 kg m^2)"),
    ("point_mass_on_axis", "joint 'j1'", "passive, but what it moves has no inertia about its axis"),
    ("negative_mass", "link 'b' mass", "mass"),
    ("unknown_link", "joint 'j1'", "ghost"),
    ("two_parents", "joint 'j2'", "two parent"),
])
def test_bad_urdf_gives_one_line_error_naming_file_and_element(tmp_path, case, element, words):
    links = {"a": INERTIAL, "b": INERTIAL, "c": INERTIAL}
    if case == "cycle":      # a is the root; b and c are each other's parent
        joints = [joint("j1", "revolute", "b", "c"), joint("j2", "revolute", "c", "b")]
    elif case == "loop":     # every link has a parent: no root
        joints = [joint("j1", "revolute", "a", "b"), joint("j2", "revolute", "b", "c"),
                  joint("j3", "revolute", "c", "a")]
    elif case == "unknown_type":
        joints = [joint("j1", "planar", "a", "b"), joint("j2", "revolute", "a", "c")]
    elif case in ("floating_type", "made_up_type"):
        joints = [joint("j1", "floating" if case == "floating_type" else "ball", "a", "b"),
                  joint("j2", "revolute", "a", "c")]
    elif case == "mimic":
        joints = [joint("j1", "revolute", "a", "b"),
                  joint("j2", "revolute", "a", "c", '<mimic joint="j1" multiplier="1" offset="0"/>')]
    elif case == "massless_leaf":
        links["b"] = ""
        joints = [joint("j1", "revolute", "a", "b"), joint("j2", "revolute", "a", "c")]
    elif case == "point_mass_on_axis":  # 1 kg at the origin of b, on j1's axis (x), no rotational inertia
        links["b"] = '<inertial><mass value="1"/></inertial>'
        joints = [joint("j1", "revolute", "a", "b"), joint("j2", "revolute", "a", "c")]
    elif case == "negative_mass":
        links["b"] = INERTIAL.replace('value="1"', 'value="-2"')
        joints = [joint("j1", "revolute", "a", "b"), joint("j2", "revolute", "a", "c")]
    elif case == "unknown_link":
        joints = [joint("j1", "revolute", "a", "ghost"), joint("j2", "revolute", "a", "b")]
    else:
        joints = [joint("j1", "revolute", "a", "b"), joint("j2", "revolute", "c", "b")]
    path = tmp_path / f"{case}.urdf"
    path.write_text(urdf(links, joints))
    with pytest.raises(ConfigError) as exc_info:
        load_urdf(path)
    assert_one_line_error(exc_info, path, element)
    assert words in str(exc_info.value)


def test_fixed_joint_is_merged_with_its_inertia_transformed(tmp_path):
    links = {"a": INERTIAL, "b": INERTIAL,
             "c": '<inertial><origin xyz="0.1 0 0" rpy="0 0 1.0"/><mass value="2"/>'
                  '<inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.03"/></inertial>'}
    joints = [joint("j1", "revolute", "a", "b", '<origin xyz="0 0 1" rpy="0 0 0"/><axis xyz="0 0 1"/>'),
              joint("weld", "fixed", "b", "c", '<origin xyz="0.5 0 0" rpy="0.3 0 0"/>')]
    path = tmp_path / "merge.urdf"
    path.write_text(urdf(links, joints))
    model = load_urdf(path)
    assert model.n == 1 and model.body_names == ["a", "b"] and model.joint_names == ["j1"]
    R = rpy_to_matrix([0, 0, 1.0])
    M_c = spatial_inertia(2.0, [0.1, 0, 0], R @ np.diag([0.01, 0.02, 0.03]) @ R.T)
    expected = spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 0.1) + transform_inertia(
        pose(rpy_to_matrix([0.3, 0, 0]), [0.5, 0, 0]), M_c)
    assert np.allclose(model.inertia[1], expected, atol=1e-14)
    body, frame_pose = model.frames["c"]
    assert body == 1 and np.allclose(frame_pose[:3, 3], [0.5, 0, 0])
    # Total mass and first moment agree with the direct sum.
    assert model.inertia[1, 0, 0] == pytest.approx(3.0)


def test_overlay_sets_modes_laws_base_and_gravity(tmp_path):
    model = load_robot(CONFIGS / "pendulum.toml")
    assert isinstance(model.motion_laws[0], Sinusoid) and model.motion_laws[0].omega == 3.0
    assert isinstance(model.joint_laws[1], ViscoElastic) and model.law_k[1] == 2.0 and model.law_mu[1] == 0.05
    assert np.allclose(model.gravity, [0, 0, -9.81]) and model.base_mode == "fixed"
    config = load_toml(CONFIGS / "pendulum.toml")
    config["robot"]["urdf"] = str(CONFIGS / "pendulum.urdf")
    config["robot"]["base"] = "floating"
    config["robot"]["gravity"] = [0.0, 0.0, -1.62]
    config["joints"]["shoulder"]["mode"] = "passive"
    config["joints"]["shoulder"]["law"] = {"type": "viscoelastic", "k": 1.5}
    changed = build_robot(config, tmp_path / "changed.toml")
    assert changed.base_mode == "floating" and not changed.actuated.any()
    assert changed.law_k[0] == 1.5 and np.allclose(changed.gravity, [0, 0, -1.62])


@pytest.mark.parametrize("table, key", [
    ({"joints": {"knee": {"mode": "passive"}}}, "joints.knee"),
    ({"joints": {"elbow": {"mode": "sideways"}}}, "joints.elbow.mode"),
    ({"joints": {"elbow": {"law": {"type": "sinusoid", "amplitude": 1, "omega": 1}}}}, "joints.elbow.law.type"),
    ({"joints": {"shoulder": {"mode": "actuated", "law": {"type": "sinusoid", "omega": 1}}}},
     "joints.shoulder.law.amplitude"),
    ({"joints": {"elbow": {"stiffness": 3}}}, "joints.elbow.stiffness"),
    ({"forces": [{"type": "no_such_module:Thing"}]}, "forces[0].type"),
])
def test_bad_overlay_gives_one_line_error(tmp_path, table, key):
    path = tmp_path / "robot.toml"
    (tmp_path / "pendulum.urdf").write_text((CONFIGS / "pendulum.urdf").read_text())
    config = {"robot": {"kind": "urdf", "urdf": "pendulum.urdf", "base": "fixed"}, **table}
    path.write_text(tomli_w.dumps(config))
    with pytest.raises(ConfigError) as exc_info:
        load_robot(path)
    assert_one_line_error(exc_info, path, key)


def test_registry_rejects_unknown_kind_and_missing_robot_table(tmp_path):
    path = tmp_path / "robot.toml"
    path.write_text('[robot]\nkind = "hovercraft"\n')
    with pytest.raises(ConfigError) as exc_info:
        load_robot(path)
    assert_one_line_error(exc_info, path, "robot.kind")
    assert "hovercraft" in str(exc_info.value)
    path.write_text('[joints]\n')
    with pytest.raises(ConfigError) as exc_info:
        load_robot(path)
    assert_one_line_error(exc_info, path, "robot")
