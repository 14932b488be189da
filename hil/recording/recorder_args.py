"""``mms record``'s arguments (hil/recording/recorder.py runs it), read before ZeroMQ, numpy and MCAP are imported,
so that ``--help`` and a bad argument answer at once; with the defaults they print."""
from __future__ import annotations

from pathlib import Path

from sim.cli_options import (DEFAULT_FLUSH_INTERVAL_S, add_max_backlog, add_network, add_poses_rate, add_quiet,
                             add_rig, add_robot, add_start)

#: what a message waiting in ZeroMQ's receive pipe costs, bytes, counted against ``--max-backlog``: ZeroMQ reads
#: into a receive buffer of 8 KiB with a reference counter per possible message beside it (libzmq's
#: shared_message_memory_allocator), and a message is kept in the buffer it was read into; in the live loop each
#: read takes one message, so that each has a buffer of its own (the pages it touched). Measured
#: (benchmarks/bench_recorder_memory.py --queued-cost BYTES --rate 2000): 10 390 B for a 2.1 kB state, 8 433 B for a
#: 136 B hw/status (3 935 and 782 B in a burst, several messages to a buffer), 12 508 B for 6 kB at 1 kHz; the
#: states', rounded up to 512 B: a larger message is counted short by its size beyond 2.1 kB
HWM_MESSAGE_BYTES = 10752
#: the share of ``--max-backlog`` that ZeroMQ's receive pipes get, divided among the publishers (one pipe each,
#: each with its own high-water mark); the recorder's own queue gets the rest. The pipes fill only while the
#: recorder takes nothing off the socket (not scheduled, or stopped: its I/O thread goes on receiving); a full pipe
#: stops reading its connection, and the kernel's socket buffers and the publisher's queue (the server's: 10 000
#: messages) take what follows, then drop it (seq gaps). The own queue holds the backlog of a recorder that runs
#: but writes behind its stream, and counts its drops: it gets most. A quarter of the default 128 MiB is 1 560
#: messages per publisher, about a second of the flapper demo's stream (1 700 messages/s in all) with the recorder
#: not scheduled at all
PIPES_SHARE = 0.25


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
                        help="ZeroMQ's receive high-water mark of each publisher's pipe, messages, counted "
                             f"against --max-backlog at {HWM_MESSAGE_BYTES} B each (default: {PIPES_SHARE:g} of "
                             "--max-backlog shared among the publishers; the recorder's own queue gets the rest)")
    parser.add_argument("--flush-interval", type=float, default=DEFAULT_FLUSH_INTERVAL_S, metavar="S",
                        help="close a chunk and fsync at least this often, s: the crash-loss bound "
                             f"(default {DEFAULT_FLUSH_INTERVAL_S})")
    add_poses_rate(parser)
    add_quiet(parser)
    parser.add_argument("--recover", metavar="BROKEN.mcap",
                        help="rebuild a valid file from the complete records of a truncated recording, then exit")

