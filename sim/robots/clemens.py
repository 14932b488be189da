"""The Clemens constant-velocity joint, a 3-RSR closed chain (Sadati et al. 2015, Fig. 1(3-5)): a TMT system with
loop constraints (docs/tmt.md, "Robots"; configs/robots/clemens.toml).

Base and platform joints at radii l_b, l_p, azimuths f_i = 0, 120, 240 deg, revolute axes tangential; each leg: a
lower link (length l) from the base's revolute, a spherical joint, an upper link (length l) to the platform's
revolute. The tree: an input shaft psi (revolute about world z under the base; held at psi_in(t)), leg 1 from
the base to the platform (a1, the spherical joint as x-y-x revolutes s1 s2 s3, p1), the platform, the upper links
of legs 2, 3 on the platform (b2, b3) and their lower links on the base (a2, a3). Coordinates (10): psi, a1, s1,
s2, s3, p1, b2, a2, b3, a3. The loops are cut at the spherical joints of legs 2, 3: c = upper - lower (6 rows; the
multipliers are the joints' forces), plus psi - psi_in(t) (1 row). Mobility 3.

Runs (``run.mode``):
- ``track`` (the paper's inverse kinematics): the platform's centre follows p(t) = (A sin t, A (1 - cos t),
  h - B sin 2t); [T_c; T_p] u = [-dc/dt; p'(t)] (square), integrated with a feedback -omega_b (c, p_c - p(t)).
- ``constant_velocity``: the input shaft turns at Omega, the centre held at (sin beta, 0, cos beta): the platform
  turns about its own axis at Omega (the constant-velocity property).
- ``release``: from home under gravity (0, 0, -g), the TMT equations with the loop multipliers (Baumgarte
  omega_b; 0: unstabilised; optional projection after each sample interval).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..config import ConfigError, number, one_of, table
from ..model import Model, ModelBuilder
from ..spatial import pose, spatial_inertia
from ..tmt.constraints import (BAUMGARTE_OMEGA, PointOnBody, coincident_points, constrained_dynamics,
                               joint_trajectories, point_kinematics, project)
from ..tmt.engine import kinetic_energy, tree_kinematics
from ..tmt.hybrid import combined, integrate_until_event
from ..tmt.offline import (Stopwatch, TMTSystem, check_options, not_a_tree, potential_energy, save_figure,
                           with_defaults)
from .schema import SIMULATION, robot_table

MODES = ("track", "constant_velocity", "release")
DEFAULTS = {
    "geometry": {"base_radius": 1.0, "platform_radius": 1.0, "link_length": 1.0},
    "mass": {"platform": 1.0, "platform_inertia": 0.001, "link": 1e-6, "gravity": 1.0},
    "home": {"perturbation": 1e-3},
    "run": {"mode": "track", "duration": 2 * math.pi, "sample_dt": 0.05, "baumgarte": BAUMGARTE_OMEGA,
            "project": False},
    "track": {"radius": 0.2, "height": 1.0, "bob": 0.1},
    "constant_velocity": {"tilt_deg": 10.0, "omega": 1.0},
}
AZIMUTHS = (0.0, 2 * math.pi / 3, 4 * math.pi / 3)
NAMES = ("psi", "a1", "s1", "s2", "s3", "p1", "b2", "a2", "b3", "a3")
#: Home pose (the spec): the legs at +-30 deg, the spherical joint of leg 1 bent by 60 deg.
HOME = np.array([0.0, *(math.pi / 6 * np.array([-1, 0, 2, 0, -1, 1, -1, 1, -1]))])
PLATFORM = 6                 # body index of the platform
#: Body indices of the upper and lower links of legs 2 and 3 (the cut spherical joints at their ends).
CUT_LEGS = ((7, 8), (9, 10))


def config_schema(config: dict, path) -> dict:
    positive = number(above=0.0, maximum=1e3, expected="a number > 0")
    return table({
        "robot": robot_table("clemens", {}),
        "geometry": table({"base_radius": positive, "platform_radius": positive, "link_length": positive}),
        "mass": table({"platform": positive, "platform_inertia": positive, "link": positive,
                       "gravity": number(0.0, 1e3, expected="a gravity >= 0")}),
        "home": table({"perturbation": number(-0.1, 0.1, expected="a fraction in [-0.1, 0.1]")}),
        "run": table({"mode": one_of(*MODES), "duration": number(above=0.0, maximum=1e4, expected="a duration > 0"),
                      "sample_dt": number(above=0.0, maximum=100.0, expected="a sample interval > 0"),
                      "baumgarte": number(0.0, 1e4, expected="a frequency >= 0"), "project": {"type": "boolean"}}),
        "track": table({"radius": number(0.0, 1.0), "height": positive, "bob": number(0.0, 1.0)}),
        "constant_velocity": table({"tilt_deg": number(0.0, 45.0, expected="a tilt in [0, 45] deg"),
                                    "omega": number(-100.0, 100.0)}),
        "simulation": SIMULATION,
    }, ["robot"])


def build(config: dict, path) -> Model:
    raise not_a_tree("clemens", path)


def parameters(config: dict) -> dict:
    return with_defaults(config, DEFAULTS)


def _rz(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def build_tree(p: dict) -> Model:
    g, m = p["geometry"], p["mass"]
    l, lb, lp = g["link_length"], g["base_radius"], g["platform_radius"]
    massless = spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3)))

    def link(sign: float) -> np.ndarray:
        return spatial_inertia(m["link"], [sign * l / 2, 0, 0], np.eye(3) * m["link"])

    builder = ModelBuilder("ground", massless, base_mode="fixed", gravity=(0.0, 0.0, -m["gravity"]))
    builder.add_body("shaft", "ground", joint_name="psi", axis=[0, 0, 1], placement=pose(), inertia=massless)

    def on_base(azimuth: float) -> np.ndarray:
        return pose(R=_rz(azimuth), p=[lb * math.cos(azimuth), lb * math.sin(azimuth), 0.0])

    builder.add_body("lower1", "shaft", joint_name="a1", axis=[0, 1, 0], placement=on_base(AZIMUTHS[0]),
                     inertia=link(1.0))
    builder.add_body("sphere1_x", "lower1", joint_name="s1", axis=[1, 0, 0], placement=pose(p=[l, 0, 0]),
                     inertia=massless)
    builder.add_body("sphere1_y", "sphere1_x", joint_name="s2", axis=[0, 1, 0], placement=pose(), inertia=massless)
    builder.add_body("upper1", "sphere1_y", joint_name="s3", axis=[1, 0, 0], placement=pose(), inertia=link(-1.0))
    builder.add_body("platform", "upper1", joint_name="p1", axis=[0, 1, 0], placement=pose(p=[-l, 0, 0]),
                     inertia=spatial_inertia(m["platform"], [-lp, 0, 0], np.eye(3) * m["platform_inertia"]))
    for leg in (2, 3):
        azimuth = AZIMUTHS[leg - 1]
        builder.add_body(f"upper{leg}", "platform", joint_name=f"b{leg}", axis=[0, 1, 0],
                         placement=pose(R=_rz(azimuth), p=[-lp + lp * math.cos(azimuth), lp * math.sin(azimuth), 0]),
                         inertia=link(1.0))
        builder.add_body(f"lower{leg}", "shaft", joint_name=f"a{leg}", axis=[0, 1, 0], placement=on_base(azimuth),
                         inertia=link(1.0))
    return builder.build(metadata={"name": "clemens"})


def loop_constraints(p: dict):
    l = p["geometry"]["link_length"]
    tip = np.array([l, 0.0, 0.0])
    return coincident_points([(PointOnBody(upper, tip), PointOnBody(lower, tip)) for upper, lower in CUT_LEGS])


def centre(p: dict) -> PointOnBody:
    return PointOnBody(PLATFORM, np.array([-p["geometry"]["platform_radius"], 0.0, 0.0]))


def centre_path(p: dict, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The tracked centre p(t) (3,), its velocity and acceleration."""
    a, h, b = p["track"]["radius"], p["track"]["height"], p["track"]["bob"]
    s, c, s2, c2 = math.sin(t), math.cos(t), math.sin(2 * t), math.cos(2 * t)
    return (np.array([a * s, a * (1 - c), h - b * s2]), np.array([a * c, a * s, -2 * b * c2]),
            np.array([-a * s, a * c, 4 * b * s2]))


