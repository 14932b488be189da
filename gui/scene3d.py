"""What the dashboard's 3-D view draws (pure numpy, no Qt, no OpenGL): each body's shape and the bodies' poses.

Shapes come from the model alone, so every robot the builders make is drawn without a geometry file: a body's
shape is the uniform solid with its mass and rotational inertia (its *equivalent inertia ellipsoid*), centred on
its centre of mass along its principal axes. A thin one (smallest axis below :data:`PLATE_RATIO` of the middle
one) is drawn as a plate (a wing blade, a fin), a slender one (middle axis below :data:`TUBE_RATIO` of the
longest) as a tube (a fin ray, a rod segment), the base and the rest as ellipsoids (a thorax, a disc). The
flapper's thorax is built as an ellipsoid and its blades as thin plates, so there the drawn shapes are the
modelled ones. Massless bodies (joint frames between sections) draw nothing; a body with mass but no rotational
inertia (:data:`POINT_MASS_FRACTION`) is drawn as a small sphere (:data:`POINT_MASS_RADIUS_FRACTION` of the robot's
size).

Poses: forward kinematics from the joint positions of ``sim/state`` (``q``) and its base pose (``base_pos``,
``base_quat``), with the model's joint placements and axes (``g_j = g_parent(j) placement_j exp(A_j q_j)``, as
the simulator's own kinematics, sim/dynamics.py). The joints' exponentials are computed for all joints at once,
then the tree is walked one depth level at a time (one batched product per level).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:   # sim's modules import numba (seconds): only the model's loader and the drawing need them
    from sim.model import Model

ELLIPSOID, PLATE, TUBE = "ellipsoid", "plate", "tube"
#: a body whose smallest inertia-ellipsoid axis is below this fraction of its middle one is a plate (a blade is
#: about 0.01; the flapper's thorax and RayBot's disc, 1 and 0.26, are not)
PLATE_RATIO = 0.2
#: a body whose middle axis is below this fraction of its longest one is a tube (RayBot's fin-ray segments: 0.26)
TUBE_RATIO = 0.3
#: a point mass is drawn as a sphere of this fraction of the robot's size (its largest shape, else 1 m)
POINT_MASS_RADIUS_FRACTION = 0.05
#: a body whose longest equivalent axis is below this fraction of the robot's size has no rotational inertia to
#: speak of (a point mass): far below any real body's (the flapper's smallest blade is 0.3 of its thorax)
POINT_MASS_FRACTION = 1e-6
#: the robot's size when no body has a shape (m): a model of point masses only
DEFAULT_SIZE_M = 1.0


@dataclass(frozen=True)
class Shape:
    """One body's drawn solid: ``kind`` (ellipsoid, plate, tube); ``pose`` (4, 4) of the solid's frame in the body
    frame (origin at the centre of mass, axes along the principal axes, the longest first), m; ``half_extents``
    (3,) along those axes, m (semi-axes of an ellipsoid; half length, half width, half thickness of a plate; half
    length, radius, radius of a tube)."""
    body: int
    name: str
    kind: str
    pose: np.ndarray
    half_extents: np.ndarray


def equivalent_semi_axes(mass: float, inertia_com: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Semi-axes (3,) m, longest first, and principal axes (3, 3), columns in the same order, of the uniform solid
    ellipsoid of ``mass`` (kg) and rotational inertia ``inertia_com`` (3, 3) kg m^2 about its centre of mass:
    ``I_x = m (b^2 + c^2) / 5``, so ``a^2 = 5 (I_y + I_z - I_x) / (2 m)``."""
    moments, axes = np.linalg.eigh(0.5 * (inertia_com + inertia_com.T))
    squared = 2.5 / mass * (moments.sum() - 2.0 * moments)
    semi = np.sqrt(np.maximum(squared, 0.0))
    order = np.argsort(semi)[::-1]
    axes = axes[:, order]
    if np.linalg.det(axes) < 0:   # a right-handed frame: the pose must be a rotation
        axes[:, 2] = -axes[:, 2]
    return semi[order], axes


def _kind(semi: np.ndarray, is_base: bool) -> str:
    longest, middle, smallest = semi
    if smallest < PLATE_RATIO * middle:
        return PLATE
    if not is_base and middle < TUBE_RATIO * longest:
        return TUBE
    return ELLIPSOID


def _half_extents(kind: str, semi: np.ndarray) -> np.ndarray:
    """The drawn solid's half extents with the inertia of the ellipsoid of semi-axes ``semi`` (a tube: see below)."""
    if kind == PLATE:       # a box: I_x = m (b^2 + c^2) / 3
        return semi * np.sqrt(3.0 / 5.0)
    if kind == TUBE:
        # a cylinder along x, I_x = m r^2 / 2 and I_y = I_z = m (r^2 / 4 + h^2 / 3): the body's axial moment, and the
        # mean of its two transverse ones (a cylinder has one)
        a, b, c = semi
        radius = np.sqrt(2.0 * (b * b + c * c) / 5.0)
        half_length = np.sqrt(max(3.0 * ((2.0 * a * a + b * b + c * c) / 10.0 - radius * radius / 4.0), 0.0))
        return np.array([half_length, radius, radius])
    return semi


