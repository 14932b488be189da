"""The driver's pure parts: mapping and calibration, limits, state checks, watchdog, e-stop, lifecycle.

Times are made up (no clock, no sleep); the properties are checked on random inputs with hypothesis.
"""
from __future__ import annotations

import math
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hil.drive.core import CLOCK_RESET_ARRIVALS, CLOCK_TIME_CONSTANT_S, DriverCore, SimClock
from hil.drive.lifecycle import Lifecycle, State, TransitionError
from hil.drive.mapping import ChannelMap, MappingError, ServoMap, apply_limits
from hil.drive.messages import HwPublisherSeq, command_payload
from hil.drive.safety import EStop, Mode, Rejection, StateCheck, watchdog_mode
from sim.messages import TOPIC_HW_COMMAND, validate

PERIOD = 0.002  # s, 500 Hz


def make_map() -> ServoMap:
    return ServoMap([
        ChannelMap("stroke_r_servo", "stroke_r", direction=1.0, gain=2.0, offset=0.1, neutral=0.0,
                   min_angle=-1.0, max_angle=1.0, max_rate=10.0, raw_at_zero=1500.0, raw_per_rad=600.0),
        ChannelMap("stroke_l_servo", "stroke_l", direction=-1.0, gain=1.0, offset=0.0, neutral=0.2,
                   min_angle=-0.5, max_angle=0.8, max_rate=5.0, raw_at_zero=2048.0, raw_per_rad=-651.9),
    ])


def state(seq: int, q: list[float], stamp_ns: int | None = None, names=("passive", "stroke_r", "stroke_l")):
    return {"v": 1, "seq": seq, "t": seq * 1e-3, "stamp_ns": time.time_ns() if stamp_ns is None else stamp_ns,
            "joint_names": list(names), "q": list(q)}


def test_mapping_direction_gain_offset_and_raw_round_trip():
    m = make_map()
    q = np.array([0.7, 0.3, -0.25])
    idx = m.joint_indices(["passive", "stroke_r", "stroke_l"])
    angles = m.joints_to_angles(q, idx)
    assert angles == pytest.approx([2.0 * 0.3 + 0.1, -1.0 * -0.25])
    assert m.angles_to_joints(angles) == pytest.approx([0.3, -0.25])
    raw = m.angles_to_raw(angles)
    assert raw == pytest.approx([1500 + 600 * 0.7, 2048 - 651.9 * 0.25])
    assert m.raw_to_angles(raw) == pytest.approx(angles)
    with pytest.raises(MappingError, match="stroke_l"):
        m.joint_indices(["stroke_r"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1e3, 1e3), min_size=2, max_size=2), st.lists(st.floats(-0.5, 0.8), min_size=2,
       max_size=2), st.floats(0.0, 0.05))
def test_limits_never_exceed_position_or_rate(target, previous, dt):
    m = make_map()
    previous = np.array(previous)
    out, limited = apply_limits(np.array(target), previous, dt, m.min_angle, m.max_angle, m.max_rate)
    assert np.all(out >= m.min_angle - 1e-12) and np.all(out <= m.max_angle + 1e-12)
    assert np.all(np.abs(out - previous) <= m.max_rate * dt + 1e-12)
    untouched = ~limited
    assert np.allclose(out[untouched], np.array(target)[untouched])


def test_state_check_rejects_nan_duplicates_and_old_states():
    m = make_map()
    idx = m.joint_indices(["passive", "stroke_r", "stroke_l"])
    check = StateCheck(max_age_s=0.05)
    now = time.time_ns()
    assert check.check(state(5, [0, 0.1, 0.1], now), idx, now) is None
    assert check.check(state(5, [0, 0.1, 0.1], now), idx, now) is Rejection.DUPLICATE
    assert check.check(state(6, [0, math.nan, 0.1], now), idx, now) is Rejection.NON_FINITE
    assert check.check(state(7, [0, 0.1, math.inf], now), idx, now) is Rejection.NON_FINITE
    # NaN in an unmapped joint does not matter to the rig
    assert check.check(state(8, [math.nan, 0.1, 0.1], now), idx, now) is None
    assert check.check(state(9, [0, 0.1, 0.1], now - 60_000_000), idx, now) is Rejection.STALE
    assert check.check({"seq": 10, "q": "x"}, idx, now) is Rejection.MALFORMED
    assert check.check(state(10, [0, 0.1], now), idx, now) is Rejection.MALFORMED
    assert check.check(state(11, [0, 0.1, 0.1], now), None, now) is Rejection.UNMAPPED
    # with the age check off (unsynchronised hosts) an old stamp is accepted
    assert StateCheck(max_age_s=0).check(state(9, [0, 0.1, 0.1], now - 60_000_000), idx, now) is None
    # a restarted publisher: seq back to 0 with a newer stamp is accepted
    assert check.check(state(0, [0, 0.1, 0.1], now + 1000), idx, now + 1000) is None


