"""The Cosserat robots and the passive elastic rod on the compiled and the Python path (sim/cosserat/kernels.py vs
rod.py, sim/cosserat/passive_kernels.py vs passive.py), and the 2-D snake's convergence study (docs/cosserat.md,
"Resolution and speed").

    python benchmarks/bench_cosserat.py [--duration S] [--python-duration S] [--passive-only]
    python benchmarks/bench_cosserat.py --convergence

Speed: each robot at the resolution of its config, the 2-D snake also at its converged one, the real-time factor (simulated s
per wall s of the stepping loop, as `mms sim --summary` reports it) on the compiled path over ``--duration`` and on
the Python path over ``--python-duration`` (the Python path is ~50-100x slower), in the same run, and their ratio.
The passive rod (:data:`PASSIVE_RODS`: the cantilever of tests/cosserat/test_passive_rod_vs_pyelastica.py released
under gravity, the floating rod of tests/cosserat/test_passive_free_rod.py) likewise, `passive.run` with
``compiled=True`` and ``False``, recorded every 4 ms.

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
from sim.cosserat.passive import PassiveRod, round_section_stiffness, run  # noqa: E402
from sim.cosserat.rod import round_rod  # noqa: E402
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


#: The passive rods timed: (label, model, q0 (n_q,), v0 (n_v,) or None, dt s). Round section r = 0.02 m, l = 1 m,
#: rho = 1000 kg/m^3, E = 1e8 Pa, G = E/3, k = 27/28, n_X = 40.
_STIFFNESS = round_section_stiffness(0.02, 1e8, 1e8 / 3.0, 27.0 / 28.0)
_FLOATING = PassiveRod(round_rod(1.0, 0.02, 1000.0, n_X=40), _STIFFNESS, (4, 5), 3, free_head=True)
PASSIVE_RODS = (
    ("passive cantilever under gravity (K_Z, 6 modes, dt = 0.8 ms)",
     PassiveRod(round_rod(1.0, 0.02, 1000.0, gravity=(0.0, -9.81, 0.0), n_X=40), _STIFFNESS, (5,), 6),
     np.zeros(6), None, 8e-4),
    ("passive free rod (K_Y, K_Z, 3 modes each, dt = 0.5 ms)", _FLOATING,
     0.05 * np.array([1.0, -0.5, 0.2, -0.6, 0.3, 0.1]),
     np.concatenate([[0.1, 0.2, -0.1, 0.3, -0.2, 0.5], 0.05 * np.array([2.0, 0, 0, 0, -3.0, 0])]), 5e-4),
)
#: Recording period of the passive runs, s.
PASSIVE_RECORD_S = 4e-3


def passive_factor(index: int, duration: float, compiled: bool) -> float:
    """Real-time factor of ``passive.run`` on PASSIVE_RODS[index] over ``duration`` s."""
    _, model, q0, v0, dt = PASSIVE_RODS[index]
    start = time.perf_counter()
    run(model, q0, duration, dt, record_every=max(1, int(round(PASSIVE_RECORD_S / dt))), v0=v0, compiled=compiled)
    return duration / (time.perf_counter() - start)


def passive_rows(duration: float, python_duration: float) -> None:
    """The passive rods' rows of the speed table (the kernels compiled or loaded first, not timed)."""
    for index in range(len(PASSIVE_RODS)):
        passive_factor(index, 0.01, True)
    for index, (label, *_) in enumerate(PASSIVE_RODS):
        fast, slow = passive_factor(index, duration, True), passive_factor(index, python_duration, False)
        print(f"| {label} | {fast:.2f} | {slow:.3f} | {fast / slow:.1f} |", flush=True)


def passive_speed(duration: float, python_duration: float) -> None:
    print(f"load before: {Path('/proc/loadavg').read_text().split()[:3]}")
    print("| rod | compiled (x real time) | Python (x real time) | ratio |")
    print("|---|---|---|---|")
    passive_rows(duration, python_duration)
    print(f"load after: {Path('/proc/loadavg').read_text().split()[:3]}")


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
    passive_rows(duration, python_duration)
    print(f"load after: {Path('/proc/loadavg').read_text().split()[:3]}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--convergence", action="store_true", help="print the 2-D snake's convergence table")
    parser.add_argument("--passive-only", action="store_true", help="time the passive rods only")
    parser.add_argument("--duration", type=float, default=10.0, help="simulated s per robot, compiled path (s)")
    parser.add_argument("--python-duration", type=float, default=0.5, help="simulated s per robot, Python path (s)")
    args = parser.parse_args(argv)
    if args.convergence:
        convergence()
    elif args.passive_only:
        passive_speed(args.duration, args.python_duration)
    else:
        speed(args.duration, args.python_duration)
    return 0


if __name__ == "__main__":
    sys.exit(main())
