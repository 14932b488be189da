"""The Cosserat robots on the compiled and the Python path (sim/cosserat/kernels.py vs rod.py), and the 2-D snake's
convergence study (docs/cosserat.md, "Resolution and speed").

    python benchmarks/bench_cosserat.py [--duration S] [--python-duration S]
    python benchmarks/bench_cosserat.py --convergence

Speed: each robot at the resolution of its config, the 2-D snake also at its converged one, the real-time factor (simulated s
per wall s of the stepping loop, as `mms sim --summary` reports it) on the compiled path over ``--duration`` and on
the Python path over ``--python-duration`` (the Python path is ~50-100x slower), in the same run, and their ratio.

The kernels are compiled (or loaded from the cache) by a short run before anything is timed.

Convergence: the snake's `--summary` keys over the full 10 s run for a ladder of n_X and dt, recorded at 100 Hz
(``record_every = 0.01 s / dt``, so every run samples the same instants), against the finest run; the relative
difference of each key (a vector key: the norm of the difference over the norm of the reference).
"""
from __future__ import annotations

import argparse
import copy
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.config import load_toml  # noqa: E402
from sim.cosserat.algorithms import run_kinematic  # noqa: E402
from sim.robots.cosserat import build_example, simulate_offline, summarize  # noqa: E402

ROBOTS = ("earthworm", "inchworm", "snake2d", "snake3d")
#: The summary keys that describe the motion and the loads (the others are checks and timing).
PHYSICS_KEYS = ("head_displacement_m", "mean_head_velocity_m_s", "peak_head_speed_m_s", "max_contact_force_N",
                "cycle_mean_contact_force_N", "max_internal_torque_Nm")
#: The recorded rate of the convergence runs, s.
RECORD_PERIOD_S = 0.01


def config_of(robot: str, n_X: int | None = None) -> tuple[dict, Path]:
    path = ROOT / "configs" / "robots" / f"{robot}.toml"
    config = copy.deepcopy(load_toml(path))
    if n_X is not None:
        config["rod"]["n_X"] = n_X
    return config, path


def summary(robot: str, n_X: int, dt: float, duration: float | None = None) -> dict:
    """`mms sim --summary` of the robot at (n_X, dt), recorded every RECORD_PERIOD_S."""
    config, path = config_of(robot, n_X)
    # in the config: `--record-every 1` is the option's default, which leaves the config's value in force
    config["simulation"]["record_every"] = max(1, int(round(RECORD_PERIOD_S / dt)))
    args = argparse.Namespace(base=None, integrator=None, periodic=False, dt=dt, duration=duration, periods=None,
                              record_every=1)
    return summarize(simulate_offline(config, path, args, False))


#: Keys that vanish at convergence, and the key whose size is their scale.
SCALE_OF = {"cycle_mean_contact_force_N": "max_contact_force_N"}


def differences(values: dict, reference: dict) -> list[float]:
    """The relative difference of each PHYSICS_KEYS value from the reference (module docstring)."""
    out = []
    for key in PHYSICS_KEYS:
        a, b = np.atleast_1d(np.asarray(values[key], float)), np.atleast_1d(np.asarray(reference[key], float))
        scale = np.linalg.norm(np.atleast_1d(reference[SCALE_OF.get(key, key)]))
        out.append(float(np.linalg.norm(a - b) / max(scale, np.finfo(float).tiny)))
    return out


def convergence(n_Xs=(50, 64, 80, 100, 200, 400, 800), dts=(1e-2, 5e-3, 2e-3, 1e-3, 5e-4),
                combined=((100, 1e-2), (200, 1e-3))) -> None:
    finest = summary("snake2d", n_Xs[-1], dts[-1])
    print(f"reference: n_X = {n_Xs[-1]}, dt = {dts[-1]:g} s; " +
          ", ".join(f"{k} = {np.round(finest[k], 6).tolist()}" for k in PHYSICS_KEYS))
    header = "| n_X | dt (s) | " + " | ".join(PHYSICS_KEYS) + " | largest |"
    print(header)
    print("|" + "---|" * (len(PHYSICS_KEYS) + 3))
    rows = [(n, dts[-1]) for n in n_Xs[:-1]] + [(n_Xs[-1], dt) for dt in dts[:-1]] + list(combined)
    for n, dt in rows:
        errors = differences(summary("snake2d", n, dt), finest)
        print(f"| {n} | {dt:g} | " + " | ".join(f"{e:.1e}" for e in errors) + f" | {max(errors):.1e} |", flush=True)


def real_time_factor(robot: str, duration: float, compiled: bool) -> float:
    config, path = config_of(robot)
    example = build_example(config, path)
    sim = config["simulation"]
    start = time.perf_counter()
    run_kinematic(example.rod, example.strain, example.contacts, example.driver_at, duration, sim["dt"],
                  sim.get("record_every", 1), g_o=example.g_o, dynamics=example.dynamics, compiled=compiled)
    return duration / (time.perf_counter() - start)


#: The snake at its converged resolution (docs/cosserat.md): n_X, dt s (recorded every step: 100 Hz).
CONVERGED_SNAKE = (100, 0.01)


def converged_snake_factor(duration: float, compiled: bool) -> float:
    n_X, dt = CONVERGED_SNAKE
    config, path = config_of("snake2d", n_X)
    example = build_example(config, path)
    start = time.perf_counter()
    run_kinematic(example.rod, example.strain, example.contacts, example.driver_at, duration, dt, 1,
                  g_o=example.g_o, dynamics=example.dynamics, compiled=compiled)
    return duration / (time.perf_counter() - start)


def speed(duration: float, python_duration: float) -> None:
    for robot in ROBOTS:
        real_time_factor(robot, 0.05, True)          # compile or load the kernels: not timed
    converged_snake_factor(0.05, True)
    print(f"load before: {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| robot | compiled (x real time) | Python (x real time) | ratio |")
    print("|---|---|---|---|")
    for robot in ROBOTS:
        fast = real_time_factor(robot, duration, True)
        slow = real_time_factor(robot, python_duration, False)
        print(f"| {robot} | {fast:.2f} | {slow:.3f} | {fast / slow:.0f} |", flush=True)
    fast, slow = converged_snake_factor(duration, True), converged_snake_factor(python_duration, False)
    print(f"| snake2d, converged (n_X = 100, dt = 10 ms) | {fast:.2f} | {slow:.3f} | {fast / slow:.0f} |", flush=True)
    print(f"load after: {Path('/proc/loadavg').read_text().split()[:3]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convergence", action="store_true", help="print the 2-D snake's convergence table")
    parser.add_argument("--duration", type=float, default=10.0, help="simulated s per robot, compiled path (s)")
    parser.add_argument("--python-duration", type=float, default=0.5, help="simulated s per robot, Python path (s)")
    args = parser.parse_args(argv)
    if args.convergence:
        convergence()
    else:
        speed(args.duration, args.python_duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
