"""``mms sweep``: sweep a robot's actuation (tail-beat frequency x servo amplitude) and tabulate steady results.

    mms sweep raybot --frequencies 1 1.5 2 2.5 3 --amplitudes 15 25 --duration 20 --out DIR

Reproduces, from simulation, the RayBot paper's two validation curves (Section V, Fig. 10): tail-beat frequency
against tail-beat amplitude, and against steady forward speed. Each (amplitude, frequency) pair is one free-
swimming run of ``--duration`` s; the steady figures are those of ``sim.robots.raybot.swim_figures`` (last three
beats). Writes ``DIR/sweep.csv`` (one row per run, units in the header) and ``DIR/sweep.png``.
Robot kinds supported: raybot.
"""
from __future__ import annotations

import argparse
import copy
import csv
import math
from pathlib import Path

from sim.cli_options import add_out, add_quiet, add_robot
from sim.config import ConfigError, load_toml, require

CSV_COLUMNS = ("servo_amplitude_deg", "tailbeat_frequency_Hz", "tailbeat_amplitude_m", "forward_speed_m_s",
               "body_lengths_per_s", "strouhal", "mean_depth_change_m", "real_time_factor")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser, extra=" (a RayBot: raybot)")
    parser.add_argument("--frequencies", type=float, nargs="+", required=True, help="tail-beat frequencies, Hz")
    parser.add_argument("--amplitudes", type=float, nargs="+", default=None,
                        help="servo amplitudes, deg (default: the config's tail_drive.servo_amplitude_deg)")
    parser.add_argument("--duration", type=float, default=20.0, help="simulated time of each run, s (default 20)")
    parser.add_argument("--dt", type=float, default=None, help="time step, s (default: the config's)")
    add_out(parser, "runs/sweep", type=Path, default=Path("runs/sweep"))
    add_quiet(parser)


def sweep(config: dict, path, frequencies, amplitudes, duration: float, dt: float | None = None,
          progress: bool = True) -> list[dict]:
    """One free-swimming run per (servo amplitude deg, frequency Hz); returns one row dict per run
    (keys :data:`CSV_COLUMNS`)."""
    from tqdm import tqdm

    from sim.robots import build_robot, check_robot
    from sim.robots import raybot

    check_robot(config, path)
    kind = require(require(config, "robot", dict, path=path), "kind", str, path=path, prefix="robot")
    if kind != "raybot":
        raise ConfigError(path, "robot.kind", f"got {kind!r}, mms sweep supports \"raybot\"")
    if not (duration > 0.0 and math.isfinite(duration)):
        raise ConfigError(None, "--duration", f"got {duration!r}, expected a positive time (s)")
    for f in frequencies:
        if not (f > 0.0 and math.isfinite(f)):
            raise ConfigError(None, "--frequencies", f"got {f!r}, expected frequencies > 0 (Hz)")
    for a in amplitudes:
        if not (a >= 0.0 and math.isfinite(a)):
            raise ConfigError(None, "--amplitudes", f"got {a!r}, expected servo amplitudes >= 0 (deg)")
    rows = []
    base_dt = dt
    models = []
    for amplitude in amplitudes:
        for frequency in frequencies:
            table = copy.deepcopy(config)
            args = argparse.Namespace(tailbeat_frequency=frequency, tailbeat_amplitude=amplitude)
            table = raybot.apply_cli_overrides(table, args)
            table["robot"]["base"] = "floating"
            models.append((amplitude, frequency, build_robot(table, path)))
    total = sum(max(1, int(round(duration / (base_dt or m.metadata["parameters"]["dt"])))) for _, _, m in models)
    with tqdm(total=total, unit="step", disable=not progress, desc="sweep", mininterval=0.5) as bar:
        for amplitude, frequency, model in models:
            bar.set_postfix_str(f"A={amplitude:g} deg f={frequency:g} Hz")
            t, arrays, wall = raybot.swim(model, duration, dt=base_dt, progress=bar)
            figures = raybot.swim_figures(model, t, arrays)
            rows.append({"servo_amplitude_deg": amplitude, "tailbeat_frequency_Hz": frequency,
                         "tailbeat_amplitude_m": figures["tailbeat_amplitude_m"],
                         "forward_speed_m_s": figures["forward_speed_m_s"],
                         "body_lengths_per_s": figures["body_lengths_per_s"],
                         "strouhal": figures["strouhal"], "mean_depth_change_m": figures["mean_depth_change_m"],
                         "real_time_factor": float(t[-1] - t[0]) / wall if wall > 0 else float("inf")})
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
    """The paper's two validation curves (Fig. 10): frequency vs tail-tip amplitude, frequency vs speed."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for amplitude in sorted({r["servo_amplitude_deg"] for r in rows}):
        sel = sorted((r for r in rows if r["servo_amplitude_deg"] == amplitude),
                     key=lambda r: r["tailbeat_frequency_Hz"])
        f = [r["tailbeat_frequency_Hz"] for r in sel]
        left.plot(f, [100.0 * r["tailbeat_amplitude_m"] for r in sel], "o-", label=f"servo {amplitude:g} deg")
        right.plot(f, [r["forward_speed_m_s"] for r in sel], "o-", label=f"servo {amplitude:g} deg")
    left.set_xlabel("tail-beat frequency (Hz)")
    left.set_ylabel("tail-beat amplitude, tail tip (cm)")
    right.set_xlabel("tail-beat frequency (Hz)")
    right.set_ylabel("steady forward speed (m/s)")
    for ax in (left, right):
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("RayBot simulation (cf. the paper's Fig. 10)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    config = load_toml(args.config)
    amplitudes = args.amplitudes
    if amplitudes is None:
        drive = config.get("tail_drive", {})
        amplitudes = [require(drive, "servo_amplitude_deg", float, path=args.config, prefix="tail_drive")]
    if args.dt is not None and not (args.dt > 0.0 and math.isfinite(args.dt)):
        raise ConfigError(None, "--dt", f"got {args.dt!r}, expected a time step > 0 (s)")
    rows = sweep(config, args.config, args.frequencies, amplitudes, args.duration, args.dt,
                 progress=not args.quiet)
    csv_path = write_csv(rows, args.out / "sweep.csv")
    png_path = plot(rows, args.out / "sweep.png")
    for row in rows:
        print(f"servo {row['servo_amplitude_deg']:5.1f} deg  f {row['tailbeat_frequency_Hz']:4.2f} Hz  "
              f"tail-tip amplitude {row['tailbeat_amplitude_m']:.3f} m  speed {row['forward_speed_m_s']:.3f} m/s")
    print(f"wrote {csv_path}, {png_path}")
    return 0
