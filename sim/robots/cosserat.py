"""Robot kind ``cosserat``: the macro-continuous robots of Boyer, Ali & Porez (T-RO 2012) on the rod engine of
:mod:`sim.cosserat` (docs/cosserat.md). ``[robot] example`` selects the robot (earthworm, inchworm, snake2d,
snake3d); its own table holds the strain law's parameters, ``[rod]`` the body, ``[simulation]`` dt and duration.

``mms sim`` runs it through :func:`simulate_offline` (the contact-driven kinematic algorithm, Fig. 5) and writes
(one row per recorded time; world = the frame of the head's start, z up):
- ``base_pos`` (T, 3) m, ``base_quat`` (T, 4) (w, x, y, z), ``base_twist`` (T, 6) head frame: the head;
- ``X`` (S,) m the output stations, ``backbone`` (T, S, 3) m world, ``Lam`` (T, S, 6) N, N m frame X;
- ``Fc`` (T, 6) the contacts' total wrench on the rod, head frame, about the head; ``Fc_world`` (T, 3) its force;
- ``contact_C`` (T, p) m, ``contact_wrench`` (T, p, 6) frame C_i, ``contact_force_world`` (T, p, 3) N;
- ``closure`` (T,) relative, ``contact_residual`` (T,) m/s or rad/s: the checks 1 and 2 of docs/cosserat.md.
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np

from sim.config import ConfigError, integer, number, one_of, table
from sim.cosserat.algorithms import has_compiled_form, run_kinematic
from sim.cosserat.contacts import CannotHold
from sim.cosserat.examples import earthworm_robot, inchworm_robot, snake_robot
from sim.cosserat.live import MAX_SEGMENTS, LiveRodModel, live_settings
from sim.cosserat.rod import round_rod
from sim.robots.schema import MAX_DT_S, MAX_DURATION_S, density, gravity_vector, length, robot_table

EXAMPLES = ("earthworm", "inchworm", "snake2d", "snake3d")
#: The table of each example's own parameters.
EXAMPLE_TABLE = {"earthworm": "earthworm", "inchworm": "inchworm", "snake2d": "snake", "snake3d": "snake"}
#: Output stations along the body (plots, ``backbone``, ``Lam``): enough for a smooth curve on a plot.
STATIONS = 41
#: Largest X grid accepted: beyond it each step costs more than a second of Python and converges nothing more.
MAX_N_X = 4000
#: Largest curvature amplitude (1/m): a body curled tighter than a 1 mm radius is a unit slip.
MAX_CURVATURE = 1000.0
#: Largest wave or head speed, m/s (a fast snake does ~5 m/s).
MAX_SPEED = 100.0
#: Largest number of pegs of a snake.
MAX_SUPPORTS = 100
#: The earthworm's body length must be a whole number of wavelengths to this relative tolerance, so that its
#: anchors stay on the body (C_i = (s + lambda/4) mod lambda + (i - 1) lambda < l).
WHOLE_WAVES = 1e-9
#: Times (per run) at which a strain law is sampled for singularity before the run.
SINGULARITY_SAMPLES = 64
#: Highest sim/state rate a cosserat robot file may ask of `mms serve`, Hz (the server's own default for rigid trees).
MAX_LIVE_RATE_HZ = 1000.0
SPEED = number(-MAX_SPEED, MAX_SPEED, expected=f"a speed in [-{MAX_SPEED:g}, {MAX_SPEED:g}] m/s")
CURVATURE = number(-MAX_CURVATURE, MAX_CURVATURE,
                   expected=f"a curvature in [-{MAX_CURVATURE:g}, {MAX_CURVATURE:g}] 1/m")
TIME = number(0.0, MAX_DURATION_S, expected=f"a time in [0, {MAX_DURATION_S:g}] s")

EXAMPLE_SCHEMAS = {
    "earthworm": table({"eps": number(0.0, 10.0, expected="a stretch amplitude in [0, 10]"),
                        "wavelength_m": length(), "wave_speed_m_s": SPEED,
                        "wave_acceleration_m_s2": number(-1e3, 1e3, expected="an acceleration in [-1000, 1000] m/s^2")},
                       ["eps", "wavelength_m", "wave_speed_m_s"]),
    "inchworm": table({"alpha_rad": number(-10.0, 10.0, expected="an angle in [-10, 10] rad"),
                       "omega_rad_s": number(above=0.0, maximum=1e4, expected="an angular frequency in (0, 1e4] rad/s")},
                      ["alpha_rad", "omega_rad_s"]),
    "snake": table({"a_1_m": CURVATURE, "b_1_m": CURVATURE, "b_y_1_m": CURVATURE, "V_o_m_s": SPEED,
                    "wavelength_m": length(), "t_o_s": TIME,
                    "T_o_s": number(above=0.0, maximum=MAX_DURATION_S, expected="a duration > 0 s"),
                    "supports": integer(0, MAX_SUPPORTS, expected=f"a number of pegs in [0, {MAX_SUPPORTS}]")},
                   ["a_1_m", "b_1_m", "V_o_m_s", "wavelength_m", "t_o_s", "T_o_s", "supports"]),
}


def config_schema(config: dict, path) -> dict:
    """The JSON Schema of a cosserat robot file (configs/robots/{earthworm,inchworm,snake2d,snake3d}.toml)."""
    robot = config.get("robot", {})
    example = robot.get("example") if isinstance(robot, dict) else None
    own = EXAMPLE_TABLE.get(example) if isinstance(example, str) else None
    properties = {
        "robot": robot_table("cosserat", {"example": one_of(*EXAMPLES)}, ["example"]),
        "rod": table({"length_m": length(), "radius_m": length(), "density_kg_m3": density(),
                      "gravity_m_s2": gravity_vector(),
                      "n_X": integer(4, MAX_N_X, expected=f"a number of X steps in [4, {MAX_N_X}]")},
                     ["length_m", "radius_m", "density_kg_m3"]),
        "simulation": table({"dt": number(above=0.0, maximum=MAX_DT_S, expected=f"a time step in (0, {MAX_DT_S:g}] s"),
                             "duration": number(above=0.0, maximum=MAX_DURATION_S,
                                                expected=f"a duration in (0, {MAX_DURATION_S:g}] s"),
                             "record_every": integer(1, 10 ** 6, expected="an integer >= 1")},
                            ["dt", "duration"]),
        # `mms serve`'s chain of servo joints and its resolution (sim/cosserat/live.py, docs/cosserat.md "Live")
        "live": table({"segments": integer(1, MAX_SEGMENTS, expected=f"a number of segments in [1, {MAX_SEGMENTS}]"),
                       "n_X": integer(4, MAX_N_X, expected=f"a number of X steps in [4, {MAX_N_X}]"),
                       "dt": number(above=0.0, maximum=MAX_DT_S, expected=f"a head-pose step in (0, {MAX_DT_S:g}] s"),
                       "rate_hz": number(above=0.0, maximum=MAX_LIVE_RATE_HZ,
                                         expected=f"a sim/state rate in (0, {MAX_LIVE_RATE_HZ:g}] Hz")},
                      ["segments"]),
    }
    if own is not None:
        properties[own] = EXAMPLE_SCHEMAS[own]
    return table(properties, ["robot", "rod", "simulation", *([own] if own else [])])


def build_example(config: dict, path):
    """The :class:`sim.cosserat.examples.Example` of a checked config; one-line ConfigError for a singular
    strain law or an anchorage outside the body."""
    example = config["robot"]["example"]
    rod_table = config["rod"]
    n_X = int(rod_table.get("n_X", 200))
    rod = round_rod(rod_table["length_m"], rod_table["radius_m"], rod_table["density_kg_m3"],
                    gravity=rod_table.get("gravity_m_s2", (0.0, 0.0, 0.0)), n_X=n_X + n_X % 2)
    own = config[EXAMPLE_TABLE[example]]
    if example == "earthworm":
        wavelength = own["wavelength_m"]
        waves = rod.length / wavelength
        if wavelength > rod.length * (1 + WHOLE_WAVES) or abs(waves - round(waves)) > WHOLE_WAVES * waves:
            raise ConfigError(path, "earthworm.wavelength_m",
                              f"got {wavelength:g} m: the anchors C_i = (s + lambda/4) mod lambda + (i-1) lambda would "
                              f"leave the body; expected the length {rod.length:g} m divided by a whole number")
        built = earthworm_robot(rod, own["eps"], wavelength, own.get("wave_acceleration_m_s2", 0.0),
                                own["wave_speed_m_s"])
        singular_key = "earthworm.eps"
    elif example == "inchworm":
        built = inchworm_robot(rod, own["alpha_rad"], own["omega_rad_s"])
        singular_key = "inchworm.alpha_rad"
    else:
        if own["V_o_m_s"] == 0.0:
            raise ConfigError(path, "snake.V_o_m_s", "got 0: the follower kinematics K_t = V_o K' is singular "
                                                     "(the wave u = t + X / V_o is undefined); expected a speed != 0")
        if example == "snake3d" and "b_y_1_m" not in own:
            raise ConfigError(path, "snake.b_y_1_m", "missing: the 3-D snake needs its vertical turn amplitude (1/m)")
        if example == "snake2d" and "b_y_1_m" in own:
            raise ConfigError(path, "snake.b_y_1_m", "applies to the 3-D snake (example = \"snake3d\") only")
        built = snake_robot(rod, own["a_1_m"], own["b_1_m"], own["V_o_m_s"], own["wavelength_m"], own["t_o_s"],
                            own["T_o_s"], own["supports"], own.get("b_y_1_m"))
        singular_key = "snake"
    X = np.linspace(0.0, rod.length, 2 * n_X + 1)
    for t in np.linspace(0.0, config["simulation"]["duration"], SINGULARITY_SAMPLES):
        where = built.strain.singular_at(X, t)
        if where is not None:
            raise ConfigError(path, singular_key, f"the strain law makes the beam singular at X = {where:.4g} m, "
                                                  f"t = {t:.4g} s (stretch Gamma_X <= 0 or a non-finite strain)")
    return built


def build_live(config: dict, path) -> LiveRodModel:
    """`mms serve`'s model of a checked cosserat robot file: its example on the ``[live]`` X grid, sampled as the
    ``[live]`` chain of segment joints (sim/cosserat/live.py); one-line ConfigError without a [live] table."""
    settings = live_settings(config, path)
    example = build_example({**config, "rod": {**config["rod"], "n_X": settings.n_X}}, path)
    return LiveRodModel(example, settings, config["robot"].get("name", example.name), path)


class RodRobot:
    """The ``run.model`` of a cosserat run: its :class:`Example` and the metadata written to metadata.json."""

    def __init__(self, example, config):
        self.example = example
        self.metadata = {"name": config["robot"].get("name", example.name), "example": example.name,
                         "period_s": example.period, "strain_case": example.strain.case.beam,
                         "contacts": [c.name for c in example.contacts],
                         "frames": "world: the head's start frame (z up); X = 0 head, t_X = R e1 head to tail; "
                                   "wrenches (N, C) and twists (V, Omega) linear first",
                         "mass_kg": example.rod.mass, "length_m": example.rod.length, "n_X": example.rod.n_X}


UNITS = {
    "t": ("s", "time of each row"),
    "base_pos": ("m", "head position, world"), "base_quat": ("1", "head orientation (w, x, y, z), world"),
    "base_twist": ("m/s, rad/s", "head twist (V, Omega), head frame"),
    "X": ("m", "material abscissa of the output stations (constant)"),
    "backbone": ("m", "world positions of the sections at the stations"),
    "Lam": ("N, N m", "internal wrench (N, C) on [0, X] from (X, l], frame X, at the stations"),
    "Fc": ("N, N m", "total contact wrench on the rod, head frame, about the head"),
    "Fc_world": ("N", "total contact force on the rod, world axes"),
    "contact_C": ("m", "material abscissa of each reacting contact"),
    "contact_wrench": ("N, N m", "wrench of each reacting contact on the rod, frame C_i (zero when inactive)"),
    "contact_force_world": ("N", "force of each reacting contact on the rod, world axes"),
    "closure": ("1", "|Lam(l) - F+| / max |Lam| (check 1)"),
    "contact_residual": ("m/s or rad/s", "largest violation of the contacts' velocity constraints (check 2)"),
}


def record(states, rod) -> dict[str, np.ndarray]:
    """The recorded arrays (module docstring) of a list of RodStates."""
    from sim.spatial import matrix_to_quat

    X = np.linspace(0.0, rod.length, STATIONS)
    n = len(states)
    p = len(states[0].wrenches)
    out = {"base_pos": np.empty((n, 3)), "base_quat": np.empty((n, 4)), "base_twist": np.empty((n, 6)), "X": X,
           "backbone": np.empty((n, STATIONS, 3)), "Lam": np.empty((n, STATIONS, 6)), "Fc": np.empty((n, 6)),
           "Fc_world": np.empty((n, 3)), "contact_C": np.zeros((n, p)), "contact_wrench": np.zeros((n, p, 6)),
           "contact_force_world": np.zeros((n, p, 3)), "closure": np.empty(n), "contact_residual": np.empty(n)}
    for k, s in enumerate(states):
        R = s.g_o[:3, :3]
        out["base_pos"][k], out["base_quat"][k], out["base_twist"][k] = s.g_o[:3, 3], matrix_to_quat(R), s.eta_o
        world = s.backbone()
        for axis in range(3):
            out["backbone"][k, :, axis] = np.interp(X, s.nodes.X, world[:, axis])
        for c in range(6):
            out["Lam"][k, :, c] = np.interp(X, s.nodes.X, s.Lam[:, c])
        out["Fc"][k], out["Fc_world"][k] = s.Fc, R @ s.Fc[:3]
        for i, (C, F) in enumerate(s.wrenches):
            rotation = R @ s.nodes.g_rel[s.nodes.at(C), :3, :3]
            out["contact_C"][k, i], out["contact_wrench"][k, i] = C, F
            out["contact_force_world"][k, i] = rotation @ F[:3]
        out["closure"][k], out["contact_residual"][k] = s.closure, s.contact_residual
    return out


def simulate_offline(config: dict, path, args, progress: bool):
    """``mms sim`` on a cosserat robot: the kinematic algorithm over the run, recorded (module docstring)."""
    from tqdm import tqdm

    from sim.sim_run import SimRun

    for option, value in (("--base", args.base), ("--integrator", getattr(args, "integrator", None)),
                          ("--periodic", getattr(args, "periodic", False) or None)):
        if value is not None and not (option == "--integrator" and value == "rk4"):
            raise ConfigError(path, None, f"{option} does not apply to robot kind 'cosserat' (RK4 on the head pose)")
    sim_table = config["simulation"]
    dt = args.dt if args.dt is not None else sim_table["dt"]
    if not (dt > 0.0 and math.isfinite(dt)):
        raise ConfigError(None, "--dt", f"got {dt!r}, expected a time step > 0 (s)")
    example = build_example(config, path)
    if args.duration is not None:
        duration = args.duration
    elif args.periods is not None:
        if example.period is None:
            raise ConfigError(path, None, "--periods needs a robot with a period (this one has none); use --duration")
        duration = args.periods * example.period
    else:
        duration = sim_table["duration"]
    if not (duration > 0.0 and math.isfinite(duration)):
        raise ConfigError(None, "--duration/--periods", f"got {duration!r}, expected a positive time")
    every = sim_table.get("record_every", 1) if args.record_every is None else args.record_every
    steps = max(1, int(round(duration / dt)))
    bar = tqdm(total=steps, unit="step", disable=not progress, desc=f"sim {example.name}", mininterval=0.5)
    start = time.perf_counter()
    try:
        states = run_kinematic(example.rod, example.strain, example.contacts, example.driver_at, duration, dt,
                               every, g_o=example.g_o, dynamics=example.dynamics, progress=bar.update,
                               compiled=has_compiled_form(example.strain))
    except CannotHold as exc:
        key = "snake.supports" if example.name.startswith("snake") else "robot.example"
        raise ConfigError(path, key, f"the supports cannot hold the body: {exc}") from None
    wall = time.perf_counter() - start
    bar.close()
    arrays = record(states, example.rod)
    options = {"config": str(path), "kind": "cosserat", "example": example.name, "integrator": "rk4", "dt": dt,
               "duration": duration, "record_every": every}
    return SimRun(t=np.array([s.t for s in states]), arrays=arrays, model=RodRobot(example, config), config=config,
                  options=options, wall_time_s=wall, units=dict(UNITS))


def summarize(run) -> dict:
    """``--summary``: head displacement and velocities, contact forces, internal torque, checks 1-2, timing."""
    a, t = run.arrays, run.t
    pos = a["base_pos"]
    span = float(t[-1] - t[0])
    speed = np.array([np.linalg.norm(_world_velocity(q, v)) for q, v in zip(a["base_quat"], a["base_twist"])])
    period = run.model.metadata.get("period_s")
    window = t >= t[-1] - period - 1e-9 if period is not None and period <= span else np.ones(t.size, bool)
    Fw = a["Fc_world"]
    return {
        "head_displacement_m": (pos[-1] - pos[0]).tolist(),
        "mean_head_velocity_m_s": ((pos[-1] - pos[0]) / span if span > 0 else np.zeros(3)).tolist(),
        "peak_head_speed_m_s": float(speed.max()),
        "max_contact_force_N": float(np.max(np.linalg.norm(Fw, axis=1))),
        "cycle_mean_contact_force_N": _time_mean(t[window], Fw[window]).tolist(),
        "max_internal_torque_Nm": float(np.max(np.linalg.norm(a["Lam"][:, :, 3:], axis=2))),
        "closure_residual": float(np.max(a["closure"])),
        "contact_residual": float(np.max(a["contact_residual"])),
        "sim_time_s": span, "wall_time_s": float(run.wall_time_s),
        "real_time_factor": span / run.wall_time_s if run.wall_time_s > 0 else float("inf"),
    }


def _world_velocity(quat, twist):
    from sim.spatial import quat_to_matrix
    return quat_to_matrix(quat) @ twist[:3]


def _time_mean(t, values):
    if t.size < 2:
        return values.mean(axis=0)
    return np.trapezoid(values, t, axis=0) / (t[-1] - t[0])


def make_plots(run, out_dir) -> list:
    """backbone.png (snapshots + head path), contacts.png (forces), torque.png (internal torque along X)."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    a, t = run.arrays, run.t
    bb = a["backbone"]
    # plot in the plane of largest spread of the head's path and backbones
    spread = np.ptp(bb.reshape(-1, 3), axis=0)
    u, v = np.argsort(spread)[::-1][:2]
    names = "xyz"
    fig, ax = plt.subplots(figsize=(9, 5))
    for k in np.linspace(0, len(t) - 1, min(12, len(t))).astype(int):
        ax.plot(bb[k, :, u], bb[k, :, v], color=plt.cm.viridis(k / max(1, len(t) - 1)), lw=1.0)
    ax.plot(a["base_pos"][:, u], a["base_pos"][:, v], "r--", lw=1.0, label="head path")
    ax.set_xlabel(f"{names[u]} (m)")
    ax.set_ylabel(f"{names[v]} (m)")
    ax.set_aspect("equal", adjustable="datalim")
    ax.legend()
    ax.set_title(f"{run.model.metadata['name']}: backbone snapshots (dark = early)")
    paths = [_save(fig, out_dir / "backbone.png")]
    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for axis in range(3):
        axes[0].plot(t, a["Fc_world"][:, axis], label=f"total F{names[axis]}")
    axes[0].set_ylabel("total contact force (N)")
    axes[0].legend(fontsize=7)
    for i in range(a["contact_force_world"].shape[1]):
        axes[1].plot(t, np.linalg.norm(a["contact_force_world"][:, i], axis=1), lw=0.8, label=f"contact {i + 1}")
    axes[1].set_ylabel("|force| per contact (N)")
    axes[1].set_xlabel("time (s)")
    paths.append(_save(fig, out_dir / "contacts.png"))
    fig, ax = plt.subplots(figsize=(9, 5))
    torque = np.linalg.norm(a["Lam"][:, :, 3:], axis=2)
    image = ax.pcolormesh(a["X"], t, torque, shading="auto")
    fig.colorbar(image, ax=ax, label="|C(X, t)| internal torque (N m)")
    ax.set_xlabel("X (m), head at 0")
    ax.set_ylabel("time (s)")
    paths.append(_save(fig, out_dir / "torque.png"))
    return paths


def _save(fig, path):
    import matplotlib.pyplot as plt
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def build(config: dict, path):
    """The rigid-tree builder hook: a rod is no rigid tree; `mms sim` runs it through :func:`simulate_offline`, `mms
    serve` through :mod:`sim.cosserat.live`."""
    raise ConfigError(path, "robot.kind", "a cosserat rod is no rigid tree: it runs on its own engine, in `mms sim` "
                                           "and `mms serve` (not `mms check`, the Foxglove poses or the re-simulation)")
