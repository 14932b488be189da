"""The driver's Dynamixel backend (hil/drive/links/dynamixel.py) against the emulator on a real pty.

It is driven the way hil/drive/driver.py drives its link: open, handshake_step until up, send(SETPOINTS /
HEARTBEAT / ESTOP / ESTOP_RESET) on its clocks, receive() whenever the port has bytes.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import dynamixel_sdk.port_handler
import numpy as np
import pytest
from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler

from firmware_interface import protocol as p
from hil.drive.links.dynamixel import DynamixelLink
from firmware_interface.rigs.host import load_driver_rig
from hil.drive.links.serial import LinkError
from hil.drive.mapping import servo_map_from_rig

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
TIMEOUT_S = 10.0                # conditions on a loaded machine
ARRIVED_TICKS = 3
dynamixel_sdk.port_handler.LATENCY_TIMER = 500     # a 1 s reply timeout: the machine is loaded


def _spawn(extra):
    proc = subprocess.Popen([sys.executable, "-m", "firmware_interface.dynamixel_emulator", "--rig", str(RIG),
                             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert path.startswith("/dev/")
    return proc, path


@pytest.fixture(scope="module")
def shared():
    """One emulator for the tests that leave the servos as they found them (each handshake rewrites the setup)."""
    proc, path = _spawn([])
    yield path
    proc.terminate()
    proc.communicate(timeout=30)


@pytest.fixture
def emulator(request):
    proc, path = _spawn(request.param)
    yield path
    proc.terminate()
    proc.communicate(timeout=30)


def _connect(path):
    """Open and configure, retrying as the driver does (a loaded machine may keep the emulator from answering
    the first handshake in time)."""
    dxl_rig, rig = load_driver_rig(RIG)
    link = DynamixelLink(dxl_rig, rig)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        link.open(path, time.monotonic())
        try:
            link.handshake_step([], time.monotonic())
            return dxl_rig, rig, link
        except LinkError:
            link.close()                           # release the port's lock before retrying
            if time.monotonic() > deadline:
                raise


def _cycle(link, message, timeout_s=TIMEOUT_S):
    """Send, then collect what receive() returns until something comes back (a cycle that reads the servos'
    health returns nothing: the next heartbeat, as the driver's clock would, starts another read)."""
    link.send(message)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        packets = link.receive(time.monotonic())
        if packets:
            return packets
        if link.outstanding is None:
            link.send(p.Heartbeat(0, 0))
    raise AssertionError(f"nothing back after {message}")


def _telemetry(packets):
    return [pk.message for pk in packets if isinstance(pk.message, p.Telemetry)]


def test_setpoints_move_the_servos_and_come_back_as_telemetry(shared):
    _, rig, link = _connect(shared)
    servo_map = servo_map_from_rig(rig)
    angles = [0.4, 0.4]                                # both joints +0.4 rad; the left servo is mirrored
    raw = servo_map.angles_to_raw(servo_map.joints_to_angles(np.array([0.4, 0.4]), np.array([0, 1])))
    assert raw[0] > 2048 > raw[1]
    deadline = time.monotonic() + TIMEOUT_S
    measured = None
    while time.monotonic() < deadline:
        telemetry = _telemetry(_cycle(link, p.Setpoints(tuple(raw))))
        if telemetry:
            measured = servo_map.raw_to_angles(telemetry[-1].samples[-1].servo)
            if all(abs(m - a) * 651.9 <= ARRIVED_TICKS for m, a in zip(measured, angles)):
                break
        time.sleep(0.005)                              # the command clock (200 Hz)
    else:
        raise AssertionError(f"servos at {measured}, expected {angles}")
    link.close()


def test_link_clamps_to_the_limit_ticks(shared):
    dxl_rig, _, link = _connect(shared)
    _cycle(link, p.Setpoints((4000.0, 100.0)))        # far outside +-1 rad
    assert link.setpoint_limits.clamped == 2
    link.close()
    port = PortHandler(shared)
    assert port.openPort() and port.setBaudRate(dxl_rig.baud)
    ph = PacketHandler(2.0)
    hi = dxl_rig.servos[0].to_ticks(1.0)
    assert ph.read4ByteTxRx(port, 1, 116) == (hi, COMM_SUCCESS, 0)          # the goal stopped at the limit
    assert ph.read1ByteTxRx(port, 1, 64) == (0, COMM_SUCCESS, 0)            # close left the torque off
    port.closePort()


def test_estop_goes_to_neutral_and_ignores_setpoints_until_reset(shared):
    _, _, link = _connect(shared)
    _cycle(link, p.Setpoints((2300.0, 1800.0)))
    link.send(p.EStop(p.ESTOP_HOST))
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        telemetry = _telemetry(_cycle(link, p.Setpoints((2400.0, 1700.0))))
        if telemetry and all(abs(x - 2048) <= ARRIVED_TICKS for x in telemetry[-1].samples[-1].servo):
            assert telemetry[-1].flags & p.FLAG_ESTOP
            break
    else:
        raise AssertionError("servos did not reach neutral under the e-stop")
    assert link.bus.ignored_estop >= 1
    seq = link.send(p.EStopReset())
    acks = []
    deadline = time.monotonic() + TIMEOUT_S
    while not acks and time.monotonic() < deadline:
        acks = [pk.message for pk in _cycle(link, p.Heartbeat(0, 0)) if isinstance(pk.message, p.Ack)]
    assert acks == [p.Ack(p.T_ESTOP_RESET, seq)]
    link.close()


@pytest.mark.parametrize("emulator", [["--hw-error", "0.0:2:32"]], indirect=True)
def test_hardware_error_becomes_a_fault_estop_and_status(emulator):
    _, _, link = _connect(emulator)
    estops = []
    deadline = time.monotonic() + TIMEOUT_S
    while not estops and time.monotonic() < deadline:
        estops = [pk.message for pk in _cycle(link, p.Heartbeat(0, 0)) if isinstance(pk.message, p.EStop)]
    assert estops == [p.EStop(p.ESTOP_FAULT)]
    assert link.counters()["hardware_error_status"] == {"1": 0, "2": 32}
    link.close()


@pytest.mark.parametrize("emulator", [["--missing-ids", "2"]], indirect=True)
def test_a_missing_servo_fails_the_handshake_with_one_line(emulator):
    dxl_rig, rig = load_driver_rig(RIG)
    link = DynamixelLink(dxl_rig, rig)
    link.open(emulator, time.monotonic())
    with pytest.raises(LinkError) as info:
        link.handshake_step([], time.monotonic())
    assert "servo 2 did not answer PING" in str(info.value) and "\n" not in str(info.value)
    link.close()
