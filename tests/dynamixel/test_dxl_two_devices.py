"""One ``mms drive`` owning both serial devices of the Dynamixel rig (hil/drive/links/composite.py), real processes
on real ptys: the Dynamixel emulator (servo bus) and ``mms emulate`` (sensor microcontroller), both children of
the driver, fed by a sim/state sinusoid on a real ZeroMQ socket.

Checked: one e-stop for the rig (the microcontroller's button stops the Dynamixel servos at neutral; a servo's
hardware error latches the microcontroller's e-stop); the reset is one command for both devices and tracking
resumes after it; a sensor-side unplug takes the whole link down and both devices come back; SIGINT exits 0.
"""
from __future__ import annotations

import math
import os
import signal
from pathlib import Path

from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import load_dxl_rig

RIG = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
JOINTS = ["stroke_r", "stroke_l"]
#: The served stroke: 0.3 rad at 0.5 Hz peaks at 0.94 rad/s, inside the servos' 4 rad/s rate limit.
AMPLITUDE_RAD, FREQUENCY_HZ = 0.3, 0.5
#: "away from neutral": the e-stop must visibly move the servos (rad)
AWAY_RAD = 0.15
NEUTRAL_TOL_RAD = 0.02          # the driver's own "arrived at neutral"
SIM_RATE_HZ = 250
#: the first status waited for comes after three Python processes have started (the driver, then the two emulators
#: it runs), each paying its imports: at load 15-20 on the 2-core machine the driver had printed nothing 20 s in
STARTUP_S = 120.0


def _stroke(t: float) -> list[float]:
    q = AMPLITUDE_RAD * math.sin(2 * math.pi * FREQUENCY_HZ * t)
    return [q, q]


def _servo_angles(drv) -> list[float] | None:
    last = drv.collector.last("hw/telemetry")
    return None if last is None else last["servo_rad"][-1]


def _telemetry_after(drv, t_ns: int) -> list[dict]:
    return [m for m in drv.collector.get("hw/telemetry") if m["host_ns"] > t_ns]


def test_button_reset_and_sensor_unplug(stack):
    neutral = [s.neutral_rad for s in load_dxl_rig(RIG).servos]
    stack.sim(JOINTS, _stroke, rate_hz=SIM_RATE_HZ)
    drv = stack.driver("--emulate", "--autostart", "--allow-remote-reset", rig=RIG)
    wait = lambda predicate, what: stack.wait_for(predicate, what=what, logs=(drv.log_path,))  # noqa: E731
    status = drv.wait_status(lambda s: s["lifecycle"] == "active" and s["link"]["state"] == "up", "active",
                             STARTUP_S)
    sensor_pid = status["link"]["sensor"]["emulator_pid"]
    assert sensor_pid and stack.alive(sensor_pid)

    # ---- the microcontroller's e-stop button stops the Dynamixel servos
    wait(lambda: (a := _servo_angles(drv)) and max(abs(x) for x in a) > AWAY_RAD, "the servos away from neutral")
    os.kill(sensor_pid, signal.SIGUSR1)                     # the emulator's button
    latched = drv.wait_status(lambda s: s["estop"], "the e-stop latched")
    assert "device:button" in latched["estop_sources"], latched["estop_sources"]
    assert latched["lifecycle"] == "inactive"
    # the driver stops sending at once; only the e-stop forwarded to the bus can bring the servos to neutral
    wait(lambda: (a := _servo_angles(drv)) and all(abs(x - n) <= NEUTRAL_TOL_RAD for x, n in zip(a, neutral)),
         "the servos at neutral")
    status = drv.wait_status(lambda s: s["link"]["sensor"]["device_flags"] & p.FLAG_ESTOP,
                             "the microcontroller's e-stop in hw/status")
    assert status["link"]["estops_forwarded"] >= 1
    assert drv.collector.last("hw/telemetry")["device_flags"] & p.FLAG_ESTOP

    # ---- held, the button refuses a reset; released (SIGUSR2), one reset for both devices, then tracking again
    refused = drv.ctl("reset_estop")
    assert not refused["ok"] and "button" in refused["error"], refused
    assert not drv.ctl("activate")["ok"] and drv.status()["estop"]
    os.kill(sensor_pid, signal.SIGUSR2)
    drv.wait_status(lambda s: not s["device_flags"] & p.FLAG_BUTTON, "the button released")
    reply = drv.ctl("reset_estop")
    assert reply["ok"] and reply["lifecycle"] == "inactive", reply
    drv.wait_status(lambda s: not s["estop"], "the e-stop released")
    assert drv.ctl("activate")["ok"]
    resumed_ns = drv.status()["stamp_ns"]
    moving = wait(lambda: [m for m in _telemetry_after(drv, resumed_ns)
                           if max(abs(x) for x in m["servo_rad"][-1]) > AWAY_RAD], "the servos tracking again")
    assert not any(m["device_flags"] & p.FLAG_ESTOP for m in moving)

    # ---- the sensor microcontroller unplugged (its emulator killed): the whole link goes down, then both
    # devices come back
    bus_pid, sensor_port = drv.status()["link"]["emulator_pid"], drv.status()["link"]["sensor"]["port"]
    os.kill(sensor_pid, signal.SIGKILL)
    lost = drv.wait_status(lambda s: s["link"]["link_losses"] >= 1, "the link lost")
    back = drv.wait_status(lambda s: s["link"]["state"] == "up" and s["link"]["sensor"]["emulator_starts"] == 2,
                           "the link back up")
    assert back["link"]["reconnects"] >= 1 and back["link"]["sensor"]["emulator_pid"] != sensor_pid
    assert back["link"]["emulator_starts"] == 2 and back["link"]["emulator_pid"] != bus_pid   # the bus replugged
    assert not stack.alive(bus_pid)
    wait(lambda: len(_telemetry_after(drv, back["stamp_ns"])) > 10, "telemetry after the reconnect")
    assert sensor_port in lost["error"], lost["error"]        # a failed read or write, or silence, on its port

    assert drv.stop() == 0
    assert not drv.collector.invalid, drv.collector.invalid[:5]


def test_servo_hardware_error_latches_the_microcontroller(stack):
    stack.sim(JOINTS, _stroke, rate_hz=SIM_RATE_HZ)
    drv = stack.driver("--emulate", "--autostart", "--emulator-args", "--hw-error 3.0:2:32", rig=RIG)
    latched = drv.wait_status(lambda s: s["estop"], "the e-stop latched by the overload", STARTUP_S)
    assert "device:fault" in latched["estop_sources"], latched["estop_sources"]
    assert latched["link"]["hardware_error_status"]["2"] == 32
    # the microcontroller was told: its own flags (not merged with the bus's) carry the e-stop
    status = drv.wait_status(lambda s: s["link"]["sensor"]["device_flags"] & p.FLAG_ESTOP,
                             "the microcontroller's e-stop")
    assert status["link"]["estops_forwarded"] >= 1
    assert drv.stop() == 0
