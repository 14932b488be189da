"""The dashboard's plots: which channel goes on which axes (simulated next to measured), and drawing them.

:func:`assign_curves` is pure: from the streams present and the actuated joints it decides the curves of
each panel. :class:`PlotPanel` wraps one pyqtgraph ``PlotItem`` and redraws its curves (bare ``PlotCurveItem``s)
at each frame from the ring buffers, cut to the window and peak-decimated once per stream, incrementally (:func:`stream_windows`,
:mod:`gui.decimate`).

Line styles: simulated = solid, measured = dashed, commanded = dotted; a simulated channel and its
measured counterpart share one colour (keyed by :func:`gui.signals.base_name`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pyqtgraph as pg
from PyQt5.QtCore import QLineF, QPointF, QRectF, Qt
from PyQt5.QtGui import QColor, QImage, QPainter, QPen, QRegion, QStaticText
from PyQt5.QtWidgets import QGraphicsItem
from pyqtgraph.Qt.OpenGLHelpers import GraphicsViewGLWidget

from gui.decimate import WindowDecimator
from gui.ringbuffer import StreamStore
from gui.signals import WRENCH_NAMES, base_name


@dataclass(frozen=True)
class PanelSpec:
    key: str
    title: str
    y_label: str
    y_units: str
    measured_label: str | None = None   # measured curves on their own right-hand axis, when their unit differs
    measured_units: str | None = None
    style_key: str = "solid: simulated, dashed: measured"


#: the panels, in display order (rows of two)
PANELS = (
    PanelSpec("torque", "Actuated joint torque", "torque", "N m"),
    PanelSpec("tracking", "Servo tracking", "angle", "rad",
              style_key="dotted: commanded, solid: simulated, dashed: measured"),
    PanelSpec("tether_force", "Tether force (base wrench)", "force", "N"),
    PanelSpec("tether_moment", "Tether moment (base wrench)", "moment", "N m"),
    # simulated strain is a joint deformation (rad); gauges measure surface strain (m/m): right-hand axis
    PanelSpec("strain", "Strain along the span (twist / bending)", "joint strain", "rad", "gauge strain", "m/m"),
    PanelSpec("tip", "Tip twist / bending (sums along each wing)", "joint strain", "rad", "gauge strain", "m/m"),
)

SIMULATED, MEASURED, COMMANDED = "sim", "meas", "cmd"


@dataclass(frozen=True)
class CurveSpec:
    panel: str
    stream: str
    channel: str
    kind: str           # SIMULATED, MEASURED or COMMANDED
    colour_key: str     # simulated and measured counterparts share it
    #: the simulated channel a measured one is drawn as, by the rig's map (in its unit and sign, on its axis)
    mapped_to: str | None = None

    @property
    def label(self) -> str:
        if self.mapped_to is not None and base_name(self.mapped_to) != base_name(self.channel):
            return f"{self.channel} ({self.kind} as {self.mapped_to})"
        return f"{self.channel} ({self.kind})"

    @property
    def ident(self) -> str:
        return f"{self.panel}:{self.stream}:{self.channel}"


_FORCES = {name.lower() for name in WRENCH_NAMES[:3]}
_MOMENTS = {name.lower() for name in WRENCH_NAMES[3:]}


def assign_curves(streams: dict[str, tuple[str, ...]], actuated: dict[str, bool],
                  counterparts: dict[tuple[str, str], tuple[str, str]] | None = None) -> list[CurveSpec]:
    """The curves of every panel for the streams present (``key -> channel names``).

    ``actuated`` maps joint names to whether they are actuated (from the newest ``sim/state``); ``counterparts``
    (:attr:`gui.signals.Batch.counterparts`) the measured channels drawn as a simulated one by the rig's map: they go
    on that channel's panel and axis, in its colour.
    """
    curves: list[CurveSpec] = []
    counterparts = counterparts or {}
    actuated_keys = {base_name(name) for name, is_actuated in actuated.items() if is_actuated}

    def add(panel, stream, channel, kind, colour_key=None, mapped_to=None):
        curves.append(CurveSpec(panel, stream, channel, kind, colour_key or base_name(channel), mapped_to))

    def panel_of(stream: str, channel: str) -> str | None:
        """The panel a simulated channel is drawn on."""
        if stream == "sim.base_wrench" or stream == "sim.ext_wrench":
            return "tether_force" if channel.lower() in _FORCES else "tether_moment"
        return {"sim.tau": "torque", "sim.strain": "strain", "sim.q": "tracking"}.get(stream)

    def add_measured(stream, channel, kind, fallback_panel, colour_key=None):
        target = counterparts.get((stream, channel))
        panel = None if target is None else panel_of(*target)
        if panel is None:
            add(fallback_panel, stream, channel, kind, colour_key)
        else:
            add(panel, stream, channel, kind, base_name(target[1]), target[1])

    for name in streams.get("sim.tau", ()):
        if actuated.get(name, False):
            add("torque", "sim.tau", name, SIMULATED)
    for name in streams.get("sim.base_wrench", ()):
        add(panel_of("sim.base_wrench", name), "sim.base_wrench", name, SIMULATED)
    for name in streams.get("hw.load", ()):
        key = base_name(name)
        if key in _FORCES:
            add_measured("hw.load", name, MEASURED, "tether_force", key)
        elif key in _MOMENTS:
            add_measured("hw.load", name, MEASURED, "tether_moment", key)
        else:
            add_measured("hw.load", name, MEASURED, "torque")
    for name in streams.get("sim.strain", ()):
        if not actuated.get(name, False):
            add("strain", "sim.strain", name, SIMULATED)
    for name in streams.get("hw.strain", ()):
        add_measured("hw.strain", name, MEASURED, "strain")
    for name in streams.get("sim.tip", ()):
        add("tip", "sim.tip", name, SIMULATED)
    gauges_mapped = any(stream == "hw.strain" for stream, _channel in counterparts)
    for name in streams.get("hw.tip", ()):
        # sums of rig-mapped gauges are in the simulated tips' unit (gui.signals): on their axis
        add("tip", "hw.tip", name, MEASURED, mapped_to=name if gauges_mapped else None)
    for name in streams.get("hw.setpoint", ()):
        add_measured("hw.setpoint", name, COMMANDED, "tracking")
    for name in streams.get("hw.servo", ()):
        add_measured("hw.servo", name, MEASURED, "tracking")
    if "hw.setpoint" not in streams:
        # Without a driver the simulated actuated angles are what would be commanded: show them.
        for name in streams.get("sim.q", ()):
            if base_name(name) in actuated_keys:
                add("tracking", "sim.q", name, SIMULATED)
    return curves


#: y autoscale: the range is padded by this fraction of the data's span on each side ...
Y_PADDING = 0.05
#: ... grows at once when the data leaves it, and shrinks only when the data fills less than this fraction of it
#: (so the axis, whose ticks are costly to redraw, changes rarely instead of every frame)
Y_SHRINK_BELOW = 0.5
#: half-height of the range given to a flat signal, as a fraction of its magnitude (1 unit when it is 0)
FLAT_SIGNAL_HALF_RANGE = 0.1

#: beyond this many entries a legend would hide the curves: the Channels list (with colours) replaces it
LEGEND_MAX_ENTRIES = 8

#: distinguishable line colours (RGB), reused in order of first appearance in a panel
PALETTE = ((31, 119, 255), (255, 127, 14), (44, 200, 44), (230, 40, 40), (160, 103, 220), (170, 110, 80),
           (240, 110, 200), (180, 180, 180), (200, 200, 30), (23, 200, 220))


def _colour(index: int):
    if index < len(PALETTE):
        return PALETTE[index]
    return pg.intColor(index, hues=17, values=2).getRgb()[:3]


#: ``WindowCurve.set_window``'s ``step`` when its caller did not check what changed
UNCHECKED = object()


def scrolled_span(old_times: np.ndarray, old_values: np.ndarray, times: np.ndarray, values: np.ndarray
                  ) -> tuple[float, float] | None:
    """What changed from a window ``old_times (k,)``, ``old_values (k,)`` or ``(k, n)`` to the next one ``times``,
    ``values``: ``(left, right)`` s when the old vertices but the first and the last :data:`EDGE_VERTICES` (the partial
    bins at the window's ends, and the lines to them) recur unchanged in the new ones, from ``left`` to ``right``;
    else None (all changed). With ``(k, n)`` values, every column must recur: one check for a stream's curves."""
    kept = len(old_times) - 2 * EDGE_VERTICES
    if kept < 2 or len(times) < kept:
        return None
    start = int(np.searchsorted(times, old_times[EDGE_VERTICES], side="left"))
    stop = start + kept
    if stop > len(times) or not (np.array_equal(times[start:stop], old_times[EDGE_VERTICES:-EDGE_VERTICES])
                                 and np.array_equal(values[start:stop], old_values[EDGE_VERTICES:-EDGE_VERTICES])):
        return None
    return float(times[start]), float(old_times[-EDGE_VERTICES - 1])


class WindowCurve(pg.PlotCurveItem):
    """A ``PlotCurveItem`` fed an envelope already cut to the window and peak-decimated (:func:`stream_windows`).

    :meth:`set_window` is told the data's bounds (the extremes computed once per stream), so pyqtgraph does not
    rescan every curve at every frame. A finite envelope is drawn by its view's :class:`CurveLayer` (one image for all
    the view's curves, scrolled, only what changed redrawn), and :meth:`set_window` notes what changed since the
    previous window. A window holding a non-finite value is drawn by pyqtgraph (its ``QPainterPath``), which breaks
    the line there.
    """

    _known_bounds = None    # ((x low, x high), (y low, y high)) of the current data, or None: computed as usual
    _finite = False         # every value finite: the layer draws it; else pyqtgraph paints it
    _rect = None            # bounding rect of the data, QRectF, when finite
    _drawn_by_layer = False     # the current finite window is drawn by its layer (set by set_window)
    #: what changed since the layer last drew: None (everything), or (left, right) s: the vertices before ``left``
    #: and after ``right`` changed, those between did not (the window scrolled); (-inf, inf): nothing
    changed: tuple[float, float] | None = None

    def updateData(self, *args, **kwargs):
        self._known_bounds = self._rect = None
        self._finite = False
        self.changed = None
        self._paints_itself(True)
        super().updateData(*args, **kwargs)

    def _paints_itself(self, painting: bool) -> None:
        """Tell Qt whether this item paints: not while its layer draws it. An item without contents is neither
        asked for its bounding rect nor painted as the scene paints (both Python calls, for every curve at every
        frame); its layer is updated instead."""
        if painting == bool(self.flags() & QGraphicsItem.ItemHasNoContents):
            self.setFlag(QGraphicsItem.ItemHasNoContents, not painting)

    def set_window(self, times: np.ndarray, values: np.ndarray, low: float, high: float, finite: bool,
                   step=UNCHECKED) -> None:
        """``times (k,)`` non-decreasing, ``values (k,)`` whose finite extremes are ``low`` and ``high``;
        ``finite``: every value is finite (checked once per stream by :func:`stream_windows`); ``step``: what changed
        from the current data (:func:`scrolled_span`), when the caller checked it once for every column of the stream,
        else :data:`UNCHECKED` (this curve checks its own).

        A finite window skips ``updateData``'s argument checks, option handling and ``sigPlotChanged`` (nothing
        listens to it on these bare curves): it resets the same caches and tells Qt and the view the same way."""
        if not (finite and len(times) and low <= high):
            self.updateData(times, values, skipFiniteCheck=finite)
            if len(times) and low <= high:
                self._known_bounds = ((float(times[0]), float(times[-1])), (float(low), float(high)))
            return
        if not self._finite:
            step = None
        elif step is UNCHECKED:
            step = scrolled_span(self.xData, self.yData, times, values)
        own_geometry_before = not (self._finite and self._drawn_by_layer)
        self._drawn_by_layer = self.layer is not None
        if own_geometry_before or not self._drawn_by_layer:
            self.prepareGeometryChange()      # before its bounding rect changes (Qt's rule): the data's, or none
        # not drawn since the previous window: both changes count (the vertices kept by both are the unchanged ones)
        self.changed = None if step is None or self.changed is None else (max(step[0], self.changed[0]),
                                                                          min(step[1], self.changed[1]))
        self.xData, self.yData = times, values
        self._finite = True
        self.opts["skipFiniteCheck"] = True
        self.path = self.fillPath = self._fillPathList = self._mouseShape = None
        self._lineSegmentsRendered = False
        if self.glstate is not None:      # pyqtgraph's OpenGL path: upload the new vertices (what sigPlotChanged does)
            self.glstate.render_cache = None
        self.invalidateBounds()
        self._known_bounds = ((float(times[0]), float(times[-1])), (float(low), float(high)))
        self._rect = QRectF(self._known_bounds[0][0], self._known_bounds[1][0],
                            self._known_bounds[0][1] - self._known_bounds[0][0],
                            self._known_bounds[1][1] - self._known_bounds[1][0])
        view = self.getViewBox()
        if view is not None and any(auto is not False for auto in view.state["autoRange"]):
            self.informViewBoundsChanged()    # only pyqtgraph's auto-range (a user's "auto") follows item bounds
        self._paints_itself(not self._drawn_by_layer)
        if self._drawn_by_layer:
            self.layer.update()
        else:
            self.update()

    def viewTransformChanged(self):
        # a finite window's bounding rect is its data's, in data units (the one-pixel cosmetic pen adds nothing): a
        # new view transform (every frame, as the time span scrolls) leaves it as it is, so pyqtgraph's invalidation
        # and geometry change for every curve are not needed
        if not self._finite:
            super().viewTransformChanged()

    def dataBounds(self, ax, frac=1.0, orthoRange=None):
        if self._known_bounds is not None and frac >= 1.0 and orthoRange is None and ax in (0, 1):
            return self._known_bounds[ax]
        return super().dataBounds(ax, frac, orthoRange)

    def boundingRect(self):
        if not self._finite:
            return super().boundingRect()
        # drawn by its layer: nothing of its own to index or paint (no geometry change per curve and frame); else the
        # data's rect is enough (the pen is one cosmetic pixel wide and the view clips its children)
        return QRectF() if self._drawn_by_layer else self._rect

    #: the view's CurveLayer that draws it while finite; None: it draws itself, one polyline per paint
    layer = None

    def paint(self, painter, option, widget):
        if not self._finite or (self.layer is None and isinstance(widget, GraphicsViewGLWidget)):
            super().paint(painter, option, widget)      # pyqtgraph's path, or its OpenGL line strip
        elif self.layer is None:
            painter.setPen(self.opts["pen"])
            painter.drawPolyline(pg.functions.arrayToQPolygonF(self.xData, self.yData))


#: vertices at each end of a curve's window that may change while it scrolls: the partial bin (2 vertices) and the
#: complete bin next to it, whose line to the partial one moves with it
EDGE_VERTICES = 4
#: a view moved by a whole number of pixels when the move is within this of one (float rounding of the transform), px
WHOLE_PIXEL_TOLERANCE = 1e-6
#: columns redrawn beyond the changed span on each side: the one-pixel pen's rounding at the span's edges, px
SEAM_COLUMNS = 2


class CurveLayer(pg.GraphicsObject):
    """The finite curves of one view drawn into one image kept from frame to frame (device pixels, transparent).

    When the view only scrolled by whole pixels (:meth:`gui.window.DashboardWindow.refresh_plots` moves the time
    span so) and every curve only scrolled (:attr:`WindowCurve.changed`), the image moves by those pixels and only the
    columns whose data changed are cleared and drawn again: the new samples at the right edge, the partial bin at the
    left. Anything else (a zoom, a y-range change, a curve shown or hidden, a resize) draws the whole image. A
    column drawn in one frame is what a whole redraw would draw, but for dashes starting afresh at a seam and the
    rounding of lines cut at it (one pixel; tests/gui/test_dash_frames.py checks the pixels against the data)."""

    def __init__(self, view: pg.ViewBox):
        super().__init__()
        self.view = view
        self.curves: list[WindowCurve] = []     # in drawing order
        self.setParentItem(view)
        self._image: QImage | None = None
        self._key = None                        # what the image was drawn for: scales, y offset, rect, curves
        self._dx = 0.0                          # the data-to-device x offset it was drawn at, px
        self.whole_draws = 0                    # images drawn whole, and scrolled (counted for tests and benchmarks)
        self.scrolled_draws = 0
        view.sigResized.connect(self.prepareGeometryChange)

    def boundingRect(self):
        return self.view.rect()                 # the view's own coordinates: the layer covers it

    def paint(self, painter, option, widget):
        curves = [curve for curve in self.curves if curve._finite and curve.isVisible() and curve.layer is self]
        if not curves:
            self._key = None
            return
        to_view = self.view.childGroup.transform()          # data -> view coordinates
        to_device = to_view * painter.deviceTransform()     # data -> device pixels
        if to_device.isRotating() or painter.device().devicePixelRatioF() != 1.0:
            painter.setTransform(to_view, True)           # drawn directly, as the curves would draw themselves
            for curve in curves:
                painter.setPen(curve.opts["pen"])
                painter.drawPolyline(pg.functions.arrayToQPolygonF(curve.xData, curve.yData))
            self._key = None
            return
        rect = painter.deviceTransform().mapRect(self.boundingRect()).toAlignedRect()
        key = (to_device.m11(), to_device.m22(), to_device.dy(), rect.x(), rect.y(), rect.width(), rect.height(),
               tuple(id(curve) for curve in curves))
        shift = self._dx - to_device.dx()                   # px the data moved left since the image was drawn
        whole = round(shift)
        offset, scale = to_device.dx() - rect.x(), to_device.m11()      # data x -> image column
        left = right = 0
        scrolled = (key == self._key and abs(shift - whole) <= WHOLE_PIXEL_TOLERANCE and 0 <= whole < rect.width()
                    and all(curve.changed is not None for curve in curves))
        if scrolled:
            # image columns whose data changed, widened by the seam: [0, left) and [right, width)
            left = max(curve.changed[0] for curve in curves) * scale + offset + SEAM_COLUMNS
            right = min(curve.changed[1] for curve in curves) * scale + offset - SEAM_COLUMNS
            left, right = int(np.clip(np.ceil(left), 0, rect.width())), int(np.clip(np.floor(right), 0, rect.width()))
            scrolled = left < right
        if scrolled:
            image = self._image
            pixels = self._pixels(image)
            if whole:
                pixels[:, :-whole] = pixels[:, whole:].copy()
            pixels[:, :left] = 0
            pixels[:, right:] = 0
            spans = [(-np.inf, (left - offset) / scale), ((right - offset) / scale, np.inf)]
            clip = QRegion(0, 0, left, rect.height()) | QRegion(right, 0, rect.width() - right, rect.height())
            self.scrolled_draws += 1
        else:
            image = QImage(rect.size(), QImage.Format_ARGB32_Premultiplied)
            image.fill(0)
            spans, clip = [(-np.inf, np.inf)], None
            self.whole_draws += 1
        drawing = QPainter(image)
        if clip is not None:
            drawing.setClipRegion(clip)     # image pixels, set before the transform
        drawing.translate(-rect.x(), -rect.y())
        drawing.setTransform(to_device, True)
        pixel_s = 1.0 / to_device.m11()     # one device column, s
        for low, high in spans:
            cuts: dict[int, tuple[int, int]] = {}     # id(times) -> vertices of the span: curves of a stream share them
            pieces = []                                # (curve, first vertex, end vertex) drawn in this span
            for curve in curves:
                times = curve.xData
                cut = cuts.get(id(times))
                if cut is None:
                    cut = cuts[id(times)] = (max(int(np.searchsorted(times, low - pixel_s, side="left")) - 1, 0),
                                             min(int(np.searchsorted(times, high + pixel_s, side="right")) + 1,
                                                 len(times)))
                if cut[1] - cut[0] >= 2:
                    pieces.append((curve, *cut))
            if not pieces:
                continue
            # every piece's vertices in one polygon, each drawn as its own part of it: one array hand-over to Qt per
            # span instead of one per curve (pyqtgraph's arrayToQPolygonF costs tens of microseconds, however short)
            polygon = pg.functions.arrayToQPolygonF(
                np.concatenate([curve.xData[first:last] for curve, first, last in pieces]),
                np.concatenate([curve.yData[first:last] for curve, first, last in pieces]))
            offset = 0
            for curve, first, last in pieces:
                drawing.setPen(curve.opts["pen"])
                drawing.drawPolyline(polygon.mid(offset, last - first))
                offset += last - first
        drawing.end()
        for curve in curves:
            curve.changed = (-np.inf, np.inf)
        self._image, self._key, self._dx = image, key, to_device.dx()
        painter.save()
        painter.resetTransform()
        painter.drawImage(rect.topLeft(), image)
        painter.restore()

    @staticmethod
    def _pixels(image: QImage) -> np.ndarray:
        """The image's pixels as a writable ``(height, width)`` uint32 view."""
        bits = image.bits()
        bits.setsize(image.sizeInBytes())
        return np.frombuffer(bits, dtype=np.uint32).reshape(image.height(), image.bytesPerLine() // 4)[
            :, :image.width()]


#: tick labels kept laid out per time axis (a scrolling 10 s window shows about ten; zooming out and in adds more)
TEXT_CACHE_MAX = 2000
#: pyqtgraph measures a label's height as 0.8 of its font box (AxisItem.generateDrawSpecs): the same here
LABEL_HEIGHT_FRACTION = 0.8


class TimeAxis(pg.AxisItem):
    """A bottom axis with pyqtgraph's ticks (:meth:`tickValues`, :meth:`tickStrings`), grid, tick alpha and label
    crowding rule (``textFillLimits``), painted directly: pyqtgraph rebuilds a ``QPicture`` of it at every range
    change, measuring and laying out every label and building a ``Point`` per tick, and a time axis changes range at
    every frame. Here the lines of a level are one ``drawLines``, and each label a ``QStaticText`` laid out once."""

    def __init__(self, *args, **kwargs):
        super().__init__("bottom", *args, **kwargs)
        self._labels: dict[tuple[str, str], tuple[QStaticText, QRectF]] = {}

    def tickValues(self, minVal, maxVal, size):  # noqa: N802, N803 (pyqtgraph's names)
        """pyqtgraph's tick values, level by level (:meth:`AxisItem.tickValues`), with a finer level's ticks that
        coincide with a coarser one's dropped by a plain distance test: pyqtgraph's ``np.isclose`` at ``rtol=0`` is the
        same test (``|a - b| <= atol``) at about 25 times the cost, paid at every frame by a scrolling axis."""
        if self.logMode:
            return super().tickValues(minVal, maxVal, size)
        low, high = sorted((minVal * self.scale, maxVal * self.scale))
        ticks, seen = [], np.empty(0)
        for spacing, offset in self.tickSpacing(low, high, size):
            start = math.ceil((low - offset) / spacing) * spacing + offset
            values = (np.arange(int((high - start) / spacing) + 1) * spacing + start) / self.scale
            # a tick within a hundredth of this level's spacing of a coarser level's is that tick (pyqtgraph's rule)
            close = (np.abs(seen - values[:, np.newaxis]) <= spacing / self.scale * 0.01).any(axis=-1)
            values = values[~close]
            seen = np.concatenate([seen, values])
            ticks.append((spacing / self.scale, values.tolist()))
        return ticks

    def _label(self, painter, text: str) -> tuple[QStaticText, QRectF]:
        """The label laid out, and its box as pyqtgraph measures it (its width decides crowding and the edges)."""
        key = (painter.font().key(), text)
        label = self._labels.get(key)
        if label is None:
            if len(self._labels) >= TEXT_CACHE_MAX:
                self._labels.clear()
            static = QStaticText(text)
            static.setTextFormat(Qt.PlainText)
            static.prepare(painter.transform(), painter.font())
            box = painter.boundingRect(QRectF(0, 0, 100, 100), int(Qt.AlignCenter), text)
            label = self._labels[key] = (static, box)
        return label

    def paint(self, p, opt, widget):
        bounds = self.mapRectFromParent(self.geometry())      # the axis' own rect, item coordinates (pixels)
        low, high = self.range
        length = bounds.width()
        if not high > low or length <= 0:
            return
        view = self.linkedView()
        gridded = view is not None and self.grid is not False
        tick_stop = bounds.top()
        tick_start = view.mapRectToItem(self, view.boundingRect()).top() if gridded else tick_stop
        tick_length = self.style["tickLength"]
        scale = length / (high - low)                          # pixels per second
        levels = self.tickValues(low, high, length)
        p.setRenderHint(p.RenderHint.Antialiasing, False)
        p.setRenderHint(p.RenderHint.TextAntialiasing, True)
        p.setPen(self.pen())
        p.drawLine(QPointF(bounds.left() - 1.0, tick_stop + 1.0), QPointF(bounds.right() + 1.0, tick_stop + 1.0))
        positions = []
        for level, (_spacing, values) in enumerate(levels):
            xs = [value * scale - low * scale for value in values]    # pyqtgraph's rounding: the same pixel
            positions.append([x if 0.0 <= x <= length else None for x in xs])
            alpha = self.style["tickAlpha"]
            if alpha is None:
                alpha = 255 / (level + 1)
                if gridded:
                    alpha *= self.grid / 255.0 * min(max(0.05 * length / (len(values) + 1), 0.0), 1.0)
            elif isinstance(alpha, float):
                alpha = min(255, max(0, round(alpha * 255)))
            pen = QPen(self.tickPen())
            colour = QColor(pen.color())
            colour.setAlpha(int(alpha))
            pen.setColor(colour)
            end = tick_stop if gridded else tick_stop + tick_length
            p.setPen(pen)
            p.drawLines([QLineF(x, tick_start, x, end) for x in positions[-1] if x is not None])
        if not self.style["showValues"]:
            return
        if self.style["tickFont"] is not None:
            p.setFont(self.style["tickFont"])
        p.setPen(self.textPen())
        text_top = tick_stop + max(0, tick_length) + self.style["tickTextOffset"][1]
        edges = self.boundingRect()
        placed, filled, tallest = [], 0.0, 0.0
        for level in range(min(len(levels), self.style["maxTextLevel"] + 1)):
            spacing, values = levels[level]
            strings = self.tickStrings(values, self.autoSIPrefixScale * self.scale, spacing)
            labels = [(x, *self._label(p, text)) for x, text in zip(positions[level], strings) if x is not None]
            filled += sum(box.width() for _x, _static, box in labels)
            if level > 0 and any(len(placed) >= count and filled / length >= limit
                                 for count, limit in self.style["textFillLimits"]):
                break     # pyqtgraph's rule: a finer level's labels only while they do not crowd the axis
            for x, static, box in labels:
                tallest = max(tallest, LABEL_HEIGHT_FRACTION * box.height())
                if edges.left() <= x - box.width() / 2 and x + box.width() / 2 <= edges.right():   # whole labels only
                    placed.append((QPointF(x - static.size().width() / 2, text_top), static))
        for where, static in placed:
            p.drawStaticText(where, static)
        self._updateMaxTextSize(tallest)


class PlotPanel:
    """One pyqtgraph PlotItem and its curves. ``time_values``: False for panels above others, whose x axis is
    linked to theirs (not drawn: less to draw each frame, more room for the curves)."""

    def __init__(self, plot: pg.PlotItem, spec: PanelSpec, time_values: bool = True):
        self.plot = plot
        self.spec = spec
        self.curves: dict[str, tuple[CurveSpec, WindowCurve]] = {}
        self._colours: dict[str, tuple] = {}
        plot.setTitle(f"{spec.title} <span style='color:#aaaaaa; font-size:8pt'>({spec.style_key})</span>")
        plot.setLabel("left", spec.y_label, units=spec.y_units)
        # a plain "s" label, no SI prefix: scrolling must not rewrite (and re-render) the label every frame
        plot.getAxis("bottom").enableAutoSIPrefix(False)
        if time_values:
            plot.setLabel("bottom", "time (s)")
            # major and minor ticks only (no third, finest level): half the grid lines to regenerate per frame
            plot.getAxis("bottom").setStyle(maxTickLevel=1)
        else:
            # no x axis at all: a scrolling axis regenerates its ticks and grid at every frame, the costliest
            # part of a redraw (benchmarks/bench_dashboard.py); the bottom row's axis and grid serve all
            plot.hideAxis("bottom")
        # a hidden axis still follows its view: at every frame's x change it re-ranged, re-rendered its label
        # (setHtml) and resized; unlinked, it costs nothing (the bottom row's axis shows the time for all)
        for side in ("top",) if time_values else ("top", "bottom"):
            plot.getAxis(side).unlinkFromView()
        plot.showGrid(x=True, y=True, alpha=0.25)
        # the value axes (and their grid lines) change only when the y range does: keep them as pixmaps instead
        # of replaying their tick labels and lines at every frame; the scrolling time axis changes every frame
        for side in ("left", "right"):
            plot.getAxis(side).setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        self.legend = plot.addLegend(offset=(-5, 5), colCount=3, labelTextSize="7pt", brush=(0, 0, 0, 150))
        # the title and the legend never change while the curves scroll: pixmaps, not text laid out every frame.
        # Qt caches an item's own painting, not its children's: the title's text item and every legend entry's
        # sample and text are cached one by one (add_curve), else they are painted afresh at every frame
        for still in (plot.titleLabel, plot.titleLabel.item, self.legend):
            still.setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        # the finite curves of each view are drawn by one layer (CurveLayer), under the legend
        self.layers = {id(plot.vb): CurveLayer(plot.vb)}
        self.layers[id(plot.vb)].stackBefore(self.legend)
        self.autoscale = True
        #: stream -> (times, values) of the window its curves were handed last (what the next one is checked against)
        self._previous: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        plot.enableAutoRange(axis="y", enable=False)
        self.measured_view: pg.ViewBox | None = None
        if spec.measured_units is not None:
            # a second ViewBox sharing the x axis, drawn over the main one, scaled by the right axis
            self.measured_view = pg.ViewBox()
            plot.scene().addItem(self.measured_view)
            plot.getAxis("right").linkToView(self.measured_view)
            plot.setLabel("right", spec.measured_label, units=spec.measured_units)
            plot.hideAxis("right")   # until a measured curve arrives
            self.measured_view.setXLink(plot)
            # x follows the main view (and clip-to-view works only without x autorange); y scales itself
            self.measured_view.enableAutoRange(axis="x", enable=False)
            self.measured_view.enableAutoRange(axis="y", enable=False)
            plot.vb.sigResized.connect(self._follow_geometry)
            self.layers[id(self.measured_view)] = CurveLayer(self.measured_view)

    def set_time_span(self, low: float, high: float) -> None:
        """Show ``[low, high]`` s in this panel's views, as one direct change of their x range per frame.

        ``setXRange`` would re-derive padding and limits, emit the range signals (whose slots here are the x-linked
        measured view, which recomputes its geometry and sets its range the same way, the linked time axis, and a
        do-nothing slot of every curve) and copy the range to the other plots' views (:meth:`_sync_x`, which a frame
        does not need: it sets them all). The views hold only :class:`WindowCurve` items and layers, which need none of
        those signals; the state signal still tells the context menu and the auto-range button."""
        views = (self.plot.vb,) if self.measured_view is None else (self.plot.vb, self.measured_view)
        if self.plot.vb.state["viewRange"][0] == [low, high]:
            return
        for view in views:
            state = view.state
            if state["autoRange"][0] is not False:     # a user's "auto" on the x axis: the scrolling span wins
                view.enableAutoRange(x=False)
            state["targetRange"][0] = [low, high]
            state["viewRange"][0] = [low, high]
            view._viewPixelSizeCache = None
            view._matrixNeedsUpdate = True
            view.update()
            view.sigStateChanged.emit(view)
        axis = self.plot.getAxis("bottom")
        if axis.linkedView() is self.plot.vb:
            axis.linkedViewChanged(self.plot.vb)

    def _follow_geometry(self) -> None:
        # the main view's own rect, not its sceneBoundingRect (half a pixel wider, for its border): the same width,
        # so the same time span has the same scale in both views
        self.measured_view.setGeometry(self.plot.vb.mapRectToScene(self.plot.vb.rect()))

    def set_autoscale(self, enabled: bool) -> None:
        """Y autoscale by :meth:`update` (pyqtgraph's own autorange stays off: it re-ranges, and so redraws the
        axis, at every frame); off: the ranges stay where they are, for the mouse to set."""
        self.autoscale = enabled

    def colour_of(self, colour_key: str):
        if colour_key not in self._colours:
            self._colours[colour_key] = _colour(len(self._colours))
        return self._colours[colour_key]

    def add_curve(self, spec: CurveSpec) -> WindowCurve:
        if spec.ident in self.curves:
            return self.curves[spec.ident][1]
        colour = self.colour_of(spec.colour_key)
        # 1-pixel pens: Qt's raster engine draws wider lines several times slower (benchmarks/bench_dashboard.py)
        if spec.kind == MEASURED:
            pen = pg.mkPen(colour, width=1, style=Qt.DashLine)
        elif spec.kind == COMMANDED:
            pen = pg.mkPen(colour, width=1, style=Qt.DotLine)
        else:
            pen = pg.mkPen(colour, width=1)
        # a bare PlotCurveItem, not a PlotDataItem: the data arrive already cut to the window and peak-decimated
        # to the plot's width (stream_windows), so PlotDataItem's per-curve clipping, downsampling and
        # view-change handlers would only repeat that work for every curve at every frame
        curve = WindowCurve(pen=pen)
        if spec.kind == MEASURED and self.measured_view is not None and spec.mapped_to is None:
            self.measured_view.addItem(curve)
            self.plot.showAxis("right")
        else:
            # into the ViewBox, not through PlotItem.addItem: the PlotItem's context-menu data options
            # (downsampling, FFT, ...) only apply to PlotDataItems and would fail on these
            self.plot.vb.addItem(curve)
        curve.layer = self.layers[id(curve.getViewBox())]
        curve.layer.curves.append(curve)
        # one legend entry per colour: a measured curve whose simulated twin is listed needs none
        twin_listed = spec.kind == MEASURED and any(
            other.colour_key == spec.colour_key and other.kind != MEASURED for other, _ in self.curves.values())
        if not twin_listed:
            self.legend.addItem(curve, spec.label if spec.kind == MEASURED else spec.channel)
            sample, label = self.legend.items[-1]
            for still in (sample, label, label.item):
                still.setCacheMode(QGraphicsItem.DeviceCoordinateCache)
        self.legend.setVisible(len(self.legend.items) <= LEGEND_MAX_ENTRIES)
        self.curves[spec.ident] = (spec, curve)
        return curve

    def set_curve_visible(self, ident: str, visible: bool) -> None:
        """Show or hide one curve (a hidden one is emptied: it costs nothing); its legend sample, a cached pixmap,
        is redrawn (pyqtgraph draws a hidden curve's sample as an eye)."""
        curve = self.curves[ident][1]
        curve.setVisible(visible)
        if not visible:
            curve.setData([], [])
        for sample, _label in self.legend.items:
            if sample.item is curve:
                sample.update()

    def remove_missing(self, present: set[str]) -> None:
        for ident in [i for i in self.curves if i not in present]:
            _spec, curve = self.curves.pop(ident)
            view = self.measured_view if curve.getViewBox() is self.measured_view else self.plot.vb
            if view is not None:
                self.layers[id(view)].curves.remove(curve)
                view.removeItem(curve)
            self.legend.removeItem(curve)
        self.legend.setVisible(len(self.legend.items) <= LEGEND_MAX_ENTRIES)

    def update(self, windows: dict[str, tuple[np.ndarray, np.ndarray, tuple[str, ...]]]) -> None:
        """Redraw every visible curve from ``windows``: stream -> (times (k,), values (k, n), names, (low (n,),
        high (n,), finite (n,))), as :func:`stream_windows` returns them."""
        extremes: dict[int, list[float]] = {}   # id(view) -> [low, high] of the visible data
        columns = {key: {name: i for i, name in enumerate(window[2])} for key, window in windows.items()}
        steps: dict[str, tuple[float, float] | None] = {}   # stream -> what changed, for all its columns at once
        for spec, curve in self.curves.values():
            if not curve.isVisible():
                continue
            window = windows.get(spec.stream)
            column = -1 if window is None else columns[spec.stream].get(spec.channel, -1)
            if column < 0 or len(window[0]) == 0:
                if curve.xData is None or len(curve.xData):
                    curve.setData([], [])
                continue
            low, high, finite = (extreme[column] for extreme in window[3])   # once per stream (stream_windows)
            step = UNCHECKED
            previous = self._previous.get(spec.stream)
            if previous is not None and curve.xData is previous[0]:     # it holds the stream's previous window
                if spec.stream not in steps:
                    steps[spec.stream] = scrolled_span(previous[0], previous[1], window[0], window[1])
                step = steps[spec.stream]
            curve.set_window(window[0], window[1][:, column], low, high, bool(finite), step)
            if self.autoscale:
                if low <= high:
                    low_high = extremes.setdefault(id(curve.getViewBox()), [np.inf, -np.inf])
                    low_high[0] = min(low_high[0], float(low))
                    low_high[1] = max(low_high[1], float(high))
        self._previous = {key: windows[key][:2] for key in {spec.stream for spec, _curve in self.curves.values()}
                          if key in windows}
        if self.autoscale:
            for view in (self.plot.vb, self.measured_view):
                if view is not None and id(view) in extremes:
                    _follow_y(view, *extremes[id(view)])


def _follow_y(view: pg.ViewBox, low: float, high: float) -> None:
    """Set the y range of ``view`` to hold ``[low, high]``, with hysteresis (:data:`Y_SHRINK_BELOW`)."""
    if high > low:
        pad = Y_PADDING * (high - low)
    else:
        pad = FLAT_SIGNAL_HALF_RANGE * abs(high) or 1.0
    target_low, target_high = low - pad, high + pad
    current_low, current_high = view.viewRange()[1]
    outside = low < current_low or high > current_high
    too_loose = (target_high - target_low) < Y_SHRINK_BELOW * (current_high - current_low)
    if outside or too_loose:
        view.setYRange(target_low, target_high, padding=0)


def column_extremes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite minimum and maximum of every column of ``values (k, n)``, and whether all its values are finite:
    ``(n,)``, ``(n,)``, ``(n,)`` bool; a column without a finite value gets ``(inf, -inf)``."""
    finite = np.isfinite(values)
    if finite.all():
        every = np.ones(values.shape[1], dtype=bool)
        if len(values) == 0:
            return np.full(values.shape[1], np.inf), np.full(values.shape[1], -np.inf), every
        return values.min(axis=0), values.max(axis=0), every
    return (np.where(finite, values, np.inf).min(axis=0), np.where(finite, values, -np.inf).max(axis=0),
            finite.all(axis=0))


def stream_windows(store: StreamStore, streams: set[str], t_start: float, t_end: float, bins: int = 0,
                   decimator: WindowDecimator | None = None
                   ) -> dict[str, tuple[np.ndarray, np.ndarray, tuple[str, ...], tuple[np.ndarray, ...]]]:
    """The samples of ``streams`` within ``[t_start, t_end]``, peak-decimated to about ``bins`` bins when
    ``bins > 0`` (:mod:`gui.decimate`; pass the same ``decimator`` every frame so that only the new samples are
    reduced), with the channel names and the finite extremes and finiteness of every channel (:func:`column_extremes`:
    autoscale, and whether a curve can skip the finite check).

    Always fresh arrays (the rings keep being written while pyqtgraph holds them).
    """
    decimator = decimator or WindowDecimator()
    windows = {}
    for key in streams:
        buffer = store.buffers.get(key)
        if buffer is None or len(buffer) == 0:
            continue
        times, values = decimator.window(key, buffer, t_start, t_end, bins)
        windows[key] = (times, values, store.names[key], column_extremes(values))
    return windows
