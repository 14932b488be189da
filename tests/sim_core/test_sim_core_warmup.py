"""Warm start (sim/warmup.py) and the recording loop of Simulation.record (what `mms sim` steps).

- ``Simulation.record`` gives the numbers of a loop of ``step()`` + ``outputs()`` (exactly on the fused path: the
  same kernel calls; to rounding on the Python path, where it is that loop).
- Every kernel of the simulator is declared cacheable, and after ``python -m sim.warmup`` a NEW process steps
  every shipped robot along every product path without compiling anything (numba's on-disk cache served it).
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.robots import load_robot
from sim.simulation import Simulation
from sim.warmup import CASES, build_case, kernel_dispatchers, kernels_compiled

ROOT = Path(__file__).resolve().parents[2]


def _demo_flapper():
    return build_case(next(case for case in CASES if case.label == "flapper, demo"))


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("every", [1, 3])
def test_record_equals_step_and_outputs_loop(fused, every):
    model, dt = _demo_flapper()
    chunked, looped = Simulation(model, "rk4", dt, fused=fused), Simulation(model, "rk4", dt, fused=fused)
    assert chunked.path == ("fused" if fused else "python")
    times, records = [], []
    for count in (2, 3):                    # two calls: the second starts from the kept derivative
        t_rec, out = chunked.record(count, every)
        times.append(t_rec)
        records.append(out)
    for row in range(5):
        for _ in range(every):
            looped.step()
        expected = looped.outputs()
        chunk, index = (0, row) if row < 2 else (1, row - 2)
        assert times[chunk][index] == looped.t
        for key, value in expected.items():
            np.testing.assert_array_equal(records[chunk][key][index], value, err_msg=key)
    np.testing.assert_array_equal(chunked.y, looped.y)
    assert chunked.evaluations == looped.evaluations
    # After a record the outputs are those of the last record (Data holds that evaluation).
    last = chunked.outputs()
    for key, value in last.items():
        np.testing.assert_array_equal(records[1][key][-1], value, err_msg=key)


def test_record_rejects_bad_counts():
    sim = Simulation(load_robot(ROOT / "configs/robots/pendulum.toml"), "rk4", 1e-3)
    with pytest.raises(ValueError, match="every >= 1"):
        sim.record(2, 0)
    times, out = sim.record(0, 1)
    assert times.shape == (0,) and out["q"].shape == (0, sim.model.n) and sim.t == 0.0


def test_every_kernel_is_declared_cacheable():
    import sim.aero, sim.dynamics, sim.fused, sim.hydro, sim.spatial  # noqa: E401,F401  (every kernel module)
    from numba.core.caching import NullCache

    dispatchers = kernel_dispatchers()
    assert len(dispatchers) > 30
    uncached = [name for name, d in dispatchers.items() if isinstance(d._cache, NullCache)]
    assert uncached == []


def test_warmup_then_a_new_process_compiles_nothing():
    result = subprocess.run([sys.executable, "-m", "sim.warmup", "--check"], capture_output=True, text=True,
                            cwd=ROOT, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "a new process loads every kernel from the cache" in result.stdout
    assert kernels_compiled()


def test_stale_kernels_are_discarded_when_a_kernel_source_changes(tmp_path):
    from sim.kernel_cache import STAMP_NAME, discard_stale_kernels, kernel_sources_hash

    for name in ("fused.rk4-1.py311.nbi", "fused.rk4-1.py311.1.nbc", "other.pyc"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / STAMP_NAME).write_text("the hash of older sources")
    assert discard_stale_kernels(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kernels.stamp", "other.pyc"]
    assert (tmp_path / STAMP_NAME).read_text() == kernel_sources_hash()
    (tmp_path / "fused.rk4-1.py311.nbi").write_bytes(b"compiled from the current sources")
    assert not discard_stale_kernels(tmp_path)
    assert (tmp_path / "fused.rk4-1.py311.nbi").exists()


def test_a_realtime_warm_up_freezes_the_start_up_heap_out_of_the_collector():
    """sim.realtime.warm_up ends by freezing every object alive (sim.processes.freeze_startup_heap): a full garbage
    collection then skips them (50 ms -> 3 us in `mms serve`). Run in a child: the freeze is process-wide."""
    script = ("import gc, sys; from sim.robots import load_robot; from sim.simulation import Simulation; "
              "from sim.realtime import warm_up; "
              "sim = Simulation(load_robot(sys.argv[1]), 'rk4', 5e-4); before = gc.get_freeze_count(); "
              "warm_up(sim, 1e-3, lambda line: None); print(before, gc.get_freeze_count(), sim.t)")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "configs/robots/pendulum.toml")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    before, after, t = done.stdout.split()
    assert int(before) == 0 and int(after) > 10_000 and float(t) == 0.0    # frozen, and the simulation reset


def test_a_cold_warm_up_splits_every_step_into_exactly_one_of_its_two_processes():
    from sim.warmup import SECOND_PROCESS, parts, steps

    first, second = parts()
    labels = [label for label, _ in steps()]
    assert sorted(first + second) == sorted(labels) and len(set(labels)) == len(labels)
    assert set(second) == set(SECOND_PROCESS) and not set(first) & set(second)


#: entries each of the two writing processes saves into the one cache index
CACHE_ENTRIES_PER_PROCESS = 100


def _save_entries_concurrently(folder: Path, serialize: bool) -> dict:
    """Two processes, started together, each saving CACHE_ENTRIES_PER_PROCESS entries into one numba cache index
    (numba's IndexDataCacheFile, as a compile saves a new signature), with or without
    sim.warmup.serialize_cache_writes; the index they leave ({key: data file name})."""
    from numba.core.caching import IndexDataCacheFile

    code = f"""
import sys, time
from pathlib import Path
from numba.core.caching import IndexDataCacheFile
from sim.warmup import serialize_cache_writes

folder, name, serialize = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "1"
if serialize:
    assert serialize_cache_writes()
cache = IndexDataCacheFile(str(folder), "kernel", "source stamp")
(folder / f"ready-{{name}}").touch()
deadline = time.monotonic() + 30          # both start saving together
while len(list(folder.glob("ready-*"))) < 2 and time.monotonic() < deadline:
    time.sleep(1e-3)
for k in range({CACHE_ENTRIES_PER_PROCESS}):
    cache.save((name, k), f"{{name}}-{{k}}")
"""
    writers = [subprocess.Popen([sys.executable, "-c", code, str(folder), name, "1" if serialize else "0"], cwd=ROOT)
               for name in "ab"]
    assert [writer.wait(120) for writer in writers] == [0, 0]
    cache = IndexDataCacheFile(str(folder), "kernel", "source stamp")
    return {key: cache.load(key) for key in cache._load_index()}


def test_serialized_cache_writes_keep_every_entry_of_two_processes_writing_at_once(tmp_path):
    """What lets a cold warm-up compile in two processes into one cache (sim.warmup.serialize_cache_writes): every
    entry both saved is in the index and names its own data. numba's unlocked save, in the same race, loses
    entries (a second run below, which shows the race happened)."""
    (tmp_path / "locked").mkdir()
    (tmp_path / "unlocked").mkdir()
    expected = {(name, k): f"{name}-{k}" for name in "ab" for k in range(CACHE_ENTRIES_PER_PROCESS)}
    assert _save_entries_concurrently(tmp_path / "locked", serialize=True) == expected
    assert len(_save_entries_concurrently(tmp_path / "unlocked", serialize=False)) < len(expected)
