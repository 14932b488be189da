"""Dynamixel Protocol 2.0: pure bytes <-> packets codec and the control-table model of an X-series servo.

Protocol reference: ROBOTIS e-Manual, "DYNAMIXEL Protocol 2.0" (packet layout, byte stuffing, CRC-16, status
error byte) and "XM430-W350" (control table). No I/O here: the emulator (firmware_interface/dynamixel_emulator.py)
and the driver backend (hil/drive/links/dynamixel.py) own the transport.

Packet on the wire (all multi-byte fields little-endian)::

    FF FF FD 00 | ID | LEN_L LEN_H | INST | PARAM ... | CRC_L CRC_H
    LEN = number of bytes after the length field = len(stuffed INST + PARAMS) + 2 (the CRC)

* A status packet is INST = 0x55 followed by the ERROR byte, then its parameters.
* Byte stuffing: inside INST..PARAMS, every ``FF FF FD`` gets an extra ``FD`` (so the header never appears in a
  packet's body); LEN counts the stuffed bytes and the CRC covers the stuffed packet from the header on.
* CRC-16: polynomial 0x8005, initial value 0, not reflected, no final XOR (CRC-16/BUYPASS, the e-Manual's
  ``update_crc`` table algorithm).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

HEADER = b"\xff\xff\xfd\x00"
HEADER_BYTES = 7                 # FF FF FD 00 ID LEN_L LEN_H
MIN_LENGTH = 3                   # INST + CRC (a PING)
#: Largest LEN accepted by the stream parser: the official SDK's packet buffers are 1024 bytes, and a real
#: servo's receive buffer is smaller still, so anything longer is a corrupted length field.
MAX_LENGTH = 1024 - HEADER_BYTES
BROADCAST_ID = 0xFE
MAX_ID = 0xFC                    # 0..252 are device IDs

# Instructions
PING = 0x01
READ = 0x02
WRITE = 0x03
REG_WRITE = 0x04
ACTION = 0x05
FACTORY_RESET = 0x06
REBOOT = 0x08
CLEAR = 0x10
STATUS = 0x55
SYNC_READ = 0x82
SYNC_WRITE = 0x83
FAST_SYNC_READ = 0x8A
BULK_READ = 0x92
BULK_WRITE = 0x93
INSTRUCTION_NAMES = {PING: "PING", READ: "READ", WRITE: "WRITE", REG_WRITE: "REG_WRITE", ACTION: "ACTION",
                     FACTORY_RESET: "FACTORY_RESET", REBOOT: "REBOOT", CLEAR: "CLEAR", STATUS: "STATUS",
                     SYNC_READ: "SYNC_READ", SYNC_WRITE: "SYNC_WRITE", FAST_SYNC_READ: "FAST_SYNC_READ",
                     BULK_READ: "BULK_READ", BULK_WRITE: "BULK_WRITE"}

# Status error byte: bit 7 = hardware alert (see Hardware Error Status, address 70), bits 0..6 = error number.
ERR_NONE = 0
ERR_RESULT_FAIL = 1
ERR_INSTRUCTION = 2
ERR_CRC = 3
ERR_DATA_RANGE = 4
ERR_DATA_LENGTH = 5
ERR_DATA_LIMIT = 6
ERR_ACCESS = 7
ERR_ALERT = 0x80

# Hardware Error Status bits (address 70)
HW_INPUT_VOLTAGE = 1 << 0
HW_OVERHEATING = 1 << 2
HW_MOTOR_ENCODER = 1 << 3
HW_ELECTRICAL_SHOCK = 1 << 4
HW_OVERLOAD = 1 << 5


def _crc_table(poly: int = 0x8005) -> tuple[int, ...]:
    """The 256-entry MSB-first table of CRC-16 with generator ``poly`` (e-Manual Protocol 2.0, CRC)."""
    table = []
    for byte in range(256):
        crc = byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ poly) if crc & 0x8000 else (crc << 1)
        table.append(crc & 0xFFFF)
    return tuple(table)


CRC_TABLE = _crc_table()


def crc16(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """Dynamixel CRC-16 of ``data`` (continuing from ``crc``): ``crc = (crc << 8) ^ T[(crc >> 8) ^ byte]``."""
    table = CRC_TABLE
    for byte in data:
        crc = ((crc << 8) ^ table[((crc >> 8) ^ byte) & 0xFF]) & 0xFFFF
    return crc


def stuff(body: bytes) -> bytes:
    """Insert ``FD`` after every ``FF FF FD`` of ``body`` (INST + PARAMS, as sent).

    The pattern is matched on the unstuffed bytes, as the e-Manual and the official SDK do. (The SDK also
    looks back into LEN_L LEN_H for the first two bytes; LEN_H <= 0x03 here, so that can never match.)
    """
    if b"\xff\xff\xfd" not in body:
        return bytes(body)
    return bytes(body).replace(b"\xff\xff\xfd", b"\xff\xff\xfd\xfd")


def unstuff(stuffed: bytes) -> tuple[bytes, int]:
    """Inverse of :func:`stuff`: (body, number of ``FF FF FD`` runs that were *not* followed by the stuffing FD).

    Lenient on purpose: the official Python SDK (dynamixel-sdk 4.1.0) sends such runs unstuffed (its
    ``txPacket`` discards what ``addStuffing`` returns when the length grows), and with LEN and the CRC good the
    bytes are unambiguous, so an unstuffed run is taken literally and counted rather than refused.
    """
    if b"\xff\xff\xfd" not in stuffed:
        return bytes(stuffed), 0
    out = bytearray()
    bare = 0
    k, n = 0, len(stuffed)
    while k < n:
        if stuffed[k:k + 3] == b"\xff\xff\xfd":
            out += b"\xff\xff\xfd"
            if k + 3 < n and stuffed[k + 3] == 0xFD:
                k += 4
            else:
                bare += 1
                k += 3
        else:
            out.append(stuffed[k])
            k += 1
    return bytes(out), bare


@dataclass(frozen=True)
class Packet:
    """One decoded packet: ``instruction`` (0x55 for a status packet) and its unstuffed ``params``."""
    id: int
    instruction: int
    params: bytes = b""

    @property
    def is_status(self) -> bool:
        return self.instruction == STATUS

    @property
    def error(self) -> int:
        """A status packet's error byte."""
        return self.params[0] if self.is_status and self.params else 0

    @property
    def data(self) -> bytes:
        """A status packet's parameters after the error byte."""
        return self.params[1:] if self.is_status else self.params


