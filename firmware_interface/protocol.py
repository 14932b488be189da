"""The PC <-> microcontroller serial protocol: a pure codec (bytes <-> typed messages) and a stream decoder.

This module is the protocol only (docs/protocol.md is its specification, byte by byte); it never touches a port,
a socket or a thread. On the wire a frame is::

    COBS( header | payload | crc ) 0x00

* header, 8 bytes, little-endian: ``u8 version, u8 type, u16 seq, u32 t_us`` (the sender's clock, µs,
  wrapping at 2**32).
* payload: per message type, little-endian (see the ``_encode_*`` / ``_decode_*`` pairs below).
* crc: CRC-16/CCITT-FALSE (catalogue name CRC-16/IBM-3740: poly 0x1021, init 0xFFFF, no reflection,
  xorout 0; check value 0x29B1 for b"123456789") over header and payload, sent most significant byte first,
  so the CRC of a whole good frame (CRC included) is 0.
* COBS (Cheshire & Baker, "Consistent Overhead Byte Stuffing", IEEE/ACM Trans. Networking 7(2), 1999)
  removes every 0x00, which then delimits frames. Senders put a 0x00 before *and* after each frame, so
  line noise between frames never merges with the next good frame.

The unencoded frame (header + payload + crc) is at most :data:`MAX_FRAME_BYTES`; its COBS form at most
:data:`MAX_ENCODED_BYTES` (without delimiters).
"""
from __future__ import annotations

import binascii
import struct
from dataclasses import dataclass, field, fields

from cobs import cobs

PROTOCOL_VERSION = 1

HEADER = struct.Struct("<BBHI")      # version, type, seq, t_us
HEADER_BYTES = HEADER.size           # 8
CRC_BYTES = 2
MIN_FRAME_BYTES = HEADER_BYTES + CRC_BYTES
MAX_FRAME_BYTES = 512                # header + payload + crc, before COBS
MAX_PAYLOAD_BYTES = MAX_FRAME_BYTES - HEADER_BYTES - CRC_BYTES
#: COBS adds one byte per started block of 254 data bytes.
MAX_ENCODED_BYTES = MAX_FRAME_BYTES + (MAX_FRAME_BYTES + 253) // 254
DELIMITER = b"\x00"
SEQ_MODULUS = 1 << 16
TIME_MODULUS = 1 << 32
MAX_NAME_BYTES = 32
MAX_REJECTED = 16

# Message types (u8). Host -> device are 0x01..0x7F requests, device -> host replies and streams; a few
# (heartbeat, e-stop) go both ways.
T_HELLO = 0x01
T_DEVICE_INFO = 0x02
T_SETPOINTS = 0x10
T_TELEMETRY = 0x11
T_HEARTBEAT = 0x20
T_ESTOP = 0x30
T_ESTOP_RESET = 0x31
T_CONFIGURE = 0x40
T_ACK = 0x50
T_NACK = 0x51
T_GET_LINK_STATS = 0x60
T_LINK_STATS = 0x61

# Status flags (u8) carried by heartbeat and telemetry.
FLAG_ESTOP = 0x01            # e-stop latched: servos held at neutral until ESTOP_RESET
FLAG_WATCHDOG = 0x02         # no valid setpoints within the watchdog timeout: servos at neutral
FLAG_CONFIGURED = 0x04       # a CONFIGURE has been accepted since power-up
FLAG_BUTTON = 0x08           # the rig's e-stop button is held: ESTOP_RESET is refused until it is released

# E-stop reasons (u8).
ESTOP_HOST = 1               # the host sent ESTOP
ESTOP_BUTTON = 2             # the rig's physical button
ESTOP_FAULT = 3              # the firmware detected a fault (e.g. a sensor out of range)

# NACK reasons (u8).
NACK_UNKNOWN_TYPE = 1
NACK_BAD_LENGTH = 2
NACK_ESTOP_LATCHED = 3
NACK_CHANNEL_COUNT = 4
NACK_OUT_OF_RANGE = 5
NACK_BAD_VERSION = 6
NACK_BAD_CONFIG = 7
NACK_NOT_A_REQUEST = 8

NACK_REASONS = {
    NACK_UNKNOWN_TYPE: "unknown message type", NACK_BAD_LENGTH: "payload length wrong for its type",
    NACK_ESTOP_LATCHED: "e-stop latched", NACK_CHANNEL_COUNT: "wrong number of channels",
    NACK_OUT_OF_RANGE: "value out of range", NACK_BAD_VERSION: "unsupported protocol version",
    NACK_BAD_CONFIG: "configuration rejected", NACK_NOT_A_REQUEST: "message type is not a request",
}


