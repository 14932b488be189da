"""What a frame of the real dashboard window draws (offscreen Qt): the decimated curves keep every pixel column's
extremes, frames drawn incrementally equal the whole window decimated at once, and a frame paints once."""
from __future__ import annotations

import math

import numpy as np
from PyQt5.QtWidgets import QApplication

from gui.decimate import aligned_peak_decimate
from gui.signals import Batch, Chunk
from gui.window import PaintCounter

RATE_HZ = 1000.0
WINDOW_S = 10.0
JOINTS = ("stroke_r", "stroke_l")
#: event-loop passes after a frame at most, until one paints nothing more
MAX_PASSES = 5
DEADLINE_MS = 20_000
#: one-sample spikes of this height (the signal is a unit sine with 0.05 noise), this many per joint
SPIKE = 5.0
SPIKES_PER_JOINT = 20


def torque_batch(times: np.ndarray, values: np.ndarray) -> Batch:
    """``values (k, 2)`` torques of the two actuated joints at ``times (k,)`` s, as the worker hands them over."""
    return Batch(chunks=[Chunk("sim.tau", JOINTS, times, values)], status={}, received={}, gaps={}, restarts={},
                 malformed=0, latency_s={}, last_receipt={}, actuated={name: True for name in JOINTS})


def spiky_signal(count: int, seed: int) -> np.ndarray:
    """``(count, 2)``: noise around a sine with one-sample spikes both ways, at random places."""
    rng = np.random.default_rng(seed)
    t = np.arange(count) / RATE_HZ
    values = np.sin(2 * np.pi * 3.0 * t)[:, None] + 0.05 * rng.standard_normal((count, 2))
    spikes = rng.choice(count, size=2 * SPIKES_PER_JOINT, replace=False)
    values[spikes[:SPIKES_PER_JOINT], 0] += SPIKE
    values[spikes[SPIKES_PER_JOINT:], 1] -= SPIKE
    return values


def feed_in_frames(window, values: np.ndarray, seed: int) -> None:
    """Feed ``values`` in blocks of random sizes, one frame drawn after each (the incremental path)."""
    rng = np.random.default_rng(seed)
    start = 0
    while start < len(values):
        stop = min(len(values), start + int(rng.integers(1, 400)))
        window.on_batch(torque_batch(np.arange(start, stop) / RATE_HZ, values[start:stop]))
        window.refresh_plots()
        start = stop


def drawn(window, joint: str) -> tuple[np.ndarray, np.ndarray]:
    item = next(item for spec, item in window.panels["torque"].curves.values() if spec.channel == joint)
    return item.xData, item.yData


def raw_window(window) -> tuple[np.ndarray, np.ndarray, int]:
    """The samples the last frame showed (one earlier kept), and the number of the first of them."""
    buffer = window.store.buffers["sim.tau"]
    t_end = buffer.latest_time()
    times, values = buffer.window(t_end - window.window_spin.value(), t_end)
    return times, values, buffer.total - len(times)


def test_drawn_curves_keep_the_extremes_of_every_pixel_column(qtbot, make_window):
    window = make_window(window_s=WINDOW_S)
    qtbot.waitUntil(lambda: window.panels["torque"].plot.vb.width() > 100, timeout=DEADLINE_MS)
    values = spiky_signal(int(1.5 * WINDOW_S * RATE_HZ), seed=5)     # the ring wraps, the window scrolls
    feed_in_frames(window, values, seed=6)
    view = window.panels["torque"].plot.vb
    (x_low, x_high), width = view.viewRange()[0], view.width()
    per_bin = window.decimator.streams["sim.tau"].per_bin
    samples_per_column = (x_high - x_low) * RATE_HZ / width
    assert per_bin > 1, "the window must be decimated for this test to mean anything"
    # a bin (min, max at its first time) starts at most this many columns before a sample of it
    reach = math.ceil(per_bin / samples_per_column)
    raw_t, raw_v, _first = raw_window(window)
    inside = raw_t >= x_low
    for column_of_joint, joint in enumerate(JOINTS):
        times, curve = drawn(window, joint)
        assert len(curve) < len(raw_t) / 4
        assert np.isin(curve, raw_v[:, column_of_joint]).all(), "the envelope invents no value"
        raw_columns = np.floor((raw_t[inside] - x_low) / (x_high - x_low) * width).astype(int)
        curve_columns = np.floor((times - x_low) / (x_high - x_low) * width).astype(int)
        checked = 0
        for pixel in np.unique(raw_columns):
            in_pixel = raw_v[inside][raw_columns == pixel, column_of_joint]
            near = curve[(curve_columns >= pixel - reach) & (curve_columns <= pixel)]
            # a bin straddling two columns shows the larger of their extremes: the envelope spans the column's
            assert near.max() >= in_pixel.max() and near.min() <= in_pixel.min(), f"{joint}: column {pixel} lost a peak"
            checked += 1
        assert checked > width / 2
        # and each spike, the largest value around, is drawn exactly, within a bin before its own column
        spikes = np.flatnonzero(inside & (np.abs(raw_v[:, column_of_joint]) > SPIKE / 2))
        assert len(spikes) >= SPIKES_PER_JOINT / 2
        for index in spikes:
            pixel = math.floor((raw_t[index] - x_low) / (x_high - x_low) * width)
            near = curve[(curve_columns >= pixel - reach) & (curve_columns <= pixel)]
            assert raw_v[index, column_of_joint] in near, f"{joint}: the spike at {raw_t[index]:.3f} s is lost"


