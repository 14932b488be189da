"""The 3-D view drawn by a real OpenGL context: run by tests/gui/test_view3d_gl.py in a process of its own with
``gui.view3d.HEADLESS_GL_ENV`` (Qt's eglfs platform on Mesa's surfaceless EGL: a machine without a display), not
collected by the suite itself (its name is not test_*.py: the suite's process has Qt's offscreen platform, which
has no OpenGL context).

Real parts: the dashboard window (never shown: eglfs has no window surface; grabbed as the screenshot mode does),
real ZeroMQ sockets (the simulator's state and its control socket answering ``get config``), a real MCAP recording,
the real robot builders. Frames are read back from the view's framebuffer and their pixels checked.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from mcap.writer import Writer
from PyQt5.QtCore import QCoreApplication, Qt
from PyQt5.QtGui import QImage

from tests.gui.conftest import PublisherThread
from gui.scene3d import Kinematics, base_pose
from gui.view3d import BACKGROUND, freeze_scroll_bars, headless
from gui.window import DashboardOptions, DashboardWindow
from sim import messages
from sim.config import load_toml
from sim.network import Endpoints
from sim.robots import load_robot

# pyqtgraph compiles each shader once per process: every window's context must share them (set before the
# QApplication, as gui/dashboard.py does); without it a second window's grid failed with "invalid value"
if QCoreApplication.instance() is None:    # imported by test_view3d_gl.py too, whose Qt has long started
    QCoreApplication.setAttribute(Qt.AA_ShareOpenGLContexts)
ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "robots" / "flapper.toml"
RAYBOT = ROOT / "configs" / "robots" / "raybot.toml"
DEADLINE_MS = 20_000
STATE_HZ = 100.0
#: the measured servo angles are the simulated ones plus this, rad: a ghost visibly apart from the simulated copy
MEASURED_OFFSET_RAD = 0.4
#: a pixel belongs to what was drawn when a channel moved by more than this (of 255) between two renders: the
#: shading of the solids moves them by tens, llvmpipe renders the same scene identically
CHANGED = 24
#: the robot covers at least this fraction of the frame at the reset camera (4 robot sizes away): measured 2-6 %
MIN_ROBOT_FRACTION = 0.005


def joint_angles(model, t: float) -> np.ndarray:
    """The published joint positions at time ``t``: every joint swinging about its rest, rad or m."""
    return model.q_rest + 0.3 * np.sin(2 * np.pi * 1.0 * t + np.arange(model.n))


#: the base's pose in the published states: off the origin and turned about z
BASE_POS, BASE_QUAT = [0.1, -0.2, 0.3], [np.cos(0.2), 0.0, 0.0, np.sin(0.2)]


def state_payload(model, seq: int, t: float, stamp_ns: int) -> dict:
    n = model.n
    return {"v": messages.SCHEMA_VERSION, "seq": seq, "stamp_ns": stamp_ns, "t": t,
            "joint_names": model.joint_names, "actuated": model.actuated.tolist(),
            "q": joint_angles(model, t).tolist(), "qd": [0.0] * n, "qdd": [0.0] * n, "tau": [0.0] * n,
            "strain": [0.0] * int((~model.actuated).sum()), "base_pos": BASE_POS,
            "base_quat": BASE_QUAT, "base_twist": [0.0] * 6, "base_wrench": [0.0] * 6,
            "ext_wrench": [0.0] * 6}


class ModelPublisher(PublisherThread):
    """Publishes a real model's sim/state and, with ``measured``, hw/telemetry with servos named as its actuated
    joints reading the simulated angle plus :data:`MEASURED_OFFSET_RAD`; from a thread until stopped."""

    def __init__(self, endpoints: Endpoints, model, measured: bool = False):
        super().__init__()
        self.endpoints, self.model, self.measured = endpoints, model, measured

    def publish(self) -> None:
        context = zmq.Context.instance()
        sim, driver = context.socket(zmq.PUB), context.socket(zmq.PUB)
        try:
            sim.bind(self.endpoints.sim_pub)
            driver.bind(self.endpoints.driver_pub)
            servos = [name for name, actuated in zip(self.model.joint_names, self.model.actuated) if actuated]
            columns = [self.model.joint_names.index(name) for name in servos]
            start = time.monotonic()
            seq = 0
            while not self._stop.is_set():
                t = seq / STATE_HZ
                payload = state_payload(self.model, seq, t, time.time_ns())
                if seq < 3:
                    messages.validate(messages.TOPIC_SIM_STATE, payload)
                sim.send_multipart(messages.encode(messages.TOPIC_SIM_STATE, payload))
                if self.measured:
                    angles = joint_angles(self.model, t)[columns] + MEASURED_OFFSET_RAD
                    telemetry = {"v": messages.SCHEMA_VERSION, "seq": seq, "stamp_ns": time.time_ns(),
                                 "host_ns": time.time_ns(), "device_us": [int(t * 1e6)], "servo_names": servos,
                                 "servo_rad": [angles.tolist()], "strain_names": [], "strain": [[]],
                                 "load_names": [], "load": [[]]}
                    driver.send_multipart(messages.encode(messages.TOPIC_HW_TELEMETRY, telemetry))
                seq += 1
                self.pace(start, seq, 1.0 / STATE_HZ)
        finally:
            sim.close(linger=0)
            driver.close(linger=0)


@pytest.fixture
def publish(endpoints):
    started = []

    def make(model, measured: bool = False) -> ModelPublisher:
        started.append(ModelPublisher(endpoints, model, measured).start())
        return started[-1]

    yield make
    for publisher in started:
        publisher.stop()
        assert publisher.error is None, publisher.error


@pytest.fixture
def simulator(endpoints, responder):
    """The simulator's control socket answering ``get config`` with a robot file, as `mms serve` does."""
    def serve(path: Path):
        return responder(endpoints.sim_control, lambda _request: {"ok": True, "config": load_toml(path),
                                                                  "path": str(path)})
    return serve


