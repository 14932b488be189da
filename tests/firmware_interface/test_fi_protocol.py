"""The serial protocol's codec and stream decoder (firmware_interface/protocol.py, docs/protocol.md).

Independent references: the CRC from the `crc` package's catalogue (CRC-16/IBM-3740 = CCITT-FALSE), COBS
decoding by a direct transcription of Cheshire & Baker's algorithm written here, header fields by struct.
"""
from __future__ import annotations

import json
import struct

import pytest
from crc import Calculator, Crc16
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from firmware_interface import protocol as p
from firmware_interface.vectors import VECTORS_PATH, from_json

REFERENCE_CRC = Calculator(Crc16.IBM_3740.value)   # CRC-16/CCITT-FALSE: poly 0x1021, init 0xFFFF


def reference_cobs_decode(data: bytes) -> bytes:
    """COBS decoding as in Cheshire & Baker 1999, Fig. 2 (independent of the `cobs` package)."""
    out, i = bytearray(), 0
    while i < len(data):
        code = data[i]
        if code == 0:
            raise ValueError("bad COBS")
        block = data[i + 1:i + code]
        if len(block) != code - 1 or 0 in block:
            raise ValueError("bad COBS")
        out += block
        i += code
        if code < 0xFF and i < len(data):
            out.append(0)
    return bytes(out)


# ---------------------------------------------------------------------------------------------- strategies
u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFFFFFF)
i32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
f32 = st.floats(width=32, allow_nan=False)
names = st.text(max_size=10).filter(lambda s: len(s.encode()) <= p.MAX_NAME_BYTES)


@st.composite
def telemetry(draw):
    n_servo, n_strain, n_load = draw(st.integers(0, 4)), draw(st.integers(0, 6)), draw(st.integers(0, 6))
    n_max = p.max_samples_per_frame(n_servo, n_strain, n_load)
    samples = draw(st.lists(st.builds(
        p.TelemetrySample, u32, st.tuples(*[f32] * n_servo), st.tuples(*[i32] * n_strain),
        st.tuples(*[i32] * n_load)), max_size=min(n_max, 12)))
    return p.Telemetry(draw(u8), n_servo, n_strain, n_load, tuple(samples))


messages = st.one_of(
    st.just(p.Hello()), st.just(p.EStopReset()), st.just(p.GetLinkStats()),
    st.builds(p.DeviceInfo, u8, st.tuples(u8, u8, u8), names, u8, u8, u8),
    st.builds(p.Setpoints, st.lists(f32, min_size=1, max_size=32).map(tuple)),
    telemetry(),
    st.builds(p.Heartbeat, u8, u32), st.builds(p.EStop, u8), st.builds(p.Configure, u16, u8, u16),
    st.builds(p.Ack, u8, u16), st.builds(p.Nack, u8, u16, u8),
    st.builds(p.LinkStats, *[u32] * 9),
)
packets = st.builds(p.Packet, u16, u32, messages)


# ------------------------------------------------------------------------------------------------- codec
def test_crc_is_the_catalogue_ccitt_false():
    assert p.crc16_ccitt_false(b"123456789") == 0x29B1 == REFERENCE_CRC.checksum(b"123456789")


@settings(max_examples=150, deadline=None)
@given(packets)
def test_every_message_round_trips(packet):
    wire = p.encode_packet(packet)
    assert wire[0] == 0 and wire[-1] == 0 and 0 not in wire[1:-1]
    assert len(wire) - 2 <= p.MAX_ENCODED_BYTES
    decoder = p.StreamDecoder()
    assert decoder.feed(wire) == [packet]
    assert p.decode_frame(wire[1:-1]) == packet


@settings(max_examples=100, deadline=None)
@given(packets)
def test_wire_bytes_match_independent_references(packet):
    wire = p.encode_packet(packet)
    frame = reference_cobs_decode(wire[1:-1])
    body, crc = frame[:-2], int.from_bytes(frame[-2:], "big")
    assert crc == REFERENCE_CRC.checksum(body)
    version, type_id, seq, t_us = struct.unpack_from("<BBHI", body)
    assert (version, type_id, seq, t_us) == (p.PROTOCOL_VERSION, p.TYPE_OF[type(packet.message)],
                                             packet.seq, packet.t_us)


