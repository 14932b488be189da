"""`mms emulate` on a real pseudo-terminal, spoken to through pyserial (firmware_interface/emulator.py).

Most tests start the command as a subprocess; the servo-dynamics test runs the Emulator class in a thread on
a real pty (same code, no start-up cost). Every wait is a poll loop with a deadline.

The tests of the device's behaviour run twice (the ``device`` fixture): against the Python device logic and
against the rig's C firmware (``mms emulate --firmware``, docs/firmware.md), which the host cannot tell apart.
The servo-dynamics test is the Python emulator's own: the C firmware adds the rig's rate limit to the outputs.
"""
from __future__ import annotations

import contextlib
import math
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import serial
from cobs import cobs

from firmware_interface import protocol as p
from firmware_interface.c_firmware import FirmwareEmulator
from firmware_interface.emulator import Emulator
from firmware_interface.link import DeviceLink
from firmware_interface.rigs.mcu import load_rig

ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"
RAYBOT = ROOT / "configs" / "rigs" / "raybot_rig.toml"
START_TIMEOUT_S = 30.0       # generous: the machine is shared


@pytest.fixture
def device(emulate_device) -> list[str]:
    """The device logic behind the pty, as `mms emulate` options (tests/conftest.py: both devices)."""
    return emulate_device


def make_emulator(rig_path: Path, device: list[str], **kwargs) -> Emulator:
    """The emulator class that `mms emulate` runs with the ``device`` options."""
    if device:
        return FirmwareEmulator(load_rig(rig_path), Path(device[1]), **kwargs)
    return Emulator(load_rig(rig_path), **kwargs)


@contextlib.contextmanager
def emulate(rig: Path, *extra: str):
    """Run `mms emulate --rig rig extra...`; yield (process, slave path); stop it (SIGTERM) afterwards."""
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(rig), *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        assert ready, "the emulator printed no port path"
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/"), (path, proc.stderr.read() if proc.poll() is not None else "")
        yield proc, path
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def threaded(rig_path: Path, device: list[str] = (), **kwargs):
    """The emulator (``device``: as :func:`make_emulator`) in a thread on a real pty; yield (emulator, slave path)."""
    emulator = make_emulator(rig_path, list(device), **kwargs)
    thread = threading.Thread(target=emulator.run, daemon=True)
    thread.start()
    try:
        yield emulator, emulator.slave_path
    finally:
        emulator.stop()
        thread.join(timeout=10)


def telemetry_of(packets) -> list[p.TelemetrySample]:
    return [s for pk in packets if isinstance(pk.message, p.Telemetry) for s in pk.message.samples]


def collect(link: DeviceLink, duration_s: float, every=None, period_s: float = 0.01) -> list[p.Packet]:
    """Read for duration_s; call every() at most each period_s (to keep sending setpoints)."""
    out, next_call = [], 0.0
    end = time.monotonic() + duration_s
    while time.monotonic() < end:
        if every is not None and time.monotonic() >= next_call:
            every()
            next_call = time.monotonic() + period_s
        out += link.poll()
    return out


