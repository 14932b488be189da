"""Replay of an MCAP recording through the dashboard, and the `mms dash` command itself (subprocesses)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
from mcap.writer import Writer
from PyQt5.QtGui import QImage

from gui.window import DashboardOptions, DashboardWindow
from sim import messages
from sim.network import Endpoints

DEADLINE_MS = 20_000
JOINTS = ["stroke_r", "twist1_r", "bend1_r"]
STATE_HZ = 100.0
DURATION_S = 1.5
START_NS = 1_700_000_000_000_000_000


def tau_of(t: float) -> list[float]:
    """Torques written into the test recording, N m."""
    return [0.01 * math.sin(2 * math.pi * 2 * t), 0.001 * t, -0.002]


def write_recording(path: Path, lead_s: float = 0.0) -> int:
    """A recording in the recorder's format (one msgpack channel per topic, payload bytes as on the wire); with
    ``lead_s``, that long of sim/status alone (1 Hz) first, as when the recorder starts before the simulator has
    compiled."""
    count = 0
    with path.open("wb") as handle:
        writer = Writer(handle)
        writer.start(profile="", library="test_dash_replay")
        channels = {}
        for topic in (messages.TOPIC_SIM_STATE, messages.TOPIC_HW_TELEMETRY, messages.TOPIC_SIM_STATUS):
            schema_id = writer.register_schema(name=topic, encoding="jsonschema",
                                               data=json.dumps(messages.SCHEMAS[topic]).encode())
            channels[topic] = writer.register_channel(topic=topic, message_encoding="msgpack", schema_id=schema_id)
        for seq in range(int(lead_s)):
            status = {"v": 1, "seq": seq, "t": 0.0, "stamp_ns": START_NS + seq * 10**9, "mode": "realtime",
                      "state": "paused", "rtf": 0.0, "step_us": {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0},
                      "deadline_misses": 0, "state_rate_hz": STATE_HZ, "robot": "test", "joint_names": JOINTS,
                      "actuated": [True, False, False]}
            messages.validate(messages.TOPIC_SIM_STATUS, status)
            writer.add_message(channel_id=channels[messages.TOPIC_SIM_STATUS], log_time=status["stamp_ns"],
                               publish_time=status["stamp_ns"], data=msgpack.packb(status, use_bin_type=True))
        for seq in range(int(DURATION_S * STATE_HZ)):
            t = seq / STATE_HZ
            stamp = START_NS + int((lead_s + t) * 1e9)
            state = {"v": 1, "seq": seq, "t": t, "stamp_ns": stamp, "joint_names": JOINTS,
                     "actuated": [True, False, False], "q": [0.1, 0.2, 0.3], "qd": [0.0] * 3, "qdd": [0.0] * 3,
                     "tau": tau_of(t), "strain": [0.01, 0.02], "base_pos": [0.0] * 3,
                     "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6,
                     "base_wrench": [0.0, 0.0, 0.05, 0.0, 0.0, 0.0], "ext_wrench": [0.0] * 6}
            telemetry = {"v": 1, "seq": seq, "stamp_ns": stamp + 500_000, "host_ns": stamp + 400_000,
                         "device_us": [int(t * 1e6)], "servo_names": ["stroke_r"], "servo_rad": [[0.1]],
                         "strain_names": ["sg_twist1_r"], "strain": [[0.011]], "load_names": ["stroke_r", "fz"],
                         "load": [[tau_of(t)[0] * 1.05, 0.048]]}
            for topic, payload, log_ns in ((messages.TOPIC_SIM_STATE, state, stamp + 1_000_000),
                                           (messages.TOPIC_HW_TELEMETRY, telemetry, stamp + 2_000_000)):
                messages.validate(topic, payload)
                writer.add_message(channel_id=channels[topic], log_time=log_ns, publish_time=payload["stamp_ns"],
                                   data=msgpack.packb(payload, use_bin_type=True))
                count += 1
        writer.finish()
    return count


def test_replay_plays_the_recording_through_the_plots(qtbot, tmp_path):
    path = tmp_path / "run.mcap"
    write_recording(path)
    options = DashboardOptions(endpoints=Endpoints(),
                               replay=path, replay_speed=3.0, window_s=10.0)
    window = DashboardWindow(options)
    qtbot.addWidget(window)
    window.show()
    try:
        qtbot.waitUntil(lambda: window.replay_done, timeout=DEADLINE_MS)
        expected_states = int(DURATION_S * STATE_HZ)
        qtbot.waitUntil(lambda: window.topic_link(messages.TOPIC_SIM_STATE) != "no data", timeout=DEADLINE_MS)
        assert window._batch.received[messages.TOPIC_SIM_STATE] == expected_states
        assert window._batch.received[messages.TOPIC_HW_TELEMETRY] == expected_states
        assert window._batch.gaps == {} and window._batch.malformed == 0
        # every recorded value reached the buffers, in order, on the recording's own time axis
        tau = window.store.buffers["sim.tau"]
        times = tau.times()
        np.testing.assert_allclose(times, np.arange(expected_states) / STATE_HZ, atol=1e-9)
        np.testing.assert_allclose(tau.values(), [tau_of(t) for t in times], rtol=0, atol=1e-15)
        # the recorded latency is log_time - stamp_ns = 1 ms for sim/state
        assert window._batch.latency_s[messages.TOPIC_SIM_STATE] == pytest.approx(1e-3)
        # and the plots show them: simulated torque next to the measured load of the same joint
        window.refresh_plots()
        labels = {spec.label: item for spec, item in window.panels["torque"].curves.values()}
        assert len(labels["stroke_r (sim)"].xData) == expected_states
        assert len(labels["stroke_r (meas)"].xData) == expected_states
        assert "finished" in window.statusBar().currentMessage()
    finally:
        window.shutdown()


def test_replay_opens_on_the_first_data_and_seeks(qtbot, tmp_path):
    path = tmp_path / "run.mcap"
    lead_s = 600.0    # ten minutes of status alone: played at its pace, no data would come before the deadline
    write_recording(path, lead_s)
    window = DashboardWindow(DashboardOptions(endpoints=Endpoints(), replay=path, replay_speed=3.0, window_s=10.0))
    qtbot.addWidget(window)
    window.show()
    try:
        expected_states = int(DURATION_S * STATE_HZ)
        # a replay commands nothing and records nothing: its controls are a seek slider, not E-STOP and Record
        assert window.seek_slider.isVisible()
        assert not any(w.isVisible() for w in (window.estop_button, window.reset_button, window.record_start,
                                               window.record_stop, window.record_path))
        qtbot.waitUntil(lambda: window.replay_done, timeout=DEADLINE_MS)
        tau = window.store.buffers["sim.tau"]
        assert len(tau) == expected_states
        np.testing.assert_allclose(tau.times(), lead_s + np.arange(expected_states) / STATE_HZ, atol=1e-6)
        assert window.seek_slider.maximum() * 0.1 == pytest.approx(lead_s + DURATION_S, abs=0.1)
        # a seek back into the data: the buffers start again, hold what lies before it, and the rest plays
        window.seek(lead_s + 0.5)
        qtbot.waitUntil(lambda: not window.replay_done, timeout=DEADLINE_MS)
        qtbot.waitUntil(lambda: window.replay_done, timeout=DEADLINE_MS)
        tau = window.store.buffers["sim.tau"]
        assert len(tau) == expected_states and np.all(np.diff(tau.times()) > 0)
        np.testing.assert_allclose(tau.values(), [tau_of(t - lead_s) for t in tau.times()], rtol=0, atol=1e-12)
    finally:
        window.shutdown()


def _mms(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    return subprocess.run([sys.executable, "-m", "hil.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=Path(__file__).resolve().parents[2])


def test_mms_dash_replay_screenshot_writes_a_png(tmp_path):
    path = tmp_path / "run.mcap"
    write_recording(path)
    shot = tmp_path / "shot.png"
    result = _mms("dash", "--replay", str(path), "--speed", "2", "--screenshot", str(shot), "--after", "1.5",
                  "--size", "1200x800")
    assert result.returncode == 0, result.stderr
    image = QImage(str(shot))
    assert not image.isNull() and (image.width(), image.height()) == (1200, 800)
    # not a blank image: the plots put many distinct colours on it
    colours = {image.pixel(x, y) for x in range(0, 1200, 7) for y in range(0, 800, 7)}
    assert len(colours) > 20


def test_mms_dash_rejects_a_missing_recording_in_one_line(tmp_path):
    result = _mms("dash", "--replay", str(tmp_path / "missing.mcap"), "--screenshot", str(tmp_path / "x.png"))
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "recording not found" in result.stderr
    assert not (tmp_path / "x.png").exists()
