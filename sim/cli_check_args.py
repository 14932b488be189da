"""``mms check``'s arguments (sim/cli_check.py runs it), read before numba and the engines are imported."""
from __future__ import annotations

import argparse

from sim.cli_options import add_robot

#: Largest accepted relative difference between the two engines (both are exact up to rounding: 1e-13 typical).
DEFAULT_TOLERANCE = 1e-9
#: Time step (s) and span of the short run whose states are checked.
RUN_DT, RUN_SPAN_S = 1e-4, 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser)
    parser.add_argument("--random-states", type=int, default=20, metavar="N",
                        help="random states checked, each with three actuation splits (default 20)")
    parser.add_argument("--run-states", type=int, default=10, metavar="N",
                        help=f"states of a {RUN_SPAN_S:g} s run of the robot checked (default 10)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random states (default 0)")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest accepted relative difference (default {DEFAULT_TOLERANCE:g})")
