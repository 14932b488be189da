"""Warm start: compile every numba kernel the shipped robots use, once per installation.

    python -m sim.warmup [--quiet] [--check]

The kernels (sim/spatial.py, sim/dynamics.py, sim/flexible_kernels.py, sim/aero.py, sim/hydro.py, sim/fused.py,
sim/cosserat/kernels.py, sim/cosserat/passive_kernels.py and the strain laws of sim/cosserat/laws/) are
``@njit(cache=True)``:
numba compiles each one for the argument types it meets, the first time it meets them, and writes the machine
code next to the source (``__pycache__/*.nbi`` index, ``*.nbc`` code). A later process loads that code in a
fraction of a second. Without a warm-up the first simulation of a fresh installation pays the compile (about
half a minute to two minutes for one robot on a 2-core machine) in the middle of what the user measures (`mms sim`'s real-time factor, `mms serve`'s
first states); the Makefile's install step runs this module instead, where the user expects to wait.

:func:`warm_up` steps every shipped robot (:data:`CASES`) along every path a product process takes: the fused
path of each fused integrator (RK4, ROSW: ``step()``, ``advance()``, ``outputs()``, the recording loop of
`mms sim`), the Python path of every integrator (``fused=False``) and the public :func:`sim.hybrid_dynamics`;
the Cosserat robots (:data:`COSSERAT_ROBOTS`) on their compiled path, and the passive elastic rod (clamped and
free-head) on its compiled path.
:func:`kernels_compiled` says, from the cache index files alone (nothing is loaded), whether the entry kernels
have code for the current sources.

``--check`` (for tests and CI) warms up, then steps the same cases again in a new process and exits 1 when that
process compiled anything (a kernel that numba cannot cache, e.g. one closing over a dynamic global).
"""
from __future__ import annotations

import argparse
import functools
import itertools
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: The folder whose ``sim`` package the check's new process imports (the source tree of an editable install).
ROOT = Path(__file__).resolve().parents[1]

#: Wall time of the whole warm-up with a cold cache on the reference machine, printed as the user's expectation:
#: 223 s (CI's clean clone, 2026-11-27), 233 s (the same, the day before) and 236 s (load 1.3-3.5) measured on the
#: 2-core machine since the modal wings and the Cosserat rods joined it (docs/sim-core.md "Warm start").
COMPILE_ESTIMATE_S = 240
#: The same in the two processes of :func:`compile_workers`, estimated from CPU times, since no idle machine was to be
#: had (2026-11-28, fresh NUMBA_CACHE_DIR, load 9-15 from other programs, 1837 s wall): the kernels compiled at
#: import, before the two processes start, 30 s CPU; then 129 s and 139 s CPU side by side (233 signatures in all,
#: 2-3 compiled by both); the critical path 169 s CPU of the 282 s CPU one process took at the same load
#: (docs/sim-core.md), 0.60 of the 223-239 s wall measured idle in one process.
PARALLEL_COMPILE_ESTIMATE_S = 140

#: Kernels that Python calls directly (the others are compiled into them): when every one of these has cache
#: entries for the current sources, the product paths start without compiling.
ENTRY_KERNELS = (("sim.fused", "fused_run"), ("sim.fused", "pack_outputs"),  # fused_run: bound to the registry
                 ("sim.fused", "normalize_quaternion"), ("sim.fused", "pack_modal"),
                 ("sim.dynamics", "_kinematics_packed"), ("sim.dynamics", "_recursions_packed"),
                 ("sim.dynamics", "_evaluate_packed"), ("sim.flexible_kernels", "flex_forward"),
                 ("sim.flexible_kernels", "flex_backward"),
                 ("sim.cosserat.kernels", "instant"), ("sim.cosserat.kernels", "guided_steps"),
                 ("sim.cosserat.kernels", "guided_head"), ("sim.cosserat.kernels", "head_from_point"),
                 ("sim.cosserat.kernels", "sweeping_head"), ("sim.cosserat.passive_kernels", "passive_steps"),
                 ("sim.cosserat.passive_kernels", "passive_motion"))


@dataclass(frozen=True)
class Case:
    """One shipped robot set-up: its robot (a shipped name, sim/config.py ``shipped_config``) and the config
    overrides."""
    label: str
    robot: str
    overrides: dict = field(default_factory=dict)


