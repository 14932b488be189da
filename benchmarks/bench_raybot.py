"""Real-time factor of a RayBot 6-DOF free swim (target >= 5), against a baseline run side by side.

    .venv/bin/python benchmarks/bench_raybot.py [--duration 10]

Runs configs/robots/raybot.toml (10 bodies, 9 hinges, floating base, RK4 at the config's dt, 2 Hz tail beat):
1. the full model (hydrodynamic plug-ins of sim/hydro.py: buoyancy, added mass, drag, lift);
2. baseline: the same model without its force models (the hybrid algorithm and integrator alone, gravity only);
and prints simulated time / wall time for each and their ratio (the hydrodynamics' cost), plus a step-size
check (steady speed at dt and dt/2).
"""
from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

from sim.config import load_toml
from sim.robots import build_robot, raybot
from sim.simulation import Simulation

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "robots" / "raybot.toml"
TARGET_REAL_TIME_FACTOR = 5.0


def real_time_factor(model, duration: float, dt: float) -> float:
    sim = Simulation(model, integrator="rk4", dt=dt)
    sim.step()                                   # compile / warm the kernels outside the timing
    start = time.perf_counter()
    sim.advance(duration)
    return duration / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="simulated time per run, s")
    args = parser.parse_args()
    table = copy.deepcopy(load_toml(CONFIG))
    table["tail_drive"]["frequency_Hz"] = 2.0
    model = build_robot(table, CONFIG)
    dt = model.metadata["parameters"]["dt"]
    full = real_time_factor(model, args.duration, dt)
    bare = real_time_factor(model.replace(force_models=[]), args.duration, dt)
    print(f"RayBot 6-DOF swim, {model.n_bodies} bodies, rk4 dt = {dt:g} s, {args.duration:g} s simulated")
    print(f"  full model (hydrodynamics)   real-time factor {full:7.2f}   (target >= {TARGET_REAL_TIME_FACTOR:g}: "
          f"{'met' if full >= TARGET_REAL_TIME_FACTOR else 'NOT met'})")
    print(f"  baseline (no force models)   real-time factor {bare:7.2f}")
    print(f"  ratio full / baseline        {full / bare:7.3f}")
    speeds = []
    for step in (dt, dt / 2):
        t, arrays, _ = raybot.swim(model, 6.0, dt=step, record_every=10)
        speeds.append(raybot.swim_figures(model, t, arrays)["steady_speed_m_s"])
    print(f"  step check: speed over the last 3 beats {speeds[0]:.5f} m/s (dt) vs {speeds[1]:.5f} m/s (dt/2), "
          f"relative difference {abs(speeds[0] - speeds[1]) / max(abs(speeds[1]), 1e-12):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
