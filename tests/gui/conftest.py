"""Real ZeroMQ publishers and control sockets for the dashboard tests (no mocks: real sockets, real threads).

:class:`RigPublisher` plays a small two-wing robot (stroke joints actuated, twist/bend joints passive) on two
real PUB sockets, the simulator's (sim/state, sim/status) and the driver's (hw/command, hw/telemetry,
hw/status), with payloads checked against the schemas of sim/messages.py.
"""
from __future__ import annotations

import math
import os
import shutil
import tempfile
import threading
import time

import msgpack
import pytest
import zmq

from sim import messages

# a machine with no display (CI) aborts inside Qt unless the offscreen platform is chosen before Qt starts
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
from sim.network import Endpoints

JOINTS = ["stroke_r", "r_twist_1", "r_bend_1", "r_twist_2", "r_bend_2",
          "stroke_l", "l_twist_1", "l_bend_1", "l_twist_2", "l_bend_2"]
ACTUATED = [name.startswith("stroke") for name in JOINTS]
STRAIN_GAUGES = ["sg_" + name for name, actuated in zip(JOINTS, ACTUATED) if not actuated]
LOADS = ["stroke_r", "stroke_l", "fx", "fy", "fz", "mx", "my", "mz"]
SERVOS = ["stroke_r", "stroke_l"]
STROKE_HZ = 2.0
#: how many of each topic's messages are checked against its JSON schema (the check is slow)
VALIDATED_PER_TOPIC = 20


def sim_values(t: float) -> dict[str, list[float]]:
    """Simulated signals of the test robot at time ``t``: q, tau (n,), strain (n_p,), base wrench (6,)."""
    w = 2 * math.pi * STROKE_HZ
    q, tau = [], []
    for index, name in enumerate(JOINTS):
        phase = 0.3 * index
        q.append(0.7 * math.sin(w * t + phase) if name.startswith("stroke") else 0.05 * math.sin(w * t + phase))
        tau.append(0.002 * math.cos(w * t + phase))
    wrench = [0.01 * math.sin(w * t), 0.0, 0.02 + 0.01 * math.cos(2 * w * t), 0.0, 1e-4 * math.sin(w * t), 0.0]
    return {"q": q, "tau": tau, "strain": [v for v, a in zip(q, ACTUATED) if not a], "wrench": wrench}


class PublisherThread:
    """Runs the subclass's ``_run`` on a thread from ``start()`` until ``stop()``; ``error`` is what ended it early."""

    def __init__(self):
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def publish(self) -> None:
        """The publishing loop: until ``self._stop`` is set."""
        raise NotImplementedError

    def _run(self) -> None:
        try:
            self.publish()
        except BaseException as exc:  # reported by the test through .error
            self.error = exc

    @staticmethod
    def pace(start: float, count: int, period: float) -> None:
        """Sleep until ``count`` periods after ``start`` (monotonic s): pacing of a publisher, not a wait for a
        condition."""
        delay = start + count * period - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def start(self):
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class RigPublisher(PublisherThread):
    """Publishes the five topics from a thread until stopped; ``counts`` says how many of each went out."""

    def __init__(self, endpoints: Endpoints, state_hz: float = 200.0, samples_per_telemetry: int = 4,
                 with_driver: bool = True, wrench_scale: float = 1.1, driver_error: str = ""):
        super().__init__()
        self.endpoints = endpoints
        self.state_period = 1.0 / state_hz
        self.samples_per_telemetry = samples_per_telemetry
        self.with_driver = with_driver
        self.wrench_scale = wrench_scale     # measured load fx..mz = wrench_scale * simulated base wrench
        self.driver_error = driver_error     # hw/status "error" while the link is not up yet
        self.counts = {topic: 0 for topic in messages.TOPICS}
        self._driver_stop = threading.Event()

    def stop_driver(self) -> None:
        """Close the driver's PUB socket (the hw/* topics go silent) while the simulator keeps publishing."""
        self._driver_stop.set()

    def _send(self, socket, topic: str, payload: dict) -> None:
        payload = {"v": messages.SCHEMA_VERSION, "seq": self.counts[topic], "stamp_ns": time.time_ns(), **payload}
        if self.counts[topic] < VALIDATED_PER_TOPIC:
            messages.validate(topic, payload)
        socket.send_multipart(messages.encode(topic, payload))
        self.counts[topic] += 1

    def publish(self) -> None:
        context = zmq.Context.instance()
        sim = context.socket(zmq.PUB)
        sim.setsockopt(zmq.LINGER, 0)
        sim.bind(self.endpoints.sim_pub)
        driver = None
        if self.with_driver:
            driver = context.socket(zmq.PUB)
            driver.setsockopt(zmq.LINGER, 0)
            driver.bind(self.endpoints.driver_pub)
        try:
            start = time.monotonic()
            step = 0
            device_us = 0
            samples: list[tuple[int, list[float], list[float], list[float]]] = []
            while not self._stop.is_set():
                t = step * self.state_period
                values = sim_values(t)
                self._send(sim, messages.TOPIC_SIM_STATE, {
                    "t": t, "joint_names": JOINTS, "actuated": ACTUATED, "q": values["q"],
                    "qd": [0.0] * len(JOINTS), "qdd": [0.0] * len(JOINTS), "tau": values["tau"],
                    "strain": values["strain"], "base_pos": [0.0, 0.0, 0.0], "base_quat": [1.0, 0.0, 0.0, 0.0],
                    "base_twist": [0.0] * 6, "base_wrench": values["wrench"], "ext_wrench": values["wrench"]})
                if step % 40 == 0:
                    self._send(sim, messages.TOPIC_SIM_STATUS, {
                        "t": t, "mode": "realtime", "state": "running", "rtf": 0.998,
                        "step_us": {"mean": 40.0, "p50": 38.0, "p99": 75.0, "max": 120.0},
                        "deadline_misses": 0, "state_rate_hz": 1.0 / self.state_period, "robot": "two-wing test robot",
                        "joint_names": JOINTS, "actuated": ACTUATED})
                if driver is not None and self._driver_stop.is_set():
                    driver.close(linger=0)
                    driver = None
                if driver is not None:
                    stroke = [values["q"][JOINTS.index(name)] for name in SERVOS]
                    self._send(driver, messages.TOPIC_HW_COMMAND, {
                        "t": t, "sim_seq": step, "channels": SERVOS, "setpoint_rad": stroke,
                        "setpoint_raw": [1500 + 500 * s for s in stroke], "limited": [False, False],
                        "mode": "track"})
                    device_us += int(self.state_period * 1e6)
                    lagged = sim_values(t - 0.01)
                    samples.append((device_us, [lagged["q"][JOINTS.index(n)] for n in SERVOS],
                                    [2e-3 * v for v in lagged["strain"]],   # gauge strain, m/m
                                    [lagged["tau"][0], lagged["tau"][5],
                                     *[self.wrench_scale * v for v in lagged["wrench"]]]))
                    if len(samples) == self.samples_per_telemetry:
                        self._send(driver, messages.TOPIC_HW_TELEMETRY, {
                            "host_ns": time.time_ns(), "device_us": [s[0] for s in samples],
                            "servo_names": SERVOS, "servo_rad": [s[1] for s in samples],
                            "strain_names": STRAIN_GAUGES, "strain": [s[2] for s in samples],
                            "load_names": LOADS, "load": [s[3] for s in samples]})
                        samples = []
                    if step % 40 == 0:
                        # the first status: the link still down, with the driver's error of then
                        up = step > 0 or not self.driver_error
                        self._send(driver, messages.TOPIC_HW_STATUS, {
                            "lifecycle": "active" if up else "unconfigured", "rig": "test rig", "estop": False,
                            "watchdog": "track", "error": "" if up else self.driver_error,
                            "link": {"state": "up" if up else "down", "frames_ok": step // self.samples_per_telemetry,
                                     "crc_errors": 0, "seq_gaps": 0, "reconnects": 0}})
                step += 1
                self.pace(start, step, self.state_period)
        finally:
            sim.close(linger=0)
            if driver is not None:
                driver.close(linger=0)


