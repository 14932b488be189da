"""Harness of the server tests: `mms serve` as a real subprocess on free loopback ports, real ZeroMQ clients.

Every wait is a poll with a deadline; the deadlines are generous because the test machine is small and busy.
"""
from __future__ import annotations

import math
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import msgpack
import pytest
import zmq

from hil.testing import wait_for
from sim.messages import decode

ROOT = Path(__file__).resolve().parents[2]
_MMS_SCRIPT = Path(sys.executable).with_name("mms")          # the installed console script
MMS = [str(_MMS_SCRIPT)] if _MMS_SCRIPT.exists() else [sys.executable, "-m", "hil.cli"]
START_TIMEOUT_S = 120.0     # a cold numba cache compiles the kernels at start: a minute on a busy machine
REPLY_TIMEOUT_S = 20.0
EXIT_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_network(directory: Path) -> tuple[Path, str, str]:
    pub, control = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    path = directory / f"network-{pub.rsplit(':', 1)[1]}.toml"
    path.write_text(f'[sim]\npub = "{pub}"\ncontrol = "{control}"\n')
    return path, pub, control


# A light robot for the timing tests and the physics checks: a fixed-base single pendulum, one passive revolute
# joint "hinge" about y, a 1 kg bob 0.5 m below the pivot (inertia 1e-4 kg m^2 about its centre), no spring,
# no damping, built by the core's "urdf" kind (sim/robots/urdf_robot.py) from a URDF and a TOML overlay.
PENDULUM_MASS_KG = 1.0
PENDULUM_LENGTH_M = 0.5
PENDULUM_IYY_KGM2 = 1e-4
PENDULUM_URDF = f"""<?xml version="1.0"?>
<robot name="test_pendulum">
  <link name="pivot"/>
  <link name="arm">
    <inertial>
      <origin xyz="0 0 -{PENDULUM_LENGTH_M}" rpy="0 0 0"/>
      <mass value="{PENDULUM_MASS_KG}"/>
      <inertia ixx="{PENDULUM_IYY_KGM2}" ixy="0" ixz="0" iyy="{PENDULUM_IYY_KGM2}" iyz="0" izz="{PENDULUM_IYY_KGM2}"/>
    </inertial>
  </link>
  <joint name="hinge" type="continuous">
    <parent link="pivot"/>
    <child link="arm"/>
    <origin xyz="0 0 0" rpy="0 0 0"/>
    <axis xyz="0 1 0"/>
  </joint>
</robot>
"""
PENDULUM_TOML = """[robot]
kind = "urdf"
name = "test_pendulum"
urdf = "test_pendulum.urdf"
base = "fixed"
gravity = [0.0, 0.0, -9.81]

[joints.hinge]
mode = "passive"
rest = 0.0
law = { type = "viscoelastic", k = 0.0, mu = 0.0, r0 = 0.0 }

[simulation]
integrator = "rk4"
dt = 1e-3
"""


def pendulum_qdd(q: float, gravity: float) -> float:
    """Closed form: I_pivot qdd = -m g l sin q, I_pivot = I_yy + m l^2 (rad/s^2; gravity m/s^2 along -z)."""
    import math

    inertia = PENDULUM_IYY_KGM2 + PENDULUM_MASS_KG * PENDULUM_LENGTH_M ** 2
    return -PENDULUM_MASS_KG * gravity * PENDULUM_LENGTH_M * math.sin(q) / inertia


@pytest.fixture(scope="session")
def pendulum_config(tmp_path_factory) -> Path:
    """Path of the light robot's TOML (the URDF beside it)."""
    directory = tmp_path_factory.mktemp("robot")
    (directory / "test_pendulum.urdf").write_text(PENDULUM_URDF)
    path = directory / "test_pendulum.toml"
    path.write_text(PENDULUM_TOML)
    return path


@pytest.fixture(scope="session")
def harness() -> SimpleNamespace:
    """Plain helpers for the test modules (conftest itself is not importable under --import-mode=importlib)."""
    return SimpleNamespace(free_port=free_port, mms=MMS, root=ROOT)


@pytest.fixture(scope="session")
def pendulum(pendulum_config) -> SimpleNamespace:
    """The light robot: its config path, its constants and the closed form of its acceleration."""
    return SimpleNamespace(config=pendulum_config, mass=PENDULUM_MASS_KG, length=PENDULUM_LENGTH_M,
                           iyy=PENDULUM_IYY_KGM2, qdd=pendulum_qdd, dt=1e-3)