def held_centre(point: PointOnBody, target):
    """The platform's centre ``point`` held on a path ``target(t) -> (p, p_dot, p_ddot)`` (3 rows)."""

    def constraints(model, kin, q, u, t):
        position, jacobian, convective = point_kinematics(kin, point, u)
        goal, rate, acceleration = target(t)
        return position - goal, jacobian, convective - acceleration, -rate

    return constraints


def shaft(angle_rate: float):
    """The input shaft turning at ``angle_rate`` from 0 (rad per time unit)."""
    return joint_trajectories([0], lambda t: (np.array([angle_rate * t]), np.array([angle_rate]), np.zeros(1)))


def home_state(model: Model, p: dict, constraints, path) -> np.ndarray:
    """The spec's home pose with the paper's perturbation of s1 and s3, projected onto the constraints."""
    q = HOME.copy()
    q[2] += p["home"]["perturbation"] * math.pi / 6
    q[4] -= p["home"]["perturbation"] * math.pi / 6
    try:
        q, _ = project(model, q, np.zeros(model.n), 0.0, constraints)
    except ValueError as exc:
        raise ConfigError(path, "home", f"the mechanism does not close from its home pose: {exc}") from None
    return q


def min_singular_value(model: Model, p: dict, q: np.ndarray) -> float:
    """sigma_min of the mechanism's 9 x 9 Jacobian [T_c; T_p] without the input shaft's row and column."""
    kin = tree_kinematics(model, model.base_pose, q, np.zeros(model.n))
    Tc = loop_constraints(p)(model, kin, q, np.zeros(model.n), 0.0)[1]
    Tp = point_kinematics(kin, centre(p), np.zeros(model.n))[1]
    return float(np.linalg.svd(np.vstack([Tc, Tp])[:, 1:], compute_uv=False)[-1])


