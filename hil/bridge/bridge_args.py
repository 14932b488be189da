"""``mms bridge``'s arguments (hil/bridge/bridge.py runs it), read before ZeroMQ and numpy are imported."""
from __future__ import annotations

from sim.cli_options import add_foxglove_port, add_network, add_plotjuggler, add_poses_rate, add_quiet, add_robot


def add_arguments(parser) -> None:
    add_network(parser)
    add_foxglove_port(parser)
    add_plotjuggler(parser)
    add_robot(parser, option="--robot", extra=": its poses and shapes are served to Foxglove (foxglove/poses, "
                                               "foxglove/scene)")
    add_poses_rate(parser)
    add_quiet(parser)

