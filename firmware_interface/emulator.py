"""The rig microcontroller's firmware in Python on a pseudo-terminal, byte-paced like a real UART (what ``mms emulate``
runs for a microcontroller rig; the command itself: firmware_interface/emulate_command.py).

The emulator opens a pty (raw mode), prints the slave's path on the first line of stdout, and then behaves as
the rig's microcontroller does (docs/protocol.md, docs/rigs.md):

* receives frames at most as fast as the configured baud allows and answers them (hello, setpoints, configure,
  heartbeat, e-stop, e-stop reset, link statistics), NACKing bad requests;
* samples at the telemetry rate on its own clock (streamed once a host has said HELLO): the servo target (each
  setpoint frame held, or interpolated from the previous one over the measured setpoint interval: the rig file's
  ``[rates] setpoints``, :class:`SetpointRamp`), servo dynamics (deadband, first-order lag, rate limit) and the
  sensors (plant, then gain, offset, drift, noise, quantisation, saturation), batched into telemetry frames;
* keeps the rig safe: a device watchdog (no valid setpoints for the timeout -> servos to neutral, flagged and
  reported) and a latched e-stop (host command, or the "button": SIGUSR1 presses and holds it, SIGUSR2 releases
  it) released only by ESTOP_RESET, which is refused (NACK "e-stop latched") while the button is held;
* sends its bytes no faster than 10 bits per byte at the baud rate, through a bounded transmit buffer (frames
  that do not fit are dropped and counted, as firmware does when the host stops reading);
* injects faults on request: dropped, corrupted frames, bursts of line noise, host->device bit errors, and an
  unplug (closes the pty and exits) after a given time;
* with ``--applied-log FILE``, writes one JSON line per SETPOINTS frame it applied or refused
  (:class:`firmware_interface.pty_device.AppliedLog`, docs/protocol.md).

The device logic (:class:`Device`) is separate from the transport and the loop (:class:`Emulator`, a
:class:`firmware_interface.pty_device.PtyDevice` on a :class:`~firmware_interface.pty_device.PtyLink`, shared
with the Dynamixel bus emulator), so tests can run it in a thread on a real pty as well as in a subprocess.
"""
from __future__ import annotations

import math
import os
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from firmware_interface import protocol as p
from firmware_interface.plant import make_plant
from firmware_interface.pty_device import (AppliedLog, PtyDevice, line_fault)
from firmware_interface.rigs.mcu import Rig
from firmware_interface.rigs.schema import MAX_SAMPLE_RATE_HZ

#: Most the loop sleeps without checking the port, s.
MAX_IDLE_S = 2e-3
#: If the loop falls further behind its sampling clock than this, s, it skips ahead (and counts an overrun).
MAX_CATCH_UP_S = 0.5
#: While the e-stop is latched, setpoints are NACKed at most this often, s (a 500 Hz host would flood the link).
ESTOP_NACK_INTERVAL_S = 0.1
#: NACK reasons a SETPOINTS frame can be refused with, as named in the applied log.
SETPOINT_REFUSALS = {p.NACK_ESTOP_LATCHED: "estop_latched", p.NACK_CHANNEL_COUNT: "channel_count",
                     p.NACK_OUT_OF_RANGE: "out_of_range"}
#: The measured setpoint interval is a running mean: each new interval moves it by 1/this of the difference (a
#: frame late by a millisecond shifts the ramps after it by an eighth of that; RIG_INTERVAL_AVERAGE in rig_fw.h).
INTERVAL_AVERAGE = 8
US_PER_S = 1_000_000


