"""The demo's figures and health on an idle machine and beside a CPU hog (issue 15, "Headroom in the loop").

Runs `mms demo` (the whole live loop: simulator, driver, emulator with its physics plant, recorder, then the
validation and the replay) ``--repeats`` times idle, then as many times with one extra process keeping one core
busy, and prints the figures side by side with the run's health verdict and each process's CPU share (CPU time
over the demo's whole wall time, warm-up and validation included: 100 % is one core). The bar: beside the hog the demo either
keeps its numbers (root bending ratio and stroke lag within 10 % of the idle runs' mean) or reports INVALID with
the reason. Each condition runs under each ``--rt-priorities`` value (the demo's ``--rt-priority``: 10, the
real-time class for the loop's four wall-clock processes, and 0, the normal scheduler), so the table shows what
the class buys. Not a test: it takes minutes and its figures depend on the machine.

    python benchmarks/bench_demo_load.py [--repeats N] [--duration S] [--rt-priorities 10,0]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: relative change of a figure beside the hog that still counts as "kept" (the issue's bar)
KEPT_FRACTION = 0.10
#: (label, report, measured channel, metric)
FIGURES = (("stroke lag (deg)", "report", "stroke_right", "phase_lag_deg"),
           ("stroke ratio", "report", "stroke_right", "amplitude_ratio"),
           ("root bending ratio", "report", "root_bend_r", "amplitude_ratio"),
           ("strain lag (deg)", "report", "root_bend_r", "phase_lag_deg"),
           ("replay bending ratio", "report/replay", "root_bend_r", "amplitude_ratio"),
           ("replay strain lag (deg)", "report/replay", "root_bend_r", "phase_lag_deg"))
#: figures the bar applies to
BAR = ("root bending ratio", "stroke lag (deg)")
HOG = "while True: pass"


#: /proc sampling period of the CPU time of the demo's processes, s
CPU_SAMPLE_S = 0.5
#: (role, text in the command line) of the processes whose CPU time is reported; the emulator's physics plant is
#: its forked child (same command line)
ROLES = (("serve", " serve "), ("drive", " drive "), ("emulate", " emulate "), ("record", " record "))
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def _cpu_by_role(root_pid: int) -> dict[int, tuple[str, float]]:
    """CPU time (user + system, s) of every live descendant of ``root_pid`` with a role, by pid: (role, seconds)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        table[int(entry.name)] = (int(fields[1]), f" {cmdline} ", (int(fields[11]) + int(fields[12])) / TICKS_PER_S)
    found = {}
    for pid, (parent, cmdline, seconds) in table.items():
        ancestor = parent
        while ancestor in table and ancestor != root_pid:
            ancestor = table[ancestor][0]
        if ancestor != root_pid:
            continue
        role = next((name for name, text in ROLES if text in cmdline), None)
        if role == "emulate" and parent in table and table[parent][1] == cmdline:
            role = "plant"
        if role is not None:
            found[pid] = (role, seconds)
    return found


def run_demo(out: Path, duration_s: float, rt_priority: int) -> dict:
    """One `mms demo`; its figures, health, exit code and the CPU share of each of its processes during the run."""
    demo = subprocess.Popen([sys.executable, "-m", "hil.cli", "demo", "--duration", str(duration_s), "--out",
                             str(out), "--rt-priority", str(rt_priority)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    last: dict[int, tuple[str, float]] = {}
    started = time.monotonic()
    while demo.poll() is None:
        last.update(_cpu_by_role(demo.pid))
        time.sleep(CPU_SAMPLE_S)
    wall = time.monotonic() - started
    row: dict = {"exit": demo.returncode, "cpu": {}}
    for role, seconds in last.values():
        row["cpu"][role] = row["cpu"].get(role, 0.0) + seconds / wall
    for label, report, channel, metric in FIGURES:
        path = out / report / "metrics.json"
        if not path.exists():
            row[label] = None
            continue
        document = json.loads(path.read_text())
        if report == "report":
            row["health"] = document["health"]
        channels = {c["measured"].split(":")[-1]: c["metrics"] for c in document["channels"]}
        row[label] = channels.get(channel, {}).get(metric)
    return row


def verdict(row: dict) -> str:
    health = row.get("health")
    if health is None:
        return f"no metrics (exit {row['exit']})"
    if health["valid"] is False:
        return "INVALID: " + "; ".join(health["reasons"][:2])
    return (f"VALID ({health['analysed_s']:.1f} s analysed, deadline misses "
            f"{(health['deadline_miss_fraction'] or 0):.1%})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2, help="demo runs per condition (default 2)")
    parser.add_argument("--duration", type=float, default=20.0, help="live run length, s (default 20)")
    parser.add_argument("--rt-priorities", default="10,0",
                        help="the demo's --rt-priority values to run each condition with (default 10,0)")
    args = parser.parse_args()
    priorities = [int(text) for text in args.rt_priorities.split(",")]
    rows: dict[str, list[dict]] = {f"{c} rt{p}": [] for c in ("idle", "hog") for p in priorities}
    with tempfile.TemporaryDirectory() as folder:
        for condition in ("idle", "hog"):
            hog = subprocess.Popen([sys.executable, "-c", HOG]) if condition == "hog" else None
            try:
                for priority in priorities:
                    name = f"{condition} rt{priority}"
                    for k in range(args.repeats):
                        row = run_demo(Path(folder) / f"{condition}{priority}-{k}", args.duration, priority)
                        rows[name].append(row)
                        print(f"{name} run {k + 1}: {verdict(row)}", flush=True)
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    print(f"\n{'figure':26s}" + "".join(f"{c + ' ' + str(k + 1):<14s}" for c in rows for k in range(len(rows[c]))))
    for label, *_ in FIGURES:
        cells = [row.get(label) for c in rows for row in rows[c]]
        print(f"{label:26s}" + "".join(f"{v:<14.4g}" if v is not None else f"{'-':14s}" for v in cells))
    for role in [name for name, _ in ROLES] + ["plant"]:
        cells = [row["cpu"].get(role) for c in rows for row in rows[c]]
        print(f"{'CPU share: ' + role:26s}" + "".join(f"{v:<14.0%}" if v is not None else f"{'-':14s}" for v in cells))
    print()
    idle_valid = [r for name, runs in rows.items() if name.startswith("idle") for r in runs
                  if r.get("health", {}).get("valid")]
    for name in [name for name in rows if name.startswith("hog")]:
        for row in rows[name]:
            if not row.get("health", {}).get("valid"):
                print(f"{name}: {verdict(row)} -> reported INVALID with the reason (meets the bar)")
                continue
            if not idle_valid:
                print(f"{name}: valid, but no idle run was valid to compare with")
                continue
            changes = {label: abs(row[label] / np.mean([r[label] for r in idle_valid]) - 1) for label in BAR}
            kept = all(change <= KEPT_FRACTION for change in changes.values())
            print(f"{name}: valid; change against idle: " + ", ".join(f"{k} {v:.1%}" for k, v in changes.items())
                  + (" -> kept (meets the bar)" if kept else " -> NOT kept while VALID (misses the bar)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
