"""Servo-driver latency: from a sim/state publish to the setpoint applied in the emulated firmware, and the same
without the serial hop (to the setpoint written to the port), in one run.

Processes: this script publishes sim/state at 1 kHz on a real ZeroMQ PUB socket (as `mms serve` does),
`mms drive --port PTY` runs at the rig's command rate (500 Hz for the flapper rig), and the emulator
(`mms emulate --applied-log FILE`: a JSON line per setpoint frame applied, docs/protocol.md) applies them.

- host hop: hw/command ``stamp_ns`` (taken right after the frame was written) minus the state's ``stamp_ns``;
- full: the emulator's applied time (its log's ``host_ns``) minus the state's ``stamp_ns`` (same host, same
  wall clock).
The host hop is the baseline; the serial hop is reported as the ratio full / host. Target: p99 <= 5 ms.
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import zmq
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from firmware_interface.pty_device import read_applied_log  # noqa: E402
from sim.messages import decode, encode  # noqa: E402

TARGET_P99_MS = 5.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def realtime(priority: int) -> None:
    """SCHED_FIFO for the calling thread (or the child between fork and exec); errors propagate."""
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))


def publish_states(endpoint: str, rate_hz: float, stop: threading.Event, rt_priority: int) -> None:
    if rt_priority:
        realtime(rt_priority)
    ctx = zmq.Context.instance()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(endpoint)
    period, seq = 1.0 / rate_hz, 0
    t0 = next_t = time.monotonic()
    while not stop.is_set():
        next_t += period
        delay = next_t - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = time.monotonic() - t0
        q = [0.6 * math.sin(2 * math.pi * 1.0 * t), 0.4 * math.sin(2 * math.pi * 0.7 * t)]
        pub.send_multipart(encode("sim/state", {
            "v": 1, "seq": seq, "t": t, "stamp_ns": time.time_ns(), "joint_names": ["stroke_r", "stroke_l"],
            "q": q, "qd": [0.0, 0.0], "qdd": [0.0, 0.0], "tau": [0.0, 0.0], "strain": [0.0, 0.0],
            "base_pos": [0.0] * 3, "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6,
            "base_wrench": [0.0] * 6, "ext_wrench": [0.0] * 6}))
        seq += 1
    pub.close(0)


def stats_ms(values_ns: np.ndarray) -> dict:
    v = values_ns / 1e6
    return {"n": int(v.size), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rig", default=str(ROOT / "configs" / "rigs" / "flapper_rig.toml"))
    parser.add_argument("--duration", type=float, default=20.0, help="measured seconds (default %(default)s)")
    parser.add_argument("--state-rate", type=float, default=1000.0, help="sim/state rate, Hz (default 1000)")
    parser.add_argument("--rt-priority", type=int, default=0,
                        help="SCHED_FIFO priority N for the driver (its --rt-priority), the emulator (which stands in "
                             "for a microcontroller that no other process competes with) and the state publisher "
                             "thread; default 0: the normal scheduler")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="bench_driver_"))
    ports = [free_port() for _ in range(4)]
    network = work / "network.toml"
    network.write_text(f'[sim]\npub = "tcp://127.0.0.1:{ports[0]}"\ncontrol = "tcp://127.0.0.1:{ports[1]}"\n'
                       f'[driver]\npub = "tcp://127.0.0.1:{ports[2]}"\ncontrol = "tcp://127.0.0.1:{ports[3]}"\n')
    applied_log = work / "applied.jsonl"
    emulator = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", args.rig,
                                 "--applied-log", str(applied_log)],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=ROOT,
                                preexec_fn=(lambda: realtime(args.rt_priority)) if args.rt_priority else None)
    port = emulator.stdout.readline().decode().strip()
    stop = threading.Event()
    publisher = threading.Thread(target=publish_states, args=(f"tcp://127.0.0.1:{ports[0]}", args.state_rate, stop,
                                                              args.rt_priority), daemon=True)
    publisher.start()
    driver = subprocess.Popen([sys.executable, "-m", "hil.cli", "drive", "--rig", args.rig, "--port", port,
                               "--network", str(network), "--autostart", "--rt-priority", str(args.rt_priority)],
                              stdout=subprocess.DEVNULL, stderr=(work / "drive.log").open("wb"), cwd=ROOT)
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.RCVHWM, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"hw/command")
    sub.setsockopt(zmq.SUBSCRIBE, b"hw/status")
    sub.connect(f"tcp://127.0.0.1:{ports[2]}")
    commands: dict[int, dict] = {}
    status = None
    try:
        # warm-up: until the driver tracks
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sub.poll(100):
                topic, payload = decode(sub.recv_multipart())
                if topic == "hw/command" and payload["mode"] == "track":
                    break
        else:
            raise SystemExit("the driver did not start tracking within 60 s; see " + str(work / "drive.log"))
        t_start = time.monotonic()
        with tqdm(total=int(args.duration), unit="s", desc="measuring", mininterval=1.0) as bar:
            while (elapsed := time.monotonic() - t_start) < args.duration:
                if int(elapsed) > bar.n:
                    bar.update(int(elapsed) - bar.n)
                if sub.poll(100):
                    while True:
                        try:
                            topic, payload = decode(sub.recv_multipart(zmq.NOBLOCK))
                        except zmq.Again:
                            break
                        if topic == "hw/command":
                            commands[payload["frame_seq"]] = payload
                        else:
                            status = payload
        t_end_ns = time.time_ns()
    finally:
        driver.send_signal(signal.SIGINT)
        driver.wait(30)
        stop.set()
        emulator.send_signal(signal.SIGTERM)
        emulator.wait(30)
        sub.close(0)
    applied = [r for r in read_applied_log(applied_log) if r["result"] == "applied"]
    host, full = [], []
    first_of_state = set()
    seen_states = set()
    for frame_seq in sorted(commands):
        c = commands[frame_seq]
        if c["mode"] == "track" and c["sim_seq"] not in seen_states:
            seen_states.add(c["sim_seq"])
            first_of_state.add(frame_seq)
    for a in applied:
        c = commands.get(a["seq"])
        # the first frame carrying each state: its latency (a state re-sent on a later tick measures its age)
        if c is None or a["seq"] not in first_of_state or a["host_ns"] > t_end_ns:
            continue
        host.append(c["stamp_ns"] - c["state_stamp_ns"])
        full.append(a["host_ns"] - c["state_stamp_ns"])
    host_ms, full_ms = stats_ms(np.array(host)), stats_ms(np.array(full))
    rate = len(commands) / args.duration
    load = open("/proc/loadavg").read().split()[0] if Path("/proc/loadavg").exists() else "?"
    print(f"\nservo driver latency, sim/state publish -> setpoint ({args.duration:.0f} s, state {args.state_rate:.0f} Hz, "
          f"commands {rate:.0f} Hz measured, driver rt-priority {args.rt_priority}, load average {load} on "
          f"{os.cpu_count()} cores)")
    print(f"{'path':<34}{'n':>7}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    for name, s in (("host hop: written to the port", host_ms), ("full: applied in the emulator", full_ms)):
        print(f"{name:<34}{s['n']:>7}{s['p50']:>9.3f}{s['p99']:>9.3f}{s['max']:>9.3f}")
    print(f"ratio full / host (the serial hop's cost): p50 {full_ms['p50'] / host_ms['p50']:.2f}x, "
          f"p99 {full_ms['p99'] / host_ms['p99']:.2f}x")
    if status is not None:
        print(f"driver's own figures (hw/status): state->send {status['latency_us']['state_to_send']}, "
              f"tick lateness {status['latency_us']['tick_late']}, overruns {status['latency_us']['overruns']}")
    verdict = "meets" if full_ms["p99"] <= TARGET_P99_MS else "MISSES"
    print(f"target p99 <= {TARGET_P99_MS} ms at {rate:.0f} Hz command rate: {verdict} ({full_ms['p99']:.2f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