# ------------------------------------------------------------------------------------------------------ tests
def test_hello_and_telemetry_at_the_configured_rate(device):
    rig = load_rig(FLAPPER)
    with emulate(FLAPPER, *device) as (proc, path):
        link = DeviceLink(path, rig.baud)
        # quiet until a host says HELLO: nothing piles up in the port before it is opened
        assert collect(link, 0.2) == []
        info = link.request(p.Hello(), p.DeviceInfo, timeout_s=10)
        assert info is not None
        assert info.message == p.DeviceInfo(p.PROTOCOL_VERSION, (1, 0, 0), "flapper-rig", 2, 4, 6)

        t_start = time.monotonic()
        packets = collect(link, 1.5)
        wall = time.monotonic() - t_start
        frames = [pk.message for pk in packets if isinstance(pk.message, p.Telemetry)]
        samples = telemetry_of(packets)
        assert all(len(f.samples) == rig.samples_per_frame for f in frames)
        assert all((f.n_servo, f.n_strain, f.n_load) == (2, 4, 6) for f in frames)
        # the device clock: consecutive samples exactly one sample period apart (a frame lost because this
        # busy machine stalled the reader for longer than the device's buffers hold shows as a whole multiple)
        period_us = 1_000_000 // rig.telemetry_hz
        steps = np.diff([s.t_us for s in samples])
        assert np.all(steps % period_us == 0) and np.all(steps > 0)
        assert np.mean(steps == period_us) > 0.95
        # the wall clock: the sustained rate is the configured one (generous: shared machine)
        assert 0.7 * rig.telemetry_hz * wall <= len(samples) <= 1.3 * rig.telemetry_hz * wall + 2 * rig.samples_per_frame
        assert link.decoder.counters.errors == 0
        # no setpoints yet: the watchdog holds the servos at neutral, and says so
        assert all(f.flags & p.FLAG_WATCHDOG for f in frames)
        neutral = [s.neutral_raw for s in rig.servos]
        assert all(np.allclose(s.servo, neutral) for s in samples)

        # reconfigure: 250 Hz, 5 samples per frame
        ack = link.request(p.Configure(250, 5, 100), (p.Ack, p.Nack), timeout_s=5)
        assert isinstance(ack.message, p.Ack) and ack.message.msg_type == p.T_CONFIGURE
        later = collect(link, 0.6)
        frames = [pk.message for pk in later if isinstance(pk.message, p.Telemetry)]
        assert frames and all(f.flags & p.FLAG_CONFIGURED for f in frames[1:])
        assert all(len(f.samples) == 5 for f in frames[1:])
        for f in frames[1:]:
            assert set(np.diff([s.t_us for s in f.samples]).tolist()) == {4000}
        heartbeats = [pk for pk in packets + later if isinstance(pk.message, p.Heartbeat)]
        assert heartbeats                                   # 10 Hz device heartbeats
        link.close()


def test_servo_dynamics_deadband_and_kinematic_sensors():
    """Each step of the emulated servo is either rate limited (|step| = max_rate dt) or the exact first-order
    lag step (x' - target = (x - target) exp(-dt / tau)); a command change inside the deadband is ignored."""
    rig = load_rig(RAYBOT)
    servo, truth = rig.servos[0], rig.emulator.servo["tail"]
    dt = 1.0 / rig.telemetry_hz
    with threaded(RAYBOT) as (emulator, path):
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=10) is not None
        target = 0.8                                          # rad
        send = lambda: link.send(p.Setpoints((servo.to_raw(target),)))
        assert link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry), timeout_s=10) is not None
        packets = collect(link, 0.9, every=send)
        samples = telemetry_of(packets)
        angles = np.array([servo.to_rad(s.servo[0]) for s in samples])
        t_us = np.array([s.t_us for s in samples])
        assert angles[0] == servo.neutral_rad
        first = np.argmax(angles > 1e-9) - 1                  # the last neutral sample
        moving, t_us = angles[first:], t_us[first:]
        consecutive = np.diff(t_us) == round(dt * 1e6)      # pairs one sampling step apart
        steps = np.diff(moving)
        lag_error = np.abs((moving[1:] - target) - (moving[:-1] - target) * math.exp(-dt / truth.time_constant_s))
        rate_limited = np.isclose(np.abs(steps), truth.max_rate_rad_s * dt, atol=1e-6) & consecutive
        lagged = (lag_error < 1e-6) & consecutive           # float32 pulse widths: ~1e-7 rad
        assert np.all((rate_limited | lagged)[consecutive])
        assert np.mean(consecutive) > 0.9
        assert rate_limited.sum() >= 5 and lagged.sum() >= 5
        assert np.all(np.abs(steps[consecutive]) <= truth.max_rate_rad_s * dt + 1e-6)
        assert abs(moving[-1] - target) < 1e-3               # settled (tau = 30 ms, 0.9 s)

        # a change smaller than the deadband does not move the horn
        held = angles[-1]
        target = 0.8 + 0.75 * truth.deadband_rad
        packets = collect(link, 0.3, every=send)
        after = np.array([servo.to_rad(s.servo[0]) for s in telemetry_of(packets)])
        assert np.allclose(after, held, atol=1e-6)
        # a change larger than the deadband does
        target = 0.8 + 2.0 * truth.deadband_rad
        packets = collect(link, 0.4, every=send)
        after = np.array([servo.to_rad(s.servo[0]) for s in telemetry_of(packets)])
        assert abs(after[-1] - target) < 1e-4

        # kinematic plant through the calibration: fin_ray_left = 2e-3 * angle (+ noise 1e-6, 1 count 1e-8)
        strain = rig.strain[0]
        samples = telemetry_of(packets)
        measured = np.array([strain.to_value(s.strain[0]) for s in samples])
        expected = 2e-3 * np.array([servo.to_rad(s.servo[0]) for s in samples])
        noise = rig.emulator.sensors["fin_ray_left"].noise_std
        assert np.all(np.abs(measured - expected) < 6 * noise + strain.gain)
        assert 0.3 * noise < np.std(measured - expected) < 3 * noise
        link.close()


