"""The option vocabulary of every ``mms`` command: one spelling, one meaning and one help text per option.

Every command's parser is a :class:`Parser` (from :func:`make_parser`) and takes its shared options from the
``add_*`` functions here, so that ``--network``, ``--rig``, ``--quiet``, ``--no-plots``, ``--out``,
``--integrator``, ``--base`` and the start options read and behave the same in ``sim``, ``serve``, ``drive``,
``record``, ``dash``, ``validate`` ... (tests/configs/test_cli_vocabulary.py walks every ``--help``):

- robots and rigs are given by a shipped NAME (``flapper``, ``raybot``, ``pendulum``; rigs ``flapper``,
  ``flapper-dynamixel``, ``raybot``) or a PATH, through one resolver (:func:`sim.config.resolve_config`); a file
  of another kind is named as such (``... is a rig file, not a robot file``);
- an unknown option gets a did-you-mean, as an unknown command does in ``mms``;
- an old spelling (:data:`DEPRECATED`) still works for one release and prints one line on stderr naming the new
  spelling.

This module sits in ``sim`` (which imports nothing of the other packages) so that every command may use it.
"""
from __future__ import annotations

import argparse
import difflib
import math
import sys
from pathlib import Path

from sim.config import ConfigError, resolve_config, shipped_configs
from sim.integrator_names import INTEGRATORS

#: The distribution whose version ``mms --version`` prints.
DISTRIBUTION = "mms-hil"
#: ``mms sim --base`` words -> the model's base mode.
BASES = {"free": "floating", "tethered": "fixed"}
#: How close a mistyped command or option must be to a known one to be suggested (difflib ratio).
SUGGESTION_CUTOFF = 0.6

#: The help text of each shared option (a command may add its own default in parentheses after it).
HELP: dict[str, str] = {
    "--network": "network file: the ZeroMQ endpoints and CURVE keys (default: the shipped configs/network.toml)",
    "--quiet": "print no progress bar or progress line",
    "--no-plots": "write no plots",
    "--out": "output folder",
    "--integrator": ("rk4 (fixed step), rk45 (adaptive Dormand-Prince) or rosw (fixed step, linearly implicit "
                     "Rosenbrock-W: stiff modes do not bound its step)"),
    "--base": "free (floating base, free flight) or tethered (base fixed, its wrench is an output)",
    "--autostart": "start at once, without waiting for a start request on the control socket",
    "--rt-priority": ("run the loop under the SCHED_FIFO real-time policy at priority N (1-99; needs CAP_SYS_NICE "
                      "or an rtprio limit, else it says so and runs normally; not asked for when the model is slower "
                      "than real time): a busy machine then delays it less; 0: the normal scheduler"),
    "--background-nice": ("the fair scheduler's nice value, 0-19, of the session of each process that can wait "
                          "(the recorder, the driver with its emulator and physics plant, the dashboard), so that the "
                          "model server preempts them when a state is due (no permission needed); experimental: 10 cut "
                          "the server's late states to 0.37-0.46x in 2-minute soaks beside other load, changed "
                          "nothing in an idle 10-minute soak, and starves them on a busy machine (docs/headroom.md); "
                          "0: off"),
    "--max-backlog": ("the most `mms record` holds received and not yet written, MiB, in all: a quarter goes to "
                      "ZeroMQ's receive pipes in front of it (shared among the publishers, 10.5 KiB a message), the "
                      "rest to its own queue (copies of the payloads, plus 256 B a message); a recorder behind its "
                      "stream drops what arrives beyond it, counted per topic by reason in its status and in the "
                      "recording's health (and as seq gaps). Its resident set stays within its base (about 48 MiB "
                      "bare, 190 MiB with a robot's poses), this bound and about 8 MiB for writing (measured "
                      "frozen and flooded by both publishers at 8 to 128 MiB: growth 0.92-1.74 times the bound)"),
    "--poses-rate": ("most body-pose messages (Foxglove FrameTransforms) per second of sim/state, derived from the "
                     "robot's forward kinematics; 0: one per state"),
    "--foxglove": ("serve the live topics on Foxglove's WebSocket protocol at ws://127.0.0.1:PORT (0: a free port, "
                   "printed)"),
    "--plotjuggler": "publish the live topics as flat JSON maps on a ZeroMQ PUB socket bound at ENDPOINT, for "
                     "PlotJuggler's ZMQ subscriber",
    "--idle": ("start idle and wait for the control socket's start request (`start`; `activate` for "
               "`mms drive`)"),
    "--scheduler": ("where the study's simulations run: local (a Dask LocalCluster, one worker process per core), "
                    "tcp://HOST:PORT (an existing Dask cluster's scheduler) or serial (this process, in order)"),
    "--workers": "worker processes of the local Dask cluster",
    "--feedback": ("close the loop: subscribe to the driver's hw/telemetry and put the rig's measured wrench on the "
                   "simulation per the rig file's [feedback] table (docs/closed-loop.md); RIG: a shipped name or a "
                   "rig TOML file"),
}