def encode(packet_id: int, instruction: int, params: bytes = b"", *, stuffing: bool = True) -> bytes:
    """Whole packet on the wire: header, ID, stuffed length, stuffed INST+PARAMS, CRC.

    ``stuffing=False`` gives the bytes the official Python SDK actually sends (it never stuffs; see
    :func:`unstuff`): used by the tests that compare against it, never by our own senders."""
    if not 0 <= packet_id <= 0xFF:
        raise ValueError(f"packet id {packet_id} outside 0..255")
    body = bytes([instruction]) + bytes(params)
    body = stuff(body) if stuffing else body
    length = len(body) + 2
    if length > MAX_LENGTH:
        raise ValueError(f"LEN {length} exceeds {MAX_LENGTH}, the most a receiver's buffer holds")
    head = HEADER + bytes([packet_id]) + struct.pack("<H", length) + body
    return head + struct.pack("<H", crc16(head))


def encode_status(packet_id: int, error: int, data: bytes = b"") -> bytes:
    return encode(packet_id, STATUS, bytes([error]) + bytes(data))


# -- instruction builders (host side) -----------------------------------------------------------------------------
def ping(packet_id: int) -> bytes:
    return encode(packet_id, PING)


def read(packet_id: int, address: int, length: int) -> bytes:
    return encode(packet_id, READ, struct.pack("<HH", address, length))


