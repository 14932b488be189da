"""Publish-to-receive latency of sim/state from `mms serve`, against raw pyzmq PUB/SUB in the same run.

Two publisher processes run side by side on loopback for the same seconds, both paced at the same rate:
- `mms serve CONFIG --mode realtime` (the real server, its real sim/state messages);
- a bare pyzmq PUB that sends [topic, msgpack {"stamp_ns", pad}] padded to the size of the server's
  sim/state payload, paced on the same absolute schedule.
One subscriber (this process) polls both sockets and takes, for every message, ``time.time_ns()`` at receipt
minus the publisher's ``stamp_ns`` (the same wall clock: one machine). Reported: p50, p99, max in
microseconds and the ratios server / raw (issue 4 target: p99 within 2x of raw pyzmq).

    .venv/bin/python benchmarks/bench_server.py [--config configs/robots/pendulum.toml] [--seconds 10]
"""
from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import msgpack
import numpy as np
import zmq
from tqdm import tqdm

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 180.0      # a cold numba cache compiles the simulator's kernels at start
WARMUP_S = 1.0               # dropped from both series: connection set-up, first allocations

RAW_PUBLISHER = textwrap.dedent("""
    import sys, time, msgpack, zmq
    endpoint, rate, size, seconds = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 10000)
    pub.bind(endpoint)
    empty = len(msgpack.packb({"seq": 0, "stamp_ns": time.time_ns(), "pad": b""}, use_bin_type=True))
    pad = b"x" * max(0, size - empty - 2)          # bin8/bin16 header: 2-3 bytes
    period = 1.0 / rate
    start = time.perf_counter()
    k = 0
    while time.perf_counter() - start < seconds:
        k += 1
        delay = start + k * period - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        payload = {"seq": k, "stamp_ns": time.time_ns(), "pad": pad}
        pub.send_multipart([b"raw/state", msgpack.packb(payload, use_bin_type=True)])
    pub.close(linger=1000)
    context.term()
""")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _percentiles(latencies_us: np.ndarray) -> dict[str, float]:
    return {"n": len(latencies_us), "p50": float(np.percentile(latencies_us, 50)),
            "p99": float(np.percentile(latencies_us, 99)), "max": float(latencies_us.max())}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "configs" / "robots" / "pendulum.toml",
                        help="robot TOML served (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=1000.0, help="publish rate, Hz (default: %(default)g)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds (default: %(default)g)")
    args = parser.parse_args()

    mms = Path(sys.executable).with_name("mms")
    mms_command = [str(mms)] if mms.exists() else [sys.executable, "-m", "hil.cli"]
    context = zmq.Context()
    with tempfile.TemporaryDirectory() as tmp:
        sim_pub, sim_control = f"tcp://127.0.0.1:{_free_port()}", f"tcp://127.0.0.1:{_free_port()}"
        raw_pub = f"tcp://127.0.0.1:{_free_port()}"
        network = Path(tmp) / "network.toml"
        network.write_text(f'[sim]\npub = "{sim_pub}"\ncontrol = "{sim_control}"\n')
        server = subprocess.Popen([*mms_command, "serve", str(args.config), "--network", str(network),
                                   "--mode", "realtime", "--rate", str(args.rate), "--idle"],
                                  cwd=ROOT, stderr=subprocess.PIPE, text=True)
        raw = None
        try:
            control = context.socket(zmq.REQ)
            control.setsockopt(zmq.LINGER, 0)
            control.connect(sim_control)
            control.send(msgpack.packb({"cmd": "get", "what": "status"}))
            if not control.poll(int(START_TIMEOUT_S * 1000)):
                raise SystemExit(f"mms serve did not answer within {START_TIMEOUT_S} s")
            control.recv()
            sim_sub = context.socket(zmq.SUB)
            sim_sub.setsockopt(zmq.RCVHWM, 1_000_000)
            sim_sub.setsockopt(zmq.SUBSCRIBE, b"sim/state")
            sim_sub.connect(sim_pub)
            control.send(msgpack.packb({"cmd": "start"}))
            control.recv()
            while True:   # the size of an ordinary state (the joint names ride on one state per second)
                if not sim_sub.poll(10_000):
                    raise SystemExit("no sim/state from mms serve")
                frames = sim_sub.recv_multipart()
                if "joint_names" not in msgpack.unpackb(frames[1], raw=False):
                    break
            size = len(frames[1])
            print(f"sim/state payload: {size} bytes ({args.config.name}); {args.rate:g} Hz for {args.seconds:g} s "
                  f"(+{WARMUP_S:g} s warm-up), both publishers side by side")

            raw_sub = context.socket(zmq.SUB)
            raw_sub.setsockopt(zmq.RCVHWM, 1_000_000)
            raw_sub.setsockopt(zmq.SUBSCRIBE, b"raw/state")
            raw_sub.connect(raw_pub)
            raw = subprocess.Popen([sys.executable, "-c", RAW_PUBLISHER, raw_pub, str(args.rate), str(size),
                                    str(args.seconds + WARMUP_S + 2.0)], cwd=ROOT)
            poller = zmq.Poller()
            poller.register(sim_sub, zmq.POLLIN)
            poller.register(raw_sub, zmq.POLLIN)
            latencies: dict[str, list[int]] = {"mms serve": [], "raw pyzmq": []}
            sizes = {"mms serve": size, "raw pyzmq": 0}
            sockets = {sim_sub: "mms serve", raw_sub: "raw pyzmq"}
            # start the clock once the raw publisher is connected, then warm up, then measure
            if not raw_sub.poll(int(START_TIMEOUT_S * 1000)):
                raise SystemExit("no message from the raw publisher")
            start = time.perf_counter()
            measuring = False
            with tqdm(total=int(args.seconds), unit="s", desc="measuring") as bar:
                while (elapsed := time.perf_counter() - start) < args.seconds + WARMUP_S:
                    if not measuring and elapsed >= WARMUP_S:
                        measuring = True
                        for series in latencies.values():
                            series.clear()
                    for sock, _ in poller.poll(100):
                        while True:
                            try:
                                frames = sock.recv_multipart(zmq.NOBLOCK)
                            except zmq.Again:
                                break
                            received_ns = time.time_ns()
                            payload = msgpack.unpackb(frames[1], raw=False)
                            name = sockets[sock]
                            latencies[name].append(received_ns - payload["stamp_ns"])
                            sizes[name] = len(frames[1])
                    done = int(max(0.0, min(args.seconds, elapsed - WARMUP_S)))
                    if done > bar.n:
                        bar.update(done - bar.n)
            control.send(msgpack.packb({"cmd": "shutdown"}))
            control.poll(10_000)
        finally:
            if raw is not None:
                raw.wait(30)
            server.terminate()
            server.wait(30)
            context.destroy(linger=0)

    stats = {name: _percentiles(np.array(series, dtype=np.float64) * 1e-3) for name, series in latencies.items()}
    print(f"{'publisher':<10} {'bytes':>6} {'messages':>9} {'p50 us':>9} {'p99 us':>9} {'max us':>9}")
    for name, figures in stats.items():
        print(f"{name:<10} {sizes[name]:>6} {figures['n']:>9} {figures['p50']:>9.1f} {figures['p99']:>9.1f} "
              f"{figures['max']:>9.1f}")
    server_stats, raw_stats = stats["mms serve"], stats["raw pyzmq"]
    p50_ratio = server_stats["p50"] / raw_stats["p50"]
    p99_ratio = server_stats["p99"] / raw_stats["p99"]
    print(f"ratio mms serve / raw pyzmq: p50 {p50_ratio:.2f}x, p99 {p99_ratio:.2f}x (target p99 <= 2x: "
          f"{'met' if p99_ratio <= 2.0 else 'NOT met'}); load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
