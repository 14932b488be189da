"""Recorder cost: CPU per message of `mms record` against a raw pyzmq receive loop, same run (issues 8, 25).

A publisher in this process sends ``--messages`` schema-valid messages as fast as it can over a real ZeroMQ PUB
socket to a raw pyzmq receive loop (a subprocess that polls, receives each message with ``recv_multipart`` and only
counts: the baseline), then to a real `mms record` subprocess, and again, ``--repeats`` times, alternating (raw,
recorder, raw, recorder...), so that a change in the machine's load falls on both alike; then the same for the other
payload size. Two payloads: hw/status (140 B, a nested map) and a sim/state of a 32-joint robot (2.1 kB).

The figure of merit is the ratio of the raw loop's CPU time per message to the recorder's, pair by pair (each
receiver's process, all threads: user + system time, from /proc for the recorder, ``time.process_time`` for the
raw loop), printed as the median over the pairs with its spread (min-max); the recorder's includes validating,
counting and writing the messages, which it does a 4 MiB batch at a time and at each flush (every 0.5 s; the
recorder's CPU is read once its status counts every message, so the last batch is in it). Receive rates (msg/s over each receiver's
first to last message; the recorder's from the ``log_time`` span of the MCAP file it wrote, read back with the mcap
reader) and drops (``seq`` gaps plus missing messages) are printed too: the publisher is a Python loop on the same
two cores, so they follow the machine's load more than the receivers.

Usage: python benchmarks/bench_recorder.py [--messages 200000] [--repeats 5]
"""
from __future__ import annotations

import argparse
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import msgpack
import zmq
from mcap.reader import make_reader

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

#: `mms record` of this checkout (not an installed one)
RECORD = [sys.executable, "-m", "hil.cli", "record"]
RECORDER_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH"))))}
WARMUP_TOPIC = "bench/warmup"
DEADLINE_S = 120.0

RAW_RECEIVER = r"""
import sys, time, zmq
endpoint, total = sys.argv[1], int(sys.argv[2])
sub = zmq.Context().socket(zmq.SUB)
sub.setsockopt(zmq.RCVHWM, 10_000_000)
sub.setsockopt(zmq.SUBSCRIBE, b"")
sub.connect(endpoint)
count = nbytes = 0
first = last = None
cpu0 = None
announced = False
deadline = time.monotonic() + 120
while count < total and time.monotonic() < deadline:
    if not sub.poll(1000):
        continue
    frames = sub.recv_multipart()
    if frames[0] == b"bench/warmup":
        if not announced:
            print("ready", flush=True)
            announced = True
        continue
    now = time.time_ns()
    cpu0 = cpu0 if cpu0 is not None else time.process_time()
    first = first or now
    last = now
    count += 1
    nbytes += len(frames[1])
print(count, nbytes, first, last, time.process_time() - cpu0, flush=True)
"""
#: clock ticks per second of /proc/PID/stat's utime and stime
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far, s (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def state_payload(seq: int, n_joints: int = 32) -> dict:
    values = [0.123456789 * (i + 1) for i in range(n_joints)]
    return {"v": 1, "seq": seq, "t": seq * 1e-3, "stamp_ns": time.time_ns(),
            "joint_names": [f"joint_{i}" for i in range(n_joints)], "actuated": [True] * n_joints,
            "q": values, "qd": values, "qdd": values, "tau": values, "strain": values,
            "base_pos": [0.0, 0.0, 0.0], "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6,
            "base_wrench": [0.0] * 6, "ext_wrench": [0.0] * 6}


def status_payload(seq: int) -> dict:
    return {"v": 1, "seq": seq, "stamp_ns": time.time_ns(), "lifecycle": "active", "rig": "bench-rig",
            "estop": False, "watchdog": "track",
            "link": {"state": "up", "frames_ok": seq, "crc_errors": 0, "seq_gaps": 0, "reconnects": 0}}


def publish(pub, topic: str, make, total: int, ready) -> float:
    """Warm up until ``ready()`` (slow joiner), then send ``total`` messages as fast as possible."""
    deadline = time.monotonic() + DEADLINE_S
    while not ready():
        pub.send_multipart([WARMUP_TOPIC.encode(), msgpack.packb({"v": 1, "seq": 0, "stamp_ns": time.time_ns()})])
        time.sleep(0.01)
        if time.monotonic() > deadline:
            raise RuntimeError("receiver never connected")
    topic_bytes = topic.encode()
    start = time.perf_counter()
    for seq in range(total):
        pub.send_multipart([topic_bytes, msgpack.packb(make(seq), use_bin_type=True)])
    return total / (time.perf_counter() - start)


def run_raw(endpoint: str, pub, topic: str, make, total: int) -> dict:
    proc = subprocess.Popen([sys.executable, "-c", RAW_RECEIVER, endpoint, str(total)], stdout=subprocess.PIPE,
                            text=True)
    line = []

    def ready():
        if not line:
            if select.select([proc.stdout], [], [], 0)[0]:
                line.append(proc.stdout.readline().strip())
        return bool(line)

    publish_rate = publish(pub, topic, make, total, ready)
    out, _ = proc.communicate(timeout=DEADLINE_S)
    fields = out.split()
    count, nbytes, first, last = (int(x) for x in fields[:4])
    seconds = (last - first) / 1e9
    return {"received": count, "drops": total - count, "msg_s": count / seconds, "mb_s": nbytes / seconds / 1e6,
            "publish_msg_s": publish_rate, "cpu_us": float(fields[4]) / count * 1e6}


def request(endpoint: str, message: dict) -> dict | None:
    req = zmq.Context.instance().socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.setsockopt(zmq.RCVTIMEO, 2000)
    req.connect(endpoint)
    try:
        req.send(msgpack.packb(message))
        return msgpack.unpackb(req.recv(), raw=False)
    except zmq.Again:
        return None
    finally:
        req.close()


def run_recorder(network: Path, control: str, pub, topic: str, make, total: int, out: Path) -> dict:
    proc = subprocess.Popen([*RECORD, "--network", str(network), "--out", str(out), "--quiet"],
                            cwd=REPO, env=RECORDER_ENV, stderr=subprocess.PIPE, text=True)

    cpu_at_ready = []

    def ready():
        reply = request(control, {"cmd": "status"})
        if reply and WARMUP_TOPIC in reply.get("topics", {}):
            cpu_at_ready.append(process_cpu_s(proc.pid))      # the publisher's burst starts now
            return True
        return False

    publish_rate = publish(pub, topic, make, total, ready)
    cpu0 = cpu_at_ready[0]
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        reply = request(control, {"cmd": "status"}) or {}
        if reply.get("topics", {}).get(topic, {}).get("messages", 0) >= total:
            break
        time.sleep(0.1)
    cpu = process_cpu_s(proc.pid) - cpu0
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=DEADLINE_S)
    log_times, seqs, nbytes = [], [], 0
    with open(out, "rb") as handle:
        for _schema, _channel, message in make_reader(handle).iter_messages(topics=[topic], log_time_order=False):
            log_times.append(message.log_time)
            seqs.append(message.sequence)
            nbytes += len(message.data)
    gaps = sum(b - a - 1 for a, b in zip(seqs, seqs[1:]))
    seconds = (log_times[-1] - log_times[0]) / 1e9
    return {"received": len(seqs), "drops": total - len(seqs) + gaps, "msg_s": len(seqs) / seconds,
            "mb_s": nbytes / seconds / 1e6, "publish_msg_s": publish_rate, "file_mb": out.stat().st_size / 1e6,
            "cpu_us": cpu / len(seqs) * 1e6}


