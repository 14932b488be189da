"""The dashboard window against real ZeroMQ publishers and control sockets (offscreen Qt, real threads)."""
from __future__ import annotations

import numpy as np
import pytest
import zmq
from PyQt5.QtCore import Qt

from gui.window import CONNECTED, DISCONNECTED
from sim import messages

#: generous deadlines: the machine has two cores shared with other test runs
DEADLINE_MS = 20_000


def curve(window, panel: str, label: str):
    for spec, item in window.panels[panel].curves.values():
        if spec.label == label:
            return item
    return None


def points(window, panel: str, label: str) -> int:
    item = curve(window, panel, label)
    return 0 if item is None or item.xData is None else len(item.xData)


def test_curves_fill_sim_next_to_measured_and_rates_are_shown(qtbot, make_window, publisher):
    window = make_window()
    expected = [("torque", "stroke_r (sim)"), ("torque", "stroke_r (meas)"), ("tether_force", "Fz (sim)"),
                ("tether_force", "fz (meas)"), ("tether_moment", "My (sim)"), ("strain", "r_twist_1 (sim)"),
                ("strain", "sg_r_twist_1 (meas)"), ("tip", "tip_r_bend (sim)"), ("tip", "tip_r_bend (meas)"),
                ("tracking", "stroke_l (cmd)"), ("tracking", "stroke_l (meas)")]
    qtbot.waitUntil(lambda: all(points(window, p, c) > 100 for p, c in expected), timeout=DEADLINE_MS)
    # a simulated channel and its measured counterpart share one colour, and the values are the published ones
    torque = window.panels["torque"]
    sim_spec = next(s for s, _ in torque.curves.values() if s.label == "stroke_r (sim)")
    meas_spec = next(s for s, _ in torque.curves.values() if s.label == "stroke_r (meas)")
    assert torque.colour_of(sim_spec.colour_key) == torque.colour_of(meas_spec.colour_key)
    sim_tau = curve(window, "torque", "stroke_r (sim)").yData
    assert 0.0015 < np.max(np.abs(sim_tau)) <= 0.002 + 1e-12       # published: 0.002 cos(...)
    assert np.max(curve(window, "tracking", "stroke_l (meas)").yData) <= 0.7 + 1e-12
    # no curve for a passive joint's torque, nor for an actuated joint's strain
    labels = {s.label for p in window.panels.values() for s, _ in p.curves.values()}
    assert "r_twist_1 (sim)" not in {s.label for s, _ in torque.curves.values()}
    assert "stroke_r (sim)" not in {s.label for s, _ in window.panels["strain"].curves.values()}
    assert "tip_l_twist (sim)" in labels
    # rates, link state, status lines
    row = messages.TOPICS.index(messages.TOPIC_SIM_STATE)
    qtbot.waitUntil(lambda: 50.0 < window.rates[messages.TOPIC_SIM_STATE] < 400.0, timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: float(window.status_table.item(row, 2).text()) > 50.0, timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: window.status_table.item(row, 1).text() == CONNECTED, timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: "real-time factor 0.998" in window.sim_label.text(), timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: "active" in window.driver_label.text() and "frames_ok" in window.link_label.text(),
                    timeout=DEADLINE_MS)


def test_channel_selector_hides_a_curve(qtbot, make_window, publisher):
    window = make_window()
    qtbot.waitUntil(lambda: points(window, "torque", "stroke_l (sim)") > 10, timeout=DEADLINE_MS)
    spec = next(s for s, _ in window.panels["torque"].curves.values() if s.label == "stroke_l (sim)")
    window.set_channel_visible(spec.ident, False)
    assert not curve(window, "torque", "stroke_l (sim)").isVisible()
    window.set_channel_visible(spec.ident, True)
    assert curve(window, "torque", "stroke_l (sim)").isVisible()


def test_pause_freezes_the_plots_while_data_keeps_arriving(qtbot, make_window, publisher):
    window = make_window()
    qtbot.waitUntil(lambda: points(window, "torque", "stroke_r (sim)") > 50, timeout=DEADLINE_MS)
    qtbot.mouseClick(window.pause_button, Qt.LeftButton)
    assert window.paused and window.pause_button.text() == "Resume"
    frozen = curve(window, "torque", "stroke_r (sim)").xData.copy()
    frames = window.frames_drawn
    received = window._batch.received[messages.TOPIC_SIM_STATE]
    qtbot.waitUntil(lambda: window._batch.received[messages.TOPIC_SIM_STATE] > received + 100, timeout=DEADLINE_MS)
    assert window.frames_drawn == frames
    np.testing.assert_array_equal(curve(window, "torque", "stroke_r (sim)").xData, frozen)
    assert window.store.latest_time() > frozen[-1]          # the buffers kept filling
    qtbot.mouseClick(window.pause_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: curve(window, "torque", "stroke_r (sim)").xData[-1] > frozen[-1], timeout=DEADLINE_MS)


