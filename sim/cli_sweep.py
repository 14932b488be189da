"""``mms sweep``: sweep a robot's actuation (frequency x amplitude) and tabulate steady results.

    mms sweep raybot --frequencies 1 1.5 2 2.5 3 --amplitudes 15 25 --duration 20 --out DIR
    mms sweep fish --frequencies 1 2 3 --amplitudes 0.02 0.03 --duration 6 --out DIR
    mms sweep flapper --frequencies 20 25 30 --amplitudes 35 41.3 --scheduler tcp://lab-server:8786

Each (amplitude, frequency) pair is one run (a task of :mod:`sim.studies`: on a local Dask cluster by default, on
an existing one with ``--scheduler tcp://HOST:PORT``, or ``--scheduler serial``; the rows are the same whichever
runs them, their real-time factor aside). A swimmer's run is free swimming for ``--duration`` s (default 20), its
steady figures those of the robot module's ``swim_figures`` (sim/swimming.py: last three beats): speed,
trailing-edge amplitude, Strouhal number; the amplitude is the robot's ``--tailbeat-amplitude`` (RayBot: servo
amplitude, deg; fish: the wave's amplitude at the tail, m). For RayBot this reproduces the paper's two validation
curves (Section V, Fig. 10). The flapper's run is its config's ``[simulation]`` (base, integrator, step) for
``--duration`` s (default: ``simulation.periods`` stroke periods of each point), its figures those of its
``summarize`` over the last stroke (stroke torque, power, tip twist and bend, lift over weight); the amplitude is
``stroke.amplitude_deg``, the frequency ``stroke.frequency_hz``. A run that fails is reported with its amplitude
and frequency and leaves its row's figures empty; the others go on. Writes ``DIR/sweep.csv`` (one row per run,
units in the header) and ``DIR/sweep.png`` (the figures against frequency). Robot kinds supported: :data:`STUDIES`.
"""
from __future__ import annotations

import argparse
import copy
import csv
import importlib
import math
from dataclasses import dataclass
from pathlib import Path

from sim.cli_options import add_out, add_quiet, add_robot, add_scheduler
from sim.config import ConfigError, load_toml, require

CSV_COLUMNS = ("amplitude", "amplitude_unit", "tailbeat_frequency_Hz", "tailbeat_amplitude_m", "steady_speed_m_s",
               "body_lengths_per_s", "strouhal", "mean_thrust_N", "cost_of_transport", "real_time_factor")
FLAPPER_COLUMNS = ("amplitude", "amplitude_unit", "stroke_frequency_Hz", "peak_stroke_torque_Nm",
                   "mean_power_per_wing_W", "tip_twist_amplitude_deg", "tip_bend_amplitude_deg",
                   "mean_vertical_force_over_weight", "real_time_factor")
#: the column that depends on the machine and its load, not on the simulation
TIMING_COLUMN = "real_time_factor"
#: the swimmers' default run length, s (the flapper's: its config's stroke periods)
SWIM_DURATION_S = 20.0
#: the flapper's [simulation] defaults where its config has none (those of `mms sim`)
DEFAULT_DT_S, DEFAULT_PERIODS = 1e-4, 6


@dataclass(frozen=True)
class Study:
    """What a sweep of one robot kind varies and tabulates."""
    amplitude_key: tuple[str, str]      # (config table, key) of the amplitude's default
    amplitude_unit: str
    columns: tuple[str, ...]
    #: (column, scale, label) of the plot's panels against frequency
    panels: tuple[tuple[str, float, str], ...]


SWIM_PANELS = (("tailbeat_amplitude_m", 100.0, "trailing-edge amplitude, peak to peak (cm)"),
               ("steady_speed_m_s", 1.0, "steady speed (m/s)"), ("strouhal", 1.0, "Strouhal number f A / U"))
STUDIES = {"raybot": Study(("tail_drive", "servo_amplitude_deg"), "deg", CSV_COLUMNS, SWIM_PANELS),
           "fish": Study(("muscle", "tail_amplitude_m"), "m", CSV_COLUMNS, SWIM_PANELS),
           "flapper": Study(("stroke", "amplitude_deg"), "deg", FLAPPER_COLUMNS,
                            (("peak_stroke_torque_Nm", 1e3, "peak stroke torque (mN m)"),
                             ("mean_power_per_wing_W", 1e3, "mean power per wing (mW)"),
                             ("mean_vertical_force_over_weight", 1.0, "mean vertical force / weight")))}
#: the kinds that swim (their frequency is the tail beat's)
SWIMMERS = ("raybot", "fish")