class ProtocolError(ValueError):
    """A frame that cannot be decoded. ``kind`` names the counter it goes to in :class:`LinkCounters`."""

    def __init__(self, kind: str, message: str, type_id: int | None = None, seq: int | None = None):
        self.kind = kind
        self.type_id = type_id      # set when the CRC was right, so a device can NACK the frame
        self.seq = seq
        super().__init__(message)


# ----------------------------------------------------------------------------------------------------------
# Messages
# ----------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hello:
    """Host -> device: who are you? The device answers with :class:`DeviceInfo`."""


@dataclass(frozen=True)
class DeviceInfo:
    """Device -> host: protocol version, rig name, channel counts, firmware version (major, minor, patch)."""
    protocol_version: int
    firmware_version: tuple[int, int, int]
    rig_name: str
    n_servo: int
    n_strain: int
    n_load: int


@dataclass(frozen=True)
class Setpoints:
    """Host -> device: one setpoint per servo channel, all channels in one frame, in the channel's raw unit
    (pulse width µs for a hobby servo, position ticks for a bus servo), float32 on the wire."""
    raw: tuple[float, ...]


@dataclass(frozen=True)
class TelemetrySample:
    """One sampling instant. ``t_us``: device clock, µs. ``servo``: measured servo positions, raw unit
    (float32). ``strain``, ``load``: ADC counts (int32) of the strain gauges and load-cell channels."""
    t_us: int
    servo: tuple[float, ...]
    strain: tuple[int, ...]
    load: tuple[int, ...]


@dataclass(frozen=True)
class Telemetry:
    """Device -> host: a batch of samples (oldest first) and the device's status flags when it was sent."""
    flags: int
    n_servo: int
    n_strain: int
    n_load: int
    samples: tuple[TelemetrySample, ...]


@dataclass(frozen=True)
class Heartbeat:
    """Both ways: liveness. From the device it carries its status flags and uptime (ms, wrapping)."""
    flags: int
    uptime_ms: int


@dataclass(frozen=True)
class EStop:
    """Both ways: the host orders an e-stop, or the device reports one (button, fault). Latched."""
    reason: int


@dataclass(frozen=True)
class EStopReset:
    """Host -> device: release a latched e-stop. Servos stay at neutral until new setpoints arrive."""


@dataclass(frozen=True)
class Configure:
    """Host -> device: sampling rate (Hz), samples per telemetry frame, watchdog timeout (ms)."""
    sample_rate_hz: int
    samples_per_frame: int
    watchdog_ms: int


@dataclass(frozen=True)
class Ack:
    """Device -> host: the request of type ``msg_type`` with sequence number ``seq`` was applied."""
    msg_type: int
    seq: int


@dataclass(frozen=True)
class Nack:
    """Device -> host: the request was rejected; ``reason`` is one of the ``NACK_*`` codes."""
    msg_type: int
    seq: int
    reason: int


@dataclass(frozen=True)
class GetLinkStats:
    """Host -> device: send your :class:`LinkStats`."""


@dataclass(frozen=True)
class LinkStats:
    """Device -> host: the device's receive/transmit counters since power-up (u32 each, wrapping)."""
    frames_rx: int
    frames_tx: int
    crc_errors: int
    framing_errors: int
    oversize: int
    malformed: int
    seq_gaps: int
    tx_dropped: int
    watchdog_trips: int


Message = (Hello | DeviceInfo | Setpoints | Telemetry | Heartbeat | EStop | EStopReset | Configure | Ack | Nack
           | GetLinkStats | LinkStats)


@dataclass(frozen=True)
class Packet:
    """A message with its header fields: the sender's ``seq`` (u16) and clock ``t_us`` (u32)."""
    seq: int
    t_us: int
    message: Message
    version: int = PROTOCOL_VERSION


# ----------------------------------------------------------------------------------------------------------
# Payload codecs, one pair per type
# ----------------------------------------------------------------------------------------------------------
_U8 = struct.Struct("<B")
_DEVICE_INFO = struct.Struct("<BBBBBBBB")  # protocol, fw major, minor, patch, n_servo, n_strain, n_load, name len
_TELEMETRY_HEAD = struct.Struct("<BBBBB")  # flags, n_servo, n_strain, n_load, n_samples
_HEARTBEAT = struct.Struct("<BI")
_CONFIGURE = struct.Struct("<HBH")
_ACK = struct.Struct("<BH")
_NACK = struct.Struct("<BHB")
_LINK_STATS = struct.Struct("<9I")


