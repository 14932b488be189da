"""The reference C codec (firmware_interface/firmware/) against the test vectors and the Python codec.

The test compiles it with gcc (-Wall -Wextra -Werror), feeds it wire frames in hex, and compares what it
decodes (fields) and what it re-encodes (bytes) with firmware_interface/vectors.json, and with the Python codec
on a few hundred random packets of every type.
"""
from __future__ import annotations

import json
import random
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from cobs import cobs

from firmware_interface import protocol as p
from firmware_interface.vectors import VECTORS_PATH, to_json

ROOT = Path(__file__).resolve().parents[2]
FIRMWARE = ROOT / "firmware_interface" / "firmware"
RANDOM_PACKETS = 400


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the reference C codec"
    exe = tmp_path_factory.mktemp("c_codec") / "vectors_check"
    subprocess.run([gcc, "-std=c99", "-Wall", "-Wextra", "-Werror", "-O2", "-o", str(exe),
                    str(FIRMWARE / "mms_proto.c"), str(FIRMWARE / "vectors_check.c")], check=True,
                   capture_output=True, text=True)
    return exe


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