def write(packet_id: int, address: int, data: bytes) -> bytes:
    return encode(packet_id, WRITE, struct.pack("<H", address) + bytes(data))


def reboot(packet_id: int) -> bytes:
    return encode(packet_id, REBOOT)


def sync_read(address: int, length: int, ids: list[int]) -> bytes:
    return encode(BROADCAST_ID, SYNC_READ, struct.pack("<HH", address, length) + bytes(ids))


def sync_write(address: int, length: int, data: dict[int, bytes]) -> bytes:
    """``data``: id -> exactly ``length`` bytes, sent in the dict's order."""
    params = bytearray(struct.pack("<HH", address, length))
    for packet_id, value in data.items():
        if len(value) != length:
            raise ValueError(f"id {packet_id}: {len(value)} bytes, expected {length}")
        params.append(packet_id)
        params += value
    return encode(BROADCAST_ID, SYNC_WRITE, bytes(params))


def bulk_read(items: list[tuple[int, int, int]]) -> bytes:
    """``items``: (id, address, length) per servo."""
    return encode(BROADCAST_ID, BULK_READ, b"".join(struct.pack("<BHH", *item) for item in items))


def bulk_write(items: list[tuple[int, int, bytes]]) -> bytes:
    """``items``: (id, address, data) per servo."""
    return encode(BROADCAST_ID, BULK_WRITE,
                  b"".join(struct.pack("<BHH", i, a, len(d)) + bytes(d) for i, a, d in items))


# -- instruction parameter parsers (device side); each returns None when the parameters are malformed -------------
def parse_read(params: bytes) -> tuple[int, int] | None:
    return struct.unpack("<HH", params) if len(params) == 4 else None


def parse_write(params: bytes) -> tuple[int, bytes] | None:
    return (struct.unpack_from("<H", params)[0], params[2:]) if len(params) >= 3 else None


def parse_sync_read(params: bytes) -> tuple[int, int, list[int]] | None:
    if len(params) < 5:
        return None
    address, length = struct.unpack_from("<HH", params)
    return address, length, list(params[4:])


def parse_sync_write(params: bytes) -> tuple[int, int, dict[int, bytes]] | None:
    if len(params) < 4:
        return None
    address, length = struct.unpack_from("<HH", params)
    rest = params[4:]
    if length == 0 or not rest or len(rest) % (length + 1):
        return None
    data = {}
    for k in range(0, len(rest), length + 1):
        data[rest[k]] = bytes(rest[k + 1:k + 1 + length])
    return address, length, data


def parse_bulk_read(params: bytes) -> list[tuple[int, int, int]] | None:
    if not params or len(params) % 5:
        return None
    return [struct.unpack_from("<BHH", params, k) for k in range(0, len(params), 5)]


def parse_bulk_write(params: bytes) -> list[tuple[int, int, bytes]] | None:
    items, k = [], 0
    while k < len(params):
        if k + 5 > len(params):
            return None
        packet_id, address, length = struct.unpack_from("<BHH", params, k)
        if length == 0 or k + 5 + length > len(params):
            return None
        items.append((packet_id, address, bytes(params[k + 5:k + 5 + length])))
        k += 5 + length
    return items or None