def kinematic_rate(model: Model, constraints, omega_b: float):
    """q' = u solving the square system T u = -dc/dt - omega_b c (all rows of ``constraints``)."""

    def rate(t, q):
        kin = tree_kinematics(model, model.base_pose, q, np.zeros(model.n))
        c, Tc, _, c_t = constraints(model, kin, q, np.zeros(model.n), t)
        return np.linalg.solve(Tc, -c_t - omega_b * c)

    return rate


UNITS = {
    "t": ("time (non-dimensional)", "sample times"),
    "q": ("rad", "psi, a1, s1, s2, s3, p1, b2, a2, b3, a3"),
    "u": ("rad per time unit", "their rates"),
    "platform_rotation": ("1", "R_P (3, 3), platform frame -> world"),
    "platform_centre": ("length", "centre of the platform (x, y, z)"),
    "platform_omega": ("rad per time unit", "platform's angular velocity in its own frame"),
    "constraint_residual": ("length", "max |c| of the loop constraints"),
    "loop_force": ("force", "forces of the cut spherical joints of legs 2, 3 (2, 3), world (release run)"),
    "min_singular_value": ("1", "sigma_min of the mechanism's 9 x 9 Jacobian"),
    "energy": ("m g l", "kinetic + potential energy (release run)"),
}


