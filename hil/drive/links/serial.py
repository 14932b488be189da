"""The driver's serial link: port, framing (firmware_interface.protocol), handshake and counters.

Transport only: it opens the port, writes encoded frames, feeds received bytes to the protocol's
:class:`~firmware_interface.protocol.StreamDecoder` and runs the handshake (HELLO -> DEVICE_INFO checked
against the rig file -> CONFIGURE -> ACK) as a small state machine, so the driver's loop never blocks on it.
Counters survive reconnects (they are totals over the driver's life), and a reconnect resets the decoder's
sequence tracking so a restarted device does not count as a gap.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import serial

from firmware_interface import protocol as p
from firmware_interface.rigs.mcu import Rig
from hil.drive.inputs import SetpointLimits

#: how long the device has to answer HELLO, then CONFIGURE (s); each is resent every HELLO_RETRY_S meanwhile
HANDSHAKE_TIMEOUT_S = 1.0
HELLO_RETRY_S = 0.2
#: longest a frame write may block on a full port before it is counted as dropped (s)
WRITE_TIMEOUT_S = 0.02
#: read at most this many bytes per call
READ_CHUNK = 65536


class LinkError(RuntimeError):
    """The port failed or the device is not the one the rig file describes; the message is one line."""


def open_port(port_name: str, baud: int) -> serial.Serial:
    """``port_name`` opened as every driver link uses it: reads never block, a write blocks at most
    WRITE_TIMEOUT_S, the port is exclusive (a second driver on it fails here) and stale input is discarded.
    ``baud`` in bit/s. LinkError ("cannot open PORT: why") if it cannot be opened."""
    try:
        port = serial.Serial(port_name, baud, timeout=0, write_timeout=WRITE_TIMEOUT_S, exclusive=True)
    except (serial.SerialException, OSError, ValueError) as exc:
        raise LinkError(f"cannot open {port_name}: {exc}") from None
    port.reset_input_buffer()
    return port


@dataclass
class LinkTotals:
    """Totals over every connection of this driver (the decoder's counters restart with each connection)."""
    frames_ok: int = 0
    crc_errors: int = 0
    framing_errors: int = 0
    oversize: int = 0
    malformed: int = 0
    seq_gaps: int = 0
    seq_repeats: int = 0
    bytes_rx: int = 0
    frames_sent: int = 0
    bytes_sent: int = 0
    write_timeouts: int = 0
    reconnects: int = 0
    connects: int = 0
    link_losses: int = 0
    nacks: dict = field(default_factory=dict)


class SerialLink:
    """One serial port to the device. ``state``: closed -> hello -> configuring -> up; any error -> closed."""

    def __init__(self, rig: Rig):
        self.rig = rig
        self.port_name: str | None = None
        self.port: serial.Serial | None = None
        self.decoder = p.StreamDecoder()
        self._base = p.LinkCounters()          # counters of earlier connections
        self.totals = LinkTotals()
        self.state = "closed"
        self.tx_seq = 0
        self.device_info: p.DeviceInfo | None = None
        self.handshake_deadline = 0.0
        self.next_hello = 0.0
        self.configure_seqs: set[int] = set()     # seqs of the CONFIGURE frames sent (any ACK will do)
        self.next_configure = 0.0
        self.last_rx_s: float | None = None
        self.device_stats: p.LinkStats | None = None
        #: the servo positions are sampled with the sensors, on the device's clock: no separate read time
        self.servo_read_ns: int | None = None
        self.limits = SetpointLimits(rig.servos)      # the last line before the port

    # ---- port ---------------------------------------------------------------------------------------
    def open(self, port_name: str, now_s: float) -> None:
        """Open ``port_name`` and start the handshake; LinkError if the port cannot be opened."""
        self.close()
        self.port = open_port(port_name, self.rig.baud)
        self.port_name = port_name
        self._base = self._sum_counters()
        self.decoder = p.StreamDecoder()
        self.device_info = None
        self.device_stats = None
        self.state = "hello"
        self.handshake_deadline = now_s + HANDSHAKE_TIMEOUT_S
        self.next_hello = now_s
        self.last_rx_s = None
        self.totals.connects += 1

    def close(self) -> None:
        if self.port is not None:
            try:
                self.port.close()
            except (serial.SerialException, OSError):
                pass
        self.port = None
        self.state = "closed"

    def fileno(self) -> int | None:
        return None if self.port is None else self.port.fileno()

    @property
    def up(self) -> bool:
        return self.state == "up"

    # ---- I/O ----------------------------------------------------------------------------------------
    def send(self, message: p.Message, t_us: int = 0) -> int | None:
        """Write one frame; return its seq, or None for SETPOINTS the last line refused (not finite, wrong
        count: nothing is sent). LinkError if the port failed (a write timeout only counts)."""
        if self.port is None:
            raise LinkError("port not open")
        if isinstance(message, p.Setpoints):
            raw = self.limits.apply(message.raw)
            if raw is None:
                return None
            message = p.Setpoints(raw)
        seq = self.tx_seq
        self.tx_seq = (self.tx_seq + 1) % p.SEQ_MODULUS
        data = p.encode(message, seq, t_us)
        try:
            self.port.write(data)
        except serial.SerialTimeoutException:
            self.totals.write_timeouts += 1
            return seq
        except (serial.SerialException, OSError) as exc:
            raise LinkError(f"write to {self.port_name} failed: {exc}") from None
        self.totals.frames_sent += 1
        self.totals.bytes_sent += len(data)
        return seq

    def receive(self, now_s: float) -> list[p.Packet]:
        """Read what the port has and decode it; LinkError if the port is gone (device unplugged/killed)."""
        if self.port is None:
            return []
        try:
            data = self.port.read(READ_CHUNK)
        except (serial.SerialException, OSError) as exc:
            raise LinkError(f"read from {self.port_name} failed: {exc}") from None
        if not data:
            return []
        packets = self.decoder.feed(data)
        if packets:
            self.last_rx_s = now_s
        return packets

    # ---- handshake ----------------------------------------------------------------------------------
    def handshake_step(self, packets: list[p.Packet], now_s: float) -> list[p.Packet]:
        """Advance the handshake with ``packets``; return the packets it did not consume. LinkError on a
        wrong device or a timeout."""
        if self.state not in ("hello", "configuring"):
            return packets
        rest = []
        for packet in packets:
            m = packet.message
            if self.state == "hello" and isinstance(m, p.DeviceInfo):
                self._check_device(m)
                self.device_info = m
                self.state = "configuring"
                self.handshake_deadline = now_s + HANDSHAKE_TIMEOUT_S
                self.configure_seqs = set()
                self.next_configure = now_s
            elif self.state == "configuring" and isinstance(m, (p.Ack, p.Nack)) and m.msg_type == p.T_CONFIGURE \
                    and m.seq in self.configure_seqs:
                if isinstance(m, p.Nack):
                    raise LinkError(f"device refused the rig's configuration: "
                                    f"{p.NACK_REASONS.get(m.reason, m.reason)}")
                self.state = "up"
            else:
                rest.append(packet)
        # requests are resent until answered: a frame lost to line noise must not fail the handshake
        if self.state == "hello" and now_s >= self.next_hello:
            self.send(p.Hello())
            self.next_hello = now_s + HELLO_RETRY_S
        if self.state == "configuring" and now_s >= self.next_configure:
            self.configure_seqs.add(self.send(p.Configure(
                sample_rate_hz=self.rig.telemetry_hz, samples_per_frame=self.rig.samples_per_frame,
                watchdog_ms=max(1, int(round(self.rig.watchdog_timeout_s * 1000))))))
            self.next_configure = now_s + HELLO_RETRY_S
        if self.state in ("hello", "configuring") and now_s > self.handshake_deadline:
            what = "DEVICE_INFO (no answer to HELLO)" if self.state == "hello" else "ACK of CONFIGURE"
            raise LinkError(f"{self.port_name}: no {what} within {HANDSHAKE_TIMEOUT_S:.1f} s")
        return rest

    def _check_device(self, info: p.DeviceInfo) -> None:
        rig = self.rig
        if info.protocol_version != p.PROTOCOL_VERSION:
            raise LinkError(f"device speaks protocol version {info.protocol_version}, this driver "
                            f"{p.PROTOCOL_VERSION}")
        if info.rig_name != rig.name:
            raise LinkError(f"device is rig {info.rig_name!r}, the rig file {rig.path} describes {rig.name!r}")
        counts = (len(rig.servos), len(rig.strain), len(rig.load))
        if (info.n_servo, info.n_strain, info.n_load) != counts:
            raise LinkError(f"device has {info.n_servo} servo / {info.n_strain} strain / {info.n_load} load "
                            f"channels, the rig file {counts[0]} / {counts[1]} / {counts[2]}")

    # ---- counters -----------------------------------------------------------------------------------
    def _sum_counters(self) -> p.LinkCounters:
        a, b = self._base, self.decoder.counters
        return p.LinkCounters(**{k: getattr(a, k) + getattr(b, k) for k in a.as_dict()})

    def counters(self) -> dict:
        c = self._sum_counters()
        t = self.totals
        return {"frames_ok": c.frames, "crc_errors": c.crc_errors, "framing_errors": c.framing_errors,
                "oversize": c.oversize, "malformed": c.malformed + c.bad_version + c.unknown_type,
                "seq_gaps": c.seq_gaps, "seq_repeats": c.seq_repeats, "bytes_rx": c.bytes,
                "frames_sent": t.frames_sent, "bytes_sent": t.bytes_sent, "write_timeouts": t.write_timeouts,
                "reconnects": t.reconnects, "link_losses": t.link_losses,
                "nacks": {str(k): v for k, v in t.nacks.items()}, "last_line": self.limits.counters()}

    def emulators(self) -> tuple:
        return ()                                   # the device's emulator, if any, is the driver's


def now_us() -> int:
    """Host clock for outgoing frame headers, µs (wraps in the header)."""
    return time.monotonic_ns() // 1000
