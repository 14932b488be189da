"""The driver's options: ``mms drive``'s arguments (:func:`add_arguments`, read before numpy and ZeroMQ are
imported, so that ``--help`` and a bad argument answer at once) and their typed form, built once from the parsed
command line (:func:`options_from_args`), checked there, and handed to :class:`hil.drive.driver.Driver` and to the
link factory (hil/drive/links/factory.py)."""
from __future__ import annotations

import argparse
import math
import shlex
from dataclasses import dataclass
from pathlib import Path

from sim.cli_options import SERVER_RT_PRIORITY, add_network, add_rig, add_rt_priority, add_start, below_server_priority
from sim.config import ConfigError

#: default time without a fresh simulator state before the driver stops tracking and holds (s)
DEFAULT_STATE_TIMEOUT_S = 0.050
#: default time the driver holds the last setpoint before it ramps to neutral (s)
DEFAULT_HOLD_S = 0.200
DEFAULT_STATUS_HZ = 10.0
DEFAULT_LINK_TIMEOUT_S = 0.5


@dataclass(frozen=True)
class DriverOptions:
    """How the driver behaves (docs/driver.md lists the command-line options these come from)."""
    network: Path | None = None                 # network file; None: configs/network.toml
    autoactivate: bool = False                  # activate as soon as the device is configured
    state_timeout_s: float = DEFAULT_STATE_TIMEOUT_S    # no fresh sim/state for this long -> hold
    hold_s: float = DEFAULT_HOLD_S              # hold this long, then ramp to neutral
    max_state_age_s: float | None = None        # None: the state timeout; 0: off
    link_timeout_s: float = DEFAULT_LINK_TIMEOUT_S      # silence of the device for this long -> link lost
    status_hz: float = DEFAULT_STATUS_HZ        # hw/status rate
    allow_remote_reset: bool = False            # reset_estop on the control socket may release the e-stop
    rt_priority: int = 0                        # SCHED_FIFO priority, 0: the normal scheduler
    state_lead_s: float = 0.0                   # the newest state carried forward by at most this, s (0: off)


@dataclass(frozen=True)
class DeviceOptions:
    """Where the device is: a port, or an emulator the driver starts (and, for a rig of two devices, the
    microcontroller's port or emulator arguments)."""
    port: str | None = None                     # None: the rig file's port (or the emulator's pty)
    emulate: bool = False
    emulator_args: tuple[str, ...] = ()
    sensor_port: str | None = None
    sensor_emulator_args: tuple[str, ...] = ()
    #: the emulators' SCHED_FIFO priority where their arguments name none (the driver's own; None: theirs)
    emulator_rt_priority: int | None = None

    def emulator_argv(self, emulator_args: tuple[str, ...]) -> tuple[str, ...]:
        """An emulator child's arguments with ``emulator_rt_priority`` unless they name a ``--rt-priority``: the
        emulated firmware and its plant stand in for the rig's hardware and physics, which a busy host never
        delays, and ``mms drive --rt-priority 0`` turns the class off for them too."""
        if self.emulator_rt_priority is None or "--rt-priority" in emulator_args:
            return emulator_args
        return (*emulator_args, "--rt-priority", str(self.emulator_rt_priority))


def options_from_args(args: argparse.Namespace) -> tuple[DriverOptions, DeviceOptions]:
    """The typed options of ``mms drive``'s parsed arguments; one-line ConfigError for a value out of range."""
    for name in ("state_timeout", "hold", "status_hz", "link_timeout"):
        value = getattr(args, name)
        if not (math.isfinite(value) and value > 0):
            raise ConfigError(None, f"--{name.replace('_', '-')}", f"got {value}, expected a positive number")
    if args.max_state_age is not None and not (math.isfinite(args.max_state_age) and args.max_state_age >= 0):
        raise ConfigError(None, "--max-state-age", f"got {args.max_state_age}, expected a number >= 0 (0: off)")
    if not (math.isfinite(args.state_lead) and args.state_lead >= 0):
        raise ConfigError(None, "--state-lead", f"got {args.state_lead}, expected a number of seconds >= 0 (0: off)")
    if args.sensor_emulator_args and not args.emulate:
        raise ConfigError(None, "--sensor-emulator-args", "needs --emulate")
    driver = DriverOptions(network=None if args.network is None else Path(args.network),
                           autoactivate=args.autostart, state_timeout_s=args.state_timeout, hold_s=args.hold,
                           max_state_age_s=args.max_state_age, link_timeout_s=args.link_timeout,
                           status_hz=args.status_hz, allow_remote_reset=args.allow_remote_reset,
                           rt_priority=args.rt_priority, state_lead_s=args.state_lead)
    device = DeviceOptions(port=args.port, emulate=args.emulate, emulator_args=tuple(shlex.split(args.emulator_args)),
                           sensor_port=args.sensor_port,
                           sensor_emulator_args=tuple(shlex.split(args.sensor_emulator_args)),
                           emulator_rt_priority=args.rt_priority)
    return driver, device


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rig(parser, required=True)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--port", help="serial device (default: the rig file's [serial] port)")
    where.add_argument("--emulate", action="store_true",
                       help="start `mms emulate --rig RIG` as a child and drive its pseudo-terminal")
    parser.add_argument("--emulator-args", default="",
                        help='extra arguments for the emulator child, one string (e.g. "--corrupt-rate 0.01")')
    two = parser.add_argument_group("rigs with two serial devices (a Dynamixel bus and a [microcontroller] for "
                                    "the sensors)")
    two.add_argument("--sensor-port", help="the microcontroller's serial device (default: the rig file's "
                                           "[microcontroller] port, else its own rig file's [serial] port)")
    two.add_argument("--sensor-emulator-args", default="",
                     help='with --emulate: extra arguments for the microcontroller\'s emulator, one string '
                          '(e.g. "--plant physics")')
    add_network(parser)
    add_start(parser, idle_by_default=True, deprecated=("--autoactivate",))
    parser.add_argument("--state-timeout", type=float, default=DEFAULT_STATE_TIMEOUT_S, metavar="S",
                        help="no fresh sim/state for this long -> hold (default %(default)s s)")
    parser.add_argument("--hold", type=float, default=DEFAULT_HOLD_S, metavar="S",
                        help="hold this long before ramping to neutral (default %(default)s s)")
    parser.add_argument("--max-state-age", type=float, default=None, metavar="S",
                        help="refuse states published longer ago than this, by the publisher's clock against "
                             "ours (default: the state timeout; 0: off, for hosts without synchronised clocks)")
    parser.add_argument("--state-lead", type=float, default=0.0, metavar="S",
                        help="carry the newest sim/state along its joint rates and accelerations to each command "
                             "tick's time on a smooth simulated clock (the states' arrivals filtered), by at most "
                             "this much either way: setpoints on the driver's regular ticks, not on the states' "
                             "arrival jitter (default 0 s: off)")
    parser.add_argument("--link-timeout", type=float, default=DEFAULT_LINK_TIMEOUT_S, metavar="S",
                        help="nothing received from the device for this long (at least 10 telemetry frames and 3 "
                             "heartbeats) -> link lost, reconnect (default %(default)s s)")
    parser.add_argument("--status-hz", type=float, default=DEFAULT_STATUS_HZ,
                        help="hw/status rate (default %(default)s Hz)")
    add_rt_priority(parser, below_server_priority(SERVER_RT_PRIORITY))
    parser.add_argument("--allow-remote-reset", action="store_true",
                        help="let `reset_estop` on the control socket release the e-stop (default: only SIGUSR1 "
                             "to this process, on this host, does; never while the rig's button is held)")
