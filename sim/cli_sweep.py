"""``mms sweep``: sweep a swimmer's beat (tail-beat frequency x amplitude) and tabulate steady results.

    mms sweep raybot --frequencies 1 1.5 2 2.5 3 --amplitudes 15 25 --duration 20 --out DIR
    mms sweep fish --frequencies 1 2 3 --amplitudes 0.02 0.03 --duration 6 --out DIR

Each (amplitude, frequency) pair is one free-swimming run of ``--duration`` s; the steady figures are those of
the robot module's ``swim_figures`` (sim/swimming.py: last three beats): speed, trailing-edge amplitude, Strouhal
number. The amplitude is the robot's ``--tailbeat-amplitude`` (RayBot: servo amplitude, deg; fish: the wave's
amplitude at the tail, m). For RayBot this reproduces the paper's two validation curves (Section V, Fig. 10).
Writes ``DIR/sweep.csv`` (one row per run, units in the header) and ``DIR/sweep.png`` (amplitude, speed and
Strouhal number against frequency). Robot kinds supported: :data:`SWIMMERS`.
"""
from __future__ import annotations

import argparse
import copy
import csv
import importlib
import math
from pathlib import Path

from sim.cli_options import add_out, add_quiet, add_robot
from sim.config import ConfigError, load_toml, require

#: Robot kinds mms sweep drives -> (the config key of the amplitude's default, its unit).
SWIMMERS = {"raybot": (("tail_drive", "servo_amplitude_deg"), "deg"),
            "fish": (("muscle", "tail_amplitude_m"), "m")}
CSV_COLUMNS = ("amplitude", "amplitude_unit", "tailbeat_frequency_Hz", "tailbeat_amplitude_m", "steady_speed_m_s",
               "body_lengths_per_s", "strouhal", "mean_thrust_N", "cost_of_transport", "real_time_factor")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser, extra=" (a swimmer: raybot, fish)")
    parser.add_argument("--frequencies", type=float, nargs="+", required=True, help="tail-beat frequencies, Hz")
    parser.add_argument("--amplitudes", type=float, nargs="+", default=None,
                        help="tail-beat amplitudes (RayBot: servo, deg; fish: at the tail, m; default: the config's)")
    parser.add_argument("--duration", type=float, default=20.0, help="simulated time of each run, s (default 20)")
    parser.add_argument("--dt", type=float, default=None, help="time step, s (default: the config's)")
    add_out(parser, "runs/sweep", type=Path, default=Path("runs/sweep"))
    add_quiet(parser)


def sweep(config: dict, path, frequencies, amplitudes, duration: float, dt: float | None = None,
          progress: bool = True) -> list[dict]:
    """One free-swimming run per (amplitude, frequency Hz); returns one row dict per run (keys
    :data:`CSV_COLUMNS`)."""
    from tqdm import tqdm

    from sim.robots import build_robot, check_robot
    from sim.robots.raybot import swim

    check_robot(config, path)
    kind = require(require(config, "robot", dict, path=path), "kind", str, path=path, prefix="robot")
    if kind not in SWIMMERS:
        raise ConfigError(path, "robot.kind", f"got {kind!r}, mms sweep supports {sorted(SWIMMERS)}")
    module = importlib.import_module(f"sim.robots.{kind}")
    unit = SWIMMERS[kind][1]
    if not (duration > 0.0 and math.isfinite(duration)):
        raise ConfigError(None, "--duration", f"got {duration!r}, expected a positive time (s)")
    for f in frequencies:
        if not (f > 0.0 and math.isfinite(f)):
            raise ConfigError(None, "--frequencies", f"got {f!r}, expected frequencies > 0 (Hz)")
    for a in amplitudes:
        if not (a >= 0.0 and math.isfinite(a)):
            raise ConfigError(None, "--amplitudes", f"got {a!r}, expected amplitudes >= 0 ({unit})")
    rows = []
    models = []
    for amplitude in amplitudes:
        for frequency in frequencies:
            table = copy.deepcopy(config)
            args = argparse.Namespace(tailbeat_frequency=frequency, tailbeat_amplitude=amplitude)
            table = module.apply_cli_overrides(table, args)
            table["robot"]["base"] = "floating"
            models.append((amplitude, frequency, build_robot(table, path)))
    total = sum(max(1, int(round(duration / (dt or m.metadata["parameters"]["dt"])))) for _, _, m in models)
    with tqdm(total=total, unit="step", disable=not progress, desc="sweep", mininterval=0.5) as bar:
        for amplitude, frequency, model in models:
            bar.set_postfix_str(f"A={amplitude:g} {unit} f={frequency:g} Hz")
            t, arrays, wall = swim(model, duration, dt=dt, progress=bar)
            figures = module.swim_figures(model, t, arrays)
            rows.append({"amplitude": amplitude, "amplitude_unit": unit,
                         "real_time_factor": float(t[-1] - t[0]) / wall if wall > 0 else float("inf"),
                         **{key: figures[key] for key in CSV_COLUMNS[2:-1]}})
    return rows


