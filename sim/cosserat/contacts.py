"""Contacts of Table II (ideal, bilateral), as plug-ins of the kinematic algorithm (Fig. 5).

A contact is an object with
- ``abscissa(t) -> float``: its material point C(t) in [0, l] (m);
- ``active(t) -> bool``: whether it acts at t (intervals are closed on the left, open on the right);
- ``reaction``: (6, m) the wrench components it can exert, frame C (columns of the identity; m = 0: none);
- ``residual(rod, nodes, eta, t) -> float``: how far the recomputed twist eta (N, 6) is from its constraint
  (``residual_is_reaction_twist = True`` says it is ``max |reaction^T eta(C)|``, which the compiled path then
  computes in its kernel);
and, if it can set the head's motion (Block 0), ``head_motion(rod, field, t, g_o) -> (eta_o, etad_o, pose)``
with ``pose`` the head pose it implies (4, 4) or None when the head pose is integrated from eta_o (a contact
whose ``fixes_pose`` is true always gives it), and
``engage(rod, field, t, g_o)`` called when it takes over (a locked anchor records where it holds).
Adding a contact type is adding a class; :func:`split_reaction` shares the reaction among the active ones.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from . import kernels, lie
from .rod import Nodes, Rod, accelerations, build_nodes, twists
from .strains import StrainField

#: Reaction components, indices into a wrench (N_X, N_Y, N_Z, C_X, C_Y, C_Z).
FULL_WRENCH = (0, 1, 2, 3, 4, 5)
#: A follower support's reactions: the lateral forces and the moment about the axis (Table II).
FOLLOWER = (1, 2, 3)
#: Relative residual of the minimum-norm split above which the supports cannot hold the body: far above the
#: split's rounding (~1e-13) and far below any real imbalance (the reaction has the size of the inertia forces).
HOLD_TOLERANCE = 1e-8


def selection(components) -> np.ndarray:
    """(6, m) columns of the identity picking the wrench ``components``."""
    return np.eye(6)[:, list(components)]


class CannotHold(ValueError):
    """The active supports cannot exert the reaction the imposed motion needs."""


def head_from_point(rod: Rod, field: StrainField, t: float, C: float, eta_C: np.ndarray, etad_C: np.ndarray):
    """Block 0 for a point whose twist and acceleration (6,) frame C are known: run Sec. 1 over [0, C] from
    ``eta_o = 0`` (eta_rel(C)), then from that eta_o with ``etad_o = 0`` (zeta(C)), and transport back:
    ``eta_o = Ad(k(C))^-1 (eta_C - eta_rel(C))``, ``etad_o = Ad(k(C))^-1 (etad_C - zeta(C))``. Returns
    (eta_o, etad_o, g_rel(C), nodes over [0, C])."""
    nodes = build_nodes(rod, field, t, upto=C)
    back = nodes.Adk_inv[-1]
    eta_o = back @ (eta_C - twists(nodes, np.zeros(6))[-1])
    eta = twists(nodes, eta_o)
    etad_o = back @ (etad_C - accelerations(nodes, eta, np.zeros(6))[-1])
    return eta_o, etad_o, nodes.g_rel[-1], nodes


@dataclass
class LockedAnchor:
    """Material point C held at a world pose g_c over the time windows of ``active`` (``eta(C) = 0``)."""
    C: float
    active: Callable[[float], bool]
    name: str = "anchor"
    reaction: np.ndarray = field(default_factory=lambda: selection(FULL_WRENCH))
    g_c: np.ndarray | None = None
    fixes_pose = True           # Block 0 gives the head pose itself: g_o = g_c k(C)
    residual_is_reaction_twist = True   # residual = max |S^T eta(C)| (S the reaction): the compiled path's own

    def abscissa(self, t: float) -> float:
        return self.C

    def engage(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray) -> None:
        self.g_c = g_o @ build_nodes(rod, strain, t, upto=self.C).g_rel[-1]

    def head_motion(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        eta_o, etad_o, g_rel_C, _ = head_from_point(rod, strain, t, self.C, np.zeros(6), np.zeros(6))
        return eta_o, etad_o, self.g_c @ lie.inv_pose(g_rel_C[None])[0]

    def head_motion_compiled(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        """:meth:`head_motion` through sim/cosserat/kernels.py."""
        zero = np.zeros(6)
        eta_o, etad_o, g_rel_C = kernels.head_from_point(*strain.kernel_law(), float(rod.length), int(rod.n_X),
                                                         float(t), float(self.C), zero, zero)
        return eta_o, etad_o, self.g_c @ lie.inv_pose(g_rel_C[None])[0]

    def residual(self, rod: Rod, nodes: Nodes, eta: np.ndarray, t: float) -> float:
        return float(np.max(np.abs(eta[nodes.at(self.C)])))


@dataclass
class SweepingAnchor:
    """A world-fixed point where the body's material point C(t) passes: ``eta(C) + xi(C) C_dot = 0``.
    ``path(t) -> (C, C_dot, C_ddot)`` (m, m/s, m/s^2)."""
    path: Callable[[float], tuple[float, float, float]]
    name: str = "sweeping anchor"
    reaction: np.ndarray = field(default_factory=lambda: selection(FULL_WRENCH))

    def abscissa(self, t: float) -> float:
        return self.path(t)[0]

    def active(self, t: float) -> bool:
        return True

    def engage(self, rod, strain, t, g_o) -> None:
        """Nothing to record: the anchor's world pose does not enter the motion."""

    def head_motion(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        C, C_dot, C_ddot = self.path(t)
        at = strain(np.array([C]), t)
        xi, xi_X, xi_t = at.xi[0], at.xi_X[0], at.xi_t[0]
        eta_C = -xi * C_dot
        # d/dt [eta(C(t), t) + xi(C(t), t) C_dot] = 0, with eta' = -ad_xi eta + xi_t:
        etad_C = -C_dot * (-lie.ad(xi[None])[0] @ eta_C + 2.0 * xi_t) - xi_X * C_dot ** 2 - xi * C_ddot
        eta_o, etad_o, _, _ = head_from_point(rod, strain, t, C, eta_C, etad_C)
        return eta_o, etad_o, None

    def head_motion_compiled(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        """:meth:`head_motion` through sim/cosserat/kernels.py."""
        C, C_dot, C_ddot = self.path(t)
        eta_o, etad_o = kernels.sweeping_head(*strain.kernel_law(), float(rod.length), int(rod.n_X), float(t),
                                              float(C), float(C_dot), float(C_ddot))
        return eta_o, etad_o, None

    def residual(self, rod: Rod, nodes: Nodes, eta: np.ndarray, t: float) -> float:
        C, C_dot, _ = self.path(t)
        j = nodes.at(C)
        return float(np.max(np.abs(eta[j] + nodes.xi[j] * C_dot)))


@dataclass
class FollowerSupport:
    """A peg the body slides along without lateral slip: ``V_Y, V_Z, Omega_X (C) = 0`` (planar: V_Y only).
    ``path(t) -> C`` (m); reactions N_Y, N_Z, C_X (or the subset ``components``)."""
    path: Callable[[float], float]
    components: tuple[int, ...] = FOLLOWER
    name: str = "support"
    reaction: np.ndarray = field(init=False)
    residual_is_reaction_twist = True   # residual = max |S^T eta(C)| (S the reaction): the compiled path's own

    def __post_init__(self):
        self.reaction = selection(self.components)

    def abscissa(self, t: float) -> float:
        return self.path(t)

    def active(self, t: float) -> bool:
        return True

    def residual(self, rod: Rod, nodes: Nodes, eta: np.ndarray, t: float) -> float:
        return float(np.max(np.abs(eta[nodes.at(self.path(t)), list(self.components)])))


@dataclass
class HeadGuide:
    """The head glides along its own axis at speed V_o (m/s) and every section follows it (the snakes, Sec. 5C-D):
    ``eta_o = (V_o, 0, 0, 0, V_o K_Y(0), V_o K_Z(0))``, ``etad_o = (0, 0, 0, 0, V_o K_Y_t(0), V_o K_Z_t(0))``.
    It exerts nothing (the pegs behind it do)."""
    V_o: float
    name: str = "head guide"
    reaction: np.ndarray = field(default_factory=lambda: np.zeros((6, 0)))

    def abscissa(self, t: float) -> float:
        return 0.0

    def active(self, t: float) -> bool:
        return True

    def engage(self, rod, strain, t, g_o) -> None:
        """Nothing to record: the guide moves with the head."""

    def head_motion(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        at = strain(np.zeros(1), t)
        eta_o = np.zeros(6)
        etad_o = np.zeros(6)
        eta_o[0] = self.V_o
        eta_o[4:] = self.V_o * at.xi[0, 4:]
        etad_o[4:] = self.V_o * at.xi_t[0, 4:]
        return eta_o, etad_o, None

    def head_motion_compiled(self, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray):
        """:meth:`head_motion` through sim/cosserat/kernels.py."""
        eta_o, etad_o = kernels.guided_head(*strain.kernel_law(), float(self.V_o), float(t))
        return eta_o, etad_o, None

    def advance_compiled(self, strain: StrainField, first: int, count: int, dt: float, y: np.ndarray) -> np.ndarray:
        """``count`` RK4 steps of the head state y (7,) (position m, unit quaternion) from step index ``first``
        (t = n dt) in one compiled call (what algorithms.advance_head does one step at a time)."""
        return kernels.guided_steps(*strain.kernel_law(), float(self.V_o), int(first), int(count), float(dt),
                                    np.asarray(y, dtype=float))

    def residual(self, rod: Rod, nodes: Nodes, eta: np.ndarray, t: float) -> float:
        expected = np.zeros(6)
        expected[0] = self.V_o
        expected[4:] = self.V_o * nodes.xi[0, 4:]
        return float(np.max(np.abs(eta[0] - expected)))


def split_reaction(nodes: Nodes, Fc: np.ndarray, supports, t: float) -> list[tuple[float, np.ndarray]]:
    """The minimum-norm wrenches F_i (6,) frame C_i with ``sum Ad(k(C_i))^T F_i = Fc`` (Fc (6,) head frame);
    raises :class:`CannotHold` if no such split exists. Returns [(C_i, F_i)]."""
    columns, places = [], []
    for contact in supports:
        C = contact.abscissa(t)
        j = nodes.at(C)
        columns.append(nodes.Adk[j].T @ contact.reaction)
        places.append((C, contact.reaction))
    if not columns or sum(c.shape[1] for c in columns) == 0:
        if np.max(np.abs(Fc)) > 0.0:
            raise CannotHold("no active support can exert the reaction")
        return [(C, np.zeros(6)) for C, _ in places]
    A = np.hstack(columns)
    f, *_ = np.linalg.lstsq(A, Fc, rcond=None)
    scale = max(float(np.max(np.abs(Fc))), np.finfo(float).tiny)
    if float(np.max(np.abs(A @ f - Fc))) > HOLD_TOLERANCE * scale and np.max(np.abs(Fc)) > 0.0:
        raise CannotHold(f"the supports cannot exert the reaction {np.round(Fc, 6).tolist()} (head frame)")
    out, k = [], 0
    for C, S in places:
        out.append((C, S @ f[k:k + S.shape[1]]))
        k += S.shape[1]
    return out
