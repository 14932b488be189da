"""Setpoints reach the emulated servos through the rig's mapping and limits; telemetry comes back calibrated.

Real processes and sockets: a sim/state publisher (this process, or `mms serve`), `mms drive --emulate`,
and the `mms emulate` child it starts. The references are the rig file through firmware_interface.rigs.mcu's own
calibration functions and its emulator section (the kinematic plant's coefficients), not the driver's code.
"""
from __future__ import annotations

import math

import numpy as np

from firmware_interface.rigs.mcu import load_rig
from sim.messages import validate

HIGH, LOW, HALF_PERIOD = 0.4, -0.3, 0.7   # rad, rad, s: a square wave inside the limits; its steps are rate limited
BEYOND = 1.5                        # rad: beyond the stroke_left servo's max_rad = 1.0
#: float32 on the wire: raw setpoints carry ~7 significant digits
RAW_TOL = 1e-3                      # us
#: a servo given a standing command arrives within its deadband (2 mrad) and float32 rounding
SETTLED_TOL_RAD = 0.004
#: a measured angle must lie within the range of the commands, widened by float32 rounding
ENVELOPE_TOL_RAD = 1e-5
#: commands in the second half of the last unbroken tracking stretch, where the clamped left servo is checked (its
#: first half leaves room for the ramp back from neutral after a hold: 1 rad at 25 rad/s, 20 commands at 500 Hz)
SETTLED_COMMANDS = 300


def q_right(t: float) -> float:
    return HIGH if math.floor(t / HALF_PERIOD) % 2 == 0 else LOW


def last_tracking_stretch(commands: list[dict]) -> list[dict]:
    """The commands after the last one not in track mode: a busy machine may stall the state stream into a hold
    (the driver's stale-state guard, docs/driver.md), after which the servos ramp back from neutral at their rate
    limit."""
    last_break = max((k for k, c in enumerate(commands) if c["mode"] != "track"), default=-1)
    return commands[last_break + 1:]


