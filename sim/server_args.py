"""``mms serve``'s arguments (sim/server.py runs it; hil/feedback/serve.py adds ``--feedback``): read, and their
values checked, before numba, the robots and ZeroMQ are imported, so that ``--help`` and a bad value answer at once."""
from __future__ import annotations

import argparse

from sim.cli_options import (SERVER_RT_PRIORITY, add_integrator, add_network, add_rig, add_robot, add_rt_priority,
                             add_start, finite_number, positive)
from sim.processes import MAX_SLICE_S, MIN_SLICE_S, SHORT_SLICE_S

MODES = ("realtime", "fast", "lockstep")
#: sim/state rate of a robot whose file names none, Hz
DEFAULT_RATE_HZ = 1000.0
#: realtime: how far ahead of their due time states are integrated by default, s: five periods at 1 kHz absorb an
#: integration spike or a preemption of up to ~5 ms (the flapper's costs ~0.17 ms per period on average)
DEFAULT_LOOKAHEAD_S = 0.005


def slice_type(text: str) -> float:
    """``--slice`` value, s: 0 (the kernel's default) or a slice Linux accepts."""
    return finite_number(text, lambda value: value == 0 or MIN_SLICE_S <= value <= MAX_SLICE_S,
                         f"0 or {MIN_SLICE_S:g} to {MAX_SLICE_S:g} s")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_robot(parser)
    add_network(parser)
    parser.add_argument("--pub", metavar="ENDPOINT", help="override the sim PUB endpoint of --network")
    parser.add_argument("--control", metavar="ENDPOINT", help="override the sim control endpoint of --network")
    parser.add_argument("--mode", choices=MODES, default="realtime",
                        help="realtime: paced to the wall clock; fast: as fast as possible; lockstep: one "
                             "publish period per step request (default: %(default)s)")
    parser.add_argument("--rate", type=positive, default=None, metavar="HZ",
                        help="sim/state publish rate, Hz; each period integrates the dt steps that fit in it "
                             f"(default: a cosserat robot file's [live] rate_hz, else {DEFAULT_RATE_HZ:g})")
    parser.add_argument("--dt", type=positive, default=None, metavar="S",
                        help="integration step, s (default: a cosserat robot file's [live] dt, else [simulation] "
                             "dt of the robot config, else the simulator's)")
    add_integrator(parser, "the robot file's [simulation] integrator, else rk4")
    add_start(parser, idle_by_default=False, deprecated=("--paused",))
    add_rig(parser, extra="; checked before serving: each of its [[joints]] must be a joint of the robot, and "
                          "for a cosserat robot every segment joint must drive a servo")
    add_rt_priority(parser, None, f"{SERVER_RT_PRIORITY} in realtime mode, else 0")
    parser.add_argument("--stall-timeout", type=positive, default=2.0, metavar="S",
                        help="lockstep: report a stall after this long without a step request, s "
                             "(default: %(default)g)")
    parser.add_argument("--max-lag", type=positive, default=0.5, metavar="S",
                        help="realtime: re-anchor the schedule when this far behind the wall clock, and leave SCHED_FIFO, "
                             "s (default: %(default)g)")
    parser.add_argument("--lookahead", type=positive, default=DEFAULT_LOOKAHEAD_S, metavar="S",
                        help="realtime: integrate states up to this far ahead of their due time, s, rounded to "
                             "whole publish periods, at least one (a slow period or a short preemption is then "
                             "absorbed); with --feedback always one period (default: %(default)g)")
    parser.add_argument("--slice", type=slice_type, default=SHORT_SLICE_S, metavar="S",
                        help="the Linux fair scheduler's slice asked for (kernel 6.12 or later; no permission "
                             "needed), s, 1e-4 to 0.1: a short one lets the loop preempt busy processes as soon as "
                             "a state is due; 0: the kernel's default; ignored under --rt-priority "
                             "(default: %(default)g)")
