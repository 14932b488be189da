"""Real-time factor of a RayBot 6-DOF free swim (target >= 5) on the fused and the Python path, side by side.

    .venv/bin/python benchmarks/bench_raybot.py [--duration 10] [--repeats 3]

Runs configs/robots/raybot.toml (10 bodies, 9 hinges, floating base, RK4 at the config's dt, 2 Hz tail beat),
all measured in this run, the paths interleaved so that a change of machine load hits both alike:
1. the full model (hydrodynamic plug-ins of sim/hydro.py: buoyancy, added mass, drag, lift) on
   - the fused path (``Simulation`` default since RayBot qualifies, sim/fused.py: whole RK4 steps in one
     numba call), and
   - the Python-orchestrated path (``Simulation(..., fused=False)``: one hybrid_step per RK stage);
   each driven in one ``advance(duration)`` call and step by step with ``outputs()`` read after every step
   (as the server and the rig's plant do);
2. baseline: the same model without its force models (the hybrid algorithm and integrator alone), both paths;
and prints simulated time / wall time (and / process CPU time, which other processes disturb less) for each,
the fused / Python ratios, the machine's load average, and a step-size check (steady speed at dt and dt/2).
The best of ``--repeats`` runs is reported (the least disturbed).
"""
from __future__ import annotations

import argparse
import copy
import os
import time
from pathlib import Path

from sim.config import load_toml
from sim.robots import build_robot, raybot
from sim.simulation import Simulation

CONFIG = Path(__file__).resolve().parents[1] / "configs" / "robots" / "raybot.toml"
TARGET_REAL_TIME_FACTOR = 5.0
PATHS = ("fused", "python")
MODES = ("advance", "step")


def real_time_factors(model, duration: float, dt: float, path: str, mode: str) -> tuple[float, float]:
    """(simulated s / wall s, simulated s / process CPU s) of ``duration`` s on ``path`` ("fused" or
    "python"), in one ``advance`` call (mode "advance") or one ``step()`` + ``outputs()`` per step ("step")."""
    sim = Simulation(model, integrator="rk4", dt=dt, fused=path == "fused")
    assert sim.path == path, sim.fused_unsupported
    sim.step()                                   # compile / load the kernels outside the timing
    sim.outputs()
    n_steps = int(round(duration / dt))
    start, start_cpu = time.perf_counter(), time.process_time()
    if mode == "advance":
        sim.advance(n_steps * dt)
    else:
        for _ in range(n_steps):
            sim.step()
            sim.outputs()
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    simulated = n_steps * dt
    return simulated / wall, simulated / cpu


def best_of(repeats: int, cases: dict) -> dict:
    """The best (wall, CPU) real-time factors of each case over ``repeats`` rounds, the cases interleaved."""
    best = {name: (0.0, 0.0) for name in cases}
    for _ in range(repeats):
        for name, run in cases.items():
            wall, cpu = run()
            best[name] = (max(best[name][0], wall), max(best[name][1], cpu))
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=10.0, help="simulated time per run, s")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case (the best is reported)")
    args = parser.parse_args()
    table = copy.deepcopy(load_toml(CONFIG))
    table["tail_drive"]["frequency_Hz"] = 2.0
    model = build_robot(table, CONFIG)
    bare = model.replace(force_models=[])
    dt = model.metadata["parameters"]["dt"]
    cases = {}
    for label, m, modes in (("full", model, MODES), ("baseline", bare, ("advance",))):
        for mode in modes:
            for path in PATHS:
                cases[(label, mode, path)] = (lambda m=m, mode=mode, path=path:
                                              real_time_factors(m, args.duration, dt, path, mode))
    load_before = os.getloadavg()
    best = best_of(args.repeats, cases)
    load_after = os.getloadavg()
    print(f"RayBot 6-DOF swim, {model.n_bodies} bodies, rk4 dt = {dt:g} s, {args.duration:g} s simulated per run, "
          f"best of {args.repeats}")
    print(f"  load average (1, 5, 15 min) before {', '.join(f'{v:.2f}' for v in load_before)}, "
          f"after {', '.join(f'{v:.2f}' for v in load_after)} ({os.cpu_count()} CPUs)")
    print("  real-time factor (simulated s / wall s; / CPU s)   fused              python             "
          "fused / python (wall; CPU)")
    for (label, mode) in dict.fromkeys((label, mode) for label, mode, _ in cases):
        fused, python = best[(label, mode, "fused")], best[(label, mode, "python")]
        name = {"full": "full model (hydrodynamics)", "baseline": "baseline (no force models)"}[label]
        how = {"advance": "one advance() call", "step": "step() + outputs()"}[mode]
        print(f"  {name:27s} {how:20s}   {fused[0]:7.2f}; {fused[1]:7.2f}   {python[0]:7.2f}; {python[1]:7.2f}"
              f"   {fused[0] / python[0]:6.2f}; {fused[1] / python[1]:6.2f}")
    full = best[("full", "step", "fused")][0]
    print(f"  target >= {TARGET_REAL_TIME_FACTOR:g} (full model, fused, step by step): "
          f"{'met' if full >= TARGET_REAL_TIME_FACTOR else 'NOT met'}")
    for path in PATHS:
        ratio = best[("full", "advance", path)][0] / best[("baseline", "advance", path)][0]
        print(f"  {path} path: full / baseline (the hydrodynamics' cost) {ratio:6.3f}")
    speeds = []
    for step in (dt, dt / 2):
        t, arrays, _ = raybot.swim(model, 6.0, dt=step, record_every=10)
        speeds.append(raybot.swim_figures(model, t, arrays)["forward_speed_m_s"])
    print(f"  step check: speed over the last 3 beats {speeds[0]:.5f} m/s (dt) vs {speeds[1]:.5f} m/s (dt/2), "
          f"relative difference {abs(speeds[0] - speeds[1]) / max(abs(speeds[1]), 1e-12):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