#: Every robot set-up the product runs: the flapper free and tethered (configs/robots/flapper.toml), the demo's
#: live flapper (hil/experiment/demo.py: two sections per wing, 0.5 ms step, base fixed, 5 Hz stroke), RayBot free and
#: tethered, the URDF pendulum, the flapper with modal wings (sim/flexible_kernels.py).
CASES = (
    Case("flapper, free flight", "flapper", {"robot": {"base": "floating"}}),
    Case("flapper, tethered", "flapper", {"robot": {"base": "fixed"}}),
    Case("flapper, demo", "flapper",
         {"robot": {"base": "fixed"}, "wing": {"sections": 2}, "stroke": {"frequency_hz": 5.0},
          "simulation": {"dt": 5e-4}}),
    Case("RayBot, free", "raybot", {"robot": {"base": "floating"}}),
    Case("RayBot, tethered", "raybot", {"robot": {"base": "fixed"}}),
    Case("pendulum (URDF)", "pendulum"),
    Case("flapper, modal wings", "flapper_flexible", {"robot": {"base": "fixed"}}),
)


#: The Cosserat robots (robot kind ``cosserat``, sim/cosserat/kernels.py): `mms sim` runs them on the compiled path.
COSSERAT_ROBOTS = ("earthworm", "inchworm", "snake2d", "snake3d")

#: The steps (:func:`steps`) that a cold warm-up compiles in a second process while the first compiles the others
#: (:func:`compile_workers`): the fused stepper of the modal wings is about half of the whole compile
#: (docs/sim-core.md "Warm start").
SECOND_PROCESS = ("flapper, modal wings",)


def _merge(base: dict, overrides: dict) -> dict:
    merged = dict(base)
    for key, value in overrides.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) \
            else value
    return merged


def build_case(case: Case):
    """(model, dt s) of a case."""
    from sim.config import load_toml, shipped_config
    from sim.robots import build_robot

    path = shipped_config("robot", case.robot)
    config = _merge(load_toml(path), case.overrides)
    model = build_robot(config, path)
    return model, float(config.get("simulation", {}).get("dt", 1e-4))


def exercise(model, dt: float) -> None:
    """Run ``model`` along every product path (each kernel meets the argument types it meets in use)."""
    from sim.dynamics import hybrid_dynamics
    from sim.fused import FUSED_METHODS
    from sim.simulation import INTEGRATORS, Simulation

    for integrator in FUSED_METHODS:
        fused = Simulation(model, integrator, dt)
        fused.outputs()
        fused.step()
        fused.outputs()
        fused.advance(2 * dt)
        fused.record(2, 1)
    for integrator in INTEGRATORS:
        python = Simulation(model, integrator, dt, fused=False)
        python.step()
        python.outputs()
    n = model.n
    if model.flexible is not None:
        return      # sim.hybrid_dynamics is the rigid algorithm; modal models ran sim/flexible.py's kernels above
    hybrid_dynamics(model, model.base_pose, np.zeros(6), model.q_rest, np.zeros(n), model.actuated, np.zeros(n),
                    np.zeros(n))
    # a user's own (writable) pose and joint arrays are another argument type than the model's read-only ones
    hybrid_dynamics(model, model.base_pose.copy(), np.zeros(6), model.q_rest.copy(), np.zeros(n), model.actuated,
                    np.zeros(n), np.zeros(n))


def exercise_cosserat(robot: str) -> None:
    """A few steps of a shipped Cosserat robot on the compiled path (every kernel `mms sim` calls: the instant, each
    contact's Block 0, the snakes' chunked head steps)."""
    from sim.config import load_toml, shipped_config
    from sim.cosserat.algorithms import run_kinematic
    from sim.robots.cosserat import build_example

    path = shipped_config("robot", robot)
    example = build_example(load_toml(path), path)
    dt = 1e-3
    run_kinematic(example.rod, example.strain, example.contacts, example.driver_at, 3 * dt, dt, 2, g_o=example.g_o,
                  dynamics=example.dynamics, compiled=True)


def exercise_passive_rod() -> None:
    """A few compiled steps of the passive rod (sim/cosserat/passive.py), clamped and free-head, and one compiled
    evaluation of its accelerations (the two entry kernels)."""
    from sim.cosserat.passive import PassiveRod, generalized_accelerations, round_section_stiffness, run
    from sim.cosserat.rod import round_rod

    stiffness = round_section_stiffness(0.02, 1e8, 1e8 / 3.0, 27.0 / 28.0)
    for free_head in (False, True):
        model = PassiveRod(round_rod(1.0, 0.02, 1000.0, n_X=8), stiffness, (5,), 2, free_head=free_head)
        run(model, np.zeros(model.n_q), 2e-3, 1e-3)
        generalized_accelerations(model, np.zeros(model.n_q), np.zeros(model.n_v))


