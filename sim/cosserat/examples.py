"""The four robots of Sec. 5 (Boyer et al. 2012) as strain laws and contact sets, with the spec's defaults for
what the paper leaves open (docs/cosserat.md). Each ``*_robot`` returns an :class:`Example`."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from sim.spatial import exp_so3

from .contacts import FOLLOWER, FollowerSupport, HeadGuide, LockedAnchor, SweepingAnchor
from .rod import Rod
from .laws import CompiledLaw
from .laws.earthworm import earthworm_law, earthworm_params
from .laws.inchworm import inchworm_law, inchworm_params
from .laws.snake import bump, snake_law, snake_params, snake_profile, travelling
from .strains import TABLE_I, StrainField

#: The strain laws live in sim/cosserat/laws/ (Python form and compiled kernel side by side); re-exported here.
__all__ = ["BUMP_INTEGRAL", "PLANAR_FOLLOWER", "Example", "bump", "earthworm_anchor_path", "earthworm_law",
           "earthworm_robot", "inchworm_law", "inchworm_robot", "peg_path", "snake_profile", "snake_robot",
           "travelling"]

#: The 2-D snake's peg reacts only laterally in its plane (N_Y).
PLANAR_FOLLOWER = (1,)
#: int_{-1/2}^{1/2} exp(s^2 / (s^2 - 1/4)) ds: the turn's bump B integrates to T_o times this (spec 5C: heading
#: change V_o b T_o 0.60345); computed by quadrature in tests/cosserat.
BUMP_INTEGRAL = 0.60345


@dataclass
class Example:
    """A robot of Sec. 5: its rod, strain field, contacts, the contact that sets the head's motion at t
    (``driver_at``), the initial head pose (4, 4), the actuation period (s, or None) and whether the
    reactions are computed (``dynamics``)."""
    name: str
    rod: Rod
    strain: StrainField
    contacts: list
    driver_at: Callable[[float], object]
    g_o: np.ndarray = field(default_factory=lambda: np.eye(4))
    period: float | None = None
    dynamics: bool = True


# ------------------------------------------------------------------------------------------- A. earthworm
def earthworm_anchor_path(i: int, wavelength: float, a_c: float, b_c: float):
    """The i-th (from 1) sweeping anchor: ``C_i = (s + lambda/4) mod lambda + (i - 1) lambda``, C_dot = c."""
    def path(t):
        s, c = b_c * t + 0.5 * a_c * t * t, b_c + a_c * t
        return (s + wavelength / 4.0) % wavelength + (i - 1) * wavelength, c, a_c
    return path


def earthworm_robot(rod: Rod, eps: float, wavelength: float, a_c: float, b_c: float) -> Example:
    anchors = [SweepingAnchor(earthworm_anchor_path(i, wavelength, a_c, b_c), name=f"anchor {i}")
               for i in range(1, int(round(rod.length / wavelength)) + 1)]
    period = wavelength / b_c if a_c == 0.0 and b_c > 0.0 else None
    strain = StrainField(TABLE_I["axial"], earthworm_law(eps, wavelength, a_c, b_c),
                         CompiledLaw("earthworm", earthworm_params(eps, wavelength, a_c, b_c)))
    return Example("earthworm", rod, strain, anchors, lambda t: anchors[0], period=period)


# ------------------------------------------------------------------------------------------- B. inchworm
def inchworm_robot(rod: Rod, alpha: float, omega: float) -> Example:
    """Head anchored on [kT, kT + T/2) (bending), tail on [kT + T/2, (k+1)T), T = pi / omega. The rod's plane
    (x, y) is the world's (x, z): the head starts turned by +90 deg about x."""
    T = math.pi / omega
    # the phase is computed on t rounded to a micro-second so a step landing on a switch time is on its new side
    in_first_half = (lambda t: (round(t * 1e6) / 1e6) % T < T / 2.0 - 1e-9)   # noqa: E731
    head = LockedAnchor(0.0, in_first_half, name="head anchor")
    tail = LockedAnchor(rod.length, lambda t: not in_first_half(t), name="tail anchor")
    g_o = np.eye(4)
    g_o[:3, :3] = exp_so3(np.array([math.pi / 2.0, 0.0, 0.0]))
    strain = StrainField(TABLE_I["planar"], inchworm_law(alpha, omega, rod.length),
                         CompiledLaw("inchworm", inchworm_params(alpha, omega, rod.length)))
    return Example("inchworm", rod, strain, [head, tail], lambda t: head if in_first_half(t) else tail,
                   g_o=g_o, period=T)


# ------------------------------------------------------------------------------------------- C-D. snakes
def peg_path(i: int, p: int, length: float, V_o: float):
    """``C_i = ((i - 1/2) l / p + |V_o| t) mod l``: pegs on the head's path, recycled at the tail."""
    return lambda t: ((i - 0.5) * length / p + abs(V_o) * t) % length


def snake_robot(rod: Rod, a: float, b: float, V_o: float, wavelength: float, t_o: float, T_o: float,
                supports: int, b_y: float | None = None) -> Example:
    """2-D (``b_y`` None: case 5, K_Z) or 3-D (case 4, K_Y = b_y B, K_Z as in 2-D) snake on p pegs."""
    omega = 2.0 * math.pi * V_o / wavelength
    case, components = (TABLE_I["planar"], PLANAR_FOLLOWER) if b_y is None else (TABLE_I["twistless"], FOLLOWER)
    strain = StrainField(case, snake_law(a, b, omega, t_o, T_o, V_o, b_y),
                         CompiledLaw("snake", snake_params(a, b, omega, t_o, T_o, V_o, b_y)))
    guide = HeadGuide(V_o)
    pegs = [FollowerSupport(peg_path(i, supports, rod.length, V_o), components, name=f"peg {i}")
            for i in range(1, supports + 1)]
    return Example("snake3d" if b_y is not None else "snake2d", rod, strain, [guide, *pegs],
                   lambda t: guide, period=wavelength / abs(V_o))
