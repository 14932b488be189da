"""Recorded messages -> named time series: one table of flat columns per topic (for export and validation).

Every numeric key of a payload becomes one column, every numeric array one column per element named
``<key>_<name>`` with the element names the payload (or its companion topic) gives: ``joint_names`` for the
``sim/*`` joint arrays, ``channels`` for ``hw/command``, ``servo_names`` / ``strain_names`` / ``load_names`` for
``hw/telemetry``, and fixed component names for poses, twists and wrenches (docs/sim-api.md conventions:
twist ``(V, Omega)``, wrench ``(force, moment)``). Arrays without names get ``<key>_<index>``.

Rows: one per message, except ``hw/telemetry``, whose payload is a batch of device samples
(``(samples, channels)`` matrices): one row per sample. Time columns of every table:

- ``log_time`` (int64 ns): recorder wall clock at receipt;
- ``stamp_ns`` (int64 ns): publisher wall clock (the payload's ``stamp_ns``);
- ``t`` (s): simulation time where the payload has one, NaN otherwise;
- ``time_s`` (s): the signal's own wall time relative to the recording origin (the earliest ``stamp_ns``):
  ``stamp_ns`` for one-row-per-message topics; for telemetry samples, ``host_ns`` moved back by the device
  clock: ``sample_ns = host_ns - 1000 * (device_us[last] - device_us[i])`` (the frame's last sample is taken
  as read at ``host_ns``; serial transfer latency is not removed), also given as column ``sample_ns``.
"""
from __future__ import annotations

import os
import threading
from itertools import chain
from dataclasses import dataclass, field
from typing import Any, Iterable

import msgpack
import numpy as np

from hil.recording.mcap_io import MESSAGE_ENCODING as MSGPACK, RawRecording, gc_paused
from hil.recording.template_decode import Template, matching, read_columns, template
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE, TOPIC_SIM_STATUS

_JOINT_ARRAYS = ("q", "qd", "qdd", "tau", "strain", "actuated")
#: array key -> the key holding its element names, per topic
NAME_KEYS: dict[str, dict[str, str]] = {
    TOPIC_SIM_STATE: {key: "joint_names" for key in _JOINT_ARRAYS},
    TOPIC_SIM_STATUS: {"actuated": "joint_names"},
    TOPIC_HW_COMMAND: {"setpoint_rad": "channels", "setpoint_raw": "channels", "limited": "channels"},
    TOPIC_HW_TELEMETRY: {"servo_rad": "servo_names", "strain": "strain_names", "load": "load_names"},
}
_ALL_NAME_KEYS = frozenset(k for names in NAME_KEYS.values() for k in names.values())
#: topic whose name lists stand in when a payload does not carry its own (sim/state may leave joint_names out)
NAME_FALLBACK_TOPIC = {TOPIC_SIM_STATE: TOPIC_SIM_STATUS}
#: sim/state key with one element per passive joint (named from joint_names where actuated is false)
PASSIVE_ONLY_KEY = "strain"
WRENCH_NAMES = ["fx", "fy", "fz", "mx", "my", "mz"]
FIXED_NAMES: dict[str, list[str]] = {
    "base_pos": ["x", "y", "z"], "base_quat": ["w", "x", "y", "z"],
    "base_twist": ["vx", "vy", "vz", "wx", "wy", "wz"],
    "base_wrench": WRENCH_NAMES, "ext_wrench": WRENCH_NAMES,
}
#: the unit of each sim/state joint signal (docs/messages.md; a prismatic joint's q is in m)
SIMULATED_UNITS = {"q": "rad", "qd": "rad/s", "qdd": "rad/s^2", "strain": "rad", "tau": "N m"}


def simulated_unit(key: str, element: str | int | None) -> str:
    """The unit of a sim/state signal's element: a joint's in :data:`SIMULATED_UNITS`, a wrench's force N and
    moment N m (``element``: a component name of :data:`WRENCH_NAMES` or its index)."""
    if key in ("base_wrench", "ext_wrench"):
        name = str(element).lower()
        index = WRENCH_NAMES.index(name) if name in WRENCH_NAMES else int(name) if name.isdigit() else 0
        return "N" if index < 3 else "N m"
    return SIMULATED_UNITS.get(key, "")


TIME_COLUMNS = ("time_s", "t", "stamp_ns", "log_time")
#: payload keys that are time columns already (kept exact as int64 there, not repeated as numbers)
_TIME_KEYS = ("stamp_ns",)
_UINT32 = 1 << 32
#: messages decoded and turned into numpy blocks at a time (bounds the memory of decoded Python objects)
_BATCH = 5000
#: recordings with at least this many messages per available core are decoded in several threads
PARALLEL_MIN_MESSAGES = 50_000


