"""The servo driver's decisions, without any I/O: what to send on each command tick.

:class:`DriverCore` takes simulator states, measured servo angles and lifecycle/e-stop requests, and on each
tick returns the :class:`Command` to send (or ``None``: send nothing). hil/drive/driver.py wraps it with the serial
port, the ZeroMQ sockets and the clock; the tests drive it directly with made-up times.

The rules (docs/driver.md, "Safety"):
- only ``active`` and not e-stopped tracks the simulator; every setpoint passes the position and rate limits;
- a state is used only if it passes :func:`hil.drive.safety.state_shape_error` (types, counts, finite) and
  :class:`hil.drive.safety.StateCheck` (newer, not too old, not from the future) and arrived after the last
  (re)activation or reconnect, so nothing from before a link loss is ever replayed;
- no fresh state for ``state_timeout_s``: hold; ``hold_s`` later: ramp to neutral at the rate limits; the same
  when the device's measurements have been faulty for ``state_timeout_s`` (:meth:`DriverCore.on_measurement_fault`);
- deactivate and exit ramp to neutral at the rate limits and then stop sending; an e-stop stops sending at
  once (the device holds neutral while its e-stop is latched);
- with a lead (``lead_s`` > 0, ``mms drive --state-lead``), each setpoint is computed for a simulated time on a
  smooth clock (:class:`SimClock`: the wall clock's mapping onto simulated time, rate 1, its offset filtered over
  the states' arrivals with the time constant :data:`CLOCK_TIME_CONSTANT_S`, reset on a jump such as a pause or a
  new run): the newest state carried along its own joint rates and accelerations (``q + qd d + qdd d^2 / 2``) to
  that time, ``|d|`` at most ``lead_s``: the setpoints follow the simulated motion on the driver's regular ticks
  instead of the states' arrival jitter (:meth:`DriverCore.tick`);
- the ramp starts from the last angle sent, or from the measured angle when nothing was sent on this link
  (start-up, after a reconnect), or from neutral when the rig reports no positions.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

from hil.drive.lifecycle import Lifecycle, State, TransitionError
from hil.drive.mapping import MappingError, ServoMap, apply_limits, move_toward
from hil.drive.options import DEFAULT_HOLD_S, DEFAULT_STATE_TIMEOUT_S
from hil.drive.safety import EStop, Mode, Rejection, StateCheck, joint_names_ok, watchdog_mode

#: the longest interval the rate limiter credits between two sends (in command periods): after a scheduling
#: hiccup the servo gets at most this many periods' worth of motion in one step
MAX_DT_PERIODS = 2.0
#: the time constant of the driver's simulated clock's offset, s: the states' arrival jitter (0.1-3 ms late at p1-p99
#: in the closed-loop demo, docs/closed-loop.md) moves the clock by its part above 1 / (2 pi 0.2 s) = 0.8 Hz only,
#: 1/60 of it at the wings' 40-60 Hz; a simulator whose rate drifts from the wall clock's by r is followed r x 0.2 s
#: behind (1 ms at 0.5 %), inside the lead
CLOCK_TIME_CONSTANT_S = 0.2
#: arrivals in a row off the clock by more than the jump threshold that reset it (a pause, a new run, a re-anchored
#: schedule); a single late arrival (a scheduling stall) is left out of the filter instead
CLOCK_RESET_ARRIVALS = 3


class SimClock:
    """The wall clock's mapping onto simulated time, ``t_sim = now - offset`` (rate 1), from the states' arrivals.

    Each arrival's offset ``o_k = a_k - t_k`` (monotonic s minus simulated s) moves the estimate through a first-order
    filter, ``offset += (o_k - offset) (1 - exp(-(a_k - a_{k-1}) / tau))``: the mean arrival latency, followed with
    the time constant ``tau``, so the clock's simulated time advances by the wall clock's interval between two ticks
    whatever the arrival jitter. An arrival off the estimate by more than ``jump_s`` is left out;
    :data:`CLOCK_RESET_ARRIVALS` of them in a row (the simulator paused, a new run, a re-anchored schedule) reset it
    to the newest's offset."""

    def __init__(self, time_constant_s: float, jump_s: float):
        self.time_constant_s = time_constant_s
        self.jump_s = jump_s
        self.offset_s: float | None = None     # monotonic s minus simulated s
        self.last_arrival_s = 0.0
        self.off_in_a_row = 0
        self.resets = 0                        # resets after the first arrival

    def forget(self) -> None:
        self.offset_s = None
        self.off_in_a_row = 0

    def on_arrival(self, arrival_s: float, sim_t: float) -> None:
        """A state of simulated time ``sim_t`` (s) arrived at ``arrival_s`` (monotonic s)."""
        offset = arrival_s - sim_t
        if self.offset_s is not None and abs(offset - self.offset_s) > self.jump_s:
            self.off_in_a_row += 1
            if self.off_in_a_row < CLOCK_RESET_ARRIVALS:
                return
            self.resets += 1
            self.offset_s = None
        self.off_in_a_row = 0
        if self.offset_s is None:
            self.offset_s = offset
        else:
            weight = -math.expm1(-max(arrival_s - self.last_arrival_s, 0.0) / self.time_constant_s)
            self.offset_s += (offset - self.offset_s) * weight
        self.last_arrival_s = arrival_s

    def at(self, now_s: float) -> float | None:
        """The simulated time (s) at ``now_s`` (monotonic s); None before the first arrival."""
        return None if self.offset_s is None else now_s - self.offset_s