#: Old spelling -> new spelling, for the deprecation line and the docs (removed in the next release).
DEPRECATED: dict[str, str] = {
    "--config": "--network",
    "--no-progress": "--quiet",
    "--paused": "--idle",
    "--wait": "--idle",
    "--autoactivate": "--autostart",
    "--plots none": "--no-plots",
}


def version() -> str:
    """The installed distribution's version ("unknown" when run from a tree that was never installed)."""
    from importlib.metadata import PackageNotFoundError, version as installed_version

    try:
        return installed_version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def suggestion(word: str, known: list[str] | tuple[str, ...] | dict) -> str:
    """``; did you mean X?`` for the closest of ``known``, or "" if none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=SUGGESTION_CUTOFF)
    return f"; did you mean {close[0]}?" if close else ""


def deprecation(prog: str, old: str, new: str) -> None:
    """The one stderr line an old spelling prints."""
    print(f"{prog}: {old} is deprecated and will be removed in the next release: use {new}", file=sys.stderr)


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (as a bad config's are) and whose unknown options get a
    did-you-mean among the parser's own options."""

    def error(self, message: str):
        prefix = "unrecognized arguments: "
        if message.startswith(prefix):
            known = [s for action in self._actions for s in action.option_strings
                     if action.help is not argparse.SUPPRESS]
            words = message[len(prefix):].split()
            hints = [suggestion(word.split("=")[0], known) for word in words if word.startswith("-")]
            message += next((hint for hint in hints if hint), "")
        self.exit(2, f"{self.prog}: error: {message} ({self.prog} --help lists the options)\n")


def make_parser(prog: str, description: str | None = None) -> Parser:
    return Parser(prog=prog, description=description)


