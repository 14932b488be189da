"""``python -m <module>`` for a module that is also an ``mms`` sub-command (``add_arguments(parser)`` and
``run(args) -> int``, as hil/cli.py expects): the same options, and a :class:`sim.config.ConfigError` printed as
one line without a traceback (exit code 2)."""
from __future__ import annotations

import argparse
import sys
from typing import Callable

from sim.cli_options import make_parser
from sim.config import ConfigError


def module_main(prog: str, description: str, add_arguments: Callable[[argparse.ArgumentParser], None],
                run: Callable[[argparse.Namespace], int], name: str, argv: list[str] | None = None) -> int:
    """Parse ``argv`` (default: the process's) with ``add_arguments`` and ``run`` them; ``name`` prefixes the
    one-line error (``name: error: file: key: message``). Returns the exit code."""
    parser = make_parser(prog, description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return run(args)
    except ConfigError as exc:
        print(f"{name}: error: {exc}", file=sys.stderr)
        return 2
