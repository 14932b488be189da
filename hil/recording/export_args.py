"""``mms export``'s arguments (hil/recording/export.py runs it), read before numpy and MCAP are imported."""
from __future__ import annotations

from sim.cli_options import add_out, add_poses_rate, add_quiet, add_robot

FORMATS = ("mat", "h5", "csv", "foxglove")


def add_arguments(parser) -> None:
    parser.add_argument("run", metavar="RUN.mcap", help="recording made by mms record")
    parser.add_argument("--to", choices=FORMATS, required=True, help="output format")
    add_out(parser, "RUN.export/ beside the recording")
    parser.add_argument("--topics", nargs="+", metavar="TOPIC", help="only these topics (default: all)")
    add_robot(parser, option="--robot", extra=": --to foxglove poses this robot (default: the recording's own)")
    add_poses_rate(parser)
    add_quiet(parser)

