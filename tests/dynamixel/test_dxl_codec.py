"""Protocol 2.0 codec properties (round trip, stuffing, resynchronisation on garbage) and the control-table rules.

The CRC is checked against the official SDK's own table implementation (an independent reference); the
round-trip and garbage properties are hypothesis tests.
"""
from __future__ import annotations

from dynamixel_sdk import PacketHandler
from hypothesis import given, settings
from hypothesis import strategies as st

from firmware_interface import dynamixel as dxl

SDK = PacketHandler(2.0)
ids = st.integers(0, 0xFF)
instructions = st.sampled_from([dxl.PING, dxl.READ, dxl.WRITE, dxl.REBOOT, dxl.SYNC_READ, dxl.SYNC_WRITE,
                                dxl.BULK_READ, dxl.STATUS])
# parameters rich in the header bytes, so stuffing is exercised often
params = st.lists(st.sampled_from([0xFF, 0xFD, 0x00, 0x01, 0x55]) | st.integers(0, 255), max_size=60).map(bytes)


@given(st.binary(max_size=300))
def test_crc_matches_the_sdk_table(data):
    assert dxl.crc16(data) == SDK.updateCRC(0, list(data), len(data))


def test_crc_table_is_the_sdk_table():
    # updateCRC of a single byte b from 0 is table[b]
    assert list(dxl.CRC_TABLE) == [SDK.updateCRC(0, [b], 1) for b in range(256)]


@given(params)
def test_stuffing_round_trip_and_no_header_in_body(body):
    stuffed = dxl.stuff(body)
    assert dxl.unstuff(stuffed) == (body, 0)
    assert b"\xff\xff\xfd\x00" not in stuffed or b"\xff\xff\xfd\xfd" in stuffed
    # a stuffed body never contains FF FF FD followed by anything but FD
    k = stuffed.find(b"\xff\xff\xfd")
    while k >= 0:
        assert stuffed[k + 3] == 0xFD
        k = stuffed.find(b"\xff\xff\xfd", k + 4)


@given(ids, instructions, params, st.integers(1, 17))
def test_encode_parse_round_trip_in_any_chunking(packet_id, instruction, body, chunk):
    wire = dxl.encode(packet_id, instruction, body)
    parser = dxl.StreamParser()
    packets = []
    for k in range(0, len(wire), chunk):
        packets += parser.feed(wire[k:k + chunk])
    assert packets == [dxl.Packet(packet_id, instruction, body)]
    assert parser.pending == 0 and parser.counters.crc_errors == 0


@given(st.binary(max_size=200), ids, params, st.binary(max_size=50))
@settings(max_examples=300)
def test_parser_resynchronises_after_garbage(garbage, packet_id, body, tail):
    """Whatever precedes it, a good packet is found; the parser never raises (an endless fake header is
    abandoned by expire(), the idle-line timeout)."""
    wire = dxl.encode(packet_id, dxl.WRITE, body)
    parser = dxl.StreamParser()
    packets = parser.feed(garbage + wire + tail)
    packets += parser.expire()
    assert dxl.Packet(packet_id, dxl.WRITE, body) in packets


@given(st.binary(max_size=400))
def test_parser_never_raises_on_noise(noise):
    parser = dxl.StreamParser()
    parser.feed(noise)
    parser.expire()
    assert parser.pending == 0


@given(ids, params, st.data())
def test_a_flipped_bit_is_a_crc_error_and_the_next_packet_survives(packet_id, body, data):
    wire = bytearray(dxl.encode(packet_id, dxl.WRITE, body))
    k = data.draw(st.integers(7, len(wire) - 1))          # past the length field: the frame length stays right
    wire[k] ^= 1 << data.draw(st.integers(0, 7))
    good = dxl.encode(7, dxl.PING)
    parser = dxl.StreamParser()
    packets = parser.feed(bytes(wire) + good) + parser.expire()
    assert packets[-1] == dxl.Packet(7, dxl.PING)
    assert dxl.Packet(packet_id, dxl.WRITE, body) not in packets
    assert parser.counters.crc_errors >= 1           # CRC-16 detects every single-bit error


def test_bad_length_is_counted_and_skipped():
    bogus = dxl.HEADER + bytes([1, 0xFF, 0xFF])                      # LEN 65535: impossible
    parser = dxl.StreamParser()
    assert parser.feed(bogus + dxl.ping(3)) == [dxl.Packet(3, dxl.PING)]
    assert parser.counters.bad_length == 1


