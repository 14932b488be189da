"""Benchmark of the live Cosserat path (sim/cosserat/live.py): wall time of one served publish period against the
period itself, per robot, at the robot file's [live] settings.

For each of the four robots the served simulation advances --seconds of simulated time one publish period at a time
(what `mms serve` does: RK4 head steps of [live] dt, then one kinematic instant and the joint quadrature). The
baseline, measured in the same run, is the period (1 / [live] rate_hz): printed are the mean and the 99th percentile
of the wall time per period, their ratio to the period (below 1: keeps real time with that margin) and the real-time
factor. The same steps at the `mms sim` resolution ([rod] n_X, [simulation] dt) are timed too, as the ratio
served / offline per simulated second. Say the load (printed) next to the figures.

    .venv/bin/python benchmarks/bench_cosserat_live.py [--seconds 3]
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config import load_toml, shipped_config  # noqa: E402
from sim.robots.cosserat import build_live  # noqa: E402

ROBOTS = ("earthworm", "inchworm", "snake2d", "snake3d")


def period_times(config: dict, name: str, seconds: float, at_sim_resolution: bool) -> tuple[np.ndarray, float]:
    """Wall time (s) of each publish period over ``seconds`` of simulated time, and the period (s)."""
    if at_sim_resolution:
        config = {**config, "live": {**config["live"], "n_X": config["rod"].get("n_X", 200),
                                     "dt": config["simulation"]["dt"]}}
    model = build_live(config, name)
    simulation = model.live_simulation(None, None)
    period = 1.0 / model.settings.rate_hz
    times = []
    for k in range(1, int(round(seconds / period)) + 1):
        start = time.perf_counter()
        simulation.advance_to(k * period)
        times.append(time.perf_counter() - start)
    return np.array(times), period


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="simulated time per robot, s (default: 3)")
    args = parser.parse_args()
    print(f"load (1, 5, 15 min): {Path('/proc/loadavg').read_text().split()[:3]}")
    print(f"{'robot':10s} {'period':>8s} {'mean':>8s} {'p99':>8s} {'mean/period':>12s} {'p99/period':>11s} "
          f"{'rtf':>6s} {'offline/served':>15s}")
    for name in ROBOTS:
        config = load_toml(shipped_config("robot", name))
        served, period = period_times(config, name, args.seconds, False)
        offline, _ = period_times(config, name, min(args.seconds, 0.5), True)
        ratio = offline.mean() / served.mean()
        print(f"{name:10s} {period * 1e3:6.1f}ms {served.mean() * 1e3:6.2f}ms {np.percentile(served, 99) * 1e3:6.2f}ms "
              f"{served.mean() / period:12.3f} {np.percentile(served, 99) / period:11.3f} "
              f"{period / served.mean():6.2f} {ratio:15.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
