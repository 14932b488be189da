"""The reference C codec (firmware_interface/firmware/) against the test vectors and the Python codec.

The test compiles it with gcc (-Wall -Wextra -Werror), feeds it wire frames in hex, and compares what it
decodes (fields) and what it re-encodes (bytes) with firmware_interface/vectors.json, and with the Python codec
on a few hundred random packets of every type; then, differentially, on thousands of random and mutated frames:
the same acceptance (and the same error kind), the same fields, the same bytes re-encoded.
"""
from __future__ import annotations

import json
import math
import random
import struct
import subprocess
from pathlib import Path

import pytest
from cobs import cobs

from firmware_interface import protocol as p
from firmware_interface.c_firmware import FIRMWARE, compile_c
from firmware_interface.vectors import VECTORS_PATH, to_json

RANDOM_PACKETS = 400
DIFFERENTIAL_FRAMES = 10_000
#: the Python codec's ProtocolError kind of each C error code (mms_proto.h, enum mms_error)
C_ERROR_KIND = {-1: "framing_errors", -2: "oversize", -3: "malformed", -4: "crc_errors", -5: "bad_version",
                -6: "unknown_type", -7: "malformed", -9: "malformed"}


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    return compile_c([FIRMWARE / "mms_proto.c", FIRMWARE / "vectors_check.c"],
                     tmp_path_factory.mktemp("c_codec") / "vectors_check", "-O2")


def run_harness(exe: Path, wires: list[str]) -> list[dict]:
    result = subprocess.run([str(exe)], input="\n".join(wires) + "\n", capture_output=True, text=True,
                            timeout=60, check=True)
    lines = result.stdout.splitlines()
    assert len(lines) == len(wires)
    return [json.loads(line) for line in lines]


def test_c_codec_matches_every_vector(harness):
    vectors = json.loads(VECTORS_PATH.read_text())["vectors"]
    outputs = run_harness(harness, [v["wire_hex"] for v in vectors])
    for vector, out in zip(vectors, outputs):
        assert out.get("error") is None, vector["name"]
        assert (out["type_id"], out["seq"], out["t_us"]) == (vector["type_id"], vector["seq"], vector["t_us"])
        assert out["fields"] == vector["fields"], vector["name"]
        assert out["wire_hex"] == vector["wire_hex"], vector["name"]


def test_c_codec_rejects_what_the_python_decoder_rejects(harness):
    good = p.encode(p.Setpoints((1500.0, 1600.0)), 5)
    corrupted = bytearray(good)
    corrupted[6] ^= 0x04
    body = struct.pack("<BBHI", 2, p.T_HELLO, 0, 0)
    other_version = p.DELIMITER + cobs.encode(body + p.crc16_ccitt_false(body).to_bytes(2, "big")) + p.DELIMITER
    outputs = run_harness(harness, [bytes(corrupted).hex(), other_version.hex(), "0001020300"])
    assert outputs[0] == {"error": -4}          # CRC
    assert outputs[1] == {"error": -5}          # version
    assert outputs[2]["error"] in (-1, -3)      # framing / too short
    for wire in (bytes(corrupted), other_version):
        decoder = p.StreamDecoder()
        assert decoder.feed(wire) == [] and decoder.counters.errors == 1


def _random_packet(rng: random.Random) -> p.Packet:
    f32 = lambda: struct.unpack("<f", struct.pack("<f", rng.uniform(-1e6, 1e6)))[0]
    i32 = lambda: rng.randint(-(2 ** 31), 2 ** 31 - 1)
    u = lambda bits: rng.randint(0, (1 << bits) - 1)
    kind = rng.randrange(12)
    if kind == 0:
        m = p.Hello()
    elif kind == 1:
        name = "".join(rng.choice("abcxyz-_é0") for _ in range(rng.randint(0, 12)))
        m = p.DeviceInfo(u(8), (u(8), u(8), u(8)), name, u(8), u(8), u(8))
    elif kind == 2:
        m = p.Setpoints(tuple(f32() for _ in range(rng.randint(1, 40))))
    elif kind == 3:
        ns, ng, nl = rng.randint(0, 4), rng.randint(0, 6), rng.randint(0, 6)
        count = rng.randint(0, p.max_samples_per_frame(ns, ng, nl))
        m = p.Telemetry(u(8), ns, ng, nl, tuple(p.TelemetrySample(u(32), tuple(f32() for _ in range(ns)),
                                                                  tuple(i32() for _ in range(ng)),
                                                                  tuple(i32() for _ in range(nl)))
                                                for _ in range(count)))
    elif kind == 4:
        m = p.Heartbeat(u(8), u(32))
    elif kind == 5:
        m = p.EStop(u(8))
    elif kind == 6:
        m = p.EStopReset()
    elif kind == 7:
        m = p.Configure(u(16), u(8), u(16))
    elif kind == 8:
        m = p.Ack(u(8), u(16))
    elif kind == 9:
        m = p.Nack(u(8), u(16), u(8))
    elif kind == 10:
        m = p.GetLinkStats()
    else:
        m = p.LinkStats(*(u(32) for _ in range(9)))
    return p.Packet(u(16), u(32), m)


def test_c_and_python_codecs_agree_on_random_packets(harness):
    rng = random.Random(20261121)
    packets = [_random_packet(rng) for _ in range(RANDOM_PACKETS)]
    wires = [p.encode_packet(packet).hex() for packet in packets]
    for packet, wire, out in zip(packets, wires, run_harness(harness, wires)):
        assert out.get("error") is None
        assert out["wire_hex"] == wire
        assert (out["type_id"], out["seq"], out["t_us"]) == (p.TYPE_OF[type(packet.message)], packet.seq, packet.t_us)
        assert out["fields"] == to_json(packet.message)