def test_watchdog_modes_and_estop_latch():
    assert watchdog_mode(0.01, 0.05, 0.2) is Mode.TRACK
    assert watchdog_mode(0.06, 0.05, 0.2) is Mode.HOLD
    assert watchdog_mode(0.26, 0.05, 0.2) is Mode.RAMP
    e = EStop()
    assert e.trigger("control") and not e.trigger("device")
    assert e.latched and e.sources == ["control", "device"]
    with pytest.raises(ValueError, match="device still reports"):
        e.reset(device_still_stopped=True)
    assert e.latched
    e.reset()
    assert not e.latched and e.count == 1


def test_lifecycle_transitions():
    lc = Lifecycle()
    with pytest.raises(TransitionError, match="cannot activate from unconfigured"):
        lc.apply("activate")
    assert lc.apply("configure") is State.INACTIVE
    assert lc.apply("activate") is State.ACTIVE
    with pytest.raises(TransitionError):
        lc.apply("cleanup")
    assert lc.apply("deactivate") is State.INACTIVE
    assert lc.apply("cleanup") is State.UNCONFIGURED
    assert lc.apply("shutdown") is State.FINALIZED
    with pytest.raises(TransitionError, match="allowed: none"):
        lc.apply("configure")


def configured_core() -> DriverCore:
    core = DriverCore(make_map(), PERIOD, state_timeout_s=0.05, hold_s=0.1)
    core.lifecycle.apply("configure")
    core.link_reset(0.0)
    core.on_measured(np.array([0.0, 0.2]))
    return core


def run_ticks(core: DriverCore, t0: float, t1: float, feed=None):
    """Tick every PERIOD from t0 to t1; ``feed(t)`` may give a state to deliver just before the tick."""
    commands = []
    for k in range(int(round((t1 - t0) / PERIOD))):
        t = t0 + k * PERIOD
        if feed is not None:
            payload = feed(t)
            if payload is not None:
                core.on_state(payload, t, time.time_ns())
        commands.append((t, core.tick(t)))
    return commands


def test_inactive_sends_nothing_and_active_tracks_within_limits():
    core = configured_core()
    seq = iter(range(10**6))
    assert all(c is None for _, c in run_ticks(core, 0.0, 0.1, lambda t: state(next(seq), [0, 0.3, -0.2])))
    core.activate(0.1)
    cmds = run_ticks(core, 0.1, 0.6, lambda t: state(next(seq), [0, 0.3, -0.2]))
    sent = np.array([c.angles for _, c in cmds])
    steps = np.abs(np.diff(np.vstack([[0.0, 0.2], sent]), axis=0))
    assert np.all(steps <= core.map.max_rate * PERIOD + 1e-12)
    # the goal angles are 0.7 and 0.2: reached (0.7 needs 70 ms at 10 rad/s), and then unlimited tracking
    assert sent[-1] == pytest.approx([0.7, 0.2])
    assert cmds[-1][1].mode is Mode.TRACK and not cmds[-1][1].limited.any()
    assert cmds[0][1].limited[0]
    assert cmds[-1][1].sim_seq > 0
    payload = command_payload(HwPublisherSeq().header(TOPIC_HW_COMMAND), mode="track", channels=core.map.names,
                              angles=cmds[-1][1].angles, raw=cmds[-1][1].raw, limited=cmds[-1][1].limited,
                              sim_seq=cmds[-1][1].sim_seq, sim_t=cmds[-1][1].sim_t, state_stamp_ns=0,
                              frame_seq=3, lifecycle="active", setpoint_t=cmds[-1][1].setpoint_t)
    validate(TOPIC_HW_COMMAND, payload)


