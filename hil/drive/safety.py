"""Safety logic of the servo driver (pure, no I/O): which simulator states are usable, the stale-state
watchdog (track -> hold -> ramp to neutral), and the latched e-stop.

Times are host monotonic seconds unless a name says ``_ns`` (wall clock, ``time.time_ns()``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from hil.drive.options import DEFAULT_STATE_TIMEOUT_S

#: a publisher stamp further ahead of this host's wall clock than this is refused (s). Hosts kept in step by
#: NTP agree to a few ms, so 0.5 s passes a poorly synchronised lab PC yet bounds how long a forged future stamp
#: can make later good states look like repeats. Off with the age check (``--max-state-age 0``).
FUTURE_TOLERANCE_S = 0.5
#: most joints a state may name: far above any robot here (the flapper has 12) and a bound on what one
#: message can make the driver allocate
MAX_JOINTS = 4096
#: a seq further ahead of the last used one than this (about 17 min of states at 1 kHz) is not believed at once:
#: see :meth:`StateCheck.check`
MAX_SEQ_JUMP = 1_000_000
#: a publisher restarted with other numbering is believed after this many states in order (seq and stamp rising)
STREAM_RESTART_STATES = 3
#: the largest value of the int64 fields (seq, stamp_ns) of the message schema
INT64_MAX = 2**63 - 1


class Mode(str, Enum):
    """What the driver commands on a tick; published as ``hw/command.mode``."""
    TRACK = "track"      # following the simulator
    HOLD = "hold"        # no fresh state for state_timeout: keep the last setpoint
    RAMP = "ramp"        # moving to neutral at the rate limits (stale states, deactivate, e-stop, exit)
    NEUTRAL = "neutral"  # at neutral


class Rejection(str, Enum):
    """Why a simulator state was not used; the driver counts each in hw/status."""
    MALFORMED = "malformed"      # keys missing, of the wrong type (a string, a bool) or length, names repeated
    NON_FINITE = "non_finite"    # NaN or inf in a mapped joint or in t
    DUPLICATE = "duplicate"      # seq not newer than the last used one (same publisher run)
    STALE = "stale"              # published longer than max_age ago
    FUTURE = "future"            # published more than FUTURE_TOLERANCE_S ahead of this host's clock
    SEQ_JUMP = "seq_jump"        # seq more than MAX_SEQ_JUMP ahead of the last used one, not (yet) a new stream
    UNMAPPED = "unmapped"        # the rig's joints are not among the state's joints


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_real(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def joint_names_ok(names) -> bool:
    """``names`` is a list of distinct strings, at most MAX_JOINTS (sim/state and sim/status ``joint_names``)."""
    return (isinstance(names, list) and len(names) <= MAX_JOINTS and all(isinstance(n, str) for n in names)
            and len(set(names)) == len(names))


def state_shape_error(payload: dict) -> Rejection | None:
    """What is wrong with a ``sim/state`` payload's types, before any decision looks at it: ``seq`` and
    ``stamp_ns`` integers in [0, 2^63), ``t`` a finite real, ``q`` a list of at most MAX_JOINTS reals (numbers
    that fit a float: not strings such as "0.6", not bools), ``joint_names`` (optional) distinct strings, one per
    ``q``. Whether the mapped joints' values are finite is :meth:`StateCheck.check`'s (an unmapped joint's NaN
    does not reach the rig)."""
    seq, stamp, t, q = payload.get("seq"), payload.get("stamp_ns"), payload.get("t"), payload.get("q")
    if not (_is_int(seq) and 0 <= seq <= INT64_MAX and _is_int(stamp) and 0 <= stamp <= INT64_MAX
            and _is_real(t) and isinstance(q, list) and len(q) <= MAX_JOINTS and all(_is_real(x) for x in q)):
        return Rejection.MALFORMED
    names = payload.get("joint_names")
    if names is not None and not (joint_names_ok(names) and len(names) == len(q)):
        return Rejection.MALFORMED
    try:
        t_finite = math.isfinite(t)
        [float(x) for x in q]
    except OverflowError:                   # an integer beyond the float range
        return Rejection.MALFORMED
    return None if t_finite else Rejection.NON_FINITE


@dataclass
class StateCheck:
    """Checks one ``sim/state`` payload; keeps the last accepted ``seq`` to reject repeats.

    ``max_age_s`` compares the publisher's ``stamp_ns`` with this host's wall clock: on one host (or hosts
    kept in step by NTP/PTP to well under it) an old state is refused even if it arrives late, and one stamped
    more than FUTURE_TOLERANCE_S ahead is refused too; 0 turns both checks off (hosts whose clocks are not
    synchronised).

    Order (docs/driver.md, "Which states are used"): a state is a repeat when neither its seq nor its stamp is
    newer than the last used one's; a lower seq with a newer stamp is a restarted publisher. A seq more than
    MAX_SEQ_JUMP ahead is refused, so that one forged or corrupted state cannot move the bar out of reach of
    every later good state. Refused states that follow each other (seq and stamp rising, steps within
    MAX_SEQ_JUMP) STREAM_RESTART_STATES times in a row are a publisher that restarted with other numbering:
    the last of them is used and the stream continues from it (:attr:`stream_restarts` counts these).
    """
    max_age_s: float = DEFAULT_STATE_TIMEOUT_S
    last_seq: int | None = None
    last_stamp_ns: int | None = None
    candidate: tuple[int, int] | None = None     # (seq, stamp) of the last state refused for its order
    candidate_run: int = 0                       # refused states in order up to the candidate
    stream_restarts: int = 0

    def check(self, payload: dict, q_indices: np.ndarray | None, now_ns: int) -> Rejection | None:
        """``None`` if ``payload`` is usable (and then remember its seq), else the reason it is not.

        ``q_indices`` (n_channels,) are the positions of the mapped joints in ``q``; ``None`` means unmapped.
        """
        reason = state_shape_error(payload)
        if reason is not None:
            return reason
        seq, stamp, q = payload["seq"], payload["stamp_ns"], payload["q"]
        if q_indices is None:
            return Rejection.UNMAPPED
        if len(q_indices) and int(q_indices.max()) >= len(q):
            return Rejection.MALFORMED
        if not all(math.isfinite(q[i]) for i in q_indices):
            return Rejection.NON_FINITE
        if self.max_age_s > 0:
            age_s = (now_ns - stamp) * 1e-9
            if age_s < -FUTURE_TOLERANCE_S:
                return Rejection.FUTURE
            if age_s > self.max_age_s:
                return Rejection.STALE
        reason = self._order(seq, stamp)
        if reason is not None:
            return reason
        self.last_seq, self.last_stamp_ns = seq, stamp
        self.candidate, self.candidate_run = None, 0
        return None

    def _order(self, seq: int, stamp: int) -> Rejection | None:
        if self.last_seq is None:
            return None
        if seq <= self.last_seq and stamp <= self.last_stamp_ns:
            reason = Rejection.DUPLICATE
        elif seq - self.last_seq > MAX_SEQ_JUMP:
            reason = Rejection.SEQ_JUMP
        else:
            return None
        c = self.candidate
        in_order = c is not None and c[0] < seq <= c[0] + MAX_SEQ_JUMP and stamp > c[1]
        self.candidate, self.candidate_run = (seq, stamp), (self.candidate_run + 1 if in_order else 1)
        if self.candidate_run >= STREAM_RESTART_STATES:
            self.stream_restarts += 1
            return None
        return reason

    def forget(self) -> None:
        """Forget the last seq (after a reconnect nothing earlier may be reused, and nothing later is a repeat)."""
        self.last_seq = self.last_stamp_ns = None
        self.candidate, self.candidate_run = None, 0


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
