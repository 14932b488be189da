"""Messages to plottable streams (pure Python + numpy, no Qt, no sockets): what the dashboard's signals mean.

A *stream* is a set of named channels sharing one time axis, e.g. ``sim.tau`` (one channel per joint) or
``hw.load`` (one per load-cell channel). :class:`MessageProcessor` turns the ``[topic, msgpack]`` messages of
docs/messages.md into stream chunks, counts them (received, ``seq`` gaps, restarts, malformed) and keeps the
latest status payloads; the network worker and the replay reader both feed it, so live data and recordings go
through the same path.

Time axis: every sample is placed on its publisher's wall clock, in seconds since ``origin_ns`` (the
dashboard's start, or the first message of a replay): ``sim/state`` and ``hw/command`` at their ``stamp_ns``
(the simulator paces its publications, so a run slower than real time is shown stretched, as it happened);
``hw/telemetry`` carries a batch of device samples per message, placed by their device clock ``device_us``
mapped onto the wall clock by :class:`ClockAligner` (the batch's ``host_ns`` is its newest sample's arrival;
the smallest arrival delay over the last second gives the offset), so serial-link batching does not show as
jitter. Plotting simulated and measured signals on this one wall-clock axis shows the loop's real lag, which
is what the experimenter must see.

Pairing simulated with measured channels is by name (see :func:`base_name`): a strain gauge named like a
joint (``r_twist_2``, ``sg_r_twist_2``, ``r_twist_2_strain``) is that joint's measured strain, a load channel
named like an actuated joint is its measured torque, and load channels ``fx..mz`` (optionally prefixed
``tether_``/``load_``) are the measured tether wrench.

With a rig file (``mms dash --rig``, or the one stored in a replayed recording), the rig's declared maps
(:func:`firmware_interface.rigs.host.channel_maps`, the ones validation compares with) take precedence: a mapped measured channel is
converted to its simulated signal's unit and sign (``(measured - offset) / scale``) and drawn on the simulated
channel's axis in its colour, so a load cell that reads the opposite of the support's wrench, or a gauge in m/m
that reads a joint deflection in rad, lies on the simulated curve when the model is right.
"""
from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.messages import (TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE,
                          TOPIC_SIM_STATUS, TOPICS, MalformedMessage, SeqTracker, decode)

if TYPE_CHECKING:
    from firmware_interface.rigs.host import ChannelMap

#: names of the six components of a wrench (force, moment), as in docs/messages.md, N and N m
WRENCH_NAMES = ("Fx", "Fy", "Fz", "Mx", "My", "Mz")

_PREFIXES = ("tether_", "load_", "strain_", "sg_", "tau_", "torque_", "servo_", "meas_", "sim_")
_SUFFIXES = ("_strain", "_sg", "_tau", "_torque", "_load", "_meas", "_rad")


#: hw/telemetry key of a rig map -> the dashboard streams of that channel (a servo's setpoint is in its unit too)
_MEASURED_STREAMS = {"servo_rad": ("hw.servo", "hw.setpoint"), "strain": ("hw.strain",), "load": ("hw.load",)}
#: sim/state key of a rig map -> the dashboard stream of the simulated signal
_SIMULATED_STREAMS = {"q": "sim.q", "strain": "sim.strain", "tau": "sim.tau", "base_wrench": "sim.base_wrench",
                      "ext_wrench": "sim.ext_wrench"}


def drawn_maps(maps: "list[ChannelMap]") -> dict[tuple[str, str], tuple["ChannelMap", str, str]]:
    """``(measured stream, channel) -> (map, simulated stream, simulated channel)`` of a rig's declared maps."""
    drawn = {}
    for mapping in maps:
        simulated_stream = _SIMULATED_STREAMS.get(mapping.signal)
        if simulated_stream is None:
            continue
        element = mapping.element if isinstance(mapping.element, str) else WRENCH_NAMES[mapping.element]
        for stream in _MEASURED_STREAMS[mapping.telemetry_key]:
            drawn[(stream, mapping.channel)] = (mapping, simulated_stream, element)
    return drawn


def base_name(name: str) -> str:
    """The name a channel is paired by: lower case, without the usual sensor prefixes and suffixes."""
    key = name.strip().lower()
    changed = True
    while changed:
        changed = False
        for prefix in _PREFIXES:
            if key.startswith(prefix) and len(key) > len(prefix):
                key, changed = key[len(prefix):], True
        for suffix in _SUFFIXES:
            if key.endswith(suffix) and len(key) > len(suffix):
                key, changed = key[:-len(suffix)], True
    return key


def strain_group(name: str) -> str | None:
    """The tip-sum group of a strain channel: its base name without section numbers, if it is a twist or bend.

    ``r_twist_3`` -> ``r_twist``, ``left_bend2`` -> ``left_bend``; names without ``twist``/``bend`` -> None.
    """
    key = base_name(name)
    if "twist" not in key and "bend" not in key:
        return None
    key = re.sub(r"\d+", "", key)
    key = re.sub(r"[_\-. ]+", "_", key).strip("_")
    return key or None