def test_position_limit_and_stale_states_hold_then_ramp_to_neutral():
    core = configured_core()
    core.activate(0.0)
    seq = iter(range(10**6))
    # joint far beyond the limit: the servo stops at max_angle = 1.0
    cmds = run_ticks(core, 0.0, 0.4, lambda t: state(next(seq), [0, 5.0, -0.2]))
    assert cmds[-1][1].angles[0] == pytest.approx(1.0) and cmds[-1][1].limited[0]
    # the simulator stops: hold for hold_s after the 50 ms timeout, then ramp to neutral and stop there
    cmds = run_ticks(core, 0.4, 1.0)
    modes = [c.mode for _, c in cmds]
    first_hold = next(t for t, c in cmds if c.mode is Mode.HOLD)
    first_ramp = next(t for t, c in cmds if c.mode is Mode.RAMP)
    assert 0.4 + 0.05 - PERIOD <= first_hold <= 0.4 + 0.05 + 2 * PERIOD
    assert first_ramp == pytest.approx(first_hold + 0.1, abs=2 * PERIOD)
    held = [c.angles for _, c in cmds if c.mode is Mode.HOLD]
    assert all(np.array_equal(h, held[0]) for h in held)
    assert modes[-1] is Mode.NEUTRAL and cmds[-1][1].angles == pytest.approx(core.map.neutral)
    # fresh states again: tracking resumes through the rate limit
    cmds = run_ticks(core, 1.0, 1.02, lambda t: state(next(seq), [0, 0.3, -0.2]))
    assert cmds[-1][1].mode is Mode.TRACK
    assert abs(cmds[-1][1].angles[0] - cmds[-2][1].angles[0]) <= 10.0 * PERIOD + 1e-12


def test_estop_latches_stops_sending_and_blocks_activate_until_reset():
    core = configured_core()
    core.activate(0.0)
    seq = iter(range(10**6))
    run_ticks(core, 0.0, 0.2, lambda t: state(next(seq), [0, 0.4, -0.3]))
    assert core.trigger_estop("control")
    assert core.lifecycle.state is State.INACTIVE
    cmds = run_ticks(core, 0.2, 0.6, lambda t: state(next(seq), [0, 0.4, -0.3]))
    assert all(c is None for _, c in cmds)
    with pytest.raises(TransitionError, match="e-stop latched by control"):
        core.activate(0.6)
    core.reset_estop()
    assert core.lifecycle.state is State.INACTIVE
    core.on_measured(np.array([0.0, 0.2]))   # the device held neutral
    core.activate(0.6)
    assert core.lifecycle.state is State.ACTIVE
    cmds = run_ticks(core, 0.6, 0.62, lambda t: state(next(seq), [0, 0.4, -0.3]))
    assert abs(cmds[0][1].angles[0]) <= 10.0 * PERIOD + 1e-12


def test_deactivate_ramps_to_neutral_then_stops_sending():
    core = configured_core()
    core.activate(0.0)
    seq = iter(range(10**6))
    run_ticks(core, 0.0, 0.2, lambda t: state(next(seq), [0, 0.4, -0.3]))
    core.deactivate()
    cmds = run_ticks(core, 0.2, 0.6, lambda t: state(next(seq), [0, 0.4, -0.3]))
    sent = [c for _, c in cmds if c is not None]
    assert all(c.mode in (Mode.RAMP, Mode.NEUTRAL) for c in sent)
    assert sent[-1].mode is Mode.NEUTRAL and sent[-1].angles == pytest.approx(core.map.neutral)
    assert all(c is None for _, c in cmds[len(sent):])
    prev = np.array([0.9, 0.3])
    for c in sent:
        assert np.all(np.abs(c.angles - prev) <= core.map.max_rate * PERIOD + 1e-12)
        prev = c.angles


