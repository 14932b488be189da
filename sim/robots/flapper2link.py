"""The two-link flapping flyer (Sadati et al. 2015, Fig. 1(1, 2)): a TMT system driven by rheonomic constraints
(docs/tmt.md, "Robots"; configs/robots/flapper2link.toml).

Non-dimensional (g = 1). Coordinates q = (x, y, z, phi_r, phi_l): the body, a point mass, translates; two rigid
wings hinge on the body's x axis: the right one along +y turns about +x by phi_r, the left one along -y about -x
by phi_l (tip up > 0). Each wing is a point mass at mid-span. The drive holds phi_r = phi_l = phi(t) =
A sin(omega t + phase) + offset (two rheonomic constraints; their multipliers are the flapping torques).

Aerodynamics per wing, at mid-span: v is the point's velocity without its spanwise part (s the unit vector root ->
tip); drag -1/2 rho |v|^2 S c_d v/|v|, lift 1/2 rho |v|^2 S c_l L, L = v/|v| x s (right), s x v/|v| (left), with
c_d = cd0 + sin^2 alpha and c_l = 2 sin 2 alpha at a constant angle of attack alpha; nothing when |v| < 1e-9.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config import number, table
from ..model import Model, ModelBuilder
from ..spatial import pose, spatial_inertia
from ..tmt.constraints import PointOnBody, constrained_dynamics, joint_trajectories, point_kinematics, project
from ..tmt.engine import tree_kinematics
from ..tmt.hybrid import integrate_until_event
from ..tmt.offline import (Stopwatch, TMTSystem, check_options, not_a_tree, point_body, save_figure,
                           with_defaults)
from .schema import SIMULATION, robot_table

#: Every key of configs/robots/flapper2link.toml with its default (the spec's reading of the paper).
DEFAULTS = {
    "body": {"mass": 1.0, "gravity": 1.0},
    "wing": {"span": 20.0, "chord": 10.0, "mass": 0.1},
    "aero": {"rho": 1.2041, "alpha_deg": -6.0, "cd0": 0.05},
    "drive": {"amplitude_deg": 17.5, "offset_deg": -12.5, "omega": 0.5, "phase": -math.pi / 2},
    "initial": {"position": [0.0, 0.0, 0.0], "velocity": [-0.01, 0.0, 0.01]},
    "run": {"duration": 16 * math.pi, "sample_dt": 0.05},
}
#: Below this relative air speed (length per time unit) a wing has no defined lift direction: no force.
STILL_AIR_SPEED = 1e-9
RIGHT_WING, LEFT_WING = 4, 5        # body indices of the wings
WINGS = (3, 4)                      # their coordinates in q


def config_schema(config: dict, path) -> dict:
    positive = number(above=0.0, maximum=1e4, expected="a number > 0")
    vector = {"type": "array", "items": number(-1e3, 1e3), "minItems": 3, "maxItems": 3}
    return table({
        "robot": robot_table("flapper2link", {}),
        "body": table({"mass": positive, "gravity": number(0.0, 1e3, expected="a gravity >= 0")}),
        "wing": table({"span": positive, "chord": positive, "mass": positive}),
        "aero": table({"rho": number(0.0, 1e4, expected="an air density >= 0"),
                       "alpha_deg": number(-90.0, 90.0, expected="an angle of attack in [-90, 90] deg"),
                       "cd0": number(0.0, 10.0, expected="a drag coefficient in [0, 10]")}),
        "drive": table({"amplitude_deg": number(0.0, 90.0, expected="an amplitude in [0, 90] deg"),
                        "offset_deg": number(-90.0, 90.0, expected="an offset in [-90, 90] deg"),
                        "omega": number(0.0, 1e3, expected="a frequency in [0, 1000] rad per time unit"),
                        "phase": number(-10.0, 10.0, expected="a phase in [-10, 10] rad")}),
        "initial": table({"position": vector, "velocity": vector}),
        "run": table({"duration": number(above=0.0, maximum=1e5, expected="a duration > 0"),
                      "sample_dt": number(above=0.0, maximum=100.0, expected="a sample interval > 0")}),
        "simulation": SIMULATION,
    }, ["robot"])


def build(config: dict, path) -> Model:
    raise not_a_tree("flapper2link", path)


def parameters(config: dict) -> dict:
    return with_defaults(config, DEFAULTS)


def build_tree(p: dict) -> Model:
    massless = spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3)))
    builder = ModelBuilder("world", massless, base_mode="fixed", gravity=(0.0, 0.0, -p["body"]["gravity"]))
    for name, parent, axis in (("slide_x", "world", [1, 0, 0]), ("slide_y", "slide_x", [0, 1, 0])):
        builder.add_body(name, parent, joint_name=name[-1], joint_type="prismatic", axis=axis, placement=pose(),
                         inertia=massless)
    builder.add_body("body", "slide_y", joint_name="z", joint_type="prismatic", axis=[0, 0, 1], placement=pose(),
                     inertia=point_body(p["body"]["mass"], [0, 0, 0]))
    half = p["wing"]["span"] / 2
    builder.add_body("right_wing", "body", joint_name="phi_r", axis=[1, 0, 0], placement=pose(),
                     inertia=point_body(p["wing"]["mass"], [0, half, 0]))
    builder.add_body("left_wing", "body", joint_name="phi_l", axis=[-1, 0, 0], placement=pose(),
                     inertia=point_body(p["wing"]["mass"], [0, -half, 0]))
    return builder.build(metadata={"name": "flapper2link"})


def drive(p: dict, t: float) -> tuple[float, float, float]:
    """phi(t) (rad), its rate and acceleration."""
    d = p["drive"]
    amplitude, offset = math.radians(d["amplitude_deg"]), math.radians(d["offset_deg"])
    angle = d["omega"] * t + d["phase"]
    return (amplitude * math.sin(angle) + offset, amplitude * d["omega"] * math.cos(angle),
            -amplitude * d["omega"] ** 2 * math.sin(angle))


def drive_constraints(p: dict):
    """phi_r = phi_l = phi(t) (sim.tmt.constraints.joint_trajectories)."""
    def both(t):
        angle, rate, acceleration = drive(p, t)
        return np.full(2, angle), np.full(2, rate), np.full(2, acceleration)
    return joint_trajectories(list(WINGS), both)


def wing_points(p: dict) -> tuple[PointOnBody, PointOnBody]:
    half = p["wing"]["span"] / 2
    return PointOnBody(RIGHT_WING, np.array([0.0, half, 0.0])), PointOnBody(LEFT_WING, np.array([0.0, -half, 0.0]))


def aero_forces(model: Model, p: dict, q: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(generalised force Q (n,), the wings' aerodynamic forces (2, 3) world) at one state (module docstring)."""
    a = p["aero"]
    alpha = math.radians(a["alpha_deg"])
    cd, cl = a["cd0"] + math.sin(alpha) ** 2, 2.0 * math.sin(2.0 * alpha)
    area = p["wing"]["span"] * p["wing"]["chord"]
    kin = tree_kinematics(model, model.base_pose, q, u)
    Q, forces = np.zeros(model.n), np.zeros((2, 3))
    for k, (point, side) in enumerate(zip(wing_points(p), (1.0, -1.0))):
        _, jacobian, _ = point_kinematics(kin, point, u)
        span = kin.R[point.body] @ np.array([0.0, side, 0.0])
        velocity = jacobian @ u
        velocity = velocity - (velocity @ span) * span
        speed = float(np.linalg.norm(velocity))
        if speed < STILL_AIR_SPEED or a["rho"] == 0.0:
            continue
        direction = velocity / speed
        lift_direction = np.cross(direction, span) if side > 0 else np.cross(span, direction)
        pressure = 0.5 * a["rho"] * speed ** 2 * area
        forces[k] = pressure * (-cd * direction + cl * lift_direction)
        Q += jacobian.T @ forces[k]
    return Q, forces