def test_payload_layouts_by_hand():
    setpoints = p.pack_frame(p.Packet(5, 6, p.Setpoints((1500.0, 1000.5))))
    assert setpoints[8:-2] == bytes([2]) + struct.pack("<ff", 1500.0, 1000.5)
    sample = p.TelemetrySample(7, (1.5,), (-2,), (3, 4))
    tele = p.pack_frame(p.Packet(0, 0, p.Telemetry(p.FLAG_ESTOP, 1, 1, 2, (sample,))))
    assert tele[8:-2] == bytes([1, 1, 1, 2, 1]) + struct.pack("<Ifiii", 7, 1.5, -2, 3, 4)


def test_oversize_frames_are_refused_by_the_encoder():
    with pytest.raises(ValueError, match="exceeds"):
        p.pack_frame(p.Packet(0, 0, p.Setpoints(tuple([1.0] * 200))))
    n = p.max_samples_per_frame(2, 4, 6)
    sample = p.TelemetrySample(0, (0.0, 0.0), (0,) * 4, (0,) * 6)
    assert len(p.pack_frame(p.Packet(0, 0, p.Telemetry(0, 2, 4, 6, (sample,) * n)))) <= p.MAX_FRAME_BYTES
    with pytest.raises(ValueError):
        p.pack_frame(p.Packet(0, 0, p.Telemetry(0, 2, 4, 6, (sample,) * (n + 1))))


# ------------------------------------------------------------------------------------------------ vectors
def load_vectors() -> list[dict]:
    doc = json.loads(VECTORS_PATH.read_text())
    assert doc["protocol_version"] == p.PROTOCOL_VERSION
    return doc["vectors"]


def test_vectors_cover_every_message_type():
    assert {v["type_id"] for v in load_vectors()} == set(p.MESSAGE_TYPES)


@pytest.mark.parametrize("vector", load_vectors(), ids=lambda v: v["name"])
def test_codec_matches_vector(vector):
    message = from_json(vector["type"], vector["fields"])
    packet = p.Packet(vector["seq"], vector["t_us"], message)
    assert p.encode_packet(packet).hex() == vector["wire_hex"]
    assert p.decode_frame(bytes.fromhex(vector["wire_hex"])[1:-1]) == packet
    frame = bytes.fromhex(vector["frame_hex"])
    assert reference_cobs_decode(bytes.fromhex(vector["wire_hex"])[1:-1]) == frame
    assert int.from_bytes(frame[-2:], "big") == REFERENCE_CRC.checksum(frame[:-2])


# ------------------------------------------------------------------------------------------- stream decoder
def _with_crc(body: bytes) -> bytes:
    return body + p.crc16_ccitt_false(body).to_bytes(2, "big")


def _wire(frame: bytes) -> bytes:
    from cobs import cobs
    return b"\x00" + cobs.encode(frame) + b"\x00"


def classify(chunk: bytes) -> str | None:
    """What a receiver must count for one delimiter-free chunk, by the independent references."""
    if not chunk:
        return None
    if len(chunk) > p.MAX_ENCODED_BYTES:
        return "oversize"
    try:
        frame = reference_cobs_decode(chunk)
    except ValueError:
        return "framing_errors"
    if len(frame) > p.MAX_FRAME_BYTES:
        return "oversize"
    if len(frame) < p.MIN_FRAME_BYTES:
        return "malformed"
    if REFERENCE_CRC.checksum(frame[:-2]) != int.from_bytes(frame[-2:], "big"):
        return "crc_errors"
    return "valid"


garbage_chunks = st.one_of(
    st.binary(min_size=1, max_size=40).map(lambda b: b.replace(b"\x00", b"\x01")),        # line noise
    st.binary(min_size=p.MAX_ENCODED_BYTES + 1, max_size=p.MAX_ENCODED_BYTES + 60)        # a stuck line
    .map(lambda b: b.replace(b"\x00", b"\x55")),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(packets, st.lists(garbage_chunks, max_size=3), st.booleans()), min_size=1,
                max_size=12),
       st.integers(1, 64))
