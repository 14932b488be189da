"""The official dynamixel_sdk (Protocol 2.0), unmodified, against our emulator over a real pty.

Each fixture starts ``python -m firmware_interface.dynamixel_emulator`` as a subprocess (the SDK busy-polls the
port, so sharing a process would starve the emulator) and reads the pty path from its first stdout line.
The SDK's reply timeout is 2 x its LATENCY_TIMER (the USB adapter's latency, 16 ms for an FTDI default) + 2 ms;
the machine running these tests is shared and loaded, so the tests set the adapter latency to 500 ms (a 1 s
reply timeout), which is a setting of the SDK (a module constant read at each call), not a change to its code.
Where a test expects a timeout from an ID that is not on the bus, it uses the SDK's default 16 ms.
"""
from __future__ import annotations

import contextlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path

import dynamixel_sdk.port_handler
import pytest
import tomli_w
from dynamixel_sdk import (COMM_RX_CORRUPT, COMM_RX_TIMEOUT, COMM_SUCCESS, GroupBulkRead, GroupSyncRead,
                           GroupSyncWrite, PacketHandler, PortHandler)

from firmware_interface import dynamixel as dxl
from sim.config import load_toml

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
START_TIMEOUT_S = 30.0          # the emulator's start-up on a loaded machine
MOTION_TIMEOUT_S = 10.0         # servos reaching a goal (they take ~0.3 s when the machine is idle)
LOADED_MACHINE_LATENCY_MS = 500
dynamixel_sdk.port_handler.LATENCY_TIMER = LOADED_MACHINE_LATENCY_MS

GOAL, PRESENT_CURRENT, PRESENT_VELOCITY, PRESENT_POSITION = 116, 126, 128, 132


