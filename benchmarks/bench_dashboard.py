"""Dashboard redraw rate and CPU use: 32 channels at 1 kHz in a 10 s window (target >= 60 fps).

The window is the real one (offscreen Qt): samples enter through ``DashboardWindow.on_batch`` -- the GUI side of
the worker path -- from a QTimer, 1 kHz per channel in blocks of ``1000 / feed_hz`` samples, after the ring
buffers are pre-filled with a full window. Frames are counted twice: plot refreshes (``frames_drawn``) and
paint events of the plots' viewport (what actually reached the screen). CPU is the process's CPU time
(all threads) over the wall time. The baseline is the same run with 2 channels, in the same process.
The GUI-thread CPU per frame is measured with Qt's raster engine and, where an OpenGL context can be created,
with pyqtgraph's ``useOpenGL`` viewport (the offscreen platform of a headless machine has none: then it says so).

Usage: python benchmarks/bench_dashboard.py [--seconds 5] [--fps 60]
"""
from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np  # noqa: E402
from PyQt5.QtCore import QEvent, QObject, QTimer  # noqa: E402
from PyQt5.QtGui import QOpenGLContext  # noqa: E402
from PyQt5.QtWidgets import QApplication  # noqa: E402

from gui.decimate import WindowDecimator  # noqa: E402
from gui.plots import stream_windows  # noqa: E402
from gui.ringbuffer import StreamStore  # noqa: E402
from gui.signals import Batch, Chunk  # noqa: E402
from gui.window import DashboardOptions, DashboardWindow  # noqa: E402
from sim.network import Endpoints  # noqa: E402

SAMPLE_RATE_HZ = 1000.0
WINDOW_S = 10.0
FEED_HZ = 100.0
TARGET_FPS = 60.0


class PaintCounter(QObject):
    def __init__(self):
        super().__init__()
        self.paints = 0

    def eventFilter(self, _obj, event):
        if event.type() == QEvent.Paint:
            self.paints += 1
        return False


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


def measure(app: QApplication, n_channels: int, seconds: float, fps: float) -> dict[str, float]:
    options = DashboardOptions(endpoints=unused_endpoints(), window_s=WINDOW_S, frame_rate_hz=fps,
                               buffer_samples=int(2 * WINDOW_S * SAMPLE_RATE_HZ))
    window = DashboardWindow(options)
    window.resize(1600, 1000)
    window.show()
    counter = PaintCounter()
    window.graphics.viewport().installEventFilter(counter)
    window.on_batch(make_batch(n_channels, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))   # a full window first
    curves = sum(len(panel.curves) for panel in window.panels.values())
    state = {"t": WINDOW_S, "fed": 0}
    block = int(SAMPLE_RATE_HZ / FEED_HZ)
    start_wall = time.monotonic()

    def feed():
        # As many samples as wall time says are due, so the input rate stays 1 kHz even if a tick is late.
        due = int((time.monotonic() - start_wall) * SAMPLE_RATE_HZ) - state["fed"]
        if due > 0:
            window.on_batch(make_batch(n_channels, state["t"], due))
            state["t"] += due / SAMPLE_RATE_HZ
            state["fed"] += due

    feeder = QTimer()
    feeder.timeout.connect(feed)
    feeder.start(int(1000 / FEED_HZ))
    for _ in range(3):          # settle: first layouts, first paints
        app.processEvents()
    frames0, paints0 = window.frames_drawn, counter.paints
    cpu0, wall0 = time.process_time(), time.monotonic()
    deadline = wall0 + seconds
    while time.monotonic() < deadline:
        app.processEvents()
        time.sleep(0.001)       # benchmark event loop pacing, not a wait for a condition
    wall = time.monotonic() - wall0
    cpu = time.process_time() - cpu0
    feeder.stop()
    result = {"channels": curves, "fps": (window.frames_drawn - frames0) / wall,
              "paints_per_s": (counter.paints - paints0) / wall, "cpu_percent": 100.0 * cpu / wall,
              "input_rate_hz": state["fed"] / (time.monotonic() - start_wall), "block": block}
    window.close()
    window.shutdown()
    app.processEvents()
    return result


def opengl_available() -> bool:
    """True when this platform can create an OpenGL context (the offscreen platform usually cannot)."""
    return QOpenGLContext().create()