def test_reconnect_never_replays_a_state_from_before():
    core = configured_core()
    core.activate(0.0)
    seq = iter(range(10**6))
    run_ticks(core, 0.0, 0.2, lambda t: state(next(seq), [0, 0.4, -0.3]))
    core.link_reset(0.2)
    # no telemetry yet after the reconnect: nothing is sent (the servo position is unknown)
    assert core.tick(0.202) is None
    core.on_measured(np.array([0.0, 0.2]))   # the device restarted at neutral
    c = core.tick(0.204)
    assert c.mode is Mode.HOLD and c.angles == pytest.approx([0.0, 0.2]) and c.sim_seq == -1
    core.on_state(state(next(seq), [0, 0.4, -0.3]), 0.205, time.time_ns())
    c = core.tick(0.206)
    assert c.mode is Mode.TRACK and abs(c.angles[0]) <= 10.0 * PERIOD + 1e-12


def test_servo_map_from_rig_agrees_with_the_rig_files_own_calibration(tmp_path):
    from pathlib import Path

    from firmware_interface.rigs.mcu import load_rig
    from hil.drive.mapping import servo_map_from_rig
    from sim.config import ConfigError

    root = Path(__file__).resolve().parents[2]
    for name in ("flapper_rig.toml", "raybot_rig.toml"):
        rig = load_rig(root / "configs" / "rigs" / name)
        m = servo_map_from_rig(rig)
        rng = np.random.default_rng(1)
        names = ["other"] + [j.joint for j in rig.joints]
        q = rng.uniform(-1, 1, len(names))
        angles = m.joints_to_angles(q, m.joint_indices(names))
        for jm in rig.joints:
            k = rig.servo_names.index(jm.servo)
            assert angles[k] == pytest.approx(jm.servo_angle(q[names.index(jm.joint)]), abs=1e-15)
            assert m.angles_to_raw(angles)[k] == pytest.approx(rig.servos[k].to_raw(angles[k]), abs=1e-9)
            assert m.raw_to_angles(m.angles_to_raw(angles))[k] == pytest.approx(angles[k], abs=1e-12)
    # a servo no joint drives stays at its neutral; a servo driven twice is a one-line config error
    text = (root / "configs" / "rigs" / "flapper_rig.toml").read_text()
    unmapped = tmp_path / "unmapped.toml"
    unmapped.write_text(text.replace('joint = "stroke_l"\nservo = "stroke_left"',
                                     'joint = "stroke_l"\nservo = "stroke_right"', 1))
    with pytest.raises(ConfigError, match=r"joints\[1\]\.servo: servo 'stroke_right' is already driven"):
        servo_map_from_rig(load_rig(unmapped))
    rig = load_rig(root / "configs" / "rigs" / "flapper_rig.toml")
    from dataclasses import replace
    m = servo_map_from_rig(replace(rig, joints=rig.joints[:1]))
    angles = m.joints_to_angles(np.array([0.3, 0.9]), m.joint_indices(["stroke_r", "stroke_l"]))
    assert angles[1] == rig.servos[1].neutral_rad and angles[0] == pytest.approx(0.3)


