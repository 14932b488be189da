"""Authority over the rig and the driver's run health, with real processes: `mms drive --emulate` (its
`mms emulate` child writing an applied log), a sim/state publisher and control clients on real sockets.

* the e-stop button held on the rig: no reset from the host, remote or local, and no activate moves the rig;
  released, the reset is taken;
* the issue's crashing sim/state payloads: the driver lives, holds, goes to neutral, and tracks again;
* hw/status health, with the emulator's physics plant.
In every case the applied log proves that no setpoint outside the rig's limits reached the firmware.
The button test and the physics plant's health run against the Python emulator and the rig's C firmware
(`mms emulate --firmware`).
"""
from __future__ import annotations

import math
import os
import signal
import time

import numpy as np
import pytest

from firmware_interface import protocol as p
from firmware_interface.pty_device import read_applied_log
from firmware_interface.rigs.mcu import load_rig
from hil.drive.inputs import SetpointLimits

JOINTS = ["stroke_r", "stroke_l"]


@pytest.fixture
def device(emulate_device) -> str:
    """`mms emulate` options choosing the device logic (tests/conftest.py: the Python emulator's or the C
    firmware's), as the text of `mms drive --emulator-args`."""
    return "".join(f" {arg}" for arg in emulate_device)


def driver_with_log(stack, *extra, device: str = ""):
    """`mms drive --emulate` whose emulator (with the ``device`` options) writes an applied log; (driver, log)."""
    log = stack.tmp / f"applied-{time.monotonic_ns()}.jsonl"
    drv = stack.driver("--emulate", "--emulator-args", f"--applied-log {log}{device}", *extra)
    drv.wait_status(lambda s: s["lifecycle"] == "inactive" and s["link"]["state"] == "up", "the link up")
    return drv, log


def applied_within_limits(stack, log) -> list[dict]:
    records = read_applied_log(log)
    limits = SetpointLimits(load_rig(stack.flapper_rig).servos)
    raw = np.array([r["raw"] for r in records if r["result"] == "applied"], dtype=float).reshape(-1, 2)
    assert np.all(np.isfinite(raw)) and np.all(raw >= limits.lo) and np.all(raw <= limits.hi)
    assert not [r for r in records if r["result"] == "refused" and r["reason"] != "estop_latched"]
    return records


def applied_after(log, t_ns: int) -> list[dict]:
    return [r for r in read_applied_log(log) if r["result"] == "applied" and r["host_ns"] > t_ns]


def test_a_held_button_cannot_be_reset_from_the_host_and_a_released_one_can(stack, device):
    stack.sim(JOINTS, lambda t: [0.6 * math.sin(2 * math.pi * t), 0.3])
    drv, log = driver_with_log(stack, "--allow-remote-reset", device=device)
    assert drv.ctl("activate")["ok"]
    stack.wait_for(lambda: len(applied_after(log, 0)) > 50, what="setpoints applied")
    emulator_pid = drv.ctl("status")["link"]["emulator_pid"]
    os.kill(emulator_pid, signal.SIGUSR1)                       # the button pressed, and held
    held = drv.wait_status(lambda s: s["estop"] and s["device_flags"] & p.FLAG_BUTTON, "the button held")
    assert "device:button" in held["estop_sources"] and held["lifecycle"] == "inactive"
    pressed_ns = time.time_ns()
    # the host tries everything: a remote reset, activate, the local confirmation (SIGUSR1 to the driver)
    reply = drv.ctl("reset_estop")
    assert not reply["ok"] and "button" in reply["error"], reply
    assert not drv.ctl("activate")["ok"]
    drv.proc.send_signal(signal.SIGUSR1)
    stack.wait_for(lambda: "e-stop reset (SIGUSR1)" in drv.log_text(), what="the local reset refused")
    assert "button is still pressed" in drv.log_text()
    assert not drv.ctl("activate")["ok"]
    status = drv.ctl("status")
    assert status["estop"] and status["lifecycle"] == "inactive" and status["device_flags"] & p.FLAG_ESTOP
    # the rig stayed stopped: the driver sent the firmware nothing since it knew (not even setpoints it would
    # refuse); a frame it sent before, still in the pty when the button was pressed (a loaded machine), reached
    # the firmware after the press and was refused
    checked_ns = time.time_ns()
    assert drv.wait_status(lambda s: s["stamp_ns"] > checked_ns, "a later status")["estop"]
    assert [c for c in drv.collector.get("hw/command") if c["stamp_ns"] > held["stamp_ns"]] == []
    sent_before = {c["frame_seq"] for c in drv.collector.get("hw/command") if c["stamp_ns"] <= held["stamp_ns"]}
    late = [r for r in read_applied_log(log) if r["host_ns"] > pressed_ns]
    assert all(r["seq"] in sent_before and r["result"] == "refused" for r in late), late
    # released at the rig: the e-stop stays latched until a reset, which is now taken
    os.kill(emulator_pid, signal.SIGUSR2)
    released = drv.wait_status(lambda s: not s["device_flags"] & p.FLAG_BUTTON, "the button released")
    assert released["estop"] and released["device_flags"] & p.FLAG_ESTOP
    reply = drv.ctl("reset_estop")
    assert reply["ok"] and reply["lifecycle"] == "inactive", reply
    assert drv.ctl("activate")["ok"]
    reset_ns = time.time_ns()
    stack.wait_for(lambda: len(applied_after(log, reset_ns)) > 50, what="setpoints applied after the reset")
    applied_within_limits(stack, log)


