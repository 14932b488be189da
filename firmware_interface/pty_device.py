"""A device on a pseudo-terminal: the transport and process shell that both emulators share.

What is the same for the rig microcontroller (firmware_interface/emulator.py, ``mms emulate``) and the
Dynamixel bus (firmware_interface/dynamixel_emulator.py) lives here; each of them keeps only its protocol and
device logic:

* :class:`PtyLink` — the device's end of the serial port: a pty in raw mode, bytes paced at 10 bits per byte
  at the baud rate both ways, a bounded transmit buffer;
* :class:`PtyDevice` — the loop around a link (read, device work, pump the UART, sleep in ``select`` until the
  next thing is due), stop / duration, the transport statistics;
* :class:`AppliedLog` — the ``--applied-log`` file: one JSON line per setpoint the device applied or refused,
  flushed line by line so that a reader sees it while the device runs and after it is killed;
* :func:`serve` — a command's process life: print the pty path, signals, run, final statistics (stderr and
  ``--stats FILE``, which is also rewritten every second while the device runs, so a supervisor can watch it).
"""
from __future__ import annotations

import argparse
import errno
import json
import math
import os
import random
import select
import signal
import sys
import termios
import threading
import time
import tty
from collections import deque
from typing import Callable

#: Bytes the device can hold for transmission (its UART ring buffer: 16 KiB, as on a Teensy/STM32-class board;
#: about 0.18 s of the flapper rig's telemetry). Frames that do not fit are dropped and counted.
TX_BUFFER_BYTES = 16384
#: How far ahead of the wire the device hands bytes to the pty, s (one loop period of slack).
TX_LEAD_S = 1e-3
#: An idle line accrues at most this much receive credit, s (bytes the host wrote meanwhile wait in the pty).
RX_IDLE_CREDIT_S = 0.01
#: Longest a stopped device spends on the host's unread backlog, s (see :meth:`PtyDevice.handle_backlog`); the
#: host may go on writing, so the backlog is read as it stands and not waited on.
BACKLOG_LIMIT_S = 1.0
#: How often ``serve`` rewrites the ``--stats`` file while the device runs, s.
STATS_PERIOD_S = 1.0