class SetpointRamp:
    """The servo target between setpoint frames, ``[rates] setpoints`` of the rig file (docs/rigs.md):

    - ``"step"``: each frame's values, from the sample after it arrived until the next frame;
    - ``"interpolate"``: a frame arriving at ``a_k`` starts a straight ramp from the target at ``a_k`` (where the
      previous ramp had got to) to its values, reached ``T`` later, ``T`` the setpoint interval measured so far
      (a running mean of the frames' arrival intervals, :data:`INTERVAL_AVERAGE`); the device reads the ramp at its
      samples. For frames every ``T`` the target is the host's setpoints linearly interpolated, one interval late:
      ``target(t) = s_(k-1) + (s_k - s_(k-1)) (t - a_k) / T`` on ``[a_k, a_k + T]``. A host's setpoints, which arrive
      asynchronously to the samples (500 Hz frames on 1 kHz samples: steps of one or of two samples' motion at
      once), then move the servos by the same amount every sample instead of in steps that ring a flexible load.

    The first frame after none was in force (power-up, an e-stop reset, a watchdog trip), and one arriving later
    than the watchdog timeout after the previous, is stepped to: there is no interval to interpolate over. Each
    target lies between the ramp's two ends (clipped there, against rounding), so between values the device
    accepted: within the rig's limits. Values ``(n,)`` in one unit (here rad at the horn; the C firmware: raw).
    """

    def __init__(self, start: np.ndarray, interpolate: bool, watchdog_us: int):
        self.interpolate = interpolate
        self.watchdog_us = watchdog_us
        self.start = np.array(start, dtype=float)     # (n,) the target when the newest frame arrived
        self.end = self.start.copy()                  # (n,) the newest frame's values
        self.arrived_us = 0                           # device clock of its arrival, µs
        self.interval_us = 0.0                        # the measured setpoint interval, µs; 0: none (a step)
        self.span = np.zeros_like(self.start)         # (n,) end - start
        self.low, self.high = self.start.copy(), self.start.copy()   # (n,) the ramp's bounds

    def set(self, values: np.ndarray, now_us: int, continuing: bool) -> None:
        """A frame's ``values`` (n,) applied at ``now_us`` (µs); ``continuing``: setpoints were in force up to it."""
        measured = now_us - self.arrived_us
        if self.interpolate and continuing and measured <= self.watchdog_us:
            self.start = self.at(now_us)
            self.interval_us = float(measured) if self.interval_us == 0.0 else \
                self.interval_us + (measured - self.interval_us) / INTERVAL_AVERAGE
        else:
            self.start, self.interval_us = np.array(values, dtype=float), 0.0
        self.end, self.arrived_us = np.array(values, dtype=float), now_us
        # the ramp's span and bounds, once per frame (the device reads the ramp at every sample)
        self.span = self.end - self.start
        self.low, self.high = np.minimum(self.start, self.end), np.maximum(self.start, self.end)

    def at(self, t_us: int) -> np.ndarray:
        """The target (n,) at the device time ``t_us`` (µs)."""
        fraction = (t_us - self.arrived_us) / self.interval_us if self.interval_us > 0.0 else 1.0
        if fraction >= 1.0:
            return self.end.copy()
        if fraction <= 0.0:
            return self.start.copy()
        return np.minimum(np.maximum(self.start + self.span * fraction, self.low), self.high)

    @property
    def delay_intervals(self) -> float:
        """How late the target follows a host's setpoints sent every interval, in intervals (the transport's delay
        apart): a step holds each half an interval late on average, the ramp reaches each one interval late."""
        return 1.0 if self.interpolate else 0.5


@dataclass
class Faults:
    """Fault injection, per device->host frame unless named otherwise."""
    drop_rate: float = 0.0           # probability a frame is silently not sent
    corrupt_rate: float = 0.0        # probability one bit of a frame is flipped
    burst_rate: float = 0.0          # probability a burst of random bytes precedes a frame
    burst_bytes: int = 16            # length of a burst
    rx_byte_error_rate: float = 0.0  # probability a received byte has one bit flipped
    disconnect_after_s: float | None = None  # close the pty and exit, as an unplugged USB device
    counts: dict = field(default_factory=lambda: {"dropped": 0, "corrupted": 0, "bursts": 0, "rx_corrupted": 0})


class ServoBank:
    """The emulated servos: per channel a deadband on the command, a first-order lag toward it and a rate limit.

    Exact discretisation of the lag over a step ``dt``: ``x += (target - x) (1 - exp(-dt / tau))``, the step then
    clipped to ``max_rate dt`` (with ``tau = 0`` the servo moves at its rate limit straight to the target).
    Angles ``(n_servo,)`` rad at the horn.
    """

    def __init__(self, rig: Rig):
        truths = [rig.emulator.servo[s.name] for s in rig.servos]
        self.max_rate = np.array([t.max_rate_rad_s for t in truths])      # (n,) rad/s
        self.tau = np.array([t.time_constant_s for t in truths])          # (n,) s
        self.deadband = np.array([t.deadband_rad for t in truths])        # (n,) rad
        self.angle = np.array([s.neutral_rad for s in rig.servos])        # (n,) rad, where the horns are
        self.held = self.angle.copy()                                     # (n,) rad, command past the deadband

    def step(self, command: np.ndarray, dt: float) -> None:
        moved = np.abs(command - self.held) > self.deadband
        self.held = np.where(moved, command, self.held)
        with np.errstate(divide="ignore", over="ignore"):
            fraction = np.where(self.tau > 0, -np.expm1(-dt / np.where(self.tau > 0, self.tau, 1.0)), 1.0)
        delta = (self.held - self.angle) * fraction
        limit = self.max_rate * dt
        self.angle = self.angle + np.clip(delta, -limit, limit)


