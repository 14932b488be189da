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
from .strains import TABLE_I, StrainField

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
def earthworm_law(eps: float, wavelength: float, a_c: float, b_c: float):
    """``Gamma_X = 1 + eps sin(phi)``, ``phi = (2 pi / lambda)(s(t) - X)``, ``s = b_c t + a_c t^2 / 2``."""
    k = 2.0 * math.pi / wavelength

    def law(X, t):
        s, c = b_c * t + 0.5 * a_c * t * t, b_c + a_c * t
        phi = k * (s - X)
        sin, cos = np.sin(phi), np.cos(phi)
        value = 1.0 + eps * sin
        return (value[:, None], (-eps * k * cos)[:, None], (eps * k * c * cos)[:, None],
                (eps * (-(k * c) ** 2 * sin + k * a_c * cos))[:, None])
    return law


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
    return Example("earthworm", rod, StrainField(TABLE_I["axial"], earthworm_law(eps, wavelength, a_c, b_c)),
                   anchors, lambda t: anchors[0], period=period)


# ------------------------------------------------------------------------------------------- B. inchworm
def inchworm_law(alpha: float, omega: float, length: float):
    """``K_Z = theta'``, ``theta = alpha sin^2(omega t) sin(2 pi (X - l) / l)``."""
    k = 2.0 * math.pi / length

    def law(X, t):
        shape = alpha * k * np.cos(k * (X - length))
        shape_X = -alpha * k * k * np.sin(k * (X - length))
        s2, ds2, dds2 = (math.sin(omega * t) ** 2, omega * math.sin(2 * omega * t),
                         2 * omega * omega * math.cos(2 * omega * t))
        return (s2 * shape)[:, None], (s2 * shape_X)[:, None], (ds2 * shape)[:, None], (dds2 * shape)[:, None]
    return law


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
    return Example("inchworm", rod, StrainField(TABLE_I["planar"], inchworm_law(alpha, omega, rod.length)),
                   [head, tail], lambda t: head if in_first_half(t) else tail, g_o=g_o, period=T)


# ------------------------------------------------------------------------------------------- C-D. snakes
def bump(tau: np.ndarray, T_o: float):
    """``B(tau) = exp(tau^2 / (tau^2 - T_o^2 / 4))`` on |tau| < T_o / 2, else 0; with its first two derivatives."""
    a = T_o * T_o / 4.0
    inside = np.abs(tau) < T_o / 2.0
    tt = np.where(inside, tau, 0.0)
    u = tt * tt - a
    B = np.where(inside, np.exp(tt * tt / u), 0.0)
    f1 = -2.0 * a * tt / (u * u)
    f2 = -2.0 * a * (u - 4.0 * tt * tt) / (u * u * u)
    return B, np.where(inside, B * f1, 0.0), np.where(inside, B * (f2 + f1 * f1), 0.0)


def travelling(V_o: float, profile: Callable[[np.ndarray], tuple]):
    """A strain ``K = f(u)``, ``u = t + X / V_o`` (so ``K_t = V_o K'``: every section follows the head):
    returns (X, t) -> (K, K', K_t, K_tt) with profile(u) = (f, f', f'')."""
    def law(X, t):
        f, f1, f2 = profile(t + X / V_o)
        return f, f1 / V_o, f1, f2
    return law


def snake_profile(a: float, b: float, omega: float, t_o: float, T_o: float):
    """Eq. 54: ``a cos(omega u) + b B(u - t_o - T_o / 2)``."""
    def profile(u):
        B, B1, B2 = bump(u - t_o - T_o / 2.0, T_o)
        return (a * np.cos(omega * u) + b * B, -a * omega * np.sin(omega * u) + b * B1,
                -a * omega * omega * np.cos(omega * u) + b * B2)
    return profile


def peg_path(i: int, p: int, length: float, V_o: float):
    """``C_i = ((i - 1/2) l / p + |V_o| t) mod l``: pegs on the head's path, recycled at the tail."""
    return lambda t: ((i - 0.5) * length / p + abs(V_o) * t) % length


def snake_robot(rod: Rod, a: float, b: float, V_o: float, wavelength: float, t_o: float, T_o: float,
                supports: int, b_y: float | None = None) -> Example:
    """2-D (``b_y`` None: case 5, K_Z) or 3-D (case 4, K_Y = b_y B, K_Z as in 2-D) snake on p pegs."""
    omega = 2.0 * math.pi * V_o / wavelength
    turn = travelling(V_o, snake_profile(a, b, omega, t_o, T_o))
    if b_y is None:
        case, components, law = TABLE_I["planar"], PLANAR_FOLLOWER, turn
    else:
        lift = travelling(V_o, snake_profile(0.0, b_y, omega, t_o, T_o))

        def law(X, t):
            return tuple(np.stack([y, z], axis=1) for y, z in zip(lift(X, t), turn(X, t)))
        case, components = TABLE_I["twistless"], FOLLOWER
    guide = HeadGuide(V_o)
    pegs = [FollowerSupport(peg_path(i, supports, rod.length, V_o), components, name=f"peg {i}")
            for i in range(1, supports + 1)]
    return Example("snake3d" if b_y is not None else "snake2d", rod, StrainField(case, law), [guide, *pegs],
                   lambda t: guide, period=wavelength / abs(V_o))
