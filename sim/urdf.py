"""URDF reader, ``load_urdf(path, floating_base=True) -> Model``, and writer, ``model_to_urdf(model) -> str``
(xml.etree, no other dependency).

Supported: links with or without ``<inertial>`` (origin xyz/rpy, mass, inertia; a link without one is massless,
as the URDF specification allows, e.g. the two links between the three revolute joints of a spherical joint),
joints of type revolute, continuous, prismatic (one DoF, any axis, origin xyz/rpy) and fixed (merged into the
parent body, inertia transformed). Bodies are numbered depth-first from the root in document order, so
``parent[j] < j``; ``model.joint_names`` follows that order. Every problem is a one-line
:class:`sim.config.ConfigError` naming the file and the element: cycles, several roots, unknown joint types,
negative masses, unknown links; ``planar`` and ``floating`` joints and ``<mimic>`` (not supported: the line says
what to write instead); and a tree the hybrid algorithm cannot solve (:func:`check_solvable`): a passive joint
whose links have no inertia about its axis (a massless chain), or a floating base with no inertia at all.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from .config import ConfigError
from .model import Model, ModelBuilder
from .spatial import exp_se3, pose, rpy_to_matrix, spatial_inertia, transform_inertia

_MOVING = {"revolute": "revolute", "continuous": "revolute", "prismatic": "prismatic"}
#: URDF joint types this reader refuses, with what to write instead.
_UNSUPPORTED = {
    "planar": "type 'planar' (2 translations + 1 rotation) is not supported: write it as two prismatic joints and "
              "a revolute joint about the plane's normal, through two links without <inertial>",
    "floating": "type 'floating' (6 DoF) is not supported between links: make the child the root link of its own "
                "file with a floating base, or chain prismatic and revolute joints through links without <inertial>",
}
#: A passive joint's articulated inertia about its axis (or a floating base's smallest eigenvalue) at or below
#: this fraction of the largest entry of the articulated inertia is singular: it is exactly zero for a massless
#: chain, and round-off of the recursion is ~1e-16 of that scale.
SINGULAR_INERTIA_RTOL = 1e-12
#: Seed of the generic configuration at which solvability is checked (a singularity found there holds at almost
#: every configuration: it comes from the tree's structure, not from a particular pose).
SOLVABILITY_SEED = 20140519


def _floats(element, attribute: str, count: int, default, path, where: str) -> np.ndarray:
    text = None if element is None else element.get(attribute)
    if text is None:
        return np.array(default, dtype=float)
    try:
        values = np.array([float(v) for v in text.split()], dtype=float)
    except ValueError:
        values = np.array([])
    if values.shape != (count,) or not np.all(np.isfinite(values)):
        raise ConfigError(path, where, f"{attribute}={text!r}, expected {count} numbers")
    return values


def _origin(element, path, where: str) -> np.ndarray:
    origin = None if element is None else element.find("origin")
    xyz = _floats(origin, "xyz", 3, [0.0, 0.0, 0.0], path, f"{where} origin")
    rpy = _floats(origin, "rpy", 3, [0.0, 0.0, 0.0], path, f"{where} origin")
    return pose(rpy_to_matrix(rpy), xyz)


def _link_inertia(link, path) -> np.ndarray:
    """Spatial inertia (6, 6) of a link about its origin, in its frame; zero without ``<inertial>``."""
    name = link.get("name")
    where = f"link {name!r}"
    inertial = link.find("inertial")
    if inertial is None:
        return np.zeros((6, 6))
    mass_el = inertial.find("mass")
    if mass_el is None or mass_el.get("value") is None:
        raise ConfigError(path, f"{where} inertial", "missing <mass value=...>")
    try:
        mass = float(mass_el.get("value"))
    except ValueError:
        raise ConfigError(path, f"{where} mass", f"value={mass_el.get('value')!r}, expected a number") from None
    if not np.isfinite(mass) or mass < 0.0:
        raise ConfigError(path, f"{where} mass", f"value={mass_el.get('value')}, expected a mass >= 0 kg")
    inertia_el = inertial.find("inertia")
    I = np.zeros((3, 3))
    if inertia_el is not None:
        values = {}
        for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz"):
            try:
                values[key] = float(inertia_el.get(key, "0"))
            except ValueError:
                raise ConfigError(path, f"{where} inertia", f"{key}={inertia_el.get(key)!r}, expected a number") \
                    from None
        I = np.array([[values["ixx"], values["ixy"], values["ixz"]],
                      [values["ixy"], values["iyy"], values["iyz"]],
                      [values["ixz"], values["iyz"], values["izz"]]])
        if np.any(np.linalg.eigvalsh(I) < -1e-12 * max(1.0, np.abs(I).max())):
            raise ConfigError(path, f"{where} inertia", "not positive semi-definite")
    X = _origin(inertial, path, f"{where} inertial")
    R, c = X[:3, :3], X[:3, 3]
    return spatial_inertia(mass, c, R @ I @ R.T)


def load_urdf(path: str | Path, floating_base: bool = True, *, base_mode: str | None = None,
              gravity=(0.0, 0.0, -9.81), actuated: dict[str, bool] | None = None,
              q_rest: dict[str, float] | None = None, check: bool = True) -> Model:
    """Read a URDF file into a :class:`Model`.

    floating_base: base mode "floating" (True) or "fixed" (False); ``base_mode`` overrides it (also
    "imposed"). gravity (3,) m/s^2 world frame. ``actuated`` / ``q_rest`` map joint names to the joint mode
    (default passive, free) and rest position (rad or m). Model metadata records the file. ``check``: refuse a
    tree that is not solvable with these modes (:func:`check_solvable`); a caller that sets the modes afterwards
    checks the final model itself.
    """
    path = Path(path)
    try:
        root_el = ET.parse(path).getroot()
    except FileNotFoundError:
        raise ConfigError(path, None, "file not found") from None
    except ET.ParseError as exc:
        raise ConfigError(path, None, f"invalid XML: {exc}") from None
    if root_el.tag != "robot":
        raise ConfigError(path, f"<{root_el.tag}>", "expected a <robot> root element")
    links = {}
    for link in root_el.findall("link"):
        name = link.get("name")
        if not name:
            raise ConfigError(path, "link", "missing name attribute")
        if name in links:
            raise ConfigError(path, f"link {name!r}", "defined twice")
        links[name] = link
    if not links:
        raise ConfigError(path, "robot", "no <link>")
    joints = []
    parent_of: dict[str, str] = {}
    joint_names = set()
    for joint in root_el.findall("joint"):
        name = joint.get("name")
        where = f"joint {name!r}"
        if not name:
            raise ConfigError(path, "joint", "missing name attribute")
        if name in joint_names:
            raise ConfigError(path, where, "defined twice")
        joint_names.add(name)
        jtype = joint.get("type")
        if jtype in _UNSUPPORTED:
            raise ConfigError(path, where, _UNSUPPORTED[jtype])
        if jtype not in _MOVING and jtype != "fixed":
            raise ConfigError(path, where, f"unknown or unsupported type {jtype!r}, expected revolute, "
                                           "continuous, prismatic or fixed")
        if joint.find("mimic") is not None:
            raise ConfigError(path, f"{where} <mimic>", "coupled joints are not supported (each joint moves on its "
                                                        "own): make the joint actuated with a motion law that "
                                                        "follows the joint it mimics, or remove <mimic>")
        parent_el, child_el = joint.find("parent"), joint.find("child")
        if parent_el is None or child_el is None:
            raise ConfigError(path, where, "needs <parent link=...> and <child link=...>")
        parent, child = parent_el.get("link"), child_el.get("link")
        for role, link_name in (("parent", parent), ("child", child)):
            if link_name not in links:
                raise ConfigError(path, where, f"{role} link {link_name!r} is not defined")
        if child in parent_of:
            raise ConfigError(path, where, f"link {child!r} has two parent joints (the URDF must be a tree)")
        if child == parent:
            raise ConfigError(path, where, f"cycle: link {child!r} is its own parent")
        parent_of[child] = parent
        joints.append((name, jtype, parent, child, joint))
    roots = [name for name in links if name not in parent_of]
    if len(roots) != 1:
        if not roots:
            raise ConfigError(path, "robot", "cycle: every link has a parent joint, no root link")
        raise ConfigError(path, "robot", f"several root links {roots}, expected one tree")
    # Cycle check: from every link, walking up the parents must reach the root.
    for start in links:
        seen = {start}
        link = start
        while link in parent_of:
            link = parent_of[link]
            if link in seen:
                raise ConfigError(path, f"link {start!r}", "cycle in the joint tree")
            seen.add(link)
    children: dict[str, list] = {}
    for entry in joints:
        children.setdefault(entry[2], []).append(entry)

    root = roots[0]
    mode = base_mode or ("floating" if floating_base else "fixed")
    actuated = dict(actuated or {})
    q_rest = dict(q_rest or {})
    builder = ModelBuilder(root, _link_inertia(links[root], path), base_mode=mode,
                           gravity=gravity)
    stack = list(reversed(children.get(root, [])))
    while stack:
        name, jtype, parent, child, joint = stack.pop()
        where = f"joint {name!r}"
        placement = _origin(joint, path, where)
        inertia = _link_inertia(links[child], path)
        if jtype == "fixed":
            builder.add_body(child, parent, joint_name=name, joint_type="fixed", placement=placement,
                             inertia=inertia)
        else:
            axis = _floats(joint.find("axis"), "xyz", 3, [1.0, 0.0, 0.0], path, f"{where} axis")
            if np.linalg.norm(axis) == 0.0:
                raise ConfigError(path, f"{where} axis", "zero axis")
            builder.add_body(child, parent, joint_name=name, joint_type=_MOVING[jtype], axis=axis,
                             placement=placement, inertia=inertia, actuated=bool(actuated.get(name, False)),
                             q_rest=float(q_rest.get(name, 0.0)))
        stack.extend(reversed(children.get(child, [])))
    model = builder.build(metadata={"kind": "urdf", "urdf": str(path), "name": root_el.get("name", path.stem)})
    if check:
        check_solvable(model, path)
    return model


def check_solvable(model: Model, path=None) -> None:
    """Refuse (one-line ConfigError naming the joint) a model whose hybrid dynamics are singular.

    The backward recursion divides by each passive joint's articulated inertia about its axis,
    ``D_j = A_j^T M*_j A_j``, and a floating base solves with the base's articulated inertia ``M*_0``. Links
    without ``<inertial>`` are fine as long as something with inertia lies beyond them; a passive joint that
    moves only massless links (or a point mass on its axis), or a floating base with nothing to accelerate, is
    not. Checked at a generic configuration (seeded, :data:`SOLVABILITY_SEED`), with the model's modes.
    """
    q = np.random.default_rng(SOLVABILITY_SEED).uniform(-np.pi, np.pi, model.n)
    articulated = model.inertia.copy()
    for j in range(model.parent.shape[0] - 1, 0, -1):
        k = j - 1
        M, A = articulated[j], model.joint_axis[j]
        if not model.actuated[k]:
            MA = M @ A
            D = float(A @ MA)
            if D <= SINGULAR_INERTIA_RTOL * np.abs(M).max():
                unit = "kg m^2" if np.any(A[3:]) else "kg"
                raise ConfigError(path, f"joint {model.joint_names[k]!r}", (
                    f"passive, but what it moves has no inertia about its axis ({D:.3g} {unit}): the links beyond "
                    "it are massless (no <inertial>) or a point mass on the axis; give one an <inertial>, or make "
                    "the joint actuated or fixed"))
            M = M - np.outer(MA, MA) / D
        articulated[model.parent[j]] += transform_inertia(model.joint_placement[j] @ exp_se3(A * q[k]), M)
    if model.base_mode == "floating":
        M0 = articulated[0]
        if np.linalg.eigvalsh(M0).min() <= SINGULAR_INERTIA_RTOL * max(np.abs(M0).max(), np.finfo(float).tiny):
            raise ConfigError(path, f"link {model.body_names[0]!r}", (
                "a floating base, but the tree has no inertia in some direction (massless links without "
                "<inertial>): give the links an <inertial>, or fix the base"))


def random_tree_urdf(rng: np.random.Generator, n_joints: int, *, fixed_fraction: float = 0.15,
                     name: str = "random_tree") -> str:
    """URDF text of a random tree (for tests and benchmarks): ``n_joints`` moving joints (revolute,
    continuous, prismatic) of random unit axes and placements (xyz in m, rpy in rad), random branching
    (each new link hangs from any earlier link), random inertial frames, masses 0.2..2 kg and positive
    definite inertias; about ``fixed_fraction`` extra links are attached by fixed joints."""
    def vec(values) -> str:
        return " ".join(f"{v:.17g}" for v in values)

    def inertial() -> str:
        mass = rng.uniform(0.2, 2.0)
        L = rng.normal(size=(3, 3)) * 0.1
        I = L @ L.T + np.eye(3) * 0.01
        return (f'<inertial><origin xyz="{vec(rng.uniform(-0.2, 0.2, 3))}" rpy="{vec(rng.uniform(-np.pi, np.pi, 3))}"/>'
                f'<mass value="{mass:.17g}"/><inertia ixx="{I[0, 0]:.17g}" ixy="{I[0, 1]:.17g}" '
                f'ixz="{I[0, 2]:.17g}" iyy="{I[1, 1]:.17g}" iyz="{I[1, 2]:.17g}" izz="{I[2, 2]:.17g}"/></inertial>')

    links = ["link0"]
    parts = [f'<robot name="{name}">', f'<link name="link0">{inertial()}</link>']
    n_fixed = int(round(fixed_fraction * n_joints))
    kinds = ["moving"] * n_joints + ["fixed"] * n_fixed
    rng.shuffle(kinds)
    moving = 0
    for index, kind in enumerate(kinds):
        child = f"link{index + 1}"
        parent = links[int(rng.integers(len(links)))]
        origin = f'<origin xyz="{vec(rng.uniform(-0.5, 0.5, 3))}" rpy="{vec(rng.uniform(-np.pi, np.pi, 3))}"/>'
        if kind == "fixed":
            jtype, axis = "fixed", ""
        else:
            jtype = ("revolute", "continuous", "prismatic")[int(rng.integers(3))]
            a = rng.normal(size=3)
            axis = f'<axis xyz="{vec(a / np.linalg.norm(a))}"/>'
            moving += 1
        limit = '<limit lower="-3" upper="3" effort="100" velocity="10"/>' if jtype in ("revolute", "prismatic") else ""
        parts.append(f'<link name="{child}">{inertial()}</link>')
        parts.append(f'<joint name="joint{index + 1}" type="{jtype}"><parent link="{parent}"/>'
                     f'<child link="{child}"/>{origin}{axis}{limit}</joint>')
        links.append(child)
    parts.append("</robot>")
    return "\n".join(parts)


# ----------------------------------------------------------------------------------------------- writing
#: Limits written on every revolute and prismatic joint (rad or m, N m or N, rad/s or m/s): URDF requires a
#: <limit> on them, the models carry none (their laws bound the motion), and a joint written as "continuous" would
#: be a (cos, sin) pair in Pinocchio instead of one coordinate. Large enough never to bind.
UNBOUNDED_LIMIT = 1e6
_NUMBER = "{:.17g}"       # every float written so that it reads back exactly
#: cos(pitch) below which a rotation is in gimbal lock (pitch = +-90 deg): roll and yaw turn about one axis there,
#: and their split is arbitrary; 1e-12 is ~1e4 times the round-off of a rotation matrix's entries.
GIMBAL_LOCK_COS = 1e-12


def matrix_to_rpy(R: np.ndarray) -> np.ndarray:
    """Inverse of :func:`sim.spatial.rpy_to_matrix`: URDF roll, pitch, yaw (rad) of a rotation (3, 3)."""
    pitch = np.arctan2(-R[2, 0], np.hypot(R[0, 0], R[1, 0]))
    if np.hypot(R[0, 0], R[1, 0]) < GIMBAL_LOCK_COS:       # roll and yaw share one axis: take yaw = 0
        return np.array([np.arctan2(-R[1, 2], R[1, 1]), pitch, 0.0])
    return np.array([np.arctan2(R[2, 1], R[2, 2]), pitch, np.arctan2(R[1, 0], R[0, 0])])


def _vector_text(values) -> str:
    return " ".join(_NUMBER.format(float(v)) for v in values)


def _origin_element(parent: ET.Element, g: np.ndarray) -> None:
    ET.SubElement(parent, "origin", xyz=_vector_text(g[:3, 3]), rpy=_vector_text(matrix_to_rpy(g[:3, :3])))


def model_to_urdf(model: Model, shapes=None) -> str:
    """URDF text of ``model``'s rigid tree: one link per body (fixed links already merged into their body), one
    revolute or prismatic joint per joint, inertias exact, and a ``<visual>`` per body (``shapes``: a list of
    :class:`sim.shapes.Shape`, default :func:`sim.shapes.default_shapes`). What URDF cannot hold is written as a
    comment: the base mode and gravity (give them to :func:`load_urdf`), the joint modes and laws, the force
    models. :func:`load_urdf` and Pinocchio read it back with the same rigid-body dynamics."""
    from .shapes import default_shapes
    from .spatial import inertia_parameters

    shapes = default_shapes(model) if shapes is None else shapes
    name = str(model.metadata.get("name", "robot"))
    robot = ET.Element("robot", name=name)
    robot.append(ET.Comment(
        f" written by mms urdf: base {model.base_mode} (load_urdf base_mode=...), gravity "
        f"{' '.join(f'{g:g}' for g in model.gravity)} m/s^2; actuated joints "
        f"{[n for n, a in zip(model.joint_names, model.actuated) if a]}; joint laws and force models "
        f"({len(model.force_models)}) are not part of URDF "))
    for body, body_name in enumerate(model.body_names):
        link = ET.SubElement(robot, "link", name=body_name)
        mass, com, inertia_com = inertia_parameters(model.inertia[body])
        if mass > 0.0 or np.any(inertia_com):
            inertial = ET.SubElement(link, "inertial")
            ET.SubElement(inertial, "origin", xyz=_vector_text(com), rpy="0 0 0")
            ET.SubElement(inertial, "mass", value=_NUMBER.format(mass))
            ET.SubElement(inertial, "inertia", **{key: _NUMBER.format(inertia_com[a, b]) for key, (a, b) in (
                ("ixx", (0, 0)), ("ixy", (0, 1)), ("ixz", (0, 2)), ("iyy", (1, 1)), ("iyz", (1, 2)),
                ("izz", (2, 2)))})
        for shape in (s for s in shapes if s.body == body):
            visual = ET.SubElement(link, "visual")
            _origin_element(visual, shape.pose)
            geometry = ET.SubElement(visual, "geometry")
            if shape.kind == "sphere":
                ET.SubElement(geometry, "sphere", radius=_NUMBER.format(shape.size[0] / 2.0))
            else:
                ET.SubElement(geometry, "box", size=_vector_text(shape.size))
    for j in range(1, model.n_bodies):
        k = j - 1
        axis = model.joint_axis[j]
        prismatic = bool(np.any(axis[:3]))
        joint = ET.SubElement(robot, "joint", name=model.joint_names[k],
                              type="prismatic" if prismatic else "revolute")
        ET.SubElement(joint, "parent", link=model.body_names[model.parent[j]])
        ET.SubElement(joint, "child", link=model.body_names[j])
        _origin_element(joint, model.joint_placement[j])
        ET.SubElement(joint, "axis", xyz=_vector_text(axis[:3] if prismatic else axis[3:]))
        limit = _NUMBER.format(UNBOUNDED_LIMIT)
        ET.SubElement(joint, "limit", lower=f"-{limit}", upper=limit, effort=limit, velocity=limit)
    ET.indent(robot)
    return ET.tostring(robot, encoding="unicode", xml_declaration=True) + "\n"