def test_estop_button_sends_the_command_and_shows_the_reply(qtbot, make_window, endpoints, responder):
    driver = responder(endpoints.driver_control, {"ok": True})
    window = make_window()
    qtbot.mouseClick(window.estop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: driver.requests == [{"cmd": "estop"}], timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: "E-STOP CONFIRMED" in window.control_label.text(), timeout=DEADLINE_MS)
    qtbot.mouseClick(window.reset_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: driver.requests[-1:] == [{"cmd": "reset_estop"}], timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: "reset_estop done" in window.control_label.text(), timeout=DEADLINE_MS)


def test_estop_without_a_driver_fails_clearly_then_works_once_the_driver_is_back(qtbot, make_window, endpoints,
                                                                                 responder):
    window = make_window()
    qtbot.mouseClick(window.estop_button, Qt.LeftButton)
    qtbot.waitUntil(lambda: "E-STOP NOT CONFIRMED: no reply" in window.control_label.text(), timeout=DEADLINE_MS)
    assert window.isVisible()      # the GUI thread was never blocked waiting
    driver = responder(endpoints.driver_control, {"ok": False, "error": "driver is finalized"})
    qtbot.mouseClick(window.estop_button, Qt.LeftButton)   # the REQ socket was recreated after the timeout
    qtbot.waitUntil(lambda: "REFUSED estop: driver is finalized" in window.control_label.text(), timeout=DEADLINE_MS)
    assert driver.requests == [{"cmd": "estop"}]


def test_recording_buttons_talk_to_the_recorder(qtbot, make_window, endpoints, responder, tmp_path):
    recording = {}

    def recorder_reply(request: dict) -> dict:
        """The recorder's protocol (hil/recorder.py): start, stop, and status saying the file it writes."""
        if request["cmd"] == "start":
            recording["path"] = request["path"]
        elif request["cmd"] == "stop":
            recording.pop("path", None)
        return {"ok": True, "recording": "path" in recording, **recording}

    recorder = responder(endpoints.recorder_control, recorder_reply)
    window = make_window()
    qtbot.waitUntil(lambda: window.record_label.text() == "recorder: not recording", timeout=DEADLINE_MS)
    path = str(tmp_path / "run1.mcap")
    window.record_path.setText(path)
    qtbot.mouseClick(window.record_start, Qt.LeftButton)
    commands = lambda: [r for r in recorder.requests if r["cmd"] != "status"]  # noqa: E731 - polled below
    qtbot.waitUntil(lambda: commands() == [{"cmd": "start", "path": path}], timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: window.record_label.text() == f"recorder: recording {path}", timeout=DEADLINE_MS)
    qtbot.mouseClick(window.record_stop, Qt.LeftButton)
    qtbot.waitUntil(lambda: commands()[-1:] == [{"cmd": "stop"}], timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: window.record_label.text() in ("recorder: stopped", "recorder: not recording"),
                    timeout=DEADLINE_MS)
    assert window.recorder_path is None


def test_a_dropped_publisher_shows_as_disconnected(qtbot, make_window, publisher):
    window = make_window()
    qtbot.waitUntil(lambda: all(window.topic_link(t) == CONNECTED for t in messages.TOPICS), timeout=DEADLINE_MS)
    publisher.stop_driver()
    hw_rows = [messages.TOPICS.index(t) for t in (messages.TOPIC_HW_TELEMETRY, messages.TOPIC_HW_STATUS)]
    qtbot.waitUntil(lambda: all(window.status_table.item(r, 1).text() == DISCONNECTED for r in hw_rows),
                    timeout=DEADLINE_MS)
    assert window.topic_link(messages.TOPIC_SIM_STATE) == CONNECTED
    assert window.rates[messages.TOPIC_HW_TELEMETRY] == 0.0