@dataclass(frozen=True)
class Point:
    """One run of the sweep (a picklable task item): the robot config with the point's actuation applied."""
    kind: str
    config: dict
    path: str
    amplitude: float
    frequency: float
    duration: float | None
    dt: float | None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser, extra=f" (kinds: {', '.join(STUDIES)})")
    parser.add_argument("--frequencies", type=float, nargs="+", required=True,
                        help="frequencies, Hz (swimmers: tail beat; flapper: stroke)")
    parser.add_argument("--amplitudes", type=float, nargs="+", default=None,
                        help="amplitudes (RayBot: servo, deg; fish: at the tail, m; flapper: stroke, deg; "
                             "default: the config's)")
    parser.add_argument("--duration", type=float, default=None,
                        help=f"simulated time of each run, s (default: swimmers {SWIM_DURATION_S:g}; flapper: "
                             "its config's simulation.periods stroke periods)")
    parser.add_argument("--dt", type=float, default=None, help="time step, s (default: the config's)")
    add_out(parser, "runs/sweep", type=Path, default=Path("runs/sweep"))
    add_scheduler(parser)
    add_quiet(parser)


def robot_kind(config: dict, path) -> str:
    kind = require(require(config, "robot", dict, path=path), "kind", str, path=path, prefix="robot")
    if kind not in STUDIES:
        raise ConfigError(path, "robot.kind", f"got {kind!r}, mms sweep supports {sorted(STUDIES)}")
    return kind


def _point_config(kind: str, config: dict, amplitude: float, frequency: float) -> dict:
    table = copy.deepcopy(config)
    if kind == "flapper":
        table["stroke"] = {**table.get("stroke", {}), "amplitude_deg": amplitude, "frequency_hz": frequency}
        return table
    module = importlib.import_module(f"sim.robots.{kind}")
    table = module.apply_cli_overrides(table, argparse.Namespace(tailbeat_frequency=frequency,
                                                                 tailbeat_amplitude=amplitude))
    table["robot"]["base"] = "floating"
    return table


def run_point(point: Point) -> dict:
    """One run's row (the study's columns); a module-level function, so that a Dask worker can run it."""
    from sim.robots import build_robot

    model = build_robot(point.config, point.path)
    row = {"amplitude": point.amplitude, "amplitude_unit": STUDIES[point.kind].amplitude_unit}
    if point.kind == "flapper":
        from sim.cli_sim import simulate
        from sim.robots.flapper import summarize

        table = point.config.get("simulation", {})
        dt = point.dt or require(table, "dt", float, path=point.path, prefix="simulation", default=DEFAULT_DT_S)
        periods = require(table, "periods", int, path=point.path, prefix="simulation", default=DEFAULT_PERIODS)
        integrator = require(table, "integrator", str, path=point.path, prefix="simulation", default="rk4")
        run = simulate(model, integrator, dt, point.duration or periods * model.metadata["period_s"], progress=False)
        figures = summarize(run)
        row["stroke_frequency_Hz"] = point.frequency
        row.update({key: figures[key] for key in FLAPPER_COLUMNS[3:]})
        return row
    from sim.robots.raybot import swim

    module = importlib.import_module(f"sim.robots.{point.kind}")
    t, arrays, wall = swim(model, point.duration or SWIM_DURATION_S, dt=point.dt)
    figures = module.swim_figures(model, t, arrays)
    row[TIMING_COLUMN] = float(t[-1] - t[0]) / wall if wall > 0 else float("inf")
    row.update({key: figures[key] for key in CSV_COLUMNS[2:-1]})
    return row


def describe(point: Point) -> str:
    unit = STUDIES[point.kind].amplitude_unit
    return f"amplitude {point.amplitude:g} {unit}, frequency {point.frequency:g} Hz"