@dataclass
class Table:
    """A topic's time series: flat columns of equal length (rows), grouped by the payload key they come from.

    ``columns[name]``: (rows,) array: float64, or int64 for the ``*_ns``/``log_time``/``seq`` columns.
    ``groups[key]``: the column names of payload key ``key`` in element order (``q`` -> ``[q_j1, q_j2]``).
    ``element_names[key]``: the element names of an array key (``q`` -> ``[j1, j2]``).
    ``text[name]``: string columns (``mode``, ``state``...), one string per row.
    """
    topic: str
    columns: dict[str, np.ndarray] = field(default_factory=dict)
    groups: dict[str, list[str]] = field(default_factory=dict)
    element_names: dict[str, list[str]] = field(default_factory=dict)
    text: dict[str, list[str]] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return len(self.columns["log_time"]) if "log_time" in self.columns else 0

    def group(self, key: str) -> np.ndarray:
        """The columns of payload key ``key`` as a (rows, elements) array."""
        return np.column_stack([self.columns[c] for c in self.groups[key]])

    def element(self, key: str, element: str | int) -> np.ndarray:
        """One element of an array key, by name or index; raises KeyError naming what exists."""
        if key not in self.groups:
            raise KeyError(f"{self.topic} has no key {key!r} (has {sorted(self.groups)})")
        names = self.element_names.get(key, [])
        if isinstance(element, str) and element in names:
            index = names.index(element)
        elif isinstance(element, int) or (isinstance(element, str) and element.isdigit()):
            index = int(element)
        else:
            raise KeyError(f"{self.topic}:{key} has no element {element!r} (has {names})")
        if not 0 <= index < len(self.groups[key]):
            raise KeyError(f"{self.topic}:{key} has no element {index} (has {len(self.groups[key])})")
        return self.columns[self.groups[key][index]]


class _Targets:
    """The final float64 columns of one topic's keys, which the columnar decode writes its numbers straight into
    (no block in between to copy from afterwards: allocating and filling the blocks, then copying them into the
    columns, cost more than the decode itself; docs/recording.md, "Export speed").

    ``arrays[key]``: (width, capacity) float64, C order, so each of the key's columns is contiguous in memory. Row
    ``r`` of the table is meant to land at index ``r``: each builder of a range of the topic's messages
    (:class:`_TableBuilder`) owns the indices its messages are expected to fill (``rows_per_message`` each, an
    estimate from the topic's first message) and writes nowhere else, so builders in threads never overlap. Where
    the estimate was wrong (a malformed message, a frame of another length) the table's columns are copied from
    the blocks instead (:meth:`_Column.matrix`): the result is the same, only slower."""

    def __init__(self, capacity: int, rows_per_message: int):
        self.capacity = capacity
        self.rows_per_message = rows_per_message
        self.arrays: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()

    def array(self, key: str, width: int) -> np.ndarray | None:
        """The (width, capacity) column array of ``key``, made on first use; None if made with another width."""
        with self._lock:
            target = self.arrays.get(key)
            if target is None:
                target = self.arrays[key] = np.empty((width, self.capacity))
        return target if target.shape[0] == width else None


class _Column:
    """One payload key over many rows, kept as numpy blocks ``(first row, (k,) or (k, width) array, index)``:
    ``index`` is where the block's first row sits in ``target`` (the key's array of :class:`_Targets`, whose slice
    the block is), None for a block of its own.

    Blocks of integers stay int64 (``seq``, ``host_ns``, counters: exact); everything else is float64.
    """

    def __init__(self):
        self.blocks: list[tuple[int, np.ndarray, int | None]] = []
        self.vector = False
        self.target: np.ndarray | None = None

    def add(self, row: int, block: np.ndarray, index: int | None = None) -> None:
        self.vector |= block.ndim == 2
        self.blocks.append((row, block, index))

    def _back_to_back(self, total_rows: int, width: int) -> bool:
        """The blocks follow each other from row 0 to ``total_rows``, each ``width`` wide."""
        row = 0
        for start, block, _index in self.blocks:
            if start != row or (block.shape[1] if block.ndim == 2 else 1) != width:
                return False
            row += len(block)
        return row == total_rows

    def integers(self, total_rows: int) -> np.ndarray | None:
        """(total_rows,) int64 when every row has an integer, else None."""
        if self.vector or any(b.dtype.kind != "i" for _, b, _ in self.blocks):
            return None
        if sum(len(b) for _, b, _ in self.blocks) != total_rows or self.blocks[0][0] != 0:
            return None
        return np.concatenate([b for _, b, _ in self.blocks]).astype(np.int64)

    def matrix(self, total_rows: int) -> np.ndarray:
        """(total_rows, width) float64, each column contiguous in memory (Fortran order: the table's columns are
        single signals, read whole many times over); rows without this key are NaN.

        When every block decoded in place sits at its own row in the target (:class:`_Targets`), the target is the
        result: the other blocks are copied in at their rows (indices no block wrote in place, since rows do not
        overlap) and the rows no block has are set to NaN."""
        width = max((b.shape[1] if b.ndim == 2 else 1) for _, b, _ in self.blocks)
        complete = self._back_to_back(total_rows, width)
        target = self.target
        in_target = (target is not None and target.shape[0] == width and total_rows <= target.shape[1]
                     and all(index is None or index == row for row, _, index in self.blocks))
        if in_target:
            out = target[:, :total_rows]
            if not complete:
                self._fill_missing(out)
        else:
            out = np.empty((width, total_rows)) if complete else np.full((width, total_rows), np.nan)
        for row, block, index in self.blocks:
            if index is None or not in_target:
                block = block.reshape(len(block), -1)
                out[:block.shape[1], row:row + len(block)] = block.T
        return out.T

    def _fill_missing(self, out: np.ndarray) -> None:
        """NaN in ``out`` ((width, rows)) wherever no block has a value: rows without a block, and the elements a
        narrower block lacks."""
        missing = np.ones(out.shape[1], dtype=bool)
        for row, block, _index in self.blocks:
            missing[row:row + len(block)] = False
            block_width = block.shape[1] if block.ndim == 2 else 1
            out[block_width:, row:row + len(block)] = np.nan
        out[:, missing] = np.nan


