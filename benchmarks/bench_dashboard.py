"""Dashboard redraw rate and GUI-thread CPU per frame: 32 channels at 1 kHz in a 10 s window (target >= 60 fps).

The window is the real one (offscreen Qt): samples enter through ``DashboardWindow.on_batch`` -- the GUI side of
the worker path; decoding runs on the subscriber's thread and is not part of it -- after the ring buffers are
pre-filled with a full window. The baseline, measured in the same run on the same data and window size, is a bare
pyqtgraph layout: the same six plots and 32 ``PlotDataItem`` curves, each handed its whole 10 s window (10 000
points) every frame with pyqtgraph's own peak downsampling (``setDownsampling(auto=True, method="peak")``,
``setClipToView(True)``, ``skipFiniteCheck=True``): what pyqtgraph does for such plots by itself.

Two measurements:
- GUI-thread CPU per frame (``time.thread_time``, less sensitive to other processes than the frame rate): feed
  1/60 s of samples, recompute the plots, and let Qt's event loop paint what it schedules (all its paints counted);
  the median of ``--frames`` frames, repeated ``--runs`` times alternating dashboard and baseline, with the spread.
- the frame rate of the real event loop (frame timer at ``--fps``, samples fed at 100 Hz), and the process's CPU.
Plus the curves drawn by their views' scrolled layers (gui.plots.CurveLayer) against each curve drawing its own
polyline at every paint, in one window in alternating blocks of frames (both see the same load), the window cut + peak
decimation alone (from scratch vs incremental), and with ``--profile`` the GUI thread's cProfile (CPU time) over
``--frames`` frames.

OpenGL (:data:`RENDER_MODES`): the plots painted by Qt's raster engine, through pyqtgraph's ``useOpenGL`` viewport with
the layers' images, and through it with pyqtgraph's own OpenGL line strips, in one process with an OpenGL context
(here, where the offscreen platform has none, a child process with ``gui.view3d.HEADLESS_GL_ENV``: Mesa's llvmpipe, a
software rasteriser, whose threads count: process CPU time), in alternating blocks of frames, each frame fed,
recomputed and painted (the OpenGL one waited for with ``glFinish``).

The 3-D view (gui/view3d.py): its CPU per frame -- pose the robot from one sim/state (forward kinematics, the
solids' transforms) and render the pane into its framebuffer, read back (``grabFramebuffer``) -- measured in a
process of its own with an OpenGL context (``gui.view3d.HEADLESS_GL_ENV`` where this one has none: Mesa's llvmpipe,
whose rasteriser threads count: process CPU time), for the flapper and RayBot, at the pane's size in the
dashboard's window; added to the dashboard's frame above, it gives the frame rate with the 3-D view on.

Usage: python benchmarks/bench_dashboard.py [--seconds 5] [--fps 60] [--runs 3] [--frames 200] [--profile]
       [--view3d-frames 200]
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
import pyqtgraph as pg  # noqa: E402
from PyQt5.QtCore import QCoreApplication, Qt, QTimer  # noqa: E402
from PyQt5.QtGui import QOpenGLContext  # noqa: E402
from PyQt5.QtWidgets import QApplication  # noqa: E402

from gui.decimate import WindowDecimator  # noqa: E402
from gui.plots import PANELS, stream_windows  # noqa: E402
from gui.ringbuffer import StreamStore  # noqa: E402
from gui.signals import Batch, Chunk  # noqa: E402
from gui.window import DashboardOptions, DashboardWindow, PaintCounter  # noqa: E402
from sim.network import Endpoints  # noqa: E402

SAMPLE_RATE_HZ = 1000.0
WINDOW_S = 10.0
FEED_HZ = 100.0
TARGET_FPS = 60.0
#: the goal's CPU budget: 60 frames/s within this share of one core (issue #25)
CORE_SHARE_GOAL = 0.30
WINDOW_SIZE = (1600, 1000)
#: the 3-D view's target beside the curves (issue #23)
VIEW3D_TARGET_FPS = 30.0
ROBOTS = Path(__file__).resolve().parents[1] / "configs" / "robots"
VIEW3D_ROBOTS = ("flapper", "raybot")


def unused_endpoints() -> Endpoints:
    # Ports nobody publishes on: the live subscriber idles, the benchmark feeds the window itself.
    return Endpoints(sim_pub="tcp://127.0.0.1:45556", sim_control="tcp://127.0.0.1:45557",
                     driver_pub="tcp://127.0.0.1:45558", driver_control="tcp://127.0.0.1:45559",
                     recorder_control="tcp://127.0.0.1:45560")


def make_batch(n_channels: int, t0: float, count: int) -> Batch:
    """``count`` samples from ``t0`` of ``n_channels`` curves: half simulated joints (half of them actuated,
    torque; half passive, strain), half measured counterparts (load cells and strain gauges)."""
    half = max(n_channels // 2, 1)
    joints = [f"j{i}" for i in range(half)]
    actuated = {name: i < half // 2 or half == 1 for i, name in enumerate(joints)}
    times = t0 + np.arange(count) / SAMPLE_RATE_HZ                              # (count,) s
    phase = 2 * np.pi * 3.0 * times[:, None] + np.arange(half)[None, :]           # (count, half) rad
    sim = np.sin(phase)
    measured = sim + 0.05 * np.random.default_rng(int(t0 * 1000)).standard_normal(sim.shape)
    names = tuple(joints)
    loads = tuple(j for j in joints if actuated[j])
    gauges = tuple(j for j in joints if not actuated[j])
    load_columns = [i for i, j in enumerate(joints) if actuated[j]]
    gauge_columns = [i for i, j in enumerate(joints) if not actuated[j]]
    chunks = [Chunk("sim.tau", names, times, sim), Chunk("sim.strain", names, times, sim)]
    if n_channels > 1:
        if loads:
            chunks.append(Chunk("hw.load", loads, times, measured[:, load_columns]))
        if gauges:
            chunks.append(Chunk("hw.strain", gauges, times, measured[:, gauge_columns]))
    return Batch(chunks=chunks, status={}, received={}, gaps={}, restarts={}, malformed=0, latency_s={},
                 last_receipt={}, actuated=actuated)




class BarePlots:
    """The baseline: six pyqtgraph plots, 32 ``PlotDataItem``s handed their whole window each frame, pyqtgraph's
    own peak downsampling and clipping; same ``on_batch`` / ``refresh_plots`` / ``graphics`` as the window."""

    def __init__(self, frame_rate_hz: float):
        self.graphics = pg.GraphicsLayoutWidget()
        self.graphics.resize(*WINDOW_SIZE)
        self.plots = [self.graphics.addPlot(row=i // 2, col=i % 2) for i in range(len(PANELS))]
        self.store = StreamStore(int(2 * WINDOW_S * SAMPLE_RATE_HZ))
        self.curves: dict[tuple[str, int], pg.PlotDataItem] = {}
        self.frames_drawn = 0
        self.frame_timer = QTimer()
        self.frame_timer.timeout.connect(self.refresh_plots)
        self.frame_timer.start(max(1, int(1000.0 / frame_rate_hz)))

    def show(self) -> None:
        self.graphics.show()

    def on_batch(self, batch: Batch) -> None:
        for chunk in batch.chunks:
            self.store.append(chunk.key, chunk.names, chunk.times, chunk.values)
            for column in range(len(chunk.names)):
                if (chunk.key, column) not in self.curves:
                    curve = pg.PlotDataItem(pen=pg.intColor(len(self.curves)), skipFiniteCheck=True)
                    curve.setDownsampling(auto=True, method="peak")
                    curve.setClipToView(True)
                    self.plots[len(self.curves) % len(self.plots)].addItem(curve)
                    self.curves[(chunk.key, column)] = curve

    def refresh_plots(self) -> None:
        t_end = self.store.latest_time()
        for plot in self.plots:
            plot.setXRange(t_end - WINDOW_S, t_end, padding=0)
        for (key, column), curve in self.curves.items():
            times, values = self.store.buffers[key].window(t_end - WINDOW_S, t_end)
            curve.setData(times, values[:, column])
        self.frames_drawn += 1

    def close(self) -> None:
        self.frame_timer.stop()
        self.graphics.close()


def open_view(kind: str, fps: float):
    """The dashboard window (``kind == "dashboard"``) or the baseline, shown, at ``fps``."""
    if kind == "baseline":
        view = BarePlots(fps)
    else:
        options = DashboardOptions(endpoints=unused_endpoints(), window_s=WINDOW_S, frame_rate_hz=fps,
                                   buffer_samples=int(2 * WINDOW_S * SAMPLE_RATE_HZ))
        view = DashboardWindow(options)
        view.resize(*WINDOW_SIZE)
    view.show()
    return view


def close_view(app: QApplication, view) -> None:
    view.close()
    if isinstance(view, DashboardWindow):
        view.shutdown()
    app.processEvents()


def measure(app: QApplication, kind: str, n_channels: int, seconds: float, fps: float) -> dict[str, float]:
    """The frame rate of the real event loop: frame timer at ``fps``, 1 kHz samples fed at :data:`FEED_HZ`."""
    view = open_view(kind, fps)
    counter = PaintCounter()
    view.graphics.viewport().installEventFilter(counter)
    view.on_batch(make_batch(n_channels, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))   # a full window first
    state = {"t": WINDOW_S, "fed": 0}
    start_wall = time.monotonic()

    def feed():
        # As many samples as wall time says are due, so the input rate stays 1 kHz even if a tick is late.
        due = int((time.monotonic() - start_wall) * SAMPLE_RATE_HZ) - state["fed"]
        if due > 0:
            view.on_batch(make_batch(n_channels, state["t"], due))
            state["t"] += due / SAMPLE_RATE_HZ
            state["fed"] += due

    feeder = QTimer()
    feeder.timeout.connect(feed)
    feeder.start(int(1000 / FEED_HZ))
    for _ in range(3):          # settle: first layouts, first paints
        app.processEvents()
    frames0, paints0 = view.frames_drawn, counter.paints
    cpu0, wall0 = time.process_time(), time.monotonic()
    deadline = wall0 + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.001)       # benchmark event loop pacing, not a wait for a condition
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    feeder.stop()
    result = {"fps": (view.frames_drawn - frames0) / wall, "paints_per_s": (counter.paints - paints0) / wall,
              "cpu_percent": 100.0 * cpu / wall, "input_rate_hz": state["fed"] / (time.monotonic() - start_wall)}
    close_view(app, view)
    return result


#: event-loop passes run per frame at most, until one paints nothing more (a repaint may schedule another)
MAX_PASSES_PER_FRAME = 5


def settle(app: QApplication, counter: PaintCounter) -> None:
    """Run the event loop until a pass paints nothing: every paint this frame caused is counted and timed."""
    for _ in range(MAX_PASSES_PER_FRAME):
        before = counter.paints
        app.processEvents()
        if counter.paints == before:
            return


def frame_cost(app: QApplication, kind: str, n_channels: int = 32, frames: int = 200,
               profile: cProfile.Profile | None = None) -> dict[str, float]:
    """GUI-thread CPU per frame: feed 1/60 s of samples, recompute the plots, and let the event loop paint what it
    scheduled (every paint counted), measured synchronously: robust to other processes, unlike the frame rate."""
    view = open_view(kind, 1.0)   # its own timer almost never fires: the frames are driven here
    counter = PaintCounter()
    view.graphics.viewport().installEventFilter(counter)
    app.processEvents()
    view.on_batch(make_batch(n_channels, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))
    for _ in range(3):
        app.processEvents()
    block = int(SAMPLE_RATE_HZ / TARGET_FPS)
    batches = [make_batch(n_channels, WINDOW_S + i * block / SAMPLE_RATE_HZ, block) for i in range(frames)]
    costs, paints0 = [], counter.paints
    if profile is not None:
        profile.enable()
    for batch in batches:
        start = time.thread_time()
        view.on_batch(batch)
        view.refresh_plots()
        settle(app, counter)
        costs.append(time.thread_time() - start)
    if profile is not None:
        profile.disable()
    paints = (counter.paints - paints0) / frames
    close_view(app, view)
    return {"ms": 1e3 * float(np.median(costs)), "paints_per_frame": paints}


def layer_cost(app: QApplication, frames: int = 200, block: int = 25) -> dict[str, float]:
    """GUI-thread CPU per frame with the curves drawn by their views' scrolled layers (``gui.plots.CurveLayer``) and
    with each curve drawing its own polyline at every paint, in one window, alternating blocks of ``block`` frames
    (the first frame of a block, a whole redraw, left out): both modes see the same load. ms, medians."""
    view = open_view("dashboard", 1.0)
    counter = PaintCounter()
    view.graphics.viewport().installEventFilter(counter)
    app.processEvents()
    view.on_batch(make_batch(32, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))
    for _ in range(3):
        app.processEvents()
    step = int(SAMPLE_RATE_HZ / TARGET_FPS)
    batches = [make_batch(32, WINDOW_S + i * step / SAMPLE_RATE_HZ, step) for i in range(2 * frames)]
    curves = [(curve, curve.layer) for panel in view.panels.values() for _spec, curve in panel.curves.values()]
    costs = {"layer": [], "polylines": []}
    for first in range(0, len(batches), block):
        mode = "layer" if (first // block) % 2 == 0 else "polylines"
        for curve, layer in curves:
            curve.layer = layer if mode == "layer" else None
        for index, batch in enumerate(batches[first:first + block]):
            start = time.thread_time()
            view.on_batch(batch)
            view.refresh_plots()
            settle(app, counter)
            if index:
                costs[mode].append(time.thread_time() - start)
    close_view(app, view)
    return {mode: 1e3 * float(np.median(values)) for mode, values in costs.items()}


#: the plots' renderings compared in one process with an OpenGL context, in alternating blocks of frames: Qt's raster
#: engine; pyqtgraph's ``useOpenGL`` viewport (Qt's OpenGL paint engine) with the curves' scrolled layer images
#: (gui.plots.CurveLayer) uploaded as textures; the same viewport with each curve drawn by pyqtgraph's own OpenGL line
#: strip (``PlotCurveItem.paintGL``: a vertex buffer per curve, solid lines only)
RENDER_MODES = ("raster", "opengl", "opengl, pyqtgraph's GL curves")


def render_window(mode: str):
    """A dashboard window (no 3-D pane) that renders its plots by ``mode`` (:data:`RENDER_MODES`), laid out (never
    shown: a headless OpenGL platform has no window surface) and holding a full window of 32 curves."""
    from gui.view3d import freeze_scroll_bars

    window = DashboardWindow(DashboardOptions(endpoints=unused_endpoints(), window_s=WINDOW_S, frame_rate_hz=1.0,
                                              buffer_samples=int(2 * WINDOW_S * SAMPLE_RATE_HZ), view3d=False))
    window.resize(*WINDOW_SIZE)
    freeze_scroll_bars(window)
    if mode != "raster":
        window.graphics.useOpenGL(True)
    window.grab()
    window.on_batch(make_batch(32, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))
    if mode == RENDER_MODES[2]:
        for panel in window.panels.values():
            for _spec, curve in panel.curves.values():
                curve.layer = None
    return window


def render_plots(window, target) -> None:
    """Paint the plots' viewport as a live repaint does: the raster one into ``target`` (a QImage of its size, as the
    window's backing store), the OpenGL one into its framebuffer object, waited for (``glFinish``: llvmpipe rasterises
    when the commands are flushed, on threads of its own)."""
    from PyQt5.QtGui import QPaintEvent
    from PyQt5.QtWidgets import QOpenGLWidget, QWidget

    viewport = window.graphics.viewport()
    if isinstance(viewport, QOpenGLWidget):
        QApplication.sendEvent(viewport, QPaintEvent(viewport.rect()))
        viewport.makeCurrent()
        viewport.getFunctions().glFinish()
        viewport.doneCurrent()
    else:
        QWidget.render(viewport, target)


def render_cost(frames: int, block: int = 25) -> dict[str, dict[str, float]]:
    """CPU (process: llvmpipe's threads count) and wall time per frame -- feed 1/60 s, recompute, paint the plots --
    of each of :data:`RENDER_MODES`, in this process (it must have an OpenGL context), in alternating blocks of
    ``block`` frames (the first of a block left out), ms, medians; and the OpenGL framebuffer's read-back, which a
    screenshot needs and a live frame does not."""
    from PyQt5.QtGui import QImage

    windows = {mode: render_window(mode) for mode in RENDER_MODES}
    size = windows["raster"].graphics.viewport().size()
    target = QImage(size, QImage.Format_ARGB32_Premultiplied)
    step = int(SAMPLE_RATE_HZ / TARGET_FPS)
    t = {mode: WINDOW_S for mode in RENDER_MODES}
    cpu = {mode: [] for mode in RENDER_MODES}
    wall = {mode: [] for mode in RENDER_MODES}
    for first in range(0, len(RENDER_MODES) * frames, block):
        mode = RENDER_MODES[(first // block) % len(RENDER_MODES)]
        window = windows[mode]
        for index in range(block):
            batch = make_batch(32, t[mode], step)
            t[mode] += step / SAMPLE_RATE_HZ
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            window.on_batch(batch)
            window.refresh_plots()
            render_plots(window, target)
            if index:
                cpu[mode].append(time.process_time() - start_cpu)
                wall[mode].append(time.perf_counter() - start_wall)
    viewport = windows["opengl"].graphics.viewport()
    read_back = []
    for _ in range(20):
        start = time.process_time()
        viewport.grabFramebuffer()
        read_back.append(time.process_time() - start)
    for window in windows.values():
        window.shutdown()
    result = {mode: {"cpu_ms": 1e3 * float(np.median(cpu[mode])), "wall_ms": 1e3 * float(np.median(wall[mode])),
                     "frames": len(cpu[mode])} for mode in RENDER_MODES}
    result["read back"] = {"cpu_ms": 1e3 * float(np.median(read_back)),
                           "size": f"{size.width()}x{size.height()}"}
    return result


def opengl_available() -> bool:
    """True when this platform can create an OpenGL context (the offscreen platform usually cannot)."""
    return QOpenGLContext().create()


def decimation_cost(n_channels: int = 32, frames: int = 200, bins: int = 1289) -> dict[str, float]:
    """CPU per frame of cutting and peak-decimating every stream's window: from scratch (a new decimator each
    frame, as before) and incrementally (one decimator kept across frames), on the same data, ms (median)."""
    store = StreamStore(int(2 * WINDOW_S * SAMPLE_RATE_HZ))
    for chunk in make_batch(n_channels, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)).chunks:
        store.append(chunk.key, chunk.names, chunk.times, chunk.values)
    kept, t, block = WindowDecimator(), WINDOW_S, int(SAMPLE_RATE_HZ / TARGET_FPS)
    costs = {"scratch": [], "incremental": []}
    for _ in range(frames):
        for chunk in make_batch(n_channels, t, block).chunks:
            store.append(chunk.key, chunk.names, chunk.times, chunk.values)
        t += block / SAMPLE_RATE_HZ
        for name, decimator in (("scratch", WindowDecimator()), ("incremental", kept)):
            start = time.thread_time()
            stream_windows(store, set(store.buffers), t - WINDOW_S, t, bins, decimator)
            costs[name].append(time.thread_time() - start)
    return {name: 1e3 * float(np.median(values)) for name, values in costs.items()}


def view3d_cost(frames: int) -> dict[str, dict[str, float]]:
    """The 3-D view's CPU per frame (pose + render + read back), ms, per robot: process CPU time (llvmpipe renders
    on threads of its own) and wall time, medians; run in this process (it must have an OpenGL context)."""
    from gui.view3d import RobotView, freeze_scroll_bars
    from sim.robots import load_robot

    window = DashboardWindow(DashboardOptions(endpoints=unused_endpoints()))
    window.resize(*WINDOW_SIZE)
    freeze_scroll_bars(window)
    window.grab()             # lays the window out (not shown: headless, no window surface): the pane's size
    size = window.robot_view.gl.size()
    window.shutdown()
    results = {}
    for name in VIEW3D_ROBOTS:
        model = load_robot(ROBOTS / f"{name}.toml")
        view = RobotView()
        view.resize(size)
        view.set_model(model)
        base = np.eye(4)
        view.set_pose(base, model.q_rest)
        view.gl.grabFramebuffer()          # compiles the shaders, uploads the meshes: not a frame
        cpu, wall = [], []
        for i in range(frames):
            q = model.q_rest + 0.3 * np.sin(2 * np.pi * i / TARGET_FPS + np.arange(model.n))
            start_cpu, start_wall = time.process_time(), time.perf_counter()
            view.set_pose(base, q)
            view.gl.grabFramebuffer()
            cpu.append(time.process_time() - start_cpu)
            wall.append(time.perf_counter() - start_wall)
        results[name] = {"cpu_ms": 1e3 * float(np.median(cpu)), "wall_ms": 1e3 * float(np.median(wall)),
                         "bodies": len(view.shapes), "size": f"{size.width()}x{size.height()}"}
    return results


def headless_child(flag: str, frames_option: str, frames: int) -> dict | None:
    """This benchmark's ``flag`` part (``--view3d-child``: :func:`view3d_cost`; ``--render-child``:
    :func:`render_cost`) in a child process with ``HEADLESS_GL_ENV``, its JSON result; None when that has no OpenGL
    either (its error output is printed)."""
    import json

    from gui.view3d import HEADLESS_GL_ENV

    child = subprocess.run([sys.executable, __file__, flag, frames_option, str(frames)],
                           env={**os.environ, **HEADLESS_GL_ENV}, capture_output=True, text=True)
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        print(child.stderr[-2000:], file=sys.stderr)
        return None
    return json.loads(lines[-1])


def spread(values: list[float]) -> str:
    return f"median {np.median(values):.2f}, {min(values):.2f}-{max(values):.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured duration of the frame-rate runs, s")
    parser.add_argument("--fps", type=float, default=TARGET_FPS, help="requested redraw rate, Hz")
    parser.add_argument("--runs", type=int, default=3, help="repetitions of the CPU-per-frame measurement")
    parser.add_argument("--frames", type=int, default=200, help="frames per CPU-per-frame measurement")
    parser.add_argument("--profile", action="store_true", help="print the GUI thread's profile (CPU time)")
    parser.add_argument("--view3d-frames", type=int, default=200, help="frames of the 3-D view's measurement")
    parser.add_argument("--view3d-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--render-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    QCoreApplication.setAttribute(Qt.AA_ShareOpenGLContexts)    # as gui/dashboard.py: pyqtgraph's shaders, once
    app = QApplication.instance() or QApplication([])
    if args.view3d_child:
        import json

        print(json.dumps(view3d_cost(args.view3d_frames)))
        return 0
    if args.render_child:
        import json

        print(json.dumps(render_cost(args.frames)))
        return 0
    with open("/proc/loadavg") as file:
        load_before = file.read().split()[0]
    print(f"32 curves fed at {SAMPLE_RATE_HZ:.0f} Hz each, window {WINDOW_S:.0f} s ({WINDOW_S * SAMPLE_RATE_HZ:.0f} "
          f"samples per curve), {WINDOW_SIZE[0]}x{WINDOW_SIZE[1]} window, {app.platformName()} platform")
    print("GUI-thread CPU per frame (feed 1/60 s + recompute + the event loop's paints), ms, median of "
          f"{args.frames} frames per run ({max(args.frames // 4, 20)} for the baseline):")
    costs = {"dashboard": [], "baseline": []}
    paints = {"dashboard": [], "baseline": []}
    for run in range(args.runs):
        for kind in ("baseline", "dashboard"):
            # the baseline costs about ten times more per frame: a quarter of the frames give a steady median
            cost = frame_cost(app, kind, frames=args.frames if kind == "dashboard" else max(args.frames // 4, 20))
            costs[kind].append(cost["ms"])
            paints[kind].append(cost["paints_per_frame"])
        print(f"  run {run + 1}: dashboard {costs['dashboard'][-1]:.2f} ms ({paints['dashboard'][-1]:.2f} paints), "
              f"baseline (bare pyqtgraph) {costs['baseline'][-1]:.2f} ms ({paints['baseline'][-1]:.2f} paints), "
              f"ratio {costs['dashboard'][-1] / costs['baseline'][-1]:.2f}")
    ratios = [d / b for d, b in zip(costs["dashboard"], costs["baseline"])]
    dashboard_ms = float(np.median(costs["dashboard"]))
    print(f"dashboard: {spread(costs['dashboard'])} ms/frame -> {1e3 / dashboard_ms:.0f} frames/s on one free core; "
          f"at {TARGET_FPS:.0f} fps {dashboard_ms * TARGET_FPS / 10:.0f} % of a core "
          f"(goal <= {100 * CORE_SHARE_GOAL:.0f} %)")
    print(f"baseline:  {spread(costs['baseline'])} ms/frame")
    print(f"dashboard / baseline CPU per frame: {spread(ratios)}")
    for kind in ("baseline", "dashboard"):
        result = measure(app, kind, 32, args.seconds, args.fps)
        print(f"event loop, {kind:>9}: requested {args.fps:.0f} Hz, {result['fps']:.1f} frames/s, "
              f"{result['paints_per_s']:.1f} paints/s, input {result['input_rate_hz']:.0f} Hz/ch, "
              f"process CPU {result['cpu_percent']:.0f} % of one core")
    layers = layer_cost(app, frames=args.frames)
    print(f"curves drawn by scrolled layers {layers['layer']:.2f} ms/frame, each curve's polyline at every paint "
          f"{layers['polylines']:.2f} ms/frame (one window, alternating blocks): layers / polylines "
          f"{layers['layer'] / layers['polylines']:.2f}")
    decimation = decimation_cost()
    print(f"window cut + peak decimation of 32 channels per frame: from scratch {decimation['scratch']:.2f} ms, "
          f"incremental {decimation['incremental']:.2f} ms "
          f"({decimation['scratch'] / decimation['incremental']:.1f}x less)")
    render = (render_cost(args.frames) if opengl_available()
              else headless_child("--render-child", "--frames", args.frames))
    if render is None:
        print("OpenGL: not measured: no OpenGL context here, nor with Mesa's surfaceless EGL")
    else:
        raster = render["raster"]["cpu_ms"]
        print("plots rendered through OpenGL (Mesa's llvmpipe, a software rasteriser: process CPU, its threads "
              "counted) against Qt's raster engine, one process, alternating blocks of 25 frames:")
        for mode in RENDER_MODES:
            cost = render[mode]
            print(f"  {mode:>30}: {cost['cpu_ms']:.2f} ms CPU ({cost['wall_ms']:.2f} ms wall) per frame, "
                  f"{cost['cpu_ms'] / raster:.2f}x raster ({cost['frames']} frames)")
        print(f"  read-back of the OpenGL framebuffer ({render['read back']['size']}, screenshots only): "
              f"{render['read back']['cpu_ms']:.2f} ms")
    view3d = (view3d_cost(args.view3d_frames) if opengl_available()
              else headless_child("--view3d-child", "--view3d-frames", args.view3d_frames))
    if view3d is None:
        print("3-D view: not measured: no OpenGL context here, nor with Mesa's surfaceless EGL")
    for name, cost in (view3d or {}).items():
        total = dashboard_ms + cost["cpu_ms"]
        print(f"3-D view, {name} ({cost['bodies']} bodies, {cost['size']} pane): {cost['cpu_ms']:.2f} ms CPU "
              f"({cost['wall_ms']:.2f} ms wall) per frame, pose + render + read back; with the curves "
              f"{total:.2f} ms -> {1e3 / total:.0f} frames/s on one free core; / {VIEW3D_TARGET_FPS:.0f} fps target: "
              f"{1e3 / total / VIEW3D_TARGET_FPS:.2f}x; 3-D / curves CPU per frame: "
              f"{cost['cpu_ms'] / dashboard_ms:.2f}")
    with open("/proc/loadavg") as file:
        print(f"load average (1 min) {load_before} before, {file.read().split()[0]} after, on {os.cpu_count()} "
              "cores: the frame rates depend on it, the CPU per frame much less")
    if args.profile:
        profile = cProfile.Profile(time.thread_time)
        frame_cost(app, "dashboard", frames=args.frames, profile=profile)
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(30)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
