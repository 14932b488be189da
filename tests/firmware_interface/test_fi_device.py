"""The emulated firmware's logic (firmware_interface.emulator.Device) on an explicit device clock, and the
UART pacing of its pty link. The Device is the real code the emulator runs, driven here frame by frame."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np

from firmware_interface import protocol as p
from firmware_interface.emulator import Emulator, Device, ESTOP_NACK_INTERVAL_S
from firmware_interface.link import DeviceLink
from firmware_interface.plant import KinematicPlant
from firmware_interface.rigs.mcu import load_rig

ROOT = Path(__file__).resolve().parents[2]
RAYBOT = ROOT / "configs" / "rigs" / "raybot_rig.toml"


def device() -> tuple[Device, object]:
    rig = load_rig(RAYBOT)
    return Device(rig, KinematicPlant(rig), np.random.default_rng(0)), rig


def decode(frames: list[bytes]) -> list[p.Packet]:
    decoder = p.StreamDecoder()
    return [pk for f in frames for pk in decoder.feed(f)]


def run(dev: Device, start: float, stop: float, step: float = 1e-3, host=None) -> list[p.Packet]:
    """Tick the device from start to stop (s, device clock); host(t) may return bytes to deliver at t."""
    out = []
    for t in np.arange(start, stop, step):
        if host is not None and (data := host(t)):
            out += dev.receive(data, t)
        out += dev.tick(t)
    return decode(out)


def test_watchdog_trips_at_the_first_sample_past_the_timeout():
    dev, rig = device()
    run(dev, 0.0, 0.01, host=lambda t: p.encode(p.Hello(), 0) if t == 0.0 else b"")
    setpoint = p.encode(p.Setpoints((rig.servos[0].to_raw(0.2),)), 1)
    dev.receive(setpoint, 0.0105)
    assert not dev.watchdog_tripped
    period = 1.0 / rig.telemetry_hz
    packets = run(dev, 0.011, 0.0105 + rig.watchdog_timeout_s + 0.05)
    samples = [s for pk in packets if isinstance(pk.message, p.Telemetry) for s in pk.message.samples]
    trip = next(pk for pk in packets if isinstance(pk.message, p.Heartbeat) and pk.message.flags & p.FLAG_WATCHDOG)
    # the first sampling instant strictly later than last setpoint + timeout
    k = np.floor((0.0105 + rig.watchdog_timeout_s) / period + 1e-9) + 1
    assert trip.t_us == round(k * period * 1e6)
    assert dev.watchdog_trips == 1
    # the servo moved toward 0.2 rad while fed, and back toward neutral after the trip
    before = [s for s in samples if s.t_us < trip.t_us]
    after = [s for s in samples if s.t_us > trip.t_us]
    peak = max(rig.servos[0].to_rad(s.servo[0]) for s in before)
    assert peak > 0.1
    assert rig.servos[0].to_rad(after[-1].servo[0]) < peak


def test_estop_latches_and_nacks_are_rate_limited():
    dev, rig = device()
    raw = (rig.servos[0].to_raw(0.3),)
    seq = iter(range(10_000))

    def host(t):
        if t == 0.0:
            return p.encode(p.EStop(p.ESTOP_HOST), next(seq))
        return p.encode(p.Setpoints(raw), next(seq))     # setpoints every millisecond

    packets = run(dev, 0.0, 1.0, host=host)
    acks = [pk.message for pk in packets if isinstance(pk.message, p.Ack)]
    nacks = [pk for pk in packets if isinstance(pk.message, p.Nack)]
    assert acks == [p.Ack(p.T_ESTOP, 0)]
    assert all(n.message.reason == p.NACK_ESTOP_LATCHED for n in nacks)
    gaps = np.diff([n.t_us for n in nacks]) / 1e6
    assert len(nacks) >= 5 and np.all(gaps >= ESTOP_NACK_INTERVAL_S - 1e-9)
    assert np.all(dev.servos.angle == dev.neutral)
    assert dev.watchdog_trips == 0                      # the e-stop, not the watchdog, holds the servos


def test_configure_changes_the_sampling_clock():
    dev, rig = device()
    dev.receive(p.encode(p.Hello(), 0), 0.0)
    reply = decode(dev.receive(p.encode(p.Configure(250, 5, 50), 1), 0.1))
    assert reply[0].message == p.Ack(p.T_CONFIGURE, 1)
    packets = run(dev, 0.1, 0.5)
    frames = [pk.message for pk in packets if isinstance(pk.message, p.Telemetry)]
    assert all(len(f.samples) == 5 and f.flags & p.FLAG_CONFIGURED for f in frames)
    t = [s.t_us for f in frames for s in f.samples]
    assert set(np.diff(t).tolist()) == {4000} and t[0] == 100_000
    assert dev.watchdog_s == 0.05


def test_the_pty_never_sends_faster_than_the_uart():
    """RayBot telemetry (about 11 kB/s) over a 19200-baud link (1920 bytes/s): the host receives bytes at the
    UART rate, never faster, and the device drops what its buffer cannot hold."""
    baud = 19200
    rig = load_rig(RAYBOT)
    emulator = Emulator(rig, baud=baud)
    thread = threading.Thread(target=emulator.run, daemon=True)
    thread.start()
    try:
        link = DeviceLink(emulator.slave_path, baud)
        link.send(p.Hello())
        arrivals = []                                      # (host time s, bytes so far)
        total, first = 0, None
        deadline = time.monotonic() + 2.5
        while time.monotonic() < deadline:
            data = link.port.read(max(1, link.port.in_waiting))
            if data:
                now = time.monotonic()
                first = first if first is not None else now
                total += len(data)
                arrivals.append((now - first, total))
        link.close()
    finally:
        emulator.stop()
        thread.join(timeout=10)
    rate = baud / 10
    lead_bytes = 64                                         # what may be handed over ahead of the wire
    for t, received in arrivals:
        assert received <= rate * t + lead_bytes + arrivals[0][1]
    t_end, received = arrivals[-1]
    assert received >= 0.7 * rate * t_end                   # and it does keep the line busy
    assert emulator.device.tx_dropped > 0


FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"
#: the host's setpoint interval (the flapper rig's 500 Hz) and the frames' arrival offset from the device's 1 kHz
#: samples, µs: frames land between samples, as a host's do
FRAME_US, ARRIVAL_US = 2000, 300
#: rad: the resolution of a setpoint on the wire (a float32 pulse width near 2000 us, 1.2e-4 us, over the flapper
#: servos' 636.62 us/rad is 1.9e-7 rad; the interpolated target carries two of them)
WIRE_RAD = 1e-6


def flapper_device(setpoints: str) -> tuple[Device, object]:
    import dataclasses

    rig = dataclasses.replace(load_rig(FLAPPER), setpoints=setpoints)
    return Device(rig, KinematicPlant(rig), np.random.default_rng(0)), rig


def targets_of_a_constant_speed_stroke(setpoints: str, speed: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample times (n,) µs and the targets (n,) rad of the right stroke servo for setpoints moving at ``speed``
    rad/s, one frame every FRAME_US arriving ARRIVAL_US after a sample. Device times are µs / 1e6: the device's
    sample k is at k / rate, which ``k * 1e-3`` can fall short of by a rounding (the sample then runs a tick late)."""
    dev, rig = flapper_device(setpoints)
    servo = rig.servos[0]
    times, targets, seq = [], [], iter(range(1, 10_000))
    dev.receive(p.encode(p.Hello(), 0), 0.0)
    for k in range(200):
        arrival = k * FRAME_US + ARRIVAL_US
        angle = speed * arrival * 1e-6
        dev.receive(p.encode(p.Setpoints((servo.to_raw(angle), rig.servos[1].neutral_raw)), next(seq)), arrival / 1e6)
        for t_us in range(arrival - ARRIVAL_US + 1000, arrival - ARRIVAL_US + FRAME_US + 1, 1000):
            dev.tick(t_us / 1e6)
            times.append(t_us)
            targets.append(dev.target[0])
    return np.array(times), np.array(targets)