# -- stream parser -------------------------------------------------------------------------------------------------
@dataclass
class ParserCounters:
    packets: int = 0
    crc_errors: int = 0
    bad_length: int = 0          # a header followed by an impossible LEN
    malformed: int = 0           # good CRC but no instruction byte
    unstuffed_runs: int = 0      # FF FF FD inside a body without its stuffing FD (taken literally)
    garbage_bytes: int = 0       # bytes skipped while looking for a header
    expired: int = 0             # partial packets abandoned after an idle line

    def as_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class StreamParser:
    """Feed bytes in any chunking, get whole packets back; bad bytes are counted and skipped, never raised.

    Resynchronisation: on a bad LEN or a CRC error only the first header byte is dropped and
    the search restarts right after it, so a packet hidden behind a corrupted one is still found. A header
    whose LEN promises more bytes than ever arrive would hold the parser forever; :meth:`expire` (called by
    the transport when the line has been idle, as a servo's receive timeout does) abandons it.
    """
    max_length: int = MAX_LENGTH
    counters: ParserCounters = field(default_factory=ParserCounters)
    buffer: bytearray = field(default_factory=bytearray)

    def feed(self, data: bytes) -> list[Packet]:
        self.buffer += data
        return self._parse()

    @property
    def pending(self) -> int:
        """Bytes held waiting for the rest of a packet."""
        return len(self.buffer)

    def expire(self) -> list[Packet]:
        """The line went idle: drop a partial packet's first byte and parse what follows it."""
        out = []
        while self.buffer:
            self.counters.expired += 1
            self._skip(1)
            out += self._parse()
        return out

    def _skip(self, n: int) -> None:
        self.counters.garbage_bytes += n
        del self.buffer[:n]

    def _parse(self) -> list[Packet]:
        out = []
        buf = self.buffer
        while True:
            start = buf.find(HEADER)
            if start < 0:
                keep = 0                                  # a header split across feeds: keep its first bytes
                for k in (3, 2, 1):
                    if len(buf) >= k and buf[-k:] == HEADER[:k]:
                        keep = k
                        break
                self._skip(len(buf) - keep)
                return out
            if start:
                self._skip(start)
            if len(buf) < HEADER_BYTES:
                return out
            length = buf[5] | (buf[6] << 8)
            if not MIN_LENGTH <= length <= self.max_length:
                self.counters.bad_length += 1
                self._skip(1)
                continue
            total = HEADER_BYTES + length
            if len(buf) < total:
                return out
            if crc16(memoryview(buf)[:total - 2]) != (buf[total - 2] | (buf[total - 1] << 8)):
                self.counters.crc_errors += 1
                self._skip(1)
                continue
            body, bare = unstuff(bytes(buf[HEADER_BYTES:total - 2]))
            self.counters.unstuffed_runs += bare
            if not body:
                self.counters.malformed += 1
                self._skip(1)
                continue
            out.append(Packet(buf[4], body[0], body[1:]))
            self.counters.packets += 1
            del buf[:total]


# -- control table ------------------------------------------------------------------------------------------------
R, RW = "R", "RW"


@dataclass(frozen=True)
class Item:
    """One control-table entry: ``size`` bytes little-endian at ``address``; ``lo..hi`` the accepted range."""
    name: str
    address: int
    size: int
    access: str
    default: int
    lo: int | None = None
    hi: int | None = None
    signed: bool = False

    @property
    def eeprom(self) -> bool:
        return self.address < EEPROM_END


EEPROM_END = 64        # addresses below are EEPROM: writable only while Torque Enable is 0
TABLE_BYTES = 148      # addresses 0..147 (the indirect-address area is not modelled)

