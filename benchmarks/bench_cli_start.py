"""How long every ``mms`` command takes to print its ``--help`` and to refuse one bad argument, and which heavy
modules it has imported by then (``python -X importtime``).

Each command runs in a fresh interpreter (``python -m hil.cli COMMAND ...``, the ``mms`` entry point of
pyproject.toml); its wall time and CPU time (user + system of the child) are the medians of ``--repeats`` runs,
printed against the same run's ``python -c pass`` (the interpreter alone) and ``mms --help`` (hil/cli.py alone).
The bad arguments are the test's (tests/cli/test_cli_start.py). ``--tree DIR`` measures another checkout (e.g. the
commit before a change) with this script's cases.

Not a test. Usage: python benchmarks/bench_cli_start.py [--repeats 3] [--tree DIR]
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from hil.cli import COMMANDS  # noqa: E402
from tests.cli.test_cli_start import BAD_ARGUMENTS, HEAVY_MODULES  # noqa: E402


def timed(argv: list[str], env: dict[str, str], repeats: int) -> tuple[float, float, int]:
    """Median wall and CPU time of ``repeats`` runs of ``argv``, s, and its exit code."""
    walls, cpus = [], []
    for _ in range(repeats):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        code = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
        walls.append(time.perf_counter() - start)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus), code


def heavy_imported(argv: list[str], env: dict[str, str]) -> list[str]:
    """The heavy modules ``argv`` imports before it exits (its ``-X importtime`` lines)."""
    err = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True).stderr
    names = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in err.splitlines()
             if line.startswith("import time:") and line.count("|") == 2}
    return sorted(names & {name.split(".")[0] for name in HEAVY_MODULES})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs per case, of which the median (default 3)")
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout measured (default: this one)")
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.tree.resolve())}
    mms = [sys.executable, "-m", "hil.cli"]
    with open("/proc/loadavg") as load:
        print(f"tree {args.tree}; load average {load.read().split()[:3]} (1, 5, 15 min); "
              f"median of {args.repeats} runs")
    bare_wall, bare_cpu, _ = timed([sys.executable, "-c", "pass"], env, args.repeats)
    cli_wall, cli_cpu, _ = timed([*mms, "--help"], env, args.repeats)
    print(f"python -c pass: wall {bare_wall:.3f} s, CPU {bare_cpu:.3f} s; "
          f"mms --help: wall {cli_wall:.3f} s, CPU {cli_cpu:.3f} s")
    print(f"{'command':<28} {'exit':>4} {'wall s':>7} {'CPU s':>6} {'/pass':>6} {'/mms':>5}  heavy modules imported")
    totals = []
    for command in COMMANDS:
        for case in (["--help"], BAD_ARGUMENTS[command]):
            argv = [*mms, command, *case]
            wall, cpu, code = timed(argv, env, args.repeats)
            totals.append(cpu)
            label = f"{command} {' '.join(case)}"
            print(f"{label[:28]:<28} {code:>4} {wall:7.3f} {cpu:6.3f} {cpu / bare_cpu:6.1f} {cpu / cli_cpu:5.1f}  "
                  f"{', '.join(heavy_imported(argv, env)) or '-'}")
    print(f"all {len(totals)} cases: CPU {sum(totals):.2f} s, {sum(totals) / cli_cpu:.1f} x mms --help's; median "
          f"{statistics.median(totals) / cli_cpu:.2f} x mms --help's, {statistics.median(totals) / bare_cpu:.2f} x "
          "python -c pass's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
