"""``mms sim``: run a robot simulation offline; write its time series, plots and an optional summary.

    mms sim ROBOT [--periods 6 | --duration T] [--base free|tethered] [--dt DT] [--integrator rk4|rk45|rosw]
                   [--out runs/<name>/] [--summary PATH] [--record-every N] [--no-plots] [--quiet]
                   [--tailbeat-frequency F] [--tailbeat-amplitude A]

The command is generic over robot kinds. It loads the config (``sim.config.load_toml``), lets the robot's
module adapt it to the command-line options, builds the model (``sim.robots.build_robot``), steps a
:class:`sim.simulation.Simulation` with a tqdm progress bar, records ``sim.outputs()`` after every step and
writes (see docs/sim-output.md):
- ``<out>/timeseries.npz``: named arrays (``t`` and every output field, one row per recorded time);
- ``<out>/metadata.json``: units, shapes and meaning of every array, joint/body names, the robot's metadata
  (frames, parameters), the options of the run and the wall time;
- ``<out>/*.png``: plots (matplotlib, Agg);
- ``--summary PATH``: a JSON object from the robot's ``summarize`` hook.

Robot hooks (optional functions of the robot's module ``sim.robots.<kind>``, e.g. sim/robots/flapper.py):
- ``apply_cli_overrides(config: dict, args: argparse.Namespace) -> dict``: return the config table changed
  by the robot-specific options (``args.tailbeat_frequency``, ``args.tailbeat_amplitude``, ``args.duration``
  ...; each is None when not given). Raise :class:`sim.config.ConfigError` (one line) for an option that
  does not apply. Without the hook, any robot-specific option given is an error.
- ``summarize(run: SimRun) -> dict``: the JSON-serialisable summary written by ``--summary``; its ``warnings``
  (a list of one-line strings, e.g. a free run that is not the steady state its figures describe, sim/summary.py)
  are also printed on stderr. Without the hook the summary holds the generic ``sim_time_s``, ``wall_time_s``,
  ``real_time_factor``.
- ``stable_dt(model, integrator: str) -> float | None``: the largest advised fixed step (s) for this model
  (None: no advice, e.g. for an adaptive integrator). A config dt above it is lowered to it (with a note on
  stderr); an explicit ``--dt`` above it is kept, with a warning.
- ``make_plots(run: SimRun, out_dir: pathlib.Path) -> list[Path]``: write the robot's plots (matplotlib is
  already switched to the Agg backend). Without the hook the generic plots (joint positions and torques)
  are written.
- ``simulate_offline(config: dict, path: pathlib.Path, args: argparse.Namespace, progress: bool) -> SimRun``:
  a robot whose dynamics are not a rigid tree of :class:`sim.model.Model` (a Cosserat rod, a constrained TMT
  system with impacts) runs its own engine. The hook gets the checked config (after ``apply_cli_overrides``),
  reads the generic options it supports from ``args`` (refusing the others with a one-line ConfigError) and
  returns the finished run; its ``model`` is any object with a ``metadata`` dict (``joint_names``,
  ``body_names``, ``joint_types``, ``actuated``, ``base_mode`` are written to metadata.json when it has them).
  Such a robot should also define ``make_plots`` (the generic plots need joint positions and torques).
The ``run`` record (:class:`SimRun`) is a plain object: ``run.t`` (T,) s, ``run.arrays`` {name: (T, ...)
array} (the fields of ``Simulation.outputs()``: q, qd, qdd, tau, strain, base_pos, base_quat, base_twist,
base_wrench, ext_wrench), ``run.model``, ``run.config`` (the table actually built), ``run.options`` (dict of
the command-line options), ``run.wall_time_s`` (wall time of the stepping loop, s), ``run.units``.
The generic options ``--base``, ``--dt``, ``--integrator``, ``--periods``, ``--duration`` are handled here:
``--base`` re-derives the built model with ``model.replace(base_mode=...)``; ``--periods`` needs the robot's
``model.metadata["period_s"]``; defaults come from the config's optional ``[simulation]`` table
(``integrator``, ``dt``, ``periods``, ``duration``).
"""
from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from sim.cli_options import BASES
from sim.config import ConfigError, load_toml, require
from sim.integrators import INTEGRATORS
from sim.sim_run import OUTPUT_UNITS, SimRun  # noqa: F401 - re-exported: the robots' offline runs make SimRuns

