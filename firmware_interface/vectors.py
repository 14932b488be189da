"""Test vectors of the serial protocol: message fields and their exact bytes, for any implementation.

``firmware_interface/vectors.json`` is written by ``python -m firmware_interface.vectors`` from the cases
below and is part of the protocol's specification (docs/protocol.md): the Python codec and the reference C
codec (firmware_interface/firmware/) are both checked against the file. Every float in a case is exactly
representable in float32, so the JSON numbers are exact. Regenerating the file is a protocol change: bump
PROTOCOL_VERSION when an existing vector's bytes change.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from firmware_interface import protocol as p

VECTORS_PATH = Path(__file__).with_name("vectors.json")


def cases() -> list[tuple[str, p.Packet]]:
    """(name, packet) pairs covering every message type, edge values and COBS block boundaries."""
    sample = p.TelemetrySample
    long_batch = tuple(sample(1_000_000 + 1000 * k, (1500.0 + k, 1499.5 - k), (k - 3, -(2 ** 23) + k, 2 ** 23 - 1 - k, 0),
                              (100 * k, -100 * k, -9800, 0, 1, -1)) for k in range(9))
    return [
        ("hello", p.Packet(0, 0, p.Hello())),
        ("device_info_flapper", p.Packet(1, 1234, p.DeviceInfo(1, (1, 0, 0), "flapper-rig", 2, 4, 6))),
        ("device_info_utf8", p.Packet(2, 0xFFFFFFFF, p.DeviceInfo(1, (2, 17, 255), "raie-électrique", 1, 2, 1))),
        ("setpoints_one", p.Packet(3, 5_000_000, p.Setpoints((1500.0,)))),
        ("setpoints_two", p.Packet(0xFFFF, 7, p.Setpoints((1612.25, 1387.75)))),
        ("telemetry_empty_batch", p.Packet(10, 20, p.Telemetry(p.FLAG_WATCHDOG, 1, 2, 1, ()))),
        ("telemetry_raybot", p.Packet(11, 2_000_000, p.Telemetry(
            p.FLAG_CONFIGURED, 1, 2, 1, (sample(1_998_000, (1520.5,), (2000, -2000), (1200,)),
                                         sample(2_000_000, (1521.0,), (2010, -2010), (1190,)))))),
        ("telemetry_flapper_full", p.Packet(12, 3_000_000, p.Telemetry(
            p.FLAG_ESTOP | p.FLAG_CONFIGURED, 2, 4, 6, long_batch))),
        ("heartbeat", p.Packet(13, 4_000_000, p.Heartbeat(p.FLAG_ESTOP | p.FLAG_WATCHDOG, 4000))),
        ("estop_host", p.Packet(14, 0, p.EStop(p.ESTOP_HOST))),
        ("estop_button", p.Packet(15, 1, p.EStop(p.ESTOP_BUTTON))),
        ("estop_reset", p.Packet(16, 2, p.EStopReset())),
        ("configure", p.Packet(17, 3, p.Configure(1000, 8, 100))),
        ("ack", p.Packet(18, 4, p.Ack(p.T_CONFIGURE, 17))),
        ("nack", p.Packet(19, 5, p.Nack(p.T_SETPOINTS, 0xFFFE, p.NACK_ESTOP_LATCHED))),
        ("get_link_stats", p.Packet(20, 6, p.GetLinkStats())),
        ("link_stats", p.Packet(21, 7, p.LinkStats(1, 2, 3, 4, 5, 6, 7, 8, 0xFFFFFFFF))),
    ]


def to_json(value):
    """Message fields as JSON values (tuples -> lists, nested dataclasses -> objects)."""
    if dataclasses.is_dataclass(value):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_json(v) for v in value]
    return value


def from_json(type_name: str, fields: dict) -> p.Message:
    """The inverse of :func:`to_json` for a message of class ``type_name``."""
    cls = next(c for c in p.TYPE_OF if c.__name__ == type_name)
    if cls is p.Telemetry:
        samples = tuple(p.TelemetrySample(s["t_us"], tuple(s["servo"]), tuple(s["strain"]), tuple(s["load"]))
                        for s in fields["samples"])
        return p.Telemetry(fields["flags"], fields["n_servo"], fields["n_strain"], fields["n_load"], samples)
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


def build() -> dict:
    vectors = []
    for name, packet in cases():
        vectors.append({
            "name": name, "type": type(packet.message).__name__, "type_id": p.TYPE_OF[type(packet.message)],
            "seq": packet.seq, "t_us": packet.t_us, "fields": to_json(packet.message),
            "frame_hex": p.pack_frame(packet).hex(), "wire_hex": p.encode_packet(packet).hex()})
    return {"protocol_version": p.PROTOCOL_VERSION, "crc": "CRC-16/CCITT-FALSE (CRC-16/IBM-3740)",
            "frame": "0x00 COBS(header | payload | crc_be16) 0x00", "vectors": vectors}


if __name__ == "__main__":
    VECTORS_PATH.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {VECTORS_PATH}")