class PtyLink:
    """The device's end of the serial port: a pty master in raw mode, paced at 10 bits per byte both ways.

    The slave side is kept open by the emulator too, so the port stays valid while no host has it open
    (as a USB CDC device stays enumerated), and its termios settings persist.
    """

    def __init__(self, baud: int):
        self.master_fd, self.slave_fd = os.openpty()
        tty.setraw(self.slave_fd, termios.TCSANOW)
        os.set_blocking(self.master_fd, False)
        self.slave_path = os.ttyname(self.slave_fd)
        self.byte_s = 10.0 / baud                 # one start bit, 8 data bits, one stop bit
        self.tx_queue: deque[bytes] = deque()     # frames waiting for the wire, oldest first
        self.tx_queued_bytes = 0
        self.tx_free_s = 0.0                      # when the wire finishes the bytes already handed over
        self.rx_credit_s = None                   # the wire time up to which received bytes are accounted
        self.bytes_tx = 0
        self.bytes_rx = 0
        self.paced_rx = True                      # reads limited to what the wire delivers (False: backlog)
        self.closed = False

    def queue(self, frame: bytes, now: float) -> bool:
        """Queue a frame for sending; False (frame dropped) when the transmit buffer has no room for it."""
        if self.tx_queued_bytes + len(frame) > TX_BUFFER_BYTES:
            return False
        if not self.tx_queue:
            self.tx_free_s = max(self.tx_free_s, now)   # an idle wire starts sending now, not in the past
        self.tx_queue.append(frame)
        self.tx_queued_bytes += len(frame)
        return True

    def pump_tx(self, now: float) -> None:
        """Hand the pty as many queued bytes as the wire could have carried by ``now + TX_LEAD_S``.

        While bytes are queued the UART sends continuously (in hardware, whatever the firmware loop does), so
        the wire time runs on from the last byte, not from when this loop last woke up.
        """
        budget = int((now + TX_LEAD_S - self.tx_free_s) / self.byte_s)
        while self.tx_queue and budget > 0:
            head = self.tx_queue[0]
            chunk = head[:budget]
            try:
                written = os.write(self.master_fd, chunk)
            except BlockingIOError:
                return                             # nobody reads the port: the bytes wait in our buffer
            except OSError as exc:
                if exc.errno in (errno.EIO, errno.EAGAIN):
                    return
                raise
            budget -= written
            self.bytes_tx += written
            self.tx_free_s += written * self.byte_s
            self.tx_queued_bytes -= written
            if written == len(head):
                self.tx_queue.popleft()
            else:
                self.tx_queue[0] = head[written:]
                return

    def tx_wait_s(self, now: float) -> float | None:
        """Seconds until more queued bytes may go out (None when nothing is queued)."""
        if not self.tx_queue:
            return None
        return max(0.0, self.tx_free_s - TX_LEAD_S - now + self.byte_s)

    def read(self, now: float) -> bytes:
        """Read what the wire could have delivered since the last read (the host's extra bytes wait in the pty)."""
        if self.rx_credit_s is None or self.rx_credit_s < now - RX_IDLE_CREDIT_S:
            self.rx_credit_s = now - RX_IDLE_CREDIT_S
        budget = int((now - self.rx_credit_s) / self.byte_s) if self.paced_rx else 65536
        if budget <= 0:
            return b""
        try:
            data = os.read(self.master_fd, min(budget, 65536))
        except (BlockingIOError, InterruptedError):
            return b""
        except OSError as exc:
            if exc.errno == errno.EIO:              # no host has the port open
                return b""
            raise
        self.rx_credit_s += len(data) * self.byte_s
        self.bytes_rx += len(data)
        return data

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.master_fd)
            os.close(self.slave_fd)