def tip_sums(names: list[str], values: np.ndarray, include: np.ndarray | None = None, min_members: int = 1
             ) -> tuple[list[str], np.ndarray]:
    """Tip twist/bending: the sums of the strains of each group (:func:`strain_group`) along the span.

    ``values (k, n)`` strains (rad, or m for prismatic joints); ``include (n,)`` bool selects the channels
    that take part (the passive joints); groups with fewer than ``min_members`` channels are left out. Returns
    the group names and ``(k, n_groups)`` sums.
    """
    groups: dict[str, list[int]] = {}
    for index, name in enumerate(names):
        if include is not None and not include[index]:
            continue
        group = strain_group(name)
        if group is not None:
            groups.setdefault(group, []).append(index)
    group_names = sorted(g for g, members in groups.items() if len(members) >= min_members)
    sums = np.zeros((values.shape[0], len(group_names)))
    for column, group in enumerate(group_names):
        sums[:, column] = values[:, groups[group]].sum(axis=1)
    return [f"tip_{g}" for g in group_names], sums


#: how far back ClockAligner looks for the smallest publish delay, s
CLOCK_ALIGN_WINDOW_S = 1.0


class ClockAligner:
    """Maps a source clock (simulation time, device time) onto the wall clock without the publishing jitter.

    The offset is ``min(wall - source)`` over the samples of the last :data:`CLOCK_ALIGN_WINDOW_S` of wall
    time: the least-delayed publication bounds the true offset, and the sliding window follows pauses,
    real-time factors other than 1 and restarts within a second.
    """

    def __init__(self):
        self._candidates: deque[tuple[float, float]] = deque()  # (wall s, wall - source s), increasing offsets

    def offset(self, source_s: float, wall_s: float) -> float:
        candidate = wall_s - source_s
        while self._candidates and self._candidates[-1][1] >= candidate:
            self._candidates.pop()
        self._candidates.append((wall_s, candidate))
        while wall_s - self._candidates[0][0] > CLOCK_ALIGN_WINDOW_S:
            self._candidates.popleft()
        return self._candidates[0][1]


@dataclass
class Chunk:
    """Samples of one stream: ``times (k,)`` s since the origin, ``values (k, len(names))`` channel units."""
    key: str
    names: tuple[str, ...]
    times: np.ndarray
    values: np.ndarray


@dataclass
class Batch:
    """What the worker hands to the GUI thread at each tick (a snapshot; the worker keeps no reference)."""
    chunks: list[Chunk]
    status: dict[str, dict[str, Any]]         # latest sim/status and hw/status payloads
    received: dict[str, int]                  # messages per topic since start
    gaps: dict[str, int]                      # messages missed per topic (seq gaps)
    restarts: dict[str, int]                  # publisher restarts per topic (seq went back)
    malformed: int                            # messages dropped as malformed, all topics
    latency_s: dict[str, float]               # receive time - stamp_ns of the newest message per topic, s
    last_receipt: dict[str, float]            # time.monotonic() of the newest message per topic, s
    actuated: dict[str, bool] = field(default_factory=dict)  # joint name -> actuated, from the newest state
    #: measured (stream, channel) drawn in a simulated signal's unit -> its (simulated stream, channel) (rig maps)
    counterparts: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    #: the newest sim/state's pose (the 3-D view's input), None before the first
    pose: "Pose | None" = None


@dataclass(frozen=True)
class Pose:
    """The robot's configuration in one ``sim/state``: ``joint_names`` (n), ``q`` (n,) rad or m, the base's world
    pose ``base_pos`` (3,) m and ``base_quat`` (4,) (w, x, y, z, not zero), ``t`` simulation time, s."""
    joint_names: tuple[str, ...]
    q: np.ndarray
    base_pos: np.ndarray
    base_quat: np.ndarray
    t: float


