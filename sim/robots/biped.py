"""The passive biped with an upper body on a slope (Sadati et al. 2015, Fig. 1(6)): a TMT system with events
(docs/tmt.md, "Robots"; configs/robots/biped.toml).

Non-dimensional (g = 1, leg length 1 by default). x down the slope, y normal to it; gravity g (sin gamma,
-cos gamma, 0). Coordinates (5, or 4 without upper body): the stance foot's position (x, y), q1 the stance leg
from the slope's normal (> 0: the hip behind the foot, walking to +x), q2 the swing leg relative to the stance
leg, q3 the upper body relative to the swing leg. Point masses: a foot at each leg's end, the hip, the upper
body at ``upper_body_length`` above the hip along the swing leg's axis. A hip spring -k q2; nothing else acts.

Stance: the stance foot is pinned (2 rows; the multipliers are the ground reaction (tangential, normal)). Heel
strike: 2 q1 + q2 = 0 falling, counted only while q2 > 0 (the mid-stance scuff is ignored); a plastic, sticking
impact of the swing foot (the old stance foot released, its lift-off checked); the legs swap (absolute angles and
rates kept). Stumble: q2 rising through 0 with q1 < 0 (the swing foot below the slope ahead). Fall: the hip below
half a leg. The run ends after ``walk.strikes`` strikes, a stumble, a fall or ``walk.duration``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..config import ConfigError, number, table
from ..laws import ViscoElastic
from ..model import Model, ModelBuilder
from ..spatial import pose, spatial_inertia
from ..tmt.constraints import PointOnBody, constrained_dynamics, impact, pinned_points, point_kinematics, project
from ..tmt.engine import kinetic_energy, tree_kinematics
from ..tmt.hybrid import Guard, integrate_until_event
from ..tmt.offline import (Stopwatch, TMTSystem, check_options, not_a_tree, point_body, potential_energy,
                           save_figure, with_defaults)
from .schema import SIMULATION, robot_table

#: Every key of configs/robots/biped.toml with its default (the spec's values; the slope is not in the paper).
DEFAULTS = {
    "body": {"hip_mass": 1000.0, "foot_mass": 1.0, "upper_body_mass": 1.0, "leg_length": 1.0,
             "upper_body_length": 0.4, "hip_stiffness": 0.0035},
    "slope": {"angle": 0.009, "gravity": 1.0},
    "initial": {"q": [0.2, -0.4, -0.1], "u": [-0.2, 0.0158, 0.1]},
    "walk": {"strikes": 10, "duration": 200.0, "sample_dt": 0.05, "find_gait": False},
}
#: A stride map's fixed point is accepted below this residual (its coordinates' units: rad, rad per time unit).
GAIT_TOLERANCE = 1e-8
#: The hip below this fraction of the leg length is a fall.
FALL_HEIGHT = 0.5
#: Newton shooting stops after this many iterations (each costs the stride map's dimension + 1 strides).
GAIT_ITERATIONS = 12


def config_schema(config: dict, path) -> dict:
    mass = number(0.0, 1e6, expected="a mass >= 0 (mass units)")
    positive_length = number(above=0.0, maximum=100.0, expected="a length in (0, 100] (length units)")
    return table({
        "robot": robot_table("biped", {}),
        "body": table({"hip_mass": number(above=0.0, maximum=1e6, expected="a mass > 0"), "foot_mass": mass,
                       "upper_body_mass": mass, "leg_length": positive_length,
                       "upper_body_length": positive_length,
                       "hip_stiffness": number(0.0, 1e6, expected="a stiffness >= 0 (torque per rad)")}),
        "slope": table({"angle": number(-0.5, 0.5, expected="a slope in [-0.5, 0.5] rad"),
                        "gravity": number(above=0.0, maximum=1e3, expected="a gravity > 0")}),
        "initial": table({"q": {"type": "array", "items": number(-math.pi, math.pi), "minItems": 2, "maxItems": 3},
                          "u": {"type": "array", "items": number(-100.0, 100.0), "minItems": 2, "maxItems": 3}}),
        "walk": table({"strikes": {"type": "integer", "minimum": 1, "maximum": 10_000},
                       "duration": number(above=0.0, maximum=1e5, expected="a duration > 0 (time units)"),
                       "sample_dt": number(above=0.0, maximum=10.0, expected="a sample interval in (0, 10]"),
                       "find_gait": {"type": "boolean"}}),
        "simulation": SIMULATION,
    }, ["robot"])


def build(config: dict, path) -> Model:
    raise not_a_tree("biped", path)


@dataclass
class BipedParameters:
    hip_mass: float
    foot_mass: float
    upper_body_mass: float
    leg_length: float
    upper_body_length: float
    hip_stiffness: float
    slope: float
    gravity: float

    @property
    def upper_body(self) -> bool:
        return self.upper_body_mass > 0.0


def read_config(config: dict, path) -> tuple[BipedParameters, dict]:
    """(parameters, the walk and initial tables with defaults filled); a one-line ConfigError when the initial
    state does not match the body (3 angles with an upper body, 2 without)."""
    merged = with_defaults(config, DEFAULTS)
    p = BipedParameters(**merged["body"], slope=merged["slope"]["angle"], gravity=merged["slope"]["gravity"])
    size = 3 if p.upper_body else 2
    for key in ("q", "u"):
        if len(merged["initial"][key]) != size:
            raise ConfigError(path, f"initial.{key}", f"got {len(merged['initial'][key])} values, expected {size} "
                                                      f"({'q1, q2, q3' if p.upper_body else 'q1, q2'}: "
                                                      f"{'with' if p.upper_body else 'without'} an upper body)")
    return p, merged


def build_tree(p: BipedParameters) -> Model:
    """The fixed-base chain (module docstring): prismatic x, prismatic y, q1, q2 (, q3)."""
    gravity = p.gravity * np.array([math.sin(p.slope), -math.cos(p.slope), 0.0])
    massless = spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3)))
    builder = ModelBuilder("slope", massless, base_mode="fixed", gravity=gravity)
    builder.add_body("foot_x", "slope", joint_name="x", joint_type="prismatic", axis=[1, 0, 0], placement=pose(),
                     inertia=massless)
    builder.add_body("foot_y", "foot_x", joint_name="y", joint_type="prismatic", axis=[0, 1, 0], placement=pose(),
                     inertia=massless)
    leg = p.leg_length
    stance = point_body(p.foot_mass, [0, 0, 0]) + point_body(p.hip_mass, [0, leg, 0])
    builder.add_body("stance_leg", "foot_y", joint_name="q1", axis=[0, 0, 1], placement=pose(), inertia=stance)
    builder.add_body("swing_leg", "stance_leg", joint_name="q2", axis=[0, 0, 1], placement=pose(p=[0, leg, 0]),
                     inertia=point_body(p.foot_mass, [0, -leg, 0]), joint_law=ViscoElastic(k=p.hip_stiffness))
    if p.upper_body:
        builder.add_body("upper_body", "swing_leg", joint_name="q3", axis=[0, 0, 1], placement=pose(),
                         inertia=point_body(p.upper_body_mass, [0, p.upper_body_length, 0]))
    return builder.build(metadata={"name": "biped"})


STANCE_FOOT = PointOnBody(3, np.zeros(3))


def swing_foot(p: BipedParameters) -> PointOnBody:
    return PointOnBody(4, np.array([0.0, -p.leg_length, 0.0]))


@dataclass
class Step:
    """One step from a post-strike state: the samples ``t`` (k,), ``y`` (k, 2n), how it ended (``outcome``:
    "strike", "stumble", "fall", "time"), and at a strike: the state before, the impulse (tangential, normal), the
    kinetic energy change, the flags and the next post-strike state (legs swapped, its foot at its place)."""

    t: np.ndarray
    y: np.ndarray
    outcome: str
    before: np.ndarray | None = None
    impulse: np.ndarray | None = None
    energy_change: float = 0.0
    flags: tuple[str, ...] = ()
    after: np.ndarray | None = None


def stance_constraints(foot_position: np.ndarray):
    return pinned_points([(STANCE_FOOT, np.array([foot_position[0], foot_position[1], 0.0]))], axes=(0, 1))


def step(model: Model, p: BipedParameters, t0: float, y0: np.ndarray, t_end: float, sample_dt: float) -> Step:
    """Integrate the stance from (t0, y0) (stance foot at y0's (x, y)) to the next event and apply it."""
    n = model.n
    constraints = stance_constraints(y0[:2])

    def rate(t, y):
        return np.concatenate([y[n:], constrained_dynamics(model, y[:n], y[n:], t, constraints).u_dot])

    guards = [Guard("strike", lambda t, y: 2.0 * y[2] + y[3] if y[3] > 0.0 else 1.0, -1.0),
              Guard("scuff", lambda t, y: y[3], 1.0),
              Guard("fall", lambda t, y: math.cos(y[2]) - FALL_HEIGHT, -1.0)]
    t, y, samples_t, samples_y = t0, y0, [], []
    while True:
        arc = integrate_until_event(rate, t, y, t_end, guards, sample_dt)
        samples_t.append(arc.t)
        samples_y.append(arc.y)
        t, y = arc.t_end, arc.y_end
        if arc.event != "scuff" or y[2] < 0.0:
            break
        guards = [guard for guard in guards if guard.name != "scuff"]   # the swing leg has passed: once a step
    record = Step(t=np.concatenate(samples_t), y=np.vstack(samples_y),
                  outcome={"strike": "strike", "scuff": "stumble", "fall": "fall", None: "time"}[arc.event])
    if arc.event != "strike":
        return record
    q, u = y[:n], y[n:]
    kin = tree_kinematics(model, model.base_pose, q, u)
    position, rows, _ = point_kinematics(kin, swing_foot(p), u)
    strike = impact(model, q, u, rows[[0, 1]], np.zeros(2))
    flags = list(strike.flags)
    trailing = point_kinematics(tree_kinematics(model, model.base_pose, q, strike.u_after), STANCE_FOOT,
                                strike.u_after)[1] @ strike.u_after
    if trailing[1] <= 0.0:
        flags.append(f"the trailing foot does not lift off (normal velocity {trailing[1]:.3g}): a double support")
    after = swap_legs(q, strike.u_after, position, p)
    record.before, record.impulse, record.energy_change = y.copy(), strike.impulse, strike.energy_change
    record.flags, record.after = tuple(flags), after
    return record


def swap_legs(q: np.ndarray, u: np.ndarray, foot: np.ndarray, p: BipedParameters) -> np.ndarray:
    """The post-strike state with the legs swapped: the new stance leg is the old swing leg (absolute angles and
    rates kept), its foot at ``foot`` and at rest; the upper body keeps its absolute angle."""
    new_q = np.array([foot[0], foot[1], q[2] + q[3], -q[3]] + ([q[3] + q[4]] if p.upper_body else []))
    new_u = np.array([0.0, 0.0, u[2] + u[3], -u[3]] + ([u[3] + u[4]] if p.upper_body else []))
    return np.concatenate([new_q, new_u])


def post_strike_state(p: BipedParameters, x: np.ndarray, foot=(0.0, 0.0)) -> np.ndarray:
    """The full state from the stride map's coordinates x = (q1, u1, u2[, q3, u3]): both feet down (q2 = -2 q1)."""
    q = [foot[0], foot[1], x[0], -2.0 * x[0]] + ([x[3]] if p.upper_body else [])
    u = [0.0, 0.0, x[1], x[2]] + ([x[4]] if p.upper_body else [])
    return np.array(q + u)


def stride_coordinates(p: BipedParameters, y: np.ndarray) -> np.ndarray:
    """(q1, u1, u2[, q3, u3]) of a post-strike state."""
    n = 5 if p.upper_body else 4
    return np.array([y[2], y[n + 2], y[n + 3]] + ([y[4], y[n + 4]] if p.upper_body else []))


def stride_map(model: Model, p: BipedParameters, x: np.ndarray, sample_dt: float = 10.0,
               t_limit: float = 50.0) -> tuple[np.ndarray, Step]:
    """The next post-strike coordinates from x (see :func:`stride_coordinates`) and the step; NaN if no strike."""
    first = step(model, p, 0.0, post_strike_state(p, x), t_limit, sample_dt)
    if first.after is None:
        return np.full(x.size, np.nan), first
    return stride_coordinates(p, first.after), first


def energy(model: Model, y: np.ndarray) -> float:
    n = model.n
    return kinetic_energy(model, model.base_pose, y[:n], y[n:]) + potential_energy(model, y[:n])


def simulate_offline(config: dict, path: Path, args, progress: bool):
    from ..sim_run import SimRun

    duration = check_options(args, path, "biped")
    p, merged = read_config(config, path)
    walk = merged["walk"]
    t_end = duration if duration is not None else walk["duration"]
    model = build_tree(p)
    clock = Stopwatch()
    q0 = np.array([0.0, 0.0, *merged["initial"]["q"]])
    u0 = np.array([0.0, 0.0, *merged["initial"]["u"]])
    if abs(2 * q0[2] + q0[3]) > 1e-9:
        raise ConfigError(path, "initial.q", f"q2 = {q0[3]:g} is not -2 q1 = {-2 * q0[2]:g}: both feet must be on "
                                             "the slope at the start")
    q0, u0 = project(model, q0, u0, 0.0, stance_constraints(q0[:2]))
    t, y, steps = 0.0, np.concatenate([q0, u0]), []
    while len([s for s in steps if s.outcome == "strike"]) < walk["strikes"] and t < t_end:
        record = step(model, p, t, y, t_end, walk["sample_dt"])
        steps.append(record)
        if record.outcome != "strike":
            break
        t = float(record.t[-1])
        y = record.after
        foot = y[:2]
        q, u = project(model, y[:model.n], y[model.n:], t, stance_constraints(foot))
        y = np.concatenate([q, u])
    gait = find_gait(model, p, steps) if walk["find_gait"] else None
    arrays = sample_arrays(model, steps)
    metadata = {"name": config.get("robot", {}).get("name", "biped"), "kind": "biped", "parameters": merged,
                "coordinates": model.joint_names, "non_dimensional": "g = 1 and leg length 1 set the units",
                "steps": [step_summary(model, s) for s in steps], "gait": None if gait is None else {
                    "converged": gait.converged, "fixed_point": gait.fixed_point, "residual": gait.residual,
                    "eigenvalues": [[z.real, z.imag] for z in gait.eigenvalues], "step_time": gait.step_time,
                    "energy_lost": gait.energy_lost, "gravity_work": gait.gravity_work}}
    return SimRun(t=arrays.pop("t"), arrays=arrays, model=TMTSystem(model, metadata), config=config,
                  options={"config": str(path), "kind": "biped", "duration": t_end, "integrator": "DOP853",
                           "rtol": 1e-10, "sample_dt": walk["sample_dt"]},
                  wall_time_s=clock.elapsed(), units=dict(UNITS))


@dataclass
class Gait:
    converged: bool
    fixed_point: np.ndarray
    residual: float
    eigenvalues: np.ndarray
    step_time: float
    energy_lost: float
    gravity_work: float


def find_gait(model: Model, p: BipedParameters, steps: list[Step]) -> Gait | None:
    """Newton shooting (sim.periodic.newton_shooting) on the stride map from the last post-strike state."""
    from ..periodic import newton_shooting

    strikes = [s for s in steps if s.outcome == "strike"]
    if not strikes:
        return None
    x0 = stride_coordinates(p, strikes[-1].after)
    try:
        result = newton_shooting(lambda x: stride_map(model, p, x)[0], x0, tolerance=GAIT_TOLERANCE,
                                 max_iterations=GAIT_ITERATIONS)
    except (ValueError, np.linalg.LinAlgError):
        return None
    if not np.all(np.isfinite(result.multipliers)):
        return None
    _, final = stride_map(model, p, result.x)
    if final.after is None:
        return None
    return Gait(converged=bool(result.converged), fixed_point=result.x, residual=float(result.residual),
                eigenvalues=result.multipliers, step_time=float(final.t[-1]), energy_lost=-final.energy_change,
                gravity_work=potential_energy(model, final.y[0, :model.n], springs=False)
                - potential_energy(model, final.after[:model.n], springs=False))


#: Units and meaning of the recorded arrays (metadata.json).
UNITS = {
    "t": ("time (sqrt(l/g))", "sample times: a grid, plus each event's instant (before and after its reset)"),
    "q": ("length, rad", "coordinates: stance foot x, y, q1 (stance leg), q2 (swing rel. stance)[, q3 (upper body "
                         "rel. swing leg)]"),
    "u": ("per time unit", "their rates"),
    "ground_reaction": ("force (m g)", "the ground's force on the stance foot: tangential (x), normal (y)"),
    "energy": ("m g l", "kinetic + gravity + hip spring energy (constant between strikes)"),
    "constraint_residual": ("length", "max |c| of the stance foot's constraint"),
    "step": ("1", "index of the step each sample belongs to"),
    "hip": ("length", "hip position (x, y)"),
    "swing_foot": ("length", "swing foot position (x, y)"),
}


def sample_arrays(model: Model, steps: list[Step]) -> dict[str, np.ndarray]:
    """The recorded arrays of the steps (UNITS)."""
    n = model.n
    columns = {name: [] for name in UNITS}
    for index, record in enumerate(steps):
        constraints = stance_constraints(record.y[0, :2])
        for t, y in zip(record.t, record.y):
            q, u = y[:n], y[n:]
            result = constrained_dynamics(model, q, u, t, constraints)
            kin = tree_kinematics(model, model.base_pose, q, u)
            columns["t"].append(t)
            columns["q"].append(q)
            columns["u"].append(u)
            columns["ground_reaction"].append(result.multipliers)
            columns["energy"].append(energy(model, y))
            columns["constraint_residual"].append(float(np.abs(result.constraint).max()))
            columns["step"].append(index)
            columns["hip"].append(kin.origin[4][:2])
            columns["swing_foot"].append(point_kinematics(kin, swing_foot_of(model), u)[0][:2])
    return {name: np.asarray(values, dtype=float) for name, values in columns.items()}


def swing_foot_of(model: Model) -> PointOnBody:
    leg = float(model.joint_placement[4][1, 3])
    return PointOnBody(4, np.array([0.0, -leg, 0.0]))


def step_summary(model: Model, record: Step) -> dict:
    """What a step's record says (metadata.json's ``robot_metadata.steps``)."""
    n = model.n
    out = {"outcome": record.outcome, "t_start": float(record.t[0]), "t_end": float(record.t[-1]),
           "post_strike_start": record.y[0]}
    if record.outcome == "strike":
        out.update(pre_strike=record.before, impulse=record.impulse, energy_change=record.energy_change,
                   flags=list(record.flags), post_strike=record.after,
                   step_length=float(record.after[0] - record.y[0, 0]),
                   gravity_work=potential_energy(model, record.y[0, :n], springs=False)
                   - potential_energy(model, record.after[:n], springs=False))
    return out


def summarize(run) -> dict:
    """The biped's figures (docs/tmt.md): steps, period, length, speed, energy per step, the post-strike state of
    the last step, the gait (fixed point and stride eigenvalues) when found, the contact forces and residuals."""
    meta = run.model.metadata
    steps = meta["steps"]
    strikes = [s for s in steps if s["outcome"] == "strike"]
    summary: dict = {"steps_completed": len(strikes), "outcome": steps[-1]["outcome"] if steps else "none",
                     "impact_count": len(strikes), "strike_times": [s["t_end"] for s in strikes],
                     "step_periods": [s["t_end"] - s["t_start"] for s in strikes]}
    warnings = [f"step {k + 1}: {flag}" for k, s in enumerate(strikes) for flag in s["flags"]]
    if strikes:
        last = strikes[-1]
        period = last["t_end"] - last["t_start"]
        summary.update(step_period=period, step_length=last["step_length"], speed=last["step_length"] / period,
                       energy_lost_per_step=-last["energy_change"],
                       gravity_work_per_step=last["gravity_work"],
                       fixed_point=dict(zip(["x", "y", "q1", "q2", "q3", "u_x", "u_y", "u1", "u2", "u3"]
                                            if len(last["post_strike"]) == 10 else
                                            ["x", "y", "q1", "q2", "u_x", "u_y", "u1", "u2"], last["post_strike"])),
                       normal_impulses=[s["impulse"][1] for s in strikes],
                       friction_impulse_ratios=[abs(s["impulse"][0]) / s["impulse"][1] for s in strikes])
    gait = meta.get("gait")
    summary["gait_found"] = bool(gait and gait["converged"])
    if gait is not None:
        summary.update(gait_fixed_point=gait["fixed_point"], gait_residual=gait["residual"],
                       gait_step_time=gait["step_time"], stride_eigenvalues=gait["eigenvalues"],
                       gait_energy_lost_per_step=gait["energy_lost"], gait_gravity_work_per_step=gait["gravity_work"],
                       stride_eigenvalue_moduli=[math.hypot(*z) for z in gait["eigenvalues"]])
    if meta["parameters"]["walk"]["find_gait"] and not summary["gait_found"]:
        warnings.append("no periodic gait found from the last post-strike state (stride map not converged)")
    reaction = run.arrays["ground_reaction"]
    summary.update(min_normal_force=float(reaction[:, 1].min()),
                   max_friction_ratio=float(np.max(np.abs(reaction[:, 0]) / np.abs(reaction[:, 1]))),
                   max_constraint_residual=float(run.arrays["constraint_residual"].max()),
                   max_energy_drift=max_energy_drift(run))
    if summary["min_normal_force"] <= 0.0:
        warnings.append(f"the stance foot pulls on the ground (min normal force {summary['min_normal_force']:.3g})")
    summary["warnings"] = warnings
    summary["sim_time_s"], summary["wall_time_s"] = run.sim_time_s, run.wall_time_s
    return summary


def max_energy_drift(run) -> float:
    """Largest change of the total energy within a step (m g l units; constant between strikes in exact
    arithmetic, so this is the integrator's error)."""
    worst = 0.0
    for index in np.unique(run.arrays["step"]):
        energy_of_step = run.arrays["energy"][run.arrays["step"] == index]
        worst = max(worst, float(np.abs(energy_of_step - energy_of_step[0]).max()))
    return worst


def make_plots(run, out_dir: Path) -> list[Path]:
    """Phase portrait of the leg angles, a strip of stick figures, the ground reaction and the residual."""
    import matplotlib.pyplot as plt

    q, u = run.arrays["q"], run.arrays["u"]
    paths = []
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.plot(q[:, 2], u[:, 2], lw=0.8, label="stance leg q1")
    ax.plot(q[:, 2] + q[:, 3], u[:, 2] + u[:, 3], lw=0.8, label="swing leg q1 + q2 (absolute)")
    ax.set_xlabel("leg angle from the slope's normal (rad)")
    ax.set_ylabel("angular rate (rad per time unit)")
    ax.legend(fontsize=8)
    ax.set_title("biped: phase portrait")
    paths.append(save_figure(fig, out_dir / "phase_portrait.png"))

    fig, ax = plt.subplots(figsize=(10, 3))
    foot, hip, swing = q[:, :2], run.arrays["hip"], run.arrays["swing_foot"]
    leg = float(np.hypot(*(hip[0] - foot[0])))
    for k in np.linspace(0, run.t.size - 1, min(run.t.size, 40)).astype(int):
        ax.plot([foot[k, 0], hip[k, 0], swing[k, 0]], [foot[k, 1], hip[k, 1], swing[k, 1]], "k-", lw=0.6)
        if q.shape[1] == 5:
            angle = q[k, 2] + q[k, 3] + q[k, 4]
            top = hip[k] + run.model.metadata["parameters"]["body"]["upper_body_length"] * np.array(
                [-math.sin(angle), math.cos(angle)])
            ax.plot([hip[k, 0], top[0]], [hip[k, 1], top[1]], "r-", lw=0.6)
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_aspect("equal")
    ax.set_ylim(-0.1 * leg, 1.6 * leg)
    ax.set_xlabel("x down the slope (leg lengths)")
    ax.set_title("biped: stick figures (legs black, upper body red)")
    paths.append(save_figure(fig, out_dir / "gait.png"))

    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(8, 7))
    axes[0].plot(run.t, run.arrays["ground_reaction"][:, 1], label="normal")
    axes[0].plot(run.t, run.arrays["ground_reaction"][:, 0], label="tangential")
    axes[0].set_ylabel("ground reaction")
    axes[0].legend(fontsize=8)
    axes[1].plot(run.t, run.arrays["energy"] - run.arrays["energy"][0])
    axes[1].set_ylabel("energy change")
    axes[2].semilogy(run.t, np.maximum(run.arrays["constraint_residual"], 1e-18))
    axes[2].set_ylabel("|c| stance foot")
    axes[2].set_xlabel("time (sqrt(l/g))")
    paths.append(save_figure(fig, out_dir / "contact.png"))
    return paths
