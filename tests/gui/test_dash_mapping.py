"""The dashboard draws with the rig's maps (firmware_interface.rigs.host.channel_maps, the ones validation compares with), keeps every
plot on one time span, shows the recorder's own file and the driver's current error, against real ZeroMQ sockets and
a real Qt window (offscreen)."""
from __future__ import annotations

import numpy as np
import pytest

from firmware_interface.rigs.host import channel_maps, load_host_rig
from tests.gui.conftest import STRAIN_GAUGES, RigPublisher

DEADLINE_MS = 20_000
#: the test rig's gauge factor: gauge strain (m/m) per rad of joint deflection, as the publisher's 2e-3
GAUGE_PER_RAD = 2e-3

SENSOR_SOURCES = "".join(
    f'[emulator.physics.sensors.{gauge}]\nsignal = "strain"\njoint = "{gauge[3:]}"\nscale = {GAUGE_PER_RAD}\n'
    for gauge in STRAIN_GAUGES)


def write_rig(folder) -> str:
    """A rig whose load cell fz reads the opposite of the simulated base wrench (scale -1), like the flapper's."""
    servos = "".join(f'[[servos]]\nname = "{name}"\nunit = "us"\ncenter = 1500.0\ngain = 636.62\ndirection = 1\n'
                     f'min_raw = 800.0\nmax_raw = 2200.0\nmin_rad = -1.0\nmax_rad = 1.0\nmax_rate_rad_s = 25.0\n'
                     f'neutral_rad = 0.0\n' for name in ("stroke_r", "stroke_l"))
    joints = "".join(f'[[joints]]\njoint = "{name}"\nservo = "{name}"\ndirection = 1\ngain = 1.0\noffset_rad = 0.0\n'
                     for name in ("stroke_r", "stroke_l"))
    strain = "".join(f'[[strain]]\nname = "{g}"\nunit = "strain"\ngain = 1e-9\nadc_bits = 24\n' for g in STRAIN_GAUGES)
    load = "".join(f'[[load]]\nname = "{n}"\nunit = "N"\ngain = 1e-6\nadc_bits = 24\n'
                   for n in ("stroke_r", "stroke_l", "fx", "fy", "fz", "mx", "my", "mz"))
    path = folder / "test_rig.toml"
    path.write_text(
        '[rig]\nkind = "mcu"\nname = "test-rig"\nprotocol_version = 1\n[serial]\nport = "/dev/null"\nbaud = 921600\n'
        '[rates]\ncommand_hz = 200\ntelemetry_hz = 200\nsamples_per_frame = 4\nheartbeat_hz = 10\n'
        '[watchdog]\ntimeout_s = 0.1\n' + servos + joints + strain + load
        + '[emulator]\n[emulator.physics]\nrobot = "robot.toml"\n' + SENSOR_SOURCES
        + '[emulator.physics.sensors.fz]\nsignal = "base_wrench"\nindex = 2\nscale = -1.0\n')
    return str(path)


@pytest.fixture
def flipped_publisher(endpoints):
    """The measured fz is the opposite of the simulated Fz (a load cell reading what the thorax pushes)."""
    publisher = RigPublisher(endpoints, wrench_scale=-1.0, driver_error="cannot open /dev/ttyACM0").start()
    yield publisher
    publisher.stop()
    assert publisher.error is None, publisher.error


def curve_of(window, panel: str, label: str):
    return next((item for spec, item in window.panels[panel].curves.values() if spec.label == label), None)


def filled(window, panel: str, label: str, count: int = 100) -> bool:
    item = curve_of(window, panel, label)
    return item is not None and item.yData is not None and len(item.yData) > count