class PtyDevice:
    """A device behind a :class:`PtyLink`, run by :meth:`run` (in a thread or a process) until :meth:`stop`.

    A subclass supplies the device: :meth:`step` (everything due at ``now``: read the link, answer, sample),
    :meth:`wake_s` (how long it may sleep), and optionally :meth:`on_start` / :meth:`on_stop`. Times are the
    device clock: s since :meth:`run` began.
    """

    #: Most the loop sleeps without looking at the port, s.
    max_idle_s = 2e-3

    def __init__(self, baud: int):
        self.baud = baud
        self.link = PtyLink(baud)
        self.stop_event = threading.Event()
        self.started_s = 0.0                       # time.monotonic() when run() began
        self.reason = ""                           # why run() ended: duration, stopped, or the device's own

    @property
    def slave_path(self) -> str:
        return self.link.slave_path

    def stop(self) -> None:
        """End :meth:`run` at its next wake-up (thread- and signal-safe)."""
        self.stop_event.set()

    def elapsed_s(self) -> float:
        return round(time.monotonic() - self.started_s, 3) if self.started_s else 0.0

    # -- the device's part --------------------------------------------------------------------------------------
    def on_start(self) -> None:
        """Called once when :meth:`run` begins, before the first :meth:`step`."""

    def on_stop(self) -> None:
        """Called once when :meth:`run` ends, after the port has closed."""

    def step(self, now: float) -> str | None:
        """Do everything due at ``now`` (s, device clock); return a reason to end the run, or None."""
        raise NotImplementedError

    def wake_s(self, now: float) -> float:
        """Seconds until the device next has something to do (the loop sleeps at most ``max_idle_s``)."""
        return self.max_idle_s

    # -- the loop -----------------------------------------------------------------------------------------------
    def run(self, duration_s: float | None = None, report: Callable[[], None] | None = None,
            report_period_s: float = STATS_PERIOD_S) -> str:
        """Run until :meth:`stop`, ``duration_s`` (s) or the device ends it; return why it ended. ``report``, if
        given, is called from the loop every ``report_period_s`` (s), between two passes of the device."""
        self.started_s = time.monotonic()
        self.on_start()
        link = self.link
        next_report = 0.0
        try:
            while not self.stop_event.is_set():
                now = time.monotonic() - self.started_s
                if duration_s is not None and now >= duration_s:
                    self.reason = "duration"
                    break
                if report is not None and now >= next_report:
                    next_report = now + report_period_s
                    report()
                reason = self.step(now)
                if reason:
                    self.reason = reason
                    break
                link.pump_tx(now)
                waits = [self.max_idle_s, self.wake_s(now), link.tx_wait_s(now)]
                select.select([link.master_fd], [], [], max(0.0, min(w for w in waits if w is not None)))
            else:
                self.reason = "stopped"
                self.handle_backlog()
        finally:
            # the port closes first, at once after the backlog, as a device powering off: what the host writes
            # while the device winds down (a physics plant's process may take seconds to end) fails on the host's
            # side instead of vanishing into a port nobody reads
            link.close()
            self.on_stop()
        return self.reason

    def handle_backlog(self) -> None:
        """On a stop, handle the bytes the host wrote that the loop has not read yet. A real device reads its
        UART at wire speed and is never behind; an emulator starved of CPU by a busy host is, and the frames
        waiting in the pty would otherwise vanish at the stop, neither handled nor counted as lost."""
        link = self.link
        link.paced_rx = False
        deadline = time.monotonic() + BACKLOG_LIMIT_S
        while time.monotonic() < deadline and select.select([link.master_fd], [], [], 0.0)[0]:
            before = link.bytes_rx
            now = time.monotonic() - self.started_s
            if self.step(now):
                break
            link.pump_tx(now)
            if link.bytes_rx == before:              # readable but nothing read: no host has the port open
                break

    def link_stats(self) -> dict:
        """The transport's part of the final statistics (the device adds its own)."""
        return {"reason": self.reason, "elapsed_s": self.elapsed_s(), "baud": self.baud,
                "bytes_tx": self.link.bytes_tx, "bytes_rx": self.link.bytes_rx}

    def stats(self) -> dict:
        return self.link_stats()


class AppliedLog:
    """``--applied-log FILE``: one JSON object per line for each setpoint the device applied or refused.

    Every record has ``seq`` (the frame's sequence number), ``t_us`` (device clock, µs since power-up, wrapping
    at 2^32 as the protocol's time stamps), ``host_ns`` (this host's wall clock, ``time.time_ns()``, when the
    device handled it: comparable with the driver's ``stamp_ns``) and ``result``: ``"applied"`` or
    ``"refused"``, the latter with a ``reason``; each device adds its own fields (docs/protocol.md lists both
    emulators'). Each line is written and flushed to the kernel as the frame is handled, so a reader sees
    it at once, and a killed device (even SIGKILL) loses at most the line of the frame it was handling; a
    reader should ignore a last line without its newline. Non-finite numbers are written as ``null``.

    An existing file is appended to (a restarted device keeps the earlier runs' lines; its ``seq`` and ``t_us``
    start again); a last line cut short by a kill is removed first, so it cannot run into the next line.
    """

    def __init__(self, path: str | os.PathLike):
        self.path = path
        _drop_unfinished_last_line(path)
        self.handle = open(path, "a", encoding="utf-8")
        self.lines = 0

    def write(self, record: dict) -> None:
        self.handle.write(json.dumps(_finite(record), separators=(",", ":")) + "\n")
        self.handle.flush()
        self.lines += 1

    def close(self) -> None:
        if not self.handle.closed:
            self.handle.close()


def _drop_unfinished_last_line(path: str | os.PathLike) -> None:
    """Truncate ``path`` after its last newline (nothing when it does not exist or ends with one)."""
    try:
        handle = open(path, "r+b")
    except FileNotFoundError:
        return
    with handle:
        data = handle.read()
        if data and not data.endswith(b"\n"):
            handle.truncate(data.rfind(b"\n") + 1)


