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