@pytest.fixture
def endpoints():
    """Endpoints of this test alone: ipc:// sockets in a fresh short directory (a TCP port picked as free can be
    taken again by any connecting socket before the test binds it; an ipc path cannot)."""
    directory = tempfile.mkdtemp(prefix="mmsdash-")
    yield Endpoints(**{name: f"ipc://{directory}/{name}" for name in
                       ("sim_pub", "sim_control", "driver_pub", "driver_control", "recorder_control")})
    shutil.rmtree(directory, ignore_errors=True)


class ControlResponder:
    """A REP socket standing in for the driver's or recorder's control socket; records what it received. ``reply``:
    the reply map, or a function of the request map that returns it."""

    def __init__(self, endpoint: str, reply=None):
        self.endpoint = endpoint
        self.reply = reply if reply is not None else {"ok": True}
        self.requests: list[dict] = []
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> "ControlResponder":
        self._thread.start()
        assert self._ready.wait(10), "REP socket did not bind"
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        socket = zmq.Context.instance().socket(zmq.REP)
        socket.setsockopt(zmq.LINGER, 0)
        socket.bind(self.endpoint)
        self._ready.set()
        try:
            while not self._stop.is_set():
                if socket.poll(20, zmq.POLLIN):
                    request = msgpack.unpackb(socket.recv(), raw=False)
                    self.requests.append(request)
                    reply = self.reply(request) if callable(self.reply) else self.reply
                    socket.send(msgpack.packb(reply, use_bin_type=True))
        finally:
            socket.close(linger=0)


@pytest.fixture
def publisher(endpoints):
    """A started :class:`RigPublisher` on ``endpoints``; its thread must end without error."""
    pub = RigPublisher(endpoints).start()
    yield pub
    pub.stop()
    assert pub.error is None, pub.error


@pytest.fixture
def responder():
    """Factory of started :class:`ControlResponder` sockets, stopped at the end of the test."""
    started = []

    def make(endpoint: str, reply: dict | None = None) -> ControlResponder:
        control = ControlResponder(endpoint, reply).start()
        started.append(control)
        return control

    yield make
    for control in started:
        control.stop()


@pytest.fixture
def make_window(qtbot, endpoints):
    """Factory of shown dashboard windows on ``endpoints`` (options overridable), shut down at the end."""
    from gui.window import DashboardOptions, DashboardWindow

    windows = []

    def make(**overrides):
        settings = {"window_s": 5.0, "stale_after_s": 2.0, "disconnected_after_s": 4.0, "control_timeout_s": 0.5}
        options = DashboardOptions(endpoints=endpoints, **{**settings, **overrides})
        window = DashboardWindow(options)
        qtbot.addWidget(window)
        window.show()
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.shutdown()