# ---- the crashing states, from a publisher, into a real `mms drive` ---------------------------------------
CRASHING_STATES = [
    lambda s: {**s, "q": [*s["q"], "x"], "joint_names": [*s["joint_names"], "extra"]},
    lambda s: {**s, "joint_names": [1, 2]},
    lambda s: {**s, "joint_names": [[1], [2]]},
    lambda s: {**s, "q": [str(x) for x in s["q"]]},
    lambda s: {**s, "seq": 2**63 - 1, "stamp_ns": 2**63 - 1},
    lambda s: {**s, "q": [math.nan, math.inf]},
    lambda s: {**s, "stamp_ns": s["stamp_ns"] + 10**10},
]


def test_a_stream_of_crashing_states_holds_then_neutral_and_good_states_are_tracked_again(stack):
    rig = load_rig(stack.flapper_rig)
    neutral = np.array([s.neutral_rad for s in rig.servos])
    sim = stack.sim(JOINTS, lambda t: [0.5, -0.3])
    drv, log = driver_with_log(stack)
    assert drv.ctl("activate")["ok"]
    drv.wait_status(lambda s: s["watchdog"] == "track", "tracking")
    sent = iter(range(10**9))
    sim.override = lambda payload: CRASHING_STATES[next(sent) % len(CRASHING_STATES)](payload)
    bad_ns = time.time_ns()
    status = drv.wait_status(lambda s: s["watchdog"] == "neutral", "hold, ramp, then neutral on bad states")
    modes = [c["mode"] for c in drv.collector.get("hw/command") if c["stamp_ns"] > bad_ns]
    assert "hold" in modes and "ramp" in modes and modes[-1] == "neutral"
    assert np.array_equal(drv.collector.get("hw/command")[-1]["setpoint_rad"], neutral)
    refused = status["health"]["refused"]
    for reason in ("malformed", "future", "non_finite"):
        assert refused.get(f"state:{reason}", 0) > 0, refused
    assert status["health"]["holds"] >= 1 and status["health"]["hold_s"] > 0
    sim.override = None
    drv.wait_status(lambda s: s["watchdog"] == "track", "tracking again after the bad stream")
    assert drv.proc.poll() is None and drv.ctl("status")["states"]["gaps"] < 10**6
    applied_within_limits(stack, log)


# ---- run health: the emulator's physics plant -----------------------------------------------------------------
def test_hw_status_health_carries_the_emulators_physics_plant(stack, device):
    drv = stack.driver("--emulate", "--emulator-args", f"--plant physics{device}")
    status = drv.wait_status(lambda s: "plant" in s["health"] and s["health"]["plant"]["rtf"] > 0,
                             "the plant's figures in hw/status", timeout_s=120)
    plant = status["health"]["plant"]
    assert plant["alive"] and plant["restarts"] == 0 and math.isfinite(plant["lag_s"])
    assert set(status["health"]) >= {"holds", "hold_s", "stale_states", "refused", "measurement_faults",
                                     "watchdog_trips", "reconnects", "plant"}
    assert drv.collector.invalid == [] and drv.collector.count > 10       # every hw/* message schema-checked
    # a kinematic plant has no figures to report: no "plant" key
    assert drv.stop() == 0
    kinematic = stack.driver("--emulate", *(("--emulator-args", device.strip()) if device else ()))
    status = kinematic.wait_status(lambda s: s["link"]["state"] == "up", "the link up")
    assert "plant" not in kinematic.wait_status(lambda s: s["stamp_ns"] > status["stamp_ns"] + 2 * 10**9,
                                                "two seconds of status")["health"]
