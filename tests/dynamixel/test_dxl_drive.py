"""The servo driver with the Dynamixel backend alone, end to end: ``mms drive --emulate`` on
a bus-only rig (flapper_dynamixel_rig.toml without its ``[microcontroller]``: the driver of hil/drive/driver.py with a
DynamixelLink, the Dynamixel emulator as its child) tracks a sim/state sinusoid published on a real ZeroMQ
socket, publishes schema-valid hw/* messages without strain or load channels, and ramps to neutral on SIGINT.
tests/dynamixel/test_dxl_two_devices.py and test_dxl_chain.py cover the rig with both devices."""
from __future__ import annotations

import math
import subprocess
from pathlib import Path

import tomli_w

from sim.config import load_toml

RIG = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
AMPLITUDE_RAD, FREQUENCY_HZ = 0.4, 0.5
#: Tracking, lag-tolerant (the servo lags its goal by its position loop's time constant plus the pipeline, and
#: a loaded machine stretches the pipeline): each measured position must be within TRACK_TOL_RAD of a setpoint
#: sent during the TRACK_WINDOW_S before it.
TRACK_TOL_RAD = 0.03
TRACK_WINDOW_S = 0.5
TRACK_S = 1.0                   # how long the test watches the servos track
NEUTRAL_TOL_RAD = 0.02          # the driver's own "arrived at neutral"


def test_driver_tracks_the_simulator_through_the_dynamixel_bus(stack):
    doc = load_toml(RIG)
    del doc["microcontroller"]
    bus_only = stack.tmp / "bus_only_rig.toml"
    bus_only.write_text(tomli_w.dumps(doc))
    stack.sim(["stroke_r", "stroke_l"], lambda t: [AMPLITUDE_RAD * math.sin(2 * math.pi * FREQUENCY_HZ * t)] * 2,
              rate_hz=500)
    drv = stack.driver("--emulate", "--autostart", rig=bus_only)
    hw = drv.collector
    wait = lambda predicate, what: stack.wait_for(predicate, what=what, logs=(drv.log_path,))  # noqa: E731
    drv.wait_status(lambda s: s["lifecycle"] == "active", "active")
    wait(lambda: len(hw.get("hw/command")) > TRACK_S * doc["rates"]["command_hz"], f"{TRACK_S} s of commands")

    # each telemetry sample against the setpoints sent shortly before it (second half: past the ramp-in)
    commands = hw.get("hw/command")
    telemetry = [m for m in hw.get("hw/telemetry") if m["stamp_ns"] > commands[0]["stamp_ns"]]
    assert len(telemetry) > 20
    errors = []
    for m in telemetry[len(telemetry) // 2:]:
        recent = [c for c in commands if 0 <= m["host_ns"] - c["stamp_ns"] <= TRACK_WINDOW_S * 1e9]
        errors.append(min(max(abs(a - b) for a, b in zip(m["servo_rad"][-1], c["setpoint_rad"])) for c in recent))
    assert max(errors) < TRACK_TOL_RAD
    assert max(abs(x) for m in telemetry for x in m["servo_rad"][-1]) > AMPLITUDE_RAD / 4    # it moved
    # one device: no sensor channels, and no held-positions time stamp (the positions are the bus's own samples)
    assert telemetry[-1]["strain_names"] == [] and telemetry[-1]["load_names"] == []
    assert "servo_host_ns" not in telemetry[-1]
    status = drv.status()
    assert status["link"]["bus"] == "dynamixel" and status["link"]["hardware_error_status"] == {"1": 0, "2": 0}
    assert "sensor" not in status["link"]

    assert drv.stop() == 0
    # the driver's last hw/status is sent as it exits: the collector's thread may take it in after stop() returns
    final = wait(lambda: (s := hw.last("hw/status")) and s["lifecycle"] == "finalized" and s, "the finalized hw/status")
    assert final["estop"] is False
    last = hw.get("hw/telemetry")[-1]["servo_rad"][-1]
    assert all(abs(x) <= NEUTRAL_TOL_RAD + 0.01 for x in last), last
    assert not hw.invalid, hw.invalid[:5]


def test_sensor_options_need_a_second_device(stack):
    """--sensor-port on a rig without [microcontroller], or on a microcontroller rig: one line, exit 2."""
    doc = load_toml(RIG)
    del doc["microcontroller"]
    bus_only = stack.tmp / "bus_only_rig.toml"
    bus_only.write_text(tomli_w.dumps(doc))
    for rig in (bus_only, stack.flapper_rig):
        run = subprocess.run(stack.mms("drive", "--rig", str(rig), "--sensor-port", "/dev/null", "--network",
                                       str(stack.net)), capture_output=True, text=True, timeout=60, cwd=stack.root)
        assert run.returncode == 2, run.stderr
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and "--sensor-port" in lines[0] and "Traceback" not in run.stderr, run.stderr