def _numeric_block(values: list) -> np.ndarray | None:
    """``values`` (one per row: numbers, or lists of numbers) as a (k,) or (k, width) array; None if they are
    not numeric. Ragged lists are padded with NaN, missing values (None) are NaN."""
    try:
        block = np.asarray(values)
    except ValueError:   # ragged lists
        block = None
    if block is not None and block.dtype.kind in "iufb" and block.ndim in (1, 2):
        if block.dtype.kind == "i":
            return block.astype(np.int64, copy=False)
        if block.ndim == 2 and block.shape[1] == 0:
            return None
        return block.astype(np.float64, copy=False)
    rows = []
    for value in values:
        if isinstance(value, (int, float)):
            rows.append([float(value)])
        elif isinstance(value, list) and all(isinstance(v, (int, float)) for v in value):
            rows.append([float(v) for v in value])
        elif value is None:
            rows.append([])
        else:
            return None   # strings, nested lists, maps: not a numeric column
    width = max((len(r) for r in rows), default=0)
    if width == 0:
        return None
    out = np.full((len(rows), width), np.nan)
    for i, row in enumerate(rows):
        out[i, :len(row)] = row
    vector = any(isinstance(v, list) for v in values)
    return out if vector else out[:, 0]


def _flatten_dict(prefix: str, value: dict, out: dict[str, Any]) -> None:
    for key, item in value.items():
        name = f"{prefix}.{key}"
        if isinstance(item, dict):
            _flatten_dict(name, item, out)
        else:
            out[name] = item


