"""The host's view of a rig file, whatever its kind: one :class:`firmware_interface.rigs.mcu.Rig` with the servo channels
and joint map the driver commands, the sensor channels it reads, and the emulator's truth behind them.

* ``kind = "mcu"`` (docs/rigs.md): the rig file as it is (:func:`firmware_interface.rigs.mcu.load_rig`);
* ``kind = "dynamixel"`` (docs/dynamixel.md): the bus servos (:func:`driver_rig`, raw unit
  goal ticks); with a ``[microcontroller]``, its strain and load channels, telemetry rate and emulator too
  (:func:`two_device_rig`).

The driver, the recorder (which stores both files of a two-device rig), the validator and the dashboard (which pair
measured channels with simulated ones through :func:`channel_maps`) use it, so all agree on what a rig's channels are.
"""
from __future__ import annotations

import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import tomli_w

from sim.config import ConfigError, load_toml

from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import TICKS_PER_RAD, DxlRig, load_dxl_rig, rig_kind
from firmware_interface.rigs.mcu import EmulatorConfig, Rig, ServoChannel, load_rig


#: Telemetry rate while no setpoints flow (the driver's heartbeat clock drives the reads), Hz.
IDLE_TELEMETRY_HZ = 50.0


def load_driver_rig(path) -> tuple[DxlRig, Rig]:
    """The Dynamixel rig file and the driver's view of it."""
    dxl_rig = load_dxl_rig(path)
    return dxl_rig, driver_rig(dxl_rig)


def limit_ticks(servo) -> tuple[int, int]:
    a, b = servo.to_ticks(servo.min_rad), servo.to_ticks(servo.max_rad)
    return min(a, b), max(a, b)


def driver_rig(r: DxlRig) -> Rig:
    """A :class:`Rig` for the driver: one ``"ticks"`` channel per servo (``raw = center + direction * 651.9 *
    angle``), the bus's raw limits the position limits' ticks, telemetry one sample per command cycle."""
    servos = []
    for s in r.servos:
        lo, hi = limit_ticks(s)
        servos.append(ServoChannel(name=s.name, unit="ticks", center=float(s.center_ticks), gain=TICKS_PER_RAD,
                                   direction=s.direction, min_raw=float(lo) - 1, max_raw=float(hi) + 1,
                                   min_rad=s.min_rad, max_rad=s.max_rad, max_rate_rad_s=s.max_rate_rad_s,
                                   neutral_rad=s.neutral_rad))
    emulator = EmulatorConfig(plant="kinematic", seed=r.seed, firmware_version=(1, 0, 0), servo={}, sensors={},
                              kinematic={}, physics=None)
    return Rig(path=r.path, name=r.name, protocol_version=p.PROTOCOL_VERSION, port=r.port, baud=r.baud,
               command_hz=r.command_hz, telemetry_hz=max(1, int(round(r.command_hz))), samples_per_frame=1,
               heartbeat_hz=IDLE_TELEMETRY_HZ, watchdog_timeout_s=r.watchdog_timeout_s, servos=servos,
               joints=r.joints, strain=[], load=[], emulator=emulator, raw=r.raw)


@dataclass(frozen=True)
class ChannelMap:
    """A measured channel and the simulated signal a rig file says it reads: ``measured = scale * simulated + offset``
    (the scale carries the sign and the unit: a servo's direction and gain, a gauge's strain per rad, -1 for a load
    cell that reads the opposite of the support's wrench)."""
    telemetry_key: str     # hw/telemetry key of the measured channel: "servo_rad", "strain" or "load"
    channel: str           # the measured channel's name (rig file)
    signal: str            # sim/state key of the simulated signal: "q", "strain", "tau", "base_wrench", ...
    element: str | int     # a joint name, or a wrench component's index 0..5 (Fx, Fy, Fz, Mx, My, Mz)
    scale: float           # measured unit per simulated unit, signed
    offset: float = 0.0    # measured unit

    def to_simulated(self, measured):
        """The measured value (a float or an array) in the simulated signal's unit and sign."""
        return (measured - self.offset) / self.scale


#: a rig file's sensor ``unit`` -> the unit it means, where the word is not the unit's symbol
_RIG_UNIT_SYMBOLS = {"strain": "m/m"}


