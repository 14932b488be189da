"""Joint-to-servo mapping, calibration and limits of the servo driver (pure functions, no I/O).

The chain from a simulated joint to a servo setpoint, per channel ``i`` (docs/driver.md):

    servo angle      a_i = direction_i * gain_i * q[joint_i] + offset_i            (rad)
    limited angle    a_i <- clamp(a_i, min_i, max_i), then |a_i - a_prev_i| <= max_rate_i * dt
    raw setpoint     r_i = raw_at_zero_i + raw_per_rad_i * a_i                     (pulse us or position ticks)

and back from a measured raw position to an angle with the inverse of the last line. Every array here is
``(n_channels,)`` in channel order (the rig file's order), angles in rad, rates in rad/s, raw values in the
channel's own device units.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: an angle within this of its target counts as arrived (rad); far below any servo's resolution (~1e-3 rad)
ARRIVED_TOL_RAD = 1e-9


@dataclass(frozen=True)
class ChannelMap:
    """One servo channel: which joint drives it, its calibration and its limits.

    ``joint`` is None for a servo no simulated joint drives (it is held at neutral). ``direction`` is +1 or -1, ``gain`` servo rad per joint unit (rad, or rad/m for a prismatic joint through a
    rack), ``offset`` the servo angle at joint zero (rad), ``neutral`` the safe posture (rad), ``min_angle`` /
    ``max_angle`` the position limits (rad), ``max_rate`` the rate limit (rad/s), ``raw_at_zero`` the raw
    value at angle zero and ``raw_per_rad`` the raw units per rad (negative for a reversed horn).
    """
    name: str
    joint: str | None      # None: no simulated joint drives this servo, it stays at neutral
    direction: float
    gain: float
    offset: float
    neutral: float
    min_angle: float
    max_angle: float
    max_rate: float
    raw_at_zero: float
    raw_per_rad: float


class MappingError(ValueError):
    """The simulator's joints do not cover the rig's mapped joints."""


class ServoMap:
    """The rig's channels as arrays, with the joint-name lookup cached per ``joint_names`` list."""

    def __init__(self, channels: list[ChannelMap]):
        if not channels:
            raise ValueError("a rig needs at least one servo channel")
        self.channels = list(channels)
        self.names = [c.name for c in channels]
        self.joints = [c.joint for c in channels]
        self.mapped = np.array([c.joint is not None for c in channels], dtype=bool)  # (n,)
        # (n,) arrays in channel order, units as in ChannelMap
        self.direction = np.array([c.direction for c in channels], dtype=float)
        self.gain = np.array([c.gain for c in channels], dtype=float)
        self.offset = np.array([c.offset for c in channels], dtype=float)
        self.neutral = np.array([c.neutral for c in channels], dtype=float)
        self.min_angle = np.array([c.min_angle for c in channels], dtype=float)
        self.max_angle = np.array([c.max_angle for c in channels], dtype=float)
        self.max_rate = np.array([c.max_rate for c in channels], dtype=float)
        self.raw_at_zero = np.array([c.raw_at_zero for c in channels], dtype=float)
        self.raw_per_rad = np.array([c.raw_per_rad for c in channels], dtype=float)
        self._index_cache: tuple[tuple[str, ...], np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.channels)

    def joint_indices(self, joint_names: list[str]) -> np.ndarray:
        """Index into the simulator's ``q`` of each channel's joint, ``(n,)`` int (0 for unmapped channels, whose
        value is not used); MappingError if a mapped joint is missing."""
        key = tuple(joint_names)
        if self._index_cache is not None and self._index_cache[0] == key:
            return self._index_cache[1]
        lookup = {name: i for i, name in enumerate(key)}
        missing = [j for j in self.joints if j is not None and j not in lookup]
        if missing:
            raise MappingError(f"the simulator has no joint {', '.join(map(repr, missing))} "
                               f"(it has {', '.join(key) or 'none'})")
        indices = np.array([lookup.get(j, 0) for j in self.joints], dtype=int)
        self._index_cache = (key, indices)
        return indices

    def joints_to_angles(self, q: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Servo angles (n,) rad from the simulator's joint positions ``q`` (n_joints,) rad or m; unmapped
        channels get their neutral angle."""
        return np.where(self.mapped, self.direction * self.gain * q[indices] + self.offset, self.neutral)

    def angles_to_joints(self, angles: np.ndarray) -> np.ndarray:
        """Joint positions (n,) of each channel's joint from servo angles (n,) rad: the inverse map."""
        return np.where(self.mapped, (angles - self.offset) / (self.direction * self.gain), np.nan)

    def angles_to_raw(self, angles: np.ndarray) -> np.ndarray:
        """Raw device setpoints (n,) from servo angles (n,) rad."""
        return self.raw_at_zero + self.raw_per_rad * angles

    def raw_to_angles(self, raw: np.ndarray) -> np.ndarray:
        """Servo angles (n,) rad from raw device positions (n,)."""
        return (np.asarray(raw, dtype=float) - self.raw_at_zero) / self.raw_per_rad

    def at_neutral(self, angles: np.ndarray) -> bool:
        return bool(np.all(np.abs(angles - self.neutral) <= ARRIVED_TOL_RAD))


def apply_limits(target: np.ndarray, previous: np.ndarray, dt: float, min_angle: np.ndarray,
                 max_angle: np.ndarray, max_rate: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Clamp ``target`` (n,) rad to the position limits, then to ``max_rate`` (n,) rad/s over ``dt`` s from
    ``previous`` (n,) rad, the last angle sent. Returns the limited angles (n,) and which were changed (n,) bool.

    The position clamp runs first and the rate clamp last, so the result never moves faster than the rate
    limit; since ``previous`` was itself inside the position limits the result stays inside them too. A
    ``previous`` outside the limits (servo found there at start-up) is walked back in at the rate limit.
    """
    if dt < 0 or not math.isfinite(dt):
        raise ValueError(f"dt must be finite and >= 0, got {dt}")
    clamped = np.clip(target, min_angle, max_angle)
    step = max_rate * dt
    limited = np.clip(clamped, previous - step, previous + step)
    return limited, np.abs(limited - target) > ARRIVED_TOL_RAD


def move_toward(current: np.ndarray, goal: np.ndarray, dt: float, max_rate: np.ndarray) -> np.ndarray:
    """One step of a ramp from ``current`` (n,) rad to ``goal`` (n,) rad at ``max_rate`` (n,) rad/s over ``dt``."""
    step = max_rate * dt
    return np.clip(goal, current - step, current + step)


def servo_map_from_rig(rig) -> ServoMap:
    """The :class:`ServoMap` of a :class:`firmware_interface.rigs.mcu.Rig`: one channel per servo, in the rig's order.

    The rig's calibration ``raw = center + direction * gain * angle`` becomes ``raw_at_zero = center`` and
    ``raw_per_rad = direction * gain``; its joint map ``angle = offset + direction * gain * q`` is taken as is.
    A servo driven by two joints is a config error (one line).
    """
    from sim.config import ConfigError

    by_servo = {}
    for k, jm in enumerate(rig.joints):
        if jm.servo in by_servo:
            raise ConfigError(rig.path, f"joints[{k}].servo", f"servo {jm.servo!r} is already driven by joint "
                              f"{by_servo[jm.servo].joint!r}; one joint per servo")
        by_servo[jm.servo] = jm
    channels = []
    for s in rig.servos:
        jm = by_servo.get(s.name)
        channels.append(ChannelMap(
            name=s.name, joint=None if jm is None else jm.joint,
            direction=1.0 if jm is None else float(jm.direction), gain=1.0 if jm is None else jm.gain,
            offset=0.0 if jm is None else jm.offset_rad, neutral=s.neutral_rad,
            min_angle=s.min_rad, max_angle=s.max_rad, max_rate=s.max_rate_rad_s,
            raw_at_zero=s.center, raw_per_rad=s.direction * s.gain))
    return ServoMap(channels)