class _TableBuilder:
    """Builds a :class:`Table` from decoded payloads, a batch of messages at a time (numpy per key and batch)."""

    def __init__(self, topic: str, keys: set[str] | None = None, targets: _Targets | None = None,
                 first_index: int = 0, indices: int = 0):
        self.topic = topic
        self.keys = keys   # payload keys to keep (None: all); name lists are always kept
        #: where the decode writes numbers in place: this builder's row r at index first_index + r of the
        #: targets' arrays, for r < indices (the indices it owns)
        self.targets, self.first_index, self.indices = targets, first_index, indices
        self.rows = 0
        self.columns: dict[str, _Column] = {}
        self.text: dict[str, list[str]] = {}
        self.names: dict[str, list[str]] = {}
        self.log_time: list[np.ndarray] = []
        self.stamp_ns: list[np.ndarray] = []
        self.sample_ns: list[np.ndarray] = []

    def wanted(self, key: str) -> bool:
        return (self.keys is None or key in self.keys or key in _ALL_NAME_KEYS
                or (key == "actuated" and PASSIVE_ONLY_KEY in self.keys))

    def _text(self, key: str, row: int, values: list[str]) -> None:
        column = self.text.setdefault(key, [])
        column.extend([""] * (row - len(column)))
        column.extend(values)

    def _add_values(self, key: str, row: int, values: list) -> None:
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, dict):
            flat = []
            for value in values:
                out: dict[str, Any] = {}
                if isinstance(value, dict):
                    _flatten_dict(key, value, out)
                flat.append(out)
            for sub in dict.fromkeys(k for d in flat for k in d):
                self._add_values(sub, row, [d.get(sub) for d in flat])
        elif isinstance(sample, str):
            self._text(key, row, [v if isinstance(v, str) else "" for v in values])
        elif isinstance(sample, list) and sample and isinstance(sample[0], str):
            self.names[key] = next(v for v in reversed(values) if isinstance(v, list) and v)
        elif sample is not None:
            block = _numeric_block(values)
            if block is not None:
                self.columns.setdefault(key, _Column()).add(row, block)

    def add_batch(self, log_times: list[int], publish_times: list[int], payloads: list[dict]) -> None:
        if self.topic == TOPIC_HW_TELEMETRY:
            self._add_sample_batch(log_times, payloads)
            return
        row = self.rows
        for key in dict.fromkeys(k for p in payloads for k in p):
            if key not in _TIME_KEYS and self.wanted(key):
                self._add_values(key, row, [p.get(key) for p in payloads])
        stamps = [p.get("stamp_ns") for p in payloads]
        stamps = [s if type(s) is int else pt for s, pt in zip(stamps, publish_times)]
        self.log_time.append(np.asarray(log_times, dtype=np.int64))
        self.stamp_ns.append(np.asarray(stamps, dtype=np.int64))
        self.sample_ns.append(self.stamp_ns[-1])
        self.rows += len(payloads)

    def destinations(self, shape: Template, messages: int) -> dict[str, np.ndarray]:
        """Where :func:`~hil.recording.template_decode.read_columns` writes the float numbers of the next
        ``messages`` messages of ``shape`` (their next rows): per wanted key, the slice of its target array those rows
        have, shaped as the key's numbers; empty where the rows would pass the indices this builder owns. In a
        telemetry frame, only the keys with one number or row per sample (what :meth:`add_sample_columns` stacks)."""
        if self.targets is None:
            return {}
        samples = 1
        if self.topic == TOPIC_HW_TELEMETRY:
            if not _sample_clocks(shape):
                return {}
            samples = shape.numbers["device_us"][1][0]
        rows = messages * samples
        if self.rows + rows > self.indices:
            return {}
        start = self.first_index + self.rows
        out = {}
        for key in shape.floats:
            array_shape = shape.numbers[key][1]
            if key in _TIME_KEYS or not self.wanted(key):
                continue
            if self.topic == TOPIC_HW_TELEMETRY:
                if not array_shape or array_shape[0] != samples:
                    continue
                row_shape = array_shape[1:]
            else:
                row_shape = array_shape
            target = self.targets.array(key, row_shape[0] if row_shape else 1)
            if target is None:
                continue
            place = target[:, start:start + rows].T       # (rows, width), each column contiguous
            out[key] = place.reshape((messages,) + array_shape, copy=False)   # a view: the writes land in place
        return out

    def _add_placed(self, key: str, row: int, block: np.ndarray, placed: dict[str, np.ndarray]) -> None:
        """Add a block of ``key`` at ``row``; one :meth:`destinations` gave is noted as in place."""
        column = self.columns.setdefault(key, _Column())
        if key in placed:
            column.target = self.targets.arrays[key]
            column.add(row, block, self.first_index + row)
        else:
            column.add(row, block)

    def add_columns(self, log_times: list[int], publish_times: list[int], shape: Template,
                    columns: dict[str, Any], placed: dict[str, np.ndarray]) -> None:
        """What :meth:`add_batch` makes of a batch of payloads of one ``shape``, from their columns
        (:func:`hil.recording.template_decode.read_columns`, those of ``placed`` written in place, see
        :meth:`destinations`): numbers as numpy blocks, other values repeated."""
        row, count = self.rows, len(log_times)
        for key in shape.keys:
            if key in _TIME_KEYS or not self.wanted(key):
                continue
            if key in shape.numbers:
                self._add_placed(key, row, columns[key], placed)
            else:
                self._add_values(key, row, [columns[key]] * count)
        stamps = columns.get("stamp_ns")
        if not (isinstance(stamps, np.ndarray) and stamps.dtype.kind == "i"):
            stamps = np.asarray(publish_times, dtype=np.int64)
        self.log_time.append(np.asarray(log_times, dtype=np.int64))
        self.stamp_ns.append(stamps)
        self.sample_ns.append(stamps)
        self.rows += count

    def _add_sample_batch(self, log_times: list[int], payloads: list[dict]) -> None:
        """Telemetry frames: one row per device sample. Per-sample keys (matrices with one row per sample,
        arrays with one value per sample) are stacked; per-frame scalars and strings are repeated."""
        frames = [(lt, p) for lt, p in zip(log_times, payloads)
                  if isinstance(p.get("device_us"), list) and p["device_us"]]
        if not frames:
            return
        counts = np.array([len(p["device_us"]) for _, p in frames])
        try:
            device_us = np.asarray(list(chain.from_iterable(p["device_us"] for _, p in frames)), dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            return   # not integer device times: no sample series
        ends = np.cumsum(counts)
        starts = self.rows + ends - counts   # first row of each frame
        back_ns = ((np.repeat(device_us[ends - 1], counts) - device_us) % _UINT32) * 1000
        host_ns = np.repeat(np.asarray([p.get("host_ns", p.get("stamp_ns", lt)) for lt, p in frames],
                                       dtype=np.int64), counts)
        for key in dict.fromkeys(k for _, p in frames for k in p):
            if key not in _TIME_KEYS and self.wanted(key):
                self._add_frame_values(key, [p.get(key) for _, p in frames], counts, starts)
        stamps = np.asarray([p.get("stamp_ns", 0) for _, p in frames], dtype=np.int64)
        self._add_sample_clocks(np.asarray([lt for lt, _ in frames], dtype=np.int64), stamps, host_ns, back_ns,
                                counts)

    def _add_frame_values(self, key: str, values: list, counts: np.ndarray, starts: np.ndarray) -> None:
        """One payload key of telemetry frames (``values``: one per frame of ``counts`` samples starting at rows
        ``starts``): name lists kept, per-sample values stacked, per-frame scalars and strings repeated."""
        row = self.rows
        sample = next((v for v in values if v is not None), None)
        if isinstance(sample, list) and sample and isinstance(sample[0], str):
            self.names[key] = sample
        elif isinstance(sample, list):
            per_sample = [isinstance(v, list) and len(v) == n for v, n in zip(values, counts)]
            if all(per_sample):
                block = _numeric_block(list(chain.from_iterable(values)))
                if block is not None:
                    self.columns.setdefault(key, _Column()).add(row, block)
            else:   # some frames do not carry one entry per sample: take the frames that do, one by one
                for v, ok, start in zip(values, per_sample, starts):
                    block = _numeric_block(v) if ok else None
                    if block is not None:
                        self.columns.setdefault(key, _Column()).add(int(start), block)
        elif isinstance(sample, (int, float)):
            block = _numeric_block(values)
            if block is not None and block.ndim == 1:
                self.columns.setdefault(key, _Column()).add(row, np.repeat(block, counts))
        elif isinstance(sample, str):
            self._text(key, row, [v if isinstance(v, str) else ""
                                  for v, n in zip(values, counts) for _ in range(n)])

    def _add_sample_clocks(self, log_times: np.ndarray, stamps: np.ndarray, host_ns: np.ndarray,
                           back_ns: np.ndarray, counts: np.ndarray) -> None:
        """The time columns of telemetry frames (per frame: ``log_times``, ``stamps``; per sample: ``host_ns``,
        ``back_ns``, all ns) and the rows they add."""
        self.log_time.append(np.repeat(log_times, counts) - back_ns)
        self.stamp_ns.append(np.repeat(stamps, counts))
        self.sample_ns.append(host_ns - back_ns)
        self.rows += int(counts.sum())

    def add_sample_columns(self, log_times: list[int], shape: Template, columns: dict[str, Any],
                           placed: dict[str, np.ndarray]) -> bool:
        """What :meth:`_add_sample_batch` makes of telemetry frames of one ``shape``, from their columns (those of
        ``placed`` written in place, see :meth:`destinations`); False (nothing added) unless the frames carry
        integer ``device_us`` lists and integer ``host_ns`` and ``stamp_ns`` (the clocks the rows are placed
        with)."""
        if not _sample_clocks(shape):
            return False
        device_us, host, stamps = (columns[key] for key in _SAMPLE_CLOCKS)
        frames, samples = device_us.shape
        counts = np.full(frames, samples)
        starts = self.rows + np.arange(frames) * samples
        back_ns = (((device_us[:, -1:] - device_us) % _UINT32) * 1000).reshape(-1)
        for key in shape.keys:
            if key in _TIME_KEYS or not self.wanted(key):
                continue
            values = columns[key]
            if key not in shape.numbers:
                self._add_frame_values(key, [values] * frames, counts, starts)
            elif values.ndim == 1:
                self.columns.setdefault(key, _Column()).add(self.rows, np.repeat(values, counts))
            elif values.shape[1] == samples:   # one number or one row per sample
                self._add_placed(key, self.rows, values.reshape((-1,) + values.shape[2:]), placed)
        self._add_sample_clocks(np.asarray(log_times, dtype=np.int64), stamps, np.repeat(host, counts), back_ns,
                                counts)
        return True

    def absorb(self, other: "_TableBuilder") -> None:
        """Append the rows of ``other`` (the next range of messages of the same topic) after these."""
        offset = self.rows
        for key, column in other.columns.items():
            mine = self.columns.setdefault(key, _Column())
            mine.target = mine.target if column.target is None else column.target
            for row, block, index in column.blocks:
                mine.add(row + offset, block, index)
        for key, values in other.text.items():
            mine_text = self.text.setdefault(key, [])
            mine_text.extend([""] * (offset - len(mine_text)))
            mine_text.extend(values)
        self.names.update(other.names)
        self.log_time += other.log_time
        self.stamp_ns += other.stamp_ns
        self.sample_ns += other.sample_ns
        self.rows += other.rows

    def _passive_names(self, joint_names: list[str]) -> list[str] | None:
        """The names of the passive joints (``strain`` has one element per passive joint), from the
        ``actuated`` flags that ride with ``joint_names``."""
        column = self.columns.get("actuated")
        if column is None:
            return None
        flags = column.matrix(self.rows)
        known = flags[~np.isnan(flags).any(axis=1)]
        if not len(known) or known.shape[1] != len(joint_names):
            return None
        return [name for name, actuated in zip(joint_names, known[-1]) if not actuated]

    def build(self, fallback_names: dict[str, list[str]], origin_ns: int) -> Table:
        table = Table(self.topic)
        empty = np.zeros(0, dtype=np.int64)
        table.columns["log_time"] = np.concatenate(self.log_time) if self.log_time else empty
        table.columns["stamp_ns"] = np.concatenate(self.stamp_ns) if self.stamp_ns else empty
        sample_ns = np.concatenate(self.sample_ns) if self.sample_ns else empty
        if self.topic == TOPIC_HW_TELEMETRY:
            table.columns["sample_ns"] = sample_ns
        table.columns["time_s"] = (sample_ns - origin_ns) * 1e-9
        name_keys = NAME_KEYS.get(self.topic, {})
        for key, column in self.columns.items():
            if not column.vector:
                integers = column.integers(self.rows)
                table.columns[key] = integers if integers is not None else column.matrix(self.rows)[:, 0]
                table.groups[key] = [key]
                continue
            matrix = column.matrix(self.rows)
            names = FIXED_NAMES.get(key)
            name_key = name_keys.get(key)
            if names is None and name_key is not None:
                names = self.names.get(name_key) or fallback_names.get(name_key)
            if key == PASSIVE_ONLY_KEY and names is not None and len(names) != matrix.shape[1]:
                names = self._passive_names(names)
            if names is None or len(names) != matrix.shape[1]:
                names = [str(i) for i in range(matrix.shape[1])]
            table.element_names[key] = list(names)
            table.groups[key] = []
            for i, name in enumerate(names):
                name_column = f"{key}_{name}"
                table.columns[name_column] = matrix[:, i]
                table.groups[key].append(name_column)
        if "t" not in table.columns:
            table.columns["t"] = np.full(self.rows, np.nan)
        for values in self.text.values():
            values.extend([""] * (self.rows - len(values)))
        table.text = self.text
        return table


#: the telemetry frame's clocks its samples' rows are placed with
_SAMPLE_CLOCKS = ("device_us", "host_ns", "stamp_ns")


def _sample_clocks(shape: Template) -> bool:
    """Whether telemetry frames of ``shape`` carry the clocks of their samples: a list of integers ``device_us``,
    one integer each ``host_ns`` and ``stamp_ns``."""
    numbers = shape.numbers
    return (all(key in numbers and key not in shape.floats for key in _SAMPLE_CLOCKS)
            and len(numbers["device_us"][1]) == 1 and numbers["host_ns"][1] == () and numbers["stamp_ns"][1] == ())


def decode_payload(data: bytes) -> dict | None:
    """A recorded payload as a map, or None if it is not one (counted by the caller)."""
    try:
        payload = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception:  # msgpack raises several unrelated types on bad bytes
        return None
    return payload if isinstance(payload, dict) else None


@dataclass
class Tables:
    """All topic tables of a recording, with the common time origin (ns, publisher wall clock)."""
    tables: dict[str, Table]
    origin_ns: int
    malformed: dict[str, int]


def build_tables(recording: RawRecording, topics: Iterable[str] | None = None, progress: bool = False,
                 keys: dict[str, set[str]] | None = None, max_messages: int | None = None) -> Tables:
    """Decode the messages of the chosen topics of ``recording`` into :class:`Table` s.

    ``keys``: per topic, the payload keys to turn into columns (other topics and keys: all); ``max_messages``:
    only the first messages of each topic (a cheap look at the names before the full decode).
    """
    # the project's topics are msgpack; the Foxglove channels beside them (JSON, hil/foxglove) are not time series
    wanted = [t for t in recording.messages if recording.encodings.get(t, MSGPACK) == MSGPACK] if topics is None \
        else [t for t in topics if t in recording.messages]
    if not wanted:
        return Tables({}, 0, {})
    origin_candidates = [messages[0][1] for t, messages in recording.messages.items() if messages and messages[0][1]]
    origin_ns = min(origin_candidates) if origin_candidates else 0
    builders: dict[str, _TableBuilder] = {}
    malformed: dict[str, int] = {}
    order = sorted(wanted, key=lambda t: t in NAME_FALLBACK_TOPIC)  # fallback providers first
    if any(t in NAME_FALLBACK_TOPIC for t in wanted):
        for provider in NAME_FALLBACK_TOPIC.values():
            if provider not in order and provider in recording.messages:
                order.insert(0, provider)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=sum(len(recording.messages[t][:max_messages]) for t in order), unit="msg", desc="decode",
                   leave=False)
    with gc_paused():
        _fill(order, recording, builders, malformed, bar, keys or {}, max_messages)
    if bar is not None:
        bar.close()
    tables = {}
    for topic in order:
        fallback = builders[NAME_FALLBACK_TOPIC[topic]].names if NAME_FALLBACK_TOPIC.get(topic) in builders else {}
        tables[topic] = builders[topic].build(fallback, origin_ns)
    return Tables({t: tables[t] for t in wanted}, origin_ns, malformed)


