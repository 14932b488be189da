"""What enters the servo driver from the device and leaves it for the port, checked (pure, no I/O).

* :func:`telemetry_error` / :func:`measurement_fault`: a TELEMETRY frame with a good CRC can still carry the
  wrong channel counts (a device flashed for another rig, a corrupted frame that happens to pass the CRC) or
  measurements that cannot be (NaN, infinities, a pulse width outside the servo's range, an ADC count outside
  the converter's range). The first kind is refused as input; the second is a measurement fault: counted, and
  never taken as the servos' position (docs/driver.md, "Boundaries").
* :class:`SetpointLimits`: the last line before the port. Every SETPOINTS frame any link writes (the
  microcontroller's, the Dynamixel bus's, the composite link's mirrored channels) passes through
  :meth:`SetpointLimits.apply`, called where the link builds the frame's bytes, whatever produced the values.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from firmware_interface import protocol as p

#: the reasons of :func:`telemetry_error` and :func:`measurement_fault` (hw/status ``health``)
CHANNEL_COUNT = "channel_count"
SERVO_NON_FINITE = "servo_non_finite"
SERVO_OUT_OF_RANGE = "servo_out_of_range"
SENSOR_OUT_OF_RANGE = "sensor_out_of_range"


@dataclass(frozen=True)
class MeasurementRanges:
    """What a device can report, per channel: servo positions ``servo_lo/servo_hi`` (n_servo,) raw units (the
    rig's ``min_raw``/``max_raw``), sensor ADC counts ``sensor_lo/sensor_hi`` (n_strain + n_load,) counts."""
    servo_lo: np.ndarray
    servo_hi: np.ndarray
    sensor_lo: np.ndarray
    sensor_hi: np.ndarray


def measurement_ranges(rig) -> MeasurementRanges:
    """The :class:`MeasurementRanges` of a :class:`firmware_interface.rigs.mcu.Rig`."""
    sensors = [*rig.strain, *rig.load]
    return MeasurementRanges(
        servo_lo=np.array([s.min_raw for s in rig.servos], dtype=float),
        servo_hi=np.array([s.max_raw for s in rig.servos], dtype=float),
        sensor_lo=np.array([s.count_range[0] for s in sensors], dtype=float),
        sensor_hi=np.array([s.count_range[1] for s in sensors], dtype=float))


def telemetry_error(m: p.Telemetry, n_servo: int, n_strain: int, n_load: int) -> str | None:
    """CHANNEL_COUNT if the frame's channel counts are not the rig's (checked at the handshake, but a frame is
    checked on its own: nothing before may be assumed of it), else None."""
    if (m.n_servo, m.n_strain, m.n_load) != (n_servo, n_strain, n_load):
        return CHANNEL_COUNT
    return None


def measurement_fault(servo_raw: np.ndarray, sensor_counts: np.ndarray, ranges: MeasurementRanges) -> str | None:
    """Why the samples of one frame cannot be measurements, or None. ``servo_raw`` (k, n_servo) raw units,
    ``sensor_counts`` (k, n_strain + n_load) ADC counts."""
    if not np.all(np.isfinite(servo_raw)):
        return SERVO_NON_FINITE
    if np.any(servo_raw < ranges.servo_lo) or np.any(servo_raw > ranges.servo_hi):
        return SERVO_OUT_OF_RANGE
    if np.any(sensor_counts < ranges.sensor_lo) or np.any(sensor_counts > ranges.sensor_hi):
        return SENSOR_OUT_OF_RANGE
    return None


def _inward_float32(value: float, toward: float) -> float:
    """``value`` as the nearest float32 on the ``toward`` side (the wire carries setpoints as float32: a limit
    rounded outward would let a value a hair outside it through)."""
    f = np.float32(value)
    if (toward > value and f < value) or (toward < value and f > value):
        f = np.nextafter(f, np.float32(toward))
    return float(f)


class SetpointLimits:
    """The rig's setpoint range per servo channel, in raw units: ``[min_raw, max_raw]`` intersected with the raw
    values of ``[min_rad, max_rad]``, rounded inward to float32 (the wire's type). ``lo``, ``hi`` (n,)."""

    def __init__(self, servos):
        lo, hi = [], []
        for s in servos:
            a, b = sorted((s.to_raw(s.min_rad), s.to_raw(s.max_rad)))
            low, high = max(s.min_raw, a), min(s.max_raw, b)
            lo.append(_inward_float32(low, high))
            hi.append(_inward_float32(high, low))
        self.lo = np.array(lo)
        self.hi = np.array(hi)
        self.clamped = 0           # setpoints moved onto a limit here (each one a bug upstream, or a bad input)
        self.dropped = 0           # frames not sent: a value was not finite, or the channel count was wrong

    def apply(self, raw) -> tuple[float, ...] | None:
        """The frame's values as they may go to the port: each clamped into ``[lo, hi]``; None (send nothing:
        the device holds, then its watchdog takes the servos to neutral) if any is not a finite number or the
        count is not the rig's."""
        try:
            values = np.array(raw, dtype=float)
        except (TypeError, ValueError):
            values = np.array([math.nan])
        if values.shape != self.lo.shape or not np.all(np.isfinite(values)):
            self.dropped += 1
            return None
        safe = np.clip(values, self.lo, self.hi)
        self.clamped += int(np.count_nonzero(safe != values))
        return tuple(float(v) for v in safe)

    def counters(self) -> dict:
        return {"clamped": self.clamped, "dropped": self.dropped}
