"""The dashboard window: plots, channel selector, link status, and the controls (pause, window, autoscale,
recording, E-STOP).

The window owns the ring buffers (:class:`gui.ringbuffer.StreamStore`) and touches them only on the GUI
thread: data arrives as :class:`gui.signals.Batch` objects through a queued signal from the subscriber (or
replay) thread; plots are redrawn by a fixed-rate QTimer, the status table by a slower one.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyqtgraph as pg
from PyQt5.QtCore import QEvent, QObject, Qt, QThread, QTimer
from PyQt5.QtGui import QColor, QFont, QIcon, QPixmap
from PyQt5.QtWidgets import (QCheckBox, QDoubleSpinBox, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
                             QMainWindow, QPushButton, QSizePolicy, QSlider, QSplitter, QTableWidget,
                             QTableWidgetItem, QTreeWidget, QTreeWidgetItem, QVBoxLayout, QWidget)

from gui.network import ControlChannel, SubscriberWorker
from gui.decimate import WindowDecimator
from gui.plots import PANELS, PlotPanel, TimeAxis, assign_curves, stream_windows
from gui.replay import ReplayWorker
from gui.ringbuffer import StreamStore
from gui.scene3d import base_pose
from gui.signals import Batch, Pose
from gui.view3d import ModelLoader, RobotView
from sim.messages import TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATUS, TOPICS
from sim.network import Endpoints

NO_DATA, CONNECTED, STALE, DISCONNECTED = "no data", "connected", "stale", "disconnected"
_LINK_COLOURS = {NO_DATA: "#888888", CONNECTED: "#1a9c3a", STALE: "#d08a00", DISCONNECTED: "#d02020"}
#: message rates are averaged over this long, s
RATE_WINDOW_S = 1.0
STATUS_PERIOD_MS = 200
#: how often the recorder is asked what it records (its file, or nothing), ms
RECORDER_POLL_MS = 1000
#: the replay's seek slider moves in steps of this many seconds
SEEK_STEP_S = 0.1
_TABLE_COLUMNS = ("topic", "link", "rate (Hz)", "received", "seq gaps", "latency (ms)")
#: the robot's model is asked for again at most this often while the poses do not fit the one drawn, s
MODEL_RETRY_S = 2.0
#: what the link line shows of a second device's link (hw/status link.sensor, docs/dynamixel.md)
_SENSOR_LINK_KEYS = ("state", "port", "frames_ok", "crc_errors", "seq_gaps", "link_losses")


@dataclass
class DashboardOptions:
    endpoints: Endpoints
    window_s: float = 10.0             # visible time span, s
    replay: Path | None = None         # an MCAP recording to play instead of subscribing
    replay_speed: float = 1.0          # replay pace, times real time
    frame_rate_hz: float = 30.0        # plot redraw rate
    stale_after_s: float = 1.0         # no message for this long: the topic is stale
    disconnected_after_s: float = 3.0  # ... and for this long: disconnected
    control_timeout_s: float = 1.0     # REQ/REP reply deadline of the driver's and recorder's sockets
    buffer_samples: int = 50_000       # ring capacity per stream (20 s at 2.5 kHz)
    record_path: str = "runs/dashboard.mcap"   # what Record asks for (while the recorder records, its own file)
    #: the rig's measured-channel maps (firmware_interface.rigs.host.channel_maps) to draw with; None: a replay takes the recording's
    maps: list | None = None
    view3d: bool = True                # the 3-D pane of the robot (gui/view3d.py)
    #: None: the 3-D pane draws if an OpenGL context can be created, else says why in one line; False: that line
    opengl: bool | None = None


def link_state(age_s: float | None, stale_after_s: float, disconnected_after_s: float) -> str:
    """Connection state of a topic from the time since its last message (None: never received)."""
    if age_s is None:
        return NO_DATA
    if age_s < stale_after_s:
        return CONNECTED
    if age_s < disconnected_after_s:
        return STALE
    return DISCONNECTED


class RateMeter:
    """Messages per second of one counter, over the last :data:`RATE_WINDOW_S`."""

    def __init__(self):
        self._history: deque[tuple[float, int]] = deque()

    def update(self, now: float, count: int) -> float:
        self._history.append((now, count))
        while len(self._history) > 2 and now - self._history[1][0] >= RATE_WINDOW_S:
            self._history.popleft()
        first_time, first_count = self._history[0]
        return 0.0 if now <= first_time else (count - first_count) / (now - first_time)


class PaintCounter(QObject):
    """Counts the paint events of the widget it filters (the plots' viewport: what reached the screen)."""

    def __init__(self):
        super().__init__()
        self.paints = 0

    def eventFilter(self, _obj, event):
        if event.type() == QEvent.Paint:
            self.paints += 1
        return False


class StatusLine(QLabel):
    """A one-line status that takes the width its layout gives it and never asks for more: the text is cut at the
    label's edge and shown whole in the tooltip. A plain QLabel asks for its whole text's width, so a long status (the
    recorder's timeout names the endpoint twice: ~1900 px) widened the main window, which relaid out and repainted
    every plot."""

    def __init__(self, text: str = ""):
        super().__init__()
        self.setSizePolicy(QSizePolicy.Ignored, QSizePolicy.Preferred)
        self.setText(text)

    def setText(self, text: str) -> None:  # noqa: N802 (Qt's name)
        super().setText(text)
        self.setToolTip(text)


class DashboardWindow(QMainWindow):
    def __init__(self, options: DashboardOptions):
        super().__init__()
        self.options = options
        self.setWindowTitle("mms dash — " + (f"replay {options.replay}" if options.replay else "live"))
        self.store = StreamStore(options.buffer_samples)
        self.decimator = WindowDecimator()      # the complete bins of every stream, kept from frame to frame
        self.paused = False
        self.frames_drawn = 0
        self._layout_seen = (-1, None)
        self._last_drawn = None
        self._batch: Batch | None = None
        self._rates = {topic: RateMeter() for topic in TOPICS}
        self.rates: dict[str, float] = {topic: 0.0 for topic in TOPICS}
        self.replay_done = False
        self._source_error = ""
        self._counterparts: dict[tuple[str, str], tuple[str, str]] = {}
        self._recorder_asking = False      # a status request is out (the next one waits for its answer)
        self.recorder_path: str | None = None   # the file the recorder says it writes, None when it records nothing
        self._model_asked = -math.inf      # time.monotonic() of the last request for the robot's model
        self._model_loading = False        # a request or a build is under way
        self._pose_drawn: Pose | None = None

        self._build_widgets()
        self._start_source()
        self.driver = ControlChannel(options.endpoints.driver_control, options.control_timeout_s, self,
                                     options.endpoints.curve)
        self.driver.replied.connect(self._on_driver_reply)
        self.driver.failed.connect(self._on_driver_failure)
        self.recorder = ControlChannel(options.endpoints.recorder_control, options.control_timeout_s, self,
                                       options.endpoints.curve)
        self.recorder.replied.connect(self._on_recorder_reply)
        self.recorder.failed.connect(self._on_recorder_failure)
        self.model_loader = ModelLoader(self)
        self.model_loader.loaded.connect(self._on_model_loaded)
        self.model_loader.failed.connect(self._on_model_failure)
        self.sim_control = None
        drawing = self.robot_view is not None and self.robot_view.gl is not None
        if drawing and options.replay is None:   # the simulator says which robot it runs
            self.sim_control = ControlChannel(options.endpoints.sim_control, options.control_timeout_s, self,
                                              options.endpoints.curve)
            self.sim_control.replied.connect(self._on_sim_reply)
            self.sim_control.failed.connect(self._on_sim_failure)
        if drawing:
            self._ask_model()    # now: building it (numba, scipy imported) takes seconds the first data need not wait

        self.frame_timer = QTimer(self)
        self.frame_timer.setTimerType(Qt.PreciseTimer)
        self.frame_timer.timeout.connect(self.refresh_plots)
        # whole milliseconds rounded down: 60 Hz asked gives 16 ms (62.5 fps), not 17 ms (58.8 fps, below what was asked)
        self.frame_timer.start(max(1, int(1000.0 / options.frame_rate_hz)))
        self.status_timer = QTimer(self)
        self.status_timer.timeout.connect(self.refresh_status)
        self.status_timer.start(STATUS_PERIOD_MS)
        self.recorder_timer = QTimer(self)
        self.recorder_timer.timeout.connect(self.ask_recorder)
        if options.replay is None:
            self.ask_recorder()
            self.recorder_timer.start(RECORDER_POLL_MS)
        self._closed = False

    # ---- construction ------------------------------------------------------------------------------
    def _build_widgets(self) -> None:
        controls = QHBoxLayout()
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.pause_button.toggled.connect(self.set_paused)
        self.autoscale_box = QCheckBox("Autoscale Y")
        self.autoscale_box.setChecked(True)
        self.autoscale_box.toggled.connect(self.set_autoscale)
        self.window_spin = QDoubleSpinBox()
        self.window_spin.setRange(0.1, 600.0)
        self.window_spin.setDecimals(1)
        self.window_spin.setSuffix(" s")
        self.window_spin.setValue(self.options.window_s)
        self.window_spin.setToolTip("visible time span")
        self.record_path = QLineEdit(self.options.record_path)
        self.record_path.setMinimumWidth(180)
        self.record_path.setToolTip("path of the MCAP file the recorder writes")
        self.record_start = QPushButton("● Record")
        self.record_stop = QPushButton("■ Stop")
        self.record_start.clicked.connect(self.start_recording)
        self.record_stop.clicked.connect(self.stop_recording)
        self.record_label = StatusLine(f"recorder: asking {self.options.endpoints.recorder_control}…")
        self.estop_button = QPushButton("E-STOP")
        self.estop_button.setMinimumSize(170, 56)
        font = QFont()
        font.setPointSize(20)
        font.setBold(True)
        self.estop_button.setFont(font)
        self.estop_button.setStyleSheet(
            "QPushButton {background-color: #d01010; color: white; border: 3px solid #700000; border-radius: 8px}"
            "QPushButton:pressed {background-color: #900000}")
        self.estop_button.setToolTip(f"send {{'cmd': 'estop'}} to {self.options.endpoints.driver_control}")
        self.estop_button.clicked.connect(self.send_estop)
        self.reset_button = QPushButton("Reset e-stop")
        self.reset_button.clicked.connect(self.send_reset_estop)
        self.control_label = QLabel("driver: no command sent")
        self.control_label.setWordWrap(True)
        self.control_label.setMinimumWidth(150)
        view_row = QHBoxLayout()
        for widget in (self.pause_button, self.autoscale_box, QLabel("Window"), self.window_spin):
            view_row.addWidget(widget)
        view_row.addStretch(1)
        view_row.addWidget(self.control_label, 3)
        record_row = QHBoxLayout()
        for widget in (QLabel("Recording"), self.record_path, self.record_start, self.record_stop):
            record_row.addWidget(widget)
        record_row.addWidget(self.record_label, 1)
        rows = QVBoxLayout()
        rows.addLayout(view_row)
        if self.options.replay is None:
            rows.addLayout(record_row)
        else:
            # a replay commands nothing and records nothing: no E-STOP, no Record; a slider seeks instead
            for widget in (self.record_path, self.record_start, self.record_stop, self.record_label,
                           self.estop_button, self.reset_button, self.control_label):
                widget.hide()
            self.seek_slider = QSlider(Qt.Horizontal)
            self.seek_slider.setToolTip("seek: play the recording from this time")
            self.seek_slider.sliderReleased.connect(lambda: self.seek(self.seek_slider.value() * SEEK_STEP_S))
            seek_row = QHBoxLayout()
            seek_row.addWidget(QLabel("Seek"))
            seek_row.addWidget(self.seek_slider, 1)
            rows.addLayout(seek_row)
        controls.addLayout(rows, 1)
        stop_column = QVBoxLayout()
        stop_column.addWidget(self.estop_button)
        stop_column.addWidget(self.reset_button)
        controls.addLayout(stop_column)

        self.graphics = pg.GraphicsLayoutWidget()
        self.paint_counter = PaintCounter()     # paints of the plots: one per frame drawn (docs/dashboard.md)
        self.graphics.viewport().installEventFilter(self.paint_counter)
        self.panels: dict[str, PlotPanel] = {}
        for index, spec in enumerate(PANELS):
            plot = self.graphics.addPlot(row=index // 2, col=index % 2, axisItems={"bottom": TimeAxis()})
            last_row = index // 2 == (len(PANELS) - 1) // 2
            self.panels[spec.key] = PlotPanel(plot, spec, time_values=last_row)
        # Every plot shows the same time span. Not pyqtgraph's setXLink: it lines linked views up pixel by pixel
        # on screen, so a plot narrowed by its right-hand axis (the strain panels) ended earlier in time (0.9 s
        # at a 10 s window) than the plot above it; the range is copied instead.
        self._x_syncing = False
        for panel in self.panels.values():
            panel.plot.vb.sigXRangeChanged.connect(self._sync_x)

        self.status_table = QTableWidget(len(TOPICS), len(_TABLE_COLUMNS))
        self.status_table.setHorizontalHeaderLabels(_TABLE_COLUMNS)
        self.status_table.verticalHeader().setVisible(False)
        self.status_table.horizontalHeader().setSectionResizeMode(QHeaderView.Stretch)
        self.status_table.setEditTriggers(QTableWidget.NoEditTriggers)
        for row, topic in enumerate(TOPICS):
            self.status_table.setItem(row, 0, QTableWidgetItem(topic))
            for column in range(1, len(_TABLE_COLUMNS)):
                self.status_table.setItem(row, column, QTableWidgetItem(""))
        self.status_table.setFixedHeight(self.status_table.verticalHeader().defaultSectionSize()
                                         * (len(TOPICS) + 1) + 6)
        self.sim_label = QLabel("simulator: no sim/status yet")
        self.driver_label = QLabel("driver: no hw/status yet")
        self.link_label = QLabel("link: —")
        for label in (self.sim_label, self.driver_label, self.link_label):
            label.setTextInteractionFlags(Qt.TextSelectableByMouse)
            label.setWordWrap(True)
        status_text = QVBoxLayout()
        for label in (self.sim_label, self.driver_label, self.link_label):
            status_text.addWidget(label)
        status_row = QHBoxLayout()
        status_row.addWidget(self.status_table, 3)
        status_row.addLayout(status_text, 2)

        left = QWidget()
        left_layout = QVBoxLayout(left)
        left_layout.setContentsMargins(4, 4, 4, 4)
        left_layout.addLayout(controls)
        left_layout.addWidget(self.graphics, 1)
        left_layout.addLayout(status_row)

        self.channel_tree = QTreeWidget()
        self.channel_tree.setHeaderLabel("Channels (solid sim, dashed measured)")
        self.channel_tree.itemChanged.connect(self._on_channel_toggled)
        self._panel_items: dict[str, QTreeWidgetItem] = {}
        self._curve_items: dict[str, QTreeWidgetItem] = {}
        for spec in PANELS:
            item = QTreeWidgetItem([spec.title])
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable | Qt.ItemIsAutoTristate)
            item.setCheckState(0, Qt.Checked)
            self.channel_tree.addTopLevelItem(item)
            item.setExpanded(True)
            self._panel_items[spec.key] = item

        self.robot_view = RobotView(self.options.opengl) if self.options.view3d else None
        right = self.channel_tree
        if self.robot_view is not None:
            right = QSplitter(Qt.Vertical)
            right.addWidget(self.robot_view)
            right.addWidget(self.channel_tree)
            right.setSizes([500, 500])
        splitter = QSplitter(Qt.Horizontal)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(0, 5)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([1300, 300])
        self.setCentralWidget(splitter)
        self.resize(1600, 1000)

    def _start_source(self) -> None:
        self.source_thread = QThread()
        if self.options.replay is not None:
            self.source = ReplayWorker(self.options.replay, self.options.replay_speed, maps=self.options.maps)
            self.source.progress.connect(self._on_replay_progress)
            self.source.reset.connect(self._on_replay_reset)
            self.source.ended.connect(self._on_replay_ended)
        else:
            self.source = SubscriberWorker([self.options.endpoints.sim_pub, self.options.endpoints.driver_pub],
                                           origin_ns=time.time_ns(), curve=self.options.endpoints.curve,
                                           maps=self.options.maps or [])
        self.source.moveToThread(self.source_thread)
        self.source_thread.started.connect(self.source.run)
        self.source.batch_ready.connect(self.on_batch)
        self.source.failed.connect(self._on_source_failed)
        self.source.finished.connect(self._on_source_finished)
        self.source_thread.start()

    def _sync_x(self, view, x_range) -> None:
        """Copy one plot's time span to every other plot (a pan or zoom of one moves all)."""
        if self._x_syncing:
            return
        self._x_syncing = True
        try:
            for panel in self.panels.values():
                if panel.plot.vb is not view:
                    panel.plot.vb.setXRange(*x_range, padding=0)
        finally:
            self._x_syncing = False

    # ---- data --------------------------------------------------------------------------------------
    def on_batch(self, batch: Batch) -> None:
        for chunk in batch.chunks:
            self.store.append(chunk.key, chunk.names, chunk.times, chunk.values)
        self._batch = batch
        self._counterparts = batch.counterparts
        layout = (self.store.layout_version, tuple(sorted(batch.actuated.items())),
                  tuple(sorted(batch.counterparts.items())))
        if layout != self._layout_seen:
            self._layout_seen = layout
            self._relayout(batch.actuated)

    def _on_replay_reset(self) -> None:
        """A seek: the buffers start again from the recording's beginning."""
        self.store.clear()
        self.decimator = WindowDecimator()
        self._last_drawn = None
        self.replay_done = False

    def seek(self, offset_s: float) -> None:
        """Replay from ``offset_s`` seconds into the recording."""
        self.source.seek(offset_s)

    def _relayout(self, actuated: dict[str, bool]) -> None:
        specs = assign_curves(self.store.names, actuated, self._counterparts)
        self.channel_tree.blockSignals(True)
        for panel_key, panel in self.panels.items():
            mine = [s for s in specs if s.panel == panel_key]
            panel.remove_missing({s.ident for s in mine})
            for spec in mine:
                if spec.ident in self._curve_items:
                    continue
                curve = panel.add_curve(spec)
                item = QTreeWidgetItem([spec.label])
                item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
                item.setCheckState(0, Qt.Checked)
                item.setData(0, Qt.UserRole, spec.ident)
                pixmap = QPixmap(12, 12)
                pixmap.fill(QColor(*panel.colour_of(spec.colour_key)))
                item.setIcon(0, QIcon(pixmap))
                self._panel_items[panel_key].addChild(item)
                self._curve_items[spec.ident] = item
                curve.setVisible(True)
            for ident in [i for i in self._curve_items if i.startswith(panel_key + ":") and i not in panel.curves]:
                item = self._curve_items.pop(ident)
                self._panel_items[panel_key].removeChild(item)
        self.channel_tree.blockSignals(False)

    def _on_channel_toggled(self, item: QTreeWidgetItem, _column: int) -> None:
        ident = item.data(0, Qt.UserRole)
        if ident is None:
            for index in range(item.childCount()):
                self._on_channel_toggled(item.child(index), 0)
            return
        panel = self.panels[ident.split(":", 1)[0]]
        if ident in panel.curves:
            panel.set_curve_visible(ident, item.checkState(0) == Qt.Checked)

    def set_channel_visible(self, ident: str, visible: bool) -> None:
        """Tick or untick a channel in the selector (what a click on its box does)."""
        self._curve_items[ident].setCheckState(0, Qt.Checked if visible else Qt.Unchecked)

    # ---- drawing -----------------------------------------------------------------------------------
    def refresh_plots(self, force: bool = False) -> None:
        if self.paused:
            return
        t_end = self.store.latest_time()
        if t_end is None:
            return
        window_s = self.window_spin.value()
        drawn = (self.store.generation, window_s, self._layout_seen)
        if drawn == self._last_drawn and not force:
            return     # no new sample, same window: the picture would be the same
        self._last_drawn = drawn
        t_start = t_end - window_s
        needed = {spec.stream for panel in self.panels.values() for spec, curve in panel.curves.values()
                  if curve.isVisible()}
        # one min/max pair per pixel column of the widest plot: the envelope is exact, the work is per stream
        bins = int(max(panel.plot.vb.width() for panel in self.panels.values()))
        windows = stream_windows(self.store, needed, t_start, t_end, bins, self.decimator)
        # the range first: a range change makes every curve re-clip its data, so do it before, not after, setData.
        # Each view's span ends at the first whole pixel at or after the newest sample (within one pixel of it), so
        # that from frame to frame its curves move by whole pixels: their layers (gui.plots.CurveLayer) then move
        # the image drawn before and draw only the new columns. Views of different widths end up to a pixel apart.
        for panel in self.panels.values():
            width_px = panel.plot.vb.width()
            pixel_s = window_s / width_px if width_px >= 1 else 0.0
            end = math.ceil(t_end / pixel_s) * pixel_s if pixel_s > 0 else t_end
            panel.set_time_span(end - window_s, end)
        for panel in self.panels.values():
            panel.update(windows)
        # pyqtgraph moves its views to the new range lazily, when the scene is about to paint; the move marks every
        # curve changed once more, after the paint had started, and Qt paints the whole view a second time (two
        # paints per frame, measured). Moving them now lets the one paint of this frame include it.
        self.graphics.scene().prepareForPaint()
        self.refresh_robot()
        self.frames_drawn += 1

    # ---- the 3-D view -----------------------------------------------------------------------------------
    def refresh_robot(self) -> None:
        """Pose the 3-D view by the newest sim/state (and the measured servo angles); ask for the model first when
        the poses do not fit the one drawn (none yet, or the simulator runs another robot now)."""
        view = self.robot_view
        pose = None if self._batch is None else self._batch.pose
        if view is None or view.gl is None or pose is None or pose is self._pose_drawn:
            return     # nothing to draw on, nothing new to draw
        model = view.model
        if model is None or tuple(model.joint_names) != pose.joint_names:
            self._ask_model()
            return
        self._pose_drawn = pose
        view.set_pose(base_pose(pose.base_pos, pose.base_quat), pose.q, self._measured_q(pose))

    def _measured_q(self, pose: Pose) -> np.ndarray | None:
        """The simulated joint positions with the measured servo angles in place of the joints they drive (rig maps,
        else servos named as joints), or None when nothing measured is connected or mapped."""
        buffer = self.store.buffers.get("hw.servo")
        if buffer is None or self.topic_link(TOPIC_HW_TELEMETRY) != CONNECTED:
            return None
        latest = buffer.latest()
        index = {name: k for k, name in enumerate(pose.joint_names)}
        measured = pose.q.copy()
        found = False
        for name, value in zip(self.store.names["hw.servo"], latest):
            joint = self._counterparts.get(("hw.servo", name), ("sim.q", name))[1]
            if joint in index and np.isfinite(value):
                measured[index[joint]] = value
                found = True
        return measured if found else None

    def _ask_model(self) -> None:
        if self._model_loading or time.monotonic() - self._model_asked < MODEL_RETRY_S:
            return
        self._model_asked = time.monotonic()
        self._model_loading = True
        if self.sim_control is not None:
            self.sim_control.request({"cmd": "get", "what": "config"})
            return
        from hil.validation.resim import load_config
        from gui.replay import recording_metadata

        replay = self.options.replay
        self.model_loader.load(lambda: load_config("recorded", recording_metadata(replay)))

    def _on_sim_reply(self, _request: dict, reply: dict) -> None:
        config, path = reply.get("config"), reply.get("path")
        if reply.get("ok") is not True or not isinstance(config, dict):
            self._on_model_failure(f"the simulator gave no config: {reply.get('error', 'no error given')}")
            return
        self.model_loader.load(lambda: (config, Path(path) if isinstance(path, str) else None))

    def _on_sim_failure(self, _request: dict, reason: str) -> None:
        self._on_model_failure(f"cannot ask the simulator for its robot: {reason}")

    def _on_model_loaded(self, model) -> None:
        self._model_loading = False
        self.robot_view.set_model(model)
        self._pose_drawn = None
        self.refresh_robot()

    def _on_model_failure(self, reason: str) -> None:
        self._model_loading = False
        if self.options.replay is not None:
            self._model_asked = math.inf    # a recording does not change: asking again would fail again
        self.robot_view.show_problem(f"robot model: {reason}")

    def set_paused(self, paused: bool) -> None:
        """Freeze the plots (data keeps being buffered; the plots can be zoomed and panned meanwhile)."""
        self.paused = paused
        self.pause_button.setText("Resume" if paused else "Pause")
        if not paused:
            self.refresh_plots(force=True)

    def set_autoscale(self, enabled: bool) -> None:
        for panel in self.panels.values():
            panel.set_autoscale(enabled)

    # ---- status ------------------------------------------------------------------------------------
    def topic_link(self, topic: str) -> str:
        batch = self._batch
        receipt = None if batch is None else batch.last_receipt.get(topic)
        age = None if receipt is None else time.monotonic() - receipt
        return link_state(age, self.options.stale_after_s, self.options.disconnected_after_s)

    def refresh_status(self) -> None:
        batch = self._batch
        now = time.monotonic()
        for row, topic in enumerate(TOPICS):
            state = self.topic_link(topic)
            received = 0 if batch is None else batch.received.get(topic, 0)
            rate = self._rates[topic].update(now, received)
            self.rates[topic] = rate if state in (CONNECTED, STALE) else 0.0
            latency = None if batch is None else batch.latency_s.get(topic)
            link_item = self.status_table.item(row, 1)
            link_item.setText(state)
            link_item.setForeground(QColor(_LINK_COLOURS[state]))
            self.status_table.item(row, 2).setText(f"{self.rates[topic]:.1f}")
            self.status_table.item(row, 3).setText(str(received))
            gaps = 0 if batch is None else batch.gaps.get(topic, 0)
            restarts = 0 if batch is None else batch.restarts.get(topic, 0)
            self.status_table.item(row, 4).setText(f"{gaps}" + (f" ({restarts} restarts)" if restarts else ""))
            self.status_table.item(row, 5).setText("" if latency is None else f"{latency * 1e3:.1f}")
        if batch is None:
            return
        sim = batch.status.get(TOPIC_SIM_STATUS)
        if sim is not None:
            step = sim.get("step_us", {})
            self.sim_label.setText(
                f"simulator: robot {sim.get('robot', '?')}, {sim.get('state')} ({sim.get('mode')}), "
                f"real-time factor {sim.get('rtf', float('nan')):.3f}, t = {sim.get('t', float('nan')):.3f} s, "
                f"step p99 {step.get('p99', float('nan')):.0f} µs, deadline misses {sim.get('deadline_misses')}"
                + (f", reason: {sim['reason']}" if sim.get("reason") else ""))
        hw = batch.status.get(TOPIC_HW_STATUS)
        if hw is not None:
            estop = "e-stop clear"
            if hw.get("estop"):
                sources = ", ".join(hw.get("estop_sources") or [])
                estop = "E-STOP ACTIVE" + (f" ({sources})" if sources else "")
            self.driver_label.setText(f"driver: {hw.get('lifecycle')}, rig {hw.get('rig')}, {estop}, "
                                      f"watchdog {hw.get('watchdog')}"
                                      + (f", error: {hw['error']}" if hw.get("error") else ""))
            self.driver_label.setStyleSheet("color: #d02020; font-weight: bold" if hw.get("estop") else "")
            link = hw.get("link", {})
            # the flat counters (state, frames, errors, gaps); nested maps (the device's own) stay out of the way
            counters = ", ".join(f"{k} {v}" for k, v in link.items() if not isinstance(v, (dict, list)))
            sensor = link.get("sensor")
            if isinstance(sensor, dict):          # a rig with two devices: the sensor microcontroller's link
                counters += "; sensors: " + ", ".join(f"{k} {sensor[k]}" for k in _SENSOR_LINK_KEYS if k in sensor)
            self.link_label.setText(f"link: {counters or '—'}; malformed messages dropped: {batch.malformed}")
        else:
            self.link_label.setText(f"link: — ; malformed messages dropped: {batch.malformed}")

    def _on_replay_progress(self, replayed_s: float, total_s: float) -> None:
        if not self.replay_done:
            self.statusBar().showMessage(f"replay {self.options.replay}: {replayed_s:.1f} / {total_s:.1f} s")
        if total_s == total_s and not self.seek_slider.isSliderDown():   # NaN: a file without statistics
            self.seek_slider.setMaximum(math.ceil(total_s / SEEK_STEP_S))
            self.seek_slider.setValue(int(replayed_s / SEEK_STEP_S))

    def _on_replay_ended(self) -> None:
        self.replay_done = True
        self.statusBar().showMessage(f"replay of {self.options.replay} finished (seek to play it again)")

    def _on_source_failed(self, message: str) -> None:
        self._source_error = message
        self.statusBar().showMessage(message)
        self.statusBar().setStyleSheet("color: #d02020; font-weight: bold")

    def _on_source_finished(self) -> None:
        if self.options.replay is not None and not self._source_error:
            self.replay_done = True

    # ---- controls ----------------------------------------------------------------------------------
    def send_estop(self) -> None:
        self.control_label.setText("E-STOP sent, waiting for the driver…")
        self.control_label.setStyleSheet("color: #d08a00; font-weight: bold")
        self.driver.request({"cmd": "estop"})

    def send_reset_estop(self) -> None:
        self.control_label.setText("reset e-stop sent…")
        self.control_label.setStyleSheet("")
        self.driver.request({"cmd": "reset_estop"})

    def _on_driver_reply(self, request: dict, reply: dict) -> None:
        command = request.get("cmd")
        if reply.get("ok") is True:
            text = "E-STOP CONFIRMED by the driver" if command == "estop" else f"driver: {command} done"
            style = "color: white; background-color: #d02020; font-weight: bold" if command == "estop" else \
                "color: #1a9c3a; font-weight: bold"
        else:
            text = f"driver REFUSED {command}: {reply.get('error', 'no error given')}"
            style = "color: #d02020; font-weight: bold"
        self.control_label.setText(text)
        self.control_label.setStyleSheet(style)

    def _on_driver_failure(self, request: dict, reason: str) -> None:
        command = request.get("cmd")
        prefix = "E-STOP NOT CONFIRMED" if command == "estop" else f"{command} failed"
        self.control_label.setText(f"{prefix}: {reason}")
        self.control_label.setStyleSheet("color: #d02020; font-weight: bold")

    def start_recording(self) -> None:
        path = self.record_path.text().strip()
        if not path:
            self.record_label.setText("recorder: give a file path first")
            return
        self.record_label.setText("recorder: start sent…")
        self.recorder.request({"cmd": "start", "path": path})

    def stop_recording(self) -> None:
        self.record_label.setText("recorder: stop sent…")
        self.recorder.request({"cmd": "stop"})

    def ask_recorder(self) -> None:
        """Ask the recorder what it records (one request out at a time: an absent recorder costs one timeout)."""
        if not self._recorder_asking:
            self._recorder_asking = True
            self.recorder.request({"cmd": "status"})

    def _on_recorder_reply(self, request: dict, reply: dict) -> None:
        command = request.get("cmd")
        if command == "status":
            self._recorder_asking = False
            if reply.get("ok") is True:
                self._show_recorder_file(reply.get("path") if reply.get("recording") else None)
            return
        if reply.get("ok") is True:
            self.recorder_path = reply.get("path") if command == "start" else None
            detail = f" {reply.get('path') or request['path']}" if command == "start" else ""
            self.record_label.setText(f"recorder: {'recording' if command == 'start' else 'stopped'}{detail}")
            self.record_label.setStyleSheet("color: #d02020; font-weight: bold" if command == "start" else "")
        else:
            self.record_label.setText(f"recorder refused {command}: {reply.get('error', 'no error given')}")
            self.record_label.setStyleSheet("color: #d02020")

    def _show_recorder_file(self, path: str | None) -> None:
        """What the recorder says it writes: its own file, not the path typed for the next Record."""
        self.recorder_path = path if isinstance(path, str) else None
        if self.recorder_path is not None:
            self.record_label.setText(f"recorder: recording {self.recorder_path}")
            self.record_label.setStyleSheet("color: #d02020; font-weight: bold")
            if not self.record_path.hasFocus():
                self.record_path.setText(self.recorder_path)
        else:
            self.record_label.setText("recorder: not recording")
            self.record_label.setStyleSheet("")

    def _on_recorder_failure(self, request: dict, reason: str) -> None:
        if request.get("cmd") == "status":
            self._recorder_asking = False
            self.recorder_path = None
            self.record_label.setText(f"recorder: none at {self.options.endpoints.recorder_control} ({reason})")
            self.record_label.setStyleSheet("color: #888888")
            return
        self.record_label.setText(f"recorder {request.get('cmd')} failed: {reason}")
        self.record_label.setStyleSheet("color: #d02020")

    # ---- shutdown ----------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop the timers and every thread; safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.frame_timer.stop()
        self.status_timer.stop()
        self.recorder_timer.stop()
        self.source.stop()
        self.source_thread.quit()
        self.source_thread.wait()
        self.driver.shutdown()
        self.recorder.shutdown()
        if self.sim_control is not None:
            self.sim_control.shutdown()

    def closeEvent(self, event) -> None:
        self.shutdown()
        super().closeEvent(event)