def sweep(config: dict, path, frequencies, amplitudes, duration: float | None = None, dt: float | None = None,
          progress: bool = True, evaluator=None) -> list[dict]:
    """One run per (amplitude, frequency Hz), through ``evaluator`` (:mod:`sim.studies`; None: serially in this
    process); returns one row dict per run (keys: the kind's study columns), in the order amplitude-major. A run
    that failed has its figures None (the failure is said on stderr)."""
    from sim.robots import check_robot
    from sim.studies import Evaluator, Failure

    check_robot(config, path)
    kind = robot_kind(config, path)
    study = STUDIES[kind]
    if duration is not None and not (duration > 0.0 and math.isfinite(duration)):
        raise ConfigError(None, "--duration", f"got {duration!r}, expected a positive time (s)")
    for f in frequencies:
        if not (f > 0.0 and math.isfinite(f)):
            raise ConfigError(None, "--frequencies", f"got {f!r}, expected frequencies > 0 (Hz)")
    for a in amplitudes:
        if not (a >= 0.0 and math.isfinite(a)):
            raise ConfigError(None, "--amplitudes", f"got {a!r}, expected amplitudes >= 0 ({study.amplitude_unit})")
    points = [Point(kind, _point_config(kind, config, amplitude, frequency), str(path), amplitude, frequency,
                    duration, dt) for amplitude in amplitudes for frequency in frequencies]
    evaluator = evaluator or Evaluator()
    results = evaluator.map(run_point, points, describe, progress="sweep" if progress else None)
    frequency_column = study.columns[2]
    return [result if not isinstance(result, Failure) else
            {**{key: None for key in study.columns}, "amplitude": point.amplitude,
             "amplitude_unit": study.amplitude_unit, frequency_column: point.frequency}
            for point, result in zip(points, results)]


def columns_of(rows: list[dict]) -> tuple[str, ...]:
    """The study columns the rows carry (a swimmer's or the flapper's)."""
    return FLAPPER_COLUMNS if rows and "stroke_frequency_Hz" in rows[0] else CSV_COLUMNS


def write_csv(rows: list[dict], path: Path) -> Path:
    columns = columns_of(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in columns})
    return path


def plot(rows: list[dict], path: Path) -> Path:
    """The study's three figures against frequency, one curve per amplitude (swimmers: trailing-edge amplitude,
    steady speed and Strouhal number, for RayBot the paper's Fig. 10 curves; flapper: stroke torque, power, lift
    over weight)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    flapper = columns_of(rows) is FLAPPER_COLUMNS
    panels = STUDIES["flapper" if flapper else "raybot"].panels
    frequency = columns_of(rows)[2]
    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    for amplitude in sorted({r["amplitude"] for r in rows}):
        sel = sorted((r for r in rows if r["amplitude"] == amplitude), key=lambda r: r[frequency])
        f = [r[frequency] for r in sel]
        for ax, (key, scale, _) in zip(axes, panels):
            ax.plot(f, [math.nan if r[key] is None else scale * r[key] for r in sel], "o-",
                    label=f"amplitude {amplitude:g} {sel[0]['amplitude_unit']}")
    for ax, (_, _, label) in zip(axes, panels):
        ax.set_xlabel(f"{'stroke' if flapper else 'tail-beat'} frequency (Hz)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    if not flapper:
        axes[2].axhspan(0.2, 0.4, color="tab:green", alpha=0.1)      # where fish and rays cruise
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _figure(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def summary_line(row: dict) -> str:
    head = f"amplitude {row['amplitude']:g} {row['amplitude_unit']}"
    if "stroke_frequency_Hz" in row:
        return (f"{head}  f {row['stroke_frequency_Hz']:5.2f} Hz  peak torque "
                f"{_figure(row['peak_stroke_torque_Nm'], '.3e')} N m  power "
                f"{_figure(row['mean_power_per_wing_W'], '.3e')} W  lift/weight "
                f"{_figure(row['mean_vertical_force_over_weight'], '.3f')}")
    return (f"{head}  f {row['tailbeat_frequency_Hz']:4.2f} Hz  trailing edge "
            f"{_figure(row['tailbeat_amplitude_m'], '.3f')} m pp  speed {_figure(row['steady_speed_m_s'], '.3f')} "
            f"m/s  St {_figure(row['strouhal'], '.3f')}")


def run(args: argparse.Namespace) -> int:
    from sim.studies import open_evaluator

    config = load_toml(args.config)
    amplitudes = args.amplitudes
    if amplitudes is None:
        section, key = STUDIES[robot_kind(config, args.config)].amplitude_key
        amplitudes = [require(config.get(section, {}), key, float, path=args.config, prefix=section)]
    if args.dt is not None and not (args.dt > 0.0 and math.isfinite(args.dt)):
        raise ConfigError(None, "--dt", f"got {args.dt!r}, expected a time step > 0 (s)")
    with open_evaluator(args.scheduler, args.workers) as evaluator:
        if not args.quiet:
            print(f"mms sweep: running on {evaluator.where}", flush=True)
        rows = sweep(config, args.config, args.frequencies, amplitudes, args.duration, args.dt,
                     progress=not args.quiet, evaluator=evaluator)
    csv_path = write_csv(rows, args.out / "sweep.csv")
    png_path = plot(rows, args.out / "sweep.png")
    for row in rows:
        print(summary_line(row))
    print(f"wrote {csv_path}, {png_path}")
    return 0
