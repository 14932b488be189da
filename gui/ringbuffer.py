"""Fixed-capacity numpy ring buffers for the dashboard's time series (GUI thread only, no Qt).

A :class:`RingBuffer` holds the last ``capacity`` samples of ``n_channels`` signals sharing one time axis.
Every sample is written twice, at ``i`` and ``i + capacity`` of a ``2 * capacity`` array, so the newest
``len`` samples are always one contiguous slice: plotting takes views, never concatenates or copies.
"""
from __future__ import annotations

import numpy as np


class RingBuffer:
    """The newest ``capacity`` samples of ``n_channels`` signals.

    Storage: ``_times (2 * capacity,)`` s, ``_values (2 * capacity, n_channels)`` in the channels' units.
    """

    def __init__(self, capacity: int, n_channels: int):
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, got {capacity}")
        if n_channels < 0:
            raise ValueError(f"n_channels must be non-negative, got {n_channels}")
        self.capacity = int(capacity)
        self.n_channels = int(n_channels)
        self._times = np.zeros(2 * self.capacity)
        self._values = np.zeros((2 * self.capacity, self.n_channels))
        self._next = 0      # index in [0, capacity) where the next sample goes
        self._length = 0    # number of valid samples, <= capacity
        self.total = 0      # samples ever appended (for counters and tests)

    def __len__(self) -> int:
        return self._length

    def clear(self) -> None:
        self._next = 0
        self._length = 0

    def append(self, times, values) -> None:
        """Append ``k`` samples: ``times (k,)`` s, ``values (k, n_channels)`` (or ``(n_channels,)`` for one)."""
        times = np.asarray(times, dtype=float).reshape(-1)
        values = np.asarray(values, dtype=float).reshape(len(times), self.n_channels)
        count = len(times)
        self.total += count
        if count > self.capacity:
            times, values, count = times[-self.capacity:], values[-self.capacity:], self.capacity
        if count == 0:
            return
        first = self._next
        stop = first + count
        if stop <= self.capacity:
            self._write(slice(first, stop), times, values)
        else:
            split = self.capacity - first
            self._write(slice(first, self.capacity), times[:split], values[:split])
            self._write(slice(0, count - split), times[split:], values[split:])
        self._next = stop % self.capacity
        self._length = min(self.capacity, self._length + count)

    def _write(self, where: slice, times: np.ndarray, values: np.ndarray) -> None:
        shifted = slice(where.start + self.capacity, where.stop + self.capacity)
        self._times[where] = times
        self._times[shifted] = times
        self._values[where] = values
        self._values[shifted] = values

    def _span(self) -> slice:
        end = self._next + self.capacity
        return slice(end - self._length, end)

    def times(self) -> np.ndarray:
        """Times of the stored samples, oldest first, ``(len,)`` s (a view: copy before keeping it)."""
        return self._times[self._span()]

    def values(self) -> np.ndarray:
        """Values of the stored samples, oldest first, ``(len, n_channels)`` (a view)."""
        return self._values[self._span()]

    def window(self, t_start: float, t_end: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Views of the samples with ``t_start <= t (<= t_end)``, one sample earlier kept so lines reach the edge.

        Times must be non-decreasing within the buffer (they are wall-clock stamps of one publisher).
        """
        times, values = self.times(), self.values()
        first = max(int(np.searchsorted(times, t_start, side="left")) - 1, 0)
        last = len(times) if t_end is None else int(np.searchsorted(times, t_end, side="right"))
        return times[first:last], values[first:last]

    def latest_time(self) -> float | None:
        return None if self._length == 0 else float(self._times[self._next + self.capacity - 1])

    def latest(self) -> np.ndarray | None:
        """The newest sample ``(n_channels,)``, or None when empty."""
        return None if self._length == 0 else self._values[self._next + self.capacity - 1]


class StreamStore:
    """One :class:`RingBuffer` per stream (``sim.tau``, ``hw.load``, ...) with its channel names.

    A stream whose channel names change (a publisher restarted with another robot or rig) starts afresh.
    """

    def __init__(self, capacity: int):
        self.capacity = int(capacity)
        self.buffers: dict[str, RingBuffer] = {}
        self.names: dict[str, tuple[str, ...]] = {}
        self.layout_version = 0   # bumped when a stream appears or changes its channels
        self.generation = 0       # bumped at every append: nothing to redraw while it stays the same

    def append(self, key: str, names: tuple[str, ...], times, values) -> None:
        if self.names.get(key) != tuple(names):
            self.buffers[key] = RingBuffer(self.capacity, len(names))
            self.names[key] = tuple(names)
            self.layout_version += 1
        self.buffers[key].append(times, values)
        self.generation += 1

    def latest_time(self) -> float | None:
        times = [t for t in (b.latest_time() for b in self.buffers.values()) if t is not None]
        return max(times) if times else None

    def clear(self) -> None:
        for buffer in self.buffers.values():
            buffer.clear()