def _fill_topic(builder: _TableBuilder, messages: list, bar=None) -> tuple[_TableBuilder, int]:
    """Decode messages of the builder's topic into it; returns it and the number of malformed payloads."""
    malformed = 0
    for start in range(0, len(messages), _BATCH):
        malformed += _fill_batch(builder, messages[start:start + _BATCH])
        if bar is not None:
            bar.update(min(_BATCH, len(messages) - start))
    return builder, malformed


#: shapes found per batch, and as many messages without one tried; the messages none of them matches are decoded one
#: by one (a topic whose payloads keep changing shape, or have one the columnar decode does not read, costs a few
#: templates per batch, not one each). The two budgets are apart because a real run's start spends both: a device
#: clock crossing 2^16 us puts two integer widths in one frame's list (no shape) in the same first batch where seq
#: outgrows a fixint and a byte (three shapes); one budget for both sent the rest of that batch one by one.
SHAPES_PER_BATCH = 4
#: payload keys the clocks of the rows are made of, decoded whatever keys are asked for
_CLOCK_KEYS = frozenset(("stamp_ns", "device_us", "host_ns"))


@dataclass
class _Shaped:
    """Which messages of a batch have one shape: ``matches`` (batch,) bool; ``row`` (batch,) their row in ``rows``
    ((candidates, length) uint8: the batch's messages of the shape's length, in order)."""
    shape: Template
    rows: np.ndarray
    matches: np.ndarray
    row: np.ndarray


