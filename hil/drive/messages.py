"""The driver's hw/* payloads (schemas in sim/messages.py, documented in docs/messages.md and docs/driver.md).

Pure builders: they take plain values and return msgpack-ready maps (lists, not numpy arrays), with the
common keys ``v``, ``seq`` and ``stamp_ns`` filled in by :class:`HwPublisherSeq`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from sim.messages import SCHEMA_VERSION


@dataclass
class HwPublisherSeq:
    """Per-topic ``seq`` counters from 0, and the common header of every payload."""
    counters: dict[str, int] = field(default_factory=dict)

    def header(self, topic: str, stamp_ns: int | None = None) -> dict:
        seq = self.counters.get(topic, 0)
        self.counters[topic] = seq + 1
        return {"v": SCHEMA_VERSION, "seq": seq, "stamp_ns": time.time_ns() if stamp_ns is None else stamp_ns}


def command_payload(header: dict, *, mode: str, channels: list[str], angles: np.ndarray, raw: np.ndarray,
                    limited: np.ndarray, sim_seq: int, sim_t: float, state_stamp_ns: int, frame_seq: int,
                    lifecycle: str, setpoint_t: float) -> dict:
    """hw/command: what was actually written to the port. ``angles`` (n,) rad, ``raw`` (n,) device units
    (as rounded to float32 on the wire), ``limited`` (n,) bool: the position or rate limit changed it. ``sim_t``:
    the simulated time of the state it came from, s; ``setpoint_t``: the simulated time the angles are for, s (the
    state's carried by ``--state-lead``)."""
    return {**header, "t": float(sim_t), "setpoint_t": float(setpoint_t), "sim_seq": int(sim_seq),
            "channels": list(channels),
            "setpoint_rad": [float(a) for a in angles],
            "setpoint_raw": [float(r) for r in np.asarray(raw, dtype=np.float32)],
            "limited": [bool(x) for x in limited], "mode": mode, "state_stamp_ns": int(state_stamp_ns),
            "frame_seq": int(frame_seq), "lifecycle": lifecycle}


def telemetry_payload(header: dict, *, host_ns: int, device_us: list[int], servo_names: list[str],
                      servo_rad: np.ndarray, strain_names: list[str], strain: np.ndarray, load_names: list[str],
                      load: np.ndarray, device_flags: int, frame_seq: int,
                      servo_host_ns: int | None = None) -> dict:
    """hw/telemetry: one device frame, calibrated. Arrays are (samples, channels): ``servo_rad`` rad,
    ``strain`` dimensionless (m/m), ``load`` N or N m per channel (the unit is in the rig file).
    ``servo_host_ns``: when the servo positions come from another device than the samples (a servo bus beside
    the sensor microcontroller), the host wall clock of the read they were held from, ns; else omitted."""
    extra = {} if servo_host_ns is None else {"servo_host_ns": int(servo_host_ns)}
    return {**extra, **header, "host_ns": int(host_ns), "device_us": [int(u) for u in device_us],
            "servo_names": list(servo_names), "servo_rad": np.asarray(servo_rad, dtype=float).tolist(),
            "strain_names": list(strain_names), "strain": np.asarray(strain, dtype=float).tolist(),
            "load_names": list(load_names), "load": np.asarray(load, dtype=float).tolist(),
            "device_flags": int(device_flags), "frame_seq": int(frame_seq)}