#: the interpolation test's setpoints: a frame every INTERVAL_S (s), the right stroke servo at FROM_RAD, then at
#: TO_RAD: a change the interpolating device ramps over 40 ms (2.5 rad/s), where the servo's 10 ms lag alone,
#: stepped, starts at 9.5 rad/s (the C firmware's 25 rad/s output limit and the lag: 8.2 rad/s)
INTERVAL_S, FROM_RAD, TO_RAD = 0.04, 0.1, 0.2
#: the interpolated drive's fastest servo speed against the stepped one's, at most (measured at load 10-14: 0.24
#: Python, 0.30 C; 0.54 once with the rig's 100 ms watchdog, whose timeout a late frame on the busy machine exceeded,
#: and the device stepped to it: hence WATCHDOG_MS)
SLOWER = 0.5
#: ms: the device's watchdog for this test (CONFIGURE): a frame this late is stepped to (no interval to ramp over)
WATCHDOG_MS = 1000
#: samples the servo must stay at a setpoint (within its deadband) before the next phase
SETTLED_SAMPLES = 200


def fastest_change(rig, device: list[str]) -> tuple[float, float]:
    """The servo's fastest speed (rad/s, consecutive samples) after the setpoints change from FROM_RAD to TO_RAD,
    and where it ends (rad), on ``rig`` behind a real pty (``device``: the C firmware's program, or none). Each
    phase lasts until the telemetry shows the servo settled, within a deadline: a busy machine delays the stream."""
    servo, deadband = rig.servos[0], rig.emulator.servo[rig.servos[0].name].deadband_rad
    emulator = FirmwareEmulator(rig, Path(device[1])) if device else Emulator(rig)
    thread = threading.Thread(target=emulator.run, daemon=True)
    thread.start()
    try:
        link = DeviceLink(emulator.slave_path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=10) is not None
        reply = link.request(p.Configure(rig.telemetry_hz, rig.samples_per_frame, WATCHDOG_MS), (p.Ack, p.Nack),
                             timeout_s=10)
        assert isinstance(reply.message, p.Ack)
        phases = []
        for angle in (FROM_RAD, TO_RAD):
            send = lambda: link.send(p.Setpoints((servo.to_raw(angle), rig.servos[1].neutral_raw)))  # noqa: E731
            samples, deadline = [], time.monotonic() + START_TIMEOUT_S
            while time.monotonic() < deadline:
                samples += telemetry_of(collect(link, INTERVAL_S, every=send, period_s=INTERVAL_S))
                if len(samples) > SETTLED_SAMPLES and all(abs(servo.to_rad(s.servo[0]) - angle) <= deadband
                                                          for s in samples[-SETTLED_SAMPLES:]):
                    break
            phases.append(samples)
        link.close()
    finally:
        emulator.stop()
        thread.join(timeout=10)
    t_us = np.array([s.t_us for s in phases[1]])
    angles = np.array([servo.to_rad(s.servo[0]) for s in phases[1]])
    consecutive = np.diff(t_us) == 1_000_000 // rig.telemetry_hz
    assert consecutive.mean() > 0.9
    return float((np.abs(np.diff(angles)) * rig.telemetry_hz)[consecutive].max()), float(angles[-1])