def frame_cost(app: QApplication, n_channels: int, frames: int = 40, opengl: bool = False) -> dict[str, float]:
    """CPU time of the GUI thread per frame (feed 1/30 s of samples, recompute the plots, repaint them),
    measured synchronously: robust to other processes competing for the cores, unlike the frame rate."""
    options = DashboardOptions(endpoints=unused_endpoints(), window_s=WINDOW_S, frame_rate_hz=1.0,
                               buffer_samples=int(2 * WINDOW_S * SAMPLE_RATE_HZ))
    window = DashboardWindow(options)
    window.resize(1600, 1000)
    if opengl:
        window.graphics.useOpenGL(True)
    window.show()
    app.processEvents()
    window.on_batch(make_batch(n_channels, 0.0, int(WINDOW_S * SAMPLE_RATE_HZ)))
    app.processEvents()
    t, block, costs = WINDOW_S, int(SAMPLE_RATE_HZ / 30.0), []
    for _ in range(frames):
        start = time.thread_time()
        window.on_batch(make_batch(n_channels, t, block))
        window.refresh_plots()
        window.graphics.viewport().repaint()
        costs.append(time.thread_time() - start)
        t += block / SAMPLE_RATE_HZ
    window.close()
    window.shutdown()
    app.processEvents()
    median = float(np.median(costs))
    return {"ms": 1e3 * median, "fps_one_core": 1.0 / median}


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured duration per run, s")
    parser.add_argument("--fps", type=float, default=60.0, help="requested redraw rate, Hz")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    baseline = measure(app, 2, args.seconds, args.fps)
    loaded = measure(app, 32, args.seconds, args.fps)
    cost_baseline = frame_cost(app, 2)
    cost_loaded = frame_cost(app, 32)
    print(f"requested redraw rate {args.fps:.0f} Hz, window {WINDOW_S:.0f} s, samples at "
          f"{SAMPLE_RATE_HZ:.0f} Hz per channel, fed in blocks of {loaded['block']} ({FEED_HZ:.0f} Hz)")
    for name, result in (("baseline (2 ch)", baseline), ("32 channels", loaded)):
        print(f"{name:>16}: {result['channels']} curves, input {result['input_rate_hz']:.0f} Hz/ch, "
              f"{result['fps']:.1f} frames/s, {result['paints_per_s']:.1f} paints/s, "
              f"CPU {result['cpu_percent']:.0f} % of one core")
    print(f"32 ch / baseline: frames {loaded['fps'] / baseline['fps']:.2f}x, "
          f"CPU {loaded['cpu_percent'] / max(baseline['cpu_percent'], 1e-9):.2f}x")
    print(f"32 ch frame rate / {TARGET_FPS:.0f} fps target: {loaded['fps'] / TARGET_FPS:.2f}x "
          f"({'meets' if loaded['fps'] >= TARGET_FPS else 'BELOW'} the target)")
    load1, _, _ = os.getloadavg()
    print(f"(load average {load1:.1f} on {os.cpu_count()} cores during the run: the frame rates above depend on it)")
    print("GUI-thread CPU per frame (feed + recompute + repaint, median of 40, independent of other load):")
    for name, cost in (("baseline (2 ch)", cost_baseline), ("32 channels", cost_loaded)):
        print(f"{name:>16}: {cost['ms']:.1f} ms/frame -> {cost['fps_one_core']:.0f} frames/s on one free core")
    print(f"32 ch / baseline: {cost_loaded['ms'] / cost_baseline['ms']:.2f}x CPU per frame; "
          f"one-core frame rate / {TARGET_FPS:.0f} fps target: {cost_loaded['fps_one_core'] / TARGET_FPS:.2f}x")
    decimation = decimation_cost()
    print(f"window cut + peak decimation of 32 channels per frame: from scratch {decimation['scratch']:.2f} ms, "
          f"incremental {decimation['incremental']:.2f} ms "
          f"({decimation['scratch'] / decimation['incremental']:.1f}x less)")
    if opengl_available():
        cost_gl = frame_cost(app, 32, opengl=True)
        print(f"     32 ch OpenGL: {cost_gl['ms']:.1f} ms/frame -> {cost_gl['fps_one_core']:.0f} frames/s on one "
              f"free core; OpenGL / raster: {cost_gl['ms'] / cost_loaded['ms']:.2f}x CPU per frame")
    else:
        print("     32 ch OpenGL: not measured: no OpenGL context on this platform "
              f"({app.platformName()}); the raster figures above are the ones that apply here")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