def kernel_dispatchers() -> dict[str, object]:
    """{"module.function": numba dispatcher} of every compiled kernel in the loaded sim modules, the registered
    plug-in kernels (sim.plugins: "registry kind:name") and the stepping kernels bound to the registries
    (sim.fused.bound_kernels) included."""
    from numba.core.registry import CPUDispatcher

    found = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "sim" or name.startswith("sim.")):
            continue
        for attr, value in vars(module).items():
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
                found[f"{name}.{attr}"] = value
    plugins = sys.modules.get("sim.plugins")
    if plugins is not None:
        for registry in (plugins.FORCE_KERNELS, plugins.MOTION_LAWS, plugins.JOINT_LAWS):
            kernels, slots, _ = registry.table()
            found.update({f"{registry.kind}:{name}": kernels[slot] for name, slot in slots.items()})
    fused = sys.modules.get("sim.fused")
    if fused is not None:
        for bound in fused._BOUND.values():
            found.update({f"sim.fused.{attr}": value for attr, value in bound.items()
                          if isinstance(value, CPUDispatcher)})
    return found


def compiled_here() -> dict[str, int]:
    """{kernel: number of signatures this process compiled (not found in the on-disk cache)}."""
    return {name: sum(d.stats.cache_misses.values()) for name, d in kernel_dispatchers().items()
            if sum(d.stats.cache_misses.values())}


def kernels_compiled() -> bool:
    """Whether every entry kernel has on-disk code for its current source (reads the cache index files only)."""
    import importlib

    for module_name, function in ENTRY_KERNELS:
        module = importlib.import_module(module_name)
        dispatcher = getattr(module, function, None) or module.bound_kernels()[function]
        cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
        if cache_file is None or not cache_file._load_index():
            return False
    return True


def steps(cases=CASES) -> list[tuple[str, object]]:
    """(label, callable) of every warm-up step, in the order one process runs them: the ``cases``, the Cosserat
    robots, the passive rod."""
    return ([(case.label, functools.partial(_exercise_case, case)) for case in cases]
            + [(f"{robot} (Cosserat rod)", functools.partial(exercise_cosserat, robot)) for robot in COSSERAT_ROBOTS]
            + [("passive rod (clamped, free head)", exercise_passive_rod)])


def parts() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The step labels of a cold warm-up's two processes: every step but :data:`SECOND_PROCESS`, and those."""
    return tuple(label for label, _ in steps() if label not in SECOND_PROCESS), SECOND_PROCESS


def _exercise_case(case: Case) -> None:
    exercise(*build_case(case))


def run_steps(labels=None, cases=CASES) -> list[tuple[str, float]]:
    """Run the warm-up steps named in ``labels`` (None: all) in this process; [(label, wall time s)]."""
    times = []
    for label, step in steps(cases):
        if labels is None or label in labels:
            start = time.perf_counter()
            step()
            times.append((label, time.perf_counter() - start))
    return times


def _numba_cache_file():
    """numba's cache file class when its writes can be serialized here (:func:`serialize_cache_writes`), else None."""
    try:
        import fcntl  # noqa: F401
        from numba.core.caching import IndexDataCacheFile
    except ImportError:
        return None
    methods = ("save", "_load_index", "_save_index", "_save_data", "_data_name")
    return IndexDataCacheFile if all(hasattr(IndexDataCacheFile, name) for name in methods) else None


def serialize_cache_writes() -> bool:
    """Make numba's cache writes in this process safe beside another process compiling into the same cache.

    numba saves a new signature unlocked (``IndexDataCacheFile.save``: read the function's index, add the key,
    write the index back, then the code file it names): two processes compiling signatures of one function at once
    can drop each other's index entry, or both take the same code file name, so that one key names the other's
    code. This wraps it in an exclusive ``flock`` on the cache folder, re-reads the index inside the lock, and writes
    the code before the index entry that names it (a process reading the index meanwhile finds either no entry or
    complete code). Returns False, changing nothing, where that cannot be done (no ``fcntl``; a numba whose cache
    file lacks the methods used)."""
    cache_file = _numba_cache_file()
    if cache_file is None:
        return False
    import fcntl

    def save(self, key, data):
        folder = os.open(self._cache_path, os.O_RDONLY)
        try:
            fcntl.flock(folder, fcntl.LOCK_EX)
            overloads = self._load_index()
            name = overloads.get(key)
            if name is None:
                taken = set(overloads.values())
                name = next(n for n in map(self._data_name, itertools.count(1)) if n not in taken)
                self._save_data(name, data)
                overloads[key] = name
                self._save_index(overloads)
            else:
                self._save_data(name, data)
        finally:
            os.close(folder)        # releases the lock

    cache_file.save = save
    return True