def _fill_batch(builder: _TableBuilder, batch: list) -> int:
    """Add ``batch`` (messages) to ``builder``; returns the number of malformed payloads.

    Each run of consecutive messages that share a shape is decoded at once into columns
    (:mod:`hil.recording.template_decode`): the first message not matched by a shape found so far gives a new one
    (up to SHAPES_PER_BATCH), whose matches are found among the whole batch at once. Every other message is decoded
    one by one (the reference path, which gives the same table)."""
    telemetry = builder.topic == TOPIC_HW_TELEMETRY
    lengths = np.array([len(message[2]) for message in batch], dtype=np.int64)
    shapes: list[_Shaped] = []
    one_by_one: list = []
    malformed = failed = position = 0
    while position < len(batch):
        shaped = next((s for s in shapes if s.matches[position]), None)
        if shaped is None and len(shapes) < SHAPES_PER_BATCH and failed < SHAPES_PER_BATCH:
            shaped = _shape_at(batch, lengths, position, telemetry)
            if shaped is not None:
                shapes.append(shaped)
            else:
                failed += 1
        if shaped is None:
            one_by_one.append(batch[position])
            position += 1
            continue
        end = position + _run_length(shaped.matches[position:])
        run = batch[position:end]
        first = shaped.row[position]
        malformed += _fill_one_by_one(builder, one_by_one)   # their rows come first
        one_by_one = []
        wanted = frozenset(key for key in shaped.shape.numbers if key in _CLOCK_KEYS or builder.wanted(key))
        placed = builder.destinations(shaped.shape, len(run))
        columns = read_columns(shaped.shape, shaped.rows[first:first + len(run)], wanted, placed)
        if telemetry:
            if not builder.add_sample_columns([m[0] for m in run], shaped.shape, columns, placed):
                one_by_one = list(run)   # no integer clocks to place the samples with: the reference path
        else:
            builder.add_columns([m[0] for m in run], [m[1] for m in run], shaped.shape, columns, placed)
        position = end
    return malformed + _fill_one_by_one(builder, one_by_one)