def line_fault(data: bytes, rng: random.Random, drop_rate: float, corrupt_rate: float, counts: dict,
               margin: int = 0) -> bytes | None:
    """Injected faults on one device -> host frame: None when it is dropped (probability ``drop_rate``), else the
    frame, with one bit flipped with probability ``corrupt_rate`` (never in its first or last ``margin`` bytes,
    e.g. a frame's delimiters). ``counts["dropped"]`` and ``counts["corrupted"]`` count them."""
    if drop_rate and rng.random() < drop_rate:
        counts["dropped"] += 1
        return None
    if corrupt_rate and rng.random() < corrupt_rate:
        counts["corrupted"] += 1
        buf = bytearray(data)
        buf[rng.randrange(margin, len(buf) - margin)] ^= 1 << rng.randrange(8)
        data = bytes(buf)
    return data


def _finite(value):
    """``value`` with NaN and infinities as None (strict JSON), recursively through lists and dicts."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


def read_applied_log(path: str | os.PathLike) -> list[dict]:
    """The complete records of an applied log, oldest first (a last line cut short by a kill is left out)."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    return [json.loads(line) for line in text.split("\n")[:-1] if line]


def add_applied_log_argument(parser: argparse.ArgumentParser) -> None:
    """``--applied-log FILE``, for both emulators (docs/protocol.md describes their records)."""
    parser.add_argument("--applied-log", default=None, metavar="FILE",
                        help="write one JSON line per setpoint applied or refused (with the reason), flushed as "
                        "it happens")


def open_applied_log(path: str | None) -> AppliedLog | None:
    """The ``--applied-log`` file opened for appending (None without the option); a one-line ConfigError if it
    cannot be."""
    if path is None:
        return None
    try:
        return AppliedLog(path)
    except OSError as exc:
        from sim.config import ConfigError
        raise ConfigError(None, "--applied-log", f"cannot write {path}: {exc.strerror}") from None


def serve(device: PtyDevice, name: str, banner: str, *, duration_s: float | None, stats_path: str | None,
          signals: dict[int, Callable[[], None]] | None = None) -> int:
    """A device's process: the pty path as the first stdout line, ``banner`` on stderr, SIGINT/SIGTERM stop it
    (``signals`` adds handlers, e.g. SIGUSR1 for a button), then the final statistics as one JSON line on
    stderr and, with ``stats_path``, in that file. ``name`` prefixes the stderr lines. Returns the exit code."""
    print(device.slave_path, flush=True)
    print(f"{name}: {banner}", file=sys.stderr, flush=True)
    signal.signal(signal.SIGTERM, lambda *_: device.stop())
    signal.signal(signal.SIGINT, lambda *_: device.stop())
    for signum, handler in (signals or {}).items():
        signal.signal(signum, lambda *_, handler=handler: handler())

    def report() -> None:
        try:
            write_stats(stats_path, device.stats())
        except OSError as exc:                  # a full disk or a removed directory must not stop the device
            print(f"{name}: cannot write {stats_path}: {exc.strerror or exc}", file=sys.stderr, flush=True)

    reason = device.run(duration_s, report=report if stats_path else None)
    stats = device.stats()
    print(f"{name}: stopped ({reason}): {json.dumps(stats)}", file=sys.stderr, flush=True)
    if stats_path:
        write_stats(stats_path, stats)
    return 0


def write_stats(path: str | os.PathLike, stats: dict) -> None:
    """``stats`` as JSON at ``path``, replaced whole (written next to it, then renamed over it): a reader sees
    the previous file or this one, never half of one."""
    tmp = f"{os.fspath(path)}.tmp"
    with open(tmp, "w") as handle:
        json.dump(_finite(stats), handle, indent=2)
    os.replace(tmp, path)
