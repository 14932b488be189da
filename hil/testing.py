"""Real processes and sockets for tests and benchmarks of the HIL stack: free loopback endpoints in a network
file, ``mms drive`` / ``mms serve`` as subprocesses with control clients, a hw/* collector, a sim/state publisher,
and a driver object on a real emulator (:class:`LiveDriver`) for tests that feed its handlers directly.

Nothing here is a mock: every part is the real program or a real ZeroMQ socket. Waits poll a condition with a
deadline (:func:`wait_for`), never a bare sleep. tests/conftest.py makes fixtures of :class:`Stack` and
:func:`write_network`.
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import msgpack
import zmq

from sim.messages import decode, encode, validate
from sim.network import write_loopback_network

#: generous: two cores shared with other test runs
DEADLINE_S = 20.0


def mms(*args: str) -> list[str]:
    return [sys.executable, "-m", "hil.cli", *args]


def write_network(path: Path) -> Path:
    """A network.toml at ``path`` with free loopback ports (:func:`sim.network.write_loopback_network`)."""
    write_loopback_network(path)
    return path


def endpoints(network: Path):
    from sim.network import load_endpoints
    return load_endpoints(network)


def wait_for(predicate, timeout_s: float = DEADLINE_S, poll_s: float = 0.01, what: str = "condition",
             logs=()):
    """Poll ``predicate`` until it returns something truthy (returned) or the deadline passes (AssertionError,
    with the tails of the ``logs`` files so the failure says what the processes said)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            tails = "".join(f"\n--- {Path(log).name}\n{Path(log).read_text(errors='replace')[-1500:]}"
                            for log in logs if Path(log).exists())
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}{tails}")
        time.sleep(poll_s)


class Collector:
    """Subscribes to a PUB endpoint in a thread and keeps every message (topic -> list of payloads), each with
    ``_rx_ns`` (wall clock when received) added; schema-checks every ``validate_every``-th one (0: none).

    Receiving comes first: the thread checks the schemas only while no message is waiting, and :attr:`invalid`
    checks the rest. A schema check costs 40 times a decode (hw/telemetry: 0.75 ms against 18 us, idle machine), and
    checking each message on arrival made the thread fall behind the driver's ~330 messages/s whenever it got less
    than about an eighth of a core: its lag grew without bound (7 s after 10 s at load 4, the stack and two CPU hogs
    on one core), and a test waiting 20 s for a hw/status timed out on a driver that had long sent it
    (docs/testing.md)."""

    def __init__(self, endpoint: str, topics=("hw/",), validate_every: int = 0):
        self.ctx = zmq.Context.instance()
        self.validate_every, self.count = validate_every, 0
        self._invalid: list[str] = []       # schema violations found so far
        self.unchecked: deque[tuple[str, dict]] = deque()    # (topic, payload without _rx_ns) to schema-check
        self.check_lock = threading.Lock()  # one checker at a time: `invalid` waits for the thread's last check
        self.messages: dict[str, list[dict]] = {}
        self.lock = threading.Lock()
        self.stop_event = threading.Event()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        for t in topics:
            self.sock.setsockopt(zmq.SUBSCRIBE, t.encode())
        self.sock.connect(endpoint)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        while not self.stop_event.is_set():
            if poller.poll(50):
                while not self.stop_event.is_set():    # a backlog of a busy machine must not hold close() up
                    try:
                        frames = self.sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    topic, payload = decode(frames)
                    self.count += 1
                    if self.validate_every and self.count % self.validate_every == 0:
                        self.unchecked.append((topic, dict(payload)))
                    payload["_rx_ns"] = time.time_ns()
                    with self.lock:
                        self.messages.setdefault(topic, []).append(payload)
            while self.unchecked and not self.stop_event.is_set() and not poller.poll(0):
                if not self._check_one(blocking=False):
                    break                   # `invalid` is checking them: back to receiving

    def _check_one(self, blocking: bool) -> bool:
        """Schema-check the oldest unchecked message; False if another checker holds the lock (and not
        ``blocking``)."""
        if not self.check_lock.acquire(blocking=blocking):
            return False
        try:
            if self.unchecked:
                topic, payload = self.unchecked.popleft()
                try:
                    validate(topic, payload)
                except Exception as exc:  # noqa: BLE001 - reported by the test
                    self._invalid.append(f"{topic}: {exc}")
        finally:
            self.check_lock.release()
        return True

    @property
    def invalid(self) -> list[str]:
        """The schema violations among the messages received so far (the ones the thread has not checked yet are
        checked now)."""
        while self.unchecked:
            self._check_one(blocking=True)
        with self.check_lock:
            return list(self._invalid)

    def get(self, topic: str) -> list[dict]:
        with self.lock:
            return list(self.messages.get(topic, []))

    def last(self, topic: str) -> dict | None:
        with self.lock:
            items = self.messages.get(topic)
            return items[-1] if items else None

    def close(self):
        stop_thread(self.stop_event, self.thread)
        self.sock.close(0)


