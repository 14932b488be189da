"""Harness of the closed-loop tests: `mms serve --feedback` as a real subprocess on the shipped double pendulum,
and a fake rig on real ZeroMQ sockets: a thread that publishes hw/telemetry on the driver's PUB endpoint (its
measured moment a function of the simulator's newest sim/state: the loop's gain) and answers the driver's control
socket (it records the e-stop the guard sends)."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from hil.testing import DEADLINE_S, MmsProcess, endpoints, stop_thread, write_network
from sim.config import shipped_config
from sim.processes import set_realtime_priority
from sim.messages import TOPIC_HW_TELEMETRY, decode, encode

ROOT = Path(__file__).resolve().parents[2]
#: the test rig's telemetry: samples per second and per frame (the flapper rig's)
SAMPLE_HZ, SAMPLES_PER_FRAME = 1000, 8
LOADS = ("fx", "fy", "fz", "mx", "my", "mz")
#: the rig's [feedback] settings the tests rely on (s; N m)
MAX_AGE_S, STALE_S, TARE_S, MAX_MOMENT_NM = 0.05, 0.2, 0.05, 0.2
#: the elbow gauge's strain per rad of elbow angle
ELBOW_GAUGE_SCALE = 1e-3
#: SCHED_FIFO priority of the fake rig's thread and of `mms serve` (tests/feedback/test_feedback_guards.py): both
#: stand in for a rig's host, which keeps its clock whatever else the machine runs
RIG_RT_PRIORITY = 1


def rig_text(feedback: str | None = None, joints: str = "") -> str:
    """A rig for the shipped double pendulum: its shoulder on one servo, a gauge at the elbow (rad per
    ELBOW_GAUGE_SCALE strain), a six-axis load cell on the lower rod (body 2, frame at the elbow, elbow axis y:
    channel my is a moment about the elbow); ``joints``: the [feedback.joints] table."""
    loads = "".join(f'[[load]]\nname = "{name}"\nunit = "{"N" if name[0] == "f" else "N m"}"\ngain = 1e-6\n'
                    for name in LOADS)
    default = f"""[feedback]
max_age_s = {MAX_AGE_S}
stale_s = {STALE_S}
tare_s = {TARE_S}
compensation = "none"
[feedback.wrench]
channels = {json.dumps(list(LOADS))}
body = 2
[feedback.guard]
max_force_n = 10.0
max_moment_nm = {MAX_MOMENT_NM}
{joints}"""
    servo = ('name = "shoulder_servo", unit = "us", center = 1500.0, gain = 636.62, direction = 1, min_raw = 800.0, '
             'max_raw = 2200.0, min_rad = -1.0, max_rad = 1.0, max_rate_rad_s = 25.0')
    return f"""servos = [{{{servo}}}]
