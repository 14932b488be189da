"""``mms record``'s arguments (hil/recording/recorder.py runs it), read before ZeroMQ, numpy and MCAP are imported,
so that ``--help`` and a bad argument answer at once; with the defaults they print."""
from __future__ import annotations

from pathlib import Path

from sim.cli_options import (DEFAULT_FLUSH_INTERVAL_S, add_max_backlog, add_network, add_poses_rate, add_quiet,
                             add_rig, add_robot, add_start)

#: ZeroMQ's receive queue (the SUB socket's high-water mark, messages) holds the backlog bound over this many bytes
#: per message: a 2.1 kB state costs 4.2 kB queued there too, so that queue is bounded about as the recorder's own.
#: It fills only while the recorder takes nothing off the socket (not scheduled, or stopped): its I/O thread goes
#: on receiving
HWM_MESSAGE_BYTES = 4096


def add_arguments(parser) -> None:
    parser.add_argument("--out", metavar="FILE.mcap", help="MCAP file to write (default runs/YYYYmmdd-HHMMSS.mcap); with --recover, "
                                      "the rebuilt file (default BROKEN.recovered.mcap)")
    add_network(parser)
    add_robot(parser, option="--robot", extra=", stored in the recording")
    add_rig(parser, extra=", stored in the recording")
    add_start(parser, idle_by_default=False, deprecated=("--wait",))
    parser.add_argument("--duration", type=float, metavar="S",
                        help="stop and exit S seconds after the recording started (default: until Ctrl-C)")
    parser.add_argument("--run-dir", type=Path, metavar="DIR",
                        help="the folder the control socket's start requests write into (their paths are taken "
                             "inside it and may not leave it); default: the folder of --out, else runs/")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    add_max_backlog(parser)
    parser.add_argument("--hwm", type=int, default=None, metavar="N",
                        help="ZeroMQ's receive high-water mark, messages (default: --max-backlog over "
                             f"{HWM_MESSAGE_BYTES} B)")
    parser.add_argument("--flush-interval", type=float, default=DEFAULT_FLUSH_INTERVAL_S, metavar="S",
                        help="close a chunk and fsync at least this often, s: the crash-loss bound "
                             f"(default {DEFAULT_FLUSH_INTERVAL_S})")
    add_poses_rate(parser)
    add_quiet(parser)
    parser.add_argument("--recover", metavar="BROKEN.mcap",
                        help="rebuild a valid file from the complete records of a truncated recording, then exit")