def body_shapes(model: "Model") -> list[Shape]:
    """The drawn solid of every body with mass (module docstring), in body order."""
    from sim.spatial import inertia_parameters

    found = []
    for body in range(model.n_bodies):
        mass, com, inertia_com = inertia_parameters(model.inertia[body])
        if mass <= 0.0:
            continue
        semi, axes = equivalent_semi_axes(mass, inertia_com)
        pose = np.eye(4)
        pose[:3, :3] = axes
        pose[:3, 3] = com
        found.append((body, mass, semi, pose))
    size = max((semi[0] for _, _, semi, _ in found if semi[0] > 0.0), default=DEFAULT_SIZE_M)
    shapes = []
    for body, _mass, semi, pose in found:
        if semi[0] <= POINT_MASS_FRACTION * size:
            kind, half = ELLIPSOID, np.full(3, POINT_MASS_RADIUS_FRACTION * size)
        else:
            kind = _kind(semi, body == 0)
            half = _half_extents(kind, semi)
        shapes.append(Shape(body, model.body_names[body], kind, pose, half))
    return shapes


def robot_size(shapes: list[Shape]) -> float:
    """The largest half extent of the shapes, m (:data:`DEFAULT_SIZE_M` without any): what the camera frames."""
    return max((float(shape.half_extents.max()) for shape in shapes), default=DEFAULT_SIZE_M)


class Kinematics:
    """Forward kinematics of a model's tree (the arrays it needs, and its depth levels)."""

    def __init__(self, model: "Model"):
        self.n = model.n
        self.parent = model.parent.copy()
        self.placement = model.joint_placement[1:].copy()   # (n, 4, 4)
        axis = model.joint_axis[1:]
        self.linear = axis[:, :3].copy()      # (n, 3): a prismatic joint's unit axis, zero for a revolute one
        self.angular = axis[:, 3:].copy()     # (n, 3): a revolute joint's unit axis, zero for a prismatic one
        depth = np.zeros(model.n_bodies, dtype=np.int64)
        for body in range(1, model.n_bodies):
            depth[body] = depth[self.parent[body]] + 1
        #: bodies of each depth 1, 2, ... (one batched product each)
        self.levels = [np.flatnonzero(depth == level) for level in range(1, int(depth.max(initial=0)) + 1)]

    def joint_transforms(self, q: np.ndarray) -> np.ndarray:
        """``placement_j exp(A_j q_j)`` (n, 4, 4): the pose of body j+1 in its parent's frame at ``q`` (n,)."""
        rotvec = self.angular * q[:, None]                  # (n, 3)
        theta = np.linalg.norm(rotvec, axis=1)
        safe = np.where(theta > 0.0, theta, 1.0)
        unit = rotvec / safe[:, None]
        sin, cos = np.sin(theta)[:, None, None], np.cos(theta)[:, None, None]
        skew = np.zeros((self.n, 3, 3))
        skew[:, 0, 1], skew[:, 0, 2], skew[:, 1, 2] = -unit[:, 2], unit[:, 1], -unit[:, 0]
        skew[:, 1, 0], skew[:, 2, 0], skew[:, 2, 1] = unit[:, 2], -unit[:, 1], unit[:, 0]
        motion = np.zeros((self.n, 4, 4))
        motion[:, :3, :3] = np.eye(3) + sin * skew + (1.0 - cos) * (skew @ skew)     # Rodrigues
        motion[:, :3, 3] = self.linear * q[:, None]
        motion[:, 3, 3] = 1.0
        return self.placement @ motion

    def body_poses(self, base_pose: np.ndarray, q: np.ndarray) -> np.ndarray:
        """World pose (N+1, 4, 4) of every body, m, from the base pose (4, 4) world and ``q`` (n,) rad or m."""
        poses = np.empty((self.n + 1, 4, 4))
        poses[0] = base_pose
        local = self.joint_transforms(np.asarray(q, dtype=float))
        for bodies in self.levels:
            poses[bodies] = poses[self.parent[bodies]] @ local[bodies - 1]
        return poses


def base_pose(position, quaternion) -> np.ndarray:
    """The base's world pose (4, 4) from ``sim/state``'s ``base_pos`` (3,) m and ``base_quat`` (4,) (w, x, y, z),
    the quaternion normalised (a published one is unit up to rounding)."""
    from sim.spatial import quat_to_matrix

    quat = np.asarray(quaternion, dtype=float)
    pose = np.eye(4)
    pose[:3, :3] = quat_to_matrix(quat / np.linalg.norm(quat))
    pose[:3, 3] = position
    return pose