ROBOT_OPTIONS = ("tailbeat_frequency", "tailbeat_amplitude")
#: Relative tolerance when comparing the chosen dt with a robot's advised step.
DT_SLACK = 1e-9
#: Steps per compiled call of the stepping loop: long enough that the call's overhead vanishes (< 1 %), short
#: enough (~0.1 s of wall time for the flapper) that the progress bar moves.
CHUNK_STEPS = 2000
#: `--periodic`: the "rosw" integrator's Jacobian is kept from rest (0: never refreshed), see find_periodic.
PERIODIC_JACOBIAN_EVERY = 0


def robot_module(kind: str):
    """The module ``sim.robots.<kind>`` (where the optional hooks live), or None if there is none."""
    try:
        return importlib.import_module(f"sim.robots.{kind}")
    except ModuleNotFoundError as exc:
        if exc.name == f"sim.robots.{kind}":
            return None
        raise


def load_config(args: argparse.Namespace):
    """The robot file of ``args.config``, checked and changed by the robot-specific options -> (path, config,
    kind, robot module)."""
    from sim.robots import check_robot

    path = Path(args.config)
    config = load_toml(path)
    check_robot(config, path)
    robot = require(config, "robot", dict, path=path)
    kind = require(robot, "kind", str, path=path, prefix="robot")
    module = robot_module(kind)
    config = copy.deepcopy(config)
    hook = getattr(module, "apply_cli_overrides", None)
    if hook is not None:
        config = hook(config, args)
    else:
        for name in ROBOT_OPTIONS:
            if getattr(args, name, None) is not None:
                raise ConfigError(path, None, f"--{name.replace('_', '-')} does not apply to robot kind {kind!r}")
    return path, config, kind, module


def prepare(args: argparse.Namespace, loaded=None):
    """Config -> (model, config actually built, robot module, options dict, integrator, dt, duration).
    ``loaded``: the result of :func:`load_config` when the caller has it already."""
    from sim.robots import build_robot

    path, config, kind, module = loaded or load_config(args)
    model = build_robot(config, path)
    if args.base is not None:
        model = model.replace(base_mode=BASES[args.base])
    table = config.get("simulation", {})
    if not isinstance(table, dict):
        raise ConfigError(path, "simulation", "expected a table")
    integrator = args.integrator or require(table, "integrator", str, path=path, prefix="simulation",
                                            default="rk4", check=lambda v: v in INTEGRATORS,
                                            expected=" or ".join(f'"{name}"' for name in INTEGRATORS))
    dt = args.dt if args.dt is not None else require(table, "dt", float, path=path, prefix="simulation",
                                                     default=1e-4, check=lambda v: v > 0.0,
                                                     expected="a time step > 0 (s)")
    if not (dt > 0.0 and math.isfinite(dt)):
        raise ConfigError(None, "--dt", f"got {dt!r}, expected a time step > 0 (s)")
    advise = getattr(module, "stable_dt", None)
    limit = advise(model, integrator) if advise is not None else None
    if limit is not None and dt > limit * (1.0 + DT_SLACK):
        if args.dt is None:
            print(f"mms sim: the config's dt = {dt:g} s is above this model's advised step {limit:.4g} s "
                  f"(stiffest mode); using {limit:.4g} s", file=sys.stderr)
            dt = limit
        else:
            print(f"mms sim: warning: --dt {dt:g} s is above this model's advised step {limit:.4g} s "
                  "(stiffest mode); the run may go unstable", file=sys.stderr)
    if args.duration is not None:
        duration = args.duration
    else:
        period = model.metadata.get("period_s")
        periods = args.periods if args.periods is not None else require(
            table, "periods", float, path=path, prefix="simulation", default=6.0,
            check=lambda v: v > 0.0, expected="a number of periods > 0")
        if period is None and args.periods is not None:
            raise ConfigError(path, None, "--periods needs a robot with a period (this one has none); use --duration")
        if period is None:
            duration = require(table, "duration", float, path=path, prefix="simulation",
                               check=lambda v: v > 0.0, expected="a duration > 0 (s) (this robot has no period)")
        else:
            duration = periods * period
    if not (duration > 0.0 and math.isfinite(duration)):
        raise ConfigError(None, "--duration/--periods", f"got {duration!r}, expected a positive time")
    options = {"config": str(path), "kind": kind, "base": model.base_mode, "integrator": integrator, "dt": dt,
               "duration": duration, "periods": args.periods,
               "tailbeat_frequency": args.tailbeat_frequency, "tailbeat_amplitude": args.tailbeat_amplitude}
    return model, config, module, options, integrator, dt, duration


