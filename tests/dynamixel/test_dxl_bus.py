"""The emulator's bus logic without a transport (firmware_interface.dynamixel_emulator.Bus): when each status
packet may start on the wire, and the servo mechanics against closed-form expectations."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from firmware_interface import dynamixel as dxl
from firmware_interface.dynamixel_emulator import Bus
from firmware_interface.rigs.dynamixel import RAD_S_PER_VELOCITY_UNIT, TICKS_PER_RAD, load_dxl_rig

RIG = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
BAUD = 1_000_000
BYTE_S = 10 / BAUD


@pytest.fixture
def bus():
    return Bus(load_dxl_rig(RIG).servos, BAUD)


def _set(bus, servo_id, name, value, now):
    item = dxl.ITEMS[name]
    (reply,) = bus.receive(dxl.write(servo_id, item.address, dxl.pack_value(value, item.size)), now)
    assert dxl.StreamParser().feed(reply.data)[0].error == 0


def test_status_packets_follow_return_delay_and_bus_order(bus):
    _set(bus, 1, "return_delay_time", 100, 0.0)            # 200 us
    _set(bus, 2, "return_delay_time", 50, 0.0)             # 100 us
    now = 1.0
    replies = bus.receive(dxl.sync_read(132, 4, [2, 1]), now)
    assert [r.servo_id for r in replies] == [2, 1]         # in the order listed
    first, second = replies
    assert first.start_s == pytest.approx(now + 100e-6)
    assert second.start_s == pytest.approx(first.start_s + len(first.data) * BYTE_S + 200e-6)
    # the next instruction's reply waits for the bus to be free
    (ping,) = bus.receive(dxl.ping(2), now + 1e-6)
    assert ping.start_s == pytest.approx(second.start_s + len(second.data) * BYTE_S + 100e-6)


def test_step_response_cruises_at_the_velocity_limit_then_settles(bus):
    _set(bus, 1, "torque_enable", 1, 0.0)
    servo = bus.servo(1)
    start = servo.table.get("present_position")
    _set(bus, 1, "goal_position", start + 1000, 0.0)
    v_max = servo.table.get("velocity_limit") * RAD_S_PER_VELOCITY_UNIT          # rad/s
    servo.advance(0.3)
    assert servo.omega == pytest.approx(v_max, rel=1e-3)                          # cruising
    travelled = (servo.table.get("present_position") - start) / TICKS_PER_RAD
    assert travelled < v_max * 0.3                                                # never faster than the limit
    servo.advance(2.0)
    assert abs(servo.table.get("present_position") - (start + 1000)) <= 1
    assert abs(servo.table.get("present_velocity")) <= 1


def test_current_is_the_torque_of_inertia_and_damping(bus):
    """At cruise the motor only overcomes damping: i = b * omega / kt."""
    _set(bus, 1, "torque_enable", 1, 0.0)
    servo = bus.servo(1)
    _set(bus, 1, "goal_position", servo.table.get("present_position") + 1500, 0.0)
    servo.advance(0.3)
    truth = servo.truth
    expected_a = truth.damping_n_m_s * servo.omega / truth.torque_constant_n_m_a
    assert servo.current_a == pytest.approx(expected_a, rel=1e-3)
    assert servo.table.get("present_current") == round(expected_a / dxl.CURRENT_UNIT_A)


def test_torque_off_coasts_with_the_damping_time_constant(bus):
    _set(bus, 1, "torque_enable", 1, 0.0)
    servo = bus.servo(1)
    _set(bus, 1, "goal_position", servo.table.get("present_position") + 1500, 0.0)
    servo.advance(0.3)
    omega0 = servo.omega
    _set(bus, 1, "torque_enable", 0, 0.3)
    servo.advance(0.31)
    tau = servo.truth.inertia_kg_m2 / servo.truth.damping_n_m_s
    assert servo.omega == pytest.approx(omega0 * math.exp(-0.01 / tau), rel=1e-6)
    assert servo.current_a == 0.0