def _run_length(matches: np.ndarray) -> int:
    """How many leading entries of ``matches`` (n,) bool are True."""
    misses = np.flatnonzero(~matches)
    return int(misses[0]) if len(misses) else len(matches)


def _shape_at(batch: list, lengths: np.ndarray, position: int, telemetry: bool) -> _Shaped | None:
    """The shape of message ``position`` of ``batch`` and the messages from there on that have it; None when its
    payload is malformed or has no shape the columnar decode reads."""
    data = batch[position][2]
    payload = decode_payload(data)
    shape = template(data, payload, matrices=telemetry) if payload is not None else None
    if shape is None:
        return None
    length = len(shape.data)
    candidates = position + np.flatnonzero(lengths[position:] == length)
    rows = np.frombuffer(b"".join([batch[i][2] for i in candidates.tolist()]), dtype=np.uint8)
    rows = rows.reshape(len(candidates), length)
    matches = np.zeros(len(batch), dtype=bool)
    matches[candidates] = matching(shape, rows)
    row = np.full(len(batch), -1, dtype=np.int64)
    row[candidates] = np.arange(len(candidates))
    return _Shaped(shape, rows, matches, row)


def _fill_one_by_one(builder: _TableBuilder, messages: list) -> int:
    """Decode ``messages`` one by one (the reference path) into ``builder``; returns the number of malformed ones."""
    if not messages:
        return 0
    log_times, publish_times, payloads = [], [], []
    for log_time, publish_time, data in messages:
        payload = decode_payload(data)
        if payload is None:
            continue
        log_times.append(log_time)
        publish_times.append(publish_time)
        payloads.append(payload)
    builder.add_batch(log_times, publish_times, payloads)
    return len(messages) - len(payloads)