def stop_thread(stop_event: threading.Event, thread: threading.Thread) -> None:
    """Ask a socket's thread to stop and wait for it: the caller closes the socket afterwards, never under it (a
    socket closed while its thread still uses it raises ZMQError in that thread, reported in whatever test runs then;
    a busy machine can hold a thread off the CPU for seconds)."""
    stop_event.set()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        raise AssertionError(f"{thread.name} still running {DEADLINE_S:.0f} s after it was asked to stop")


class SimPublisher:
    """Publishes sim/state at ``rate_hz`` from a thread on the sim PUB endpoint: q = q_of_t(t) per joint."""

    def __init__(self, endpoint: str, joint_names: list[str], q_of_t, rate_hz: float = 1000.0):
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.PUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)
        self.names, self.q_of_t, self.period = joint_names, q_of_t, 1.0 / rate_hz
        self.seq = 0
        self.paused = threading.Event()
        self.stop_event = threading.Event()
        self.override = None       # a function payload -> payload, to send bad states
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        t0 = time.monotonic()
        next_t = t0
        while not self.stop_event.is_set():
            next_t += self.period
            delay = next_t - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if self.paused.is_set():
                continue
            t = time.monotonic() - t0
            n = len(self.names)
            payload = {"v": 1, "seq": self.seq, "t": t, "stamp_ns": time.time_ns(), "joint_names": self.names,
                       "q": [float(x) for x in self.q_of_t(t)], "qd": [0.0] * n, "qdd": [0.0] * n,
                       "tau": [0.0] * n, "strain": [0.0] * n, "base_pos": [0.0] * 3,
                       "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6, "base_wrench": [0.0] * 6,
                       "ext_wrench": [0.0] * 6}
            if self.override is not None:
                payload = self.override(payload)
            self.sock.send_multipart(encode("sim/state", payload))
            self.seq += 1

    def close(self):
        stop_thread(self.stop_event, self.thread)
        self.sock.close(0)


def request(endpoint: str, cmd: str, timeout_s: float, **extra) -> dict:
    """One request on a REQ socket to a control endpoint (``{"cmd": cmd, ...}``, MessagePack); its reply."""
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
    sock.connect(endpoint)
    try:
        sock.send(msgpack.packb({"cmd": cmd, **extra}))
        return msgpack.unpackb(sock.recv(), raw=False)
    finally:
        sock.close(0)


