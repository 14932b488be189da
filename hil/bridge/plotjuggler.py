"""Messages as PlotJuggler's ZeroMQ subscriber reads them (pure; the socket is in bridge.py): docs/foxglove.md.

PlotJuggler's "ZMQ Subscriber" (plotjuggler_plugins/DataStreamZMQ) takes multipart messages ``[topic, payload,
timestamp]``: the payload parsed by the chosen protocol (JSON here), the timestamp the seconds since the epoch as
a decimal string (without it PlotJuggler stamps the message on arrival). Each payload here is one flat JSON map of
named numbers, so every curve has a readable name without a parser: arrays become ``key/element`` with the
elements named as the recordings' exports name them (``q/shoulder``, ``base_wrench/fz``, ``servo_rad/tail``;
hil/recording/series.py), nested maps ``key/sub``, booleans 0 or 1; strings and non-finite numbers are left out
(JSON has no NaN). ``hw/telemetry`` frames are split into one message per sample, stamped with the sample's own
time (its frame's ``host_ns`` moved back by the device clock), so that PlotJuggler plots the samples at the rate
they were taken.
"""
from __future__ import annotations

import json
import math
from typing import Any, Iterator

from hil.recording.series import FIXED_NAMES, NAME_KEYS, PASSIVE_ONLY_KEY
from sim.messages import TOPIC_HW_TELEMETRY

#: separator of the flattened names (PlotJuggler shows it as a tree)
SEPARATOR = "/"
#: the telemetry keys that are matrices (samples, channels)
_SAMPLE_MATRICES = ("servo_rad", "strain", "load")


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return float(value)
    return None


def _element_names(topic: str, key: str, payload: dict, names: dict[str, list[str]], size: int) -> list[str]:
    """The names of array ``key``'s elements: fixed ones, else from the payload's (or the remembered) name list,
    the passive joints' for ``strain``; else their indices."""
    fixed = FIXED_NAMES.get(key)
    if fixed is not None and len(fixed) == size:
        return fixed
    name_key = NAME_KEYS.get(topic, {}).get(key)
    listed = (payload.get(name_key) or names.get(name_key)) if name_key else None
    actuated = payload.get("actuated") or names.get("actuated")
    if key == PASSIVE_ONLY_KEY and isinstance(listed, list) and isinstance(actuated, list) and len(listed) != size:
        listed = [name for name, flag in zip(listed, actuated) if not flag]
    if isinstance(listed, list) and len(listed) == size and all(isinstance(n, str) for n in listed):
        return listed
    return [str(i) for i in range(size)]


def flatten(topic: str, payload: dict, names: dict[str, list[str]], prefix: str = "") -> dict[str, float]:
    """A payload's numbers as one flat map ``name -> float`` (module docstring); ``names``: the latest name lists
    seen (``joint_names``, ``actuated``, ...), for payloads that leave theirs out."""
    out: dict[str, float] = {}
    for key, value in payload.items():
        name = f"{prefix}{key}"
        number = _number(value)
        if number is not None:
            out[name] = number
        elif isinstance(value, dict):
            out.update(flatten(topic, value, names, f"{name}{SEPARATOR}"))
        elif isinstance(value, list) and value and not prefix:
            numbers = [_number(v) for v in value]
            if any(n is not None for n in numbers):
                elements = _element_names(topic, key, payload, names, len(value))
                out.update({f"{name}{SEPARATOR}{e}": n for e, n in zip(elements, numbers) if n is not None})
    return out


def _telemetry_samples(payload: dict) -> Iterator[tuple[int, dict]]:
    """(sample time ns, one-sample payload) per row of a hw/telemetry frame."""
    device_us = payload.get("device_us")
    host_ns = payload.get("host_ns")
    if not isinstance(device_us, list) or not device_us or not isinstance(host_ns, int):
        return
    last = device_us[-1]
    for row, sample_us in enumerate(device_us):
        if not isinstance(sample_us, int) or not isinstance(last, int):
            return
        sample = {key: value for key, value in payload.items() if key not in _SAMPLE_MATRICES + ("device_us",)}
        sample["device_us"] = sample_us
        for key in _SAMPLE_MATRICES:
            matrix = payload.get(key)
            if isinstance(matrix, list) and row < len(matrix) and isinstance(matrix[row], list):
                sample[key] = matrix[row]
        yield host_ns - 1000 * (last - sample_us), sample


def messages(topic: str, payload: dict, names: dict[str, list[str]]) -> list[list[bytes]]:
    """The PlotJuggler messages ``[topic, flat JSON, seconds]`` of one decoded payload (several for a telemetry
    frame); ``names`` is updated with the name lists the payload carries."""
    for key in ("joint_names", "actuated", "channels", "servo_names", "strain_names", "load_names"):
        if isinstance(payload.get(key), list):
            names[key] = payload[key]
    stamped = list(_telemetry_samples(payload)) if topic == TOPIC_HW_TELEMETRY else [(payload.get("stamp_ns"), payload)]
    out = []
    for stamp_ns, sample in stamped:
        if not isinstance(stamp_ns, int):
            continue
        flat = flatten(topic, sample, names)
        out.append([topic.encode("ascii"), json.dumps(flat, separators=(",", ":")).encode(),
                    f"{stamp_ns / 1e9:.9f}".encode()])
    return out


__all__ = ["flatten", "messages", "SEPARATOR"]