def test_a_sign_flipped_load_and_a_gauge_are_drawn_on_their_simulated_channels(qtbot, make_window, flipped_publisher,
                                                                              tmp_path):
    window = make_window(maps=channel_maps(load_host_rig(write_rig(tmp_path))))
    qtbot.waitUntil(lambda: filled(window, "tether_force", "fz (meas)") and filled(window, "tether_force", "Fz (sim)")
                    and filled(window, "strain", "sg_r_bend_1 (meas)"), timeout=DEADLINE_MS)
    panel = window.panels["tether_force"]
    simulated, measured = curve_of(window, "tether_force", "Fz (sim)"), curve_of(window, "tether_force", "fz (meas)")
    # published: Fz = 0.02 + 0.01 cos(4 pi t) N and fz = -Fz: drawn with the rig's -1, over the simulated range
    for drawn in (simulated.yData, measured.yData):
        assert 0.01 - 1e-9 <= drawn.min() < 0.012 and 0.028 < drawn.max() <= 0.03 + 1e-9
    # the gauge (m/m) is drawn in rad by the rig's 2e-3 per rad, on the simulated axis, in its joint's colour
    strain_panel = window.panels["strain"]
    gauge = curve_of(window, "strain", "sg_r_bend_1 (meas)")
    joint = curve_of(window, "strain", "r_bend_1 (sim)")
    assert gauge.getViewBox() is strain_panel.plot.vb and joint.getViewBox() is strain_panel.plot.vb
    assert 0.04 < np.abs(gauge.yData).max() <= 0.05 + 1e-9        # published: 0.05 sin(...) rad, not 1e-4 m/m
    spec = {s.label: s for s, _ in strain_panel.curves.values()}
    assert strain_panel.colour_of(spec["sg_r_bend_1 (meas)"].colour_key) == \
        strain_panel.colour_of(spec["r_bend_1 (sim)"].colour_key)
    assert not strain_panel.plot.getAxis("right").isVisible()     # no gauge left on a separate m/m axis
    assert panel.plot.vb is measured.getViewBox()
    # the driver's error from before the link came up is gone once hw/status says the link is up
    qtbot.waitUntil(lambda: "active" in window.driver_label.text(), timeout=DEADLINE_MS)
    assert "error" not in window.driver_label.text()


def test_without_a_rig_the_same_flip_is_drawn_as_measured(qtbot, make_window, flipped_publisher):
    window = make_window()
    qtbot.waitUntil(lambda: filled(window, "tether_force", "fz (meas)")
                    and filled(window, "strain", "sg_r_bend_1 (meas)"), timeout=DEADLINE_MS)
    assert curve_of(window, "tether_force", "fz (meas)").yData.max() < -0.005
    gauge = curve_of(window, "strain", "sg_r_bend_1 (meas)")
    assert gauge.getViewBox() is window.panels["strain"].measured_view   # m/m on its own right-hand axis


def test_every_plot_ends_at_the_same_time_with_a_right_hand_axis(qtbot, make_window, publisher):
    window = make_window()
    qtbot.waitUntil(lambda: filled(window, "strain", "sg_r_bend_1 (meas)"), timeout=DEADLINE_MS)
    window.refresh_plots(force=True)
    assert window.panels["strain"].plot.getAxis("right").isVisible()
    ranges = {key: panel.plot.vb.viewRange()[0] for key, panel in window.panels.items()}
    left, right = ranges["torque"]
    assert right - left == pytest.approx(5.0)
    # each view's span ends at a whole pixel of its own (its curves then scroll by whole pixels, gui.plots.CurveLayer):
    # views of different widths end less than one pixel apart, the same span each
    pixel_s = max((end - start) / window.panels[key].plot.vb.width() for key, (start, end) in ranges.items())
    for key, (start, end) in ranges.items():
        assert end - start == pytest.approx(right - left, abs=1e-9), key
        assert (start, end) == pytest.approx((left, right), abs=pixel_s), key


def test_the_recorders_own_file_is_shown(qtbot, make_window, responder, endpoints):
    control = responder(endpoints.recorder_control, {"ok": True, "recording": True, "path": "/tmp/demo/run.mcap",
                                                     "messages": 10})
    window = make_window()
    qtbot.waitUntil(lambda: "recording /tmp/demo/run.mcap" in window.record_label.text(), timeout=DEADLINE_MS)
    assert window.record_path.text() == "/tmp/demo/run.mcap" and window.recorder_path == "/tmp/demo/run.mcap"
    assert {"cmd": "status"} in control.requests


def test_no_recorder_is_said_not_idle(qtbot, make_window, endpoints):
    window = make_window()
    qtbot.waitUntil(lambda: "none at" in window.record_label.text(), timeout=DEADLINE_MS)
    assert endpoints.recorder_control in window.record_label.text() and window.recorder_path is None