def test_garbage_between_frames_gives_exactly_the_valid_frames_and_counters(items, chunk_size):
    expected_counts = {"oversize": 0, "framing_errors": 0, "malformed": 0, "crc_errors": 0}
    stream, expected, seq = bytearray(), [], 0
    sent_seqs = []
    for packet, garbage, dropped in items:
        for chunk in garbage:
            kind = classify(chunk)
            assume(kind != "valid")             # noise that happens to be a good frame (chance ~1e-5)
            expected_counts[kind] += 1
            stream += chunk + b"\x00"
        packet = p.Packet(seq, packet.t_us, packet.message)
        seq += 2 if dropped else 1               # a dropped frame leaves a hole in the sequence
        sent_seqs.append(packet.seq)
        expected.append(packet)
        stream += p.encode_packet(packet)
    decoder = p.StreamDecoder()
    got = []
    for k in range(0, len(stream), chunk_size):   # arbitrary read sizes, as from a port
        got += decoder.feed(bytes(stream[k:k + chunk_size]))
    assert got == expected
    c = decoder.counters
    assert (c.oversize, c.framing_errors, c.malformed, c.crc_errors) == (
        expected_counts["oversize"], expected_counts["framing_errors"], expected_counts["malformed"],
        expected_counts["crc_errors"])
    assert c.frames == len(expected) and c.bytes == len(stream)
    assert c.seq_gaps == sum(b - a - 1 for a, b in zip(sent_seqs, sent_seqs[1:]))


@settings(max_examples=80, deadline=None)
@given(packets, st.integers(0, 10_000), st.integers(0, 7))
def test_a_flipped_bit_is_counted_never_delivered(packet, where, bit):
    wire = bytearray(p.encode_packet(packet))
    k = 1 + where % (len(wire) - 2)
    wire[k] ^= 1 << bit
    chunks = bytes(wire).split(b"\x00")
    kinds = [classify(c) for c in chunks]
    assume("valid" not in kinds)
    decoder = p.StreamDecoder()
    assert decoder.feed(bytes(wire)) == []
    c = decoder.counters
    assert c.frames == 0
    assert c.errors == sum(1 for kind in kinds if kind is not None)


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=3000))
def test_arbitrary_bytes_never_raise(data):
    decoder = p.StreamDecoder()
    decoder.feed(data)
    assert decoder.counters.bytes == len(data)


def test_crc_good_frames_with_bad_contents_are_counted_and_reported():
    bad_version = _with_crc(struct.pack("<BBHI", 9, p.T_HELLO, 1, 0))
    unknown = _with_crc(struct.pack("<BBHI", 1, 0x7E, 2, 0))
    short_setpoints = _with_crc(struct.pack("<BBHI", 1, p.T_SETPOINTS, 3, 0) + bytes([2]) + b"\x00" * 4)
    runt = b"\x01\x01\x00"
    decoder = p.StreamDecoder()
    out = decoder.feed(b"".join(_wire(f) for f in (bad_version, unknown, short_setpoints, runt)))
    assert out == []
    c = decoder.counters
    assert (c.bad_version, c.unknown_type, c.malformed, c.crc_errors) == (1, 1, 2, 0)
    assert decoder.rejected == [("bad_version", p.T_HELLO, 1), ("unknown_type", 0x7E, 2),
                                ("malformed", p.T_SETPOINTS, 3)]


def test_sequence_gaps_wrap_around_and_repeats_are_not_gaps():
    decoder = p.StreamDecoder()
    seqs = [65533, 65534, 1, 2, 2, 10, 3]
    decoder.feed(b"".join(p.encode(p.Hello(), s) for s in seqs))
    # 65534 -> 1 skips 65535 and 0; 2 -> 10 skips 7; 2 repeated and 10 -> 3 (backwards) are repeats.
    assert decoder.counters.seq_gaps == 2 + 7
    assert decoder.counters.seq_repeats == 2
    assert decoder.counters.frames == len(seqs)


def test_a_stuck_line_is_discarded_in_bounded_memory_then_resynchronised():
    decoder = p.StreamDecoder()
    good = p.encode(p.Heartbeat(0, 1), 0)
    for _ in range(100):
        decoder.feed(b"\x55" * 1000)
        assert len(decoder._buffer) <= p.MAX_ENCODED_BYTES
    assert decoder.feed(good) == [p.Packet(0, 0, p.Heartbeat(0, 1))]
    assert decoder.counters.oversize == 1
