"""Solve time of the periodic-orbit solver (sim/periodic.py, docs/periodic.md) on the flapper.

Two problems: the tethered flapper's orbit (passive joints only) and the free flapper's hover (the state plus the
stroke's offset and amplitude), both with the Rosenbrock integrator at 0.4 ms keeping its Jacobian from rest.
Baseline measured in the same run: one period of the same simulation (a period map), so the printed ratio says
how many period maps a solve costs in wall time (the solver's own arithmetic is negligible beside them). The
kernels are compiled (or loaded from the cache) before any clock starts.

    python benchmarks/bench_periodic.py
"""
from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np

from sim.config import load_toml
from sim.periodic import periodic_orbit, trimmed_orbit
from sim.robots import build_robot
from sim.simulation import Simulation

FLAPPER = Path(__file__).resolve().parents[1] / "configs" / "robots" / "flapper.toml"
INTEGRATOR, DT, JACOBIAN_EVERY = "rosw", 4e-4, 0
#: period maps timed for the baseline
BASELINE_MAPS = 20


def period_map_time(sim: Simulation, period: float) -> float:
    sim.reset()
    sim.advance(period)                      # compile or load outside the clock
    start = time.perf_counter()
    for _ in range(BASELINE_MAPS):
        sim.reset()
        sim.advance(period)
    return (time.perf_counter() - start) / BASELINE_MAPS


def main() -> int:
    config = load_toml(FLAPPER)
    period = 1.0 / config["stroke"]["frequency_hz"]
    tethered = Simulation(build_robot(config, FLAPPER).replace(base_mode="fixed"), INTEGRATOR, DT,
                          jacobian_every=JACOBIAN_EVERY)
    free = Simulation(build_robot(config, FLAPPER), INTEGRATOR, DT, jacobian_every=JACOBIAN_EVERY)
    rows = []
    baseline = period_map_time(tethered, period)
    start = time.perf_counter()
    orbit = periodic_orbit(tethered, period)
    rows.append(("tethered orbit", time.perf_counter() - start, orbit.shooting.evaluations, baseline,
                 orbit.shooting.residual))

    def simulation_for(values):
        changed = copy.deepcopy(config)
        changed["stroke"]["offset_deg"], changed["stroke"]["amplitude_deg"] = map(float, values)
        return Simulation(build_robot(changed, FLAPPER), INTEGRATOR, DT, jacobian_every=JACOBIAN_EVERY)

    baseline = period_map_time(free, period)
    start = time.perf_counter()
    hover = trimmed_orbit(simulation_for, ["offset_deg", "amplitude_deg"], np.array([-20.0, 41.3]), period)
    rows.append(("free hover (trimmed)", time.perf_counter() - start, hover.solve.evaluations, baseline,
                 hover.solve.residual))
    print(f"{'problem':22s} {'solve (s)':>10s} {'period maps':>12s} {'one map (ms)':>13s} "
          f"{'solve / maps':>13s} {'residual':>10s}")
    for name, wall, maps, one, residual in rows:
        print(f"{name:22s} {wall:10.2f} {maps:12d} {1e3 * one:13.2f} {wall / (maps * one):13.2f} {residual:10.1e}")
    print(f"hover: {', '.join(f'{k} = {v:.3f} deg' for k, v in hover.parameters.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
