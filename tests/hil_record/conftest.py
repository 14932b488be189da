"""Shared pieces of the recorder/validation tests: free ports, a real publisher, real `mms` subprocesses."""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from hil import testing
from sim.messages import encode

REPO = Path(__file__).resolve().parents[2]
MMS = Path(sys.executable).parent / "mms"
#: generous deadline for anything that waits on another process (the test machine is shared and slow)
DEADLINE_S = 30.0
JOINTS = ["tail_yaw", "tail_pitch"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def network(tmp_path) -> dict[str, str]:
    """A network TOML on free loopback ports; returns the endpoints and the file path (key "path")."""
    ports = {name: free_port() for name in ("sim_pub", "sim_control", "driver_pub", "driver_control", "rec")}
    endpoints = {name: f"tcp://127.0.0.1:{port}" for name, port in ports.items()}
    path = tmp_path / "network.toml"
    path.write_text(
        f'[sim]\npub = "{endpoints["sim_pub"]}"\ncontrol = "{endpoints["sim_control"]}"\n'
        f'[driver]\npub = "{endpoints["driver_pub"]}"\ncontrol = "{endpoints["driver_control"]}"\n'
        f'[recorder]\ncontrol = "{endpoints["rec"]}"\n')
    return {**endpoints, "path": str(path)}


def sim_state(seq: int, t: float, q: list[float], strain: list[float] | None = None,
              base_wrench: list[float] | None = None) -> dict:
    n = len(q)
    return {"v": 1, "seq": seq, "t": t, "stamp_ns": time.time_ns(), "joint_names": JOINTS[:n],
            "actuated": [True] + [False] * (n - 1), "q": q, "qd": [0.0] * n, "qdd": [0.0] * n, "tau": [0.0] * n,
            "strain": strain if strain is not None else [0.0] * n, "base_pos": [0.0, 0.0, 0.0],
            "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6,
            "base_wrench": base_wrench if base_wrench is not None else [0.0] * 6, "ext_wrench": [0.0] * 6}


def sim_status(seq: int, t: float) -> dict:
    return {"v": 1, "seq": seq, "t": t, "stamp_ns": time.time_ns(), "mode": "realtime", "state": "running",
            "rtf": 1.0, "step_us": {"mean": 10.0, "p50": 9.0, "p99": 20.0, "max": 30.0}, "deadline_misses": 0,
            "state_rate_hz": 500.0, "robot": "test", "joint_names": JOINTS, "actuated": [True, False]}


def hw_status(seq: int) -> dict:
    return {"v": 1, "seq": seq, "stamp_ns": time.time_ns(), "lifecycle": "active", "rig": "test-rig",
            "estop": False, "watchdog": "track",
            "link": {"state": "up", "frames_ok": seq, "crc_errors": 0, "seq_gaps": 0, "reconnects": 0}}


def hw_command(seq: int, t: float, sim_seq: int, angle: float) -> dict:
    return {"v": 1, "seq": seq, "stamp_ns": time.time_ns(), "t": t, "sim_seq": sim_seq, "channels": ["tail"],
            "setpoint_rad": [angle], "setpoint_raw": [1500.0 + 636.62 * angle], "limited": [False], "mode": "track"}


def hw_telemetry(seq: int, device_us: list[int], servo: list[list[float]]) -> dict:
    now = time.time_ns()
    return {"v": 1, "seq": seq, "stamp_ns": now, "host_ns": now, "device_us": device_us,
            "servo_names": ["tail"], "servo_rad": servo, "strain_names": ["gauge"],
            "strain": [[0.001 * row[0]] for row in servo], "load_names": ["fx"], "load": [[0.0] for _ in servo]}


class Publisher:
    """Real PUB sockets on the sim and driver endpoints, publishing schema-valid traffic from a thread.

    ``sent[topic]`` lists ``(seq, stamp_ns)`` of what went out. ``skip_every``: every that many hw/status
    messages, the seq jumps by ``skip_by`` (a known number of gaps). ``malformed``: also sends two bad
    messages (3 frames, then a non-msgpack payload) on the sim socket every 50 sim/state messages.
    """

    def __init__(self, network: dict, rate_hz: float = 500.0, skip_every: int = 0, skip_by: int = 0,
                 malformed: bool = False):
        self.context = zmq.Context()
        self.sim = self.context.socket(zmq.PUB)
        self.sim.setsockopt(zmq.SNDHWM, 1_000_000)
        self.sim.bind(network["sim_pub"])
        self.driver = self.context.socket(zmq.PUB)
        self.driver.setsockopt(zmq.SNDHWM, 1_000_000)
        self.driver.bind(network["driver_pub"])
        self.rate_hz = rate_hz
        self.skip_every, self.skip_by, self.malformed = skip_every, skip_by, malformed
        self.sent: dict[str, list[tuple[int, int]]] = {}
        self.expected_gaps = 0
        self.stop_event = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        testing.stop_thread(self.stop_event, self.thread)
        self.sim.close(0)
        self.driver.close(0)
        self.context.term()

    def _send(self, socket_, topic: str, payload: dict) -> None:
        socket_.send_multipart(encode(topic, payload))
        with self.lock:
            self.sent.setdefault(topic, []).append((payload["seq"], payload["stamp_ns"]))

    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        start = time.monotonic()
        k = 0
        status_seq = 0
        device_us = 0
        while not self.stop_event.is_set():
            t = k * period
            q = [0.5 * math.sin(2 * math.pi * 2.0 * t), 0.1 * math.cos(2 * math.pi * 2.0 * t)]
            self._send(self.sim, "sim/state", sim_state(k, t, q))
            if k % 2 == 0:
                self._send(self.driver, "hw/command", hw_command(k // 2, t, k, q[0]))
            if k % 10 == 0:
                self._send(self.sim, "sim/status", sim_status(k // 10, t))
                self._send(self.driver, "hw/status", hw_status(status_seq))
                status_seq += 1
                if self.skip_every and (k // 10) % self.skip_every == self.skip_every - 1:
                    status_seq += self.skip_by
                    self.expected_gaps += self.skip_by
            if k % 5 == 4:
                samples = [device_us + 2000 * i for i in range(5)]
                device_us += 10_000
                self._send(self.driver, "hw/telemetry",
                           hw_telemetry(k // 5, samples, [[0.5 * math.sin(2 * math.pi * 2.0 * (t - 0.008 + 0.002 * i))]
                                                          for i in range(5)]))
            if self.malformed and k % 50 == 25:
                self.sim.send_multipart([b"sim/state", b"a", b"b"])
                self.sim.send_multipart([b"sim/state", b"\xc1\xc1 not msgpack"])
            k += 1
            delay = start + k * period - time.monotonic()
            if delay > 0:
                time.sleep(delay)


def mms(*args: str, **kwargs) -> subprocess.Popen:
    """A real `mms ...` subprocess from the repository root."""
    return subprocess.Popen([str(MMS), *args], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **kwargs)


def mms_run(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
    return subprocess.run([str(MMS), *args], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def request(endpoint: str, message: dict | bytes, timeout_s: float = 10.0) -> dict:
    """One REQ/REP exchange with a fresh socket (a timed-out REQ socket cannot be reused)."""
    context = zmq.Context.instance()
    req = context.socket(zmq.REQ)
    req.setsockopt(zmq.LINGER, 0)
    req.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    req.connect(endpoint)
    try:
        req.send(message if isinstance(message, bytes) else msgpack.packb(message))
        return msgpack.unpackb(req.recv(), raw=False)
    finally:
        req.close()


def wait_for(condition, what: str, deadline_s: float = DEADLINE_S, interval_s: float = 0.05):
    """Poll ``condition()`` until it returns something truthy (returned); fail with ``what`` after the deadline
    (:func:`hil.testing.wait_for`, in this folder's argument order)."""
    return testing.wait_for(condition, deadline_s, interval_s, what)


def status_when(endpoint: str, predicate, what: str) -> dict:
    def probe():
        try:
            reply = request(endpoint, {"cmd": "status"}, timeout_s=2.0)
        except zmq.Again:
            return None
        return reply if predicate(reply) else None
    return wait_for(probe, what)


def burst_publisher(context: zmq.Context, network: dict, endpoint: str = "sim_pub") -> zmq.Socket:
    """A PUB socket on the network's ``endpoint`` (the simulator's, or ``driver_pub``) that queues without limit (a
    burst test's publisher)."""
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(network[endpoint])
    return pub


def wait_subscribed(pub: zmq.Socket, network: dict, topic: str = "bench/warmup") -> None:
    """Publish a warm-up message on ``topic`` until the recorder's status lists it: its subscription is live (a
    topic of its own for each publisher)."""
    def subscribed():
        pub.send_multipart([topic.encode(), msgpack.packb({"v": 1, "seq": 0, "stamp_ns": 1})])
        try:
            reply = request(network["rec"], {"cmd": "status"}, timeout_s=2.0)
        except zmq.Again:       # still starting (a busy machine): ask again
            return False
        return topic in reply.get("topics", {})
    wait_for(subscribed, "the recorder subscribed")


def stop_process(proc: subprocess.Popen, sig=signal.SIGTERM, timeout: float = DEADLINE_S) -> tuple[str, str]:
    if proc.poll() is None:
        proc.send_signal(sig)
    try:
        return proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        return proc.communicate()


@pytest.fixture
def kit():
    """This module's helpers (test modules cannot import a conftest under --import-mode=importlib)."""
    return sys.modules[__name__]


#: a rig in the format of configs/rigs (firmware_interface/rigs/mcu.py): one servo on tail_yaw through a 2:1 gain,
#: two strain gauges reading q (physics plant sources) and a load cell reading -base_wrench fx
TEST_RIG = """
[rig]
name = "synthetic-rig"
protocol_version = 1
[serial]
port = "/dev/null"
baud = 230400
[rates]
command_hz = 500
telemetry_hz = 500
samples_per_frame = 10
[watchdog]
timeout_s = 0.2
[[servos]]
name = "tail"
unit = "us"
center = 1500.0
gain = 636.62
direction = 1
min_raw = 800.0
max_raw = 2200.0
min_rad = -1.047
max_rad = 1.047
max_rate_rad_s = 5.0
[[joints]]
joint = "tail_yaw"
servo = "tail"
direction = 1
gain = 2.0
offset_rad = 0.05
[[strain]]
name = "fin_ray_left"
unit = "strain"
gain = 1e-8
[[load]]
name = "thrust"
unit = "N"
gain = 1e-5
[emulator.physics]
robot = "robot.toml"
[emulator.physics.sensors.fin_ray_left]
signal = "q"
joint = "tail_yaw"
scale = 1e-2
[emulator.physics.sensors.thrust]
signal = "base_wrench"
index = 0
scale = -1.0
"""
RIG_SERVO_GAIN, RIG_SERVO_OFFSET, RIG_STRAIN_SCALE = 2.0, 0.05, 1e-2


def write_synthetic_run(path, *, frequency_hz: float = 2.0, amplitude: float = 0.3, thrust_mean: float = 0.4,
                        lag_s: float = 0.012, ratio: float = 0.9, noise: float = 0.01, duration_s: float = 20.0,
                        state_hz: float = 500.0, samples_per_frame: int = 10, seed: int = 0,
                        origin_ns: int = 1_700_000_000_000_000_000) -> dict:
    """A recording as `mms record` writes it, of a run whose answer is known.

    Simulated (sim/state at ``state_hz``): ``q[tail_yaw] = amplitude sin(2 pi f t) + 0.2 amplitude sin(2 pi 3f t)``,
    ``base_wrench fx = -(thrust_mean + 0.5 sin(2 pi 2f t))``. Measured (hw/telemetry, device at ``state_hz`` in
    frames of ``samples_per_frame``): the servo reads ``ratio * (gain q(t - lag) + offset) + N(0, noise)`` (the rig's
    joint map), the strain gauge ``1e-2 q(t - lag)``, the load cell ``-fx(t - lag)``: each the rig's mapping of the
    simulated signal, delayed by ``lag_s``.
    """
    import numpy as np

    from hil.recording.mcap_io import RecordingWriter

    rng = np.random.default_rng(seed)
    q = lambda t: amplitude * np.sin(2 * np.pi * frequency_hz * t) + 0.2 * amplitude * np.sin(
        2 * np.pi * 3 * frequency_hz * t)
    fx = lambda t: -(thrust_mean + 0.5 * np.sin(2 * np.pi * 2 * frequency_hz * t))
    writer = RecordingWriter(path, overwrite=True)
    writer.add_metadata("rig_config", {"path": "configs/rigs/synthetic.toml", "text": TEST_RIG})
    n = int(duration_s * state_hz)
    times = np.arange(n) / state_hz
    frame = samples_per_frame
    for k, t in enumerate(times):
        stamp = origin_ns + int(round(t * 1e9))
        payload = sim_state(k, float(t), [float(q(t)), 0.0], base_wrench=[float(fx(t)), 0, 0, 0, 0, 0])
        payload["stamp_ns"] = stamp
        writer.add("sim/state", msgpack.packb(payload), stamp + 1_000_000, stamp, k)
        if k % frame == frame - 1:
            sample_t = times[k - frame + 1:k + 1]
            servo = (ratio * (RIG_SERVO_GAIN * q(sample_t - lag_s) + RIG_SERVO_OFFSET)
                     + noise * rng.standard_normal(frame))
            host = origin_ns + int(round(t * 1e9))
            telemetry = {"v": 1, "seq": k // frame, "stamp_ns": host + 200_000, "host_ns": host,
                         "device_us": [int(round(s * 1e6)) for s in sample_t],
                         "servo_names": ["tail"], "servo_rad": [[float(v)] for v in servo],
                         "strain_names": ["fin_ray_left"],
                         "strain": [[float(RIG_STRAIN_SCALE * q(s - lag_s))] for s in sample_t],
                         "load_names": ["thrust"], "load": [[float(-fx(s - lag_s))] for s in sample_t]}
            writer.add("hw/telemetry", msgpack.packb(telemetry), host + 1_000_000, host + 200_000, k // frame)
    writer.close()
    return {"frequency_hz": frequency_hz, "amplitude": amplitude, "lag_s": lag_s, "ratio": ratio, "noise": noise,
            "thrust_mean": thrust_mean}


#: how long the synthetic driver holds the last angle before it sends the servo to neutral, s
HOLD_S = 0.2


def write_live_run(path, *, duration_s: float = 20.0, frequency_hz: float = 2.0, amplitude: float = 0.3,
                   lag_s: float = 0.012, ratio: float = 0.9, noise: float = 0.01, rate_hz: float = 500.0,
                   stall: tuple[float, float] | None = None, hold: tuple[float, float] | None = None,
                   plant_lag: tuple[float, float, float] | None = None,
                   busy: tuple[float, float, float] | None = None, status: bool = True, seed: int = 0,
                   origin_ns: int = 1_700_000_000_000_000_000, link_down: tuple[float, float] | None = None,
                   bad_every: int = 0, slow: tuple[float, float, float] | None = None,
                   scheduler_note: str | None = None) -> dict:
    """A recording of a whole live loop as `mms record` writes it (every topic), with injected faults.

    Wall time ``w`` (s) runs at ``rate_hz``. The simulation (``q[tail_yaw] = amplitude sin(2 pi f t)``) publishes
    ``sim/state`` with ``t = w`` until ``stall = (start, length)``: then nothing for ``length`` s, after which it goes
    on from where it stopped (``t = w - length``). The driver sends ``hw/command`` at every ``w``: ``track`` with
    the newest state's angle; during the stall and during ``hold = (start, length)``, ``hold`` (the last angle) for
    HOLD_S, then ``neutral`` (0). The
    servo reads ``ratio * (2 * angle(w - lag) + 0.05) + N(0, noise)`` (the rig's joint map), the gauge
    ``1e-2 (angle(w - lag) + N(0, noise))``, delayed by ``extra`` more while the physics plant lags, ``plant_lag = (start, length,
    extra)`` (``hw/status`` ``health.plant.lag_s`` says so). ``busy = (start, length, delay)``: a busy host sends
    each command ``delay`` s after its state and reads each telemetry frame ``delay`` s after the device sampled it
    (what the recording shows of it: ``state_stamp_ns`` and ``host_ns``). ``status``: also ``sim/status`` (1 Hz) and
    ``hw/status`` (10 Hz); without them the file is as an older recorder wrote it. ``link_down = (start, length)``:
    no telemetry then, and ``hw/status`` says the link is ``down``. ``bad_every``: after every that many
    ``sim/state`` and ``hw/telemetry`` messages, a bad one on the topic (in turn: bytes that are not MessagePack, a
    payload cut short, and one of the same length whose ``q`` / ``servo_rad`` key is renamed ``Q`` / ``servo_raD``),
    and a skipped ``seq``. ``slow = (start, length, rate)``: the simulation advances at ``rate`` times the wall
    clock's pace then (a simulator falling behind), and on at the wall clock's pace after it. ``scheduler_note``:
    the server's sim/status says why it runs under the normal scheduler (``rt_priority`` 0).
    """
    import numpy as np

    from hil.recording.mcap_io import RecordingWriter

    rng = np.random.default_rng(seed)
    w = np.arange(int(duration_s * rate_hz)) / rate_hz

    def inside(interval, times):
        return (times >= interval[0]) & (times < interval[0] + interval[1]) if interval else np.zeros_like(times,
                                                                                                           bool)

    stalled = inside(stall, w)
    sim_t = w - (np.clip(w - stall[0], 0.0, stall[1]) if stall else 0.0)
    if slow:
        sim_t = sim_t - (1.0 - slow[2]) * np.clip(w - slow[0], 0.0, slow[1])
    angle = amplitude * np.sin(2 * np.pi * frequency_hz * sim_t)
    tracking = ~(stalled | inside(hold, w))
    held = np.maximum.accumulate(np.where(tracking, np.arange(len(w)), 0))
    # the driver holds the last angle, then after HOLD_S sends the servo to neutral (0), as docs/driver.md says
    neutral = ~tracking & (w - w[held] > HOLD_S)
    applied = np.where(neutral, 0.0, angle[held])     # the servo angle the driver commanded at each w
    modes = np.where(tracking, "track", np.where(neutral, "neutral", "hold"))

    def applied_at(times):
        return np.interp(times, w, applied)

    extra = np.where(inside(plant_lag[:2], w), plant_lag[2], 0.0) if plant_lag else np.zeros_like(w)
    servo = ratio * (RIG_SERVO_GAIN * applied_at(w - lag_s) + RIG_SERVO_OFFSET) + noise * rng.standard_normal(len(w))
    strain = RIG_STRAIN_SCALE * (applied_at(w - lag_s - extra) + noise * rng.standard_normal(len(w)))
    writer = RecordingWriter(path, overwrite=True)
    writer.add_metadata("rig_config", {"path": "configs/rigs/synthetic.toml", "text": TEST_RIG})
    stamp = origin_ns + np.round(w * 1e9).astype(np.int64)
    seqs = {"sim/state": 0, "sim/status": 0, "hw/command": 0, "hw/telemetry": 0, "hw/status": 0}

    renamed = {"sim/state": (b"\xa1q", b"\xa1Q"), "hw/telemetry": (b"\xa9servo_rad", b"\xa9servo_raD")}

    def add(topic, payload):
        payload["seq"] = seqs[topic]
        data = msgpack.packb(payload)
        writer.add(topic, data, payload["stamp_ns"] + 500_000, payload["stamp_ns"], seqs[topic])
        seqs[topic] += 1
        if bad_every and topic in renamed and seqs[topic] % bad_every == 0:
            bad = (b"\xc1not msgpack", data[:len(data) // 2], data.replace(*renamed[topic]))[
                (seqs[topic] // bad_every) % 3]
            writer.add(topic, bad, payload["stamp_ns"] + 600_000, payload["stamp_ns"] + 1, seqs[topic])
            seqs[topic] += 2   # the bad one's seq, and one skipped

    frame = 10
    status_every, hw_status_every = int(rate_hz), int(rate_hz / 10)
    for k in range(len(w)):
        if not stalled[k]:
            state = sim_state(0, float(sim_t[k]), [float(angle[k]), 0.0])
            state["stamp_ns"] = int(stamp[k])
            add("sim/state", state)
        late_ns = int(busy[2] * 1e9) if busy and inside(busy[:2], w[k:k + 1])[0] else 0
        command = hw_command(0, float(sim_t[k]), 0, float(applied[k]))
        command.update(stamp_ns=int(stamp[k]), mode=str(modes[k]), state_stamp_ns=int(stamp[k]) - late_ns)
        add("hw/command", command)
        if k % frame == frame - 1 and not inside(link_down, w[k:k + 1])[0]:
            rows = slice(k - frame + 1, k + 1)
            add("hw/telemetry", {"v": 1, "stamp_ns": int(stamp[k]) + late_ns + 200_000,
                                 "host_ns": int(stamp[k]) + late_ns,
                                 "device_us": [int(round(x * 1e6)) for x in w[rows]], "servo_names": ["tail"],
                                 "servo_rad": [[float(v)] for v in servo[rows]], "strain_names": ["fin_ray_left"],
                                 "strain": [[float(v)] for v in strain[rows]], "load_names": ["thrust"],
                                 "load": [[0.0]] * frame})
        if status and k % status_every == 0 and not stalled[k]:
            sim_status_payload = sim_status(0, float(sim_t[k]))
            sim_status_payload.update(stamp_ns=int(stamp[k]), late_max_s=0.0005, states=seqs["sim/state"])
            if scheduler_note is not None:
                sim_status_payload.update(rt_priority=0, scheduler_note=scheduler_note)
            add("sim/status", sim_status_payload)
        if status and k % hw_status_every == 0:
            hw = hw_status(0)
            if inside(link_down, w[k:k + 1])[0]:
                hw["link"]["state"] = "down"
            hw.update(stamp_ns=int(stamp[k]), health={"plant": {"rtf": 1.0, "lag_s": 0.001 + float(extra[k]),
                                                                "alive": True, "restarts": 0}})
            add("hw/status", hw)
    writer.close()
    return {"frequency_hz": frequency_hz, "lag_s": lag_s, "ratio": ratio}