def simulate_offline(config: dict, path: Path, args, progress: bool):
    from ..sim_run import SimRun

    duration = check_options(args, path, "clemens")
    p = parameters(config)
    run = p["run"]
    mode = run["mode"]
    t_end = duration if duration is not None else run["duration"]
    model = build_tree(p)
    clock = Stopwatch()
    n = model.n
    loops = loop_constraints(p)
    q0 = home_state(model, p, combined(loops, shaft(0.0)), path)
    if mode == "release":
        constraints = combined(loops, shaft(0.0))
        y0 = np.concatenate([q0, np.zeros(n)])

        def rate(t, y):
            return np.concatenate([y[n:], constrained_dynamics(model, y[:n], y[n:], t, constraints,
                                                               baumgarte=run["baumgarte"]).u_dot])
        samples_t, samples_y, t, y = [], [], 0.0, y0
        interval = run["sample_dt"] if run["project"] else t_end
        while t < t_end - 1e-12:
            arc = integrate_until_event(rate, t, y, min(t + interval, t_end), [], run["sample_dt"])
            samples_t.append(arc.t if not samples_t else arc.t[1:])
            samples_y.append(arc.y if not samples_y else arc.y[1:])
            t, y = arc.t_end, arc.y_end
            if run["project"]:
                q, u = project(model, y[:n], y[n:], t, constraints)
                y = np.concatenate([q, u])
                samples_y[-1][-1] = y
        times, states = np.concatenate(samples_t), np.vstack(samples_y)
    else:
        if mode == "track":
            constraints = combined(loops, shaft(0.0), held_centre(centre(p), lambda t: centre_path(p, t)))
        else:
            beta = math.radians(p["constant_velocity"]["tilt_deg"])
            point = np.array([math.sin(beta), 0.0, math.cos(beta)])
            constraints = combined(loops, shaft(p["constant_velocity"]["omega"]),
                                   held_centre(centre(p), lambda t: (point, np.zeros(3), np.zeros(3))))
        try:
            q0, _ = project(model, q0, np.zeros(n), 0.0, constraints)
        except ValueError as exc:
            raise ConfigError(path, mode, f"the platform's centre cannot reach its start: {exc}") from None
        arc = integrate_until_event(kinematic_rate(model, constraints, run["baumgarte"]), 0.0, q0, t_end, [],
                                    run["sample_dt"])
        times = arc.t
        rate = kinematic_rate(model, constraints, run["baumgarte"])
        states = np.hstack([arc.y, np.array([rate(t, q) for t, q in zip(arc.t, arc.y)])])
    arrays = sample_arrays(model, p, times, states, constraints if mode == "release" else None, run["baumgarte"])
    metadata = {"name": config.get("robot", {}).get("name", "clemens"), "kind": "clemens", "parameters": p,
                "mode": mode, "coordinates": list(NAMES)}
    return SimRun(t=times, arrays=arrays, model=TMTSystem(model, metadata), config=config,
                  options={"config": str(path), "kind": "clemens", "duration": t_end, "integrator": "DOP853",
                           "rtol": 1e-10, "mode": mode}, wall_time_s=clock.elapsed(), units=dict(UNITS))


def sample_arrays(model: Model, p: dict, times, states, dynamics, baumgarte) -> dict[str, np.ndarray]:
    n = model.n
    loops = loop_constraints(p)
    out = {name: [] for name in UNITS if name != "t"}
    for t, y in zip(times, states):
        q, u = y[:n], y[n:]
        kin = tree_kinematics(model, model.base_pose, q, u)
        R = kin.R[PLATFORM]
        out["q"].append(q)
        out["u"].append(u)
        out["platform_rotation"].append(R)
        out["platform_centre"].append(point_kinematics(kin, centre(p), u)[0])
        out["platform_omega"].append(R.T @ kin.omega[PLATFORM])
        out["constraint_residual"].append(float(np.abs(loops(model, kin, q, u, t)[0]).max()))
        out["min_singular_value"].append(min_singular_value(model, p, q))
        if dynamics is not None:
            result = constrained_dynamics(model, q, u, t, dynamics, baumgarte=baumgarte)
            out["loop_force"].append(result.multipliers[:6].reshape(2, 3))
            out["energy"].append(kinetic_energy(model, model.base_pose, q, u) + potential_energy(model, q))
        else:
            out["loop_force"].append(np.full((2, 3), np.nan))
            out["energy"].append(math.nan)
    return {name: np.asarray(values, dtype=float) for name, values in out.items()}


