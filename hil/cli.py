"""The ``mms`` command: one entry point, one sub-command per process or tool.

Each sub-command lives in its own module, which defines ``add_arguments(parser)`` and ``run(args) -> int``.
Modules are imported only when their command runs, so ``mms emulate`` never pays for Qt and ``mms dash``
never for numba. A :class:`sim.config.ConfigError` is printed as one line, without a traceback.
"""
from __future__ import annotations

import importlib
import sys

from sim.cli_options import make_parser, suggestion, version
from sim.config import ConfigError

#: command name -> (module implementing it, one-line summary)
COMMANDS: dict[str, tuple[str, str]] = {
    "sim": ("sim.cli_sim", "run a robot simulation offline, write its time series, plots and summary"),
    "check": ("sim.cli_check", "compare the hybrid algorithm with the TMT engine on a robot's states"),
    "sweep": ("sim.cli_sweep", "sweep a robot's actuation parameters and tabulate the steady results"),
    "serve": ("hil.feedback.serve", "run a simulation in real time and publish its state over ZeroMQ"),
    "emulate": ("firmware_interface.emulate_command", "emulate a rig's firmware on a pseudo-terminal"),
    "drive": ("hil.drive.driver", "servo driver: simulator states to the rig, telemetry back, rig kept safe"),
    "dash": ("gui.dashboard", "live dashboard: simulated vs measured torques, strains and tracking"),
    "record": ("hil.recording.recorder", "record every topic to an MCAP file"),
    "export": ("hil.recording.export", "export a recording to .mat, HDF5 or CSV"),
    "validate": ("hil.validation.validate", "compare measured against simulated signals and write a report"),
    "identify": ("hil.validation.identify", "fit model parameters to a recorded run, with standard errors"),
    "keys": ("hil.keys", "create ZeroMQ CURVE keys: needed to bind beyond loopback (docs/security.md)"),
    "bridge": ("hil.bridge.bridge", "serve the live topics to Foxglove (WebSocket) and PlotJuggler (ZeroMQ)"),
    "urdf": ("sim.cli_urdf", "write the URDF of a robot (its rigid tree, inertias and default shapes)"),
    "demo": ("hil.experiment.demo", "run a whole tethered HIL experiment on an emulated rig and validate it"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: mms COMMAND [options]   (mms COMMAND --help for a command's options; mms --version)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if argv[0] in ("-V", "--version"):
        print(f"mms {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"mms: unknown command {name!r}{suggestion(name, COMMANDS)}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, summary = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name == module_name:
            print(f"mms {name}: not built yet ({module_name} is missing)", file=sys.stderr)
            return 2
        raise
    parser = make_parser(f"mms {name}", summary)
    module.add_arguments(parser)
    args = parser.parse_args(rest)
    try:
        return int(module.run(args) or 0)
    except ConfigError as exc:
        print(f"mms {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
