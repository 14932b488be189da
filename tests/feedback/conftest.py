"""Harness of the closed-loop tests: `mms serve --feedback` as a real subprocess on the shipped double pendulum,
and a fake rig on real ZeroMQ sockets: a process of its own that publishes hw/telemetry on the driver's PUB endpoint
(its measured moment a function of the simulator's newest sim/state: the loop's gain) and answers the driver's
control socket (it records the e-stop the guard sends)."""
from __future__ import annotations

import json
import multiprocessing
import os
import time
from pathlib import Path

import msgpack
import pytest
import zmq

from hil.testing import DEADLINE_S, MmsProcess, endpoints, write_network
from sim.config import shipped_config
from sim.processes import die_with_parent, set_realtime_priority
from sim.messages import TOPIC_HW_TELEMETRY, decode, encode

ROOT = Path(__file__).resolve().parents[2]
#: the test rig's telemetry: samples per second and per frame (the flapper rig's)
SAMPLE_HZ, SAMPLES_PER_FRAME = 1000, 8
LOADS = ("fx", "fy", "fz", "mx", "my", "mz")
#: the rig's [feedback] settings the tests rely on (s; N m)
MAX_AGE_S, STALE_S, TARE_S, MAX_MOMENT_NM = 0.05, 0.2, 0.05, 0.2
#: the elbow gauge's strain per rad of elbow angle
ELBOW_GAUGE_SCALE = 1e-3
#: SCHED_FIFO priority of the fake rig's process and of `mms serve` (tests/feedback/test_feedback_guards.py): both
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


#: sim/state messages the fake rig reads per frame at most (the last one read sets its moment): 8 at the servers'
#: 1 kHz; bounded, so that a server publishing faster than the rig reads (a lockstep server stepping through a
#: backlog of thousands of samples) cannot hold the rig's loop off its period
MAX_STATES_PER_FRAME = 64
#: the fake rig's settings and counters shared with its process: slots of :attr:`FakeRig.shared` (float64)
GAIN, AGE_S, ELBOW_STRAIN, PAUSED, STOP, FRAMES = range(6)


def _shared_setting(slot: int, doc: str) -> property:
    """A FakeRig attribute kept in its shared slot ``slot``: set by the test, read by the rig's process."""
    return property(lambda rig: rig.shared[slot], lambda rig, value: rig.shared.__setitem__(slot, value), doc=doc)


