"""Default shapes of a model's bodies, for viewers (URDF ``<visual>``, Foxglove scene entities).

The tree builders describe masses and inertias, not geometry, so every body gets the shape its inertia implies:
the **box of equal inertia** (uniform density, same mass and principal moments), centred on the body's centre of
mass and aligned with its principal axes. A wing blade's inertia gives a thin plate, a thorax or a disc a compact
block, a rod segment a slender bar. A body without mass (or with no rotational inertia, a point mass) gets a
small sphere at its centre of mass, so that every body is visible.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .model import Model
from .spatial import inertia_parameters, pose

#: Thinnest box side drawn, m: a plate of zero thickness (a blade modelled as a lamina) stays visible, and 1 mm
#: is below the thickness of any part of the shipped robots.
MIN_SIDE_M = 1e-3
#: Radius of the sphere drawn for a body without rotational inertia (massless link, point mass), m.
POINT_RADIUS_M = 0.005


@dataclass(frozen=True)
class Shape:
    """One body's shape. ``pose`` (4, 4): the shape's centre and axes in the body frame, m; ``size`` (3,): the
    box's sides along its axes (``kind`` "box"), or the sphere's diameter three times (``kind`` "sphere"), m."""
    body: int
    kind: str
    pose: np.ndarray
    size: np.ndarray


def inertia_box(mass: float, principal_moments: np.ndarray) -> np.ndarray:
    """Sides (3,) m of the uniform box with ``mass`` kg and principal moments (3,) kg m^2 about its centre:
    ``I_x = m (b^2 + c^2) / 12`` and so on, solved for the squared sides (clipped at :data:`MIN_SIDE_M`: the
    moments of a real body obey the triangle inequality only up to round-off)."""
    I1, I2, I3 = principal_moments
    squared = 6.0 / mass * np.array([I2 + I3 - I1, I1 + I3 - I2, I1 + I2 - I3])
    return np.maximum(np.sqrt(np.clip(squared, 0.0, None)), MIN_SIDE_M)


def default_shapes(model: Model) -> list[Shape]:
    """One :class:`Shape` per body of ``model`` (body order), from its inertia (module docstring)."""
    shapes = []
    for body in range(model.n_bodies):
        mass, com, inertia_com = inertia_parameters(model.inertia[body])
        if mass <= 0.0 or not np.any(inertia_com):
            diameter = np.full(3, 2.0 * POINT_RADIUS_M)
            shapes.append(Shape(body, "sphere", pose(p=com if mass > 0.0 else np.zeros(3)), diameter))
            continue
        moments, axes = np.linalg.eigh(inertia_com)
        if np.linalg.det(axes) < 0.0:
            axes[:, 2] = -axes[:, 2]        # a rotation, not a reflection
        shapes.append(Shape(body, "box", pose(axes, com), inertia_box(mass, moments)))
    return shapes


__all__ = ["Shape", "default_shapes", "inertia_box", "MIN_SIDE_M", "POINT_RADIUS_M"]
