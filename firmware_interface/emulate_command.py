"""``mms emulate``: the command (its options and which device runs), apart from the devices themselves, so that the
device modules do not import one another: the rig microcontroller in Python (firmware_interface/emulator.py), the
same microcontroller's C firmware behind it (firmware_interface/c_firmware.py) and the Dynamixel bus
(firmware_interface/dynamixel_emulator.py)."""
from __future__ import annotations

import argparse
import dataclasses
import signal
from pathlib import Path

from firmware_interface import dynamixel_emulator
from firmware_interface.c_firmware import FirmwareEmulator, host_program
from firmware_interface.emulator import Emulator, Faults
from firmware_interface.pty_device import add_applied_log_argument, open_applied_log, serve
from firmware_interface.rigs.dynamixel import rig_kind
from firmware_interface.rigs.mcu import PLANT_CLOCKS, load_rig
from sim.cli_options import SERVER_RT_PRIORITY, add_rig, add_rt_priority, below_server_priority
from sim.processes import freeze_startup_heap, set_realtime_priority

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


#: options of `mms emulate` (their argparse names) that only one kind of rig takes, and what the other has instead
SERIAL_ONLY = ("plant", "plant_clock", "firmware", "burst_rate", "burst_bytes", "rx_byte_error_rate", "disconnect_after")
DYNAMIXEL_ONLY = ("missing_ids", "hw_error")
NOT_FOR = {
    "dynamixel": (SERIAL_ONLY, "not an option of a Dynamixel bus (no plant, no serial-line noise; its faults: "
                               "--drop-rate, --corrupt-rate, --missing-ids, --hw-error)"),
    "mcu": (DYNAMIXEL_ONLY, "a Dynamixel bus fault: this rig is a microcontroller (its faults: --drop-rate, "
                            "--corrupt-rate, --burst-rate, --rx-byte-error-rate, --disconnect-after)"),
}


def refuse_foreign_options(args: argparse.Namespace, kind: str) -> None:
    """One-line ConfigError for an option given (not at its default) that the rig's ``kind`` does not take."""
    from sim.config import ConfigError

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    defaults = vars(parser.parse_args(["--rig", str(args.rig)]))
    names, why = NOT_FOR[kind]
    for name in names:
        if getattr(args, name) != defaults[name]:
            raise ConfigError(args.rig, "--" + name.replace("_", "-"), why)


def _check_rate(name: str, value: float) -> None:
    if not 0.0 <= value <= 1.0:
        from sim.config import ConfigError
        raise ConfigError(None, f"--{name}", f"got {value}, expected a probability from 0 to 1")


def run(args: argparse.Namespace) -> int:
    kind = rig_kind(args.rig)
    refuse_foreign_options(args, "dynamixel" if kind == "dynamixel" else "mcu")
    # the firmware's loop, which stands in for a device a busy host never delays (its plant sets its own)
    set_realtime_priority(args.rt_priority, "mms emulate")
    if kind == "dynamixel":
        return dynamixel_emulator.run(args)
    for name in ("drop_rate", "corrupt_rate", "burst_rate", "rx_byte_error_rate"):
        _check_rate(name.replace("_", "-"), getattr(args, name))
    rig = load_rig(args.rig)
    if args.plant_clock is not None and rig.emulator.physics is not None:
        rig = dataclasses.replace(rig, emulator=dataclasses.replace(
            rig.emulator, physics=dataclasses.replace(rig.emulator.physics, clock=args.plant_clock)))
    faults = Faults(drop_rate=args.drop_rate, corrupt_rate=args.corrupt_rate, burst_rate=args.burst_rate,
                    burst_bytes=max(1, args.burst_bytes), rx_byte_error_rate=args.rx_byte_error_rate,
                    disconnect_after_s=args.disconnect_after)
    options = dict(plant_kind=args.plant, baud=args.baud, faults=faults, seed=args.seed,
                   rt_priority=args.rt_priority, applied_log=open_applied_log(args.applied_log))
    if args.firmware is None:
        emulator = Emulator(rig, **options)
    else:
        program = host_program(None if args.firmware == BUILD_FIRMWARE else Path(args.firmware))
        emulator = FirmwareEmulator(rig, program, **options)
    device = "python device" if args.firmware is None else "C firmware"
    banner = (f"rig {rig.name!r} ({device}) on {emulator.slave_path} at {emulator.baud} baud, {emulator.plant.kind} plant, "
              f"telemetry {rig.telemetry_hz} Hz")
    freeze_startup_heap()
    return serve(emulator, "mms emulate", banner, duration_s=args.duration, stats_path=args.stats,
                 signals={signal.SIGUSR1: emulator.press_button, signal.SIGUSR2: emulator.release_button})
