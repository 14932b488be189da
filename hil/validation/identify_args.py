"""``mms identify``'s arguments (hil/validation/identify.py runs it), read before numpy, scipy and MCAP are
imported, so that ``--help`` and a bad argument answer at once; with the defaults they print."""
from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli_options import RECORDED, add_out, add_quiet, add_rig, add_robot, add_scheduler, recorded_or_robot

#: the pseudo-parameter that shifts the measured servo motion in time, s (module docstring, step 2)
SERVO_LAG = "servo.lag_s"
#: the lag's default bounds, s: beyond a stroke's or a tail beat's quarter period a fit would trade lag for phase
LAG_BOUND_S = 0.05
#: a config parameter's default bounds: its start value divided and multiplied by this (a model known within a
#: factor of ten)
BOUND_FACTOR = 10.0
#: the fit's default low-pass, in harmonics of the drive's dominant frequency: a stroke's response keeps its first
#: few; the demo's wing vibrates at ~10 harmonics (50 Hz at a 5 Hz stroke), attenuated 1e-3 at 4
FIT_HARMONICS = 4.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN.mcap", type=Path, help="the recorded run")
    parser.add_argument("--params", required=True, metavar="NAME[=LOWER:UPPER],...",
                        help=f"parameters to fit: numeric keys of the robot config (table.key, e.g. "
                             f"stiffness.bend_root, stiffness.damping, aero.rho_air) or {SERVO_LAG} (the measured "
                             f"servo motion's delay, s); bounds default to the start value /{BOUND_FACTOR:g} and "
                             f"x{BOUND_FACTOR:g} (lag: +-{LAG_BOUND_S:g} s)")
    add_robot(parser, option="--robot", type=recorded_or_robot, default=RECORDED,
              extra=", or 'recorded' for the one in the recording: the model to fit (default: recorded)")
    add_rig(parser, extra=" (default: the rig stored in the recording)")
    parser.add_argument("--channels", default=None, metavar="NAME,...",
                        help="measured channels to fit (default: the rig's strain gauges)")
    parser.add_argument("--warmup", type=float, default=None, metavar="S",
                        help="start-up transient of the re-simulation dropped, s (default: that of mms validate --sim)")
    parser.add_argument("--fit-seconds", type=float, default=None, metavar="S",
                        help="fit only the first S s of the healthy data after the warm-up (a quicker fit)")
    parser.add_argument("--cutoff", type=float, default=None, metavar="HZ",
                        help=f"low-pass of the fitted channels, measured and simulated (default: {FIT_HARMONICS:g} "
                             "times the servo motion's dominant frequency)")
    parser.add_argument("--stride", type=int, default=1, metavar="N",
                        help="fit every N-th telemetry sample (default 1)")
    add_out(parser, "RUN.identify next to the recording", type=Path)
    add_scheduler(parser)
    add_quiet(parser)