def test_encoder_refuses_what_no_parser_would_accept():
    try:
        dxl.encode(1, dxl.WRITE, bytes(dxl.MAX_LENGTH))
    except ValueError:
        return
    raise AssertionError("an oversize packet was encoded")


def test_status_packet_fields():
    (p,) = dxl.StreamParser().feed(dxl.encode_status(5, dxl.ERR_ALERT | dxl.ERR_ACCESS, b"\x01\x02"))
    assert p.is_status and p.id == 5 and p.error == 0x87 and p.data == b"\x01\x02"


@given(st.integers(0, 0xFFFF), st.integers(1, 40), st.lists(st.integers(0, 252), min_size=1, max_size=20,
                                                                    unique=True))
def test_group_instruction_parameters_round_trip(address, length, id_list):
    (p,) = dxl.StreamParser().feed(dxl.sync_read(address, length, id_list))
    assert dxl.parse_sync_read(p.params) == (address, length, id_list)
    data = {i: bytes([i % 256]) * length for i in id_list}
    (p,) = dxl.StreamParser().feed(dxl.sync_write(address, length, data))
    assert dxl.parse_sync_write(p.params) == (address, length, data)
    items = [(i, address, length) for i in id_list]
    (p,) = dxl.StreamParser().feed(dxl.bulk_read(items))
    assert dxl.parse_bulk_read(p.params) == items


# -- control table --------------------------------------------------------------------------------------------
def _w(table, name, value):
    item = dxl.ITEMS[name]
    return table.write(item.address, dxl.pack_value(value, item.size))


def test_factory_values_at_the_documented_addresses():
    t = dxl.ControlTable()
    assert t.read(0, 2) == (0, (1020).to_bytes(2, "little"))
    assert t.read(9, 1) == (0, bytes([250]))          # return delay 500 us
    assert t.read(11, 1) == (0, bytes([3]))           # position control
    assert t.read(64, 1) == (0, b"\x00")              # torque off
    assert t.read(70, 1) == (0, b"\x00")


def test_read_only_and_undefined_are_access_errors():
    t = dxl.ControlTable()
    assert _w(t, "model_number", 1) == dxl.ERR_ACCESS
    assert _w(t, "present_position", 5) == dxl.ERR_ACCESS
    assert _w(t, "hardware_error_status", 0) == dxl.ERR_ACCESS
    assert t.write(14, b"\x00") == dxl.ERR_ACCESS      # reserved gap
    assert t.read(147, 2)[0] == dxl.ERR_ACCESS          # past the table


def test_eeprom_refused_while_torque_is_on():
    t = dxl.ControlTable()
    assert _w(t, "operating_mode", 1) == dxl.ERR_NONE
    assert _w(t, "torque_enable", 1) == dxl.ERR_NONE
    before = t.get("operating_mode")
    assert _w(t, "operating_mode", 3) == dxl.ERR_ACCESS
    assert _w(t, "return_delay_time", 0) == dxl.ERR_ACCESS
    assert t.get("operating_mode") == before          # nothing stored
    assert _w(t, "goal_velocity", 10) == dxl.ERR_NONE  # RAM still writable
    assert _w(t, "torque_enable", 0) == dxl.ERR_NONE
    assert _w(t, "return_delay_time", 0) == dxl.ERR_NONE


def test_length_range_and_limit_errors():
    t = dxl.ControlTable()
    assert t.write(116, b"\x00\x08") == dxl.ERR_DATA_LENGTH           # half of goal position
    assert _w(t, "operating_mode", 2) == dxl.ERR_DATA_RANGE           # no mode 2
    assert _w(t, "torque_enable", 2) == dxl.ERR_DATA_RANGE
    assert _w(t, "max_position_limit", 3000) == dxl.ERR_NONE
    assert _w(t, "goal_position", 3001) == dxl.ERR_DATA_LIMIT
    assert _w(t, "goal_position", 3000) == dxl.ERR_NONE
    # a multi-item write is all or nothing
    bad = dxl.pack_value(100, 4) + dxl.pack_value(9999, 4)             # profile velocity ok, goal too far
    assert t.write(112, bad) == dxl.ERR_DATA_LIMIT and t.get("profile_velocity") == 0