def test_mapping_limits_and_calibrated_telemetry(stack):
    rig = load_rig(stack.flapper_rig)
    right, left = rig.servo("stroke_right"), rig.servo("stroke_left")
    jm_right = next(j for j in rig.joints if j.servo == "stroke_right")
    jm_left = next(j for j in rig.joints if j.servo == "stroke_left")
    sim = stack.sim(["bend1_r", "stroke_r", "stroke_l"], lambda t: [0.3, q_right(t), BEYOND])
    neutral = np.array([s.neutral_rad for s in rig.servos])
    drv = stack.driver("--emulate", "--autostart")

    def tracked_enough() -> list[dict] | None:
        """The commands sent so far once they hold what the asserts below use: 1200 tracking ones and a last unbroken
        stretch long enough to settle in (under load the stream may stall into holds, docs/driver.md: the wait lasts
        until the driver has tracked long enough unbroken, and the asserts read this very list)."""
        sent = drv.collector.get("hw/command")
        enough = sum(c["mode"] == "track" for c in sent) > 1200
        return sent if enough and len(last_tracking_stretch(sent)) // 2 > SETTLED_COMMANDS else None

    all_commands = stack.wait_for(tracked_enough, timeout_s=60, what="1200 tracking commands (2.4 s at 500 Hz), "
                                  f"the last {2 * SETTLED_COMMANDS} unbroken")
    commands = [c for c in all_commands if c["mode"] == "track"]
    telemetry = drv.collector.get("hw/telemetry")
    for topic in ("hw/command", "hw/telemetry", "hw/status"):
        for payload in drv.collector.get(topic)[-50:]:
            validate(topic, {k: v for k, v in payload.items() if k != "_rx_ns"})

    # mapping: the right servo follows the joint exactly, through the rig's calibration, except during the
    # rate-limited ramps after each step of the square wave (0.7 rad at 25 rad/s: 14 ticks)
    exact = 0
    for c in commands:
        expected = jm_right.servo_angle(q_right(c["t"]))
        if not c["limited"][0]:
            assert abs(c["setpoint_rad"][0] - expected) < 1e-12
            assert abs(c["setpoint_raw"][0] - right.to_raw(expected)) < RAW_TOL
            exact += 1
        else:
            assert abs(c["setpoint_rad"][0]) < max(HIGH, -LOW) + 1e-12
    assert exact > 0.8 * len(commands)
    assert sum(c["limited"][0] for c in commands) >= 14
    # position limit: the left servo is clamped at max_rad (1.0), and its raw value is mirrored (direction -1)
    # (the second half of the last unbroken tracking stretch)
    stretch = last_tracking_stretch(all_commands)
    settled = stretch[len(stretch) // 2:]
    assert len(settled) > SETTLED_COMMANDS, [c["mode"] for c in all_commands[-20:]]
    assert all(c["limited"][1] and c["setpoint_rad"][1] == left.max_rad for c in settled), \
        [(c["mode"], c["limited"][1], c["setpoint_rad"][1]) for c in settled if c["setpoint_rad"][1] != left.max_rad][:5]
    assert jm_left.servo_angle(BEYOND) > left.max_rad
    assert abs(settled[-1]["setpoint_raw"][1] - left.to_raw(left.max_rad)) < RAW_TOL
    assert settled[-1]["setpoint_raw"][1] < left.center
    # rate limit: no step larger than max_rate over the longest interval the driver credits (2 periods)
    steps = np.abs(np.diff([c["setpoint_rad"] for c in all_commands], axis=0))
    assert np.all(steps <= np.array([right.max_rate_rad_s, left.max_rate_rad_s]) * 2 / rig.command_hz + 1e-9)

    # the emulated servos reached the setpoints: measured angles (telemetry) against the commanded ones
    command_rad = np.array([c["setpoint_rad"] for c in all_commands])
    assert len(telemetry) > 50
    # every measured angle lies within the range of what was commanded (neutral at start included): a first-order
    # lag and a deadband only ever move toward past commands, so a corrupted or misrouted setpoint would show
    # here (timing-free on purpose: a busy machine may stall the emulator for a while)
    low = np.minimum(command_rad.min(axis=0), neutral) - ENVELOPE_TOL_RAD
    high = np.maximum(command_rad.max(axis=0), neutral) + ENVELOPE_TOL_RAD
    for m in telemetry:
        measured = np.array(m["servo_rad"])
        assert np.all(measured >= low) and np.all(measured <= high)
    # the servos arrive at a standing command: freeze the square wave at a new level and wait for the
    # measured angles to get there (within the deadband and float32 rounding)
    hold_level = 0.25
    sim.q_of_t = lambda t: [0.3, hold_level, BEYOND]
    target = np.array([jm_right.servo_angle(hold_level), left.max_rad])
    stack.wait_for(lambda: np.all(np.abs(np.array(drv.collector.last("hw/telemetry")["servo_rad"][-1]) - target)
                                  < SETTLED_TOL_RAD), what="the servos at the standing command")

    # telemetry calibration: counts -> SI through the rig's calibration, against the emulator's plant truth
    # (sensor = coefficient * servo angle; its noise/gain/offset imperfections as the rig file states them)
    strain_names, load_names = telemetry[0]["strain_names"], telemetry[0]["load_names"]
    kin = rig.emulator.kinematic
    truth_cfg = rig.emulator.sensors
    errors = {name: [] for name in ("root_twist_r", "root_bend_r", "root_bend_l", "fx", "fz")}
    for m in telemetry:
        for angles, strain, load in zip(m["servo_rad"], m["strain"], m["load"]):
            angle = dict(zip(rig.servo_names, angles))
            values = {**dict(zip(strain_names, strain)), **dict(zip(load_names, load))}
            for name in errors:
                truth = kin[name].bias + sum(c * angle[s] for s, c in kin[name].coefficients.items())
                expected = truth_cfg[name].gain * truth + truth_cfg[name].offset
                errors[name].append(values[name] - expected)
    for name, err in errors.items():
        err = np.array(err)
        noise = truth_cfg[name].noise_std
        quantum = next(s for s in rig.sensors if s.name == name).gain
        # drift over a test of ~10 s, the servo's float32 angle, one ADC count, and 6 sigma of noise
        bound = 6 * noise + abs(truth_cfg[name].drift_per_s) * 30 + 2 * quantum + 1e-9
        assert np.max(np.abs(err)) < bound, (name, np.max(np.abs(err)), bound)
    # the 2 % gain error of root_bend_l shows: its reading is 1.02 x the truth, not 1.00 x
    assert truth_cfg["root_bend_l"].gain == 1.02
    device_us = [u for m in telemetry for u in m["device_us"]]
    steps_us = np.array([(b - a) % 2**32 for a, b in zip(device_us, device_us[1:])])
    assert np.all(steps_us > 0) and abs(np.median(steps_us) - 1e6 / rig.telemetry_hz) <= 1   # device clock, us


def test_chain_with_mms_serve(stack):
    """`mms serve` (the flapper) -> `mms drive --emulate` -> emulator: commands come from the served states."""
    rig = load_rig(stack.flapper_rig)
    serve = stack.serve("flapper.toml")
    # a stroke the rig's servos can follow (41.3 deg at 5 Hz needs 22.6 rad/s; the rate limit is 25 rad/s): at the
    # Table I 25 Hz every setpoint may be rate-limited, and then no command can be compared with its state
    assert serve.ctl("set", timeout_s=120, key="stroke.frequency_hz", value=5.0)["ok"]
    states = stack.collect(stack.ep.sim_pub, ["sim/state", "sim/status"])
    drv = stack.driver("--emulate", "--autostart")
    stack.wait_for(lambda: sum(c["mode"] == "track" for c in drv.collector.get("hw/command")) > 100,
                   what="100 tracking commands from mms serve", timeout_s=120)
    by_seq = {s["seq"]: s for s in states.get("sim/state")}
    commands = [c for c in drv.collector.get("hw/command") if c["mode"] == "track"]
    status = drv.status()
    joint_names = stack.wait_for(lambda: states.last("sim/status"), what="a sim/status")["joint_names"]
    index = {name: k for k, name in enumerate(joint_names)}
    checked = 0
    for c in commands:
        state = by_seq.get(c["sim_seq"])
        if state is None:
            continue
        for jm in rig.joints:
            servo = rig.servo(jm.servo)
            channel = rig.servo_names.index(jm.servo)
            wanted = jm.servo_angle(state["q"][index[jm.joint]])
            sent = c["setpoint_rad"][channel]
            assert servo.min_rad <= sent <= servo.max_rad
            if not c["limited"][channel]:
                assert abs(sent - wanted) < 1e-12
                checked += 1
            else:
                assert sent != wanted
        assert c["state_stamp_ns"] == state["stamp_ns"]
    assert checked > 0 and len(commands) > 100
    assert status["states"]["used"] > 0 and status["link"]["state"] == "up"