def test_interpolated_setpoints_move_the_servo_target_the_same_amount_every_sample():
    """A host's setpoints at a constant speed, one frame per 2 ms landing 0.3 ms after a 1 kHz sample: held, the
    target moves by nothing or by two samples' motion at once (the steps that ring the flapper's wings); interpolated,
    by one sample's motion every sample: the setpoint v t_k sent at t_k, one interval (2 ms) late, v (t - 2 ms)."""
    speed = 2.0                                              # rad/s: 0.8 rad after the 200 frames
    per_sample = speed * 1e-3                                # rad per 1 ms sample
    times, held = targets_of_a_constant_speed_stroke("step", speed)
    samples = np.diff(held) / per_sample
    nothing, two = np.isclose(samples, 0.0, atol=WIRE_RAD / per_sample), np.isclose(samples, 2.0, atol=WIRE_RAD / per_sample)
    assert np.all(nothing | two) and nothing.sum() > 90 and two.sum() > 90
    times, ramped = targets_of_a_constant_speed_stroke("interpolate", speed)
    settled = times > 2 * FRAME_US                           # the first frame is stepped to, the second starts a ramp
    assert np.allclose(np.diff(ramped)[settled[1:]], per_sample, rtol=0.0, atol=WIRE_RAD)
    assert np.allclose(ramped[settled], speed * (times[settled] - FRAME_US) * 1e-6, rtol=0.0, atol=WIRE_RAD)


