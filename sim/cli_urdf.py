"""``mms urdf ROBOT``: the URDF of a robot the builders generate (flapper, RayBot, fish, URDF-based chains).

The rigid tree as built (fixed links merged into their bodies) is written by :func:`sim.urdf.model_to_urdf`:
exact inertias, joint placements and axes, and a default shape per body (:mod:`sim.shapes`) as its ``<visual>``.
Pinocchio and :func:`sim.load_urdf` read it back with the same rigid-body dynamics (tests/sim_core/
test_urdf_export.py); the base mode, gravity, joint laws and force models are not URDF and are named in a comment.
"""
from __future__ import annotations

import sys
from pathlib import Path

from sim.cli_options import add_out, add_robot

URDF_SUFFIX = ".urdf"


def add_arguments(parser) -> None:
    add_robot(parser)
    add_out(parser, f"print the URDF; with --out, the file DIR/ROBOT{URDF_SUFFIX}")


def run(args) -> int:
    from sim.config import load_toml
    from sim.robots import build_rigid_robot
    from sim.urdf import model_to_urdf

    text = model_to_urdf(build_rigid_robot(load_toml(args.config), args.config,
                                           "have no URDF form (URDF describes rigid links): write the rigid variant "
                                           "of the robot"))
    if not args.out:
        sys.stdout.write(text)
        return 0
    path = Path(args.out) / (Path(args.config).stem + URDF_SUFFIX)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0