def test_frames_drawn_incrementally_equal_the_whole_window_decimated_at_once(qtbot, make_window):
    window = make_window(window_s=WINDOW_S)
    qtbot.waitUntil(lambda: window.panels["torque"].plot.vb.width() > 100, timeout=DEADLINE_MS)
    feed_in_frames(window, spiky_signal(int(2.3 * WINDOW_S * RATE_HZ), seed=8), seed=9)
    per_bin = window.decimator.streams["sim.tau"].per_bin
    raw_t, raw_v, first = raw_window(window)
    want_t, want_v = aligned_peak_decimate(raw_t, raw_v, first, per_bin)
    for column, joint in enumerate(JOINTS):
        times, curve = drawn(window, joint)
        np.testing.assert_array_equal(times, want_t)
        np.testing.assert_array_equal(curve, want_v[:, column])


def settle(counter: PaintCounter) -> int:
    """Run the event loop until a pass paints nothing; the paints it took."""
    start = counter.paints
    for _ in range(MAX_PASSES):
        before = counter.paints
        QApplication.processEvents()
        if counter.paints == before:
            break
    return counter.paints - start


def test_a_frame_paints_the_plots_once(qtbot, make_window):
    """pyqtgraph moves its views to a new range while painting; unless the window moves them first, every frame
    is painted twice (the second paint: the whole view again)."""
    window = make_window(window_s=WINDOW_S)
    counter = window.paint_counter
    values = spiky_signal(int(WINDOW_S * RATE_HZ) + 12 * 17, seed=3)   # then 12 frames of 17 samples
    window.on_batch(torque_batch(np.arange(int(WINDOW_S * RATE_HZ)) / RATE_HZ, values[:int(WINDOW_S * RATE_HZ)]))
    window.frame_timer.stop()     # the frames are drawn here, one at a time
    qtbot.waitUntil(lambda: counter.paints > 0, timeout=DEADLINE_MS)
    settle(counter)
    paints = []
    for start in range(int(WINDOW_S * RATE_HZ), len(values), 17):
        window.on_batch(torque_batch(np.arange(start, start + 17) / RATE_HZ, values[start:start + 17]))
        window.refresh_plots()
        paints.append(settle(counter))
    assert paints == [1] * len(paints)


def test_a_window_holding_a_non_finite_value_is_drawn_with_the_line_broken(qtbot, make_window):
    window = make_window(window_s=WINDOW_S)
    values = spiky_signal(3000, seed=4)
    values[1500, 1] = np.nan
    window.on_batch(torque_batch(np.arange(3000) / RATE_HZ, values))
    window.refresh_plots()
    items = {spec.channel: item for spec, item in window.panels["torque"].curves.values()}
    assert items["stroke_r"]._polygon is not None      # finite: the fast polyline
    assert items["stroke_l"]._polygon is None          # NaN: pyqtgraph's path, which breaks the line there
    assert not window.graphics.grab().isNull()
    assert np.isnan(items["stroke_l"].yData).any() and np.isfinite(items["stroke_r"].yData).all()
