"""Benchmark of the Table I flapper (configs/robots/flapper.toml) in free flight.

Prints, all measured in this run on one core, for free flight (floating base) and tethered (fixed base):
1. the accuracy reference: sim.simulation.Simulation, RK4 at dt = 1e-4 s over 6 stroke periods;
2. candidate paths/integrators/steps of the product class Simulation, each with its real-time factor
   (simulated s per wall s, and per process CPU s, which other processes on a loaded machine disturb less)
   and the largest deviation of every strain and of both stroke torques from the reference over the last
   period (normalised by that signal's peak; a candidate is accepted below 0.5 %):
   - the Python-orchestrated path (``Simulation(..., fused=False)``: one hybrid_step per RK stage, force
     models as Python calls) -- the baseline;
   - the fused path (the default whenever the model qualifies, sim/fused.py: whole RK4 steps in one numba
     call), driven step by step (``step()`` + ``outputs()``), in one ``advance(duration)`` call (as the server
     and the rig's plant step, one call per period or slice) and in one ``record()`` call (`mms sim`'s loop);
   - the same for the linearly implicit Rosenbrock-W integrator "rosw" at 0.4 ms (its step set by accuracy:
     the stiff eigenvalue that bounds RK4 does not bound it);
3. the hybrid evaluation time (per call) next to Pinocchio's ABA on the same tree (a pin.Model built from our
   Model's arrays, free-flyer root), as ratios;
4. a cProfile of the fused step() loop: what is left in Python.

Run: .venv/bin/python benchmarks/bench_flapper.py [--periods 6] [--config configs/robots/flapper.toml]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import math
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np
from scipy.interpolate import CubicSpline

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.dynamics import hybrid_step  # noqa: E402
from sim.model import Data  # noqa: E402
from sim.robots import load_robot  # noqa: E402
from sim.robots.flapper import stable_dt  # noqa: E402
from sim.simulation import Simulation  # noqa: E402
from sim.testing import to_pinocchio  # noqa: E402

#: A candidate is accepted when every strain and stroke torque stays within this fraction of its peak.
ACCURACY = 0.005
REFERENCE_DT = 1e-4
#: Step of the Rosenbrock-W candidate: 1/100 of the stroke period (its accuracy, not its stability, sets it).
ROSW_DT = 4e-4
#: Timed runs per candidate; the best (least disturbed by other processes) is reported.
REPEATS = 3


# ------------------------------------------------------------------------------------------ helpers
def simulation_run(model, integrator, dt, duration, record=True, fused=True, one_call=False, recorded=False, **kw):
    """Simulation run: (times (T,), q (T, n), tau (T, n), wall s, evaluations, CPU s of the stepping).

    ``record``: outputs() read before every step; ``one_call``: the whole duration in one ``advance`` call
    (nothing recorded, as the server and the rig's plant step: one call per publish period / slice);
    ``recorded``: one ``record(n, 1)`` call, the outputs of every step (what `mms sim` does); otherwise one
    ``step()`` call per step."""
    sim = Simulation(model, integrator=integrator, dt=dt, fused=fused, **kw)
    sim.reset()
    sim.record(1, 1)                             # compile / load the kernels outside the timing
    sim.reset()
    n_steps = int(round(duration / dt))
    times, qs, taus = [], [], []
    evaluations = sim.evaluations
    if recorded:
        first = sim.outputs()
        start, start_cpu = time.perf_counter(), time.process_time()
        t_rec, out = sim.record(n_steps, 1)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        return (np.concatenate([[0.0], t_rec]), np.vstack([first["q"], out["q"]]),
                np.vstack([first["tau"], out["tau"]]), wall, sim.evaluations - evaluations, cpu)
    if one_call:
        start, start_cpu = time.perf_counter(), time.process_time()
        sim.advance(n_steps * dt)
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        return None, None, None, wall, sim.evaluations - evaluations, cpu
    start, start_cpu = time.perf_counter(), time.process_time()
    for _ in range(n_steps):
        if record:
            out = sim.outputs()
            times.append(sim.t)
            qs.append(out["q"])
            taus.append(out["tau"])
        sim.step()
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    return np.array(times), np.array(qs), np.array(taus), wall, sim.evaluations - evaluations, cpu


def deviation(ref, cand, model, period):
    """Largest deviation over the last period of each strain and stroke torque, / that signal's peak."""
    t_ref, q_ref, tau_ref = ref
    t_c, q_c, tau_c = cand
    end = min(t_ref[-1], t_c[-1])
    window = (t_ref >= end - period - 1e-12) & (t_ref <= end + 1e-12)
    passive = np.flatnonzero(~model.actuated)
    strokes = model.metadata["stroke_joints"]
    worst, where = 0.0, ""
    for k in passive:
        spline = CubicSpline(t_c, q_c[:, k])
        peak = np.abs(q_ref[window, k]).max()
        err = np.abs(spline(t_ref[window]) - q_ref[window, k]).max() / peak
        if err > worst:
            worst, where = err, model.joint_names[k]
    for k in strokes:
        spline = CubicSpline(t_c, tau_c[:, k])
        peak = np.abs(tau_ref[window, k]).max()
        err = np.abs(spline(t_ref[window]) - tau_ref[window, k]).max() / peak
        if err > worst:
            worst, where = err, f"torque {model.joint_names[k]}"
    return worst, where



def per_call(fn, repeat=5000, rounds=REPEATS):
    """Best-of-rounds mean wall time (s) of one call of fn."""
    fn()
    best = math.inf
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - start) / repeat)
    return best