def summarize(run) -> dict:
    """The constraint residual, sigma_min, and per mode: the constant-velocity run's output/input speed ratio and
    its largest deviation from 1; the release run's loop force peaks and energy drift; the track run's return to
    its start."""
    a = run.arrays
    mode = run.model.metadata["mode"]
    summary = {"mode": mode, "max_constraint_residual": float(a["constraint_residual"].max()),
               "min_singular_value": float(a["min_singular_value"].min()),
               "base_angles_final": a["q"][-1, [1, 7, 9]].tolist(), "warnings": [],
               "sim_time_s": run.sim_time_s, "wall_time_s": run.wall_time_s}
    if mode == "constant_velocity":
        omega = run.model.metadata["parameters"]["constant_velocity"]["omega"]
        ratio = a["platform_omega"][:, 2] / omega
        R0 = a["platform_rotation"][0]
        relative = np.einsum("ji,tjk->tik", R0, a["platform_rotation"])
        output = np.unwrap(np.arctan2(relative[:, 1, 0], relative[:, 0, 0]))
        summary.update(speed_ratio=float(ratio.mean()), max_speed_ratio_deviation=float(np.abs(ratio - 1).max()),
                       max_angle_deviation=float(np.abs(output - omega * run.t).max()),
                       output_axis=(R0 @ np.array([0.0, 0.0, 1.0])).tolist(),
                       max_off_axis_rate=float(np.abs(a["platform_omega"][:, :2]).max()))
    elif mode == "release":
        energy = a["energy"]
        summary.update(max_loop_force=float(np.linalg.norm(a["loop_force"], axis=2).max()),
                       energy_drift=float(np.abs(energy - energy[0]).max() / max(abs(energy[0]), 1e-300)),
                       final_centre=a["platform_centre"][-1].tolist())
    else:
        p = run.model.metadata["parameters"]
        path = np.array([centre_path(p, t)[0] for t in run.t])
        summary.update(return_error=float(np.abs(a["q"][-1] - a["q"][0]).max()),
                       max_centre_error=float(np.abs(a["platform_centre"] - path).max()))
    if summary["min_singular_value"] < 0.05:
        summary["warnings"].append(f"close to a singular pose (sigma_min {summary['min_singular_value']:.3g})")
    return summary


def make_plots(run, out_dir: Path) -> list[Path]:
    """Joint angles against time, the platform's centre and the residual, and the mechanism's pose."""
    import matplotlib.pyplot as plt

    a = run.arrays
    fig, axes = plt.subplots(3, 1, sharex=True, figsize=(8, 8))
    for k, name in enumerate(NAMES):
        axes[0].plot(run.t, a["q"][:, k], label=name, lw=2 if name in ("a1", "a2", "a3") else 0.8)
    axes[0].set_ylabel("joint angle (rad)")
    axes[0].legend(fontsize=7, ncol=5)
    for k, axis in enumerate("xyz"):
        axes[1].plot(run.t, a["platform_centre"][:, k], label=f"centre {axis}")
    axes[1].legend(fontsize=8)
    axes[2].semilogy(run.t, np.maximum(a["constraint_residual"], 1e-18), label="max |c|")
    axes[2].semilogy(run.t, a["min_singular_value"], label="sigma_min")
    axes[2].legend(fontsize=8)
    axes[2].set_xlabel("time")
    paths = [save_figure(fig, out_dir / "clemens_joints.png")]
    fig = plt.figure(figsize=(6, 6))
    ax = fig.add_subplot(projection="3d")
    model = run.model.tree
    link = np.array([run.model.metadata["parameters"]["geometry"]["link_length"], 0.0, 0.0])
    for k, colour in zip((0, run.t.size - 1), ("tab:blue", "tab:red")):
        kin = tree_kinematics(model, model.base_pose, a["q"][k], np.zeros(model.n))
        base = [kin.origin[2]] + [kin.origin[lower] for _, lower in CUT_LEGS]
        spheres = [kin.origin[3]] + [kin.origin[lower] + kin.R[lower] @ link for _, lower in CUT_LEGS]
        top = [kin.origin[PLATFORM]] + [kin.origin[upper] for upper, _ in CUT_LEGS]
        for leg in zip(base, spheres, top):
            ax.plot(*np.array(leg).T, color=colour, lw=1.2)
        for triangle in (base, top):
            ax.plot(*np.array(triangle + triangle[:1]).T, color=colour, lw=0.8)
        ax.plot([], [], color=colour, label=f"t = {run.t[k]:.3g}")
    ax.legend(fontsize=8)
    ax.set_title("Clemens joint: first and last pose (legs, base and platform)")
    paths.append(save_figure(fig, out_dir / "clemens_pose.png"))
    return paths
