"""Study (not a test): why the held dead fish's figures (configs/robots/dead_fish.toml) did not converge in the time
step, and its converged statistics. docs/swimming.md, "The dead fish"; the evidence is written down there.

Parts (``--part``, default all):
- ``linear``: eigenvalues of the passive joints' linearised dynamics about the straight fish in a uniform stream
  (no vortices), at zero tissue viscosity and at the config's: the slowest decay, the least damped mode, and the
  explicit RK4 step's stability limit 2.8 / max |lambda| (RK4 reaches 2.83 on the imaginary axis).
- ``street``: the largest change of the street's lateral velocity over 1 um steps along x (a cut-off sum jumps).
- ``order``: the trailing edge at t = 0.5, 1, 2, 3 s at dt = 1, 0.5, 0.25 ms against 0.125 ms (fused RK4): the
  error ratios per halving (16 for a smooth right-hand side).
- ``lyapunov``: the same run from a joint angle changed by 1e-9 rad: the distance's growth rate (a positive rate
  that does not depend on dt is chaos: trajectories cannot converge, only statistics).
- ``statistics``: ``--duration`` s runs at each ``--dt`` (RK4, and ROSW at the first dt): the summary's stream
  figures (sim.robots.fish.stream_figures, 1 ms samples) and the spread of the swing frequency and shedding
  power fraction over ``--batch`` s batches. One JSON line per run, with the real-time factor and the load.

Run: .venv/bin/python benchmarks/study_dead_fish_lock_in.py [--part statistics] [--dt 1e-3 5e-4] [--duration 60]
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config import load_toml  # noqa: E402
from sim.lighthill import karman_flow, shedding_frequency  # noqa: E402
from sim.robots import build_robot  # noqa: E402
from sim.robots.fish import (SHEDDING_BAND, SPECTRUM_SEGMENT_PERIODS, SWING_HYSTERESIS, stream_figures,  # noqa: E402
                             stream_window)
from sim.simulation import Simulation  # noqa: E402
from sim.swimming import band_power_fraction, swing_frequency, tail_tip_positions  # noqa: E402

CONFIG = ROOT / "configs" / "robots" / "dead_fish.toml"
#: Sampling period (s) of the recorded outputs.
SAMPLE_S = 1e-3
#: Joint-angle step (rad) of the central differences of the linearisation.
JACOBIAN_STEP = 1e-6
#: RK4's stability boundary on the imaginary axis, |lambda dt| (2 sqrt 2).
RK4_IMAGINARY_LIMIT = 2.0 * math.sqrt(2.0)
#: The perturbation (rad, joint 10) of the twin run and the distances (m) between which its growth is fitted.
TWIN_PERTURBATION = 1e-9
GROWTH_FIT_M = (1e-7, 1e-3)


def fish_model(**changes):
    """The dead fish of the config with ``section.key = value`` changes (``{"flow": {"kind": "uniform"}}``)."""
    table = copy.deepcopy(load_toml(CONFIG))
    for section, values in changes.items():
        table[section].update(values)
    return build_robot(table, CONFIG)


def linearisation(model) -> np.ndarray:
    """Eigenvalues (2 n,) 1/s of d(q, qd)_dot / d(q, qd) at the rest state, t = 0 (central differences)."""
    sim = Simulation(model, "rk4", SAMPLE_S, fused=False)
    y0, n = sim.y.copy(), sim.passive_index.size
    rows = np.r_[13:13 + n, sim._velocities:sim._velocities + n]
    J = np.empty((2 * n, 2 * n))
    for column, i in enumerate(rows):
        step = np.zeros_like(y0)
        step[i] = JACOBIAN_STEP
        J[:, column] = (sim._evaluate(0.0, y0 + step)[rows] - sim._evaluate(0.0, y0 - step)[rows]) / (2 * JACOBIAN_STEP)
    return np.linalg.eigvals(J)


def part_linear(config_viscosity: float) -> None:
    for viscosity in (0.0, config_viscosity):
        lam = linearisation(fish_model(flow={"kind": "uniform"}, muscle={"viscosity_Pa_s": viscosity}))
        oscillating = lam[lam.imag > 0]
        zeta = -oscillating.real / np.abs(oscillating)
        least = oscillating[np.argmin(zeta)]
        print(json.dumps({"part": "linear", "viscosity_Pa_s": viscosity, "slowest_decay_1_s": float(-lam.real.max()),
                          "least_damped_Hz": float(least.imag / (2 * math.pi)), "least_damping_ratio": float(zeta.min()),
                          "max_abs_lambda_1_s": float(np.abs(lam).max()),
                          "rk4_dt_limit_s": float(RK4_IMAGINARY_LIMIT / np.abs(lam).max()),
                          "lowest_modes_Hz_zeta": [(round(float(l.imag / (2 * math.pi)), 3), round(float(z), 3))
                                                   for l, z in sorted(zip(oscillating, zeta), key=lambda p: p[0].imag)[:4]]}))


def part_street(model) -> None:
    flow = model.metadata["flow"]
    v, dvdt, grad = np.zeros(3), np.zeros(3), np.zeros((3, 3))
    xs = np.arange(-0.3, 0.0, 1e-6)
    lateral = np.empty(xs.size)
    for i, x in enumerate(xs):
        karman_flow(x, 0.01, 0.0, flow, v, dvdt, grad)
        lateral[i] = v[1]
    steps = np.abs(np.diff(lateral))
    print(json.dumps({"part": "street", "y_m": 0.01, "largest_step_m_s": float(steps.max()),
                      "median_step_m_s": float(np.median(steps)), "largest_lateral_m_s": float(np.abs(lateral).max())}))


def run(model, integrator: str, dt: float, duration: float, q=None):
    """(t (T,) s, outputs every SAMPLE_S (every step for a longer dt), wall s) of one run from rest (or joint
    angles q (n,))."""
    sim = Simulation(model, integrator, dt)
    sim.record(1, 1)                          # compile / load the kernels outside the timing
    sim.reset(q=q)
    every = max(1, int(round(SAMPLE_S / dt)))
    start = time.perf_counter()
    t, out = sim.record(int(round(duration / (every * dt))), every)
    return t, out, time.perf_counter() - start


def trailing_edge(model, out) -> np.ndarray:
    return tail_tip_positions(model, out["base_pos"], out["base_quat"], out["q"])[:, 1]


def part_order(model) -> None:
    times = (0.5, 1.0, 2.0, 3.0)
    tips = {}
    for dt in (1e-3, 5e-4, 2.5e-4, 1.25e-4):
        t, out, _ = run(model, "rk4", dt, max(times))
        tips[dt] = trailing_edge(model, out)[[int(np.argmin(np.abs(t - s))) for s in times]]
    errors = {dt: np.abs(tips[dt] - tips[1.25e-4]) for dt in (1e-3, 5e-4, 2.5e-4)}
    print(json.dumps({"part": "order", "t_s": times, "error_m": {f"{dt:g}": e.tolist() for dt, e in errors.items()},
                      "ratio_1ms_to_0.5ms": (errors[1e-3] / errors[5e-4]).tolist(),
                      "ratio_0.5ms_to_0.25ms": (errors[5e-4] / errors[2.5e-4]).tolist()}))


def part_lyapunov(model, dt: float, duration: float) -> None:
    t, out, _ = run(model, "rk4", dt, duration)
    q = model.q_rest.copy()
    q[9] += TWIN_PERTURBATION
    _, twin, _ = run(model, "rk4", dt, duration, q=q)
    distance = np.abs(trailing_edge(model, out) - trailing_edge(model, twin))
    first = np.argmax(distance > GROWTH_FIT_M[0])
    last = np.argmax(distance > GROWTH_FIT_M[1])
    rate = math.log(distance[last] / distance[first]) / (t[last] - t[first]) if last > first else math.nan
    print(json.dumps({"part": "lyapunov", "dt_s": dt, "perturbation_rad": TWIN_PERTURBATION,
                      "growth_rate_1_s": rate, "fit_from_s": float(t[first]), "fit_to_s": float(t[last]),
                      "distance_at_s": {f"{s:g}": float(distance[int(np.argmin(np.abs(t - s)))])
                                        for s in (1, 2, 4, 6, 8) if s < duration}}))


def part_statistics(model, integrator: str, dt: float, duration: float, batch: float) -> None:
    t, out, wall = run(model, integrator, dt, duration)
    figures = stream_figures(model, t, out)
    window = stream_window(t, model.metadata["parameters"]["transient"])
    tw, lateral = t[window], trailing_edge(model, out)[window]
    f_s = shedding_frequency(model.metadata["flow"])
    swings, fractions = [], []
    for part in np.array_split(np.arange(tw.size), int((tw[-1] - tw[0]) // batch)):
        swings.append(swing_frequency(tw[part], lateral[part], SWING_HYSTERESIS))
        fractions.append(band_power_fraction(tw[part], lateral[part], (1 - SHEDDING_BAND) * f_s,
                                             (1 + SHEDDING_BAND) * f_s, SPECTRUM_SEGMENT_PERIODS / f_s))
    print(json.dumps({"part": "statistics", "integrator": integrator, "dt_s": dt, "duration_s": duration,
                      **{k: v for k, v in figures.items()},
                      "batch_s": batch, "swing_Hz_batch_mean_std": [float(np.mean(swings)), float(np.std(swings, ddof=1))],
                      "shedding_fraction_batch_mean_std": [float(np.mean(fractions)), float(np.std(fractions, ddof=1))],
                      "real_time_factor": duration / wall, "loadavg": os.getloadavg()[0]}), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", nargs="+", default=["linear", "street", "order", "lyapunov", "statistics"],
                        choices=["linear", "street", "order", "lyapunov", "statistics"], help="what to run")
    parser.add_argument("--dt", type=float, nargs="+", default=[1e-3, 5e-4], help="time steps of the statistics (s)")
    parser.add_argument("--duration", type=float, default=60.0, help="simulated time per statistics run (s)")
    parser.add_argument("--batch", type=float, default=10.0, help="batch length of the spreads (s)")
    args = parser.parse_args(argv)
    model = fish_model()
    viscosity = model.metadata["parameters"]["viscosity"]
    if "linear" in args.part:
        part_linear(viscosity)
    if "street" in args.part:
        part_street(model)
    if "order" in args.part:
        part_order(model)
    if "lyapunov" in args.part:
        for dt in (1e-3, 5e-4):
            part_lyapunov(model, dt, 12.0)
    if "statistics" in args.part:
        for dt in args.dt:
            part_statistics(model, "rk4", dt, args.duration, args.batch)
        part_statistics(model, "rosw", args.dt[0], args.duration, args.batch)
    return 0


if __name__ == "__main__":
    sys.exit(main())
