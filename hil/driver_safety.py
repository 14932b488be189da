"""Safety logic of the servo driver (pure, no I/O): which simulator states are usable, the stale-state
watchdog (track -> hold -> ramp to neutral), and the latched e-stop.

Times are host monotonic seconds unless a name says ``_ns`` (wall clock, ``time.time_ns()``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

#: default time without a fresh simulator state before the driver stops tracking and holds (s)
DEFAULT_STATE_TIMEOUT_S = 0.050
#: default time the driver holds the last setpoint before it ramps to neutral (s)
DEFAULT_HOLD_S = 0.200


class Mode(str, Enum):
    """What the driver commands on a tick; published as ``hw/command.mode``."""
    TRACK = "track"      # following the simulator
    HOLD = "hold"        # no fresh state for state_timeout: keep the last setpoint
    RAMP = "ramp"        # moving to neutral at the rate limits (stale states, deactivate, e-stop, exit)
    NEUTRAL = "neutral"  # at neutral


class Rejection(str, Enum):
    """Why a simulator state was not used; the driver counts each in hw/status."""
    MALFORMED = "malformed"      # keys missing or of the wrong type or length
    NON_FINITE = "non_finite"    # NaN or inf in a mapped joint or in t
    DUPLICATE = "duplicate"      # seq not newer than the last used one (same publisher run)
    STALE = "stale"              # published longer than max_age ago
    UNMAPPED = "unmapped"        # the rig's joints are not among the state's joints


@dataclass
class StateCheck:
    """Checks one ``sim/state`` payload; keeps the last accepted ``seq`` to reject repeats.

    ``max_age_s`` compares the publisher's ``stamp_ns`` with this host's wall clock: on one host (or hosts
    kept in step by NTP/PTP to well under it) an old state is refused even if it arrives late; 0 turns the
    check off (hosts whose clocks are not synchronised).
    """
    max_age_s: float = DEFAULT_STATE_TIMEOUT_S
    last_seq: int | None = None
    last_stamp_ns: int | None = None

    def check(self, payload: dict, q_indices: np.ndarray | None, now_ns: int) -> Rejection | None:
        """``None`` if ``payload`` is usable (and then remember its seq), else the reason it is not.

        ``q_indices`` (n_channels,) are the positions of the mapped joints in ``q``; ``None`` means unmapped.
        """
        seq, stamp, t, q = payload.get("seq"), payload.get("stamp_ns"), payload.get("t"), payload.get("q")
        if not (isinstance(seq, int) and isinstance(stamp, int) and isinstance(t, (int, float))
                and isinstance(q, list)):
            return Rejection.MALFORMED
        if q_indices is None:
            return Rejection.UNMAPPED
        if len(q_indices) and int(q_indices.max()) >= len(q):
            return Rejection.MALFORMED
        try:
            values = np.asarray([q[i] for i in q_indices], dtype=float)
        except (TypeError, ValueError):
            return Rejection.MALFORMED
        if not (math.isfinite(t) and np.all(np.isfinite(values))):
            return Rejection.NON_FINITE
        if self.last_seq is not None and seq <= self.last_seq and self.last_stamp_ns is not None \
                and stamp <= self.last_stamp_ns:
            # a lower seq with a newer stamp is a restarted publisher, not a repeat
            return Rejection.DUPLICATE
        if self.max_age_s > 0 and (now_ns - stamp) * 1e-9 > self.max_age_s:
            return Rejection.STALE
        self.last_seq, self.last_stamp_ns = seq, stamp
        return None

    def forget(self) -> None:
        """Forget the last seq (after a reconnect nothing earlier may be reused, and nothing later is a repeat)."""
        self.last_seq = self.last_stamp_ns = None


def watchdog_mode(age_s: float, state_timeout_s: float, hold_s: float) -> Mode:
    """Mode for a state ``age_s`` s old: track while fresh, hold for ``hold_s`` after the timeout, then ramp."""
    if age_s <= state_timeout_s:
        return Mode.TRACK
    if age_s <= state_timeout_s + hold_s:
        return Mode.HOLD
    return Mode.RAMP


@dataclass
class EStop:
    """A latched emergency stop: once triggered it stays until :meth:`reset`, whatever else happens.

    ``sources`` names who triggered it ("control", "device", "signal"...), first first.
    """
    latched: bool = False
    sources: list[str] = field(default_factory=list)
    count: int = 0

    def trigger(self, source: str) -> bool:
        """Latch; return True if this call latched it (it was not latched already)."""
        newly = not self.latched
        self.latched = True
        self.count += newly
        if source not in self.sources:
            self.sources.append(source)
        return newly

    def reset(self, device_still_stopped: bool = False) -> None:
        """Clear the latch; refused (ValueError) while the device itself still reports its e-stop."""
        if device_still_stopped:
            raise ValueError("the device still reports its e-stop (release it on the rig first)")
        self.latched = False
        self.sources = []