#: Units and meaning of the recorded arrays (metadata.json).
UNITS = {
    "t": ("time (non-dimensional, g = 1)", "sample times"),
    "q": ("length, rad", "x, y, z of the body, phi_r, phi_l (tip up > 0)"),
    "u": ("per time unit", "their rates"),
    "flap_torque": ("force x length", "the drive's torques on the right and left wing (the multipliers)"),
    "aero_force": ("force", "aerodynamic force on each wing (2, 3), world axes"),
    "constraint_residual": ("rad", "max |phi - phi(t)| of the two wings"),
}


def simulate_offline(config: dict, path: Path, args, progress: bool):
    from ..sim_run import SimRun

    duration = check_options(args, path, "flapper2link")
    p = parameters(config)
    t_end = duration if duration is not None else p["run"]["duration"]
    model = build_tree(p)
    clock = Stopwatch()
    constraints = drive_constraints(p)
    angle, _, _ = drive(p, 0.0)
    q0 = np.array([*p["initial"]["position"], angle, angle])
    u0 = np.array([*p["initial"]["velocity"], 0.0, 0.0])
    q0, u0 = project(model, q0, u0, 0.0, constraints)
    n = model.n

    def rate(t, y):
        Q, _ = aero_forces(model, p, y[:n], y[n:])
        return np.concatenate([y[n:], constrained_dynamics(model, y[:n], y[n:], t, constraints, tau=Q,
                                                           use_laws=False).u_dot])

    arc = integrate_until_event(rate, 0.0, np.concatenate([q0, u0]), t_end, [], p["run"]["sample_dt"])
    torque, force, residual = [], [], []
    for t, y in zip(arc.t, arc.y):
        Q, wing_forces = aero_forces(model, p, y[:n], y[n:])
        result = constrained_dynamics(model, y[:n], y[n:], t, constraints, tau=Q, use_laws=False)
        torque.append(result.multipliers)
        force.append(wing_forces)
        residual.append(float(np.abs(result.constraint).max()))
    metadata = {"name": config.get("robot", {}).get("name", "flapper2link"), "kind": "flapper2link",
                "parameters": p, "period": 2 * math.pi / p["drive"]["omega"] if p["drive"]["omega"] else None}
    return SimRun(t=arc.t, arrays={"q": arc.y[:, :n], "u": arc.y[:, n:], "flap_torque": np.array(torque),
                                   "aero_force": np.array(force), "constraint_residual": np.array(residual)},
                  model=TMTSystem(model, metadata), config=config,
                  options={"config": str(path), "kind": "flapper2link", "duration": t_end, "integrator": "DOP853",
                           "rtol": 1e-10, "sample_dt": p["run"]["sample_dt"]},
                  wall_time_s=clock.elapsed(), units=dict(UNITS))