def _with_crc(body: bytes) -> bytes:
    return body + p.crc16_ccitt_false(body).to_bytes(2, "big")


def _mutated_frame(rng: random.Random) -> bytes:
    """A frame (before COBS) made to reach the payload checks: a valid frame, or a header with a payload of
    random bytes whose first bytes are plausible counts (a claimed channel count, name length, sample count), with
    bits flipped, bytes inserted, dropped or cut; its CRC made right again but one time in eight."""
    if rng.random() < 0.5:
        body = bytearray(p.pack_frame(_random_packet(rng))[:-p.CRC_BYTES])
    else:
        type_id = rng.choice(sorted(p.MESSAGE_TYPES) + [0x00, 0x12, 0xFF])
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(0, 520)))
        if type_id == p.T_DEVICE_INFO and len(payload) > 8:   # a name of random (often non-UTF-8) bytes
            payload = payload[:7] + bytes([min(len(payload) - 8, rng.randrange(0, 40))]) + payload[8:]
        body = bytearray(struct.pack("<BBHI", 1 if rng.random() < 0.9 else rng.randrange(256), type_id,
                                     rng.randrange(1 << 16), rng.randrange(1 << 32)) + payload)
    for _ in range(rng.randrange(0, 3)):
        at = rng.randrange(len(body)) if body else 0
        op = rng.randrange(4)
        if op == 0 and body:
            body[at] ^= 1 << rng.randrange(8)
        elif op == 1:
            body.insert(at, rng.randrange(256))
        elif op == 2 and body:
            del body[at]
        elif op == 3:
            del body[at:]
    frame = bytearray(_with_crc(bytes(body)))
    if rng.random() < 1 / 8:
        frame[-1] ^= 1 << rng.randrange(8)
    return bytes(frame)


def _same(c_value, py_value) -> bool:
    """Equal as decoded values: NaN equals NaN (the bits are compared through the re-encoded bytes)."""
    if isinstance(c_value, list) and isinstance(py_value, list):
        return len(c_value) == len(py_value) and all(_same(a, b) for a, b in zip(c_value, py_value))
    if isinstance(c_value, dict) and isinstance(py_value, dict):
        return c_value.keys() == py_value.keys() and all(_same(c_value[k], py_value[k]) for k in c_value)
    if isinstance(py_value, float) and math.isnan(py_value):
        return isinstance(c_value, float) and math.isnan(c_value)
    return c_value == py_value


def test_c_and_python_decoders_agree_on_random_and_mutated_frames(harness):
    """The same frames (COBS-encoded, without the delimiter byte 0x00 that a stream splits on) through
    ``protocol.decode_frame`` and the C ``mms_decode``: the same accept/reject, the same error kind, the same
    fields, the same bytes re-encoded."""
    rng = random.Random(20261123)
    encoded = []
    for _ in range(DIFFERENTIAL_FRAMES):
        if rng.random() < 0.1:    # random bytes, no zero (a zero ends a frame on the stream)
            encoded.append(bytes(rng.randrange(1, 256) for _ in range(rng.randrange(1, 600))))
        else:
            encoded.append(cobs.encode(_mutated_frame(rng)))
    outputs = run_harness(harness, [(p.DELIMITER + e + p.DELIMITER).hex() for e in encoded])
    kinds: dict[str, int] = {}
    for frame, out in zip(encoded, outputs):
        try:
            packet = p.decode_frame(frame)
        except p.ProtocolError as exc:
            assert C_ERROR_KIND.get(out.get("error")) == exc.kind, (frame.hex(), out, str(exc))
            kinds[exc.kind] = kinds.get(exc.kind, 0) + 1
            continue
        kinds["accepted"] = kinds.get("accepted", 0) + 1
        assert out.get("error") is None, (frame.hex(), out)
        assert (out["type_id"], out["seq"], out["t_us"]) == (p.TYPE_OF[type(packet.message)], packet.seq,
                                                             packet.t_us)
        assert _same(out["fields"], to_json(packet.message)), (frame.hex(), out["fields"])
        assert out["wire_hex"] == p.encode_packet(packet).hex()
    # the frames reached every check: acceptance, and each kind of refusal
    assert kinds.get("accepted", 0) > 1000, kinds
    assert all(kinds.get(kind, 0) > 0 for kind in set(C_ERROR_KIND.values())), kinds


def test_c_decoder_refuses_a_rig_name_that_is_not_utf8(harness):
    """DEVICE_INFO names: the Python decoder refuses these byte strings (invalid UTF-8: a lone continuation
    byte, an overlong '/', a surrogate, a code point above U+10FFFF, a cut sequence), and so does the C one."""
    for name in (b"\x80", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"rig\xe2\x82"):
        frame = _with_crc(struct.pack("<BBHI", 1, p.T_DEVICE_INFO, 1, 0)
                          + struct.pack("<8B", 1, 0, 1, 0, 1, 1, 1, len(name)) + name)
        with pytest.raises(p.ProtocolError, match="not UTF-8"):
            p.unpack_frame(frame)
        (out,) = run_harness(harness, [(p.DELIMITER + cobs.encode(frame) + p.DELIMITER).hex()])
        assert out == {"error": -9}, name
