"""The ZeroMQ message contract (architecture.md, docs/messages.md): topics, schemas, codec, gap counting.

Every message is two frames ``[topic, payload]``: the topic in ASCII, the payload a MessagePack map carrying
``v`` (schema version), ``seq`` (per-topic counter from 0), ``t`` (simulation time, s, where there is one) and
``stamp_ns`` (publisher wall clock, ``time.time_ns()``). The schemas below are the single source of truth:
docs/messages.md documents them key by key (a test keeps the two equal) and the recorder registers them in
MCAP. They require the listed keys and allow extra ones, so a newer publisher does not break older tools.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgpack
import numpy as np

SCHEMA_VERSION = 1
_INT64_MAX = (1 << 63) - 1

TOPIC_SIM_STATE = "sim/state"
TOPIC_SIM_STATUS = "sim/status"
TOPIC_HW_COMMAND = "hw/command"
TOPIC_HW_TELEMETRY = "hw/telemetry"
TOPIC_HW_STATUS = "hw/status"

_int = {"type": "integer"}
_num = {"type": "number"}
_str = {"type": "string"}
_bool = {"type": "boolean"}


def _vec(n: int | None = None) -> dict:
    schema: dict[str, Any] = {"type": "array", "items": _num}
    if n is not None:
        schema.update(minItems=n, maxItems=n)
    return schema


_names = {"type": "array", "items": _str}
_bools = {"type": "array", "items": _bool}
_matrix = {"type": "array", "items": _vec()}
_common = {"v": _int, "seq": {"type": "integer", "minimum": 0}, "stamp_ns": _int}


def _object(properties: dict, required: list[str]) -> dict:
    return {"type": "object", "properties": properties, "required": required}


SCHEMAS: dict[str, dict] = {
    TOPIC_SIM_STATE: _object(
        {**_common, "t": _num,
         "joint_names": _names, "actuated": _bools,
         "q": _vec(), "qd": _vec(), "qdd": _vec(), "tau": _vec(), "strain": _vec(),
         "base_pos": _vec(3), "base_quat": _vec(4), "base_twist": _vec(6),
         "base_wrench": _vec(6), "ext_wrench": _vec(6),
         # a Cosserat rod (sim/cosserat/live.py): its stations, their world positions, its reacting contacts
         "station_X": _vec(), "backbone": _vec(), "contact_names": _names, "contact_X": _vec(),
         "contact_force": _vec()},
        ["v", "seq", "t", "stamp_ns", "q", "qd", "qdd", "tau", "strain",
         "base_pos", "base_quat", "base_twist", "base_wrench", "ext_wrench"]),
    TOPIC_SIM_STATUS: _object(
        {**_common, "t": _num, "mode": {"enum": ["realtime", "fast", "lockstep"]},
         "state": {"enum": ["idle", "running", "paused", "stalled", "stopped"]},
         "rtf": _num, "step_us": _object({"mean": _num, "p50": _num, "p99": _num, "max": _num},
                                         ["mean", "p50", "p99", "max"]),
         "deadline_misses": _int, "state_rate_hz": _num, "robot": _str,
         "deadline_miss_reasons": _object({"not_ready": _int, "published_late": _int},
                                          ["not_ready", "published_late"]),
         "lookahead_states": _int, "queued_states": _int,
         "joint_names": _names, "actuated": _bools, "reason": _str,
         "states": _int, "window_misses": _int, "late_max_s": _num, "stalls": _int, "stall_s": _num,
         "recent_stalls": {"type": "array", "items": _object({"t": _num, "stamp_ns": _int, "length_s": _num},
                                                             ["t", "stamp_ns", "length_s"])},
         "warmup": _object({"first_call_s": _num, "rtf": _num, "rtf_cpu": _num}, ["first_call_s", "rtf"]),
         "rt_priority": _int, "scheduler_note": _str,
         "feedback": _object({"rig": _str, "ready": _bool, "samples": _int, "used": _int,
                              "refused": {"type": "object", "additionalProperties": _int}, "age_s": _num,
                              "wrench": _vec(6), "trips": _int, "holds": _int, "tare": _vec(),
                              "joints": _vec(), "closed_at_s": _num, "frame_age_s": _num},
                             ["ready", "samples", "used", "refused", "age_s", "wrench", "trips", "holds"])},
        ["v", "seq", "t", "stamp_ns", "mode", "state", "rtf", "step_us", "deadline_misses",
         "state_rate_hz", "robot", "joint_names", "actuated"]),
    # The hw/* schemas are owned by the driver (hil/drive/driver.py, docs/driver.md); the required keys are the core
    # every tool may rely on, the other listed keys are what the driver publishes besides.
    TOPIC_HW_COMMAND: _object(
        {**_common, "t": _num, "setpoint_t": _num, "sim_seq": _int, "channels": _names, "setpoint_rad": _vec(),
         "setpoint_raw": _vec(), "limited": _bools, "mode": {"enum": ["track", "hold", "ramp", "neutral"]},
         "state_stamp_ns": _int, "frame_seq": _int, "lifecycle": _str},
        ["v", "seq", "stamp_ns", "t", "sim_seq", "channels", "setpoint_rad", "setpoint_raw", "limited", "mode"]),
    TOPIC_HW_TELEMETRY: _object(
        {**_common, "host_ns": _int, "device_us": {"type": "array", "items": _int},
         "servo_names": _names, "servo_rad": _matrix, "strain_names": _names, "strain": _matrix,
         "load_names": _names, "load": _matrix, "device_flags": _int, "frame_seq": _int, "servo_host_ns": _int},
        ["v", "seq", "stamp_ns", "host_ns", "device_us", "servo_names", "servo_rad",
         "strain_names", "strain", "load_names", "load"]),
    TOPIC_HW_STATUS: _object(
        {**_common, "lifecycle": {"enum": ["unconfigured", "inactive", "active", "finalized"]}, "rig": _str,
         "estop": _bool, "estop_sources": _names,
         "watchdog": {"enum": ["idle", "track", "hold", "ramp", "neutral"]},
         "link": _object({"state": {"enum": ["closed", "connecting", "up", "down"]}, "port": _str,
                          "frames_ok": _int, "crc_errors": _int, "framing_errors": _int, "malformed": _int,
                          "seq_gaps": _int, "reconnects": _int, "frames_sent": _int, "bytes_rx": _int,
                          "device": {"type": "object"}, "oversize": _int, "seq_repeats": _int,
                          "bytes_sent": _int, "write_timeouts": _int, "link_losses": _int,
                          "nacks": {"type": "object"}, "emulator_pid": _int, "emulator_starts": _int,
                          "sensor": {"type": "object"}},
                         ["state", "frames_ok", "crc_errors", "seq_gaps", "reconnects"]),
         "device_flags": _int, "states": {"type": "object"}, "latency_us": {"type": "object"},
         "health": _object({"holds": _int, "hold_s": _num, "stale_states": _int,
                            "refused": {"type": "object", "additionalProperties": _int},
                            "measurement_faults": {"type": "object", "additionalProperties": _int},
                            "watchdog_trips": _int, "reconnects": _int,
                            "plant": _object({"rtf": _num, "lag_s": _num, "alive": _bool, "restarts": _int},
                                             ["rtf", "lag_s", "alive", "restarts"])},
                           ["holds", "hold_s", "stale_states", "refused", "measurement_faults", "watchdog_trips",
                            "reconnects"]),
         "error": _str},
        ["v", "seq", "stamp_ns", "lifecycle", "rig", "estop", "watchdog", "link"]),
}

TOPICS = tuple(SCHEMAS)


def encode(topic: str, payload: dict[str, Any]) -> list[bytes]:
    """The two frames of a message. numpy arrays must be converted with ``.tolist()`` by the caller."""
    return [topic.encode("ascii"), msgpack.packb(payload, use_bin_type=True)]


class MalformedMessage(ValueError):
    """A message that is not ``[ascii topic, msgpack map]``."""


def decode(frames: list[bytes]) -> tuple[str, dict[str, Any]]:
    """Topic and payload of a received message; raises :class:`MalformedMessage` on anything else."""
    if len(frames) != 2:
        raise MalformedMessage(f"expected 2 frames, got {len(frames)}")
    try:
        topic = bytes(frames[0]).decode("ascii")
        payload = msgpack.unpackb(bytes(frames[1]), raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises several unrelated types on bad bytes
        raise MalformedMessage(str(exc)) from None
    if not isinstance(payload, dict):
        raise MalformedMessage(f"payload is {type(payload).__name__}, expected a map")
    return topic, payload


_VALIDATORS: dict[str, Any] = {}


def validate(topic: str, payload: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` if ``payload`` does not follow the schema of ``topic``.

    The validator of each topic is built (and its schema checked) once: ``jsonschema.validate`` redoes both on
    every call, which costs tens of milliseconds, too slow for checking traffic at 1 kHz.
    """
    validator = _VALIDATORS.get(topic)
    if validator is None:
        import jsonschema

        schema = SCHEMAS[topic]
        cls = jsonschema.validators.validator_for(schema)
        cls.check_schema(schema)
        validator = _VALIDATORS[topic] = cls(schema)
    validator.validate(payload)