def test_the_lead_carries_each_state_to_a_smooth_clocks_time_whatever_the_arrival_jitter():
    """States every 1 ms of a 5 Hz stroke reach the driver 0.5-3.5 ms after their simulated time (seeded random
    jitter); it reads them at its ticks, every 2 ms, and takes the newest. With a 5 ms lead each setpoint is for a
    time on the driver's simulated clock, which advances by the tick's 2 ms to within the filtered jitter (the
    offset moves by at most (1 - exp(-2 ms / 0.2 s)) x 4 ms = 40 us a tick), and is the stroke there within the
    Taylor step's third-order error (omega d)^3 / 6 of the amplitude (2e-4 rad at |d| = 5 ms, the map's gain 2);
    the states the setpoints come from step 0-6 ms between ticks, and taken as they come the setpoints scatter by
    the jitter times the stroke's rate (up to 0.03 rad)."""
    amplitude, omega = 0.1, 2 * math.pi * 5.0                   # rad, rad/s: stroke_r; map gain 2, offset 0.1
    stroke = lambda t: (amplitude * math.sin(omega * t), amplitude * omega * math.cos(omega * t),  # noqa: E731
                        -amplitude * omega ** 2 * math.sin(omega * t))
    rng = np.random.default_rng(3)
    arrivals = [(k * 1e-3 + 0.5e-3 + rng.uniform(0.0, 3e-3), k) for k in range(1, 400)]

    def run(lead_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Over the ticks after the first 0.1 s: |setpoint - the stroke at its setpoint_t| of channel 0 (rad), and
        the steps of setpoint_t and of the states' sim_t between ticks (s)."""
        core = DriverCore(make_map(), PERIOD, state_timeout_s=0.05, hold_s=0.1, lead_s=lead_s)
        core.lifecycle.apply("configure")
        core.link_reset(0.0)
        core.on_measured(np.array([0.1, 0.2]))
        core.activate(0.0)
        errors, setpoint_t, sim_t, pending = [], [], [], sorted(arrivals)
        for tick in PERIOD * np.arange(1, 180):
            newest = None
            while pending and pending[0][0] <= tick:
                newest = pending.pop(0)[1]
            if newest is not None:
                q, qd, qdd = stroke(newest * 1e-3)
                payload = state(newest, [0.0, q, 0.0]) | {"qd": [0.0, qd, 0.0], "qdd": [0.0, qdd, 0.0]}
                assert core.on_state(payload, tick, time.time_ns()) is None
            command = core.tick(tick)
            if tick > 0.1:
                assert command.mode is Mode.TRACK and (lead_s == 0.0 or not command.limited.any())
                errors.append(abs(command.angles[0] - (2.0 * stroke(command.setpoint_t)[0] + 0.1)))
                setpoint_t.append(command.setpoint_t)
                sim_t.append(command.sim_t)
        return np.array(errors), np.diff(setpoint_t), np.diff(sim_t)

    (led, led_steps, state_steps), (as_they_come, _, _) = run(0.005), run(0.0)
    assert led.max() < 2e-4 < 1e-2 < as_they_come.max(), (led.max(), as_they_come.max())
    assert np.all(np.abs(led_steps - PERIOD) < 4e-5), (led_steps.min(), led_steps.max())
    assert state_steps.min() < PERIOD / 2 and state_steps.max() > 2 * PERIOD, (state_steps.min(), state_steps.max())


def test_the_lead_clock_resets_on_a_pause_and_on_a_new_run_and_leaves_out_a_single_late_state():
    """The clock (hil.drive.core.SimClock, jump threshold 5 ms): states every 1 ms arriving 1 ms late; a single state
    20 ms late moves it not at all; a pause of 0.5 s (the simulator stopped, its time held) moves it by the pause
    once CLOCK_RESET_ARRIVALS states in a row have come that late, not before; a new run (simulated time back to 0)
    likewise."""
    clock = SimClock(CLOCK_TIME_CONSTANT_S, jump_s=0.005)
    for k in range(100):
        clock.on_arrival(k * 1e-3 + 1e-3, k * 1e-3)
    assert clock.at(0.2) == pytest.approx(0.199, abs=1e-12) and clock.resets == 0
    clock.on_arrival(0.100 + 0.020, 0.100)                       # one late state
    assert clock.at(0.2) == pytest.approx(0.199, abs=1e-12)
    for k in range(101, 110):
        clock.on_arrival(k * 1e-3 + 1e-3, k * 1e-3)
    pause = 0.5
    for k in range(110, 110 + CLOCK_RESET_ARRIVALS):
        assert clock.resets == 0 and clock.at(1.0) == pytest.approx(0.999, abs=1e-12)
        clock.on_arrival(k * 1e-3 + 1e-3 + pause, k * 1e-3)
    assert clock.resets == 1 and clock.at(1.0) == pytest.approx(0.999 - pause, abs=1e-12)
    for k in range(CLOCK_RESET_ARRIVALS):                         # a new run from simulated time 0
        clock.on_arrival(2.0 + k * 1e-3, k * 1e-3)
    assert clock.resets == 2 and clock.at(2.5) == pytest.approx(0.5, abs=1e-12)