def summarize(run) -> dict:
    """Mean forward (x) and vertical (z) velocity over the last period, the peak flapping torque, the mean
    aerodynamic force (sum of the wings, world) over the last period, the drive's residual."""
    period = run.model.metadata["period"]
    t, u = run.t, run.arrays["u"]
    start = t[-1] - period if period and t[-1] - t[0] >= period else t[0]
    last = t >= start - 1e-12
    span = t[last][-1] - t[last][0]

    def mean(values):
        return np.trapezoid(values[last], t[last], axis=0) / span if span > 0 else values[-1]

    total_force = run.arrays["aero_force"].sum(axis=1)
    warnings = [] if period and t[-1] - t[0] >= period else ["the run is shorter than one flapping period: means "
                                                             "are over the whole run"]
    return {"mean_forward_velocity": float(mean(u[:, 0])), "mean_vertical_velocity": float(mean(u[:, 2])),
            "mean_lateral_velocity": float(mean(u[:, 1])), "averaged_from": float(t[last][0]),
            "peak_flap_torque": float(np.abs(run.arrays["flap_torque"]).max()),
            "mean_aero_force": mean(total_force).tolist(),
            "final_position": run.arrays["q"][-1, :3].tolist(),
            "max_constraint_residual": float(run.arrays["constraint_residual"].max()),
            "period": period, "warnings": warnings, "sim_time_s": run.sim_time_s, "wall_time_s": run.wall_time_s}


def make_plots(run, out_dir: Path) -> list[Path]:
    """The trajectory (x, z), the (z, z') phase plot, the flap angle and torques, the aerodynamic force."""
    import matplotlib.pyplot as plt

    q, u, t = run.arrays["q"], run.arrays["u"], run.t
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    axes[0, 0].plot(q[:, 0], q[:, 2])
    axes[0, 0].set_xlabel("x")
    axes[0, 0].set_ylabel("z")
    axes[0, 0].set_title("trajectory of the body")
    axes[0, 1].plot(q[:, 2], u[:, 2])
    axes[0, 1].set_xlabel("z")
    axes[0, 1].set_ylabel("z'")
    axes[0, 1].set_title("vertical phase plot")
    axes[1, 0].plot(t, np.degrees(q[:, 3]), label="phi (deg)")
    axes[1, 0].plot(t, run.arrays["flap_torque"][:, 0], label="flap torque, right")
    axes[1, 0].set_xlabel("time")
    axes[1, 0].legend(fontsize=8)
    total = run.arrays["aero_force"].sum(axis=1)
    for k, axis in enumerate("xyz"):
        axes[1, 1].plot(t, total[:, k], label=f"aero force {axis}")
    axes[1, 1].set_xlabel("time")
    axes[1, 1].legend(fontsize=8)
    return [save_figure(fig, out_dir / "flapper2link.png")]
