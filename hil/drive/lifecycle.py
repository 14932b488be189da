"""The driver's lifecycle, after ros2_control's managed nodes (pure state machine, no I/O).

    unconfigured --configure--> inactive --activate--> active
         ^                         |  ^                  |
         +--------cleanup----------+  +----deactivate----+
    any state --shutdown--> finalized

- unconfigured: port closed, nothing sent.
- inactive: port open, hello and protocol version checked, telemetry read and published, heartbeats sent;
  no setpoint is sent except the ramp to neutral after a deactivate.
- active: setpoints follow the simulator (through the limits and the watchdog).
- finalized: the driver has left the servos at neutral and is exiting.

The e-stop is orthogonal (hil/drive/safety.EStop): it forces ``active`` down to ``inactive`` and refuses
``activate`` until it is reset.
"""
from __future__ import annotations

from enum import Enum


class State(str, Enum):
    UNCONFIGURED = "unconfigured"
    INACTIVE = "inactive"
    ACTIVE = "active"
    FINALIZED = "finalized"


class TransitionError(ValueError):
    """A transition not allowed from the current state; the message is one line for the control reply."""


#: transition name -> (states it may start from, state it leads to)
TRANSITIONS: dict[str, tuple[tuple[State, ...], State]] = {
    "configure": ((State.UNCONFIGURED,), State.INACTIVE),
    "activate": ((State.INACTIVE,), State.ACTIVE),
    "deactivate": ((State.ACTIVE,), State.INACTIVE),
    "cleanup": ((State.INACTIVE,), State.UNCONFIGURED),
    "shutdown": ((State.UNCONFIGURED, State.INACTIVE, State.ACTIVE), State.FINALIZED),
}


class Lifecycle:
    """Current state and the checked transitions between states."""

    def __init__(self) -> None:
        self.state = State.UNCONFIGURED

    def target(self, transition: str) -> State:
        """The state ``transition`` leads to from here; TransitionError if it is not allowed."""
        if transition not in TRANSITIONS:
            raise TransitionError(f"unknown transition {transition!r}")
        sources, target = TRANSITIONS[transition]
        if self.state not in sources:
            allowed = ", ".join(name for name, (srcs, _) in TRANSITIONS.items() if self.state in srcs)
            raise TransitionError(f"cannot {transition} from {self.state.value} (allowed: {allowed or 'none'})")
        return target

    def apply(self, transition: str) -> State:
        """Take ``transition`` (after the caller did its work); return the new state."""
        self.state = self.target(transition)
        return self.state