def test_an_interpolating_device_ramps_to_new_setpoints_over_the_setpoint_interval(device):
    """On a real pty, both device logics, the flapper rig with ``[rates] setpoints`` stepped and interpolated: the
    same change of setpoints, frames every 40 ms; interpolated, the device ramps over the measured interval and the
    servo moves at most half as fast as stepped (the step's speed is the servo's lag's, or the C firmware's rate
    limit's); both settle at the new setpoint (within the servo's deadband)."""
    import dataclasses

    rig = load_rig(FLAPPER)
    stepped, stepped_end = fastest_change(dataclasses.replace(rig, setpoints="step"), device)
    ramped, ramped_end = fastest_change(dataclasses.replace(rig, setpoints="interpolate"), device)
    assert ramped < SLOWER * stepped, (ramped, stepped)
    deadband = rig.emulator.servo["stroke_right"].deadband_rad
    assert abs(stepped_end - TO_RAD) <= deadband and abs(ramped_end - TO_RAD) <= deadband


def test_watchdog_sends_servos_to_neutral_and_reports_it(device):
    rig = load_rig(RAYBOT)
    servo = rig.servos[0]
    with emulate(RAYBOT, *device) as (proc, path):
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=10) is not None
        sent_at = []

        def send():
            sent_at.append(time.monotonic())
            link.send(p.Setpoints((servo.to_raw(0.3),)))
        packets = collect(link, 0.5, every=send, period_s=0.02)
        assert abs(servo.to_rad(telemetry_of(packets)[-1].servo[0]) - 0.3) < 5e-3
        assert not any(pk.message.flags & p.FLAG_WATCHDOG for pk in packets[-3:] if isinstance(pk.message, p.Telemetry))
        last_sent = sent_at[-1]
        tripped = link.wait_for(lambda pk: isinstance(pk.message, p.Heartbeat) and pk.message.flags & p.FLAG_WATCHDOG,
                                timeout_s=5)
        assert tripped is not None
        # causality: the device cannot trip before timeout_s after it got our last setpoint
        assert time.monotonic() - last_sent >= rig.watchdog_timeout_s
        back = link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry)
                             and abs(servo.to_rad(pk.message.samples[-1].servo[0])) < 1e-3, timeout_s=5)
        assert back is not None and back.message.flags & p.FLAG_WATCHDOG
        stats = link.request(p.GetLinkStats(), p.LinkStats, timeout_s=5)
        assert stats.message.watchdog_trips == 1
        # setpoints again: the watchdog clears by itself (it is not latched)
        packets = collect(link, 0.4, every=send, period_s=0.02)
        frames = [pk.message for pk in packets if isinstance(pk.message, p.Telemetry)]
        assert not frames[-1].flags & p.FLAG_WATCHDOG
        link.close()


