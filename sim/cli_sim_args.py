"""``mms sim``'s arguments (sim/cli_sim.py runs it): read before numba and the robots are imported, so that
``--help`` and a bad argument answer at once."""
from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli_options import add_base, add_integrator, add_no_plots, add_out, add_quiet, add_robot


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser)
    span = parser.add_mutually_exclusive_group()
    span.add_argument("--periods", type=float, default=None,
                      help="simulated time in actuation periods (default: the config's [simulation] periods, or 6)")
    span.add_argument("--duration", type=float, default=None, help="simulated time in s")
    add_base(parser, "the robot file's [robot] base")
    parser.add_argument("--dt", type=float, default=None,
                        help="time step in s (output interval for rk45; default: config, else 1e-4)")
    add_integrator(parser, "the robot file's [simulation] integrator, else rk4")
    add_out(parser, "runs/<robot name>/", type=Path)
    parser.add_argument("--summary", type=Path, default=None, help="write a JSON summary of the run here")
    parser.add_argument("--record-every", type=int, default=None, metavar="N",
                        help="record the outputs every N steps (default: the robot file's [simulation] "
                             "record_every, else 1: every step; recording costs about one extra dynamics "
                             "evaluation per record on the Python path)")
    add_no_plots(parser)
    parser.add_argument("--periodic", action="store_true",
                        help="start from the periodic orbit: find the initial state whose motion repeats after one "
                             "actuation period (up to a translation and a turn about the vertical; Newton shooting, "
                             "docs/periodic.md), then simulate from it; --summary adds the orbit's residual, Floquet "
                             "multipliers and initial state")
    parser.add_argument("--segments", type=int, default=1, metavar="K",
                        help="with --periodic: multiple shooting, the period cut into K parts joined by continuity "
                             "conditions (default 1: single shooting); for orbits whose multipliers are too large "
                             "for one period map (docs/periodic.md). dt is lowered so that each part is a whole "
                             "number of steps")
    parser.add_argument("--trim", action="store_true",
                        help="with --periodic: also adjust the robot's trim parameters (flapper: stroke.offset_deg "
                             "and stroke.amplitude_deg) so that the orbit has no net translation: a hover")
    parser.add_argument("--tailbeat-frequency", type=float, default=None,
                        help="robot-specific (RayBot): tail-beat frequency, Hz")
    parser.add_argument("--tailbeat-amplitude", type=float, default=None,
                        help="robot-specific (RayBot): tail-beat amplitude, deg")
    add_quiet(parser)