def flight_table(model, duration, period, label):
    """Sections 1-2 for one base mode; returns the rows (label, rtf wall, rtf cpu, evals, err, where)."""
    print(f"\n=== {label}: {model}, {duration:g} s simulated ===")
    t_r, q_r, tau_r, _, _, _ = simulation_run(model, "rk4", REFERENCE_DT, duration)
    ref = (t_r, q_r, tau_r)
    advised = stable_dt(model, "rk4")
    print(f"advised RK4 step (stiffest mode, sim.robots.flapper.stable_dt): {advised * 1e6:.1f} us")
    candidates = [
        ("python path rk4 dt=100us, step()+outputs()", dict(fused=False), "rk4", REFERENCE_DT, {}),
        ("python path rk45 rtol=1e-4 atol=1e-7, out 400us", dict(fused=False), "rk45", 4e-4,
         dict(rtol=1e-4, atol=1e-7)),
        ("fused rk4 dt=100us, step()+outputs()", {}, "rk4", REFERENCE_DT, {}),
        ("fused rk4 dt=100us, one advance() call", dict(one_call=True), "rk4", REFERENCE_DT, {}),
        (f"fused rk4 dt={advised * 1e6:.1f}us (advised), step()+outputs()", {}, "rk4", advised, {}),
        (f"fused rk4 dt={advised * 1e6:.1f}us (advised), one advance()", dict(one_call=True), "rk4", advised, {}),
        (f"fused rk4 dt={advised * 1e6:.1f}us (advised), record() (mms sim)", dict(recorded=True), "rk4", advised,
         {}),
        (f"fused rosw dt={ROSW_DT * 1e6:.0f}us, step()+outputs()", {}, "rosw", ROSW_DT, {}),
        (f"fused rosw dt={ROSW_DT * 1e6:.0f}us, one advance()", dict(one_call=True), "rosw", ROSW_DT, {}),
        (f"fused rosw dt={ROSW_DT * 1e6:.0f}us, record() (mms sim)", dict(recorded=True), "rosw", ROSW_DT, {}),
    ]
    rows = []
    for name, mode, integrator, dt, kw in candidates:
        one_call = mode.get("one_call", False)
        recorded = mode.get("recorded", False)
        fused = mode.get("fused", True)
        if one_call:
            err, where = None, "(same numbers as step())"
        else:
            t_c, q_c, tau_c, _, _, _ = simulation_run(model, integrator, dt, duration, fused=fused,
                                                      recorded=recorded, **kw)
            err, where = deviation(ref, (t_c, q_c, tau_c), model, period)
        timed = [simulation_run(model, integrator, dt, duration, fused=fused, one_call=one_call, recorded=recorded,
                                **kw) for _ in range(REPEATS)]
        wall, evals, cpu = min(run[3] for run in timed), timed[0][4], min(run[5] for run in timed)
        rows.append((name, duration / wall, duration / cpu, evals, err, where))
    print(f"{'path / integrator / step':52s} {'RTF':>6s} {'RTFcpu':>6s} {'evals':>6s} {'max dev':>9s}  "
          "worst signal   accepted")
    for name, rtf, rtf_cpu, evals, err, where in rows:
        dev = "      -  " if err is None else f"{100 * err:8.4f}%"
        ok = "-" if err is None else ("yes" if err < ACCURACY else "NO")
        print(f"{name:52s} {rtf:6.3f} {rtf_cpu:6.3f} {evals:6d} {dev}  {where:14s} {ok}")
    base = rows[0]
    print(f"(RTF: simulated s per wall s; RTFcpu: per process CPU s. Baseline = the python path at 100 us: "
          f"RTF {base[1]:.3f}, RTFcpu {base[2]:.3f})")
    for name, rtf, rtf_cpu, *_ in rows[2:]:
        print(f"  {name:52s} {rtf / base[1]:5.2f} x baseline (wall), {rtf_cpu / base[2]:5.2f} x (CPU)")
    advised_row = rows[5]
    print(f"(against the fused RK4 advance() at the advised step, RTF {advised_row[1]:.3f}, RTFcpu "
          f"{advised_row[2]:.3f}:)")
    for name, rtf, rtf_cpu, *_ in rows[6:]:
        print(f"  {name:52s} {rtf / advised_row[1]:5.2f} x (wall), {rtf_cpu / advised_row[2]:5.2f} x (CPU)")
    return rows


