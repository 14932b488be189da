"""``mms demo``'s arguments (hil/experiment/demo.py runs it), read before ZeroMQ, numpy and MCAP are imported, so
that ``--help`` and a bad argument answer at once."""
from __future__ import annotations

import argparse
from pathlib import Path

from sim.cli_options import SERVER_RT_PRIORITY, add_background_nice, add_out, add_rig, add_rt_priority, config_type

#: the demo's set-ups (hil/experiment/demo.py: RIGS) -> the shipped rig each runs on
SETUP_RIGS = {"flapper": "flapper", "flapper-dynamixel": "flapper-dynamixel", "raybot": "raybot",
              "snake": "snake-dynamixel"}


def demo_rig_path(value: str) -> Path:
    """``--rig``: a demo set-up's name (:data:`SETUP_RIGS`), else a shipped rig name or a rig file."""
    return config_type("rig")(SETUP_RIGS.get(value, value))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rig(parser, default="flapper", type=demo_rig_path,
            extra=f"; the demo runs its set-ups: {', '.join(SETUP_RIGS)} (snake: the snake-dynamixel rig)")
    parser.add_argument("--duration", type=float, default=20.0, help="length of the live run, s (default: 20)")
    add_out(parser, "runs/demo-<time> in the current folder", type=Path)
    parser.add_argument("--gui", action="store_true", help="also open the live dashboard")
    add_rt_priority(parser, default=SERVER_RT_PRIORITY)
    add_background_nice(parser)
    parser.add_argument("--closed-loop", action="store_true",
                        help="close the loop: the simulator runs the robot in free flight with the rig's measured "
                             "wrench fed back (mms serve --feedback, docs/closed-loop.md) and the thorax's motion is "
                             "compared with the open loop's and the truth's, with a verdict per component: follows the truth, "
                             "does not, or not resolvable by the rig's sensor (signal vs noise; instead of the "
                             "validation); a run the loop's guard held while the rig ran, or whose loop never closed, "
                             "says so and exits 3 (INVALID)")
    parser.add_argument("--no-replay", action="store_true",
                        help="skip the second validation against the model driven by the measured servo motion "
                             "(mms validate --sim recorded)")