class SensorBank:
    """Sensor models: ``counts = round(to_counts(gain * truth + offset + drift * t + noise))``, saturated to the
    ADC range. ``truth`` ``(n_sensor,)`` in each channel's unit; ``t`` device time, s."""

    def __init__(self, rig: Rig, rng: np.random.Generator):
        truths = [rig.emulator.sensors[s.name] for s in rig.sensors]
        self.gain = np.array([t.gain for t in truths])                    # (n,) dimensionless
        self.offset = np.array([t.offset for t in truths])                # (n,) channel unit
        self.noise = np.array([t.noise_std for t in truths])              # (n,) channel unit
        self.drift = np.array([t.drift_per_s for t in truths])            # (n,) channel unit / s
        self.cal_gain = np.array([s.gain for s in rig.sensors])           # (n,) unit / count
        self.cal_offset = np.array([s.offset_counts for s in rig.sensors])  # (n,) counts
        self.lo = np.array([s.count_range[0] for s in rig.sensors], dtype=float)
        self.hi = np.array([s.count_range[1] for s in rig.sensors], dtype=float)
        self.rng = rng

    def sample(self, truth: np.ndarray, t: float) -> list[int]:
        value = self.gain * truth + self.offset + self.drift * t + self.noise * self.rng.standard_normal(len(truth))
        counts = np.clip(np.rint(value / self.cal_gain + self.cal_offset), self.lo, self.hi)
        return [int(c) for c in counts]


