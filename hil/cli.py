"""The ``mms`` command: one entry point, one sub-command per process or tool.

Each sub-command has a parser module, which defines ``add_arguments(parser)`` and imports nothing heavy (no numba,
scipy, numpy, ZeroMQ, MCAP, Qt, Dask ...: tests/cli/test_cli_start.py), and a module that defines
``run(args) -> int`` (often the same one). The command's module is imported only after its arguments are parsed, so
``--help`` and a bad argument answer at once, ``mms emulate`` never pays for Qt and ``mms dash`` never for numba.
A :class:`sim.config.ConfigError` is printed as one line, without a traceback.
"""
from __future__ import annotations

import importlib
import sys
from typing import NamedTuple

from sim.cli_options import Parser, make_parser, suggestion, version
from sim.config import ConfigError


class Command(NamedTuple):
    parser: str     # the module defining add_arguments(parser): imports nothing heavy
    runner: str     # the module defining run(args) -> int
    summary: str    # one line, for mms --help and the command's own


def _command(module: str, summary: str, parser: str | None = None) -> Command:
    return Command(parser or module, module, summary)


#: command name -> its parser module, the module that runs it and its one-line summary
COMMANDS: dict[str, Command] = {
    "sim": _command("sim.cli_sim", "run a robot simulation offline, write its time series, plots and summary",
                    parser="sim.cli_sim_args"),
    "check": _command("sim.cli_check", "compare the hybrid algorithm with the TMT engine on a robot's states",
                      parser="sim.cli_check_args"),
    "sweep": _command("sim.cli_sweep", "sweep a robot's actuation parameters and tabulate the steady results"),
    "serve": _command("hil.feedback.serve", "run a simulation in real time and publish its state over ZeroMQ"),
    "emulate": _command("firmware_interface.emulate_command", "emulate a rig's firmware on a pseudo-terminal",
                        parser="firmware_interface.emulate_args"),
    "drive": _command("hil.drive.driver", "servo driver: simulator states to the rig, telemetry back, rig kept safe",
                      parser="hil.drive.options"),
    "dash": _command("gui.dashboard", "live dashboard: simulated vs measured torques, strains and tracking"),
    "record": _command("hil.recording.recorder", "record every topic to an MCAP file",
                       parser="hil.recording.recorder_args"),
    "export": _command("hil.recording.export", "export a recording to .mat, HDF5 or CSV",
                       parser="hil.recording.export_args"),
    "validate": _command("hil.validation.validate", "compare measured against simulated signals and write a report",
                         parser="hil.validation.validate_args"),
    "identify": _command("hil.validation.identify", "fit model parameters to a recorded run, with standard errors",
                         parser="hil.validation.identify_args"),
    "keys": _command("hil.keys", "create ZeroMQ CURVE keys: needed to bind beyond loopback (docs/security.md)"),
    "bridge": _command("hil.bridge.bridge", "serve the live topics to Foxglove (WebSocket) and PlotJuggler (ZeroMQ)",
                       parser="hil.bridge.bridge_args"),
    "urdf": _command("sim.cli_urdf", "write the URDF of a robot (its rigid tree, inertias and default shapes)"),
    "demo": _command("hil.experiment.demo", "run a whole tethered HIL experiment on an emulated rig and validate it",
                     parser="hil.experiment.demo_args"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: mms COMMAND [options]   (mms COMMAND --help for a command's options; mms --version)", "",
             "commands:"]
    lines += [f"  {name:<{width}}  {command.summary}" for name, command in COMMANDS.items()]
    return "\n".join(lines)


def command_parser(name: str) -> Parser:
    """The parser of ``mms NAME``, from its parser module alone."""
    command = COMMANDS[name]
    parser = make_parser(f"mms {name}", command.summary)
    importlib.import_module(command.parser).add_arguments(parser)
    return parser


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
    args = command_parser(name).parse_args(rest)
    runner = COMMANDS[name].runner
    try:
        module = importlib.import_module(runner)
    except ModuleNotFoundError as exc:
        if exc.name == runner:
            print(f"mms {name}: not built yet ({runner} is missing)", file=sys.stderr)
            return 2
        raise
    try:
        return int(module.run(args) or 0)
    except ConfigError as exc:
        print(f"mms {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
