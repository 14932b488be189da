"""Export speed: `mms export` of the 10 min, 1 kHz, 64-channel run of bench_validate, against raw read + writing.

The run is bench_validate's (sim/state at 1 kHz, hw/telemetry at 1 kHz in frames of 10 samples, 64 measured
channels). `mms export --to FORMAT` runs as a subprocess (read, decode, name the columns, write). The baseline in
the same run is the floor of any exporter: the mcap reader iterating the file's messages without decoding them,
plus the format's writer writing the export's own columns (already in memory, built before the clock starts)
to a file. The figure of merit is the CPU time of `mms export` over that floor.

Usage: python benchmarks/bench_export.py [--minutes 10] [--formats h5 mat] [--keep PATH [--reuse]] [--repeat 1]
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_validate import CHILD_ENV, read_only, synthesise  # noqa: E402
from hil.recording.export import (FORMATS, export_csv, export_h5, export_mat, export_table,  # noqa: E402
                                  stored_rig_or_none)
from hil.recording.mcap_io import read_recording  # noqa: E402
from hil.recording.series import build_tables  # noqa: E402

MMS = Path(sys.executable).parent / "mms"


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def write_only(run: Path, fmt: str, folder: Path) -> float:
    """CPU s of writing the export's columns (built beforehand as `mms export` builds them, with the run's rig: not
    timed) with ``fmt``'s writer."""
    recording = read_recording(run)
    rig = stored_rig_or_none(recording.metadata)
    tables = [export_table(table, rig) for table in build_tables(recording).tables.values()]
    folder.mkdir(parents=True, exist_ok=True)
    start = time.process_time()
    if fmt == "csv":
        export_csv(tables, folder)
    elif fmt == "mat":
        export_mat(tables, recording.metadata, folder / "floor.mat")
    else:
        export_h5(tables, recording.metadata, folder / "floor.h5")
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=["h5", "mat"])
    parser.add_argument("--keep", type=Path, help="write the run here and keep it (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true", help="with --keep: export the kept run if it exists")
    parser.add_argument("--repeat", type=int, default=1, help="exports per format (the spread is printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        run = args.keep or Path(folder) / "run.mcap"
        if not (args.reuse and run.exists()):
            synthesise(run, args.minutes)
        read_s, messages = read_only(run)
        print(f"run of {args.minutes:g} min: {run.stat().st_size / 1e6:.0f} MB, {messages} messages; "
              f"baseline read (mcap reader, no decoding): {read_s:.1f} s CPU")
        for fmt in args.formats:
            write_s = write_only(run, fmt, Path(folder) / f"floor_{fmt}")
            floor = read_s + write_s
            ratios = []
            for k in range(args.repeat):
                out = Path(folder) / f"export_{fmt}_{k}"
                cpu_before, start = _children_cpu_s(), time.perf_counter()
                result = subprocess.run([str(MMS), "export", str(run), "--to", fmt, "--out", str(out), "--quiet"],
                                        cwd=REPO, capture_output=True, text=True, env=CHILD_ENV)
                wall_s, cpu_s = time.perf_counter() - start, _children_cpu_s() - cpu_before
                if result.returncode != 0:
                    print(result.stderr)
                    return 1
                ratios.append(cpu_s / floor)
                print(f"{fmt}: mms export {wall_s:.1f} s wall, {cpu_s:.1f} s CPU; floor = read {read_s:.1f} s + "
                      f"write {write_s:.1f} s = {floor:.1f} s CPU; ratio {cpu_s / floor:.2f}")
            print(f"{fmt}: ratio to raw read + writing {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} "
                  f"run(s) (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