def published_deviation(ref, ticks, q, tau, model, period):
    """As :func:`deviation`, at the publish times themselves (on the reference's grid): no interpolation of the
    candidate, so the figure is what a subscriber receives."""
    t_ref, q_ref, tau_ref = ref
    rows = np.searchsorted(t_ref, ticks - REFERENCE_DT / 2)
    end = min(ticks[-1], t_ref[-1])
    window = (ticks >= end - period - 1e-12) & (ticks <= end + 1e-12)
    signals = [(q_ref, q, k, model.joint_names[k]) for k in np.flatnonzero(~model.actuated)]
    signals += [(tau_ref, tau, k, f"torque {model.joint_names[k]}") for k in model.metadata["stroke_joints"]]
    return max((np.abs(cand[window, k] - ref[rows[window], k]).max() / np.abs(ref[rows[window], k]).max(), name)
               for ref, cand, k, name in signals)


def serve_path_table(model, duration, period, publish_period=1e-3, rounds=15, ticks=200):
    """The `mms serve` path: one call per published state. Dense output (``advance_to``, any step; the server's
    path) at ROSW_DT against whole steps of a divisor of the publish period (``advance`` + ``outputs``, the
    former path: 1/3 ms at 1 kHz), CPU time per simulated s, interleaved rounds (best of each, so a load change
    hits both alike); and the published states' deviation from the RK4 1e-4 s reference over the last period."""
    print(f"\n=== serve path: one state per {publish_period * 1e3:g} ms ===")
    whole_dt = publish_period / math.ceil(publish_period / ROSW_DT)
    t_r, q_r, tau_r, _, _, _ = simulation_run(model, "rk4", REFERENCE_DT, duration)
    ticks_all = np.arange(1, int(round(duration / publish_period)) + 1) * publish_period
    dense = Simulation(model, "rosw", ROSW_DT)
    published = [dense.advance_to(t) for t in ticks_all]
    err, where = published_deviation((t_r, q_r, tau_r), ticks_all, np.array([o["q"] for o in published]),
                                     np.array([o["tau"] for o in published]), model, period)
    runs = {"dense": Simulation(model, "rosw", ROSW_DT), "whole": Simulation(model, "rosw", whole_dt)}
    for sim in runs.values():
        sim.advance_to(2 * publish_period)
        sim.advance(publish_period)
        sim.outputs()
    best = {name: math.inf for name in runs}
    for _ in range(rounds):
        for name, sim in runs.items():
            sim.reset()
            start = time.process_time()
            if name == "dense":
                for k in range(1, ticks + 1):
                    sim.advance_to(k * publish_period)
            else:
                for _ in range(ticks):
                    sim.advance(publish_period)
                    sim.outputs()
            best[name] = min(best[name], time.process_time() - start)
    simulated = ticks * publish_period
    print(f"dense output, rosw {ROSW_DT * 1e3:g} ms: {simulated / best['dense']:.2f}x real time per CPU s; "
          f"published states within {100 * err:.3f} % of the reference ({where})")
    print(f"whole steps, rosw {whole_dt * 1e3:.4g} ms: {simulated / best['whole']:.2f}x real time per CPU s")
    print(f"dense / whole: {best['whole'] / best['dense']:.2f}x (best of {rounds} interleaved rounds of {ticks} states)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "robots" / "flapper.toml")
    parser.add_argument("--periods", type=float, default=6.0)
    args = parser.parse_args(argv)
    model = load_robot(args.config).replace(base_mode="floating")
    period = model.metadata["period_s"]
    duration = args.periods * period
    print(f"Table I flapper: {duration:g} s simulated ({args.periods:g} periods)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"machine: {os.cpu_count()} cores, load average {load:.1f} (timings: best of {REPEATS} runs; compare "
          "ratios and CPU-time figures, not wall times, on a busy machine)")
    start = time.perf_counter()
    Simulation(model, "rk4", REFERENCE_DT).step()
    print(f"fused path ready in {time.perf_counter() - start:.2f} s (numba compile, or load from its cache)")

    flight_table(model, duration, period, "free flight (floating base)")
    flight_table(model.replace(base_mode="fixed"), duration, period, "tethered (fixed base)")
    serve_path_table(model, duration, period)

    # 3. evaluation time vs Pinocchio ABA
    import pinocchio as pin
    pm = to_pinocchio(model)
    pd = pm.createData()
    rng = np.random.default_rng(0)
    q = pin.randomConfiguration(pm, -np.ones(pm.nq) * 0.3, np.ones(pm.nq) * 0.3)
    v = rng.normal(size=pm.nv) * 0.5
    tau = np.zeros(pm.nv)
    t_aba = per_call(lambda: pin.aba(pm, pd, q, v, tau))
    data = Data(model)
    n = model.n
    qq, qdd = rng.normal(size=n) * 0.3, np.zeros(n)
    qqd = rng.normal(size=n) * 0.5
    pose, twist = np.eye(4), rng.normal(size=6) * 0.1
    t_step = per_call(lambda: hybrid_step(model, data, 0.0, pose, twist, qq, qqd, qdd, np.zeros(n)))
    python_sim = Simulation(model, "rk4", 1e-4, fused=False)
    t_eval = per_call(lambda: python_sim._evaluate(0.01, python_sim.y))
    fused_sim = Simulation(model, "rk4", 1e-4)
    fused_sim.advance(0.001)
    steps = 400
    t_fused = per_call(lambda: fused_sim.advance(steps * 1e-4), repeat=5) / (4 * steps)
    aero = model.force_models[0]
    t_aero = per_call(lambda: aero.apply(model, data, 0.0))
    t_aero_kernel = per_call(lambda: aero.compute(data.eta))
    print(f"\nper evaluation ({model.n_bodies} bodies, {len(aero.bodies)} blades x {aero.cp.shape[1]} points):")
    for label, value in [("pin.aba (C++, free-flyer, all joints passive, no aero)", t_aba),
                         ("hybrid_step (Python wrapper + kernels + aero plug-in)", t_step),
                         ("python path: one RK stage (Simulation._evaluate)", t_eval),
                         ("fused path: one RK stage (advance(400 steps) / 1600)", t_fused),
                         ("aero plug-in apply (Python call + kernels)", t_aero),
                         ("aero kernel alone (quasi_steady_wrenches)", t_aero_kernel)]:
        print(f"  {label:58s} {value * 1e6:8.2f} us  ({value / t_aba:6.2f} x pin.aba)")

    # 4. profile
    sim = Simulation(model, "rk4", 1e-4)
    sim.step()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(int(round(period / 1e-4))):
        sim.step()
        sim.outputs()
    profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(8)
    print("\ncProfile of the fused Simulation, step() + outputs() at dt=1e-4 over one period (own time):")
    print("\n".join(line for line in stream.getvalue().splitlines()[6:] if line.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
