"""What every process that runs a simulation against the wall clock does before its first output.

``mms serve`` and the emulator's physics plant both pace a :class:`sim.simulation.Simulation` to real time. The
first integration compiles the numba kernels (or loads them from numba's on-disk cache): done while a process is
already publishing, that pause is a stall in its output that a subscriber takes as data. Both processes therefore
warm up first, before they open their outputs.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from sim.processes import freeze_startup_heap

#: simulated time integrated after the first (compiling) call to measure the speed before anything is published, s
WARMUP_MEASURE_S = 0.05


def warm_up(simulation, period_s: float, log: Callable[[str], None]) -> dict[str, float]:
    """Integrate once by each path (numba compiles its kernels, or loads them from its on-disk cache, on the first
    call), then measure the speed over WARMUP_MEASURE_S of simulated time, one dense-output call per period, then
    reset: nothing is published before the process
    can tell whether it keeps real time, and no compile pause ever shows up as a stall in the stream. Last, the heap
    is frozen out of the garbage collector (sim.processes.freeze_startup_heap): no collection pause either.
    Returns ``{"first_call_s", "rtf", "rtf_cpu"}`` (wall s of the first call; simulated over wall time
    afterwards, and over the thread's CPU time: the model's own speed, which a busy machine does not lower; the
    real-time class is decided on it, sim.processes.realtime_refusal)."""
    simulation.reset()
    started = time.perf_counter()
    simulation.advance(period_s)                 # the plant's path: whole steps
    simulation.advance_to(2 * period_s)          # the server's path: steps and dense output
    first_call_s = time.perf_counter() - started
    t_before = simulation.t
    periods = max(1, math.ceil(WARMUP_MEASURE_S / period_s))
    started, cpu_started = time.perf_counter(), time.thread_time()
    for k in range(periods):
        simulation.advance_to(t_before + (k + 1) * period_s)
    elapsed, cpu = time.perf_counter() - started, time.thread_time() - cpu_started
    rtf = periods * period_s / elapsed if elapsed > 0 else math.inf
    rtf_cpu = periods * period_s / cpu if cpu > 0 else math.inf
    simulation.reset()
    freeze_startup_heap()
    log(f"warm-up: first step {first_call_s:.2f} s (kernels compiled or loaded from the cache), then "
        f"{rtf:.2f}x real time ({rtf_cpu:.2f}x per CPU second)"
        + ("" if rtf >= 1.0 else ": this machine cannot keep real time with this model; expect deadline misses"))
    return {"first_call_s": first_call_s, "rtf": rtf, "rtf_cpu": rtf_cpu}
