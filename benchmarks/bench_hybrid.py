"""Cost of one hybrid-dynamics evaluation next to Pinocchio's ABA on the same random trees.

Usage: .venv/bin/python benchmarks/bench_hybrid.py [--evaluations 20000] [--seed 0]

For trees of 17 and 40 bodies (free-flyer base + 16 / 39 one-DoF joints, random URDF written to a temporary
file and read by both libraries) it prints microseconds per evaluation of
- ``pin.aba`` (C++, called from Python; the baseline),
- ``sim.dynamics.hybrid_step`` on a preallocated Data, all joints passive (the same problem as ABA),
- ``hybrid_step`` with half of the joints actuated (mixed problem),
- ``Simulation`` RK4 (mixed problem) on its Python-orchestrated path (``fused=False``): one ``step()``
  (4 evaluations + state bookkeeping) divided by 4,
- ``Simulation`` RK4 on its fused path (sim/fused.py, the default for these models): one ``step()`` / 4 and
  one ``advance()`` of 100 steps / 400 (no Python per step),
- the public ``sim.hybrid_dynamics`` with a reused ``data=`` and without it (a workspace kept per model),
and the ratio to ``pin.aba`` timed in the same rounds, interleaved (targets: hybrid_dynamics(data=) <= 2x,
without data= <= 4x). Times are the calling thread's CPU time per call (best of ROUNDS): every contender runs in
that thread, and a shared machine's preemptions do not count against either side.
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

from sim.dynamics import hybrid_dynamics, hybrid_step
from sim.model import Data
from sim.simulation import Simulation
from sim.urdf import load_urdf, random_tree_urdf

#: Timing rounds per figure (best of): the machine may be shared (7: at load 9, 3 rounds gave 1.66-2.31x for one
#: figure).
ROUNDS = 7


def _timed_us(fn, count: int) -> float:
    start = time.thread_time()
    for _ in range(count):
        fn()
    return (time.thread_time() - start) / count * 1e6


def per_call_us(fn, count: int, baseline=None) -> tuple[float, float]:
    """(best of ROUNDS timing runs of ``count`` calls of fn, same for ``baseline`` timed in the same rounds,
    interleaved with fn so that both see the same load), microseconds per call."""
    fn()
    best, best_base = float("inf"), float("inf")
    for _ in range(ROUNDS):
        if baseline is not None:
            best_base = min(best_base, _timed_us(baseline, count))
        best = min(best, _timed_us(fn, count))
    return best, best_base


def bench_tree(n_bodies: int, count: int, rng: np.random.Generator, directory: Path) -> dict[str, float]:
    path = directory / f"tree{n_bodies}.urdf"
    path.write_text(random_tree_urdf(rng, n_bodies - 1, fixed_fraction=0.0))
    model = load_urdf(path)
    assert model.n_bodies == n_bodies
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
    pd = pm.createData()
    q_pin = pin.randomConfiguration(pm, -np.ones(pm.nq), np.ones(pm.nq))
    q_pin[3:7] /= np.linalg.norm(q_pin[3:7])
    v_pin, tau_pin = rng.normal(size=pm.nv), rng.normal(size=pm.nv)

    data = Data(model)
    n = model.n
    q, qd, qdd, tau = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    g0, twist = np.eye(4), rng.normal(size=6)
    mixed = model.replace(actuated=np.arange(n) % 2 == 0)
    data_mixed = Data(mixed)
    python_sim = Simulation(mixed, dt=1e-4, fused=False)
    fused_sim = Simulation(mixed, dt=1e-4)
    assert fused_sim.path == "fused", fused_sim.fused_unsupported
    fused_sim.step()                            # compile / load the fused kernel outside the timing
    advance_steps = 100

    passive = np.zeros(n, dtype=bool)
    aba = lambda: pin.aba(pm, pd, q_pin, v_pin, tau_pin)  # noqa: E731
    candidates = {
        "hybrid_step (all passive)": (lambda: hybrid_step(model, data, 0.0, g0, twist, q, qd, qdd, tau), count),
        "hybrid_dynamics(data=d)": (lambda: hybrid_dynamics(model, g0, twist, q, qd, passive, qdd, tau, data=data),
                                    count),
        "hybrid_dynamics (no data)": (lambda: hybrid_dynamics(model, g0, twist, q, qd, passive, qdd, tau), count),
        "hybrid_step (mixed)": (lambda: hybrid_step(mixed, data_mixed, 0.0, g0, twist, q, qd, qdd, tau), count),
        "Simulation python step / 4": (python_sim.step, max(1, count // 4), 4.0),
        "Simulation fused step / 4": (fused_sim.step, max(1, count // 4), 4.0),
        "Simulation fused advance / 4": (lambda: fused_sim.advance(advance_steps * 1e-4),
                                         max(1, count // (4 * advance_steps)), 4.0 * advance_steps),
    }
    results = {}
    for name, (fn, calls, *per) in candidates.items():
        us, aba_us = per_call_us(fn, calls, aba)
        results[name] = (us / (per[0] if per else 1.0), aba_us)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--evaluations", type=int, default=20000, help="calls per timing run (default 20000)")
    parser.add_argument("--seed", type=int, default=0, help="random tree seed (default 0)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        for n_bodies in (17, 40):
            results = bench_tree(n_bodies, args.evaluations, rng, Path(tmp))
            print(f"{n_bodies}-body tree (free-flyer base + {n_bodies - 1} joints):")
            for name, (us, aba_us) in results.items():
                print(f"  {name:30s} {us:8.2f} us/eval   {us / aba_us:6.2f} x pin.aba ({aba_us:.2f} us, same rounds)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
