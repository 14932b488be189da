"""Recorder memory in the live loop: the RSS slope of `mms record` idle and beside CPU hogs, and where it goes.

`mms serve` (the tethered flapper at 1 kHz) -> `mms drive --emulate` (the flapper rig, kinematic plant, no faults)
-> `mms record`, as bench_soak.py runs them but without the link's faults. After ``--warmup`` s, an idle phase of
``--phase`` s, then a phase of the same length beside ``--hogs`` busy loops (``python -c "while True: pass"``,
at nice 0 like the recorder; killed at the phase's end). Printed per phase:

- the recorder's resident set (/proc/PID/statm, every ``--sample`` s): first, last and least-squares slope, MiB/min;
- its backlog: from the recording read back, the age at receipt (``log_time - publish_time``, the same host clock,
  ms) of each sim/state published in the phase's last half, median and max. A message waits that long in the queues in front of
  the recorder's receive (ZeroMQ's pipe, the sockets' buffers, the publisher's pipe); the backlog in MiB is that age
  times the bytes per second received. A growing age with a growing RSS is a queue; a flat age with a growing RSS
  is memory kept by the recorder itself;
- its status's ``backlog`` (recorders before the bound have none), asked every sample: the most held (MiB) and
  at the phase's end the drops by reason, and the seq gaps.

The load (/proc/loadavg) is printed with each phase: the machine is shared. Not a test: it takes minutes.

``--queued-cost BYTES [--rate HZ]``: instead, what a received message of about BYTES costs (the resident set of
this process per message, for 84 MB of them, at most 200 000, or 10 s of them at HZ, published by a subprocess):
waiting in ZeroMQ's receive pipe (hil/recording/recorder.py, HWM_MESSAGE_BYTES), and queued as the recorder queues
it (its payload's bytes, the topic's bytes, the receipt time, the list slots: HELD_MESSAGE_BYTES). 2100, a state,
and 120, a hw/status; one size per run, so that neither reuses the other's freed memory. A burst packs several
messages in each of ZeroMQ's receive buffers; at a rate (the live loop's case) each message has one of its own.

``--held-back MIB [--publishers 2] [--flood 64]``: instead, a real `mms record --max-backlog MIB` frozen (SIGSTOP)
while each publisher queues FLOOD MiB of 2.1 kB states for it, then thawed: its base, its peak resident set and the
most its own queue held.

Usage: python benchmarks/bench_recorder_memory.py [--phase 90] [--warmup 20] [--hogs 1] [--record-args "..."]
       python benchmarks/bench_recorder_memory.py --queued-cost 2100 [--rate 2000]
       python benchmarks/bench_recorder_memory.py --held-back 8 [--publishers 1] [--record-args "--hwm 1"]
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench_soak import loop_files, rss_mib  # noqa: E402
from hil.experiment.demo import RIGS  # noqa: E402
from hil.experiment.supervisor import Supervisor, mms_argv  # noqa: E402
from hil.recording.mcap_io import read_recording  # noqa: E402
from hil.testing import read_process, request, wait_for  # noqa: E402
from sim.network import load_endpoints, write_loopback_network  # noqa: E402

HOG = [sys.executable, "-c", "while True: pass"]
#: how long the recorder may take to stop, s: it writes its backlog first (a recorder before the bound, seconds
#: behind on a loaded machine, outlived the supervisor's 5 s and was killed, its file cut at its last flush)
RECORDER_STOP_GRACE_S = 60.0
#: how long a status request may take on a loaded machine, s
STATUS_TIMEOUT_S = 5.0
#: ... and while sampling (a late answer is a missed sample)
SAMPLE_STATUS_TIMEOUT_S = 0.5
MIB = 1024 * 1024
NS_PER_MS = 1e6


def slope_mib_per_min(samples: list[tuple[float, float]]) -> float:
    """Least-squares slope of (time s, RSS MiB) samples, MiB/min (nan below three samples)."""
    if len(samples) < 3:
        return float("nan")
    t, rss = np.array(samples).T
    return float(np.polyfit(t, rss, 1)[0] * 60.0)


def status(endpoint: str, timeout_s: float = STATUS_TIMEOUT_S) -> dict:
    try:
        return request(endpoint, "status", timeout_s)
    except Exception as exc:  # a recorder too busy to answer in time is a figure too, not an abort
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}


def ages_at_receipt(recording: Path) -> tuple[np.ndarray, np.ndarray, float]:
    """sim/state's (publish wall clock ns, age at receipt ms) and the bytes per second received overall; read past
    a truncated end (a recorder killed at the stop: its file ends at its last flush)."""
    raw = read_recording(recording)
    total = sum(len(message[2]) for messages in raw.messages.values() for message in messages)
    states = np.array([(log_time, publish_time) for log_time, publish_time, _ in raw.messages.get("sim/state", [])],
                      dtype=np.int64).reshape(-1, 2)
    span_s = max((states[-1, 0] - states[0, 0]) / 1e9, 1e-9) if len(states) else 1.0
    return states[:, 1], (states[:, 0] - states[:, 1]) / NS_PER_MS, total / span_s


#: a publisher of COUNT messages of SIZE bytes of padding to ENDPOINT at RATE per second (0: as fast as it can),
#: after a pause for the subscription
PUBLISHER = """
import sys, time, msgpack, zmq
endpoint, count, size, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
pub = zmq.Context().socket(zmq.PUB)
pub.setsockopt(zmq.SNDHWM, 0)
pub.connect(endpoint)
time.sleep(0.5)
payload = msgpack.packb({"seq": 1, "padding": b"a" * size})
begin = time.monotonic()
for k in range(count):
    pub.send_multipart([b"hw/status", payload])
    if rate:
        time.sleep(max(0.0, begin + (k + 1) / rate - time.monotonic()))
