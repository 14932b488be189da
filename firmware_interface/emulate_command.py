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
from firmware_interface.emulate_args import BUILD_FIRMWARE, add_arguments
from firmware_interface.pty_device import open_applied_log, serve
from firmware_interface.rigs.dynamixel import rig_kind
from firmware_interface.rigs.mcu import load_rig
from sim.processes import freeze_startup_heap, set_realtime_priority

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