#: XM430-W350-T/R, firmware 45+ (e-Manual "XM430-W350", Control Table of EEPROM and RAM area).
XM430_W350 = (
    Item("model_number", 0, 2, R, 1020),
    Item("model_information", 2, 4, R, 0),
    Item("firmware_version", 6, 1, R, 52),
    Item("id", 7, 1, RW, 1, 0, 252),
    Item("baud_rate", 8, 1, RW, 1, 0, 7),
    Item("return_delay_time", 9, 1, RW, 250, 0, 254),
    Item("drive_mode", 10, 1, RW, 0, 0, 13),
    Item("operating_mode", 11, 1, RW, 3, 0, 16),
    Item("secondary_id", 12, 1, RW, 255, 0, 255),
    Item("protocol_type", 13, 1, RW, 2, 1, 2),
    Item("homing_offset", 20, 4, RW, 0, -1044479, 1044479, True),
    Item("moving_threshold", 24, 4, RW, 10, 0, 1023),
    Item("temperature_limit", 31, 1, RW, 80, 0, 100),
    Item("max_voltage_limit", 32, 2, RW, 160, 60, 160),
    Item("min_voltage_limit", 34, 2, RW, 95, 60, 160),
    Item("pwm_limit", 36, 2, RW, 885, 0, 885),
    Item("current_limit", 38, 2, RW, 1193, 0, 1193),
    Item("velocity_limit", 44, 4, RW, 200, 0, 1023),
    Item("max_position_limit", 48, 4, RW, 4095, 0, 4095),
    Item("min_position_limit", 52, 4, RW, 0, 0, 4095),
    Item("startup_configuration", 60, 1, RW, 0, 0, 3),
    Item("shutdown", 63, 1, RW, 52, 0, 255),
    Item("torque_enable", 64, 1, RW, 0, 0, 1),
    Item("led", 65, 1, RW, 0, 0, 1),
    Item("status_return_level", 68, 1, RW, 2, 0, 2),
    Item("registered_instruction", 69, 1, R, 0),
    Item("hardware_error_status", 70, 1, R, 0),
    Item("velocity_i_gain", 76, 2, RW, 1920, 0, 16383),
    Item("velocity_p_gain", 78, 2, RW, 100, 0, 16383),
    Item("position_d_gain", 80, 2, RW, 0, 0, 16383),
    Item("position_i_gain", 82, 2, RW, 0, 0, 16383),
    Item("position_p_gain", 84, 2, RW, 800, 0, 16383),
    Item("feedforward_2nd_gain", 88, 2, RW, 0, 0, 16383),
    Item("feedforward_1st_gain", 90, 2, RW, 0, 0, 16383),
    Item("bus_watchdog", 98, 1, RW, 0, 0, 127, True),
    Item("goal_pwm", 100, 2, RW, 0, -885, 885, True),
    Item("goal_current", 102, 2, RW, 0, -1193, 1193, True),
    Item("goal_velocity", 104, 4, RW, 0, -1023, 1023, True),
    Item("profile_acceleration", 108, 4, RW, 0, 0, 32767),
    Item("profile_velocity", 112, 4, RW, 0, 0, 32767),
    Item("goal_position", 116, 4, RW, 2048, -1048575, 1048575, True),
    Item("realtime_tick", 120, 2, R, 0),
    Item("moving", 122, 1, R, 0),
    Item("moving_status", 123, 1, R, 0),
    Item("present_pwm", 124, 2, R, 0, signed=True),
    Item("present_current", 126, 2, R, 0, signed=True),
    Item("present_velocity", 128, 4, R, 0, signed=True),
    Item("present_position", 132, 4, R, 2048, signed=True),
    Item("velocity_trajectory", 136, 4, R, 0, signed=True),
    Item("position_trajectory", 140, 4, R, 0, signed=True),
    Item("present_input_voltage", 144, 2, R, 120),
    Item("present_temperature", 146, 1, R, 30),
    Item("backup_ready", 147, 1, R, 0),
)
ITEMS = {item.name: item for item in XM430_W350}
MODEL_NUMBERS = {"XM430-W350": 1020}

# Units of the XM430-W350 (e-Manual)
POSITION_TICKS_PER_REV = 4096            # present/goal position, ticks per revolution (0.088 deg/tick)
VELOCITY_UNIT_RPM = 0.229                # present velocity, velocity limit, rpm per unit
CURRENT_UNIT_A = 2.69e-3                 # present current, A per unit
RETURN_DELAY_UNIT_S = 2e-6               # return delay time, s per unit
BUS_WATCHDOG_UNIT_S = 0.02               # bus watchdog, s per unit
BAUD_RATES = {0: 9600, 1: 57600, 2: 115200, 3: 1_000_000, 4: 2_000_000, 5: 3_000_000, 6: 4_000_000,
              7: 4_500_000}
OPERATING_MODES = (0, 1, 3, 4, 5, 16)    # current, velocity, position, extended position, current-based, PWM