class MmsProcess:
    """An ``mms`` command as a subprocess in its own session (stdout+stderr in a log file under ``tmp_path``),
    with a client for its control socket."""
    control_timeout_s = 10.0

    def __init__(self, tmp_path: Path, argv: list[str], root: Path, control: str):
        self.log_path = tmp_path / f"{argv[0]}-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("wb")
        self.control = control
        self.proc = subprocess.Popen(mms(*argv), stdout=self.log, stderr=subprocess.STDOUT, cwd=root,
                                     start_new_session=True)

    def ctl(self, cmd: str, timeout_s: float | None = None, **extra) -> dict:
        return request(self.control, cmd, self.control_timeout_s if timeout_s is None else timeout_s, **extra)

    def log_text(self) -> str:
        self.log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, sig=signal.SIGINT, timeout_s: float = DEADLINE_S) -> int:
        """Signal it (SIGINT: the program's own clean exit), wait, SIGKILL its group if it hangs; the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class DriverProc(MmsProcess):
    """``mms drive --rig RIG`` on the test's network file, with a hw/* collector (every message schema-checked)."""

    def __init__(self, tmp_path: Path, network: Path, *args: str, rig: Path, root: Path):
        self.ep = endpoints(network)
        self.collector = Collector(self.ep.driver_pub, validate_every=1)
        super().__init__(tmp_path, ["drive", "--rig", str(rig), "--network", str(network), *args], root,
                         self.ep.driver_control)

    def status(self) -> dict | None:
        return self.collector.last("hw/status")

    def wait_status(self, predicate, what: str, timeout_s: float = DEADLINE_S) -> dict:
        return wait_for(lambda: (s := self.status()) is not None and predicate(s) and s, timeout_s, what=what,
                        logs=(self.log_path,))

    def stop(self, sig=signal.SIGINT, timeout_s: float = DEADLINE_S) -> int:
        code = super().stop(sig, timeout_s)
        self.collector.close()
        return code


class ServeProc(MmsProcess):
    """``mms serve CONFIG`` on the test's network file (``robot``: a file name in configs/robots, or a path)."""
    control_timeout_s = 20.0

    def __init__(self, tmp_path: Path, network: Path, robot: str, *args: str, root: Path):
        self.ep = endpoints(network)
        super().__init__(tmp_path, ["serve", str(root / "configs" / "robots" / robot), "--network", str(network),
                                    *args], root, self.ep.sim_control)


@dataclass(frozen=True)
class Process:
    """One process as /proc/PID/stat tells it; ``start_ticks`` (clock ticks after boot) tells a pid's reuse apart."""
    pid: int
    ppid: int
    pgid: int
    state: str
    start_ticks: int

    @property
    def key(self) -> tuple[int, int]:
        return self.pid, self.start_ticks


