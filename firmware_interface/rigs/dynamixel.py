"""Dynamixel bus rig files (``kind = "dynamixel"``, docs/dynamixel.md): the servos on the bus, their units and
the emulated mechanics behind them. Read by the bus emulator (firmware_interface/dynamixel_emulator.py) and by the
driver's view of the rig (firmware_interface/rigs/host.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from sim.config import ConfigError, load_toml, require

from firmware_interface import dynamixel as dxl
from firmware_interface.rigs.mcu import JointMap
from firmware_interface.rigs.schema import check_dxl_rig

#: Position ticks per radian and rad/s per velocity unit of the X series' control table.
TICKS_PER_RAD = dxl.POSITION_TICKS_PER_REV / (2 * math.pi)
RAD_S_PER_VELOCITY_UNIT = dxl.VELOCITY_UNIT_RPM * 2 * math.pi / 60.0
@dataclass(frozen=True)
class ServoTruthDxl:
    """The emulated servo's mechanics: ``J dω/dt = kt i - b ω``; the position loop commands
    ``ω* = clip((goal - θ) / position_time_constant_s, ±v_max)``, the velocity loop reaches it with the
    first-order lag ``velocity_time_constant_s``, the current saturates at the current limit."""
    inertia_kg_m2: float = 2e-4            # rotor reflected through the gearbox + the load, at the horn
    damping_n_m_s: float = 0.05            # viscous friction at the horn, N m s/rad
    torque_constant_n_m_a: float = 1.78    # XM430-W350 at 12 V: 4.1 N m stall / 2.3 A
    position_time_constant_s: float = 0.02
    velocity_time_constant_s: float = 0.005
    missing: bool = False                  # on the rig file but does not answer (unplugged, wrong ID)


@dataclass(frozen=True)
class DxlServo:
    """One servo of a Dynamixel rig. ``ticks = center_ticks + direction * TICKS_PER_RAD * angle``."""
    name: str
    id: int
    model: str
    center_ticks: int
    direction: int
    min_rad: float
    max_rad: float
    max_rate_rad_s: float
    neutral_rad: float
    eeprom: dict[str, int]                 # control-table values written while torque is off (at start-up)
    truth: ServoTruthDxl

    def to_ticks(self, angle_rad: float) -> int:
        return int(round(self.center_ticks + self.direction * TICKS_PER_RAD * angle_rad))

    def to_rad(self, ticks: float) -> float:
        return (ticks - self.center_ticks) / (self.direction * TICKS_PER_RAD)


@dataclass(frozen=True)
class DxlRig:
    path: Path
    name: str
    port: str
    baud: int
    command_hz: float
    watchdog_timeout_s: float
    servos: list[DxlServo]
    joints: list                            # firmware_interface.rigs.mcu.JointMap
    microcontroller: Path | None            # the sensor link's rig file (strain gauges, load cell), if any
    seed: int
    #: what the driver sends the microcontroller's own servo channels: "mirror" (the bus's joint angles) or
    #: "neutral" (hil/drive/links/composite.py)
    microcontroller_servo_channels: str = "mirror"
    #: the microcontroller's port, if this file overrides its rig file's [serial] port
    microcontroller_port: str | None = None
    raw: dict = field(repr=False, default_factory=dict)

    @property
    def ids(self) -> list[int]:
        return [s.id for s in self.servos]


def rig_kind(path: str | Path) -> str:
    """``[rig] kind`` of a rig file: "dynamixel", or "mcu" when absent (the microcontroller rigs of
    docs/rigs.md). What `mms emulate` and `mms drive` would dispatch on."""
    rig_t = load_toml(path).get("rig", {})
    kind = rig_t.get("kind", "mcu") if isinstance(rig_t, dict) else "mcu"
    return kind if isinstance(kind, str) else "mcu"


EEPROM_KEYS = ("return_delay_time", "velocity_limit", "current_limit", "operating_mode", "drive_mode")


def load_dxl_rig(path: str | Path) -> DxlRig:
    """Read a ``kind = "dynamixel"`` rig file; one-line :class:`ConfigError` on any problem."""
    path = Path(path)
    doc = load_toml(path)
    check_dxl_rig(doc, path)
    rig_t = require(doc, "rig", dict, path=path)
    name = require(rig_t, "name", str, path=path, prefix="rig")
    require(rig_t, "kind", str, path=path, prefix="rig", check=lambda v: v == "dynamixel",
            expected='"dynamixel"')
    bus_t = require(doc, "bus", dict, path=path)
    port = require(bus_t, "port", str, path=path, prefix="bus")
    baud = require(bus_t, "baud", int, path=path, prefix="bus", check=lambda v: v in dxl.BAUD_RATES.values(),
                   expected=f"one of the X series' baud rates {sorted(dxl.BAUD_RATES.values())}")
    require(bus_t, "protocol", int, path=path, prefix="bus", default=2, check=lambda v: v == 2,
            expected="2 (Protocol 2.0)")
    rates = require(doc, "rates", dict, path=path, default={})
    command_hz = require(rates, "command_hz", float, path=path, prefix="rates", default=200.0,
                         check=lambda v: v > 0, expected="a positive rate, Hz")
    watchdog_t = require(doc, "watchdog", dict, path=path, default={})
    watchdog_s = require(watchdog_t, "timeout_s", float, path=path, prefix="watchdog", default=0.1,
                         check=lambda v: 0.02 <= v <= 127 * dxl.BUS_WATCHDOG_UNIT_S,
                         expected="0.02 to 2.54 s (the servo's bus watchdog, 20 ms units)")
    emu = require(doc, "emulator", dict, path=path, default={})
    seed = require(emu, "seed", int, path=path, prefix="emulator", default=0)
    truth_t = require(emu, "servo", dict, path=path, prefix="emulator", default={})
    truth_defaults = {k: v for k, v in truth_t.items() if not isinstance(v, dict)}

    items = require(doc, "servos", list, path=path, expected="an array of [[servos]] tables")
    if not 1 <= len(items) <= dxl.MAX_ID + 1:
        raise ConfigError(path, "servos", "expected 1 to 253 servos")
    servos = []
    for k, t in enumerate(items):
        prefix = f"servos[{k}]"
        if not isinstance(t, dict):
            raise ConfigError(path, prefix, "expected a table")
        sname = require(t, "name", str, path=path, prefix=prefix)
        model = require(t, "model", str, path=path, prefix=prefix, default="XM430-W350",
                        check=lambda v: v in dxl.MODEL_NUMBERS, expected=f"one of {sorted(dxl.MODEL_NUMBERS)}")
        eeprom = {key: require(t, key, int, path=path, prefix=prefix) for key in EEPROM_KEYS if key in t}
        table = dxl.ControlTable()
        for key, value in eeprom.items():
            item = dxl.ITEMS[key]
            if table.check_write(item.address, dxl.pack_value(value, item.size)) != dxl.ERR_NONE:
                raise ConfigError(path, f"{prefix}.{key}", f"got {value}, expected {item.lo}..{item.hi}")
        own = require(truth_t, sname, dict, path=path, prefix="emulator.servo", default={})
        tt = {**truth_defaults, **own}
        try:
            truth = ServoTruthDxl(**{key: (bool(v) if key == "missing" else float(v)) for key, v in tt.items()})
        except TypeError:
            raise ConfigError(path, f"emulator.servo.{sname}", f"unknown key among {sorted(tt)}; expected "
                              f"{sorted(ServoTruthDxl.__dataclass_fields__)}") from None
        except ValueError:
            raise ConfigError(path, f"emulator.servo.{sname}", f"got {tt}, expected numbers (missing: a "
                              "boolean)") from None
        if min(v for k, v in truth.__dict__.items() if k != "missing") <= 0:
            raise ConfigError(path, f"emulator.servo.{sname}", "expected positive mechanics (inertia, damping, "
                              "torque constant, time constants)")
        servo = DxlServo(
            name=sname,
            id=require(t, "id", int, path=path, prefix=prefix, check=lambda v: 0 <= v <= dxl.MAX_ID,
                       expected="an ID 0..252"),
            model=model,
            center_ticks=require(t, "center_ticks", int, path=path, prefix=prefix, default=2048,
                                 check=lambda v: 0 <= v <= 4095, expected="0..4095"),
            direction=require(t, "direction", int, path=path, prefix=prefix, default=1,
                              check=lambda v: v in (-1, 1), expected="1 or -1"),
            min_rad=require(t, "min_rad", float, path=path, prefix=prefix),
            max_rad=require(t, "max_rad", float, path=path, prefix=prefix),
            max_rate_rad_s=require(t, "max_rate_rad_s", float, path=path, prefix=prefix,
                                   check=lambda v: v > 0, expected="a positive rate, rad/s"),
            neutral_rad=require(t, "neutral_rad", float, path=path, prefix=prefix, default=0.0),
            eeprom=eeprom, truth=truth)
        if servo.min_rad >= servo.max_rad:
            raise ConfigError(path, f"{prefix}.max_rad", f"got {servo.max_rad}, expected more than min_rad")
        for key in ("min_rad", "max_rad", "neutral_rad"):
            ticks = servo.to_ticks(getattr(servo, key))
            if not 0 <= ticks <= 4095:
                raise ConfigError(path, f"{prefix}.{key}", f"maps to {ticks} ticks, outside 0..4095")
        if not servo.min_rad <= servo.neutral_rad <= servo.max_rad:
            raise ConfigError(path, f"{prefix}.neutral_rad", "expected within [min_rad, max_rad]")
        servos.append(servo)
    for key in ("id", "name"):
        values = [getattr(s, key) for s in servos]
        for k, v in enumerate(values):
            if v in values[:k]:
                raise ConfigError(path, f"servos[{k}].{key}", f"duplicate {key} {v!r}")
    names = [s.name for s in servos]
    joints = []
    for k, t in enumerate(require(doc, "joints", list, path=path, default=[])):
        prefix = f"joints[{k}]"
        joints.append(JointMap(
            joint=require(t, "joint", str, path=path, prefix=prefix),
            servo=require(t, "servo", str, path=path, prefix=prefix, check=lambda v: v in names,
                          expected=f"one of {names}"),
            direction=require(t, "direction", int, path=path, prefix=prefix, default=1,
                              check=lambda v: v in (-1, 1), expected="1 or -1"),
            gain=require(t, "gain", float, path=path, prefix=prefix, default=1.0, check=lambda v: v > 0,
                         expected="a positive number"),
            offset_rad=require(t, "offset_rad", float, path=path, prefix=prefix, default=0.0)))
    mcu_t = require(doc, "microcontroller", dict, path=path, default={})
    mcu = None
    if "rig" in mcu_t:
        mcu = (path.parent / require(mcu_t, "rig", str, path=path, prefix="microcontroller")).resolve()
        if not mcu.is_file():
            raise ConfigError(path, "microcontroller.rig", f"no such file {mcu}")
    mcu_servos = require(mcu_t, "servo_channels", str, path=path, prefix="microcontroller", default="mirror",
                         check=lambda v: v in ("mirror", "neutral"), expected='"mirror" or "neutral"')
    mcu_port = require(mcu_t, "port", str, path=path, prefix="microcontroller", default=None)
    return DxlRig(path=path, name=name, port=port, baud=baud, command_hz=command_hz,
                  watchdog_timeout_s=watchdog_s, servos=servos, joints=joints, microcontroller=mcu, seed=seed,
                  microcontroller_servo_channels=mcu_servos, microcontroller_port=mcu_port, raw=doc)
