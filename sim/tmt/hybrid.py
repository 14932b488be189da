"""Event-driven integration of constrained TMT systems: impacts found as ``solve_ivp`` events, persistent
contact (Zeno) and the impact checks (docs/tmt.md, "Events, impacts and persistent contact").

Between events a system flows under :func:`sim.tmt.constraints.constrained_dynamics` (DOP853, rtol 1e-10,
atol 1e-12). :func:`integrate_until_event` runs one flow to the first root of its guards (terminal events, each
with a direction); the caller applies the reset and restarts. A root closer than :data:`REARM_TIME` to the restart
is the reset's own root found again and is ignored; a guard still on the wrong side after it (a contact that is
still approaching after its impact) is seen as a new crossing at once.

:func:`simulate_contacts` is the general loop for point-on-plane contacts of a fixed-base tree: each contact is
either open (its gap is a guard, direction -1: an impact when it closes) or persistent (its rows are
constraints; its normal force is a guard: lift-off when it falls through zero). At an impact the impact equations
(:func:`sim.tmt.constraints.impact`) are solved with the persistent contacts kept; the record flags a negative
normal impulse, a kinetic energy gain and a double impact (another open contact closed at the same instant, all
then solved together). A plastic contact (restitution 0) stays closed after its impact. A bouncing contact that
strikes with an approach speed below :data:`ZENO_SPEED` or for the :data:`ZENO_IMPACTS`-th time becomes
persistent through a plastic impact: the bounces of a ball would otherwise accumulate without end before a finite
time (Zeno).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy.integrate import solve_ivp

from ..model import Model
from .constraints import ConstraintSet, PointOnBody, constrained_dynamics, impact, point_kinematics
from .engine import tree_kinematics

#: The spec's integration: DOP853 with these relative and absolute tolerances (state units).
RTOL, ATOL = 1e-10, 1e-12
#: Roots within this time of a restart are the reset's own root found again: ignored (s, or non-dimensional).
REARM_TIME = 1e-9
#: A contact striking slower than this (m/s, normal approach speed) becomes persistent: its next bounce would
#: be shorter than the integrator's resolution (Zeno).
ZENO_SPEED = 1e-8
#: A contact's impact count at which it becomes persistent whatever its speed (the spec's bound on a Zeno run).
ZENO_IMPACTS = 100
#: Another open contact whose gap is below this (m) and closing when one strikes takes part in the same impact:
#: a double impact (flagged; the event locator's precision is ~1e-12 m at the tolerances above).
DOUBLE_IMPACT_GAP = 1e-8


@dataclass
class Guard:
    """An event: ``value(t, y)`` crosses zero in ``direction`` (-1: falling, +1: rising, 0: either)."""

    name: str
    value: Callable[[float, np.ndarray], float]
    direction: float = -1.0


@dataclass
class Arc:
    """One flow between events: samples ``t`` (k,) and ``y`` (k, n) (its start, the sample grid inside it, its
    end), and the event that ended it (``event`` None: the arc reached ``t_end``)."""

    t: np.ndarray
    y: np.ndarray
    event: str | None

    @property
    def t_end(self) -> float:
        return float(self.t[-1])

    @property
    def y_end(self) -> np.ndarray:
        return self.y[-1].copy()


def integrate_until_event(rate: Callable[[float, np.ndarray], np.ndarray], t0: float, y0: np.ndarray, t_end: float,
                          guards: Sequence[Guard], sample_dt: float, *, rtol: float = RTOL,
                          atol: float = ATOL) -> Arc:
    """Integrate y' = rate(t, y) from (t0, y0) to the first root of a guard or to t_end. Samples: the start, the
    grid k sample_dt inside the arc, the end (the event's state before any reset)."""
    events = []
    for guard in guards:
        safe_side = 1.0 if guard.direction <= 0 else -1.0

        def event(t, y, guard=guard, safe_side=safe_side):
            return safe_side if t - t0 < REARM_TIME else guard.value(t, y)
        event.terminal, event.direction = True, guard.direction
        events.append(event)
    grid = np.arange(np.floor(t0 / sample_dt) + 1.0, np.ceil(t_end / sample_dt)) * sample_dt
    grid = np.append(grid[(grid > t0 + REARM_TIME) & (grid < t_end - REARM_TIME)], t_end)
    y0 = np.asarray(y0, dtype=float)
    run = solve_ivp(rate, (t0, t_end), y0, method="DOP853", rtol=rtol, atol=atol, events=events or None,
                    t_eval=grid)
    if run.status == -1:
        raise RuntimeError(f"integration failed after t = {t0:.9g}: {run.message}")
    samples = np.reshape(np.asarray(run.y, dtype=float), (y0.size, -1)).T      # (k, n); none in a short arc
    t_all, y_all, name = np.append(t0, run.t), np.vstack([y0, samples]), None
    for k, times in enumerate(run.t_events or []):
        if times.size:
            keep = np.append(True, run.t < times[0])
            t_all, y_all = np.append(t_all[keep], times[0]), np.vstack([y_all[keep], run.y_events[k][0]])
            name = guards[k].name
            break
    return Arc(t=t_all, y=y_all, event=name)


# ------------------------------------------------------------------------------------------- plane contacts
@dataclass(frozen=True)
class PlaneContact:
    """A point of a body against a fixed plane {p: normal . p = offset} (normal (3,) unit, world; offset m).
    ``tangents`` (k, 3) world unit vectors: the rows that stick (empty: frictionless). ``restitution`` of the
    normal velocity (0: plastic); the tangential rows are plastic (sticking)."""

    name: str
    point: PointOnBody
    normal: np.ndarray
    offset: float = 0.0
    tangents: np.ndarray = field(default_factory=lambda: np.zeros((0, 3)))
    restitution: float = 0.0

    def directions(self) -> np.ndarray:
        """(k + 1, 3): the tangents, then the normal (the impact equations' order: normal last)."""
        return np.vstack([np.reshape(self.tangents, (-1, 3)), self.normal])


def contact_state(model: Model, q: np.ndarray, u: np.ndarray, contact: PlaneContact
                  ) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
    """(gap m, point position (3,) m, rows (k + 1, n) of the contact's directions, convective terms (k + 1,))."""
    kin = tree_kinematics(model, model.base_pose, q, u)
    position, jacobian, convective = point_kinematics(kin, contact.point, u)
    directions = contact.directions()
    return (float(contact.normal @ position - contact.offset), position, directions @ jacobian,
            directions @ convective)


def persistent_contacts(contacts: Sequence[tuple[PlaneContact, np.ndarray]]) -> ConstraintSet:
    """Contacts held closed: the normal row keeps the point on the plane, the tangent rows keep it at the
    position where it stuck ((3,) m, world, given with each contact)."""

    def constraints(model, kin, q, u, t):
        values, rows, gammas = [], [], []
        for contact, anchor in contacts:
            position, jacobian, convective = point_kinematics(kin, contact.point, u)
            directions = contact.directions()
            values.append(directions @ (position - anchor))
            rows.append(directions @ jacobian)
            gammas.append(directions @ convective)
        if not values:
            return np.zeros(0), np.zeros((0, len(u))), np.zeros(0), np.zeros(0)
        value = np.concatenate(values)
        return value, np.vstack(rows), np.concatenate(gammas), np.zeros(value.size)

    return constraints


def combined(*sets: ConstraintSet) -> ConstraintSet:
    """The rows of several constraint sets stacked, in order."""

    def constraints(model, kin, q, u, t):
        parts = [s(model, kin, q, u, t) for s in sets]
        return (np.concatenate([p[0] for p in parts]), np.vstack([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts]))

    return constraints


@dataclass
class ImpactRecord:
    """One impact: time, the contacts that struck (more than one: a double impact), their normal approach
    speeds before (m/s, > 0 approaching) and impulses (N s, rows of each contact, normal last), the kinetic
    energy change (J), whether the contacts became persistent (Zeno), the flags of the checks and the velocities
    after (n,)."""

    t: float
    contacts: list[str]
    approach_speeds: list[float]
    impulse: np.ndarray
    energy_change: float
    persistent: bool
    flags: list[str]
    u_after: np.ndarray


@dataclass
class ContactRun:
    """``t`` (T,), ``q`` (T, n), ``u`` (T, n), ``closed`` (T, len(contacts)) bool: persistent contacts;
    ``normal_force`` (T, len(contacts)) N (0 for an open contact); ``impacts``; ``lift_offs`` [(t, name)];
    ``flags``: every flag of every impact, with its time."""

    t: np.ndarray
    q: np.ndarray
    u: np.ndarray
    closed: np.ndarray
    normal_force: np.ndarray
    impacts: list[ImpactRecord]
    lift_offs: list[tuple[float, str]]
    flags: list[str]


def _mode(contacts: Sequence[PlaneContact], closed: dict[str, np.ndarray], base: ConstraintSet | None
          ) -> tuple[ConstraintSet, list[tuple[str, int]]]:
    """The constraint set of a contact mode (``base``'s rows, then the closed contacts') and, per closed contact,
    the index of its normal multiplier (counted from the end: the contacts' rows come last)."""
    active = [(c, closed[c.name]) for c in contacts if c.name in closed]
    constraints = combined(*([base] if base is not None else []), persistent_contacts(active))
    ends = np.cumsum([c.directions().shape[0] for c, _ in active])
    total = int(ends[-1]) if len(active) else 0
    return constraints, [(c.name, int(end) - 1 - total) for (c, _), end in zip(active, ends)]


def simulate_contacts(model: Model, q0: np.ndarray, u0: np.ndarray, t_end: float, contacts: Sequence[PlaneContact],
                      *, constraints: ConstraintSet | None = None, sample_dt: float = 0.01,
                      baumgarte: float | None = None, max_events: int = 10_000) -> ContactRun:
    """Integrate a fixed-base tree with plane contacts (module docstring) from (q0, u0) at t = 0 to t_end;
    ``constraints``: other (scleronomic) constraints held throughout."""
    n = model.n
    closed: dict[str, np.ndarray] = {}
    counts = {c.name: 0 for c in contacts}
    names = [c.name for c in contacts]
    by_name = {c.name: c for c in contacts}
    extra = {} if baumgarte is None else {"baumgarte": baumgarte}
    samples_t, samples_y, samples_closed, samples_force = [], [], [], []
    impacts, lift_offs, flags = [], [], []
    t, y = 0.0, np.concatenate([q0, u0]).astype(float)
    for _ in range(max_events):
        mode, normals = _mode(contacts, closed, constraints)

        def rate(time, state, mode=mode):
            return np.concatenate([state[n:], constrained_dynamics(model, state[:n], state[n:], time, mode,
                                                                   **extra).u_dot])

        guards = [Guard(c.name, lambda time, state, c=c: contact_state(model, state[:n], state[n:], c)[0])
                  for c in contacts if c.name not in closed]
        guards += [Guard(f"lift-off {name}", lambda time, state, row=row, mode=mode: constrained_dynamics(
            model, state[:n], state[n:], time, mode, **extra).multipliers[row]) for name, row in normals]
        arc = integrate_until_event(rate, t, y, t_end, guards, sample_dt)
        force = np.zeros((arc.t.size, len(contacts)))
        for name, row in normals:
            force[:, names.index(name)] = [constrained_dynamics(model, s[:n], s[n:], time, mode, **extra
                                                                ).multipliers[row] for time, s in zip(arc.t, arc.y)]
        samples_t.append(arc.t)
        samples_y.append(arc.y)
        samples_closed.append(np.tile([name in closed for name in names], (arc.t.size, 1)))
        samples_force.append(force)
        t, y = arc.t_end, arc.y_end
        if arc.event is None:
            break
        if arc.event.startswith("lift-off "):
            name = arc.event.removeprefix("lift-off ")
            del closed[name]
            lift_offs.append((t, name))
            continue
        record = _impact(model, y, t, arc.event, contacts, by_name, closed, counts, constraints)
        impacts.append(record)
        flags += [f"t = {t:.9g}: {flag}" for flag in record.flags]
        y[n:] = record.u_after
    else:
        raise RuntimeError(f"simulate_contacts: more than {max_events} events before t = {t_end:g}")
    return ContactRun(t=np.concatenate(samples_t), q=np.vstack(samples_y)[:, :n], u=np.vstack(samples_y)[:, n:],
                      closed=np.vstack(samples_closed), normal_force=np.vstack(samples_force), impacts=impacts,
                      lift_offs=lift_offs, flags=flags)


def _impact(model, y, t, struck, contacts, by_name, closed, counts, constraints) -> ImpactRecord:
    """The impact of contact ``struck`` at state y (and of every other open contact closing at the same instant):
    solved with the persistent rows kept; contacts made persistent when Zeno; ``closed`` and ``counts`` updated."""
    n = model.n
    q, u = y[:n], y[n:]
    states = {c.name: contact_state(model, q, u, c) for c in contacts if c.name not in closed}
    together = [struck] + [name for name, (gap, _, rows, _) in states.items()
                           if name != struck and gap < DOUBLE_IMPACT_GAP and rows[-1] @ u < 0.0]
    speeds = [float(-(states[name][2][-1] @ u)) for name in together]
    for name in together:
        counts[name] += 1
    # a plastic contact stays closed (its lift-off guard opens it if it pulls); a bouncing one when Zeno
    zeno = all(by_name[name].restitution == 0.0 or speed < ZENO_SPEED or counts[name] >= ZENO_IMPACTS
               for name, speed in zip(together, speeds))
    rows = np.vstack([states[name][2] for name in together])
    restitution = np.concatenate([np.append(np.zeros(by_name[name].tangents.shape[0]),
                                            0.0 if zeno else by_name[name].restitution) for name in together])
    normal_rows, row = [], 0
    for name in together:
        row += by_name[name].directions().shape[0]
        normal_rows.append(row - 1)
    mode, _ = _mode(contacts, closed, constraints)
    persistent = mode(model, tree_kinematics(model, model.base_pose, q, u), q, u, t)[1]
    result = impact(model, q, u, rows, restitution, persistent, normal_rows=tuple(normal_rows))
    flags = list(result.flags)
    if len(together) > 1:
        flags.append(f"double impact: {', '.join(together)} struck at the same instant (solved together)")
    if zeno:
        for name in together:
            gap, position = states[name][0], states[name][1]
            closed[name] = position - gap * by_name[name].normal        # the anchor on the plane
    return ImpactRecord(t=t, contacts=together, approach_speeds=speeds, impulse=result.impulse,
                          energy_change=result.energy_change, persistent=zeno, flags=flags, u_after=result.u_after)