def test_the_estop_and_the_watchdog_hold_an_interpolating_device_at_neutral():
    """Mid-ramp, the e-stop sends the target to neutral at the next sample; after its reset the first setpoints are
    stepped to (no interval to ramp over); a silence trips the watchdog mid-ramp to neutral as well."""
    dev, rig = flapper_device("interpolate")
    raw = lambda a: (rig.servos[0].to_raw(a), rig.servos[1].to_raw(-a))      # noqa: E731 - one-line local
    dev.receive(p.encode(p.Hello(), 0), 0.0)
    dev.receive(p.encode(p.Setpoints(raw(0.1)), 1), 0.0003)
    dev.receive(p.encode(p.Setpoints(raw(0.2)), 2), 0.0023)
    dev.tick(0.003)
    assert 0.1 < dev.target[0] < 0.2                         # mid-ramp
    dev.receive(p.encode(p.EStop(p.ESTOP_HOST), 3), 0.0031)
    dev.tick(0.004)
    assert np.array_equal(dev.target, dev.neutral)
    dev.receive(p.encode(p.EStopReset(), 4), 0.0041)
    dev.receive(p.encode(p.Setpoints(raw(0.3)), 5), 0.0043)
    dev.tick(0.005)
    assert np.allclose(dev.target, [0.3, -0.3], rtol=0.0, atol=1e-6)   # float32 pulse widths on the wire
    dev.receive(p.encode(p.Setpoints(raw(0.4)), 6), 0.0063)
    dev.tick(0.007)
    assert 0.3 < dev.target[0] < 0.4
    trip = 0.0063 + rig.watchdog_timeout_s
    dev.tick(trip + 1e-3)
    assert dev.watchdog_tripped and np.array_equal(dev.target, dev.neutral)


def test_an_interpolation_between_setpoints_within_the_limits_stays_within_them():
    """Setpoints at the servos' raw limits and anywhere between, arriving at random times (often a few within one
    sample, often later than the last ramp's end): every target lies within the rad values of the raw limits, exactly
    (each target is between the two ends of its ramp, which are setpoints the device accepted or earlier targets)."""
    dev, rig = flapper_device("interpolate")
    rng = np.random.default_rng(20261128)
    bounds = [sorted((s.to_rad(s.min_raw), s.to_rad(s.max_raw))) for s in rig.servos]
    dev.receive(p.encode(p.Hello(), 0), 0.0)
    t_us, sample_us, seen = 0, 0, 0
    for seq in range(1, 3000):
        t_us += int(rng.choice([0, 1, 300, 999, 2000, 2001, 5000]))
        while sample_us <= t_us:                             # every sample before the frame, one at a time
            dev.tick(sample_us / 1e6)
            seen += 1
            for target, (lo, hi) in zip(dev.target, bounds):
                assert lo <= target <= hi
            sample_us += 1000
        values = tuple(float(rng.choice([s.min_raw, s.max_raw, rng.uniform(s.min_raw, s.max_raw)]))
                       for s in rig.servos)
        dev.receive(p.encode(p.Setpoints(values), seq), t_us / 1e6)
    assert seen > 1000 and dev.sample_index == seen and not dev.watchdog_tripped
