"""The C firmware's host port (`mms emulate --firmware`, docs/firmware.md) and the Python device logic, side by side
on real ptys through pyserial: the same scripted session (HELLO, setpoints, a corrupted frame, line noise, an
unknown type, a skipped sequence number, the watchdog) gives the same counters on both."""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import numpy as np
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


FLAPPER = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "flapper_rig.toml"
#: µs of raw pulse width: float32's resolution near 2000 us is 1.2e-4 us; the C ramp's few float32 operations
#: (and the Python device's float64 ones in rad) stay within this of each other
RAW_AGREEMENT_US = 1e-3
#: the setpoint script's stroke: amplitude (rad), frequency (Hz): at most 9.4 rad/s, below the rig's 25 rad/s limit,
#: which the C firmware applies to its outputs and the Python device leaves to the servos' own dynamics
STROKE_RAD, STROKE_HZ = 0.3, 5.0
#: the fraction of samples at which the interpolated outputs stand still, at most (measured: 1 of 119)
STILL = 0.25


def test_the_c_firmware_and_the_python_device_interpolate_setpoints_alike(program):
    """The same frames at the same device times, in lockstep (the C firmware's host port on its pipes, the Python
    device logic on its explicit clock): a 5 Hz stroke's setpoints every 2 ms with up to 1.5 ms of arrival jitter, an
    e-stop mid-ramp and its reset, a silence that trips the watchdog, and the stroke again. Every servo output the C
    firmware did not rate limit equals the Python device's interpolated target, to float32 rounding; the rate limit
    acted only on the steps to the first setpoints (from neutral) and the return to neutral after the e-stop."""
    import dataclasses

    from firmware_interface.c_firmware import FirmwareProcess
    from firmware_interface.emulator import Device
    from firmware_interface.plant import KinematicPlant

    rig = dataclasses.replace(load_rig(FLAPPER), setpoints="interpolate")
    c_outputs = []

    def sample(t_us, dt_us, out_raw):
        c_outputs.append(out_raw)
        return list(out_raw), [0] * len(rig.sensors)
    firmware = FirmwareProcess(program, rig, sample)
    device = Device(rig, KinematicPlant(rig), np.random.default_rng(0))
    python_targets = []
    rng = np.random.default_rng(20261128)
    stroke = lambda t_us: tuple(s.to_raw(STROKE_RAD * np.sin(2e-6 * np.pi * STROKE_HZ * t_us)) for s in rig.servos)  # noqa: E731
    events = {0: p.encode(p.Hello(), 0)}
    seq = iter(range(1, 100_000))
    for start_us, end_us in ((10_000, 150_000), (160_000, 300_000), (420_000, 600_000)):
        for frame_us in range(start_us, end_us, 2000):
            t_us = frame_us + int(rng.integers(0, 1500))
            events[t_us] = events.get(t_us, b"") + p.encode(p.Setpoints(stroke(t_us)), next(seq))
    events[151_100] = events.get(151_100, b"") + p.encode(p.EStop(p.ESTOP_HOST), next(seq))
    events[155_000] = p.encode(p.EStopReset(), next(seq))
    try:
        for t_us in sorted(set(events) | set(range(0, 600_001, 1000))):
            data = events.get(t_us, b"")
            firmware.tick(t_us, data, False, 1 << 20)
            if data:
                device.receive(data, t_us / 1e6)
            before = device.sample_index
            device.tick(t_us / 1e6)
            if device.sample_index > before:
                python_targets.append([s.to_raw(a) for s, a in zip(rig.servos, device.target)])
    finally:
        firmware.close()
    c_raw, python_raw = np.array(c_outputs, dtype=float), np.array(python_targets)
    assert c_raw.shape == python_raw.shape == (601, 2)
    limit = np.array([s.max_rate_rad_s * abs(s.gain) for s in rig.servos]) * 1e-3      # raw per 1 ms sample
    free = np.vstack([np.ones((1, 2), dtype=bool), np.abs(np.diff(c_raw, axis=0)) < 0.99 * limit])
    assert np.abs(c_raw - python_raw)[free].max() < RAW_AGREEMENT_US
    limited_ms = np.flatnonzero(~free.all(axis=1))
    # the rate limit acted on the steps to the first setpoints (10 ms, after the reset at 155 ms and after the trip at
    # ~400 ms) and the return to neutral after the e-stop (151.1 ms) only
    assert limited_ms.size and all(10 <= t < 20 or 152 <= t < 175 or 420 <= t < 440 for t in limited_ms), limited_ms
    assert device.watchdog_trips == firmware.done["watchdog_trips"] == 1
    # the outputs ramped between frames: they stood still only where a frame came later than the interval measured
    # (held, they stand still at every other sample of a 500 Hz host on 1 kHz samples)
    assert np.mean(np.diff(c_raw[20:140, 0]) == 0.0) < STILL
