"""Study (not a test): does the held dead fish (configs/robots/dead_fish.toml) lock in to the Karman street's shedding
frequency? docs/swimming.md, "The dead fish".

For each time step, one run of ``--duration`` s (fused RK4); after ``--transient`` s: the trailing edge's dominant
lateral frequency (sim.swimming.dominant_frequency, sampled every 1 ms; also over each half of the window), its
peak-to-peak excursion, and the mean upstream pull on the support taken from EVERY step's base wrench (and, for
comparison, from the 1 ms samples). Prints one JSON line per step and the real-time factor.

Run: .venv/bin/python benchmarks/study_dead_fish_lock_in.py [--dt 1e-3 5e-4 2.5e-4] [--duration 12] [--transient 4]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.robots import load_robot  # noqa: E402
from sim.simulation import Simulation  # noqa: E402
from sim.swimming import dominant_frequency, tail_tip_positions  # noqa: E402

CONFIG = ROOT / "configs" / "robots" / "dead_fish.toml"
#: Sampling period (s) of the trailing edge's excursion (the spectrum's input).
SAMPLE_S = 1e-3
#: Records per compiled call (memory: every step's outputs of one call are held).
CHUNK_SAMPLES = 500
#: Zero-padding factor of the spectrum (a finer grid for the peak).
PADDING = 8


def run(model, dt: float, duration: float, transient: float) -> dict:
    sim = Simulation(model, "rk4", dt)
    sim.record(1, 1)                         # compile / load the kernels outside the timing
    sim.reset()
    every = max(1, int(round(SAMPLE_S / dt)))
    n_steps = int(round(duration / dt))
    pull_sum, pull_count = 0.0, 0
    times, q, pos, quat, fx = [], [], [], [], []
    start = time.perf_counter()
    done = 0
    while done < n_steps:
        count = min(every * CHUNK_SAMPLES, n_steps - done)
        t, out = sim.record(count, 1)
        late = t > transient
        pull_sum += float(out["base_wrench"][late, 0].sum())
        pull_count += int(late.sum())
        rows = slice(every - 1, None, every)
        times.append(t[rows])
        for store, key in ((q, "q"), (pos, "base_pos"), (quat, "base_quat")):
            store.append(out[key][rows].copy())
        fx.append(out["base_wrench"][rows, 0].copy())
        done += count
    wall = time.perf_counter() - start
    t = np.concatenate(times)
    tip = tail_tip_positions(model, np.concatenate(pos), np.concatenate(quat), np.concatenate(q))
    window = t > transient
    tw, lateral = t[window], tip[window, 1]
    middle = 0.5 * (tw[0] + tw[-1])
    upstream = -math.copysign(1.0, model.metadata["parameters"]["stream"])     # as sim.robots.fish.stream_figures
    return {"dt_s": dt, "duration_s": duration, "real_time_factor": duration / wall,
            "tailbeat_Hz": dominant_frequency(tw, lateral, PADDING),
            "tailbeat_first_half_Hz": dominant_frequency(tw[tw < middle], lateral[tw < middle], PADDING),
            "tailbeat_second_half_Hz": dominant_frequency(tw[tw >= middle], lateral[tw >= middle], PADDING),
            "tail_peak_to_peak_m": float(lateral.max() - lateral.min()),
            "upstream_pull_every_step_N": -upstream * pull_sum / pull_count,
            "upstream_pull_1ms_samples_N": -upstream * float(np.concatenate(fx)[window].mean())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dt", type=float, nargs="+", default=[1e-3, 5e-4, 2.5e-4], help="time steps (s)")
    parser.add_argument("--duration", type=float, default=12.0, help="simulated time per run (s)")
    parser.add_argument("--transient", type=float, default=4.0, help="time left out before the window (s)")
    args = parser.parse_args(argv)
    model = load_robot(CONFIG)
    print("street shedding frequency 1.2 Hz (f_s = 0.2 U / D)")
    for dt in args.dt:
        print(json.dumps(run(model, dt, args.duration, args.transient)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