class Device:
    """The firmware's logic, transport-free: ``receive(bytes, now)`` and ``tick(now)`` return frames to send.

    ``now`` is the device clock in s since power-up (the emulator passes its monotonic clock).
    """

    def __init__(self, rig: Rig, plant, rng: np.random.Generator):
        self.rig = rig
        self.plant = plant
        self.servos = ServoBank(rig)
        self.sensors = SensorBank(rig, rng)
        self.n_servo, self.n_strain, self.n_load = len(rig.servos), len(rig.strain), len(rig.load)
        self.neutral = np.array([s.neutral_rad for s in rig.servos])       # (n_servo,) rad
        self.command = self.neutral.copy()                                 # (n_servo,) rad, last valid setpoints
        #: the servo target between setpoint frames (rad), the rig file's [rates] setpoints
        self.ramp = SetpointRamp(self.neutral, rig.setpoints == "interpolate",
                                 round(rig.watchdog_timeout_s * US_PER_S))
        self.target = self.neutral.copy()                                  # (n_servo,) rad, driven at the last sample
        self.min_raw = np.array([s.min_raw for s in rig.servos])
        self.max_raw = np.array([s.max_raw for s in rig.servos])
        self.decoder = p.StreamDecoder()
        self.tx_seq = 0
        self.frames_tx = 0
        self.tx_dropped = 0
        self.watchdog_trips = 0
        self.overruns = 0
        self.estop = False
        self.button_held = False              # the rig's e-stop button is pressed (a held, latching button)
        self.configured = False
        self.streaming = False                # telemetry and heartbeats flow once a host has said HELLO
        self.watchdog_tripped = True          # no setpoints since power-up: neutral until the first ones
        self.watchdog_s = rig.watchdog_timeout_s
        self.last_setpoint_s = -math.inf
        self.last_estop_nack_s = -math.inf
        self.heartbeat_period = 1.0 / rig.heartbeat_hz
        self.next_heartbeat_s = 0.0
        self.pending: list[p.TelemetrySample] = []
        #: called with one record per SETPOINTS frame applied or refused (the applied log), if set
        self.setpoint_sink: Callable[[dict], None] | None = None
        self._set_rate(rig.telemetry_hz, rig.samples_per_frame, 0.0)

    # -- clock ------------------------------------------------------------------------------------------------
    def _set_rate(self, rate_hz: int, per_frame: int, now: float) -> None:
        self.rate_hz = rate_hz
        self.samples_per_frame = per_frame
        self.epoch_s = now                    # sample k is taken at epoch + k / rate
        self.sample_index = 0
        self.pending = []

    def next_sample_s(self) -> float:
        return self.epoch_s + self.sample_index / self.rate_hz

    @staticmethod
    def _us(t: float) -> int:
        return int(round(t * 1e6)) % p.TIME_MODULUS

    @staticmethod
    def _device_us(t: float) -> int:
        """The device clock ``t`` (s) in whole µs, unwrapped (the C firmware's clock ticks in µs)."""
        return int(round(t * US_PER_S))

    @property
    def flags(self) -> int:
        return ((p.FLAG_ESTOP if self.estop else 0) | (p.FLAG_WATCHDOG if self.watchdog_tripped else 0)
                | (p.FLAG_CONFIGURED if self.configured else 0) | (p.FLAG_BUTTON if self.button_held else 0))

    def _frame(self, message: p.Message, now: float) -> bytes:
        data = p.encode(message, self.tx_seq, self._us(now))
        self.tx_seq = (self.tx_seq + 1) % p.SEQ_MODULUS
        return data

    # -- receive ------------------------------------------------------------------------------------------------
    def receive(self, data: bytes, now: float) -> list[bytes]:
        out = []
        for packet in self.decoder.feed(data):
            reply = self._handle(packet, now)
            if reply is not None:
                out.append(self._frame(reply, now))
        for kind, type_id, seq in self.decoder.rejected:
            reason = {"bad_version": p.NACK_BAD_VERSION, "unknown_type": p.NACK_UNKNOWN_TYPE}.get(kind,
                                                                                                 p.NACK_BAD_LENGTH)
            out.append(self._frame(p.Nack(type_id, seq, reason), now))
        self.decoder.rejected.clear()
        return out

    def _handle(self, packet: p.Packet, now: float) -> p.Message | None:
        m, seq = packet.message, packet.seq
        type_id = p.TYPE_OF[type(m)]
        if type_id not in p.REQUEST_TYPES:
            return p.Nack(type_id, seq, p.NACK_NOT_A_REQUEST)
        if isinstance(m, p.Hello):
            self.streaming = True
            return p.DeviceInfo(p.PROTOCOL_VERSION, self.rig.emulator.firmware_version, self.rig.name,
                                self.n_servo, self.n_strain, self.n_load)
        if isinstance(m, p.Setpoints):
            return self._setpoints(m, seq, now)
        if isinstance(m, p.Heartbeat):
            return p.Heartbeat(self.flags, self._uptime_ms(now))
        if isinstance(m, p.EStop):
            self.estop = True
            return p.Ack(type_id, seq)
        if isinstance(m, p.EStopReset):
            if self.button_held:                # only a release at the rig ends a pressed button
                return p.Nack(type_id, seq, p.NACK_ESTOP_LATCHED)
            self.estop = False
            # Servos stay at neutral until new setpoints arrive: the watchdog restarts from "no setpoints".
            self.command = self.neutral.copy()
            self.last_setpoint_s = -math.inf
            self.watchdog_tripped = True
            return p.Ack(type_id, seq)
        if isinstance(m, p.Configure):
            n_max = p.max_samples_per_frame(self.n_servo, self.n_strain, self.n_load)
            if not (1 <= m.sample_rate_hz <= MAX_SAMPLE_RATE_HZ and 1 <= m.samples_per_frame <= n_max
                    and m.watchdog_ms >= 1):
                return p.Nack(type_id, seq, p.NACK_BAD_CONFIG)
            self._set_rate(m.sample_rate_hz, m.samples_per_frame, now)
            self.watchdog_s = m.watchdog_ms / 1000.0
            self.ramp.watchdog_us = m.watchdog_ms * 1000
            self.configured = True
            return p.Ack(type_id, seq)
        if isinstance(m, p.GetLinkStats):
            return self.link_stats()
        return p.Nack(type_id, seq, p.NACK_NOT_A_REQUEST)

    def _setpoints(self, m: p.Setpoints, seq: int, now: float) -> p.Message | None:
        type_id = p.T_SETPOINTS
        if self.estop:
            self._note_setpoints(m, seq, now, p.NACK_ESTOP_LATCHED)
            if now - self.last_estop_nack_s >= ESTOP_NACK_INTERVAL_S:
                self.last_estop_nack_s = now
                return p.Nack(type_id, seq, p.NACK_ESTOP_LATCHED)
            return None
        if len(m.raw) != self.n_servo:
            self._note_setpoints(m, seq, now, p.NACK_CHANNEL_COUNT)
            return p.Nack(type_id, seq, p.NACK_CHANNEL_COUNT)
        raw = np.array(m.raw, dtype=float)
        if not (np.all(np.isfinite(raw)) and np.all(raw >= self.min_raw) and np.all(raw <= self.max_raw)):
            self._note_setpoints(m, seq, now, p.NACK_OUT_OF_RANGE)
            return p.Nack(type_id, seq, p.NACK_OUT_OF_RANGE)
        self.command = np.array([s.to_rad(r) for s, r in zip(self.rig.servos, raw)])
        self.ramp.set(self.command, self._device_us(now), continuing=not self.watchdog_tripped)
        self.last_setpoint_s = now
        self.watchdog_tripped = False
        self._note_setpoints(m, seq, now, None)
        return None

    def _note_setpoints(self, m: p.Setpoints, seq: int, now: float, nack: int | None) -> None:
        """Tell :attr:`setpoint_sink` that frame ``seq`` was applied (``nack`` None) or refused with ``nack``:
        ``raw`` are the frame's values as decoded (float32 pulse widths, µs)."""
        if self.setpoint_sink is None:
            return
        record = {"seq": seq, "t_us": self._us(now), "host_ns": time.time_ns(), "raw": list(m.raw),
                  "result": "applied" if nack is None else "refused"}
        if nack is not None:
            record["reason"] = SETPOINT_REFUSALS[nack]
        self.setpoint_sink(record)

    def _uptime_ms(self, now: float) -> int:
        return int(now * 1000) % p.TIME_MODULUS

    def link_stats(self) -> p.LinkStats:
        c = self.decoder.counters
        wrap = p.TIME_MODULUS
        return p.LinkStats(frames_rx=c.frames % wrap, frames_tx=self.frames_tx % wrap, crc_errors=c.crc_errors % wrap,
                           framing_errors=c.framing_errors % wrap, oversize=c.oversize % wrap,
                           malformed=(c.malformed + c.bad_version + c.unknown_type) % wrap,
                           seq_gaps=c.seq_gaps % wrap, tx_dropped=self.tx_dropped % wrap,
                           watchdog_trips=self.watchdog_trips % wrap)

    # -- periodic -----------------------------------------------------------------------------------------------
    def tick(self, now: float) -> list[bytes]:
        """Run every sampling instant up to ``now``; return the frames that became due."""
        out = []
        if now - self.next_sample_s() > MAX_CATCH_UP_S:
            self.overruns += 1
            self.epoch_s, self.sample_index = now, 0
            self.pending = []
        dt = 1.0 / self.rate_hz
        while self.next_sample_s() <= now:
            t = self.next_sample_s()
            if not self.watchdog_tripped and not self.estop and t - self.last_setpoint_s > self.watchdog_s:
                self.watchdog_tripped = True
                self.watchdog_trips += 1
                if self.streaming:
                    out.append(self._frame(p.Heartbeat(self.flags, self._uptime_ms(t)), t))
            self.target = self.neutral if (self.estop or self.watchdog_tripped) else self.ramp.at(self._device_us(t))
            before = self.servos.angle
            self.servos.step(self.target, dt)
            truth = self.plant.sense(self.servos.angle, (self.servos.angle - before) / dt, t)
            raw = tuple(float(s.to_raw(a)) for s, a in zip(self.rig.servos, self.servos.angle))
            counts = self.sensors.sample(truth, t)
            self.pending.append(p.TelemetrySample(self._us(t), raw, tuple(counts[:self.n_strain]),
                                                  tuple(counts[self.n_strain:])))
            self.sample_index += 1
            if not self.streaming:
                self.pending = []
            elif len(self.pending) >= self.samples_per_frame:
                out.append(self._frame(p.Telemetry(self.flags, self.n_servo, self.n_strain, self.n_load,
                                                   tuple(self.pending)), t))
                self.pending = []
        if self.streaming and now >= self.next_heartbeat_s:
            self.next_heartbeat_s = now + self.heartbeat_period
            out.append(self._frame(p.Heartbeat(self.flags, self._uptime_ms(now)), now))
        return out

    def button(self, now: float) -> list[bytes]:
        """The rig's physical e-stop button pressed (and held): latch and tell the host."""
        self.estop = True
        self.button_held = True
        return [self._frame(p.EStop(p.ESTOP_BUTTON), now)]

    def button_release(self, now: float) -> list[bytes]:
        """The button released (twisted out): the e-stop stays latched until an ESTOP_RESET; a heartbeat tells
        the host at once (FLAG_BUTTON cleared) rather than at the next telemetry frame."""
        self.button_held = False
        return [self._frame(p.Heartbeat(self.flags, self._uptime_ms(now)), now)] if self.streaming else []