@dataclass
class SeqTracker:
    """Counts messages and ``seq`` gaps per topic, so that no drop is ever silent.

    A ``seq`` lower than the last one is a publisher restart (reset), not a gap.
    """
    received: dict[str, int] = field(default_factory=dict)
    gaps: dict[str, int] = field(default_factory=dict)
    restarts: dict[str, int] = field(default_factory=dict)
    last_seq: dict[str, int] = field(default_factory=dict)

    def update(self, topic: str, seq: int) -> int:
        """Record ``seq`` for ``topic``; return how many messages were missed just before it."""
        self.received[topic] = self.received.get(topic, 0) + 1
        last = self.last_seq.get(topic)
        self.last_seq[topic] = seq
        if last is None:
            return 0
        if seq <= last:
            self.restarts[topic] = self.restarts.get(topic, 0) + 1
            return 0
        missed = seq - last - 1
        if missed:
            self.gaps[topic] = self.gaps.get(topic, 0) + missed
        return missed

    def update_many(self, topic: str, seqs: np.ndarray) -> None:
        """:meth:`update` with each of ``seqs`` ((k,) non-negative integers, in receipt order), counted at once."""
        if not len(seqs):
            return
        last = self.last_seq.get(topic)
        if int(seqs.max()) > _INT64_MAX or (last is not None and last > _INT64_MAX):
            for seq in seqs.tolist():          # beyond int64's differences: counted one by one, exactly
                self.update(topic, seq)
            return
        seqs = seqs.astype(np.int64)
        steps = np.diff(seqs) if last is None else np.diff(seqs, prepend=np.int64(last))
        self.received[topic] = self.received.get(topic, 0) + len(seqs)
        self.last_seq[topic] = int(seqs[-1])
        restarts = int(np.count_nonzero(steps <= 0))
        if restarts:
            self.restarts[topic] = self.restarts.get(topic, 0) + restarts
        forward = steps[steps > 0]
        missed = int(forward.sum()) - len(forward)
        if missed:
            self.gaps[topic] = self.gaps.get(topic, 0) + missed


def drain_latest(socket, max_messages: int = 100_000) -> dict[str, dict[str, Any]]:
    """Read every queued message from a SUB socket without blocking; keep the newest payload per topic.

    ZeroMQ's CONFLATE does not work with multipart messages, so subscribers that want only the newest state
    drain their queue instead. Malformed messages are skipped; the caller counts them with the return of
    :func:`decode` if it needs to.
    """
    import zmq

    latest: dict[str, dict[str, Any]] = {}
    for _ in range(max_messages):
        try:
            frames = socket.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            break
        try:
            topic, payload = decode(frames)
        except MalformedMessage:
            continue
        latest[topic] = payload
    return latest