def _factory(directory: Path):
    started: list[ServeProcess] = []

    def start(config: Path, *extra: str, check_ready: bool = True, preexec_fn=None) -> ServeProcess:
        server = ServeProcess(config, directory, *extra, check_ready=False, preexec_fn=preexec_fn)
        started.append(server)          # stopped at teardown even if it never answers
        if check_ready:
            server.wait_ready()
        return server

    return start, started


@pytest.fixture
def serve(tmp_path):
    """Factory of `mms serve` subprocesses, all stopped at the end of the test."""
    start, started = _factory(tmp_path)
    yield start
    for server in started:
        server.close()


@pytest.fixture(scope="module")
def serve_shared(tmp_path_factory):
    """Factory of `mms serve` subprocesses shared by the tests of a module, stopped at its end."""
    start, started = _factory(tmp_path_factory.mktemp("shared"))
    yield start
    for server in started:
        server.close()


class ServeProcess:
    """One `mms serve` subprocess with its endpoints, a control client and its stderr."""

    def __init__(self, config: Path, workdir: Path, *extra: str, check_ready: bool = True, preexec_fn=None):
        self.workdir = workdir
        self.network, self.pub, self.control = write_network(workdir)
        self.stderr_path = workdir / f"serve-{time.monotonic_ns()}.stderr"
        self._stderr = self.stderr_path.open("wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.args = [*MMS, "serve", str(config), "--network", str(self.network), *extra]
        self.process = subprocess.Popen(self.args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=self._stderr,
                                        env=env, preexec_fn=preexec_fn)
        self.context = zmq.Context()
        self._req: zmq.Socket | None = None
        self.answered = False       # a server never seen ready may still be importing and reading its arguments
        if check_ready:
            self.wait_ready()

    # -------------------------------------------------------------- control
    def _request_socket(self) -> zmq.Socket:
        if self._req is None:
            self._req = self.context.socket(zmq.REQ)
            self._req.setsockopt(zmq.LINGER, 0)
            self._req.connect(self.control)
        return self._req

    def request_raw(self, frames: list[bytes], timeout_s: float = REPLY_TIMEOUT_S) -> dict:
        """Send ``frames`` as one request; the decoded reply map (fails the test on silence)."""
        req = self._request_socket()
        req.send_multipart(frames)
        if not req.poll(int(timeout_s * 1000)):
            self._req.close()
            self._req = None
            raise AssertionError(f"no reply within {timeout_s} s to {frames[0][:60]!r} ({len(frames)} frames); "
                                 f"server exit code {self.process.poll()}; server stderr:\n{self.stderr()}")
        reply = msgpack.unpackb(req.recv(), raw=False)
        assert isinstance(reply, dict) and isinstance(reply.get("ok"), bool), reply
        return reply

    def request(self, cmd: str, **arguments) -> dict:
        return self.request_raw([msgpack.packb({"cmd": cmd, **arguments})])

    def ok(self, cmd: str, **arguments) -> dict:
        reply = self.request(cmd, **arguments)
        assert reply["ok"] is True, reply
        return reply

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"mms serve exited with {self.process.returncode}:\n{self.stderr()}")
            try:
                self.request_raw([msgpack.packb({"cmd": "get", "what": "status"})], timeout_s=1.0)
                self.answered = True
                return
            except AssertionError:
                continue
        raise AssertionError(f"mms serve did not answer within {START_TIMEOUT_S} s:\n{self.stderr()}")

    # -------------------------------------------------------------- streams
    def subscriber(self, topic: bytes = b"sim/") -> zmq.Socket:
        sub = self.context.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, 1_000_000)
        sub.setsockopt(zmq.SUBSCRIBE, topic)
        sub.connect(self.pub)
        return sub

    def stderr(self) -> str:
        self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    # -------------------------------------------------------------- end
    def wait_exit(self, timeout_s: float | None = None) -> int:
        """The exit code, waited for up to ``timeout_s`` (default: EXIT_TIMEOUT_S once the server has answered, else
        START_TIMEOUT_S more: its exit comes after its start, which pays the imports, about 1.5 s of CPU, at a tenth
        of a core on a loaded machine)."""
        if timeout_s is None:
            timeout_s = EXIT_TIMEOUT_S + (0.0 if self.answered else START_TIMEOUT_S)
        try:
            return self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"mms serve still running {timeout_s} s later:\n{self.stderr()}") from None

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(EXIT_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self._req is not None:
            self._req.close()
        self.context.destroy(linger=0)
        self._stderr.close()

    @staticmethod
    def receive(sub: zmq.Socket, until, timeout_s: float = REPLY_TIMEOUT_S, what: str = "a message"):
        return _receive(sub, until, timeout_s, what)

    @staticmethod
    def collect(sub: zmq.Socket, duration_s: float) -> list:
        """Every decoded ``(topic, payload)`` that arrives within ``duration_s``."""
        received = []
        deadline = time.monotonic() + duration_s
        while (left := deadline - time.monotonic()) > 0:
            if sub.poll(max(1, int(left * 1000))):
                received.append(decode(sub.recv_multipart()))
        return received

    def wait_stderr(self, text: str, timeout_s: float = REPLY_TIMEOUT_S) -> str:
        """The server's stderr once it holds ``text`` (a file, polled: there is no event to wait on)."""
        return wait_for(lambda: text in (err := self.stderr()) and err, timeout_s, 0.05, f"{text!r} on stderr",
                        logs=[self.stderr_path])


def _receive(sub: zmq.Socket, until, timeout_s: float, what: str = "a message"):
    """Decoded ``(topic, payload)`` messages from ``sub`` until ``until(topic, payload)`` is true."""
    received = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sub.poll(100):
            topic, payload = decode(sub.recv_multipart())
            received.append((topic, payload))
            if until(topic, payload):
                return received
    raise AssertionError(f"{what} not received within {timeout_s} s (got {len(received)} messages)")


# -------------------------------------------------------------------- the 10 s streams (shared)
STREAM_RATE_HZ = 1000.0
PACED_RATE_HZ = 100.0        # the tracking server: 1 step of 10 ms per period, a few % of a core
STREAM_RUN_S = 10.0
LATE_JOIN_AFTER_S = 3.0


@dataclass
class Stream:
    """What real subscribers received, side by side for the same 10 s, from two realtime `mms serve`:
    the 1 kHz one (dt 1 ms), and a light 100 Hz one (dt 10 ms) whose pacing does not depend on the load of
    the machine. Messages are (receive time s perf_counter, topic, payload), from the first sim/state on."""
    messages: list           # 1 kHz server
    late_messages: list      # 1 kHz server, the subscriber that connected LATE_JOIN_AFTER_S later
    late_joined_at: float    # perf_counter s when the late subscriber connected
    paced_messages: list     # 100 Hz server
    joint_names: dict        # reply of `get joint_names` (1 kHz server)
    stderr: str              # of the 1 kHz server


def _drain(socket, target: list) -> None:
    while True:
        try:
            frames = socket.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        target.append((time.perf_counter(), frames))


@pytest.fixture(scope="session")
def stream(pendulum_config, tmp_path_factory) -> Stream:
    directory = tmp_path_factory.mktemp("stream")
    server = ServeProcess(pendulum_config, directory, "--mode", "realtime", "--rate", str(STREAM_RATE_HZ),
                         check_ready=False)
    paced = ServeProcess(pendulum_config, directory, "--mode", "realtime", "--rate", str(PACED_RATE_HZ),
                         "--dt", str(1.0 / PACED_RATE_HZ), check_ready=False)
    try:
        server.wait_ready()
        paced.wait_ready()
        joint_names = server.ok("get", what="joint_names")
        sub, paced_sub = server.subscriber(), paced.subscriber()
        for source, socket in ((server, sub), (paced, paced_sub)):
            source.receive(socket, lambda topic, payload: topic == "sim/state", what="a first sim/state")
        # everything from the next message on is recorded raw, decoded after the run
        raw, late_raw, paced_raw = [], [], []
        poller = zmq.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(paced_sub, zmq.POLLIN)
        late = None
        late_joined_at = math.nan
        start = time.perf_counter()
        while time.perf_counter() - start < STREAM_RUN_S:
            if late is None and time.perf_counter() - start >= LATE_JOIN_AFTER_S:
                late = server.subscriber()
                late_joined_at = time.perf_counter()
                poller.register(late, zmq.POLLIN)
            for socket, _ in poller.poll(50):
                _drain(socket, raw if socket is sub else paced_raw if socket is paced_sub else late_raw)
        for socket in (sub, paced_sub, late):
            socket.close()

        def decoded(records):
            return [(when, *decode(frames)) for when, frames in records]

        return Stream(messages=decoded(raw), late_messages=decoded(late_raw), late_joined_at=late_joined_at,
                      paced_messages=decoded(paced_raw), joint_names=joint_names, stderr=server.stderr())
    finally:
        server.close()
        paced.close()
