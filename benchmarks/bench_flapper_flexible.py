"""Benchmark of the flapper with modal wings (configs/robots/flapper_flexible.toml) against the rigid-blade flapper
(configs/robots/flapper.toml), same run, same machine.

Prints, for tethered (fixed base) and free flight (floating base), the real-time factor (simulated s per wall s, and
per process CPU s, which other processes on a loaded machine disturb less) of `mms sim`'s loop (one
``Simulation.record`` call over the run, compile excluded) for
- the rigid-blade flapper, its config's default (the fused ROSW stepper at 0.4 ms): the baseline;
- the modal flapper on the Python-orchestrated path, RK4 at 0.1 ms (``fused=False``; its former default);
- the modal flapper on the fused path, RK4 at 0.1 ms and ROSW at 0.4 ms (its config's default: the modal
  coordinates in the Jacobian, docs/flexible.md);
each as the best of interleaved rounds (a load change hits every candidate alike), and its ratio to the baseline.

Run: .venv/bin/python benchmarks/bench_flapper_flexible.py [--periods 6] [--rounds 3]
"""
from __future__ import annotations

import argparse
import copy
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_flapper import simulation_run  # noqa: E402
from sim.config import load_toml  # noqa: E402
from sim.robots import build_robot  # noqa: E402

CONFIGS = ROOT / "configs" / "robots"
#: (label, config, integrator, dt s, fused): the baseline first.
CANDIDATES = (
    ("rigid blades, fused rosw 400 us (baseline)", "flapper.toml", "rosw", 4e-4, True),
    ("modal wings, python path rk4 100 us", "flapper_flexible.toml", "rk4", 1e-4, False),
    ("modal wings, fused rk4 100 us", "flapper_flexible.toml", "rk4", 1e-4, True),
    ("modal wings, fused rosw 400 us (default)", "flapper_flexible.toml", "rosw", 4e-4, True),
)
#: The Python path runs this fraction of the duration (its real-time factor does not depend on the length).
PYTHON_FRACTION = 1.0 / 6.0


def model_of(config_name: str, base: str):
    path = CONFIGS / config_name
    config = copy.deepcopy(load_toml(path))
    config["robot"]["base"] = base
    return build_robot(config, path)


def table(base: str, periods: float, rounds: int) -> None:
    models = {name: model_of(name, base) for name in {c[1] for c in CANDIDATES}}
    period = models["flapper.toml"].metadata["period_s"]
    best = {label: (math.inf, math.inf, 0.0) for label, *_ in CANDIDATES}
    for _ in range(rounds):
        for label, name, integrator, dt, fused in CANDIDATES:
            duration = periods * period * (1.0 if fused else PYTHON_FRACTION)
            *_, wall, _, cpu = simulation_run(models[name], integrator, dt, duration, fused=fused, recorded=True)
            old = best[label]
            best[label] = (min(old[0], wall), min(old[1], cpu), duration)
    print(f"\n=== {base} base: {periods:g} periods of {period * 1e3:g} ms (python path: {PYTHON_FRACTION:.3g} of it)"
          f", best of {rounds} interleaved rounds ===")
    print(f"{'candidate':46s} {'RTF':>7s} {'RTFcpu':>7s} {'/ baseline':>10s} {'(cpu)':>7s}")
    base_wall, base_cpu, base_duration = best[CANDIDATES[0][0]]
    for label, *_ in CANDIDATES:
        wall, cpu, duration = best[label]
        rtf, rtf_cpu = duration / wall, duration / cpu
        print(f"{label:46s} {rtf:7.3f} {rtf_cpu:7.3f} {rtf / (base_duration / base_wall):10.3f} "
              f"{rtf_cpu / (base_duration / base_cpu):7.3f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--periods", type=float, default=6.0, help="stroke periods per timed run (default 6)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds (default 3)")
    args = parser.parse_args(argv)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f} at start (compare ratios and "
          "CPU-time figures on a busy machine)")
    for base in ("fixed", "floating"):
        table(base, args.periods, args.rounds)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