def read_process(pid: int) -> Process | None:
    """The process ``pid`` from /proc, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    # proc(5): after "(comm)": state, ppid, pgrp, ...; starttime is field 22 of the line, 20th after the name
    return Process(pid, int(fields[1]), int(fields[2]), fields[0].decode(), int(fields[19]))


def process_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    process = read_process(pid)
    return process is not None and process.state != "Z"


def how_the_servos_were_left(commands: list[dict], statuses: list[dict], neutral: list[float],
                             tolerance_rad: float) -> str | None:
    """How a driver's run on a microcontroller rig left the servos at ``neutral`` (rad per channel), from its
    hw/command and hw/status messages in order (docs/driver.md, "Lifecycle" and "Heartbeats"), or None when it did
    not (a Dynamixel bus's watchdog holds its servos where they are instead: docs/dynamixel.md):

    - "ramped": its last setpoint is neutral within ``tolerance_rad`` (it ramped them there and, measured there,
      exited);
    - "device watchdog": a status after that setpoint says the link to the device was down. The driver can send
      nothing more then and exits (with ``--emulate`` it has stopped the emulator: the emulated unplug); the
      device's own watchdog takes the servos to neutral ``[watchdog] timeout_s`` after the last setpoint it got,
      which no host sees while the link is down. A busy machine that starves the device's stand-in takes this way.
    """
    last = commands[-1]
    if all(abs(angle - rest) < tolerance_rad for angle, rest in zip(last["setpoint_rad"], neutral, strict=True)):
        return "ramped"
    if any(s["stamp_ns"] > last["stamp_ns"] and s["link"]["state"] != "up" for s in statuses):
        return "device watchdog"
    return None


def sine(amplitude: float, freq_hz: float, phase: float = 0.0):
    return lambda t: amplitude * math.sin(2 * math.pi * freq_hz * t + phase)


class Stack:
    """Factories for the processes and sockets of one test (``mms drive``, ``mms serve``, a sim/state publisher,
    collectors), all on the network file ``network``; :meth:`close` stops everything, last made first."""
    deadline_s = DEADLINE_S
    wait_for = staticmethod(wait_for)
    alive = staticmethod(process_alive)
    mms = staticmethod(mms)

    def __init__(self, tmp_path: Path, network: Path, root: Path):
        self.tmp, self.net, self.root = tmp_path, network, root
        self.ep = endpoints(network)
        self.flapper_rig = root / "configs" / "rigs" / "flapper_rig.toml"
        self.raybot_rig = root / "configs" / "rigs" / "raybot_rig.toml"
        self.made: list = []

    def driver(self, *args: str, rig: Path | None = None) -> DriverProc:
        d = DriverProc(self.tmp, self.net, *args, rig=rig or self.flapper_rig, root=self.root)
        self.made.append(d)
        return d

    def sim(self, joint_names, q_of_t, rate_hz: float = 1000.0) -> SimPublisher:
        s = SimPublisher(self.ep.sim_pub, joint_names, q_of_t, rate_hz)
        self.made.append(s)
        return s

    def serve(self, robot: str = "flapper.toml", *args: str) -> ServeProc:
        s = ServeProc(self.tmp, self.net, robot, *args, root=self.root)
        self.made.append(s)
        return s

    def collect(self, endpoint: str, topics, validate_every: int = 0) -> Collector:
        c = Collector(endpoint, topics, validate_every)
        self.made.append(c)
        return c

    def close(self) -> None:
        for thing in reversed(self.made):
            try:
                if isinstance(thing, MmsProcess):
                    thing.stop()
                else:
                    thing.close()
            except Exception:  # teardown must stop everything else even if one part fails
                pass


def driver_options(rig: Path, *extra: str):
    """The driver's typed options (hil/drive/options.py), from ``mms drive --rig RIG`` and ``extra`` parsed as the
    command parses them."""
    from hil.drive.options import add_arguments, options_from_args
    from sim.cli_options import make_parser

    parser = make_parser("mms drive")
    add_arguments(parser)
    return options_from_args(parser.parse_args(["--rig", str(rig), *extra]))[0]


class LiveDriver:
    """A real :class:`hil.drive.driver.Driver` (its sockets bound on the network file) on a real emulator: the rig's
    :class:`firmware_interface.emulator.Emulator` in a thread on a pty, writing ``applied_log``. The test calls
    the driver's handlers itself (no loop thread: nothing races with it); :meth:`step` does one pass of the
    driver's loop without the wait. ``extra``: more ``mms drive`` options."""

    def __init__(self, rig_path: Path, network: Path, applied_log: Path, *extra: str):
        from firmware_interface.emulator import Emulator
        from firmware_interface.pty_device import AppliedLog
        from firmware_interface.rigs.mcu import load_rig
        from hil.drive.driver import Driver
        from hil.drive.links.serial import SerialLink

        self.rig = load_rig(rig_path)
        self.applied_log = applied_log
        self.emulator = Emulator(self.rig, applied_log=AppliedLog(applied_log))
        self.thread = threading.Thread(target=self.emulator.run, daemon=True)
        self.thread.start()
        self.driver = Driver(self.rig, SerialLink(self.rig), driver_options(rig_path, "--network", str(network), *extra),
                             port=self.emulator.slave_path)
        self.driver.open_sockets()
        self.driver.request_configure()
        wait_for(lambda: self.step() or self.driver.link.up, what="the driver's link up")

    def step(self, now: float | None = None) -> None:
        """(Re)connect when due, read the port and the SUB socket."""
        d = self.driver
        now = time.monotonic() if now is None else now
        if d.want_link and d.link.state == "closed" and now >= d.next_connect_s:
            d.connect(now)
        if d.link.port is not None:
            d.read_serial(now)
        d.read_sim(now)

    def close(self) -> None:
        self.driver.close()
        self.emulator.stop()
        self.thread.join(10)
