"""The link for a rig file: :func:`connect_rig` reads the rig (any kind, firmware_interface/rigs/) and builds the
link that speaks to its device(s), the emulator child that stands in for the device with ``--emulate``, and the
host's view of the rig the driver maps setpoints and telemetry with.

* ``kind = "mcu"``: one microcontroller, :class:`hil.drive.links.serial.SerialLink`;
* ``kind = "dynamixel"``: the bus, :class:`hil.drive.links.dynamixel.DynamixelLink`; with a ``[microcontroller]``
  (the sensors on a second device), :class:`hil.drive.links.composite.CompositeLink` over both.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from firmware_interface.rigs.dynamixel import rig_kind
from firmware_interface.rigs.host import load_driver_rig, two_device_rig
from firmware_interface.rigs.mcu import Rig, load_rig
from hil.drive.emulator_child import EmulatorChild, emulate_argv
from hil.drive.links.base import Link
from hil.drive.links.composite import CompositeLink
from hil.drive.links.dynamixel import DynamixelLink
from hil.drive.links.serial import SerialLink
from hil.drive.options import DeviceOptions
from sim.config import ConfigError

#: a port name with this in it is a pyserial URL (e.g. rfc2217://host:port), not a path that must exist
URL_MARK = "://"


@dataclass(frozen=True)
class Connection:
    """What the driver is given for a rig: its view of the rig, the link, and where the device is."""
    rig: Rig                                # the host's view of the rig (firmware_interface.rigs.host)
    link: Link
    port: str | None                        # the device's port; None with an emulator (its pty, once it runs)
    emulator: EmulatorChild | None          # the device's emulator, started by the driver (--emulate)


def connect_rig(rig_path: str | Path, device: DeviceOptions) -> Connection:
    """The :class:`Connection` for the rig file ``rig_path``; one-line ConfigError for options the rig does not
    take, and for a port with no device behind it (``no device at PORT: use --emulate or --port``)."""
    sensor_option = "--sensor-port" if device.sensor_port else "--sensor-emulator-args"
    has_sensor_options = bool(device.sensor_port or device.sensor_emulator_args)
    ports = {}                              # option naming the port -> port the link will open
    if rig_kind(rig_path) != "dynamixel":
        rig = load_rig(rig_path)
        if has_sensor_options:
            raise ConfigError(rig_path, sensor_option,
                              "this rig is one serial device (only a Dynamixel rig with a [microcontroller] has two)")
        link: Link = SerialLink(rig)
    else:
        dxl_rig, bus_rig = load_driver_rig(rig_path)
        if dxl_rig.microcontroller is None:
            if has_sensor_options:
                raise ConfigError(None, sensor_option,
                                  f"the rig {dxl_rig.path} has no [microcontroller] (no second device)")
            rig, link = bus_rig, DynamixelLink(dxl_rig, bus_rig)
        else:
            sensor_rig = load_rig(dxl_rig.microcontroller)
            sensor_port = device.sensor_port or dxl_rig.microcontroller_port or sensor_rig.port
            sensor_emulator = (EmulatorChild(emulate_argv(sensor_rig.path,
                                                          device.emulator_argv(device.sensor_emulator_args)))
                               if device.emulate else None)
            rig = two_device_rig(bus_rig, sensor_rig)
            link = CompositeLink(dxl_rig, bus_rig, sensor_rig, servo_channels=dxl_rig.microcontroller_servo_channels,
                                 sensor_port=sensor_port, sensor_emulator=sensor_emulator)
            ports["--sensor-port"] = sensor_port
    if device.emulate:
        emulator = EmulatorChild(emulate_argv(rig.path, device.emulator_argv(device.emulator_args)))
        return Connection(rig, link, None, emulator)
    port = device.port or rig.port
    ports = {"--port": port, **ports}
    for option, name in ports.items():
        if URL_MARK not in name and not Path(name).exists():
            raise ConfigError(None, None, f"no device at {name}: use --emulate or {option}")
    return Connection(rig, link, port, None)