class FakeRig:
    """hw/telemetry at SAMPLE_HZ in frames of SAMPLES_PER_FRAME, published on the driver's PUB endpoint by a process
    of its own under SCHED_FIFO at RIG_RT_PRIORITY (when allowed); every load channel 0 but ``my = gain * qd_elbow``
    of the newest sim/state (N m per rad/s). The servo reads 0 (the model's twin holds its shoulder still: the
    prediction is constant and the tare takes it away). ``age_s`` back-dates the frames; :meth:`pause` stops them.
    Its driver control socket answers requests, kept in :attr:`requests`. Its first frame goes out once the server
    has subscribed: :attr:`frames` counts the frames the server was sent, each of SAMPLES_PER_FRAME samples.

    Why a process: a rig's telemetry does not stall with its host's load. A thread of the test's process, even under
    SCHED_FIFO, needs the interpreter lock, which the test's own threads (the sim/ collectors, the polls) hold
    between their switch intervals; starved beside them (load 10-25) it went more than the 50 ms age limit without
    a frame, the server refused its samples as too old, and the loop held as stale."""

    def __init__(self, network: Path, gain: float = 0.0, age_s: float = 0.0):
        self.endpoints = endpoints(network)
        context = multiprocessing.get_context("fork")    # the child inherits the endpoints; nothing is pickled
        self.shared = context.RawArray("d", 6)
        self.shared[GAIN], self.shared[AGE_S] = gain, age_s
        self._requests, sender = context.Pipe(duplex=False)
        self._received: list[dict] = []
        self.process = context.Process(target=_rig_process, name="feedback-test-rig", daemon=True,
                                       args=(self.endpoints, self.shared, sender, os.getpid()))
        self.process.start()
        sender.close()
        assert self._requests.poll(DEADLINE_S) and self._requests.recv() == "bound", \
            "the fake rig's sockets were not bound"

    gain = _shared_setting(GAIN, "N m per rad/s of the elbow's rate")
    age_s = _shared_setting(AGE_S, "s the frames are back-dated by")
    elbow_strain = _shared_setting(ELBOW_STRAIN, "what the elbow gauge reads")

    def pause(self) -> None:
        """The telemetry stops (the control socket still answers)."""
        self.shared[PAUSED] = 1.0

    @property
    def frames(self) -> int:
        return int(self.shared[FRAMES])

    @property
    def requests(self) -> list[dict]:
        """The driver control requests received so far, in order."""
        while not self._requests.closed and self._requests.poll(0):
            try:
                self._received.append(self._requests.recv())
            except EOFError:
                self._requests.close()
        return list(self._received)

    def close(self) -> None:
        self.shared[STOP] = 1.0
        self.process.join(DEADLINE_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
            raise AssertionError(f"the fake rig still running {DEADLINE_S:.0f} s after it was asked to stop")


def _rig_process(ends, shared, requests, parent_pid: int) -> None:
    """The fake rig's loop: SCHED_FIFO first, then its sockets on a context of its own (ZeroMQ's I/O thread, which
    sends the frames, inherits the class)."""
    die_with_parent(parent_pid)
    set_realtime_priority(RIG_RT_PRIORITY, "feedback test rig")
    context = zmq.Context()
    pub = context.socket(zmq.XPUB)         # it sees the server subscribe: no frame is sent before anyone listens
    pub.bind(ends.driver_pub)
    control = context.socket(zmq.REP)
    control.bind(ends.driver_control)
    states = context.socket(zmq.SUB)
    states.setsockopt(zmq.SUBSCRIBE, b"sim/state")
    states.connect(ends.sim_pub)
    requests.send("bound")
    period = SAMPLES_PER_FRAME / SAMPLE_HZ
    device_us, seq, next_at, qd_elbow, subscribed = 0, 0, time.monotonic(), 0.0, False
    while not shared[STOP]:
        next_at += period
        time.sleep(max(0.0, next_at - time.monotonic()))
        for _ in range(MAX_STATES_PER_FRAME):       # a lockstep server catching up publishes faster than this reads
            if not states.poll(0):
                break
            _, state = decode(states.recv_multipart())
            qd_elbow = float(state["qd"][1])
        if control.poll(0):
            requests.send(msgpack.unpackb(control.recv(), raw=False))
            control.send(msgpack.packb({"ok": True, "latched": True}))
        while pub.poll(0):
            subscribed = pub.recv()[:1] == b"\x01" or subscribed
        if shared[PAUSED] or not subscribed:
            continue
        samples = list(range(device_us, device_us + SAMPLES_PER_FRAME * 1000, 1000))
        device_us += SAMPLES_PER_FRAME * 1000
        load = [0.0, 0.0, 0.0, 0.0, shared[GAIN] * qd_elbow, 0.0]
        pub.send_multipart(encode(TOPIC_HW_TELEMETRY, {
            "v": 1, "seq": seq, "stamp_ns": time.time_ns(), "host_ns": time.time_ns() - int(shared[AGE_S] * 1e9),
            "device_us": samples, "servo_names": ["shoulder_servo"], "servo_rad": [[0.0]] * len(samples),
            "strain_names": ["elbow_gauge"], "strain": [[shared[ELBOW_STRAIN]]] * len(samples),
            "load_names": list(LOADS), "load": [load] * len(samples)}))
        seq += 1
        shared[FRAMES] += 1
    context.destroy(linger=0)


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
