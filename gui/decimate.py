"""Peak decimation of the dashboard's windows, done incrementally: each frame reduces only the samples that
arrived since the previous one.

A stream's samples are numbered from the first ever appended to its ring (:attr:`gui.ringbuffer.RingBuffer.total`);
bins are runs of ``per_bin`` consecutive sample numbers, aligned on multiples of ``per_bin``. A bin whose samples
are all known never changes, so its min/max envelope is computed once and kept while it stays in the window;
per frame only the new complete bins and the two partial bins at the window's ends are computed.
:func:`aligned_peak_decimate` is the reference: the same envelope computed from scratch.
"""
from __future__ import annotations

import numpy as np

#: bins of up to this many samples are reduced by elementwise passes over whole bins, which beats a min/max along
#: a short bin axis (4x in numpy); longer bins use the axis reduction
ELEMENTWISE_MAX_BIN = 32


def aligned_peak_decimate(times: np.ndarray, values: np.ndarray, first_index: int, per_bin: int
                          ) -> tuple[np.ndarray, np.ndarray]:
    """The reference envelope: ``times (k,)``, ``values (k, n)`` whose first sample has number ``first_index``,
    cut at every sample number that is a multiple of ``per_bin``; each piece becomes two points at its first
    time, its minimum then its maximum (per channel). Returns ``(2 m,)``, ``(2 m, n)``."""
    count = len(times)
    first_cut = -(-first_index // per_bin) * per_bin - first_index
    starts = [0] + [s for s in range(first_cut, count, per_bin) if s > 0]
    ends = starts[1:] + [count]
    out_times = np.repeat(times[starts], 2)
    out_values = np.empty((2 * len(starts), values.shape[1]), order="F")
    for k, (start, end) in enumerate(zip(starts, ends)):
        out_values[2 * k] = values[start:end].min(axis=0)
        out_values[2 * k + 1] = values[start:end].max(axis=0)
    return out_times, out_values


def bin_envelopes(values: np.ndarray, per_bin: int) -> tuple[np.ndarray, np.ndarray]:
    """Min and max of every run of ``per_bin`` rows of ``values (m * per_bin, n)``: ``(m, n)``, ``(m, n)``."""
    shaped = values.reshape(-1, per_bin, values.shape[1])
    if per_bin > ELEMENTWISE_MAX_BIN:
        return shaped.min(axis=1), shaped.max(axis=1)
    low, high = shaped[:, 0, :].copy(), shaped[:, 0, :].copy()
    for offset in range(1, per_bin):
        np.minimum(low, shaped[:, offset, :], out=low)
        np.maximum(high, shaped[:, offset, :], out=high)
    return low, high


def choose_per_bin(count: int, bins: int, previous: int | None) -> int:
    """Samples per bin for ``count`` samples in at most ``bins`` bins (+2 partial ones); the previous size is kept
    while it stays within a quarter above the least possible, so a window whose sample count jitters by a few
    samples does not lose its cached bins every frame."""
    needed = -(-count // bins)
    if previous is not None and needed <= previous <= needed + max(1, needed // 4):
        return previous
    return needed


class StreamDecimator:
    """The cached complete bins of one stream: bin numbers ``[first_bin, first_bin + len(times))``, their first
    times ``(m,)`` s and their envelopes ``(m, n)``."""

    def __init__(self):
        self.buffer = None
        self.per_bin = None
        self.first_bin = 0
        self.times = np.empty(0)
        self.low = self.high = np.empty((0, 0))

    def _reset(self, buffer, per_bin: int, first_bin: int) -> None:
        self.buffer, self.per_bin, self.first_bin = buffer, per_bin, first_bin
        self.times = np.empty(0)
        self.low = self.high = np.empty((0, buffer.n_channels))

    def window(self, buffer, t_start: float, t_end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
        """The envelope of ``buffer``'s samples in ``[t_start, t_end]`` (one earlier sample kept, as
        :meth:`RingBuffer.window`), equal to :func:`aligned_peak_decimate` of them; a window of at most
        ``2 * bins`` samples is returned as it is (copied)."""
        stored_times, stored_values = buffer.times(), buffer.values()
        base = buffer.total - len(stored_times)                      # number of the oldest stored sample
        first = max(int(np.searchsorted(stored_times, t_start, side="left")) - 1, 0)
        last = int(np.searchsorted(stored_times, t_end, side="right"))
        count = last - first
        if bins < 1 or count <= 2 * bins:
            return stored_times[first:last].copy(), stored_values[first:last].copy()
        per_bin = choose_per_bin(count, bins, self.per_bin if self.buffer is buffer else None)
        begin, end = base + first, base + last                       # sample numbers of the window, [begin, end)
        full_first, full_end = -(-begin // per_bin), end // per_bin  # complete bins [full_first, full_end)
        if full_first >= full_end:
            return aligned_peak_decimate(stored_times[first:last], stored_values[first:last], begin, per_bin)
        cached_end = self.first_bin + len(self.times)
        if (self.buffer is not buffer or self.per_bin != per_bin or self.low.shape[1] != buffer.n_channels
                or cached_end < full_first or self.first_bin > full_first):
            self._reset(buffer, per_bin, full_first)
            cached_end = full_first
        drop = full_first - self.first_bin
        if cached_end < full_end:
            rows = slice(cached_end * per_bin - base, full_end * per_bin - base)
            low, high = bin_envelopes(stored_values[rows], per_bin)
            self.times = np.concatenate([self.times[drop:], stored_times[rows][::per_bin]])
            self.low = np.concatenate([self.low[drop:], low])
            self.high = np.concatenate([self.high[drop:], high])
        else:       # the window may also end earlier than before (a pause, a replay seek): trim both ends
            keep = slice(drop, full_end - self.first_bin)
            self.times, self.low, self.high = self.times[keep], self.low[keep], self.high[keep]
        self.first_bin = full_first
        head = slice(first, full_first * per_bin - base)
        tail = slice(full_end * per_bin - base, last)
        pieces = [(stored_times[part.start], stored_values[part].min(axis=0), stored_values[part].max(axis=0))
                  for part in (head, tail) if part.stop > part.start]
        has_head = head.stop > head.start
        m = len(self.times) + len(pieces)
        out_times = np.empty(2 * m)
        out_values = np.empty((2 * m, buffer.n_channels), order="F")
        offset = 1 if has_head else 0
        out_times[2 * offset:2 * (offset + len(self.times)):2] = self.times
        out_times[2 * offset + 1:2 * (offset + len(self.times)):2] = self.times
        out_values[2 * offset:2 * (offset + len(self.times)):2] = self.low
        out_values[2 * offset + 1:2 * (offset + len(self.times)):2] = self.high
        if has_head:
            out_times[0:2], out_values[0], out_values[1] = pieces[0][0], pieces[0][1], pieces[0][2]
        if len(pieces) > int(has_head):
            out_times[-2:], out_values[-2], out_values[-1] = pieces[-1][0], pieces[-1][1], pieces[-1][2]
        return out_times, out_values


class WindowDecimator:
    """One :class:`StreamDecimator` per stream of a :class:`gui.ringbuffer.StreamStore`."""

    def __init__(self):
        self.streams: dict[str, StreamDecimator] = {}

    def window(self, key: str, buffer, t_start: float, t_end: float, bins: int) -> tuple[np.ndarray, np.ndarray]:
        decimator = self.streams.get(key)
        if decimator is None:
            decimator = self.streams[key] = StreamDecimator()
        return decimator.window(buffer, t_start, t_end, bins)