@pytest.fixture
def headless_window(qtbot, endpoints):
    windows = []

    def make(**options) -> DashboardWindow:
        window = DashboardWindow(DashboardOptions(endpoints=endpoints, control_timeout_s=0.5, **options))
        qtbot.addWidget(window)     # never shown: eglfs has no window surface (gui/view3d.py)
        window.resize(1600, 1000)
        freeze_scroll_bars(window)
        windows.append(window)
        return window

    yield make
    for window in windows:
        window.shutdown()


def pixels(image: QImage) -> np.ndarray:
    """(h, w, 3) uint8 RGB of a grabbed image."""
    image = image.convertToFormat(QImage.Format_RGB888)
    width, height = image.width(), image.height()
    data = np.frombuffer(image.constBits().asstring(image.bytesPerLine() * height), np.uint8)
    return data.reshape(height, image.bytesPerLine())[:, :3 * width].reshape(height, width, 3)


def robot_mask(view, items) -> tuple[np.ndarray, np.ndarray]:
    """The frame with ``items`` drawn, and where they changed it (a frame rendered without them, grid alone)."""
    with_items = pixels(view.render_frame()).astype(int)
    shown = [item.visible() for item in items]
    for item in items:
        item.setVisible(False)
    without = pixels(view.render_frame()).astype(int)
    for item, visible in zip(items, shown):
        item.setVisible(visible)
    return with_items, np.abs(with_items - without).max(axis=2) > CHANGED


def test_the_platform_has_an_opengl_context(qapp):
    from gui.view3d import opengl_problem

    assert headless() and opengl_problem() is None


