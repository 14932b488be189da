"""``mms serve``: sim/server.py's command, with ``--feedback RIG`` (the closed loop of docs/closed-loop.md).

The server lives in ``sim`` and imports nothing of the rig's packages; the loop that reads a rig file and its
telemetry lives here and is handed to it (sim.server.run's ``feedback_factory``).
"""
from __future__ import annotations

import argparse

from sim import server_args
from sim.cli_options import add_feedback


def add_arguments(parser: argparse.ArgumentParser) -> None:
    server_args.add_arguments(parser)
    add_feedback(parser)


def run(args: argparse.Namespace) -> int:
    from sim import server

    if args.feedback is None:
        return server.run(args)
    from hil.feedback.loop import FeedbackLoop

    return server.run(args, feedback_factory=lambda log: FeedbackLoop(args.feedback, args.config, log,
                                                                           lockstep=args.mode == "lockstep"))