class _Deprecated(argparse.Action):
    """An old spelling: stores what its new spelling would, after :func:`deprecation`."""

    def __init__(self, option_strings, dest, new: str, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        deprecation(parser.prog, option_string, self.new)
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def _add_deprecated(parser, old: str, dest: str, **kwargs) -> None:
    parser.add_argument(old, dest=dest, action=_Deprecated, new=DEPRECATED[old], help=argparse.SUPPRESS,
                        default=argparse.SUPPRESS, **kwargs)


def _with_default(text: str, default_text: str | None) -> str:
    return f"{text} (default: {default_text})" if default_text else text


# ------------------------------------------------------------------------------------------- robots and rigs
def config_type(kind: str):
    """An argparse ``type``: a shipped name or a file of ``kind`` -> its Path (a one-line error otherwise)."""
    def parse(value: str) -> Path:
        try:
            return resolve_config(kind, value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    parse.__name__ = kind
    return parse


def named_help(kind: str) -> str:
    """``robot: a shipped name (flapper, pendulum, raybot) or a robot TOML file``."""
    return f"{kind}: a shipped name ({', '.join(shipped_configs(kind))}) or a {kind} TOML file"


def add_robot(parser, *, option: str | None = None, extra: str = "", **kwargs) -> None:
    """The robot, positional (``dest`` "config") or as ``option``; ``extra`` adds to the help."""
    names = (option,) if option else ("config",)
    parser.add_argument(*names, metavar="ROBOT", type=kwargs.pop("type", config_type("robot")),
                        help=named_help("robot") + extra, **kwargs)


#: the value of a robot option that means "the robot config stored in the recording" (mms validate --sim, identify)
RECORDED = "recorded"


def recorded_or_robot(value: str):
    """A robot option of a command that reads a recording: "recorded" (kept as the string), or a robot name or file
    (resolved to its path)."""
    return value if value == RECORDED else config_type("robot")(value)


def add_feedback(parser) -> None:
    """``--feedback RIG`` into ``args.feedback`` (a rig path, or None: the loop stays open)."""
    parser.add_argument("--feedback", metavar="RIG", type=config_type("rig"), default=None, help=HELP["--feedback"])


def add_rig(parser, *, required: bool = False, default: str | None = None, extra: str = "", **kwargs) -> None:
    """``--rig RIG``; a ``type`` in kwargs replaces the shipped-name-or-file parser (`mms demo`: its set-up names)."""
    parser.add_argument("--rig", metavar="RIG", type=kwargs.pop("type", config_type("rig")), required=required,
                        default=default, help=_with_default(named_help("rig") + extra, default), **kwargs)


# ------------------------------------------------------------------------------------------- shared options
def add_network(parser) -> None:
    """``--network FILE`` (old spelling ``--config``); None means the shipped network file."""
    parser.add_argument("--network", metavar="FILE", type=config_type("network"), default=None,
                        help=HELP["--network"])
    _add_deprecated(parser, "--config", "network", type=config_type("network"))


def add_quiet(parser) -> None:
    parser.add_argument("--quiet", action="store_true", help=HELP["--quiet"])
    _add_deprecated(parser, "--no-progress", "quiet", nargs=0, const=True)


def add_no_plots(parser) -> None:
    parser.add_argument("--no-plots", action="store_true", help=HELP["--no-plots"])


def add_out(parser, default_text: str, **kwargs) -> None:
    """``--out DIR``; ``default_text`` says where the output goes without it."""
    parser.add_argument("--out", metavar="DIR", help=_with_default(HELP["--out"], default_text), **kwargs)


def add_integrator(parser, default_text: str) -> None:
    parser.add_argument("--integrator", choices=INTEGRATORS, default=None,
                        help=_with_default(HELP["--integrator"], default_text))


def add_base(parser, default_text: str) -> None:
    parser.add_argument("--base", choices=sorted(BASES), default=None,
                        help=_with_default(HELP["--base"], default_text))


def _integer_in(text: str, low: int, high: int, expected: str) -> int:
    """An option's integer from ``low`` to ``high``; else the one-line error naming what was ``expected``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"got {value}, expected {expected}")
    return value


#: The SCHED_FIFO priority `mms serve` asks for by default in realtime mode (and `mms demo` for its server): the
#: process with a deadline every period. The idle 10-minute soak (benchmarks/bench_soak.py) missed 2.64-2.75 % of
#: its deadlines under the normal scheduler, 0.13-0.99 % with the class (docs/headroom.md); as ros2_control's
#: controller manager does, the class is asked for by default and its absence said in one line.
SERVER_RT_PRIORITY = 10


def below_server_priority(priority: int) -> int:
    """The real-time priority of the driver, the emulated firmware and its physics plant: one below the model
    server's. At the server's own priority the driver's start-up (its first ~0.5 s) held the server off a core
    twice for 0.110 s, and FIFO does not preempt an equal priority: every idle demo missed 1.3-1.5 % of the
    server's deadlines, all in its first second (0.0 % with the driver one below, 2 runs). The stand-ins' longer
    slices likewise never hold a core the server's next deadline needs. 0 stays 0 (the normal scheduler)."""
    return max(priority - 1, 1) if priority else 0


def rt_priority_type(text: str) -> int:
    """``--rt-priority`` value: an integer from 0 (off) to 99."""
    from sim.processes import MAX_RT_PRIORITY

    return _integer_in(text, 0, MAX_RT_PRIORITY, f"an integer from 0 (off) to {MAX_RT_PRIORITY}")


def add_rt_priority(parser, default: int | None, default_text: str | None = None) -> None:
    """``--rt-priority N`` into ``args.rt_priority`` (0: the normal scheduler; ``default`` None: the command
    resolves it, described by ``default_text``); apply it with :func:`sim.processes.realtime_refusal` before the
    command opens its sockets."""
    parser.add_argument("--rt-priority", type=rt_priority_type, default=default, metavar="N",
                        help=HELP["--rt-priority"] + f" (default {default_text or default})")


def background_nice_type(text: str) -> int:
    """``--background-nice`` value: an integer from 0 (off) to 19."""
    return _integer_in(text, 0, 19, "an integer from 0 (off) to 19")


def add_background_nice(parser) -> None:
    """``--background-nice N`` into ``args.background_nice``; a launcher passes it to
    :meth:`hil.experiment.supervisor.Supervisor.start` for the processes that can wait."""
    parser.add_argument("--background-nice", type=background_nice_type, default=0, metavar="N",
                        help=HELP["--background-nice"] + " (default 0)")


def add_start(parser, *, idle_by_default: bool, deprecated: tuple[str, ...] = ()) -> None:
    """``--autostart`` / ``--idle`` into ``args.autostart`` (bool); ``deprecated``: this command's old
    spellings among ``--paused``, ``--wait`` (both: idle) and ``--autoactivate`` (autostart)."""
    start = parser.add_mutually_exclusive_group()
    start.add_argument("--autostart", dest="autostart", action="store_true", default=not idle_by_default,
                       help=HELP["--autostart"] + ("" if idle_by_default else " (default)"))
    start.add_argument("--idle", dest="autostart", action="store_false",
                       help=HELP["--idle"] + (" (default)" if idle_by_default else ""))
    for old in deprecated:
        _add_deprecated(parser, old, "autostart", nargs=0, const=DEPRECATED[old] == "--autostart")



#: Default of ``--poses-rate``, Hz: a 3-D view refreshes at 60 Hz at most, and each pose message of the flapper is
#: 3.7 kB of JSON (17 bodies): one per 1 kHz state would outweigh the states themselves in the file. Making one
#: took 90 us (load 2.9 on the 2-core test machine): 1 % of a core at 100 Hz
DEFAULT_POSES_RATE_HZ = 100.0


def finite_number(text: str, accepted, expected: str) -> float:
    """``text`` as a finite number for which ``accepted(value)`` holds, else one line naming ``expected``."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}") from None
    if not (math.isfinite(value) and accepted(value)):
        raise argparse.ArgumentTypeError(f"got {text!r}, expected {expected}")
    return value


def positive(text: str) -> float:
    """An argparse ``type``: a finite number > 0 (a one-line error otherwise)."""
    return finite_number(text, lambda value: value > 0.0, "a positive number")


def add_poses_rate(parser) -> None:
    """``--poses-rate HZ`` into ``args.poses_rate`` (hil/foxglove/scene.py: PoseStream)."""
    def rate(text: str) -> float:
        return finite_number(text, lambda value: value >= 0.0, "a finite rate in Hz >= 0")
    parser.add_argument("--poses-rate", type=rate, default=DEFAULT_POSES_RATE_HZ, metavar="HZ",
                        help=HELP["--poses-rate"] + f" (default {DEFAULT_POSES_RATE_HZ:g})")


#: Default of ``--max-backlog``, MiB: the recorder's own queue (three quarters of it) holds 63 s of the flapper
#: demo's stream (1 700 messages/s, 1.1 MiB/s of payload: 1.5 MiB/s counted with 256 B a message) for a recorder
#: behind a busy machine (its backlog reached 12 s at load 11, then it caught up); one held back further drops and
#: says so, instead of growing ZeroMQ's queue towards GiB
#: (docs/recording.md, "Memory")
DEFAULT_MAX_BACKLOG_MIB = 128.0

#: Default of ``mms record --flush-interval``, s: longest time between two chunk closes + fsync of the MCAP writer
#: (hil/recording/mcap_io.py; the crash-loss bound is this plus one loop turn)
DEFAULT_FLUSH_INTERVAL_S = 0.5


def add_max_backlog(parser) -> None:
    """``--max-backlog MIB`` into ``args.max_backlog`` (MiB, positive; hil/recording/recorder.py)."""
    def mebibytes(text: str) -> float:
        return finite_number(text, lambda value: value > 0.0, "a finite size in MiB > 0")
    parser.add_argument("--max-backlog", type=mebibytes, default=DEFAULT_MAX_BACKLOG_MIB, metavar="MIB",
                        help=HELP["--max-backlog"] + f" (default {DEFAULT_MAX_BACKLOG_MIB:g})")


#: Foxglove's default WebSocket port (the app's "Foxglove WebSocket" connection opens ws://localhost:8765)
DEFAULT_FOXGLOVE_PORT = 8765
#: PlotJuggler's ZMQ subscriber's default address (plotjuggler_plugins/DataStreamZMQ: tcp, localhost, port 9872)
DEFAULT_PLOTJUGGLER_ENDPOINT = "tcp://127.0.0.1:9872"


def port_type(text: str) -> int:
    """A TCP port: an integer from 0 (any free port) to 65535."""
    return _integer_in(text, 0, 65535, "a port from 0 to 65535")


def add_foxglove_port(parser) -> None:
    """``--foxglove [PORT]`` into ``args.foxglove`` (None: not served)."""
    parser.add_argument("--foxglove", type=port_type, nargs="?", const=DEFAULT_FOXGLOVE_PORT, default=None,
                        metavar="PORT", help=HELP["--foxglove"] + f" (PORT default {DEFAULT_FOXGLOVE_PORT})")


def add_plotjuggler(parser) -> None:
    """``--plotjuggler [ENDPOINT]`` into ``args.plotjuggler`` (None: not served)."""
    parser.add_argument("--plotjuggler", nargs="?", const=DEFAULT_PLOTJUGGLER_ENDPOINT, default=None,
                        metavar="ENDPOINT", help=HELP["--plotjuggler"] + f" (default {DEFAULT_PLOTJUGGLER_ENDPOINT})")


def add_scheduler(parser) -> None:
    """``--scheduler`` (local, serial or tcp://HOST:PORT) and ``--workers N`` into ``args.scheduler`` and
    ``args.workers``; open them with :func:`sim.studies.open_evaluator`."""
    parser.add_argument("--scheduler", metavar="WHERE", default="local",
                        help=_with_default(HELP["--scheduler"], "local"))
    parser.add_argument("--workers", metavar="N", type=int, default=None,
                        help=_with_default(HELP["--workers"], "one per core"))