def test_the_flapper_is_drawn_where_the_published_state_puts_it(qtbot, simulator, publish, headless_window):
    model = load_robot(FLAPPER)
    control = simulator(FLAPPER)
    publish(model)
    window = headless_window()
    view = window.robot_view
    qtbot.waitUntil(lambda: view.poses_set >= 3, timeout=DEADLINE_MS)
    assert control.requests[0] == {"cmd": "get", "what": "config"}
    assert view.model.joint_names == model.joint_names and len(view.shapes) == 9
    # the poses follow the stream: later states move the wings
    first, count = view.last_poses.copy(), view.poses_set
    qtbot.waitUntil(lambda: view.poses_set > count + 2 and not np.allclose(view.last_poses, first),
                    timeout=DEADLINE_MS)
    pose = window._pose_drawn
    base = base_pose(pose.base_pos, pose.base_quat)
    np.testing.assert_allclose(view.last_poses, Kinematics(model).body_poses(base, pose.q), atol=1e-12)
    np.testing.assert_allclose(view.last_poses[0, :3, 3], BASE_POS)
    assert view.last_ghost_poses is None and not view.ghost_item.visible()
    # the frame at rest, base at the origin (a published pose may show the thin blades edge on to the camera), the
    # view following the base: the robot is drawn at the centre, thorax and wings
    view.set_pose(np.eye(4), model.q_rest)
    frame, mask = robot_mask(view, [view.item])
    height, width = mask.shape
    assert mask[height // 2 - 2:height // 2 + 3, width // 2 - 2:width // 2 + 3].all()
    assert mask.mean() > MIN_ROBOT_FRACTION
    orange = (frame[..., 0] > frame[..., 2] + 40) & mask          # the blades (plates) are orange
    assert orange.sum() > 0.1 * mask.sum()
    assert not np.any(np.abs(frame[0, 0] - BACKGROUND) > CHANGED)   # a corner far from the robot: background
    # the screenshot mode's picture holds the same pane
    window.refresh_plots(force=True)
    screenshot = pixels(window.grab().toImage())
    corner = view.gl.mapTo(window, view.gl.rect().topLeft())
    pane = screenshot[corner.y():corner.y() + view.gl.height(), corner.x():corner.x() + view.gl.width()]
    assert pane.shape[:2] == (view.gl.height(), view.gl.width())
    assert np.ptp(pane.reshape(-1, 3), axis=0).max() > 100      # drawn, not a uniform blank


def test_raybot_with_a_ghost_posed_by_the_measured_servos(qtbot, simulator, publish, headless_window):
    model = load_robot(RAYBOT)
    simulator(RAYBOT)
    publish(model, measured=True)
    window = headless_window()
    view = window.robot_view
    qtbot.waitUntil(lambda: view.last_ghost_poses is not None, timeout=DEADLINE_MS)
    kinds = {shape.name: shape.kind for shape in view.shapes}
    assert kinds["disc"] == "ellipsoid" and kinds["seg_front_l"] == "tube" and kinds["tail_caudal"] == "plate"
    # drawn now, from the newest state and telemetry the window holds (no event runs until the checks are done)
    window._pose_drawn = None
    window.refresh_robot()
    pose = window._pose_drawn
    measured = window._measured_q(pose)
    ghost = view.last_ghost_poses
    np.testing.assert_allclose(ghost, Kinematics(model).body_poses(base_pose(pose.base_pos, pose.base_quat),
                                                                   measured), atol=1e-12)
    # each servo's angle went to its joint: the actuated joints lead by the offset (less what the swing moved in the
    # telemetry's lag behind the state, a few periods), the passive ones are the simulated ones
    lead = (measured - pose.q)[model.actuated]
    assert np.all(np.abs(lead - MEASURED_OFFSET_RAD) < 0.5 * MEASURED_OFFSET_RAD), lead
    np.testing.assert_array_equal(measured[~model.actuated], pose.q[~model.actuated])
    np.testing.assert_allclose(ghost[0], view.last_poses[0])        # same base
    moved = [j for j in range(1, model.n_bodies) if model.actuated[j - 1]]
    assert not np.allclose(ghost[moved], view.last_poses[moved])
    assert view.ghost_item.visible()
    _, mask = robot_mask(view, [view.ghost_item])
    assert mask.mean() > MIN_ROBOT_FRACTION / 10                  # the translucent copy shows
    view.ghost_box.setChecked(False)
    assert not view.ghost_item.visible()


def write_recording(path: Path, robot: Path, states: int = 150) -> None:
    """A recording as `mms record --robot` writes it: the robot file in the metadata, sim/state as on the wire."""
    model = load_robot(robot)
    start_ns = 1_700_000_000_000_000_000
    with path.open("wb") as handle:
        writer = Writer(handle)
        writer.start(profile="", library="gl_view3d_cases")
        writer.add_metadata("robot_config", {"path": str(robot), "text": robot.read_text()})
        schema = writer.register_schema(name=messages.TOPIC_SIM_STATE, encoding="jsonschema",
                                        data=json.dumps(messages.SCHEMAS[messages.TOPIC_SIM_STATE]).encode())
        channel = writer.register_channel(topic=messages.TOPIC_SIM_STATE, message_encoding="msgpack",
                                          schema_id=schema)
        for seq in range(states):
            stamp = start_ns + int(seq / STATE_HZ * 1e9)
            payload = state_payload(model, seq, seq / STATE_HZ, stamp)
            writer.add_message(channel_id=channel, log_time=stamp + 1_000_000, publish_time=stamp,
                               data=msgpack.packb(payload, use_bin_type=True))
        writer.finish()


def test_a_replay_is_drawn_from_the_robot_stored_in_the_recording(qtbot, tmp_path, headless_window):
    path = tmp_path / "run.mcap"
    write_recording(path, FLAPPER)
    window = headless_window(replay=path, replay_speed=4.0)
    view = window.robot_view
    qtbot.waitUntil(lambda: window.replay_done and view.poses_set > 0, timeout=DEADLINE_MS)
    # the last state drawn is the recording's last
    qtbot.waitUntil(lambda: window._pose_drawn is not None and window._pose_drawn.t == pytest.approx(1.49),
                    timeout=DEADLINE_MS)
    model = load_robot(FLAPPER)
    base = base_pose(window._pose_drawn.base_pos, window._pose_drawn.base_quat)
    np.testing.assert_allclose(view.last_poses, Kinematics(model).body_poses(base, joint_angles(model, 1.49)),
                               atol=1e-12)
    _, mask = robot_mask(view, [view.item])
    assert mask.mean() > MIN_ROBOT_FRACTION