time.sleep(600)
"""


#: payload bytes and most messages of a --queued-cost run
QUEUED_COST_BYTES = 84_000_000
QUEUED_COST_MESSAGES_MAX = 200_000
#: ... and of a paced one (--rate): what it publishes in at most this long, s
QUEUED_COST_PACED_S = 10.0
#: how long ZeroMQ's I/O thread is given to take the last messages off the socket, s
QUEUED_COST_SETTLE_S = 1.5


def queued_cost(count: int, size: int, rate_hz: float) -> None:
    """``count`` messages of ``size`` bytes of padding published at ``rate_hz`` (0: a burst): print the resident set
    of this process per message while they wait in ZeroMQ's receive pipe (none taken yet: HWM_MESSAGE_BYTES), then
    once all are taken off the socket and queued as the recorder queues them (the payload copied into a bytes object,
    the topic's bytes, the receipt time, the measured length, the list slots; ZeroMQ's pipe then empty:
    HELD_MESSAGE_BYTES). A paced publisher makes ZeroMQ's I/O thread read one message at a time: each message then
    keeps a receive buffer of its own while it is in the pipe (8 KiB and its reference counters, the touched pages)."""
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    publisher = subprocess.Popen([sys.executable, "-c", PUBLISHER, f"tcp://127.0.0.1:{port}", str(count), str(size),
                                  str(rate_hz)])
    topics, payloads, log_times, lengths = [], [], [], []
    before = rss_mib(os.getpid())
    try:
        if not sub.poll(10_000):    # the first message: the pipe is attached (on a call of this thread), then wait
            raise RuntimeError("the publisher sent nothing for 10 s")
        time.sleep((count / rate_hz if rate_hz else 0.0) + QUEUED_COST_SETTLE_S)
        in_pipe = rss_mib(os.getpid())
        while len(payloads) < count and sub.poll(1_000):
            topic = sub.recv(copy=False)
            log_times.append(time.time_ns())
            payload = sub.recv(copy=False)
            topics.append(topic.bytes)
            payloads.append(payload.bytes)
            lengths.append(len(payload))
    finally:
        publisher.kill()
        publisher.wait()
        sub.close(0)
    received = max(len(payloads), 1)
    queued = (rss_mib(os.getpid()) - before) * MIB / received
    piped = (in_pipe - before) * MIB / received
    payload_bytes = lengths[0] if lengths else 0
    print(f"{len(payloads)} messages of {payload_bytes} B, {f'{rate_hz:g}/s' if rate_hz else 'a burst'}: resident set "
          f"per message in ZeroMQ's pipe {piped:.0f} B, queued as the recorder queues them {queued:.0f} B "
          f"({queued - payload_bytes:.0f} B beyond the payload); load "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


#: the state payload of a --held-back flood, bytes (about a flapper sim/state)
HELD_BACK_PAYLOAD_BYTES = 2100
#: the topic each publisher floods (the recorder takes any topic; the endpoint is what matters)
HELD_BACK_TOPICS = {"sim_pub": b"sim/state", "driver_pub": b"hw/telemetry"}


def _status_kib(pid: int, name: str) -> int:
    """A /proc/PID/status memory field (VmRSS, VmHWM), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {name} in /proc/{pid}/status")


