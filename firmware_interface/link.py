"""Host side of the serial link (transport): a pyserial port, the stream decoder and sequence numbering.

Used by the benchmark and the tests, and small enough for any host tool to reuse. The servo driver has its
own threads and lifecycle on top of the same protocol module.
"""
from __future__ import annotations

import time
from typing import Callable

import serial

from firmware_interface import protocol as p


class DeviceLink:
    """A serial port speaking the protocol: :meth:`send` numbers and frames messages; :meth:`poll` returns the
    good packets that arrived, counting every bad byte in ``decoder.counters``."""

    def __init__(self, port: str, baud: int, *, read_timeout_s: float = 0.01):
        self.port = serial.Serial(port, baud, timeout=read_timeout_s)
        self.port.reset_input_buffer()
        self.decoder = p.StreamDecoder()
        self.seq = 0
        self._t0 = time.monotonic()
        self._backlog: list[p.Packet] = []       # packets read by wait_for after the one it returned

    def send(self, message: p.Message) -> int:
        """Send one message; return the sequence number it went out with."""
        seq = self.seq
        self.port.write(p.encode(message, seq, int((time.monotonic() - self._t0) * 1e6)))
        self.seq = (self.seq + 1) % p.SEQ_MODULUS
        return seq

    def poll(self) -> list[p.Packet]:
        """Read what is waiting (or wait up to the read timeout for the first byte) and decode it."""
        backlog, self._backlog = self._backlog, []
        if backlog:
            return backlog
        waiting = self.port.in_waiting
        return self.decoder.feed(self.port.read(max(1, waiting)))

    def wait_for(self, predicate: Callable[[p.Packet], bool], timeout_s: float,
                 sink: list | None = None) -> p.Packet | None:
        """Poll until a packet satisfies ``predicate`` or ``timeout_s`` passes; every packet read on the way
        is appended to ``sink`` if given; those after the match stay for the next :meth:`poll`. Returns the
        matching packet or None."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            packets = self.poll()
            for k, packet in enumerate(packets):
                if sink is not None:
                    sink.append(packet)
                if predicate(packet):
                    self._backlog = packets[k + 1:] + self._backlog
                    return packet
        return None

    def request(self, message: p.Message, reply_type: type, timeout_s: float = 2.0) -> p.Packet | None:
        """Send ``message`` and wait for the first reply of ``reply_type`` (an Ack/Nack must name our seq)."""
        seq = self.send(message)

        def matches(packet: p.Packet) -> bool:
            m = packet.message
            if not isinstance(m, reply_type):
                return False
            return not isinstance(m, (p.Ack, p.Nack)) or m.seq == seq
        return self.wait_for(matches, timeout_s)

    def close(self) -> None:
        self.port.close()