def test_estop_latches_until_reset_and_the_button_reports_itself(device):
    rig = load_rig(RAYBOT)
    servo = rig.servos[0]
    with emulate(RAYBOT, *device) as (proc, path):
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=10) is not None
        send = lambda: link.send(p.Setpoints((servo.to_raw(0.5),)))
        collect(link, 0.5, every=send, period_s=0.02)
        ack = link.request(p.EStop(p.ESTOP_HOST), (p.Ack, p.Nack), timeout_s=5)
        assert isinstance(ack.message, p.Ack) and ack.message.msg_type == p.T_ESTOP
        # setpoints keep coming but are refused; the servo goes to neutral and stays there
        packets = collect(link, 0.6, every=send, period_s=0.02)
        nacks = [pk.message for pk in packets if isinstance(pk.message, p.Nack)]
        assert nacks and all(n.reason == p.NACK_ESTOP_LATCHED and n.msg_type == p.T_SETPOINTS for n in nacks)
        assert len(nacks) <= 0.6 / 0.1 + 2                  # rate-limited NACKs
        frames = [pk.message for pk in packets if isinstance(pk.message, p.Telemetry)]
        assert all(f.flags & p.FLAG_ESTOP for f in frames[1:])
        assert abs(servo.to_rad(frames[-1].samples[-1].servo[0]) - servo.neutral_rad) < 1e-3
        # reset: released, servos stay at neutral until new setpoints arrive
        ack = link.request(p.EStopReset(), (p.Ack, p.Nack), timeout_s=5)
        assert isinstance(ack.message, p.Ack)
        quiet = collect(link, 0.3)
        frames = [pk.message for pk in quiet if isinstance(pk.message, p.Telemetry)]
        assert not frames[-1].flags & p.FLAG_ESTOP
        assert abs(servo.to_rad(frames[-1].samples[-1].servo[0]) - servo.neutral_rad) < 1e-3
        moving = collect(link, 0.5, every=send, period_s=0.02)
        assert abs(servo.to_rad(telemetry_of(moving)[-1].servo[0]) - 0.5) < 5e-3
        # the physical button (SIGUSR1): the device latches and tells the host
        proc.send_signal(signal.SIGUSR1)
        report = link.wait_for(lambda pk: isinstance(pk.message, p.EStop), timeout_s=5)
        assert report is not None and report.message.reason == p.ESTOP_BUTTON
        flagged = link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry) and pk.message.flags & p.FLAG_ESTOP,
                                timeout_s=5)
        assert flagged is not None and flagged.message.flags & p.FLAG_BUTTON
        # held, the button refuses the host's reset; released (SIGUSR2), the e-stop stays latched until a reset
        refused = link.request(p.EStopReset(), (p.Ack, p.Nack), timeout_s=5)
        assert isinstance(refused.message, p.Nack) and refused.message.reason == p.NACK_ESTOP_LATCHED
        proc.send_signal(signal.SIGUSR2)
        released = link.wait_for(lambda pk: isinstance(pk.message, (p.Telemetry, p.Heartbeat))
                                 and not pk.message.flags & p.FLAG_BUTTON, timeout_s=5)
        assert released is not None and released.message.flags & p.FLAG_ESTOP
        ack = link.request(p.EStopReset(), (p.Ack, p.Nack), timeout_s=5)
        assert isinstance(ack.message, p.Ack)
        link.close()


