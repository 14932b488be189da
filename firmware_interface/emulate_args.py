"""``mms emulate``'s arguments (firmware_interface/emulate_command.py runs it), read before the device modules and
numpy are imported, so that ``--help`` and a bad argument answer at once."""
from __future__ import annotations

import argparse

from firmware_interface.pty_device import add_applied_log_argument
from firmware_interface.rigs.mcu import PLANT_CLOCKS
from sim.cli_options import SERVER_RT_PRIORITY, add_rig, add_rt_priority, below_server_priority

#: ``--firmware`` given without a program: build the C host port (firmware_interface.c_firmware.build)
BUILD_FIRMWARE = "build"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rig(parser, required=True)
    parser.add_argument("--baud", type=int, default=None, help="override the rig's baud rate (bit/s)")
    parser.add_argument("--plant", choices=("kinematic", "physics"), default=None,
                        help="override the rig's [emulator] plant")
    parser.add_argument("--plant-clock", choices=PLANT_CLOCKS, default=None,
                        help="override the physics plant's clock ([emulator.physics] clock): wall (slices of the wall "
                             "clock) or samples (one step per telemetry sample, read at the next: what the closed "
                             "loop's model twin can follow, docs/closed-loop.md)")
    parser.add_argument("--seed", type=int, default=None, help="random seed for noise and faults "
                        "(default: the rig's [emulator] seed)")
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds "
                        "(default: run until SIGINT/SIGTERM)")
    faults = parser.add_argument_group("fault injection (device -> host frames unless noted)")
    faults.add_argument("--drop-rate", type=float, default=0.0, help="probability a frame is not sent")
    faults.add_argument("--corrupt-rate", type=float, default=0.0, help="probability a frame gets one bit flipped")
    faults.add_argument("--burst-rate", type=float, default=0.0,
                        help="probability a burst of random bytes (line noise) precedes a frame")
    faults.add_argument("--burst-bytes", type=int, default=16, help="length of a noise burst, bytes (default 16)")
    faults.add_argument("--rx-byte-error-rate", type=float, default=0.0,
                        help="host -> device: probability a received byte has one bit flipped")
    faults.add_argument("--disconnect-after", type=float, default=None, metavar="S",
                        help="close the port and exit after S seconds, as an unplugged USB device")
    parser.add_argument("--stats", default=None, metavar="FILE",
                        help="also write the statistics as JSON to FILE, replaced whole every second and at exit")
    add_applied_log_argument(parser)
    parser.add_argument("--firmware", nargs="?", const=BUILD_FIRMWARE, default=None, metavar="PROGRAM",
                        help="run the rig's C firmware (firmware_interface/firmware/rig, docs/firmware.md) instead "
                        "of the Python device logic: PROGRAM is a built host port (rig_host); without it, gcc "
                        "builds one into ~/.cache/mms-hil")
    add_rt_priority(parser, below_server_priority(SERVER_RT_PRIORITY))
    dxl = parser.add_argument_group('Dynamixel rigs ([rig] kind = "dynamixel") only')
    dxl.add_argument("--missing-ids", default="", metavar="ID,ID",
                     help="servo IDs that never answer (unplugged), comma-separated")
    dxl.add_argument("--hw-error", action="append", default=[], metavar="T:ID:BITS",
                     help="at T s latch Hardware Error Status BITS on servo ID (e.g. 1.0:2:32 = overload); repeatable")
