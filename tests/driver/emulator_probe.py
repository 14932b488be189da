"""`mms emulate` with one addition for the tests and the benchmark: a log of every setpoint frame the emulated
firmware *applied* (accepted and made its servo command), one JSON line each: {"seq": frame seq, "raw": [...],
"ns": host wall clock when applied}.

It runs the real emulator (firmware_interface.emulator: its argument parser, its Device, its pty transport)
and only wraps ``Device._setpoints`` to record the frames that changed the command. Usage: the arguments of
`mms emulate` plus ``--applied-log FILE``; the first stdout line is the pty path, as with `mms emulate`.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from firmware_interface import emulator


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    emulator.add_arguments(parser)
    parser.add_argument("--applied-log", required=True, help="JSON-lines file of the applied setpoint frames")
    args = parser.parse_args(argv)
    log = open(args.applied_log, "w", buffering=1)
    original = emulator.Device._setpoints

    def logged(self, message, seq, now):
        before = self.command
        reply = original(self, message, seq, now)
        if self.command is not before:
            log.write(json.dumps({"seq": seq, "raw": list(message.raw), "ns": time.time_ns()}) + "\n")
        return reply

    emulator.Device._setpoints = logged
    try:
        return emulator.run(args)
    finally:
        log.close()


if __name__ == "__main__":
    sys.exit(main())
