"""The two algorithms of the paper: the dynamic one (free head, Fig. 2) and the contact-driven kinematic one
(Fig. 5), and their time stepping (RK4 on the head pose as position + unit quaternion).

One instant of either algorithm gives a :class:`RodState`; a run is a list of them at the recorded times.
``compiled=True`` runs the kinematic algorithm through sim/cosserat/kernels.py (the strain law's compiled form,
sim/cosserat/laws/; the same arithmetic, ~1e-12 apart): one compiled call per recorded instant, per Block 0, or
per chunk of head steps between records when the driving contact has ``advance_compiled`` (the snakes' guide).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from sim.spatial import matrix_to_quat, quat_to_matrix

from . import kernels, lie
from .contacts import CannotHold, split_reaction
from .rod import SAME_ABSCISSA_M, Nodes, Rod, block1, block2, build_nodes, momentum, twists
from .strains import StrainField


@dataclass
class RodState:
    """The rod at one instant. g_o (4, 4) head pose, world; eta_o, etad_o (6,) head frame; nodes: the X grid;
    eta, etad, Lam (N, 6) frame X; Fc (6,) the contacts' total wrench on the rod, head frame, about the head
    (N, N m); wrenches [(C_i m, F_i (6,) frame C_i)] per reaction contact (in the order of ``contacts``, zeros
    when inactive); closure and contact_residual: checks 1 and 2 of the spec (relative, and m/s or rad/s)."""
    t: float
    g_o: np.ndarray
    eta_o: np.ndarray
    etad_o: np.ndarray
    nodes: Nodes
    eta: np.ndarray
    etad: np.ndarray
    Lam: np.ndarray
    Fc: np.ndarray
    wrenches: list
    closure: float
    contact_residual: float

    def backbone(self) -> np.ndarray:
        """World positions (N, 3) m of the section centres."""
        return (self.g_o @ self.nodes.g_rel)[:, :3, 3]


def place_wrenches(rod: Rod, split):
    """Split point wrenches into (F-, F+, inside list): a contact at X = 0 acts as F-, at X = l as F+."""
    F_minus, F_plus, inside = np.zeros(6), np.zeros(6), []
    for C, F in split:
        if C <= SAME_ABSCISSA_M:
            F_minus = F_minus + F
        elif C >= rod.length - SAME_ABSCISSA_M:
            F_plus = F_plus + F
        else:
            inside.append((C, F))
    return F_minus, F_plus, inside


def kinematic_instant(rod: Rod, strain: StrainField, contacts, driver, t: float, g_o: np.ndarray,
                      dynamics: bool = True, *, compiled: bool = False) -> RodState:
    """Fig. 5 at time t: 0. (eta_o, etad_o) from the driving contact; 1. Block 1 with the non-contact loads;
    2. ``Fc = Mo etad_o - Fo``; 3. Fc split over the active contacts (minimum norm), Block 2.
    ``dynamics=False``: kinematics only (Lam, Fc zero). ``compiled``: through sim/cosserat/kernels.py."""
    if compiled:
        return compiled_instant(rod, strain, contacts, driver, t, g_o, dynamics)
    eta_o, etad_o, pose = driver.head_motion(rod, strain, t, g_o)
    if pose is not None:
        g_o = pose
    active = [c for c in contacts if c.active(t) and c.reaction.shape[1] > 0]
    nodes = build_nodes(rod, strain, t, cuts=[c.abscissa(t) for c in active])
    if not dynamics:
        eta = twists(nodes, eta_o)
        zero = np.zeros_like(eta)
        residual = max((c.residual(rod, nodes, eta, t) for c in contacts if c.active(t)), default=0.0)
        return RodState(t, g_o, eta_o, etad_o, nodes, eta, zero, zero, np.zeros(6), [], 0.0, residual)
    first = block1(rod, nodes, g_o, eta_o)
    Fc = first.Mo @ etad_o - first.Fo
    split = split_reaction(nodes, Fc, active, t)
    F_minus, F_plus, inside = place_wrenches(rod, split)
    second = block2(rod, nodes, first, etad_o, inside, F_minus, F_plus)
    residual = max((c.residual(rod, nodes, first.eta, t) for c in contacts if c.active(t)), default=0.0)
    by_contact = dict(zip((id(c) for c in active), split))
    wrenches = [by_contact.get(id(c), (c.abscissa(t), np.zeros(6))) for c in contacts if c.reaction.shape[1] > 0]
    return RodState(t, g_o, eta_o, etad_o, nodes, first.eta, second.etad, second.Lam, Fc, wrenches,
                    second.closure, residual)


def head_motion(driver, rod: Rod, strain: StrainField, t: float, g_o: np.ndarray, compiled: bool):
    """Block 0 of the driving contact: its compiled form when asked and it has one, else its Python form."""
    if compiled and hasattr(driver, "head_motion_compiled"):
        return driver.head_motion_compiled(rod, strain, t, g_o)
    return driver.head_motion(rod, strain, t, g_o)


def _packed(array) -> np.ndarray:
    """A float C-contiguous copy or view (the one array type the kernels are compiled and cached for)."""
    return np.ascontiguousarray(array, dtype=float)


def compiled_instant(rod: Rod, strain: StrainField, contacts, driver, t: float, g_o: np.ndarray,
                     dynamics: bool = True) -> RodState:
    """:func:`kinematic_instant` with Blocks 0-2 and the split in compiled kernels (one call after Block 0)."""
    eta_o, etad_o, pose = head_motion(driver, rod, strain, t, g_o, True)
    if pose is not None:
        g_o = pose
    supports = [c for c in contacts if c.reaction.shape[1] > 0]
    C = np.array([float(c.abscissa(t)) for c in supports])
    active = np.array([bool(c.active(t)) for c in supports], dtype=bool)
    S = np.zeros((len(supports), 6, 6))
    columns = np.array([c.reaction.shape[1] for c in supports], dtype=np.int64)
    for i, c in enumerate(supports):
        S[i, :, :columns[i]] = c.reaction
    (X, segments, xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv, eta, etad, Lam, Fc, F, closure, status,
     held) = kernels.instant(*strain.kernel_law(), float(rod.length), int(rod.n_X), _packed(rod.Mc),
                               _packed(rod.gravity), float(t), _packed(g_o), _packed(eta_o), _packed(etad_o), C,
                               active, S, columns, bool(dynamics))
    if status == kernels.NOT_A_NODE:
        raise ValueError(f"a support is off the body: abscissae {C[active].tolist()} m, body [0, {rod.length:g}] m")
    if status == kernels.NO_SUPPORT:
        raise CannotHold("no active support can exert the reaction")
    if status == kernels.CANNOT_HOLD:
        raise CannotHold(f"the supports cannot exert the reaction {np.round(Fc, 6).tolist()} (head frame)")
    nodes = Nodes(X, [(int(a), int(b)) for a, b in segments], xi, xi_X, xi_t, xi_tt, g_rel, Adk, Adk_inv)
    # a contact whose residual is its reacting twist components (``residual_is_reaction_twist``) has it computed
    # by the kernel; the others (their own constraint) in Python
    by_kernel = {id(c): float(r) for c, r in zip(supports, held) if getattr(c, "residual_is_reaction_twist", False)}
    residual = max((by_kernel[id(c)] if id(c) in by_kernel else c.residual(rod, nodes, eta, t)
                    for c in contacts if c.active(t)), default=0.0)
    wrenches = [(float(C[i]), F[i]) for i in range(len(supports))] if dynamics else []
    return RodState(t, g_o, eta_o, etad_o, nodes, eta, etad, Lam, Fc, wrenches, float(closure), residual)


def pose_to_state(g: np.ndarray) -> np.ndarray:
    """(7,) position m and unit quaternion (w, x, y, z) of a pose (4, 4)."""
    return np.concatenate([g[:3, 3], matrix_to_quat(g[:3, :3])])


def state_to_pose(y: np.ndarray) -> np.ndarray:
    g = np.eye(4)
    g[:3, :3] = quat_to_matrix(y[3:7] / np.linalg.norm(y[3:7]))
    g[:3, 3] = y[:3]
    return g


def pose_rate(y: np.ndarray, eta: np.ndarray) -> np.ndarray:
    """d/dt of (position, quaternion) (7,) for the body twist eta (6,): ``p_dot = R V``, ``q_dot = q (0, Omega) / 2``."""
    w, x, y_, z = y[3:7]
    ox, oy, oz = eta[3:]
    q_dot = 0.5 * np.array([-x * ox - y_ * oy - z * oz, w * ox + y_ * oz - z * oy,
                            w * oy - x * oz + z * ox, w * oz + x * oy - y_ * ox])
    return np.concatenate([quat_to_matrix(y[3:7] / np.linalg.norm(y[3:7])) @ eta[:3], q_dot])


def rk4(f: Callable[[float, np.ndarray], np.ndarray], t: float, y: np.ndarray, dt: float) -> np.ndarray:
    k1 = f(t, y)
    k2 = f(t + dt / 2, y + dt / 2 * k1)
    k3 = f(t + dt / 2, y + dt / 2 * k2)
    k4 = f(t + dt, y + dt * k3)
    out = y + dt / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    out[3:7] /= np.linalg.norm(out[3:7])
    return out


def advance_head(rod: Rod, strain: StrainField, driver, t: float, dt: float, g: np.ndarray, *,
                 compiled: bool = False) -> np.ndarray:
    """The head pose (4, 4) at t + dt: the one the driving contact fixes (``fixes_pose``, a locked anchor),
    else RK4 on (position, quaternion) with the head twist of Block 0 (``compiled``: its compiled form)."""
    if getattr(driver, "fixes_pose", False):
        return head_motion(driver, rod, strain, t + dt, g, compiled)[2]

    twist_at: dict[float, np.ndarray] = {}      # RK4's two mid-step stages share one Block 0

    def rate(tau, y):
        if tau not in twist_at:
            twist_at[tau] = head_motion(driver, rod, strain, tau, g, compiled)[0]
        return pose_rate(y, twist_at[tau])
    return state_to_pose(rk4(rate, t, pose_to_state(g), dt))


def run_kinematic(rod: Rod, strain: StrainField, contacts, driver_at: Callable[[float], object], duration: float,
                  dt: float, record_every: int = 1, g_o: np.ndarray | None = None, dynamics: bool = True,
                  progress: Callable[[int], None] | None = None, *, compiled: bool = False) -> list[RodState]:
    """The contact-driven algorithm over [0, duration]: the head pose follows the driving contact
    (``driver_at(t)``: the contact setting Block 0 on [t, t + dt)); its pose is integrated by RK4 from eta_o
    unless the contact fixes it. Records every ``record_every`` steps (and the last). ``compiled``: through
    sim/cosserat/kernels.py (the strain needs a compiled form, :func:`has_compiled_form`); a driving contact
    with ``advance_compiled`` then steps its head over each stretch between records in one call."""
    if compiled and not has_compiled_form(strain):
        raise ValueError(f"the {strain.case.name} strain law has no compiled form (sim/cosserat/laws/)")
    g = np.eye(4) if g_o is None else np.array(g_o, dtype=float)
    steps = max(1, int(round(duration / dt)))
    driver = driver_at(0.0)
    driver.engage(rod, strain, 0.0, g)
    states = [kinematic_instant(rod, strain, contacts, driver, 0.0, g, dynamics, compiled=compiled)]
    n = 0
    y = None        # the head's (position, quaternion) while chunks follow each other (saves a round trip to g)
    while n < steps:
        now = driver_at(n * dt)
        if now is not driver:
            driver = now
            driver.engage(rod, strain, n * dt, g)
        count = 1
        if compiled and hasattr(driver, "advance_compiled"):
            # the steps up to the next record with the same driver, in one call
            while (n + count) % record_every != 0 and n + count < steps and driver_at((n + count) * dt) is driver:
                count += 1
            y = driver.advance_compiled(strain, n, count, dt, pose_to_state(g) if y is None else y)
            g = state_to_pose(y)
        else:
            y = None
            g = advance_head(rod, strain, driver, n * dt, dt, g, compiled=compiled)
        n += count
        if n % record_every == 0 or n == steps:
            states.append(kinematic_instant(rod, strain, contacts, driver, n * dt, g, dynamics, compiled=compiled))
        if progress is not None:
            progress(count)
    return states


def has_compiled_form(strain: StrainField) -> bool:
    """Whether the strain law has a compiled form, so :func:`run_kinematic` can run with ``compiled=True``."""
    return strain.compiled is not None


def free_instant(rod: Rod, strain: StrainField, t: float, g_o: np.ndarray, eta_o: np.ndarray) -> RodState:
    """Fig. 2 at time t (free head, no contact): Block 1, ``etad_o = Mo^-1 Fo``, Block 2."""
    nodes = build_nodes(rod, strain, t)
    first = block1(rod, nodes, g_o, eta_o)
    etad_o = np.linalg.solve(first.Mo, first.Fo)
    second = block2(rod, nodes, first, etad_o)
    return RodState(t, g_o, eta_o, etad_o, nodes, first.eta, second.etad, second.Lam, np.zeros(6), [],
                    second.closure, 0.0)


def run_free(rod: Rod, strain: StrainField, duration: float, dt: float, g_o=None, eta_o=None,
             record_every: int = 1) -> list[RodState]:
    """The dynamic algorithm over [0, duration]: RK4 on (head position, quaternion, eta_o)."""
    y = np.concatenate([pose_to_state(np.eye(4) if g_o is None else np.asarray(g_o, dtype=float)),
                        np.zeros(6) if eta_o is None else np.asarray(eta_o, dtype=float)])

    def rate(t, y):
        g = state_to_pose(y)
        nodes = build_nodes(rod, strain, t)
        first = block1(rod, nodes, g, y[7:])
        return np.concatenate([pose_rate(y, y[7:]), np.linalg.solve(first.Mo, first.Fo)])

    steps = max(1, int(round(duration / dt)))
    states = [free_instant(rod, strain, 0.0, state_to_pose(y), y[7:])]
    for n in range(steps):
        y = rk4(rate, n * dt, y, dt)
        if (n + 1) % record_every == 0 or n + 1 == steps:
            states.append(free_instant(rod, strain, (n + 1) * dt, state_to_pose(y), y[7:].copy()))
    return states


def world_momentum(rod: Rod, state: RodState) -> np.ndarray:
    """The rod's momentum (6,) in world axes about the world origin (kg m/s, kg m^2/s)."""
    P = momentum(rod, state.nodes, state.eta)
    return lie.Ad_inv(state.g_o[None])[0].T @ P
