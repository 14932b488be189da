"""The last line before the port on the Dynamixel paths: the bus link's goal positions and the composite link's
mirrored setpoints to the sensor microcontroller. Both emulators run in threads on real ptys and write their
applied logs; setpoints far outside the limits, not finite or of the wrong count are sent through a real
:class:`hil.drive.links.composite.CompositeLink`, and the logs show what the devices were given."""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np

from firmware_interface import protocol as p
from firmware_interface.dynamixel_emulator import DynamixelEmulator
from firmware_interface.emulator import Emulator
from firmware_interface.pty_device import AppliedLog, read_applied_log
from firmware_interface.rigs.mcu import load_rig
from hil.drive.links.composite import CompositeLink
from firmware_interface.rigs.host import limit_ticks, load_driver_rig
from hil.drive.inputs import SetpointLimits
from hil.testing import wait_for

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
#: bus setpoints (goal ticks) sent, and whether the last line lets a frame through
FRAMES = [((4000.0, 100.0), True), ((math.nan, 2048.0), False), ((1e30, -1e30), True), ((2048.0,), False),
          ((2100.0, 1990.0), True), ((math.inf, -math.inf), False), ((-5.0, 9000.0), True)]


def running(device):
    thread = threading.Thread(target=device.run, daemon=True)
    thread.start()
    return thread


def test_bus_goals_and_mirrored_setpoints_never_leave_the_limits(tmp_path):
    dxl_rig, bus_rig = load_driver_rig(RIG)
    sensor_rig = load_rig(dxl_rig.microcontroller)
    bus_log, sensor_log = tmp_path / "bus.jsonl", tmp_path / "sensor.jsonl"
    bus = DynamixelEmulator(dxl_rig, applied_log=AppliedLog(bus_log))
    sensor = Emulator(sensor_rig, applied_log=AppliedLog(sensor_log))
    threads = [running(bus), running(sensor)]
    link = CompositeLink(dxl_rig, bus_rig, sensor_rig, servo_channels="mirror", sensor_port=sensor.slave_path)
    try:
        link.open(bus.slave_path, time.monotonic())

        def up():
            now = time.monotonic()
            link.handshake_step(link.receive(now), now)
            return link.up
        wait_for(up, what="both devices configured", poll_s=0.002)
        sent = [link.send(p.Setpoints(raw)) is not None for raw, _ in FRAMES]
        assert sent == [ok for _, ok in FRAMES]
        passed = sum(ok for _, ok in FRAMES)
        wait_for(lambda: link.receive(time.monotonic()) is not None
                 and len([r for r in read_applied_log(sensor_log)]) >= passed, what="the mirrored setpoints")
        wait_for(lambda: len(read_applied_log(bus_log)) >= passed * len(dxl_rig.servos), what="the bus goals")
    finally:
        link.close()
        for device in (bus, sensor):
            device.stop()
        for thread in threads:
            thread.join(10)
    goals = {}
    for record in read_applied_log(bus_log):
        assert record["result"] == "applied", record
        goals.setdefault(record["id"], []).append(record["goal_position"])
    for servo in dxl_rig.servos:
        lo, hi = limit_ticks(servo)
        assert lo <= min(goals[servo.id]) and max(goals[servo.id]) <= hi
        assert {lo, hi} <= set(goals[servo.id])           # the frames far out were held on the limits
    limits = SetpointLimits(sensor_rig.servos)
    records = read_applied_log(sensor_log)
    assert len(records) == passed and all(r["result"] == "applied" for r in records)
    raw = np.array([r["raw"] for r in records])
    assert np.all(np.isfinite(raw)) and np.all(raw >= limits.lo) and np.all(raw <= limits.hi)
    assert link.counters()["last_line"] == {"clamped": link.bus.setpoint_limits.clamped, "dropped": 3}
    assert link.bus.setpoint_limits.clamped >= 6