def test_status_alone_reaches_the_window_and_malformed_messages_are_counted(qtbot, make_window, endpoints):
    window = make_window()
    socket = zmq.Context.instance().socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(endpoints.sim_pub)
    sent = {"seq": 0}

    def publish_status() -> None:
        payload = {"v": 1, "seq": sent["seq"], "stamp_ns": 0, "t": 0.0, "mode": "fast", "state": "paused",
                   "rtf": 0.0, "step_us": {"mean": 1.0, "p50": 1.0, "p99": 1.0, "max": 1.0}, "deadline_misses": 0,
                   "state_rate_hz": 0.0, "robot": "r", "joint_names": [], "actuated": [], "reason": "pause command"}
        messages.validate(messages.TOPIC_SIM_STATUS, payload)
        socket.send_multipart(messages.encode(messages.TOPIC_SIM_STATUS, payload))
        sent["seq"] += 1

    try:
        # a paused simulator publishes sim/status only: the window must still show it
        # (PUB/SUB joins asynchronously, so keep publishing until it has arrived)
        def status_shown() -> bool:
            publish_status()
            return "paused (fast)" in window.sim_label.text()

        qtbot.waitUntil(status_shown, timeout=DEADLINE_MS)
        assert "reason: pause command" in window.sim_label.text()
        assert window._batch.malformed == 0
        for frames in ([b"sim/state", b"\xc1\xc1"], [b"sim/state"], [b"no/such/topic", b"\x80"]):
            socket.send_multipart(frames)
        qtbot.waitUntil(lambda: window._batch.malformed == 2, timeout=DEADLINE_MS)   # no/such is not subscribed
        publish_status()
        qtbot.waitUntil(lambda: "malformed messages dropped: 2" in window.link_label.text(), timeout=DEADLINE_MS)
    finally:
        socket.close(linger=0)


def test_autoscale_follows_the_data_and_unticked_keeps_the_users_range(qtbot, make_window, publisher):
    window = make_window()
    view = window.panels["torque"].plot.vb
    # published torques are within +-0.002 N m: the autoscaled range holds them, and not much more
    qtbot.waitUntil(lambda: points(window, "torque", "stroke_r (sim)") > 50
                    and -0.0035 < view.viewRange()[1][0] < -0.0015 and 0.0015 < view.viewRange()[1][1] < 0.0035,
                    timeout=DEADLINE_MS)
    window.autoscale_box.setChecked(False)
    view.setYRange(-1.0, 1.0, padding=0)
    frames = window.frames_drawn
    qtbot.waitUntil(lambda: window.frames_drawn > frames + 5, timeout=DEADLINE_MS)
    assert view.viewRange()[1] == pytest.approx([-1.0, 1.0])
    window.autoscale_box.setChecked(True)
    qtbot.waitUntil(lambda: view.viewRange()[1][1] < 0.0035, timeout=DEADLINE_MS)


def test_a_two_device_rig_shows_its_sensor_link_next_to_the_bus(qtbot, make_window, endpoints):
    """hw/status of a Dynamixel rig with its sensor microcontroller (docs/dynamixel.md): the link line shows the
    bus's counters and the sensor link's state, port and errors."""
    window = make_window()
    socket = zmq.Context.instance().socket(zmq.PUB)
    socket.setsockopt(zmq.LINGER, 0)
    socket.bind(endpoints.driver_pub)
    sent = {"seq": 0}

    def shown() -> bool:
        payload = {"v": 1, "seq": sent["seq"], "stamp_ns": 0, "lifecycle": "active", "rig": "two-device",
                   "estop": False, "watchdog": "track",
                   "link": {"state": "up", "frames_ok": 10, "crc_errors": 0, "seq_gaps": 0, "reconnects": 0,
                            "bus": "dynamixel",
                            "sensor": {"state": "up", "port": "/dev/pts/9", "frames_ok": 125, "crc_errors": 3,
                                       "seq_gaps": 1, "link_losses": 0, "nacks": {}}}}
        messages.validate(messages.TOPIC_HW_STATUS, payload)
        socket.send_multipart(messages.encode(messages.TOPIC_HW_STATUS, payload))
        sent["seq"] += 1
        return "sensors:" in window.link_label.text()

    try:
        qtbot.waitUntil(shown, timeout=DEADLINE_MS)
        text = window.link_label.text()
        assert "bus dynamixel" in text and "state up, port /dev/pts/9, frames_ok 125, crc_errors 3" in text
        assert "nacks" not in text.split("sensors:")[1]
    finally:
        socket.close(linger=0)