@dataclass(frozen=True)
class Command:
    """One setpoint frame, as sent: angles (n,) rad, raw (n,) device units, limited (n,) bool."""
    mode: Mode
    angles: np.ndarray
    raw: np.ndarray
    limited: np.ndarray
    sim_seq: int       # seq of the sim/state it came from, -1 if none
    sim_t: float       # its simulation time, s (0.0 if none)
    state_stamp_ns: int  # its publisher stamp (wall clock ns), 0 if none
    setpoint_t: float  # the simulated time the angles are for, s: sim_t carried by the lead (sim_t without one)


class DriverCore:
    def __init__(self, servo_map: ServoMap, command_period_s: float,
                 state_timeout_s: float = DEFAULT_STATE_TIMEOUT_S, hold_s: float = DEFAULT_HOLD_S,
                 max_state_age_s: float | None = None, lead_s: float = 0.0):
        self.map = servo_map
        self.command_period_s = command_period_s
        self.state_timeout_s = state_timeout_s
        self.hold_s = hold_s
        self.lead_s = lead_s
        self.lifecycle = Lifecycle()
        self.estop = EStop()
        self.state_check = StateCheck(max_age_s=state_timeout_s if max_state_age_s is None else max_state_age_s)
        self.rejections: Counter[str] = Counter()
        self.states_used = 0
        self.joint_names: list[str] | None = None   # from sim/status when sim/state does not carry them
        self.measured: np.ndarray | None = None      # (n,) rad, last measured servo angles
        self.previous: np.ndarray | None = None      # (n,) rad, last angles sent on this link
        self.last_send_s: float | None = None
        self.goal: np.ndarray | None = None          # (n,) rad, mapped angles of the newest usable state
        self.goal_seq, self.goal_t, self.goal_stamp_ns = -1, 0.0, 0
        #: the newest usable state's joint positions, rates and accelerations (n_joints,) and its channels' joint
        #: indices (n,): what the lead carries forward
        self.goal_motion: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
        #: the simulated time the setpoints are computed for (with a lead)
        self.clock = SimClock(CLOCK_TIME_CONSTANT_S, jump_s=lead_s)
        self.fresh_s: float | None = None            # when the newest usable state arrived
        self.baseline_s: float = 0.0                 # (re)activation / reconnect time: the age of "no state"
        self.ramping = False                         # inactive, but still on the way to neutral
        self.mode: Mode = Mode.NEUTRAL
        self.mapping_error: str | None = None
        #: False for rigs whose telemetry carries no servo positions: a ramp then assumes the servos start at
        #: neutral (where the device puts them at power-up and on its watchdog)
        self.positions_reported = True
        self.faulty_since_s: float | None = None     # first of an unbroken run of faulty measurements
        self.holds = 0                               # entries into hold while active
        self.time_held_s = 0.0                       # s spent in hold, ramp or neutral while active

    # ---- inputs -------------------------------------------------------------------------------------
    def on_sim_status(self, payload: dict) -> bool:
        """Take the joint names of a ``sim/status`` payload; False (nothing taken) if they are not distinct
        strings."""
        names = payload.get("joint_names")
        if not joint_names_ok(names):
            return False
        self.joint_names = names
        return True

    def on_state(self, payload: dict, now_s: float, now_ns: int) -> Rejection | None:
        """Take a ``sim/state`` payload received at ``now_s`` (monotonic) / ``now_ns`` (wall clock)."""
        reason = self._use_state(payload, now_ns)
        if reason is not None:
            self.rejections[reason.value] += 1
            return reason
        self.clock.on_arrival(now_s, self.goal_t)
        self.fresh_s = now_s
        self.states_used += 1
        return None

    def _use_state(self, payload: dict, now_ns: int) -> Rejection | None:
        names = payload.get("joint_names", self.joint_names)
        indices = None
        if joint_names_ok(names):
            try:
                indices = self.map.joint_indices(names)
                self.mapping_error = None
            except MappingError as exc:
                self.mapping_error = str(exc)
        reason = self.state_check.check(payload, indices, now_ns)
        if reason is not None:
            return reason
        with np.errstate(over="ignore", invalid="ignore"):
            goal = self.map.joints_to_angles(np.asarray(payload["q"], dtype=float), indices)
        if not np.all(np.isfinite(goal)):           # a finite joint value that overflows through the gain
            return Rejection.NON_FINITE
        self.goal = goal
        self.goal_seq, self.goal_t, self.goal_stamp_ns = payload["seq"], float(payload["t"]), payload["stamp_ns"]
        if self.lead_s > 0.0:
            q = np.asarray(payload["q"], dtype=float)
            qd, qdd = (np.asarray(payload.get(key, np.zeros_like(q)), dtype=float) for key in ("qd", "qdd"))
            motion_ok = qd.shape == qdd.shape == q.shape and np.all(np.isfinite(qd)) and np.all(np.isfinite(qdd))
            self.goal_motion = (q, qd, qdd, indices) if motion_ok else None
        return None

    def on_measured(self, angles: np.ndarray) -> None:
        """Measured servo angles (n,) rad from telemetry that passed the driver's checks (finite, in range)."""
        self.measured = np.asarray(angles, dtype=float)
        self.faulty_since_s = None

    def on_measurement_fault(self, now_s: float) -> None:
        """The device reported servo positions that are not finite or out of range: they are not taken, and if
        nothing but faults comes for ``state_timeout_s`` the driver holds, then ramps, as for a stale state."""
        if self.faulty_since_s is None:
            self.faulty_since_s = now_s

    # ---- lifecycle and e-stop ------------------------------------------------------------------------
    def activate(self, now_s: float) -> None:
        if self.estop.latched:
            raise TransitionError(f"cannot activate: e-stop latched by {', '.join(self.estop.sources)} "
                                  f"(send reset_estop first)")
        self.lifecycle.target("activate")
        self._require_new_state(now_s)
        self.ramping = False
        self.lifecycle.apply("activate")

    def deactivate(self) -> None:
        self.lifecycle.apply("deactivate")
        self.ramping = True

    def trigger_estop(self, source: str) -> bool:
        """Latch the e-stop. An active driver drops to inactive and sends nothing more: the device, told by its
        own ESTOP (or having raised it), holds the servos at neutral and refuses setpoints until its reset.
        The next motion starts from the measured angles. True if newly latched."""
        newly = self.estop.trigger(source)
        if self.lifecycle.state is State.ACTIVE:
            self.lifecycle.apply("deactivate")
        self.ramping = False
        self.previous = None
        self.last_send_s = None
        self.mode = Mode.NEUTRAL
        return newly

    def reset_estop(self, device_still_stopped: bool = False) -> None:
        """Clear the latch; the driver stays inactive until an explicit activate."""
        self.estop.reset(device_still_stopped)

    def begin_shutdown(self) -> None:
        """Stop tracking and ramp to neutral (the caller ticks until :attr:`ramping` is False)."""
        if self.lifecycle.state is State.ACTIVE:
            self.deactivate()
        elif self.previous is not None:
            self.ramping = True

    def link_reset(self, now_s: float) -> None:
        """The serial link was (re)opened: forget what was sent and every state from before."""
        self.previous = None
        self.measured = None
        self.faulty_since_s = None
        self.last_send_s = None
        self._require_new_state(now_s)

    def _require_new_state(self, now_s: float) -> None:
        self.goal = None
        self.goal_motion = None
        self.clock.forget()
        self.goal_seq, self.goal_t, self.goal_stamp_ns = -1, 0.0, 0
        self.fresh_s = None
        self.baseline_s = now_s
        self.state_check.forget()

    # ---- the tick -----------------------------------------------------------------------------------
    def tick(self, now_s: float) -> Command | None:
        """The command to send at ``now_s`` (monotonic s), or None to send nothing this tick."""
        active = self.lifecycle.state is State.ACTIVE and not self.estop.latched
        if not active and not self.ramping:
            return None
        start = self._start_angles()
        if start is None:
            return None
        dt = self.command_period_s if self.last_send_s is None else now_s - self.last_send_s
        dt = min(max(dt, 0.0), MAX_DT_PERIODS * self.command_period_s)
        limited = np.zeros(len(self.map), dtype=bool)
        if active:
            age = now_s - (self.fresh_s if self.fresh_s is not None else self.baseline_s)
            if self.faulty_since_s is not None:     # measurements faulty: as old as the fault run, at least
                age = max(age, now_s - self.faulty_since_s)
            mode = watchdog_mode(age, self.state_timeout_s, self.hold_s)
            if mode is Mode.TRACK and self.goal is None:
                mode = Mode.HOLD
            if mode is not Mode.TRACK:
                self.holds += mode is Mode.HOLD and self.mode is not Mode.HOLD
                if self.last_send_s is not None:
                    self.time_held_s += now_s - self.last_send_s
        else:
            mode = Mode.RAMP
        setpoint_t = self.goal_t
        if mode is Mode.TRACK:
            goal, setpoint_t = self._led_goal(now_s)
            angles, limited = apply_limits(goal, start, dt, self.map.min_angle, self.map.max_angle,
                                           self.map.max_rate)
        elif mode is Mode.HOLD:
            # identity when start is the last angle sent; a measured start outside the limits is walked in
            angles = move_toward(start, np.clip(start, self.map.min_angle, self.map.max_angle), dt,
                                 self.map.max_rate)
        else:
            angles = move_toward(start, self.map.neutral, dt, self.map.max_rate)
            if self.map.at_neutral(angles):
                # arrived: neutral itself (the ramp's last step can end a rounding error away, c - step = 3e-17)
                angles = self.map.neutral.copy()
                mode = Mode.NEUTRAL
                self.ramping = False
        self.previous = angles
        self.last_send_s = now_s
        self.mode = mode
        return Command(mode=mode, angles=angles, raw=self.map.angles_to_raw(angles), limited=limited,
                       sim_seq=self.goal_seq, sim_t=self.goal_t,
                       state_stamp_ns=self.goal_stamp_ns if mode is Mode.TRACK else 0, setpoint_t=setpoint_t)

    def _led_goal(self, now_s: float) -> tuple[np.ndarray, float]:
        """The servo angles (n,) rad to track at ``now_s`` and the simulated time (s) they are for: the newest state's,
        carried along its joint rates and accelerations to the clock's time at ``now_s``, by at most ``lead_s`` either
        way (the state as it is without a lead, or for a state without finite ``qd``/``qdd``)."""
        clock_t = self.clock.at(now_s)
        if self.goal_motion is None or clock_t is None:
            return self.goal, self.goal_t
        q, qd, qdd, indices = self.goal_motion
        lead = min(max(clock_t - self.goal_t, -self.lead_s), self.lead_s)
        with np.errstate(over="ignore", invalid="ignore"):
            goal = self.map.joints_to_angles(q + lead * qd + 0.5 * lead * lead * qdd, indices)
        return (goal, self.goal_t + lead) if np.all(np.isfinite(goal)) else (self.goal, self.goal_t)

    def _start_angles(self) -> np.ndarray | None:
        if self.previous is not None:
            return self.previous
        if self.measured is not None:
            return self.measured
        if not self.positions_reported:
            return self.map.neutral
        return None