class MessageProcessor:
    """Decodes, counts and converts messages into stream chunks; one per worker (not thread-safe)."""

    def __init__(self, origin_ns: int | None = None, maps: "list[ChannelMap]" = ()):
        self.origin_ns = origin_ns
        self._maps = drawn_maps(list(maps))
        self.tracker = SeqTracker()
        self.malformed = 0
        self._status: dict[str, dict[str, Any]] = {}
        self._latency: dict[str, float] = {}
        self._receipt: dict[str, float] = {}
        self._pending: list[Chunk] = []
        self._changed = False   # anything fed (data, status, a malformed message) since the last batch
        self._joint_names: list[str] | None = None   # from the newest sim/status or sim/state carrying them
        self._actuated_flags: list[bool] | None = None
        self._actuated: dict[str, bool] = {}
        self._device_clock = ClockAligner()
        self._last_device_s = -np.inf    # device time of the newest telemetry sample, s
        self._last_telemetry_time = -np.inf   # its place on the time axis, s
        self._pose: Pose | None = None

    # ---- input -------------------------------------------------------------------------------------
    def feed_frames(self, frames: list[bytes], receive_ns: int | None = None) -> None:
        """One received ZeroMQ message; malformed ones are counted and dropped."""
        self._changed = True
        try:
            topic, payload = decode(frames)
        except MalformedMessage:
            self.malformed += 1
            return
        self.feed(topic, payload, receive_ns)

    def feed(self, topic: str, payload: dict[str, Any], receive_ns: int | None = None) -> None:
        """One decoded message (from the wire or from a recording)."""
        self._changed = True
        if topic not in TOPICS:
            self.malformed += 1
            return
        receive_ns = time.time_ns() if receive_ns is None else receive_ns
        try:
            seq = payload["seq"]
            stamp_ns = payload["stamp_ns"]
            if not isinstance(seq, int) or not isinstance(stamp_ns, int):
                raise TypeError("seq and stamp_ns must be integers")
            if self.origin_ns is None:
                self.origin_ns = stamp_ns
            chunks = self._extract(topic, payload, stamp_ns)
        except (KeyError, TypeError, ValueError, IndexError):
            self.malformed += 1
            return
        self.tracker.update(topic, seq)
        self._latency[topic] = (receive_ns - stamp_ns) * 1e-9
        self._receipt[topic] = time.monotonic()
        self._pending.extend(chunks)

    def _seconds(self, ns) -> np.ndarray:
        return (np.asarray(ns, dtype=np.int64) - self.origin_ns) * 1e-9

    def _extract(self, topic: str, payload: dict[str, Any], stamp_ns: int) -> list[Chunk]:
        if topic == TOPIC_SIM_STATE:
            return self._sim_state(payload, stamp_ns)
        if topic == TOPIC_HW_TELEMETRY:
            return self._hw_telemetry(payload)
        if topic == TOPIC_HW_COMMAND:
            names = tuple(str(n) for n in payload["channels"])
            values = self._to_simulated("hw.setpoint", names, _row(payload["setpoint_rad"], len(names)))
            float(payload["t"])   # required, numeric
            return [Chunk("hw.setpoint", names, self._seconds([stamp_ns]), values)]
        if topic == TOPIC_SIM_STATUS:
            if not isinstance(payload.get("rtf"), (int, float)) or not isinstance(payload.get("state"), str):
                raise TypeError("sim/status needs a numeric rtf and a state")
            self._joint_names = [str(n) for n in payload.get("joint_names", [])] or None
            self._actuated_flags = [bool(a) for a in payload.get("actuated", [])] or None
        elif topic == TOPIC_HW_STATUS:
            if not isinstance(payload.get("link"), dict):
                raise TypeError("hw/status needs a link map")
        self._status[topic] = dict(payload)
        return []

    def _sim_state(self, payload: dict[str, Any], stamp_ns: int) -> list[Chunk]:
        q = np.asarray(payload["q"], dtype=float)
        n = len(q)
        # joint_names/actuated ride on some sim/state messages only (docs/messages.md): remember the newest
        if payload.get("joint_names") and len(payload["joint_names"]) == n:
            self._joint_names = [str(name) for name in payload["joint_names"]]
        if payload.get("actuated") and len(payload["actuated"]) == n:
            self._actuated_flags = [bool(a) for a in payload["actuated"]]
        names = self._joint_names if self._joint_names and len(self._joint_names) == n else \
            [f"joint{i}" for i in range(n)]
        names = tuple(names)
        actuated = self._actuated_flags
        if not actuated or len(actuated) != n:
            actuated = [False] * n
        actuated = np.asarray(actuated, dtype=bool)
        self._actuated = dict(zip(names, (bool(a) for a in actuated)))
        t = float(payload["t"])   # required, numeric
        position = _row(payload["base_pos"], 3)[0]
        quaternion = _row(payload["base_quat"], 4)[0]
        times = self._seconds([stamp_ns])
        # strain (n_p,): q - q_rest of the passive joints, in joint order
        passive_names = tuple(name for name, is_actuated in zip(names, actuated) if not is_actuated)
        n_strain = len(payload["strain"])
        if n_strain != len(passive_names) and self._actuated_flags is None:
            # which joints are passive is not known yet (a late joiner before the next sim/status): name by index
            passive_names = tuple(f"passive{i}" for i in range(n_strain))
        strain = _row(payload["strain"], len(passive_names))
        tip_names, tips = tip_sums(list(passive_names), strain)
        chunks = [Chunk("sim.q", names, times, q.reshape(1, n)),
                  Chunk("sim.tau", names, times, _row(payload["tau"], n)),
                  Chunk("sim.base_wrench", WRENCH_NAMES, times, _row(payload["base_wrench"], 6)),
                  Chunk("sim.ext_wrench", WRENCH_NAMES, times, _row(payload["ext_wrench"], 6))]
        if passive_names:
            chunks.append(Chunk("sim.strain", passive_names, times, strain))
        if tip_names:
            chunks.append(Chunk("sim.tip", tuple(tip_names), times, tips))
        # a pose the 3-D view cannot draw (not finite, a zero quaternion) leaves the previous one in place
        if np.all(np.isfinite(q)) and np.all(np.isfinite(position)) and np.all(np.isfinite(quaternion)) \
                and np.linalg.norm(quaternion) > 0.0:
            self._pose = Pose(names, q, position, quaternion, t)
        return chunks

    def _hw_telemetry(self, payload: dict[str, Any]) -> list[Chunk]:
        device_us = np.asarray(payload["device_us"], dtype=np.int64)
        k = len(device_us)
        if k == 0:
            return []
        # host_ns is taken as the time of the newest sample; the device clock places the others.
        device_s = device_us * 1e-6
        if device_s[0] < self._last_device_s:   # the device rebooted: its clock offset is new
            self._device_clock = ClockAligner()
        self._last_device_s = float(device_s[-1])
        offset = self._device_clock.offset(float(device_s[-1]), float(self._seconds(int(payload["host_ns"]))))
        # a smaller offset found later must not move new samples before older ones: keep the axis monotonic
        times = np.maximum(device_s + offset, self._last_telemetry_time)
        self._last_telemetry_time = float(times[-1])
        chunks = []
        for key, names_key, values_key in (("hw.servo", "servo_names", "servo_rad"),
                                           ("hw.strain", "strain_names", "strain"),
                                           ("hw.load", "load_names", "load")):
            names = tuple(str(n) for n in payload[names_key])
            if not names:
                continue
            values = np.asarray(payload[values_key], dtype=float)
            if values.shape != (k, len(names)):
                raise ValueError(f"{values_key} has shape {values.shape}, expected {(k, len(names))}")
            values = self._to_simulated(key, names, values)
            chunks.append(Chunk(key, names, times, values))
            if key == "hw.strain":
                # a single gauge (at the root, say) is no sum along the span: at least two per group; with rig maps,
                # the sums of the mapped gauges alone (in rad, like the simulated tips)
                mapped = np.array([("hw.strain", n) in self._maps for n in names])
                tip_names, tips = tip_sums(list(names), values, mapped if mapped.any() else None, min_members=2)
                if tip_names:
                    chunks.append(Chunk("hw.tip", tuple(tip_names), times, tips))
        return chunks

    def _to_simulated(self, stream: str, names: tuple[str, ...], values: np.ndarray) -> np.ndarray:
        """``values (k, len(names))`` with the rig-mapped columns in their simulated signal's unit and sign."""
        for column, name in enumerate(names):
            drawn = self._maps.get((stream, name))
            if drawn is not None:
                values[:, column] = drawn[0].to_simulated(values[:, column])
        return values

    # ---- output ------------------------------------------------------------------------------------
    def take_batch(self) -> Batch:
        """Everything since the previous call, consecutive chunks of a stream merged."""
        merged: list[Chunk] = []
        by_key: dict[str, list[Chunk]] = {}
        for chunk in self._pending:
            by_key.setdefault(chunk.key, []).append(chunk)
        for chunks in by_key.values():
            run = [chunks[0]]
            for chunk in chunks[1:]:
                if chunk.names == run[-1].names:
                    run.append(chunk)
                else:
                    merged.append(_concatenate(run))
                    run = [chunk]
            merged.append(_concatenate(run))
        self._pending = []
        self._changed = False
        return Batch(chunks=merged, status={k: dict(v) for k, v in self._status.items()},
                     received=dict(self.tracker.received), gaps=dict(self.tracker.gaps),
                     restarts=dict(self.tracker.restarts), malformed=self.malformed,
                     latency_s=dict(self._latency), last_receipt=dict(self._receipt),
                     actuated=dict(self._actuated),
                     counterparts={key: (stream, channel) for key, (_m, stream, channel) in self._maps.items()},
                     pose=self._pose)

    def has_news(self) -> bool:
        """Whether anything was fed since the last :meth:`take_batch`."""
        return self._changed


def _row(values, n: int) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.shape != (n,):
        raise ValueError(f"expected {n} values, got shape {array.shape}")
    return array.reshape(1, n)


def _concatenate(chunks: list[Chunk]) -> Chunk:
    if len(chunks) == 1:
        return chunks[0]
    return Chunk(chunks[0].key, chunks[0].names, np.concatenate([c.times for c in chunks]),
                 np.concatenate([c.values for c in chunks]))
