"""What a frame of the real dashboard window draws (offscreen Qt): the decimated curves keep every pixel column's
extremes, frames drawn incrementally equal the whole window decimated at once, and a frame paints once."""
from __future__ import annotations

import math

import numpy as np
from PyQt5.QtCore import QPointF
from PyQt5.QtGui import QImage
from PyQt5.QtWidgets import QApplication

import pyqtgraph as pg

from gui.decimate import aligned_peak_decimate
from gui.plots import CurveLayer, TimeAxis
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


def test_the_recorders_timeout_message_leaves_the_plots_alone(qtbot, make_window):
    """No recorder answers here: its timeout message (the endpoint named twice) arrives when the timeout runs out,
    which on a loaded machine is in the middle of the frames of the test above. It must not widen the window: that
    relays out and repaints every plot (three to four paints of one frame, measured)."""
    window = make_window(window_s=WINDOW_S)
    qtbot.waitUntil(lambda: window.paint_counter.paints > 0, timeout=DEADLINE_MS)
    settle(window.paint_counter)
    size, paints = window.size(), window.paint_counter.paints
    qtbot.waitUntil(lambda: "none at" in window.record_label.text(), timeout=DEADLINE_MS)
    for _ in range(MAX_PASSES):     # the relayout and the resize come passes apart (some paint nothing)
        QApplication.processEvents()
    assert window.size() == size
    assert window.paint_counter.paints == paints
    assert window.record_label.toolTip() == window.record_label.text()     # what the cut line does not show


def test_a_window_holding_a_non_finite_value_is_drawn_with_the_line_broken(qtbot, make_window):
    window = make_window(window_s=WINDOW_S)
    values = spiky_signal(3000, seed=4)
    values[1500, 1] = np.nan
    window.on_batch(torque_batch(np.arange(3000) / RATE_HZ, values))
    window.refresh_plots()
    items = {spec.channel: item for spec, item in window.panels["torque"].curves.values()}
    assert items["stroke_r"]._finite                   # finite: drawn by its view's layer
    assert not items["stroke_l"]._finite               # NaN: pyqtgraph's path, which breaks the line there
    assert not window.graphics.grab().isNull()
    assert np.isnan(items["stroke_l"].yData).any() and np.isfinite(items["stroke_r"].yData).all()


def viewport_pixels(window) -> np.ndarray:
    """What the plots' viewport shows, ``(height, width, 3)`` RGB."""
    image = window.graphics.viewport().grab().toImage().convertToFormat(QImage.Format_RGB888)
    raw = np.frombuffer(image.constBits().asstring(image.sizeInBytes()), dtype=np.uint8)
    return raw.reshape(image.height(), image.bytesPerLine())[:, :3 * image.width()].reshape(
        image.height(), image.width(), 3)