def write_csv(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in CSV_COLUMNS})
    return path


def plot(rows: list[dict], path: Path) -> Path:
    """Trailing-edge amplitude, steady speed and Strouhal number against tail-beat frequency, one curve per
    amplitude (for RayBot the first two are the paper's Fig. 10 curves)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    panels = (("tailbeat_amplitude_m", 100.0, "trailing-edge amplitude, peak to peak (cm)"),
              ("steady_speed_m_s", 1.0, "steady speed (m/s)"), ("strouhal", 1.0, "Strouhal number f A / U"))
    for amplitude in sorted({r["amplitude"] for r in rows}):
        sel = sorted((r for r in rows if r["amplitude"] == amplitude), key=lambda r: r["tailbeat_frequency_Hz"])
        f = [r["tailbeat_frequency_Hz"] for r in sel]
        for ax, (key, scale, _) in zip(axes, panels):
            ax.plot(f, [math.nan if r[key] is None else scale * r[key] for r in sel], "o-",
                    label=f"amplitude {amplitude:g} {sel[0]['amplitude_unit']}")
    for ax, (_, _, label) in zip(axes, panels):
        ax.set_xlabel("tail-beat frequency (Hz)")
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[2].axhspan(0.2, 0.4, color="tab:green", alpha=0.1)      # where fish and rays cruise
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    config = load_toml(args.config)
    amplitudes = args.amplitudes
    if amplitudes is None:
        kind = require(require(config, "robot", dict, path=args.config), "kind", str, path=args.config,
                       prefix="robot")
        if kind not in SWIMMERS:
            raise ConfigError(args.config, "robot.kind", f"got {kind!r}, mms sweep supports {sorted(SWIMMERS)}")
        (section, key), _ = SWIMMERS[kind]
        amplitudes = [require(config.get(section, {}), key, float, path=args.config, prefix=section)]
    if args.dt is not None and not (args.dt > 0.0 and math.isfinite(args.dt)):
        raise ConfigError(None, "--dt", f"got {args.dt!r}, expected a time step > 0 (s)")
    rows = sweep(config, args.config, args.frequencies, amplitudes, args.duration, args.dt,
                 progress=not args.quiet)
    csv_path = write_csv(rows, args.out / "sweep.csv")
    png_path = plot(rows, args.out / "sweep.png")
    for row in rows:
        strouhal = "-" if row["strouhal"] is None else f"{row['strouhal']:.3f}"
        print(f"amplitude {row['amplitude']:g} {row['amplitude_unit']}  f {row['tailbeat_frequency_Hz']:4.2f} Hz  "
              f"trailing edge {row['tailbeat_amplitude_m']:.3f} m pp  speed {row['steady_speed_m_s']:.3f} m/s  "
              f"St {strouhal}")
    print(f"wrote {csv_path}, {png_path}")
    return 0