def sensor_unit(channel) -> str:
    """A sensor channel's unit as a symbol (a gauge's ``strain`` is m/m)."""
    return _RIG_UNIT_SYMBOLS.get(channel.unit, channel.unit)


def channel_maps(rig: Rig) -> list[ChannelMap]:
    """Every measured channel whose simulated counterpart the rig file declares: each ``[[joints]]`` map (servo angle
    vs ``q``: scale = direction * gain, offset = offset_rad) and each sensor with an ``[emulator.physics.sensors]``
    source (scale from it). Sensors without a source are left out (the caller may pair them by name)."""
    maps = [ChannelMap("servo_rad", joint.servo, "q", joint.joint, joint.direction * joint.gain, joint.offset_rad)
            for joint in rig.joints]
    sources = rig.emulator.physics.sensors if rig.emulator.physics is not None else {}
    for channel in rig.sensors:
        source = sources.get(channel.name)
        if source is not None:
            element = source.joint if source.joint is not None else source.index
            maps.append(ChannelMap("strain" if channel.kind == "strain" else "load", channel.name, source.signal,
                                   element, source.scale))
    return maps


def two_device_rig(bus_rig: Rig, sensor_rig: Rig) -> Rig:
    """The driver's view of a servo bus plus a sensor microcontroller: the bus's servos, joints, command rate and
    port; the microcontroller's strain and load channels (names, calibrations), telemetry rate and frame size (the
    driver's silence rule uses them) and emulator (its plant's truth, which the validator pairs with the model).
    Heartbeats run at the faster of the two rates: the bus's idle reads (IDLE_TELEMETRY_HZ) must beat its Bus
    Watchdog."""
    return dataclasses.replace(bus_rig, strain=sensor_rig.strain, load=sensor_rig.load,
                               telemetry_hz=sensor_rig.telemetry_hz, samples_per_frame=sensor_rig.samples_per_frame,
                               heartbeat_hz=max(IDLE_TELEMETRY_HZ, sensor_rig.heartbeat_hz),
                               emulator=sensor_rig.emulator)


def load_host_rig(path: str | Path) -> Rig:
    """Any rig file as the host sees it (module docstring); one-line ConfigError on a bad file."""
    if rig_kind(path) != "dynamixel":
        return load_rig(path)
    dxl_rig = load_dxl_rig(path)
    bus_rig = driver_rig(dxl_rig)
    if dxl_rig.microcontroller is None:
        return bus_rig
    return two_device_rig(bus_rig, load_rig(dxl_rig.microcontroller))


def sensor_rig_path(path: str | Path) -> Path | None:
    """The second file of a two-device rig (a Dynamixel rig's ``[microcontroller] rig``), or None."""
    if rig_kind(path) != "dynamixel":
        return None
    return load_dxl_rig(path).microcontroller


def host_rig_from_texts(text: str, origin: str, sensor_text: str | None = None) -> Rig:
    """:func:`load_host_rig` of a rig stored as text (in a recording, with the text of its microcontroller's rig
    file when it has one), through the same loaders, so the same checks apply. ``origin`` names it in errors."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / Path(origin).name
        path.write_text(text)
        if rig_kind(path) == "dynamixel" and sensor_text is not None:
            # the stored file names its microcontroller's rig relative to where it was: point it at the copy
            sensor = Path(folder) / "microcontroller_rig.toml"
            sensor.write_text(sensor_text)
            doc = load_toml(path)
            if not isinstance(doc.get("microcontroller"), dict):
                raise ConfigError(origin, "microcontroller", "expected a table naming the microcontroller's rig")
            doc["microcontroller"]["rig"] = sensor.name
            path.write_text(tomli_w.dumps(doc))
        return load_host_rig(path)


def stored_rig(metadata: dict[str, dict[str, str]]) -> Rig | None:
    """The rig stored in a recording's metadata (``rig_config``, and ``sensor_rig_config`` of a two-device rig) as
    the host sees it, or None when the recording holds none; ConfigError when the stored file does not load."""
    stored = metadata.get("rig_config")
    if not stored or not stored.get("text"):
        return None
    return host_rig_from_texts(stored["text"], stored.get("path", "rig.toml"),
                               metadata.get("sensor_rig_config", {}).get("text"))