def held_back(bound_mib: float, publishers: int, flood_mib: float, record_args: list[str]) -> None:
    """A real `mms record --max-backlog bound_mib` frozen (SIGSTOP) while ``publishers`` PUB sockets (on the
    network's sim and driver endpoints) each queue ``flood_mib`` of 2.1 kB states for it, then thawed: its resident
    set before (the base), its peak (VmHWM) growth above it, and the most its own queue held (the status's
    ``backlog.peak_bytes``); what ZeroMQ's pipes held is the growth beyond the own queue, the write batch and the
    open chunk (compare a run with ``--record-args "--hwm 1"``)."""
    with tempfile.TemporaryDirectory() as folder:
        network = Path(folder) / "network.toml"
        endpoints = write_loopback_network(network)
        context = zmq.Context()
        pubs = {}
        for name in list(HELD_BACK_TOPICS)[:publishers]:
            pub = pubs[name] = context.socket(zmq.PUB)
            pub.setsockopt(zmq.SNDHWM, 0)
            pub.setsockopt(zmq.LINGER, 0)
            pub.bind(endpoints[name])
        control = endpoints["recorder_control"]
        proc = subprocess.Popen(mms_argv("record", "--network", str(network), "--out", f"{folder}/held.mcap",
                                         "--quiet", "--max-backlog", f"{bound_mib:g}", *record_args),
                                cwd=REPO)
        count = int(flood_mib * MIB / HELD_BACK_PAYLOAD_BYTES)
        padding = b"a" * (HELD_BACK_PAYLOAD_BYTES - 40)
        try:
            def subscribed() -> bool:
                for name, pub in pubs.items():
                    pub.send_multipart([HELD_BACK_TOPICS[name] + b"/warmup",
                                        msgpack.packb({"seq": 0, "stamp_ns": 1})])
                topics = status(control, SAMPLE_STATUS_TIMEOUT_S).get("topics", {})
                return all(HELD_BACK_TOPICS[name].decode() + "/warmup" in topics for name in pubs)
            wait_for(subscribed, 30.0, 0.1, "the recorder subscribed")
            proc.send_signal(signal.SIGSTOP)
            wait_for(lambda: read_process(proc.pid).state == "T", 10.0, 0.01, "the recorder stopped")
            base_kib = _status_kib(proc.pid, "VmRSS")
            for seq in range(count):
                payload = msgpack.packb({"seq": seq, "stamp_ns": seq + 1, "padding": padding})
                for name, pub in pubs.items():
                    pub.send_multipart([HELD_BACK_TOPICS[name], payload])
            proc.send_signal(signal.SIGCONT)

            def taken() -> dict | None:
                reply = status(control, SAMPLE_STATUS_TIMEOUT_S)
                topics = reply.get("topics", {})
                done = all(topics.get(HELD_BACK_TOPICS[name].decode(), {}).get("messages", 0)
                           + sum(topics.get(HELD_BACK_TOPICS[name].decode(), {}).get("dropped", {}).values())
                           >= count for name in pubs)
                return reply if done else None
            reply = wait_for(taken, 120.0, 0.1, "the floods taken or dropped")
            peak_kib = _status_kib(proc.pid, "VmHWM")
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
            context.destroy(0)
    backlog = reply["backlog"]
    growth = (peak_kib - base_kib) / 1024
    print(f"--max-backlog {bound_mib:g} MiB, {publishers} publisher(s) x {count} states ({flood_mib:g} MiB), "
          f"{' '.join(record_args) or 'no other options'}: base {base_kib / 1024:.1f} MiB, peak {peak_kib / 1024:.1f}"
          f" MiB, growth {growth:.1f} MiB ({growth / bound_mib:.2f} x the bound), own queue peak "
          f"{backlog['peak_bytes'] / MIB:.1f} MiB, dropped {backlog['dropped']}; load "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase", type=float, default=90.0, help="length of each phase, s (default 90)")
    parser.add_argument("--warmup", type=float, default=20.0, help="start-up not measured, s (default 20)")
    parser.add_argument("--sample", type=float, default=1.0, help="RSS and status sampling period, s (default 1)")
    parser.add_argument("--hogs", type=int, default=1, help="busy loops in the second phase (default 1)")
    parser.add_argument("--record-args", default="", help="extra `mms record` options, one shell-quoted string")
    parser.add_argument("--held-back", type=float, metavar="MIB",
                        help="measure a frozen recorder's peak under floods with --max-backlog MIB instead")
    parser.add_argument("--publishers", type=int, default=2, choices=(1, 2),
                        help="with --held-back: floods on the sim's endpoint only (1) or the driver's too (2)")
    parser.add_argument("--flood", type=float, default=64.0, metavar="MIB",
                        help="with --held-back: payload each publisher queues, MiB (default 64)")
    parser.add_argument("--queued-cost", type=int, metavar="BYTES",
                        help="measure what a queued message of about BYTES costs instead (resident set per message)")
    parser.add_argument("--rate", type=float, default=0.0, metavar="HZ",
                        help="with --queued-cost: messages per second (default 0: a burst)")
    args = parser.parse_args()
    if args.held_back:
        held_back(args.held_back, args.publishers, args.flood, shlex.split(args.record_args))
        return 0
    if args.queued_cost:
        count = min(QUEUED_COST_MESSAGES_MAX, QUEUED_COST_BYTES // args.queued_cost)
        if args.rate:
            count = min(count, int(args.rate * QUEUED_COST_PACED_S))
        queued_cost(count, args.queued_cost, args.rate)
        return 0
    rig = RIGS["flapper"]
    with tempfile.TemporaryDirectory() as folder:
        run = Path(folder)
        network, robot = loop_files(run)
        control = load_endpoints(network).recorder_control
        recording = run / "memory.mcap"
        supervisor = Supervisor(run / "logs", say=lambda text: print(f"[memory] {text}", flush=True))
        supervisor.start("serve", mms_argv("serve", str(robot), "--network", str(network)))
        supervisor.start("record", mms_argv("record", "--out", str(recording), "--network", str(network), "--robot",
                                            str(robot), "--rig", str(rig.rig), "--quiet",
                                            *shlex.split(args.record_args)))
        supervisor.children["record"].stop_grace_s = RECORDER_STOP_GRACE_S
        supervisor.start("drive", mms_argv("drive", "--rig", str(rig.rig), "--emulate", "--network", str(network),
                                           "--autostart", "--emulator-args", "--plant kinematic"))
        phases = [("idle", 0), (f"{args.hogs} hog(s)", args.hogs)]
        rss: dict[str, list[tuple[float, float]]] = {}
        statuses: dict[str, dict] = {}
        loads: dict[str, str] = {}
        most_held: dict[str, int] = {}
        bounds: dict[str, tuple[int, int]] = {}        # phase -> (begin, end) wall clock, ns
        hogs: list[subprocess.Popen] = []
        started = time.monotonic()
        try:
            supervisor.wait(args.warmup)
            for name, count in phases:
                hogs = [subprocess.Popen(HOG) for _ in range(count)]
                begin, begin_ns = time.monotonic() - started, time.time_ns()
                while (now := time.monotonic() - started) < begin + args.phase:
                    supervisor.wait(args.sample)
                    if (resident := rss_mib(supervisor.children["record"].pid)) is not None:
                        rss.setdefault(name, []).append((now, resident))
                    held = status(control, SAMPLE_STATUS_TIMEOUT_S).get("backlog", {}).get("held_bytes", 0)
                    most_held[name] = max(most_held.get(name, 0), held)
                    print(f"\r[memory] {name}: {now - begin:5.0f} / {args.phase:g} s, recorder {resident:7.1f} MiB",
                          end="", flush=True)
                print()
                statuses[name] = status(control)
                loads[name] = Path("/proc/loadavg").read_text().split(" ", 3)[:3]
                bounds[name] = (begin_ns, time.time_ns())
                for hog in hogs:
                    hog.kill()
                    hog.wait()
                hogs = []
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
            supervisor.stop_all(["drive", "serve", "record"])
        published_ns, age_ms, rate = ages_at_receipt(recording)
        print(f"\nrecorder RSS and backlog per phase (the recording's receive rate {rate / MIB:.2f} MiB/s)")
        print(f"{'phase':10s} {'load':>16s} {'first MiB':>10s} {'last MiB':>9s} {'MiB/min':>8s} {'age p50 ms':>11s} "
              f"{'age max ms':>11s} {'held max MiB':>12s}  status backlog, gaps")
        for name, _ in phases:
            samples = rss.get(name, [])
            begin, end = bounds[name]
            late = (published_ns >= (begin + end) // 2) & (published_ns < end)
            ages = age_ms[late] if late.any() else np.array([np.nan])
            reply = statuses.get(name, {})
            gaps = {topic: t["gaps"] for topic, t in reply.get("topics", {}).items() if t.get("gaps")}
            print(f"{name:10s} {' '.join(loads[name]):>16s} {samples[0][1]:10.1f} {samples[-1][1]:9.1f} "
                  f"{slope_mib_per_min(samples):+8.2f} {np.median(ages):11.1f} {ages.max():11.1f} "
                  f"{most_held.get(name, 0) / MIB:12.1f}  "
                  f"{json.dumps(reply.get('backlog', reply.get('error', 'none')))}, gaps {gaps or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