def _start(*extra: str, rig: Path = RIG):
    proc = subprocess.Popen([sys.executable, "-m", "firmware_interface.dynamixel_emulator", "--rig", str(rig),
                             *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    path = proc.stdout.readline().strip()
    assert path.startswith("/dev/"), proc.stderr.read()
    return proc, path


def _stop(proc) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=START_TIMEOUT_S)
    assert proc.returncode == 0, err
    return err


def _open(path: str, baud: int, *, wait: bool = True):
    """The SDK's port on the emulator, once servo 1 answers (the emulator has reached its loop)."""
    port = PortHandler(path)
    assert port.openPort()
    assert port.setBaudRate(baud)
    ph = PacketHandler(2.0)
    if wait:
        _until(lambda: ph.ping(port, 1)[1] == COMM_SUCCESS, START_TIMEOUT_S, "the emulator to answer")
    return port, ph


@pytest.fixture(scope="module")
def bus():
    """The shipped two-servo rig at 1 Mbaud."""
    proc, path = _start()
    port, ph = _open(path, 1_000_000)
    yield port, ph
    port.closePort()
    _stop(proc)


@pytest.fixture(scope="module")
def four_servo_rig(tmp_path_factory):
    doc = load_toml(RIG)
    extra = [dict(doc["servos"][0], name=f"extra_{k}", id=k) for k in (3, 4)]
    doc["servos"] = doc["servos"] + extra
    doc.pop("microcontroller")
    path = tmp_path_factory.mktemp("dxl") / "four.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


@contextlib.contextmanager
def sdk_default_timeout():
    """The SDK's own 16 ms adapter latency, for transactions that must time out (an ID nobody answers to)."""
    dynamixel_sdk.port_handler.LATENCY_TIMER = 16
    try:
        yield
    finally:
        dynamixel_sdk.port_handler.LATENCY_TIMER = LOADED_MACHINE_LATENCY_MS


def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
    raise AssertionError(f"timed out waiting for {what}")


def test_ping_returns_the_model_number(bus):
    port, ph = bus
    for servo_id in (1, 2):
        assert ph.ping(port, servo_id) == (1020, COMM_SUCCESS, 0)


def test_absent_id_times_out(bus):
    port, ph = bus
    with sdk_default_timeout():
        assert ph.ping(port, 9)[1] == COMM_RX_TIMEOUT
        assert ph.read4ByteTxRx(port, 9, PRESENT_POSITION)[1] == COMM_RX_TIMEOUT
    assert ph.ping(port, 1)[1] == COMM_SUCCESS                     # the bus still works afterwards


def test_broadcast_ping_finds_both(bus):
    port, ph = bus
    found, result = ph.broadcastPing(port)
    assert result == COMM_SUCCESS and found == {1: [1020, 52], 2: [1020, 52]}


def test_write_and_read_back(bus):
    port, ph = bus
    assert ph.write1ByteTxRx(port, 1, 64, 0) == (COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, 9, 17) == (COMM_SUCCESS, 0)          # return delay, EEPROM
    assert ph.read1ByteTxRx(port, 1, 9) == (17, COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, 9, 0) == (COMM_SUCCESS, 0)
    assert ph.write4ByteTxRx(port, 2, 112, 123) == (COMM_SUCCESS, 0)      # profile velocity, RAM, 4 bytes
    assert ph.read4ByteTxRx(port, 2, 112) == (123, COMM_SUCCESS, 0)
    assert ph.write4ByteTxRx(port, 2, 112, 0) == (COMM_SUCCESS, 0)
    assert ph.read2ByteTxRx(port, 1, 0) == (1020, COMM_SUCCESS, 0)


def test_access_errors_reach_the_sdk(bus):
    port, ph = bus
    assert ph.write4ByteTxRx(port, 1, PRESENT_POSITION, 5) == (COMM_SUCCESS, dxl.ERR_ACCESS)
    assert ph.write1ByteTxRx(port, 1, 64, 1) == (COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, 11, 1) == (COMM_SUCCESS, dxl.ERR_ACCESS)     # EEPROM with torque on
    assert ph.read1ByteTxRx(port, 1, 11) == (3, COMM_SUCCESS, 0)
    assert ph.write2ByteTxRx(port, 1, GOAL, 5) == (COMM_SUCCESS, dxl.ERR_DATA_LENGTH)
    assert ph.write1ByteTxRx(port, 1, 64, 0) == (COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, 11, 3) == (COMM_SUCCESS, 0)


def test_sync_write_then_sync_read_tracks_the_goals(bus):
    port, ph = bus
    for servo_id in (1, 2):
        assert ph.write1ByteTxRx(port, servo_id, 64, 1) == (COMM_SUCCESS, 0)
    start = {}
    for servo_id in (1, 2):
        start[servo_id], result, _ = ph.read4ByteTxRx(port, servo_id, PRESENT_POSITION)
        assert result == COMM_SUCCESS
    goals = {1: start[1] + 400, 2: start[2] - 300}
    writer = GroupSyncWrite(port, ph, GOAL, 4)
    for servo_id, goal in goals.items():
        assert writer.addParam(servo_id, list(dxl.pack_value(goal, 4)))
    assert writer.txPacket() == COMM_SUCCESS
    reader = GroupSyncRead(port, ph, PRESENT_CURRENT, 10)                # current, velocity, position at once
    for servo_id in goals:
        assert reader.addParam(servo_id)
    velocity_limit = 200 * dxl.VELOCITY_UNIT_RPM                           # rpm, the factory limit
    peak_rpm, peak_current = {1: 0.0, 2: 0.0}, {1: 0, 2: 0}

    def arrived():
        assert reader.txRxPacket() == COMM_SUCCESS
        done = True
        for servo_id, goal in goals.items():
            assert reader.isAvailable(servo_id, PRESENT_POSITION, 4)
            position = dxl.to_signed(reader.getData(servo_id, PRESENT_POSITION, 4), 4)
            velocity = dxl.to_signed(reader.getData(servo_id, PRESENT_VELOCITY, 4), 4) * dxl.VELOCITY_UNIT_RPM
            current = dxl.to_signed(reader.getData(servo_id, PRESENT_CURRENT, 2), 2)
            peak_rpm[servo_id] = max(peak_rpm[servo_id], abs(velocity))
            if abs(current) > abs(peak_current[servo_id]):
                peak_current[servo_id] = current
            done &= abs(position - goal) <= 2
        return done
    _until(arrived, MOTION_TIMEOUT_S, "both servos at their goals")
    for servo_id, goal in goals.items():
        assert peak_rpm[servo_id] <= velocity_limit * 1.02                # the velocity limit holds
        assert peak_rpm[servo_id] > 0.5 * velocity_limit                  # a 400-tick move reaches cruise
        # the peak current is the start-up acceleration: its sign is the direction of motion
        assert math.copysign(1, peak_current[servo_id]) == math.copysign(1, goal - start[servo_id])


def test_out_of_limit_goal_is_a_data_limit_error(bus):
    port, ph = bus
    assert ph.write4ByteTxRx(port, 1, GOAL, 5000) == (COMM_SUCCESS, dxl.ERR_DATA_LIMIT)


def test_status_return_level_zero_answers_ping_only(bus):
    port, ph = bus
    assert ph.write1ByteTxOnly(port, 2, 68, 0) == COMM_SUCCESS
    assert ph.write1ByteTxRx(port, 2, 65, 1)[0] == COMM_RX_TIMEOUT       # no status for a write any more
    assert ph.read1ByteTxRx(port, 2, 65)[1] == COMM_RX_TIMEOUT           # nor for a read
    assert ph.ping(port, 2)[1] == COMM_SUCCESS
    ph.write1ByteTxOnly(port, 2, 68, 2)
    assert _until(lambda: ph.read1ByteTxRx(port, 2, 68) == (2, COMM_SUCCESS, 0), MOTION_TIMEOUT_S, "level 2")


def test_bus_watchdog_trips_and_refuses_goals(bus):
    port, ph = bus
    assert ph.write1ByteTxRx(port, 1, 64, 1) == (COMM_SUCCESS, 0)
    assert ph.write1ByteTxRx(port, 1, 98, 2) == (COMM_SUCCESS, 0)        # 40 ms
    # talk only to servo 2 for 5 watchdog periods (any packet to servo 1 would feed its watchdog)
    quiet_until = time.monotonic() + 0.2
    while time.monotonic() < quiet_until:
        assert ph.ping(port, 2)[1] == COMM_SUCCESS
    assert ph.read1ByteTxRx(port, 1, 98) == (0xFF, COMM_SUCCESS, 0)      # tripped: -1
    assert ph.write4ByteTxRx(port, 1, GOAL, 2048) == (COMM_SUCCESS, dxl.ERR_DATA_RANGE)
    assert ph.write1ByteTxRx(port, 1, 98, 0) == (COMM_SUCCESS, 0)        # reset
    assert ph.write4ByteTxRx(port, 1, GOAL, 2048) == (COMM_SUCCESS, 0)


def test_four_servos_at_4_mbaud_with_one_missing_and_one_faulted(four_servo_rig):
    proc, path = _start("--baud", "4000000", "--missing-ids", "4", "--hw-error", "0:3:32", rig=four_servo_rig)
    port, ph = _open(path, 4_000_000)
    try:
        writer = GroupSyncWrite(port, ph, 112, 4)                           # profile velocity, RAM
        for servo_id in (1, 2, 3):
            assert writer.addParam(servo_id, list(dxl.pack_value(10 * servo_id, 4)))
        assert writer.txPacket() == COMM_SUCCESS
        reader = GroupSyncRead(port, ph, 112, 4)
        for servo_id in (1, 2, 3):
            reader.addParam(servo_id)
        assert reader.txRxPacket() == COMM_SUCCESS
        assert [reader.getData(i, 112, 4) for i in (1, 2, 3)] == [10, 20, 30]
        bulk = GroupBulkRead(port, ph)
        assert bulk.addParam(1, 0, 2) and bulk.addParam(2, 112, 4)
        assert bulk.txRxPacket() == COMM_SUCCESS
        assert bulk.getData(1, 0, 2) == 1020 and bulk.getData(2, 112, 4) == 20
        reader.addParam(4)
        with sdk_default_timeout():
            assert reader.txRxPacket() == COMM_RX_TIMEOUT                  # ID 4 never answers
        # the faulted servo: alert bit on every status, its error in address 70, torque refused... until reboot
        value, result, error = ph.read1ByteTxRx(port, 3, 70)
        assert (value, result, error) == (dxl.HW_OVERLOAD, COMM_SUCCESS, dxl.ERR_ALERT)
        assert ph.reboot(port, 3)[0] == COMM_SUCCESS
        assert _until(lambda: ph.read1ByteTxRx(port, 3, 70) == (0, COMM_SUCCESS, 0), MOTION_TIMEOUT_S, "reboot")
        assert ph.read4ByteTxRx(port, 3, 112) == (0, COMM_SUCCESS, 0)      # RAM back to its defaults
    finally:
        port.closePort()
        _stop(proc)


def test_replies_are_paced_at_the_baud_rate():
    """At 57600 baud a 140-byte read's status packet (151 bytes) takes 26 ms on the wire: never less."""
    proc, path = _start("--baud", "57600")
    port, ph = _open(path, 57600)
    try:
        assert ph.read1ByteTxRx(port, 1, 0)[1] == COMM_SUCCESS
        for _ in range(3):
            t0 = time.perf_counter()
            data, result, _ = ph.readTxRx(port, 1, 0, 140)
            elapsed = time.perf_counter() - t0
            assert result == COMM_SUCCESS and data[:2] == [0xFC, 0x03]
            assert elapsed >= (151 * 10 / 57600) - 2e-3                        # wire time, less the 1 ms tx lead
    finally:
        port.closePort()
        _stop(proc)


def test_corrupted_replies_are_rejected_by_the_sdk():
    proc, path = _start("--corrupt-rate", "1")
    port, ph = _open(path, 1_000_000, wait=False)
    try:
        results = {ph.ping(port, 1)[1] for _ in range(5)}
        assert COMM_SUCCESS not in results and results <= {COMM_RX_CORRUPT, COMM_RX_TIMEOUT}
    finally:
        port.closePort()
        err = _stop(proc)
    stats = json.loads(err.strip().splitlines()[-1].split("): ", 1)[1])
    assert stats["faults"]["corrupted"] == stats["status_packets"] >= 1      # every reply went out corrupted


def test_return_delay_is_kept(bus):
    """Return delay 254 (508 us) before each status: 20 pings take at least 20 x (delay + the 24 bytes of ping
    and status on the wire at 1 Mbaud)."""
    port, ph = bus
    assert ph.write1ByteTxRx(port, 1, 64, 0) == (COMM_SUCCESS, 0)          # return delay is EEPROM
    assert ph.write1ByteTxRx(port, 1, 9, 254) == (COMM_SUCCESS, 0)
    try:
        t0 = time.perf_counter()
        for _ in range(20):
            assert ph.ping(port, 1)[1] == COMM_SUCCESS
        elapsed = time.perf_counter() - t0
    finally:
        assert ph.write1ByteTxRx(port, 1, 9, 0) == (COMM_SUCCESS, 0)
    assert elapsed >= 20 * (254 * dxl.RETURN_DELAY_UNIT_S + 24 * 10e-6)


def test_dropped_replies_time_out():
    proc, path = _start("--drop-rate", "1")
    port, ph = _open(path, 1_000_000, wait=False)
    try:
        with sdk_default_timeout():
            assert {ph.ping(port, 1)[1] for _ in range(3)} == {COMM_RX_TIMEOUT}
    finally:
        port.closePort()
        err = _stop(proc)
    stats = json.loads(err.strip().splitlines()[-1].split("): ", 1)[1])
    assert stats["faults"]["dropped"] == stats["status_packets"] and stats["bytes_tx"] == 0
