"""The dashboard's transport: a SUB worker on its own QThread and REQ/REP control clients that never block the GUI.

Data reaches the GUI thread only through Qt signals (queued connections across threads): the worker owns its
ZeroMQ socket and its :class:`gui.signals.MessageProcessor`, and emits a :class:`gui.signals.Batch` every
``batch_period_s``. The GUI thread owns the ring buffers. Each control client (driver, recorder) also lives
on its own thread, so an e-stop never waits behind a slow recorder.
"""
from __future__ import annotations

import threading
import time

import msgpack
import zmq
from PyQt5.QtCore import QObject, QThread, pyqtSignal, pyqtSlot

from gui.signals import MessageProcessor
from sim.config import ConfigError
from sim.network import Curve, open_socket

#: how long the SUB worker waits in one poll, ms: bounds its reaction to stop()
SUBSCRIBER_POLL_MS = 10
#: at most this many messages are read between two batch checks, so a flood cannot starve the batching
MAX_MESSAGES_PER_POLL = 5000
#: receive high-water mark, messages: a plotting subscriber keeps every sample but must not grow without
#: bound if the GUI stalls; drops beyond it show up as seq gaps
SUBSCRIBER_RCVHWM = 100_000


class SubscriberWorker(QObject):
    """Subscribes to ``sim/*`` and ``hw/*`` on the given endpoints and emits batches of decoded samples."""

    batch_ready = pyqtSignal(object)   # gui.signals.Batch
    failed = pyqtSignal(str)
    finished = pyqtSignal()

    def __init__(self, endpoints: list[str], origin_ns: int, batch_period_s: float = 0.02,
                 curve: Curve | None = None, maps: list | None = None):
        super().__init__()
        self.maps = list(maps or [])   # the rig's measured-channel maps (firmware_interface.rigs.host.channel_maps)
        self.endpoints = list(endpoints)
        self.curve = curve
        self.origin_ns = origin_ns
        self.batch_period_s = batch_period_s
        self._stop = threading.Event()

    def stop(self) -> None:
        """Thread-safe: ask the loop to end (it ends within one poll)."""
        self._stop.set()

    @pyqtSlot()
    def run(self) -> None:
        processor = MessageProcessor(self.origin_ns, self.maps)
        socket = None
        try:
            socket = open_socket(zmq.Context.instance(), zmq.SUB, self.endpoints[0], bind=False, curve=self.curve,
                                 what="dashboard SUB", options={zmq.LINGER: 0, zmq.RCVHWM: SUBSCRIBER_RCVHWM})
            for endpoint in self.endpoints[1:]:
                socket.connect(endpoint)
            for prefix in (b"sim/", b"hw/"):
                socket.setsockopt(zmq.SUBSCRIBE, prefix)
            poller = zmq.Poller()
            poller.register(socket, zmq.POLLIN)
            next_batch = time.monotonic() + self.batch_period_s
            while not self._stop.is_set():
                if poller.poll(SUBSCRIBER_POLL_MS):
                    for _ in range(MAX_MESSAGES_PER_POLL):
                        try:
                            frames = socket.recv_multipart(flags=zmq.NOBLOCK)
                        except zmq.Again:
                            break
                        processor.feed_frames(frames, time.time_ns())
                now = time.monotonic()
                if now >= next_batch:
                    next_batch = now + self.batch_period_s
                    if processor.has_news():
                        self.batch_ready.emit(processor.take_batch())
        except (zmq.ZMQError, ConfigError) as exc:
            self.failed.emit(f"subscriber: {exc}")
        finally:
            if socket is not None:
                socket.close(linger=0)
            self.finished.emit()


class ControlClient(QObject):
    """REQ/REP client of one control socket (driver or recorder), for use on its own QThread.

    A request waits at most ``timeout_s`` for the reply; on timeout the REQ socket (stuck in its send/recv
    state machine) is closed and recreated for the next request, and ``failed`` says so.
    """

    replied = pyqtSignal(dict, dict)   # request, reply map
    failed = pyqtSignal(dict, str)     # request, one-line reason

    def __init__(self, endpoint: str, timeout_s: float = 1.0, curve: Curve | None = None):
        super().__init__()
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.curve = curve
        self._socket = None

    @pyqtSlot(dict)
    def send(self, request: dict) -> None:
        try:
            if self._socket is None:
                self._socket = open_socket(zmq.Context.instance(), zmq.REQ, self.endpoint, bind=False,
                                           curve=self.curve, what="dashboard control", options={zmq.LINGER: 0})
            self._socket.send(msgpack.packb(request, use_bin_type=True))
            if not self._socket.poll(int(self.timeout_s * 1000), zmq.POLLIN):
                self.close()
                self.failed.emit(request, f"no reply from {self.endpoint} within {self.timeout_s:g} s")
                return
            raw = self._socket.recv()
        except (zmq.ZMQError, ConfigError) as exc:
            self.close()
            self.failed.emit(request, f"{self.endpoint}: {exc}")
            return
        try:
            reply = msgpack.unpackb(raw, raw=False)
        except Exception as exc:  # msgpack raises several unrelated types on bad bytes
            self.failed.emit(request, f"malformed reply from {self.endpoint}: {exc}")
            return
        if not isinstance(reply, dict):
            self.failed.emit(request, f"malformed reply from {self.endpoint}: not a map")
            return
        self.replied.emit(request, reply)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close(linger=0)
            self._socket = None


class ControlChannel(QObject):
    """A :class:`ControlClient` on its own QThread; ``request(map)`` returns at once, the answer comes by signal."""

    _send = pyqtSignal(dict)

    def __init__(self, endpoint: str, timeout_s: float, parent: QObject | None = None, curve: Curve | None = None):
        super().__init__(parent)
        self.thread = QThread()
        self.client = ControlClient(endpoint, timeout_s, curve)
        self.client.moveToThread(self.thread)
        self._send.connect(self.client.send)
        self.replied = self.client.replied
        self.failed = self.client.failed
        self.thread.start()

    def request(self, payload: dict) -> None:
        self._send.emit(payload)

    def shutdown(self) -> None:
        self.thread.quit()
        self.thread.wait()
        self.client.close()   # the thread has ended: no concurrent use of the socket