def telemetry_sample_bytes(n_servo: int, n_strain: int, n_load: int) -> int:
    """Bytes of one telemetry sample on the wire: u32 time + float32 per servo + int32 per sensor channel."""
    return 4 + 4 * (n_servo + n_strain + n_load)


def max_samples_per_frame(n_servo: int, n_strain: int, n_load: int) -> int:
    """The largest telemetry batch that fits in :data:`MAX_FRAME_BYTES`."""
    return min(255, (MAX_PAYLOAD_BYTES - _TELEMETRY_HEAD.size) // telemetry_sample_bytes(n_servo, n_strain, n_load))


def _expect_len(payload: bytes, n: int, name: str) -> None:
    if len(payload) != n:
        raise ProtocolError("malformed", f"{name}: payload of {len(payload)} bytes, expected {n}")


def _encode_empty(_: Message) -> bytes:
    return b""


def _decode_empty(cls):
    def decode(payload: bytes):
        _expect_len(payload, 0, cls.__name__)
        return cls()
    return decode


def _encode_device_info(m: DeviceInfo) -> bytes:
    name = m.rig_name.encode("utf-8")
    if len(name) > MAX_NAME_BYTES:
        raise ValueError(f"rig name {m.rig_name!r} longer than {MAX_NAME_BYTES} bytes")
    return _DEVICE_INFO.pack(m.protocol_version, *m.firmware_version, m.n_servo, m.n_strain, m.n_load,
                             len(name)) + name


def _decode_device_info(p: bytes) -> DeviceInfo:
    if len(p) < _DEVICE_INFO.size:
        raise ProtocolError("malformed", "DeviceInfo: payload too short")
    version, major, minor, patch, n_servo, n_strain, n_load, n_name = _DEVICE_INFO.unpack_from(p)
    _expect_len(p, _DEVICE_INFO.size + n_name, "DeviceInfo")
    if n_name > MAX_NAME_BYTES:
        raise ProtocolError("malformed", "DeviceInfo: rig name too long")
    try:
        name = p[_DEVICE_INFO.size:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("malformed", "DeviceInfo: rig name is not UTF-8") from None
    return DeviceInfo(version, (major, minor, patch), name, n_servo, n_strain, n_load)


def _encode_setpoints(m: Setpoints) -> bytes:
    if not 1 <= len(m.raw) <= 255:
        raise ValueError("Setpoints: 1 to 255 channels")
    return _U8.pack(len(m.raw)) + struct.pack(f"<{len(m.raw)}f", *m.raw)


def _decode_setpoints(p: bytes) -> Setpoints:
    if not p:
        raise ProtocolError("malformed", "Setpoints: empty payload")
    n = p[0]
    _expect_len(p, 1 + 4 * n, "Setpoints")
    if n == 0:
        raise ProtocolError("malformed", "Setpoints: zero channels")
    return Setpoints(struct.unpack_from(f"<{n}f", p, 1))


def _encode_telemetry(m: Telemetry) -> bytes:
    sample_format = struct.Struct(f"<I{m.n_servo}f{m.n_strain}i{m.n_load}i")
    if len(m.samples) > 255:
        raise ValueError("Telemetry: at most 255 samples per frame")
    parts = [_TELEMETRY_HEAD.pack(m.flags, m.n_servo, m.n_strain, m.n_load, len(m.samples))]
    for s in m.samples:
        if (len(s.servo), len(s.strain), len(s.load)) != (m.n_servo, m.n_strain, m.n_load):
            raise ValueError("Telemetry: a sample's channel counts differ from the frame's")
        parts.append(sample_format.pack(s.t_us, *s.servo, *s.strain, *s.load))
    return b"".join(parts)


def _decode_telemetry(p: bytes) -> Telemetry:
    if len(p) < _TELEMETRY_HEAD.size:
        raise ProtocolError("malformed", "Telemetry: payload too short")
    flags, n_servo, n_strain, n_load, n_samples = _TELEMETRY_HEAD.unpack_from(p)
    sample_format = struct.Struct(f"<I{n_servo}f{n_strain}i{n_load}i")
    _expect_len(p, _TELEMETRY_HEAD.size + n_samples * sample_format.size, "Telemetry")
    samples = []
    for k in range(n_samples):
        values = sample_format.unpack_from(p, _TELEMETRY_HEAD.size + k * sample_format.size)
        a, b = 1 + n_servo, 1 + n_servo + n_strain
        samples.append(TelemetrySample(values[0], values[1:a], values[a:b], values[b:]))
    return Telemetry(flags, n_servo, n_strain, n_load, tuple(samples))


def _struct_codec(cls, layout: struct.Struct):
    def encode(m) -> bytes:
        return layout.pack(*(getattr(m, f.name) for f in fields(cls)))

    def decode(p: bytes):
        _expect_len(p, layout.size, cls.__name__)
        return cls(*layout.unpack(p))
    return encode, decode


_CODECS = {
    Hello: (T_HELLO, _encode_empty, _decode_empty(Hello)),
    DeviceInfo: (T_DEVICE_INFO, _encode_device_info, _decode_device_info),
    Setpoints: (T_SETPOINTS, _encode_setpoints, _decode_setpoints),
    Telemetry: (T_TELEMETRY, _encode_telemetry, _decode_telemetry),
    Heartbeat: (T_HEARTBEAT, *_struct_codec(Heartbeat, _HEARTBEAT)),
    EStop: (T_ESTOP, *_struct_codec(EStop, _U8)),
    EStopReset: (T_ESTOP_RESET, _encode_empty, _decode_empty(EStopReset)),
    Configure: (T_CONFIGURE, *_struct_codec(Configure, _CONFIGURE)),
    Ack: (T_ACK, *_struct_codec(Ack, _ACK)),
    Nack: (T_NACK, *_struct_codec(Nack, _NACK)),
    GetLinkStats: (T_GET_LINK_STATS, _encode_empty, _decode_empty(GetLinkStats)),
    LinkStats: (T_LINK_STATS, *_struct_codec(LinkStats, _LINK_STATS)),
}
_DECODERS = {type_id: (cls, decode) for cls, (type_id, _, decode) in _CODECS.items()}
MESSAGE_TYPES: dict[int, type] = {type_id: cls for type_id, (cls, _) in _DECODERS.items()}
TYPE_OF: dict[type, int] = {cls: type_id for cls, (type_id, _, _) in _CODECS.items()}
#: Types a host may send to a device (the device NACKs anything else with NACK_NOT_A_REQUEST).
REQUEST_TYPES = frozenset({T_HELLO, T_SETPOINTS, T_HEARTBEAT, T_ESTOP, T_ESTOP_RESET, T_CONFIGURE,
                           T_GET_LINK_STATS})


# ----------------------------------------------------------------------------------------------------------
# Frames
# ----------------------------------------------------------------------------------------------------------
def crc16_ccitt_false(data: bytes) -> int:
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF); binascii's CRC-CCITT is this algorithm, in C."""
    return binascii.crc_hqx(data, 0xFFFF)


def pack_frame(packet: Packet) -> bytes:
    """Header + payload + CRC, before COBS (what the CRC protects). Raises ValueError on an oversize frame."""
    type_id, encode, _ = _CODECS[type(packet.message)]
    body = HEADER.pack(packet.version, type_id, packet.seq % SEQ_MODULUS, packet.t_us % TIME_MODULUS)
    body += encode(packet.message)
    frame = body + crc16_ccitt_false(body).to_bytes(2, "big")
    if len(frame) > MAX_FRAME_BYTES:
        raise ValueError(f"{type(packet.message).__name__}: frame of {len(frame)} bytes exceeds "
                         f"{MAX_FRAME_BYTES}")
    return frame


def encode_packet(packet: Packet) -> bytes:
    """The bytes to write to the port: ``0x00 COBS(frame) 0x00``."""
    return DELIMITER + cobs.encode(pack_frame(packet)) + DELIMITER


def encode(message: Message, seq: int, t_us: int = 0) -> bytes:
    """Shorthand for :func:`encode_packet` of ``Packet(seq, t_us, message)``."""
    return encode_packet(Packet(seq, t_us, message))


def unpack_frame(frame: bytes) -> Packet:
    """The inverse of :func:`pack_frame`: check length, CRC, version, type and payload; raise ProtocolError."""
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError("oversize", f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    if len(frame) < MIN_FRAME_BYTES:
        raise ProtocolError("malformed", f"frame of {len(frame)} bytes is shorter than {MIN_FRAME_BYTES}")
    if crc16_ccitt_false(frame) != 0:
        raise ProtocolError("crc_errors", "CRC mismatch")
    version, type_id, seq, t_us = HEADER.unpack_from(frame)
    if version != PROTOCOL_VERSION:
        raise ProtocolError("bad_version", f"protocol version {version}, expected {PROTOCOL_VERSION}",
                            type_id, seq)
    if type_id not in _DECODERS:
        raise ProtocolError("unknown_type", f"unknown message type 0x{type_id:02x}", type_id, seq)
    _, decode = _DECODERS[type_id]
    try:
        message = decode(frame[HEADER_BYTES:-CRC_BYTES])
    except ProtocolError as exc:
        raise ProtocolError(exc.kind, str(exc), type_id, seq) from None
    return Packet(seq, t_us, message, version)


def decode_frame(encoded: bytes) -> Packet:
    """Decode one COBS-encoded frame (no delimiters) into a Packet, or raise ProtocolError."""
    if len(encoded) > MAX_ENCODED_BYTES:
        raise ProtocolError("oversize", f"encoded frame of {len(encoded)} bytes exceeds {MAX_ENCODED_BYTES}")
    try:
        frame = cobs.decode(encoded)
    except cobs.DecodeError as exc:
        raise ProtocolError("framing_errors", f"COBS: {exc}") from None
    return unpack_frame(frame)


# ----------------------------------------------------------------------------------------------------------
# Stream decoding
# ----------------------------------------------------------------------------------------------------------
@dataclass
class LinkCounters:
    """What a receiver saw on a byte stream. Every byte ends up in a good frame or in exactly one error."""
    bytes: int = 0
    frames: int = 0             # good frames delivered
    crc_errors: int = 0         # COBS-valid, CRC wrong
    framing_errors: int = 0     # not valid COBS
    oversize: int = 0           # more than MAX_ENCODED_BYTES between delimiters (discarded unread)
    malformed: int = 0          # CRC right but too short, or payload wrong for its type
    bad_version: int = 0        # CRC right, other protocol version
    unknown_type: int = 0       # CRC right, unknown message type
    seq_gaps: int = 0           # frames missing between consecutive good ones (by seq, modulo 2**16)
    seq_repeats: int = 0        # good frames whose seq did not advance (duplicate, reordering, restart)

    @property
    def errors(self) -> int:
        """Frames lost to corruption of any kind (not counting sequence gaps)."""
        return (self.crc_errors + self.framing_errors + self.oversize + self.malformed + self.bad_version
                + self.unknown_type)

    def as_dict(self) -> dict[str, int]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class StreamDecoder:
    """Splits a byte stream on 0x00, decodes each frame and counts what went wrong; never raises on input.

    After garbage it resynchronises at the next delimiter. A run of more than :data:`MAX_ENCODED_BYTES`
    without a delimiter is discarded as it arrives (bounded memory) and counted once as oversize.
    """
    counters: LinkCounters = field(default_factory=LinkCounters)
    #: CRC-good frames that could not be decoded, as (kind, type_id, seq), for a device to NACK; drained by
    #: the owner (bounded: only the newest :data:`MAX_REJECTED` are kept).
    rejected: list[tuple[str, int, int]] = field(default_factory=list)
    _buffer: bytearray = field(default_factory=bytearray)
    _discarding: bool = False
    _last_seq: int | None = None

    def feed(self, data: bytes) -> list[Packet]:
        """Consume ``data``; return the good packets it completed, in order."""
        self.counters.bytes += len(data)
        packets: list[Packet] = []
        start = 0
        while True:
            end = data.find(0, start)
            chunk = data[start:] if end < 0 else data[start:end]
            if not self._discarding:
                self._buffer += chunk
                if len(self._buffer) > MAX_ENCODED_BYTES:
                    self.counters.oversize += 1
                    self._buffer.clear()
                    self._discarding = True
            if end < 0:
                return packets
            if not self._discarding and self._buffer:
                packet = self._decode(bytes(self._buffer))
                if packet is not None:
                    packets.append(packet)
            self._buffer.clear()
            self._discarding = False
            start = end + 1

    def _decode(self, encoded: bytes) -> Packet | None:
        try:
            packet = decode_frame(encoded)
        except ProtocolError as exc:
            setattr(self.counters, exc.kind, getattr(self.counters, exc.kind) + 1)
            if exc.type_id is not None:
                self.rejected.append((exc.kind, exc.type_id, exc.seq))
                del self.rejected[:-MAX_REJECTED]
            return None
        self.counters.frames += 1
        if self._last_seq is not None:
            step = (packet.seq - self._last_seq) % SEQ_MODULUS
            if step == 0 or step >= SEQ_MODULUS // 2:
                self.counters.seq_repeats += 1
            else:
                self.counters.seq_gaps += step - 1
        self._last_seq = packet.seq
        return packet

    def reset_sequence(self) -> None:
        """Forget the last seq (the peer restarted, e.g. after a reconnect), so no false gap is counted."""
        self._last_seq = None