joints = [{{joint = "shoulder", servo = "shoulder_servo"}}]
[rig]
name = "pendulum-test"
protocol_version = 1
[serial]
port = "/dev/null"
baud = 921600
[rates]
command_hz = 500
telemetry_hz = {SAMPLE_HZ}
samples_per_frame = {SAMPLES_PER_FRAME}
[watchdog]
timeout_s = 0.1
[[strain]]
name = "elbow_gauge"
unit = "strain"
gain = 1e-9
{loads}
{default if feedback is None else feedback}"""


class FakeRig:
    """hw/telemetry at SAMPLE_HZ in frames of SAMPLES_PER_FRAME, published from a thread on the driver's PUB
    endpoint; every load channel 0 but ``my = gain * qd_elbow`` of the newest sim/state (N m per rad/s). The
    servo reads 0 (the model's twin holds its shoulder still: the prediction is constant and the tare takes it
    away). ``age_s`` back-dates the frames; ``paused`` stops them. Its driver control socket records requests."""

    def __init__(self, network: Path, gain: float = 0.0, age_s: float = 0.0):
        self.endpoints = endpoints(network)
        self.gain, self.age_s = gain, age_s
        self.requests: list[dict] = []
        self.frames = 0
        self.qd_elbow = 0.0
        self.elbow_strain = 0.0        # what the elbow gauge reads
        self.paused = threading.Event()
        self.stop_event = threading.Event()
        self.bound = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        assert self.bound.wait(DEADLINE_S), "the fake rig's sockets were not bound"

    def _open(self) -> None:
        """The rig's sockets, on a context of its own made in its thread after that took SCHED_FIFO (when allowed):
        ZeroMQ's I/O thread, which sends the frames, inherits the class. A rig's telemetry does not stall with its
        host's load; under the normal scheduler this thread and its I/O thread, starved beside the test's own (load
        18), went 0.21 s without a frame and the server held the loop as stale (a hold that waits for an operator)."""
        set_realtime_priority(RIG_RT_PRIORITY, "feedback test rig")
        self.context = zmq.Context()
        self.pub = self.context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(self.endpoints.driver_pub)
        self.control = self.context.socket(zmq.REP)
        self.control.setsockopt(zmq.LINGER, 0)
        self.control.bind(self.endpoints.driver_control)
        self.states = self.context.socket(zmq.SUB)
        self.states.setsockopt(zmq.LINGER, 0)
        self.states.setsockopt(zmq.SUBSCRIBE, b"sim/state")
        self.states.connect(self.endpoints.sim_pub)
        self.bound.set()

    def _run(self) -> None:
        self._open()
        period = SAMPLES_PER_FRAME / SAMPLE_HZ
        device_us, seq, next_at = 0, 0, time.monotonic()
        while not self.stop_event.is_set():
            next_at += period
            time.sleep(max(0.0, next_at - time.monotonic()))
            while self.states.poll(0):
                _, state = decode(self.states.recv_multipart())
                self.qd_elbow = float(state["qd"][1])
            if self.control.poll(0):
                self.requests.append(msgpack.unpackb(self.control.recv(), raw=False))
                self.control.send(msgpack.packb({"ok": True, "latched": True}))
            if self.paused.is_set():
                continue
            samples = list(range(device_us, device_us + SAMPLES_PER_FRAME * 1000, 1000))
            device_us += SAMPLES_PER_FRAME * 1000
            load = [0.0, 0.0, 0.0, 0.0, self.gain * self.qd_elbow, 0.0]
            self.pub.send_multipart(encode(TOPIC_HW_TELEMETRY, {
                "v": 1, "seq": seq, "stamp_ns": time.time_ns(), "host_ns": time.time_ns() - int(self.age_s * 1e9),
                "device_us": samples, "servo_names": ["shoulder_servo"], "servo_rad": [[0.0]] * len(samples),
                "strain_names": ["elbow_gauge"], "strain": [[self.elbow_strain]] * len(samples),
                "load_names": list(LOADS),
                "load": [load] * len(samples)}))
            seq += 1
            self.frames += 1

    def close(self) -> None:
        stop_thread(self.stop_event, self.thread)
        for sock in (self.pub, self.control, self.states):
            sock.close(0)
        self.context.term()


@pytest.fixture
def closed_loop(tmp_path):
    """start(rig_text, *serve options) -> (server MmsProcess, FakeRig); everything stopped at teardown."""
    started = []

    def start(text: str | None = None, *options: str, gain: float = 0.0, age_s: float = 0.0):
        network = write_network(tmp_path / f"network-{len(started)}.toml")
        rig = tmp_path / f"rig-{len(started)}.toml"
        rig.write_text(rig_text() if text is None else text)
        fake = FakeRig(network, gain, age_s)
        server = MmsProcess(tmp_path, ["serve", str(shipped_config("robot", "pendulum")), "--network", str(network),
                                       "--feedback", str(rig), *options], ROOT, endpoints(network).sim_control)
        started.append((server, fake))
        return server, fake

    yield start
    for server, fake in started:
        server.stop()
        fake.close()
