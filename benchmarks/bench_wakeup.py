"""How late a sleeping loop wakes up on this machine: ``time.sleep`` and a ZeroMQ poll, with Linux's default timer
slack (50 us) and with the fine one `mms serve` asks for (sim.processes.fine_timer_slack, 1 us).

The model server sleeps until each state's due time (sim/server.py ``_wait_until``: a poll in whole ms, then a
fine sleep); what it wakes late is taken from the half period a 1 kHz state may be late. Prints the lateness
percentiles of each and the fine slack's median over the default's (same run), with the load average.

Not a test. Usage: python benchmarks/bench_wakeup.py [--sleeps 2000] [--sleep-ms 0.3]
"""
from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

import numpy as np
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sim.processes import fine_timer_slack  # noqa: E402

#: prctl option: this thread's timer slack, ns (linux/prctl.h), and Linux's default for the normal scheduler
PR_SET_TIMERSLACK = 29
DEFAULT_SLACK_NS = 50_000
PERCENTILES = (50, 90, 99, 99.9, 100)


def lateness_ms(wait, target_s: float, count: int) -> np.ndarray:
    """How late each of ``count`` waits of ``target_s`` ended, ms."""
    out = np.empty(count)
    for k in range(count):
        start = time.perf_counter()
        wait()
        out[k] = (time.perf_counter() - start - target_s) * 1e3
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sleeps", type=int, default=2000, help="waits of each kind per slack (default 2000)")
    parser.add_argument("--sleep-ms", type=float, default=0.3, help="length of each time.sleep, ms (default 0.3)")
    args = parser.parse_args()
    context = zmq.Context()
    socket = context.socket(zmq.REP)
    socket.bind("inproc://wake")
    poller = zmq.Poller()
    poller.register(socket, zmq.POLLIN)
    sleep_s = args.sleep_ms * 1e-3
    print(f"load average {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    print(f"{'wait':26s} {'slack':>8s}  lateness ms at percentiles {PERCENTILES}")
    medians = {}
    libc = ctypes.CDLL(None, use_errno=True)
    for slack in ("default", "fine"):
        if slack == "default":
            libc.prctl(PR_SET_TIMERSLACK, DEFAULT_SLACK_NS, 0, 0, 0)
        else:
            fine_timer_slack()
        for name, wait, target in ((f"time.sleep({args.sleep_ms:g} ms)", lambda: time.sleep(sleep_s), sleep_s),
                                   ("zmq poll(1 ms)", lambda: poller.poll(1), 1e-3)):
            late = lateness_ms(wait, target, args.sleeps)
            medians[name, slack] = float(np.median(late))
            print(f"{name:26s} {slack:>8s}  " + " ".join(f"{v:7.3f}" for v in np.percentile(late, PERCENTILES)))
    for name in dict.fromkeys(name for name, _ in medians):
        print(f"{name}: median lateness fine / default = {medians[name, 'fine'] / medians[name, 'default']:.2f}")
    socket.close()
    context.term()
    return 0


if __name__ == "__main__":
    sys.exit(main())