def test_the_pixels_drawn_in_every_column_span_the_datas_extremes_there(qtbot, make_window):
    """The rendered picture, not the arrays handed to the curves: grabbed from the real window after frames drawn
    incrementally, each pixel column holding the curve spans the extremes of the samples that fall in it (a bin
    straddling two columns reaches into the next: its envelope is drawn at its first time), and nothing beyond."""
    window = make_window(window_s=WINDOW_S)
    panel = window.panels["torque"]
    qtbot.waitUntil(lambda: panel.plot.vb.width() > 100, timeout=DEADLINE_MS)
    values = spiky_signal(int(1.5 * WINDOW_S * RATE_HZ), seed=11)
    feed_in_frames(window, values[:, :1].repeat(2, axis=1), seed=12)
    window.set_channel_visible("torque:sim.tau:stroke_l", False)    # one curve: its colour is its pixels
    panel.plot.showGrid(x=False, y=False)
    panel.legend.setVisible(False)
    window.refresh_plots(force=True)
    QApplication.processEvents()
    pixels = viewport_pixels(window).astype(int)
    curve = next(item for spec, item in panel.curves.values() if spec.channel == "stroke_r")
    colour = np.array(curve.opts["pen"].color().getRgb()[:3])
    on_curve = np.abs(pixels - colour).sum(axis=2) <= 3               # (height, width): a one-pixel cosmetic pen
    view, graphics = panel.plot.vb, window.graphics

    def to_pixel(t: float, value: float) -> tuple[float, float]:
        point = graphics.mapFromScene(view.mapViewToScene(QPointF(t, value)))
        return point.x(), point.y()

    raw_t, raw_v, _first = raw_window(window)
    (x_low, x_high), (y_low, y_high) = view.viewRange()
    left, top = to_pixel(x_low, y_high)
    right, bottom = to_pixel(x_high, y_low)
    column_of = np.floor(left + (raw_t - x_low) / (x_high - x_low) * (right - left)).astype(int)
    row_of = top + (y_high - raw_v[:, 0]) / (y_high - y_low) * (bottom - top)          # (k,) pixel rows
    per_bin = window.decimator.streams["sim.tau"].per_bin
    reach = math.ceil(per_bin / ((x_high - x_low) * RATE_HZ / (right - left)))       # columns a bin may span
    checked = 0
    for column in range(int(math.ceil(left)) + reach + 1, int(right) - reach - 1):
        drawn_rows = np.flatnonzero(on_curve[int(top):int(bottom) + 1, column]) + int(top)
        here = column_of == column
        if not here.any():
            continue
        assert len(drawn_rows), f"column {column}: no pixel of the curve"
        # the column's own samples are drawn, in it or in the columns where their bins start (a line at a fractional
        # x may fall on either neighbouring pixel: one column more): their highest and lowest rows are covered ...
        reached = np.flatnonzero(on_curve[int(top):int(bottom) + 1, column - reach:column + 2].any(axis=1)) + int(top)
        assert reached.min() <= math.floor(row_of[here].min()) + 1, f"column {column}: its maximum is not drawn"
        assert reached.max() >= math.ceil(row_of[here].max()) - 1, f"column {column}: its minimum is not drawn"
        # ... and nothing beyond the samples of the bins that may reach it and the lines joining them
        near = (column_of >= column - reach - 1) & (column_of <= column + 1)
        assert drawn_rows.min() >= math.floor(row_of[near].min()) - 1, f"column {column}: drawn above the data"
        assert drawn_rows.max() <= math.ceil(row_of[near].max()) + 1, f"column {column}: drawn below the data"
        checked += 1
    assert checked > (right - left) / 2


def test_the_time_axis_draws_what_pyqtgraphs_axis_draws(qtbot):
    """The directly painted time axis (gui.plots.TimeAxis) against pyqtgraph's own AxisItem as the reference: the
    same pixels (ticks, grid lines, labels) over a scrolling window and after a zoom."""
    widgets = []
    for axis in (TimeAxis(), pg.AxisItem("bottom")):
        widget = pg.GraphicsLayoutWidget()
        qtbot.addWidget(widget)
        widget.resize(700, 300)
        plot = widget.addPlot(axisItems={"bottom": axis})
        plot.showGrid(x=True, y=True, alpha=0.25)
        plot.getAxis("bottom").setStyle(maxTickLevel=1)
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        plot.setLabel("bottom", "time (s)")
        plot.setYRange(-1, 1, padding=0)
        widget.show()
        widgets.append((widget, plot))
    qtbot.waitUntil(lambda: all(plot.vb.width() > 100 for _widget, plot in widgets), timeout=DEADLINE_MS)
    spans = [(t, t + WINDOW_S) for t in np.arange(0.0, 3.0, 0.0173)] + [(2.0, 2.5), (100.0, 400.0)]
    for low, high in spans:
        images = []
        for widget, plot in widgets:
            plot.setXRange(low, high, padding=0)
            images.append(widget.grab().toImage())
        assert images[0] == images[1], f"the time axis differs from pyqtgraph's over {low:.4f}-{high:.4f} s"