class Emulator(PtyDevice):
    """A rig's firmware on a pty: :class:`Device` + a plant on a :class:`PtyDevice` (its :class:`PtyLink` and
    loop), run by :meth:`run`. ``applied_log``: where every SETPOINTS frame applied or refused is recorded
    (closed when the run ends)."""

    max_idle_s = MAX_IDLE_S

    def __init__(self, rig: Rig, *, plant_kind: str | None = None, baud: int | None = None,
                 faults: Faults | None = None, seed: int | None = None,
                 applied_log: AppliedLog | None = None, rt_priority: int = 0):
        self.rig = rig
        self.faults = faults or Faults()
        seed = rig.emulator.seed if seed is None else seed
        self.rng = random.Random(seed)
        self.plant = make_plant(rig, plant_kind, rt_priority)
        self.device = Device(rig, self.plant, np.random.default_rng(seed))
        self.applied_log = applied_log
        if applied_log is not None:
            self.device.setpoint_sink = applied_log.write
        self._button_pressed = threading.Event()
        self._button_released = threading.Event()
        super().__init__(baud or rig.baud)          # the pty last: nothing to leak if the above fails

    def press_button(self) -> None:
        """Press and hold the rig's e-stop button (thread- and signal-safe: handled by the loop)."""
        self._button_pressed.set()

    def release_button(self) -> None:
        """Release the rig's e-stop button (thread- and signal-safe: handled by the loop)."""
        self._button_released.set()

    def _line(self, frame: bytes) -> bytes | None:
        """A frame as the injected line faults leave it: dropped (None), a bit flipped, or after a noise burst."""
        f = self.faults
        frame = line_fault(frame, self.rng, f.drop_rate, f.corrupt_rate, f.counts, margin=1)  # not 0x00 ends
        if frame is not None and f.burst_rate and self.rng.random() < f.burst_rate:
            f.counts["bursts"] += 1
            frame = self.rng.randbytes(f.burst_bytes) + frame
        return frame

    def _send(self, frames: list[bytes], now: float) -> None:
        for frame in frames:
            self.device.frames_tx += 1
            frame = self._line(frame)
            if frame is not None and not self.link.queue(frame, now):
                self.device.tx_dropped += 1

    def _corrupt_rx(self, data: bytes) -> bytes:
        rate = self.faults.rx_byte_error_rate
        if not rate or not data:
            return data
        out = bytearray(data)
        for k in range(len(out)):
            if self.rng.random() < rate:
                out[k] ^= 1 << self.rng.randrange(8)
                self.faults.counts["rx_corrupted"] += 1
        return bytes(out)

    def on_start(self) -> None:
        self.plant.start()

    def on_stop(self) -> None:
        self.plant.stop()
        if self.applied_log is not None:
            self.applied_log.close()

    def step(self, now: float) -> str | None:
        """One pass of the firmware loop: the injected unplug, the button, received bytes, sampling."""
        device = self.device
        if self.faults.disconnect_after_s is not None and now >= self.faults.disconnect_after_s:
            return "disconnect"
        if self._button_pressed.is_set():
            self._button_pressed.clear()
            self._send(device.button(now), now)
        if self._button_released.is_set():
            self._button_released.clear()
            self._send(device.button_release(now), now)
        data = self.link.read(now)
        if data:
            self._send(device.receive(self._corrupt_rx(data), now), now)
        self._send(device.tick(now), now)
        return None

    def wake_s(self, now: float) -> float:
        return self.device.next_sample_s() - now

    def stats(self) -> dict:
        d = self.device
        cpu = os.times()
        return {"rig": self.rig.name, **self.link_stats(), "frames_tx": d.frames_tx,
                "tx_dropped": d.tx_dropped, "watchdog_trips": d.watchdog_trips, "overruns": d.overruns,
                "rx": d.decoder.counters.as_dict(), "faults": self.faults.counts, "plant": self.plant.status(),
                "cpu_s": round(cpu.user + cpu.system, 3),
                "children_cpu_s": round(cpu.children_user + cpu.children_system, 3)}
