"""A 64-point flapper sweep (`mms sweep`'s study: 8 stroke frequencies x 8 amplitudes) serially and on a local
Dask cluster (sim/studies.py), and the time it would take on N workers.

Measured in the same run:
- serial: the study in this process (the baseline), and from it the cost of one task, c = serial wall / tasks;
- cluster: the same study on a ``LocalCluster`` of ``--workers`` single-threaded worker processes (default: one
  per core), its start-up timed apart; its speed-up over serial; its results checked equal to the serial ones;
- the scheduler's overhead per task, o: a study of no-op tasks on the same cluster, wall / tasks.
Projection: T(N) = c * tasks / N + o * tasks (each task's simulation spread over N workers, the scheduler's
per-task work not). Every run's kernels come from numba's on-disk cache (``python -m sim.warmup``), and each
worker runs one point before the clock starts, so no compile time is inside a figure.

    python benchmarks/bench_sweep.py [--periods 6] [--workers N]
"""
from __future__ import annotations

import argparse
import math
import os
import time

import numpy as np

from sim.cli_sweep import TIMING_COLUMN, sweep
from sim.config import load_toml, shipped_config
from sim.studies import open_evaluator

FREQUENCIES_HZ = tuple(np.linspace(20.0, 30.0, 8))
AMPLITUDES_DEG = tuple(np.linspace(50.0, 64.0, 8))
PROJECTED_WORKERS = (1, 2, 8, 32, 128)


def no_op(item):
    """A task with no work: what the scheduler costs per task."""
    return item


def physics(rows: list[dict]) -> list[dict]:
    """The rows without the column that measures the machine (the real-time factor)."""
    return [{key: value for key, value in row.items() if key != TIMING_COLUMN} for row in rows]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--periods", type=int, default=6, help="stroke periods simulated per point (default 6)")
    parser.add_argument("--workers", type=int, default=None, help="local cluster's worker processes "
                                                                   "(default: one per core)")
    args = parser.parse_args(argv)
    path = shipped_config("robot", "flapper")
    config = load_toml(path)
    config.setdefault("simulation", {})["periods"] = args.periods
    tasks = len(FREQUENCIES_HZ) * len(AMPLITUDES_DEG)
    print(f"flapper sweep: {len(FREQUENCIES_HZ)} frequencies x {len(AMPLITUDES_DEG)} amplitudes = {tasks} "
          f"simulations of {args.periods} stroke periods; {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    sweep(config, path, FREQUENCIES_HZ[:1], AMPLITUDES_DEG[:1], progress=False)   # kernels loaded before timing

    start = time.perf_counter()
    serial = sweep(config, path, FREQUENCIES_HZ, AMPLITUDES_DEG, progress=False)
    serial_s = time.perf_counter() - start
    per_task_s = serial_s / tasks

    start = time.perf_counter()
    with open_evaluator("local", args.workers) as evaluator:
        startup_s = time.perf_counter() - start
        workers = evaluator.workers
        sweep(config, path, FREQUENCIES_HZ[:workers], AMPLITUDES_DEG[:1], progress=False, evaluator=evaluator)
        start = time.perf_counter()
        clustered = sweep(config, path, FREQUENCIES_HZ, AMPLITUDES_DEG, progress=False, evaluator=evaluator)
        cluster_s = time.perf_counter() - start
        start = time.perf_counter()
        evaluator.map(no_op, list(range(tasks)))
        overhead_s = (time.perf_counter() - start) / tasks
    same = physics(clustered) == physics(serial)
    print(f"serial (this process):      {serial_s:7.2f} s wall, {per_task_s * 1e3:7.1f} ms per simulation")
    print(f"local cluster, {workers} workers:   {cluster_s:7.2f} s wall (start-up {startup_s:.2f} s apart): "
          f"{serial_s / cluster_s:.2f}x the serial run; results {'identical to' if same else 'DIFFERENT from'} "
          "the serial run's (real-time factor aside)")
    print(f"scheduler overhead:         {overhead_s * 1e3:7.2f} ms per task ({tasks} no-op tasks)")
    print("projected wall time of this study on N workers, T(N) = c tasks / N + o tasks:")
    for n in PROJECTED_WORKERS:
        projected = per_task_s * tasks / n + overhead_s * tasks
        print(f"  N = {n:4d}: {projected:7.2f} s ({serial_s / projected:6.1f}x serial)")
    efficiency = serial_s / cluster_s / workers
    print(f"measured parallel efficiency on {workers} workers: {efficiency:.2f} (projection at N = {workers}: "
          f"{serial_s / (per_task_s * tasks / workers + overhead_s * tasks) / workers:.2f})")
    return 0 if same and math.isfinite(cluster_s) else 1


if __name__ == "__main__":
    raise SystemExit(main())