def test_bad_requests_are_nacked_and_bad_bytes_counted(device):
    rig = load_rig(FLAPPER)
    with threaded(FLAPPER, device) as (emulator, path):
        link = DeviceLink(path, rig.baud)
        reply = link.request(p.Setpoints((1500.0,)), (p.Ack, p.Nack), timeout_s=5)
        assert reply.message.reason == p.NACK_CHANNEL_COUNT
        reply = link.request(p.Setpoints((1500.0, 2500.0)), (p.Ack, p.Nack), timeout_s=5)
        assert reply.message.reason == p.NACK_OUT_OF_RANGE
        reply = link.request(p.Setpoints((1500.0, float("nan"))), (p.Ack, p.Nack), timeout_s=5)
        assert reply.message.reason == p.NACK_OUT_OF_RANGE
        reply = link.request(p.Configure(1000, 200, 100), (p.Ack, p.Nack), timeout_s=5)
        assert reply.message.reason == p.NACK_BAD_CONFIG
        reply = link.request(p.Ack(1, 2), (p.Ack, p.Nack), timeout_s=5)
        assert reply.message.reason == p.NACK_NOT_A_REQUEST
        # a CRC-good frame of an unknown type: NACKed with its seq
        body = bytes([p.PROTOCOL_VERSION, 0x7E, 0x34, 0x12, 0, 0, 0, 0])
        link.port.write(b"\x00" + cobs.encode(body + p.crc16_ccitt_false(body).to_bytes(2, "big")) + b"\x00")
        nack = link.wait_for(lambda pk: isinstance(pk.message, p.Nack) and pk.message.seq == 0x1234, timeout_s=5)
        assert nack.message.reason == p.NACK_UNKNOWN_TYPE and nack.message.msg_type == 0x7E
        # line noise and a corrupted frame: counted by the device, which keeps working
        corrupted = bytearray(p.encode(p.Hello(), link.seq))
        corrupted[5] ^= 0x10
        link.port.write(b"\x00\x13\x37\x42\x00" + bytes(corrupted))
        link.seq += 1                                    # the corrupted frame used a seq: one gap
        stats = link.request(p.GetLinkStats(), p.LinkStats, timeout_s=5).message
        assert (stats.crc_errors + stats.framing_errors) == 2
        assert stats.malformed == 1                      # the unknown type
        assert stats.seq_gaps == 1
        assert stats.watchdog_trips == 0 and stats.tx_dropped == 0
        link.close()


def test_fault_injection_and_unplug(device):
    """Dropped and corrupted frames reach the host as sequence gaps and counted errors, never as bad data;
    --disconnect-after closes the port as an unplugged USB device does."""
    rig = load_rig(RAYBOT)
    with emulate(RAYBOT, *device, "--drop-rate", "0.2", "--corrupt-rate", "0.2", "--burst-rate", "0.1",
                 "--disconnect-after", "3", "--seed", "7") as (proc, path):
        link = DeviceLink(path, rig.baud)
        link.send(p.Hello())                            # starts the stream (its reply may be lost to the faults)
        packets, unplugged = [], None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                packets += link.poll()
            except (serial.SerialException, OSError) as exc:   # pyserial raises either, with the same meaning,
                unplugged = exc                                 # depending on where the read was when the pty closed
                break
        assert unplugged is not None, "the port never went away"
        assert proc.wait(timeout=15) == 0
        stderr = proc.stderr.read()
        assert "stopped (disconnect)" in stderr
    c = link.decoder.counters
    seqs = [pk.seq for pk in packets]
    assert c.frames + c.seq_gaps == seqs[-1] - seqs[0] + 1      # no wrap in 3 s
    lost = c.seq_gaps / (seqs[-1] - seqs[0] + 1)
    assert 0.2 < lost < 0.55                                     # 1 - 0.8 * ~0.8 (some corruptions are bursts)
    assert c.crc_errors + c.framing_errors + c.malformed + c.oversize > 0
    samples = telemetry_of(packets)
    assert samples and all(s.servo == (rig.servos[0].neutral_raw,) for s in samples)
    link.port.close()


def test_a_stopped_emulator_handles_the_backlog_the_host_wrote(device):
    """Frames the host wrote while the emulator was starved of CPU (here: its loop never ran) are handled at the
    stop, not lost uncounted: a real device reads its UART at wire speed and is never behind."""
    rig = load_rig(FLAPPER)
    emulator = make_emulator(FLAPPER, device)
    link = DeviceLink(emulator.slave_path, rig.baud)
    frames = 40                            # ~0.7 kB: far more than the 10 ms of wire credit a paced read gets
    for _ in range(frames):
        link.send(p.Heartbeat(0, 0))
    emulator.stop()
    assert emulator.run() == "stopped"
    assert emulator.stats()["rx"]["frames"] == frames
    link.close()
