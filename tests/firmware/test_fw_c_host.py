"""The C firmware's host port (`mms emulate --firmware`, docs/firmware.md) and the Python device logic, side by side
on real ptys through pyserial: the same scripted session (HELLO, setpoints, a corrupted frame, line noise, an
unknown type, a skipped sequence number, the watchdog) gives the same counters on both."""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest
from cobs import cobs

from firmware_interface import protocol as p
from firmware_interface.c_firmware import FirmwareEmulator
from firmware_interface.emulator import Emulator
from firmware_interface.link import DeviceLink
from firmware_interface.rigs.mcu import load_rig

RAYBOT = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "raybot_rig.toml"
SETPOINT_PERIOD_S = 0.02
SETPOINT_FRAMES = 15
#: the LINK_STATS counters that depend only on what the host sent (frames_tx also counts telemetry: timing)
SCRIPTED = ("frames_rx", "crc_errors", "framing_errors", "oversize", "malformed", "seq_gaps", "watchdog_trips",
            "tx_dropped")


@pytest.fixture
def program(firmware_program) -> Path:
    return firmware_program                 # tests/conftest.py: built once per session


@contextlib.contextmanager
def running(emulator):
    thread = threading.Thread(target=emulator.run, daemon=True)
    thread.start()
    try:
        yield emulator
    finally:
        emulator.stop()
        thread.join(timeout=10)


def scripted_session(emulator) -> tuple[p.LinkStats, p.DeviceInfo, dict]:
    rig = emulator.rig
    link = DeviceLink(emulator.slave_path, rig.baud)
    info = link.request(p.Hello(), p.DeviceInfo, timeout_s=10).message
    servo = rig.servos[0]
    for _ in range(SETPOINT_FRAMES):
        link.send(p.Setpoints((servo.to_raw(0.2),)))
        link.wait_for(lambda pk: False, timeout_s=SETPOINT_PERIOD_S)      # reads the stream meanwhile
    corrupted = bytearray(p.encode(p.Hello(), link.seq))
    corrupted[-2] ^= 0x10                                                 # in the CRC: a CRC error
    link.seq += 1                                                         # its seq is missed: one gap
    body = bytes([p.PROTOCOL_VERSION, 0x7E, 0x34, 0x12, 0, 0, 0, 0])     # CRC-good, unknown type: malformed
    link.port.write(bytes(corrupted) + b"\x00\x13\x37\x42\x00"            # line noise: a framing error
                    + b"\x00" + cobs.encode(body + p.crc16_ccitt_false(body).to_bytes(2, "big")) + b"\x00")
    tripped = link.wait_for(lambda pk: isinstance(pk.message, p.Heartbeat) and pk.message.flags & p.FLAG_WATCHDOG,
                            timeout_s=10)
    assert tripped is not None
    stats = link.request(p.GetLinkStats(), p.LinkStats, timeout_s=5).message
    host = link.decoder.counters
    link.close()
    return stats, info, {"errors": host.errors, "frames": host.frames}


def test_the_c_firmware_and_the_python_device_count_the_same_session_alike(program):
    rig = load_rig(RAYBOT)
    with running(Emulator(rig)) as python_device:
        python_stats, python_info, python_host = scripted_session(python_device)
    with running(FirmwareEmulator(rig, program)) as c_device:
        c_stats, c_info, c_host = scripted_session(c_device)
    assert c_info == python_info
    counters = lambda stats: {name: getattr(stats, name) for name in SCRIPTED}
    assert counters(c_stats) == counters(python_stats)
    # and they are the session's: HELLO + the setpoints + GET_LINK_STATS good, one each of the errors, one trip
    assert python_stats.crc_errors + python_stats.framing_errors == 2 and python_stats.malformed == 1
    assert python_stats.seq_gaps == 1 and python_stats.watchdog_trips == 1
    assert python_stats.frames_rx == 1 + SETPOINT_FRAMES + 1
    # the host saw clean streams from both, of a similar length (telemetry at the same rate)
    assert python_host["errors"] == c_host["errors"] == 0
    assert 0.5 < c_host["frames"] / python_host["frames"] < 2.0
    # the emulator statistics (stderr JSON of `mms emulate`) agree with the device's own counters
    assert c_device.stats()["watchdog_trips"] == python_device.stats()["watchdog_trips"] == 1


def test_a_firmware_that_is_not_a_program_is_one_line(tmp_path, capsys):
    from hil.cli import main

    code = main(["emulate", "--rig", str(RAYBOT), "--duration", "0.3", "--firmware", str(tmp_path / "none")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0] == f"mms emulate: error: --firmware: {tmp_path / 'none'} is not an executable file (a built rig_host)"