def spread(values: list[float]) -> str:
    """median (min-max) of ``values``."""
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000, help="messages per run (default 200000)")
    parser.add_argument("--repeats", type=int, default=5,
                        help="raw/recorder pairs per payload size, run alternately (default 5)")
    parser.add_argument("--payloads", nargs="+", choices=("hw/status", "sim/state"), default=["hw/status", "sim/state"],
                        help="payload sizes to run (default both)")
    args = parser.parse_args()
    if args.messages < 2 or args.repeats < 1:
        parser.error("--messages must be at least 2 and --repeats at least 1")
    ports = [free_port() for _ in range(3)]
    sim_pub, driver_pub, control = (f"tcp://127.0.0.1:{p}" for p in ports)
    context = zmq.Context.instance()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 10_000_000)
    pub.bind(sim_pub)
    makers = {"hw/status": status_payload, "sim/state": state_payload}
    print(f"load average before: {Path('/proc/loadavg').read_text().strip()}")
    with tempfile.TemporaryDirectory() as folder:
        network = Path(folder) / "network.toml"
        network.write_text(f'[sim]\npub = "{sim_pub}"\n[driver]\npub = "{driver_pub}"\n'
                           f'[recorder]\ncontrol = "{control}"\n')
        print(f"{args.messages} messages per run, {args.repeats} raw/recorder pairs per payload, alternating")
        print(f"{'payload':<10} {'bytes':>6} {'run':>3} {'receiver':<10} {'msg/s':>9} {'MB/s':>7} {'drops':>6} "
              f"{'pub msg/s':>10} {'CPU us/msg':>10} {'CPU ratio':>9}")
        summary = []
        for topic in args.payloads:
            make = makers[topic]
            size = len(msgpack.packb(make(0)))
            out = Path(folder) / f"{topic.replace('/', '_')}.mcap"
            ratios, raw_cpu, rec_cpu = [], [], []
            for run in range(1, args.repeats + 1):
                raw = run_raw(sim_pub, pub, topic, make, args.messages)
                out.unlink(missing_ok=True)
                rec = run_recorder(network, control, pub, topic, make, args.messages, out)
                ratios.append(raw["cpu_us"] / rec["cpu_us"])
                raw_cpu.append(raw["cpu_us"])
                rec_cpu.append(rec["cpu_us"])
                for name, result, ratio in (("raw pyzmq", raw, ""), ("mms record", rec, f"{ratios[-1]:.2f}")):
                    print(f"{topic:<10} {size:>6} {run:>3} {name:<10} {result['msg_s']:>9.0f} {result['mb_s']:>7.1f} "
                          f"{result['drops']:>6} {result['publish_msg_s']:>10.0f} {result['cpu_us']:>10.1f} "
                          f"{ratio:>9}", flush=True)
            print(f"{'':<10} {'':>6} {'':>3} file {rec['file_mb']:.1f} MB (zstd chunks) for "
                  f"{rec['received'] * size / 1e6:.1f} MB of payloads")
            summary.append((topic, size, ratios, raw_cpu, rec_cpu))
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    print("CPU ratio raw/recorder (1: the recorder costs what receiving alone costs), median (min-max) over the pairs:")
    for topic, size, ratios, raw_cpu, rec_cpu in summary:
        print(f"  {topic} ({size} B): ratio {spread(ratios)}; CPU us/msg raw {spread(raw_cpu)}, "
              f"mms record {spread(rec_cpu)}")
    pub.close(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