def _fill(order, recording, builders, malformed, bar, keys, max_messages) -> None:
    """Decode every topic of ``order``. Large recordings are decoded in threads, in ranges of messages (numpy does
    the bulk of the columnar decode without holding the interpreter); each topic's ranges are joined in order."""
    from concurrent.futures import ThreadPoolExecutor

    sizes = {topic: len(recording.messages[topic][:max_messages]) for topic in order}
    targets = {topic: _targets(topic, recording.messages[topic], sizes[topic]) for topic in order}
    total = sum(sizes.values())
    workers = min(os.cpu_count() or 1, total // PARALLEL_MIN_MESSAGES)
    if workers < 2:
        for topic in order:
            builder = _range_builder(topic, keys.get(topic), targets[topic], 0, sizes[topic])
            builders[topic], bad = _fill_topic(builder, recording.messages[topic][:max_messages], bar)
            if bad:
                malformed[topic] = bad
        return
    step = max(_BATCH, -(-total // (2 * workers)))   # about two ranges per worker
    tasks = [(topic, start, min(start + step, sizes[topic])) for topic in order
             for start in range(0, sizes[topic], step)]

    def fill_range(task: tuple[str, int, int]) -> tuple[_TableBuilder, int]:
        topic, start, stop = task
        builder = _range_builder(topic, keys.get(topic), targets[topic], start, stop)
        return _fill_topic(builder, recording.messages[topic][start:stop])

    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(fill_range, tasks))
    for (topic, start, stop), (part, bad) in zip(tasks, parts):
        if topic not in builders:
            builders[topic] = _TableBuilder(topic, keys.get(topic))
        builders[topic].absorb(part)
        if bad:
            malformed[topic] = malformed.get(topic, 0) + bad
        if bar is not None:
            bar.update(stop - start)


def _targets(topic: str, messages: list, count: int) -> _Targets | None:
    """The final columns of the first ``count`` of a topic's ``messages``: one row per message, or per sample of a
    telemetry frame (as many as the first frame holds, the device's fixed frame length); None when that first
    frame holds none."""
    rows_per_message = 1
    if topic == TOPIC_HW_TELEMETRY:
        first = decode_payload(messages[0][2]) if messages else None
        device_us = first.get("device_us") if first is not None else None
        rows_per_message = len(device_us) if isinstance(device_us, list) else 0
    return _Targets(count * rows_per_message, rows_per_message) if rows_per_message else None


def _range_builder(topic: str, keys: set[str] | None, targets: _Targets | None, start: int,
                   stop: int) -> _TableBuilder:
    """A builder of messages ``start`` to ``stop`` of a topic, owning their rows' indices in ``targets``."""
    if targets is None:
        return _TableBuilder(topic, keys)
    per = targets.rows_per_message
    return _TableBuilder(topic, keys, targets, start * per, (stop - start) * per)