def _compile_part(labels: tuple[str, ...]) -> tuple[list[tuple[str, float]], int, float]:
    """A worker process's share of a cold warm-up: ([(label, wall s)], signatures compiled, CPU s)."""
    if not serialize_cache_writes():
        raise RuntimeError("numba's cache writes cannot be serialized here")
    cpu = time.process_time()
    times = run_steps(labels)
    return times, sum(compiled_here().values()), time.process_time() - cpu


def compile_workers() -> int:
    """How many processes a cold warm-up compiles in: two (:func:`parts`) where this process may run on two CPUs or
    more and numba's cache writes can be serialized (:func:`serialize_cache_writes`), else one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:      # not on Linux
        cpus = os.cpu_count() or 1
    return 2 if cpus >= 2 and _numba_cache_file() is not None else 1


def _compile_in_parts(workers: int, say) -> int:
    """Compile the warm-up's :func:`parts` in ``workers`` new processes; returns the signatures they compiled
    (a signature that two parts need is compiled in each)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    compiled = 0
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(_compile_part, part): index for index, part in enumerate(parts())}
        for future in as_completed(futures):
            times, signatures, cpu = future.result()
            compiled += signatures
            for label, seconds in times:
                say(f"  {label}: {seconds:.1f} s")
            say(f"  (process {futures[future] + 1} of {workers}: {sum(s for _, s in times):.1f} s, "
                f"{cpu:.1f} s CPU, {signatures} kernel signatures)")
    return compiled


def warm_up(cases=CASES, *, out=sys.stdout) -> float:
    """Compile (or load) every kernel the ``cases`` use; returns the wall time (s). Says what it does on ``out``
    (None: silent). With a cold cache and all of :data:`CASES`, the compile runs in :func:`parts`, in parallel
    processes (:func:`compile_workers`); this process then steps every case once more, which loads all from the
    cache (and compiles whatever a part did not leave there)."""
    say = (lambda text: print(text, file=out, flush=True)) if out is not None else (lambda text: None)
    cold = not kernels_compiled()
    workers = compile_workers() if cold and cases == CASES else 1
    if cold:
        estimate = COMPILE_ESTIMATE_S if workers == 1 else PARALLEL_COMPILE_ESTIMATE_S
        say(f"compiling simulation kernels (once, about {estimate / 60:.0f} min"
            + (f", in {workers} processes)" if workers > 1 else ")"))
    start = time.perf_counter()
    compiled = _compile_in_parts(workers, say) if workers > 1 else 0
    for label, seconds in run_steps(cases=cases):
        if workers == 1:
            say(f"  {label}: {seconds:.1f} s")
    wall = time.perf_counter() - start
    compiled += sum(compiled_here().values())
    if compiled:
        say(f"simulation kernels compiled in {wall:.1f} s ({compiled} kernel signatures, cached for later runs)")
    else:
        say(f"simulation kernels ready in {wall:.1f} s (loaded from the cache)")
    return wall


def check_cached(root: Path = ROOT) -> dict[str, int]:
    """Step every case in a new process after a warm-up; return what that process still compiled
    ({kernel: signatures}; empty when the cache served everything)."""
    code = ("import json, sys; from sim.warmup import warm_up, compiled_here; "
            "warm_up(out=None); json.dump(compiled_here(), sys.stdout)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    import json
    return json.loads(result.stdout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.warmup", description=__doc__.splitlines()[0])
    parser.add_argument("--quiet", action="store_true", help="print nothing")
    parser.add_argument("--check", action="store_true",
                        help="then verify in a new process that every kernel loads from the cache (exit 1 if not)")
    args = parser.parse_args(argv)
    warm_up(out=None if args.quiet else sys.stdout)
    if args.check:
        missed = check_cached()
        if missed:
            print(f"not served by the cache in a new process: {missed}", file=sys.stderr)
            return 1
        if not args.quiet:
            print("a new process loads every kernel from the cache")
    return 0


if __name__ == "__main__":
    sys.exit(main())
