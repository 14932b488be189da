"""``mms dash``: the live dashboard (simulated vs measured torques, strains, servo tracking, link health, E-STOP).

Live: subscribes to ``sim/*`` (the simulator's PUB) and ``hw/*`` (the driver's PUB) from
the network file (``--network``, default configs/network.toml). ``--replay runs/x.mcap`` plays a recording through the same plots instead.
A 3-D view of the robot sits above the channel list (``--no-3d`` leaves it out). ``--rig RIG`` draws each measured channel the rig maps in its simulated signal's unit and sign (a replay takes
the rig stored in the recording). ``--screenshot PATH --after SECONDS`` renders offscreen, saves a PNG after that
long and exits.
See docs/dashboard.md.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sim.cli_options import add_network, add_rig
from sim.config import ConfigError


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_network(parser)
    add_rig(parser, extra=": measured channels drawn in their simulated signal's unit and sign by its maps, as "
                          "validation compares them (default: none live; a replay's stored rig)")
    parser.add_argument("--replay", type=Path, metavar="MCAP",
                        help="play a recording (runs/x.mcap) instead of subscribing live")
    parser.add_argument("--speed", type=_positive, default=1.0,
                        help="replay pace, times real time (default: 1)")
    parser.add_argument("--window", type=_positive, default=10.0, metavar="SECONDS",
                        help="visible time span, s (default: 10)")
    parser.add_argument("--fps", type=_positive, default=30.0, help="plot redraw rate, Hz (default: 30)")
    parser.add_argument("--stale-after", type=_positive, default=1.0, metavar="SECONDS",
                        help="a topic silent this long is shown stale (default: 1 s)")
    parser.add_argument("--disconnected-after", type=_positive, default=3.0, metavar="SECONDS",
                        help="a topic silent this long is shown disconnected (default: 3 s)")
    parser.add_argument("--control-timeout", type=_positive, default=1.0, metavar="SECONDS",
                        help="reply deadline of the driver's and recorder's control sockets (default: 1 s)")
    parser.add_argument("--buffer-samples", type=int, default=50_000,
                        help="ring-buffer capacity per stream, samples (default: 50000)")
    parser.add_argument("--screenshot", type=Path, metavar="PATH",
                        help="render offscreen, save a PNG here after --after seconds, and exit")
    parser.add_argument("--after", type=_positive, default=3.0, metavar="SECONDS",
                        help="delay before the screenshot, s (default: 3)")
    parser.add_argument("--size", default="1600x1000", help="window size WxH in pixels (default: 1600x1000)")
    parser.add_argument("--no-3d", dest="view3d", action="store_false",
                        help="leave out the 3-D view of the robot (it needs OpenGL; docs/dashboard.md)")


def _size(text: str) -> tuple[int, int]:
    try:
        width, height = (int(part) for part in text.lower().split("x"))
    except ValueError:
        raise ConfigError(None, "--size", f"got {text!r}, expected WIDTHxHEIGHT like 1600x1000") from None
    if width < 200 or height < 200:
        raise ConfigError(None, "--size", f"got {text!r}, expected at least 200x200")
    return width, height


def run(args: argparse.Namespace) -> int:
    from sim.network import load_endpoints

    endpoints = load_endpoints(args.network)
    if args.replay is not None and not args.replay.is_file():
        raise ConfigError(args.replay, None, "recording not found (expected an MCAP file)")
    if args.buffer_samples < 2:
        raise ConfigError(None, "--buffer-samples", f"got {args.buffer_samples}, expected at least 2")
    width, height = _size(args.size)
    maps = None
    if args.rig is not None:
        from firmware_interface.rigs.host import channel_maps, load_host_rig

        maps = channel_maps(load_host_rig(args.rig))
    if args.screenshot is not None and "QT_QPA_PLATFORM" not in os.environ:
        # without a display, Qt's offscreen platform has no OpenGL: render with Mesa's surfaceless EGL if it works
        from gui.view3d import HEADLESS_GL_ENV, headless_gl_works

        if args.view3d and not os.environ.get("DISPLAY") and headless_gl_works():
            os.environ.update(HEADLESS_GL_ENV)
        else:
            os.environ["QT_QPA_PLATFORM"] = "offscreen"
    from hil.qt_preflight import dashboard_problem

    problem = dashboard_problem()
    if problem is not None:
        print(f"mms dash: error: {problem}", file=sys.stderr)
        return 2

    from PyQt5.QtCore import QCoreApplication, Qt, QTimer
    from PyQt5.QtWidgets import QApplication

    from gui.window import DashboardOptions, DashboardWindow

    # pyqtgraph compiles the 3-D view's shaders once per process: a context made later must share them
    QCoreApplication.setAttribute(Qt.AA_ShareOpenGLContexts)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    options = DashboardOptions(endpoints=endpoints, window_s=args.window, replay=args.replay,
                               replay_speed=args.speed, frame_rate_hz=args.fps,
                               stale_after_s=args.stale_after, disconnected_after_s=args.disconnected_after,
                               control_timeout_s=args.control_timeout, buffer_samples=args.buffer_samples,
                               maps=maps, view3d=args.view3d)
    window = DashboardWindow(options)
    window.resize(width, height)
    from gui.view3d import freeze_scroll_bars, headless

    if headless():
        freeze_scroll_bars(window)    # never shown there (no window surface): grabbed as it is laid out
    else:
        window.show()
    outcome = {"code": 0}

    if args.screenshot is not None:
        def take_screenshot() -> None:
            app.processEvents()   # deliver the batches already queued, so the status is that of now
            window.refresh_status()
            window.refresh_plots(force=True)
            app.processEvents()
            args.screenshot.parent.mkdir(parents=True, exist_ok=True)
            if not window.grab().save(str(args.screenshot)):
                print(f"mms dash: error: cannot write {args.screenshot}", file=sys.stderr)
                outcome["code"] = 1
            else:
                print(f"mms dash: screenshot saved to {args.screenshot}")
            window.close()
            app.quit()

        QTimer.singleShot(int(args.after * 1000), take_screenshot)
    app.exec_()
    window.shutdown()
    return outcome["code"]