def to_signed(value: int, size: int) -> int:
    bits = 8 * size
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def pack_value(value: int, size: int) -> bytes:
    """``value`` as ``size`` little-endian bytes (two's complement when negative)."""
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


class ControlTable:
    """One servo's control table: the memory plus the firmware's write rules.

    ``write`` enforces, in the order the firmware checks them (e-Manual Protocol 2.0, status error):
    access (address outside defined items, a read-only item, or EEPROM while torque is on), data length (a
    write must cover whole items), data range (each item's range), data limit (goal position within the
    position limits, goal velocity within the velocity limit). Nothing is written unless every check passes.
    """

    def __init__(self, items: tuple[Item, ...] = XM430_W350, overrides: dict[str, int] | None = None):
        self.items = items
        self.by_address = {}
        for item in items:
            for a in range(item.address, item.address + item.size):
                self.by_address[a] = item
        self.memory = bytearray(TABLE_BYTES)
        self.eeprom_defaults = dict(overrides or {})
        self.reset(eeprom=True)

    def reset(self, eeprom: bool = False) -> None:
        """Power-up: RAM to defaults (and EEPROM too when ``eeprom``, i.e. a factory state plus overrides)."""
        for item in self.items:
            if item.eeprom and not eeprom:
                continue
            value = self.eeprom_defaults.get(item.name, item.default)
            self.memory[item.address:item.address + item.size] = pack_value(value, item.size)

    def get(self, name: str) -> int:
        item = ITEMS[name]
        raw = int.from_bytes(self.memory[item.address:item.address + item.size], "little")
        return to_signed(raw, item.size) if item.signed else raw

    def set(self, name: str, value: int) -> None:
        """Firmware-side store (no access checks): present values, error status."""
        item = ITEMS[name]
        self.memory[item.address:item.address + item.size] = pack_value(int(value), item.size)

    def read(self, address: int, length: int) -> tuple[int, bytes]:
        """(error number, data). Reserved gaps inside the table read as 0; beyond it is an access error."""
        if length == 0 or address + length > TABLE_BYTES:
            return ERR_ACCESS, b""
        return ERR_NONE, bytes(self.memory[address:address + length])

    def check_write(self, address: int, data: bytes) -> int:
        """The error number a write of ``data`` at ``address`` would get (0: it is accepted)."""
        end = address + len(data)
        if not data or end > TABLE_BYTES:
            return ERR_ACCESS
        items = []
        for a in range(address, end):
            item = self.by_address.get(a)
            if item is None or item.access != RW:
                return ERR_ACCESS
            if item.eeprom and self.get("torque_enable"):
                return ERR_ACCESS
            if not items or items[-1] is not item:
                items.append(item)
        if items[0].address != address or items[-1].address + items[-1].size != end:
            return ERR_DATA_LENGTH
        for item in items:
            offset = item.address - address
            raw = int.from_bytes(data[offset:offset + item.size], "little")
            value = to_signed(raw, item.size) if item.signed else raw
            if item.lo is not None and not item.lo <= value <= item.hi:
                return ERR_DATA_RANGE
            if item.name.startswith("goal_") and self.get("bus_watchdog") < 0:
                return ERR_DATA_RANGE          # bus watchdog tripped: goals refused until it is written 0
            if item.name == "operating_mode" and value not in OPERATING_MODES:
                return ERR_DATA_RANGE
            if item.name == "goal_position" and self.get("operating_mode") == 3 and not (
                    self.get("min_position_limit") <= value <= self.get("max_position_limit")):
                return ERR_DATA_LIMIT
            if item.name == "goal_velocity" and abs(value) > self.get("velocity_limit"):
                return ERR_DATA_LIMIT
        return ERR_NONE

    def write(self, address: int, data: bytes) -> int:
        """Check and store; returns the error number (nothing is stored unless it is 0)."""
        error = self.check_write(address, data)
        if error == ERR_NONE:
            self.memory[address:address + len(data)] = data
        return error