def simulate(model, integrator: str, dt: float, duration: float, *, progress: bool = True,
             config: dict | None = None, options: dict | None = None, record_every: int = 1,
             initial_state: np.ndarray | None = None, jacobian_every: int | None = None) -> SimRun:
    """Step a Simulation of ``model`` for ``duration`` s, recording ``outputs()`` at t = 0 and after every
    ``record_every`` steps (the last step is always recorded). The run starts at rest, or at the reduced
    coordinates ``initial_state`` (:class:`sim.periodic.ShootingCoordinates`, e.g. a periodic orbit's).
    ``jacobian_every``: the "rosw" integrator's Jacobian refresh interval (None: its default).

    The kernels are compiled (first run of an installation without ``python -m sim.warmup``: said on stderr)
    or loaded from numba's cache before the clock starts and before the progress bar appears, so neither the
    wall time (hence the real-time factor) nor the bar's rate includes them. The steps go in chunks of
    :func:`Simulation.record` (one compiled call per chunk on the fused path)."""
    from tqdm import tqdm

    from sim.simulation import Simulation
    from sim.warmup import COMPILE_ESTIMATE_S, kernels_compiled

    if not kernels_compiled():
        print(f"mms sim: compiling simulation kernels (once; `python -m sim.warmup` compiles those of every robot "
              f"in about {COMPILE_ESTIMATE_S / 60:.0f} min)", file=sys.stderr, flush=True)
    refresh = {} if jacobian_every is None else {"jacobian_every": jacobian_every}
    sim = Simulation(model, integrator=integrator, dt=dt, **refresh)
    sim.record(1, 1)                 # compile or load the kernels outside the timing
    sim.reset()
    if initial_state is not None:
        from sim.periodic import ShootingCoordinates
        ShootingCoordinates(sim).start(initial_state)
    n_steps = max(1, int(round(duration / dt)))
    record_every = max(1, int(record_every))
    full, rest = divmod(n_steps, record_every)
    first = sim.outputs()
    n_rows = 1 + full + (1 if rest else 0)
    arrays = {name: np.empty((n_rows,) + np.shape(value)) for name, value in first.items()
              if np.asarray(value).dtype.kind in "fiub"}
    times = np.empty(n_rows)
    for name in arrays:
        arrays[name][0] = first[name]
    times[0] = sim.t
    chunk = max(1, CHUNK_STEPS // record_every)          # records per call
    bar = tqdm(total=n_steps, unit="step", disable=not progress, desc=f"sim {model.metadata.get('name', '')}",
               mininterval=0.5)
    row = 1
    start = time.perf_counter()
    for records, every in [(full, record_every), (1 if rest else 0, rest)]:
        done = 0
        while done < records:
            count = min(chunk, records - done)
            t_rec, out = sim.record(count, every)
            times[row:row + count] = t_rec
            for name, target in arrays.items():
                target[row:row + count] = out[name]
            row += count
            done += count
            bar.update(count * every)
    wall = time.perf_counter() - start
    bar.close()
    return SimRun(t=times, arrays=arrays, model=model, config=config or {}, options=options or {},
                  wall_time_s=wall)


def generic_summary(run: SimRun) -> dict:
    """Timing figures common to every robot: simulated time, wall time (stepping loop), real-time factor."""
    return {"sim_time_s": run.sim_time_s, "wall_time_s": run.wall_time_s,
            "real_time_factor": run.sim_time_s / run.wall_time_s if run.wall_time_s > 0 else float("inf")}


#: What metadata.json says of the run's model, when the model has it (a rigid tree has all of them).
MODEL_DESCRIPTION = ("joint_names", "body_names", "joint_types", "actuated", "base_mode")


def write_timeseries(run: SimRun, out_dir: Path) -> tuple[Path, Path]:
    """Write ``timeseries.npz`` (named arrays) and ``metadata.json`` (units, names, metadata) in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    npz = out_dir / "timeseries.npz"
    np.savez(npz, t=run.t, **run.arrays)
    meta = {
        "format": "numpy .npz of named arrays, one row per recorded time; read with numpy.load",
        "arrays": {name: {"unit": run.units.get(name, ("", ""))[0], "description": run.units.get(name, ("", ""))[1],
                          "shape": list(run.arrays[name].shape) if name != "t" else list(run.t.shape)}
                   for name in ["t", *run.arrays]},
        **{name: _jsonable(getattr(run.model, name)) for name in MODEL_DESCRIPTION if hasattr(run.model, name)},
        "options": run.options,
        "wall_time_s": run.wall_time_s,
        "robot_metadata": _jsonable(run.model.metadata),
    }
    meta_path = out_dir / "metadata.json"
    meta_path.write_text(json.dumps(meta, indent=2))
    return npz, meta_path


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def generic_plots(run: SimRun, out_dir: Path) -> list[Path]:
    """Joint positions and torques against time (any robot)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for k, name in enumerate(run.model.joint_names):
        axes[0].plot(run.t, run.arrays["q"][:, k], label=name)
        axes[1].plot(run.t, run.arrays["tau"][:, k], label=name)
    axes[0].set_ylabel("joint position (rad or m)")
    axes[1].set_ylabel("joint torque (N m or N)")
    axes[1].set_xlabel("time (s)")
    if run.model.n <= 12:
        axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / "joints.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


def periodic_config(loaded):
    """``--periodic``: the loaded robot (path, config, kind, module) with the robot's ``PERIODIC_CONFIG``
    ({(table, key): value}; RayBot: no soft start of the tail beat) applied, said on stderr: shooting needs a drive
    that repeats from t = 0."""
    path, config, kind, module = loaded
    changes = getattr(module, "PERIODIC_CONFIG", {})
    if not changes:
        return loaded
    config = copy.deepcopy(config)
    for (table, key), value in changes.items():
        config.setdefault(table, {})[key] = value
    print("mms sim: --periodic: " + ", ".join(f"{table}.{key} = {value:g}" for (table, key), value in changes.items())
          + " (the drive must repeat from t = 0)", file=sys.stderr)
    return path, config, kind, module


def find_periodic(args: argparse.Namespace, model, config: dict, module, integrator: str, dt: float):
    """The periodic orbit of ``model`` (``--periodic``), or with ``--trim`` of the model rebuilt with the robot's
    trim parameters (``module.TRIM_KEYS``: (table, key) pairs of the config) adjusted for no net translation
    along x and z. Returns (model, config, dt, initial reduced state, summary keys of the orbit): dt is lowered
    to a whole fraction of the period if needed (the period map must end exactly on the period).

    With "rosw" the solve and the run keep the Jacobian from rest (``PERIODIC_JACOBIAN_EVERY``): a refresh
    computes it by finite differences at the current state, whose rounding (~1e-7) would make the period map
    too rough for Newton's method to converge below ~1e-8."""
    from sim.periodic import periodic_orbit, trimmed_orbit
    from sim.robots import build_robot
    from sim.simulation import Simulation

    period = model.metadata.get("period_s")
    if period is None:
        raise ConfigError(args.config, None, "--periodic needs a robot with an actuation period (this one has none)")
    log = None if args.quiet else (lambda line: print(f"mms sim: periodic orbit: {line}", file=sys.stderr, flush=True))
    segments = args.segments
    steps = segments * math.ceil(period / dt / segments * (1.0 - DT_SLACK))
    if abs(steps * dt - period) > DT_SLACK * period:
        print(f"mms sim: --periodic: dt {dt:g} s lowered to {period / steps:.6g} s, a whole fraction "
              f"(1/{steps}) of the period {period:g} s", file=sys.stderr)
        dt = period / steps
    if not args.trim:
        orbit = periodic_orbit(Simulation(model, integrator, dt, jacobian_every=PERIODIC_JACOBIAN_EVERY), period,
                               log=log, segments=segments)
        return model, config, dt, orbit.shooting.x, {**orbit.summary(), "periodic_segments": segments}
    keys = getattr(module, "TRIM_KEYS", None)
    if keys is None:
        raise ConfigError(args.config, None, "--trim: this robot kind names no trim parameters")
    if model.base_mode != "floating":
        raise ConfigError(None, "--trim", "needs a free (floating) base: a held base has no net translation to trim")

    def configured(values) -> dict:
        changed = copy.deepcopy(config)
        for (table, key), value in zip(keys, values):
            changed[table][key] = float(value)
        return changed

    def simulation_for(values):
        return Simulation(build_robot(configured(values), args.config).replace(base_mode=model.base_mode),
                          integrator, dt, jacobian_every=PERIODIC_JACOBIAN_EVERY)

    names = [f"{table}.{key}" for table, key in keys]
    start = np.array([float(config[table].get(key, 0.0)) for table, key in keys])
    trimmed = trimmed_orbit(simulation_for, names, start, period, log=log)
    summary = trimmed.orbit.summary()
    summary.update({"periodic_converged": bool(trimmed.solve.converged), "periodic_residual": trimmed.solve.residual,
                    "periodic_iterations": trimmed.solve.iterations, "trimmed_parameters": trimmed.parameters})
    config = configured(trimmed.solve.z[-len(keys):])
    return trimmed.orbit.coordinates.sim.model, config, dt, trimmed.orbit.shooting.x, summary


def run(args: argparse.Namespace) -> int:
    if args.record_every is not None and args.record_every < 1:
        raise ConfigError(None, "--record-every", f"got {args.record_every}, expected an integer >= 1")
    if args.trim and not args.periodic:
        raise ConfigError(None, "--trim", "applies only with --periodic")
    if args.segments != 1 and not args.periodic:
        raise ConfigError(None, "--segments", "applies only with --periodic")
    if args.segments < 1:
        raise ConfigError(None, "--segments", f"got {args.segments}, expected an integer >= 1")
    if args.segments != 1 and args.trim:
        raise ConfigError(None, "--segments", "multiple shooting is not available with --trim (single shooting only)")
    loaded = load_config(args)
    path, config, kind, module = loaded
    engine = getattr(module, "simulate_offline", None)
    if engine is not None:
        if args.periodic:
            raise ConfigError(path, None, f"--periodic applies to rigid-tree robots, not to robot kind {kind!r}")
        return write_outputs(args, engine(config, path, args, not args.quiet), module, None)
    if args.periodic:
        loaded = periodic_config(loaded)
    model, config, module, options, integrator, dt, duration = prepare(args, loaded)
    record_every = 1 if args.record_every is None else args.record_every
    options["record_every"] = record_every
    initial_state, orbit_summary = None, None
    if args.periodic and model.flexible is not None:
        raise ConfigError(path, None, "--periodic does not cover modal (flexible) bodies yet: their modal coordinates "
                                      "are not shooting coordinates (docs/flexible.md)")
    if args.periodic:
        model, config, dt, initial_state, orbit_summary = find_periodic(args, model, config, module, integrator, dt)
        options.update(periodic=True, dt=dt, trimmed_parameters=orbit_summary.get("trimmed_parameters"))
        verdict = "found" if orbit_summary["periodic_converged"] else "NOT found (closest point used)"
        print(f"mms sim: periodic orbit {verdict}: residual {orbit_summary['periodic_residual']:.2e}, largest "
              f"Floquet multiplier {max(orbit_summary['floquet_multipliers'], default=0.0):.4g} "
              f"({'stable' if orbit_summary['floquet_stable'] else 'unstable'}), net velocity "
              + ", ".join(f"{axis} {v:.3g}" for axis, v in orbit_summary["periodic_mean_velocity_mm_s"].items())
              + " mm/s" + "".join(f"; {name} = {value:.4g}" for name, value in
                                  (orbit_summary.get("trimmed_parameters") or {}).items()),
              file=sys.stderr, flush=True)
    refresh = PERIODIC_JACOBIAN_EVERY if args.periodic else None
    run_record = simulate(model, integrator, dt, duration, progress=not args.quiet, config=config,
                          options=options, record_every=record_every, initial_state=initial_state,
                          jacobian_every=refresh)
    return write_outputs(args, run_record, module, orbit_summary)


def write_outputs(args: argparse.Namespace, run_record: SimRun, module, orbit_summary: dict | None) -> int:
    """Write the time series, the plots and the summary of a finished run; print where they went."""
    out_dir = args.out or Path("runs") / str(run_record.model.metadata.get("name") or run_record.options["kind"])
    npz, meta = write_timeseries(run_record, out_dir)
    written = [npz, meta]
    if not args.no_plots:
        import matplotlib
        matplotlib.use("Agg")
        plot_hook = getattr(module, "make_plots", None)
        written += list((plot_hook or generic_plots)(run_record, out_dir))
    if args.summary is not None:
        summarize = getattr(module, "summarize", None)
        summary = summarize(run_record) if summarize is not None else generic_summary(run_record)
        if orbit_summary is not None:
            summary.update(orbit_summary)
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(_jsonable(summary), indent=2))
        written.append(args.summary)
        for warning in summary.get("warnings", []):
            print(f"mms sim: warning: {warning}", file=sys.stderr)
    rtf = generic_summary(run_record)["real_time_factor"]
    print(f"simulated {run_record.sim_time_s:.4g} s in {run_record.wall_time_s:.3g} s wall "
          f"(real-time factor {rtf:.3g}); wrote {', '.join(str(p) for p in written)}")
    return 0