def test_a_scrolled_curve_image_equals_the_image_drawn_whole(qtbot, make_window):
    """The curves' layer (gui.plots.CurveLayer) moves its image by whole pixels and redraws only the changed columns,
    frame after frame; drawn whole afresh at the end, the image has the same pixels of each curve's colour, up to the
    one-pixel rounding of lines cut at a redrawn span's edge."""
    window = make_window(window_s=WINDOW_S)
    window.frame_timer.stop()     # the frames are drawn here, one at a time
    panel = window.panels["torque"]
    qtbot.waitUntil(lambda: panel.plot.vb.width() > 100, timeout=DEADLINE_MS)
    first = int(WINDOW_S * RATE_HZ)
    values = spiky_signal(first + 120 * 17, seed=13)
    window.on_batch(torque_batch(np.arange(first) / RATE_HZ, values[:first]))
    window.refresh_plots()
    settle(window.paint_counter)
    layer = panel.layers[id(panel.plot.vb)]
    scrolled_before = layer.scrolled_draws
    for start in range(first, len(values), 17):
        window.on_batch(torque_batch(np.arange(start, start + 17) / RATE_HZ, values[start:start + 17]))
        window.refresh_plots()
        settle(window.paint_counter)
    # most frames only scroll (a spike that grows the y range, a relayout, draw whole)
    assert layer.scrolled_draws - scrolled_before > 60, "the image was not scrolled"
    scrolled = CurveLayer._pixels(layer._image).copy()
    whole_before = layer.whole_draws
    layer._key = None             # the next paint draws the image whole, for the same view and data
    window.graphics.viewport().repaint()
    assert layer.whole_draws == whole_before + 1
    whole = CurveLayer._pixels(layer._image)
    assert whole.shape == scrolled.shape
    drawn = 0
    for _spec, curve in panel.curves.values():
        colour = np.uint32(curve.opts["pen"].color().rgba())          # opaque ARGB, as the image stores it
        in_scrolled, in_whole = scrolled == colour, whole == colour
        drawn += int(in_whole.sum())
        for one, other in ((in_scrolled, in_whole), (in_whole, in_scrolled)):
            near = other.copy()                                        # within one pixel of the other's
            near[1:] |= other[:-1]
            near[:-1] |= other[1:]
            near[:, 1:] |= near[:, :-1].copy()
            near[:, :-1] |= near[:, 1:].copy()
            assert (one & ~near).sum() == 0, "a pixel of the curve is drawn where the whole image has none nearby"
        assert (in_scrolled != in_whole).sum() < 0.02 * in_whole.sum()  # differences only at the seams
    assert drawn > 1000


def test_the_time_axis_tick_values_are_pyqtgraphs(qtbot):
    """TimeAxis.tickValues drops a finer level's ticks that coincide with a coarser one's by a plain distance test
    instead of pyqtgraph's np.isclose: the same levels and values as AxisItem.tickValues over scrolled, zoomed and
    resized spans, and across ranges where ticks of two levels fall a hair apart (floating point)."""
    ours, reference = TimeAxis(), pg.AxisItem("bottom")
    rng = np.random.default_rng(21)
    spans = [(t, t + WINDOW_S, 1289.0) for t in np.arange(0.0, 40.0, 0.0173)]
    spans += [(low, low + width, size) for low, width, size in zip(rng.uniform(-1e4, 1e4, 500),
                                                                   10.0 ** rng.uniform(-4, 5, 500),
                                                                   rng.uniform(50, 3000, 500))]
    for low, high, size in spans:
        assert ours.tickValues(low, high, size) == reference.tickValues(low, high, size), (low, high, size)


def test_hiding_a_curve_while_paused_repaints_the_plot_without_it(qtbot, make_window):
    """A curve its layer draws has no contents of its own for Qt (gui.plots.WindowCurve): hiding it must still repaint
    its view, paused too (no frame follows), and the layer must leave its pixels out."""
    window = make_window(window_s=WINDOW_S)
    window.frame_timer.stop()
    panel = window.panels["torque"]
    qtbot.waitUntil(lambda: panel.plot.vb.width() > 100, timeout=DEADLINE_MS)
    values = spiky_signal(int(WINDOW_S * RATE_HZ), seed=17)
    window.on_batch(torque_batch(np.arange(len(values)) / RATE_HZ, values))
    panel.plot.showGrid(x=False, y=False)
    panel.legend.setVisible(False)              # its samples carry the curves' colours
    window.refresh_plots()
    settle(window.paint_counter)
    hidden = next(item for spec, item in panel.curves.values() if spec.channel == "stroke_l")
    colour = np.array(hidden.opts["pen"].color().getRgb()[:3])

    def pixels_of_hidden() -> int:
        return int((np.abs(viewport_pixels(window).astype(int) - colour).sum(axis=2) <= 3).sum())

    assert pixels_of_hidden() > 500
    window.set_paused(True)
    paints = window.paint_counter.paints
    window.set_channel_visible("torque:sim.tau:stroke_l", False)
    settle(window.paint_counter)
    assert window.paint_counter.paints > paints, "hiding a curve did not repaint its view"
    assert pixels_of_hidden() == 0
    window.set_channel_visible("torque:sim.tau:stroke_l", True)
    window.set_paused(False)                    # resuming draws a frame: the curve is back
    settle(window.paint_counter)
    assert pixels_of_hidden() > 500
