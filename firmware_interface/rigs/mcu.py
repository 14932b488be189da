"""Rig descriptions (configs/rigs/*.toml): the hardware the servo driver talks to and the emulator imitates.

docs/rigs.md documents the format key by key. The loader checks every value with :func:`sim.config.require`,
so a bad file fails with one line naming the file and the key. The calibrations here are pure functions of
the config (no I/O), shared by the driver (angles -> raw setpoints, counts -> physical units) and the
emulator (the inverse, plus its own "truth" imperfections).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sim.config import ConfigError, load_toml, require
from sim.integrator_names import INTEGRATORS

from firmware_interface.protocol import MAX_NAME_BYTES, PROTOCOL_VERSION, max_samples_per_frame
from firmware_interface.rigs.schema import DEFAULT_HEARTBEAT_HZ, DEFAULT_SETPOINTS, SETPOINT_MODES, check_mcu_rig

_positive = (lambda v: v > 0, "a positive number")
_non_negative = (lambda v: v >= 0, "a number >= 0")
_direction = (lambda v: v in (-1, 1), "1 or -1")

PLANT_KINDS = ("kinematic", "physics")
#: ``[rig] kind`` of the files this loader reads (the default when the key is absent).
RIG_KIND = "mcu"
PHYSICS_SIGNALS = ("strain", "q", "tau", "base_wrench", "ext_wrench")


@dataclass(frozen=True)
class ServoChannel:
    """One servo output. ``raw = center + direction * gain * angle`` (angle in rad at the servo horn; raw in
    ``unit``: pulse width µs for a hobby servo, position ticks for a bus servo)."""
    name: str
    unit: str
    center: float            # raw value at angle 0
    gain: float              # raw units per rad
    direction: int           # +1 or -1
    min_raw: float           # raw limits the firmware never exceeds
    max_raw: float
    min_rad: float           # position limits, rad
    max_rad: float
    max_rate_rad_s: float    # rate limit the driver applies, rad/s
    neutral_rad: float       # neutral posture: where the servo goes when the rig is made safe

    def to_raw(self, angle_rad: float) -> float:
        return self.center + self.direction * self.gain * angle_rad

    def to_rad(self, raw: float) -> float:
        return (raw - self.center) / (self.direction * self.gain)

    @property
    def neutral_raw(self) -> float:
        return self.to_raw(self.neutral_rad)


@dataclass(frozen=True)
class JointMap:
    """A simulator joint driven by a servo: ``servo_angle = offset_rad + direction * gain * joint_angle``."""
    joint: str
    servo: str
    direction: int
    gain: float
    offset_rad: float

    def servo_angle(self, joint_angle: float) -> float:
        return self.offset_rad + self.direction * self.gain * joint_angle

    def joint_angle(self, servo_angle: float) -> float:
        return (servo_angle - self.offset_rad) / (self.direction * self.gain)


@dataclass(frozen=True)
class SensorChannel:
    """A strain-gauge or load-cell channel: ``value = gain * (counts - offset_counts)`` in ``unit``; the ADC
    gives signed counts of ``adc_bits`` bits (saturating)."""
    name: str
    kind: str                # "strain" or "load"
    unit: str
    gain: float              # unit per count
    offset_counts: float     # counts at zero
    adc_bits: int

    def to_value(self, counts: float) -> float:
        return self.gain * (counts - self.offset_counts)

    def to_counts(self, value: float) -> float:
        return value / self.gain + self.offset_counts

    @property
    def count_range(self) -> tuple[int, int]:
        half = 1 << (self.adc_bits - 1)
        return -half, half - 1


@dataclass(frozen=True)
class ServoTruth:
    """The emulated servo's own dynamics: rate limit (rad/s), first-order lag (s), deadband (rad)."""
    max_rate_rad_s: float
    time_constant_s: float
    deadband_rad: float


@dataclass(frozen=True)
class SensorTruth:
    """The emulated sensor's imperfections, in the channel's unit: true gain relative to the calibration,
    offset, white-noise standard deviation, drift per second."""
    gain: float = 1.0
    offset: float = 0.0
    noise_std: float = 0.0
    drift_per_s: float = 0.0


@dataclass(frozen=True)
class KinematicSource:
    """Kinematic plant: ``sensor = bias + sum(coefficient[servo] * servo_angle_rad)``, in the sensor's unit."""
    coefficients: dict[str, float]
    bias: float = 0.0


@dataclass(frozen=True)
class PhysicsSource:
    """Physics plant: a sensor reads ``scale * outputs[signal][index]`` of the simulator (``index`` is a joint
    index for strain/q/tau, looked up from ``joint``; a wrench component 0..5 for the wrenches)."""
    signal: str
    joint: str | None
    index: int | None
    scale: float


#: how the emulator's physics plant keeps time (PhysicsPlant.clock)
PLANT_CLOCKS = ("wall", "samples")


@dataclass(frozen=True)
class PhysicsPlant:
    robot: Path                        # robot TOML, resolved against the rig file's folder
    overrides: dict[str, Any]          # merged into the robot table before it is built ("truth" model)
    dt: float
    integrator: str
    sensors: dict[str, PhysicsSource]
    #: "wall": the plant steps in slices of the wall clock with the newest servo angles; "samples": one step per
    #: telemetry sample, to the sample's time with its servo angles (its reading one sample late, always)
    clock: str = "wall"


@dataclass(frozen=True)
class EmulatorConfig:
    plant: str
    seed: int
    firmware_version: tuple[int, int, int]
    servo: dict[str, ServoTruth]
    sensors: dict[str, SensorTruth]
    kinematic: dict[str, KinematicSource]
    physics: PhysicsPlant | None


@dataclass(frozen=True)
class Rig:
    path: Path
    name: str
    protocol_version: int
    port: str
    baud: int
    command_hz: float
    telemetry_hz: int
    samples_per_frame: int
    heartbeat_hz: float
    watchdog_timeout_s: float
    servos: list[ServoChannel]
    joints: list[JointMap]
    strain: list[SensorChannel]
    load: list[SensorChannel]
    emulator: EmulatorConfig
    #: the servo target between setpoint frames, [rates] setpoints: "step" or "interpolate"
    #: (firmware_interface.emulator.SetpointRamp, docs/rigs.md)
    setpoints: str = DEFAULT_SETPOINTS
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def servo_names(self) -> list[str]:
        return [s.name for s in self.servos]

    @property
    def sensors(self) -> list[SensorChannel]:
        return [*self.strain, *self.load]

    def servo(self, name: str) -> ServoChannel:
        return self.servos[self.servo_names.index(name)]

    @property
    def neutral_raw(self) -> list[float]:
        return [s.neutral_raw for s in self.servos]


def _name(table: dict, key: str, path, prefix: str) -> str:
    return require(table, key, str, path=path, prefix=prefix, check=lambda v: bool(v.strip()),
                   expected="a non-empty string")


def _num(table, key, path, prefix, check=None, default=..., ) -> float:
    kwargs = {} if default is ... else {"default": default}
    if check is None:
        return require(table, key, float, path=path, prefix=prefix, **kwargs)
    return require(table, key, float, path=path, prefix=prefix, check=check[0], expected=check[1], **kwargs)


def _tables(doc: dict, key: str, path, *, required: bool = True) -> list[dict]:
    items = require(doc, key, list, path=path, **({} if required else {"default": []}),
                    expected="an array of tables")
    for k, item in enumerate(items):
        if not isinstance(item, dict):
            raise ConfigError(path, f"{key}[{k}]", "expected a table")
    return items


def _unique(names: list[str], path, key: str) -> None:
    seen = set()
    for k, name in enumerate(names):
        if name in seen:
            raise ConfigError(path, f"{key}[{k}].name", f"duplicate name {name!r}")
        seen.add(name)


def _servo(t: dict, path, prefix: str) -> ServoChannel:
    s = ServoChannel(
        name=_name(t, "name", path, prefix),
        unit=require(t, "unit", str, path=path, prefix=prefix, check=lambda v: v in ("us", "ticks"),
                     expected='"us" or "ticks"'),
        center=_num(t, "center", path, prefix),
        gain=_num(t, "gain", path, prefix, _positive),
        direction=require(t, "direction", int, path=path, prefix=prefix, check=_direction[0],
                          expected=_direction[1]),
        min_raw=_num(t, "min_raw", path, prefix),
        max_raw=_num(t, "max_raw", path, prefix),
        min_rad=_num(t, "min_rad", path, prefix),
        max_rad=_num(t, "max_rad", path, prefix),
        max_rate_rad_s=_num(t, "max_rate_rad_s", path, prefix, _positive),
        neutral_rad=_num(t, "neutral_rad", path, prefix, default=0.0),
    )
    if s.min_raw >= s.max_raw:
        raise ConfigError(path, f"{prefix}.max_raw", f"got {s.max_raw}, expected more than min_raw {s.min_raw}")
    if s.min_rad >= s.max_rad:
        raise ConfigError(path, f"{prefix}.max_rad", f"got {s.max_rad}, expected more than min_rad {s.min_rad}")
    if not s.min_rad <= s.neutral_rad <= s.max_rad:
        raise ConfigError(path, f"{prefix}.neutral_rad", f"got {s.neutral_rad}, expected within "
                          f"[min_rad, max_rad] = [{s.min_rad}, {s.max_rad}]")
    for key in ("min_rad", "max_rad", "neutral_rad"):
        raw = s.to_raw(getattr(s, key))
        if not s.min_raw - 1e-9 <= raw <= s.max_raw + 1e-9:
            raise ConfigError(path, f"{prefix}.{key}", f"maps to raw {raw:.6g} {s.unit}, outside "
                              f"[min_raw, max_raw] = [{s.min_raw}, {s.max_raw}]")
    return s


def _sensor(t: dict, kind: str, path, prefix: str) -> SensorChannel:
    return SensorChannel(
        name=_name(t, "name", path, prefix), kind=kind,
        unit=_name(t, "unit", path, prefix),
        gain=_num(t, "gain", path, prefix, (lambda v: v != 0, "a non-zero number")),
        offset_counts=_num(t, "offset_counts", path, prefix, default=0.0),
        adc_bits=require(t, "adc_bits", int, path=path, prefix=prefix, default=24, check=lambda v: 2 <= v <= 32,
                         expected="an integer from 2 to 32"),
    )


def load_rig(path: str | Path) -> Rig:
    """Read and check a rig file; raise a one-line :class:`ConfigError` on any problem."""
    path = Path(path)
    doc = load_toml(path)
    check_mcu_rig(doc, path)
    rig_t = require(doc, "rig", dict, path=path)
    require(rig_t, "kind", str, path=path, prefix="rig", default=RIG_KIND, check=lambda v: v == RIG_KIND,
            expected=f'"{RIG_KIND}" (a microcontroller rig; other kinds, e.g. "dynamixel", have their own loaders)')
    name = _name(rig_t, "name", path, "rig")
    if len(name.encode("utf-8")) > MAX_NAME_BYTES:
        raise ConfigError(path, "rig.name", f"got {name!r}, expected at most {MAX_NAME_BYTES} bytes of UTF-8")
    version = require(rig_t, "protocol_version", int, path=path, prefix="rig",
                      check=lambda v: v == PROTOCOL_VERSION, expected=f"{PROTOCOL_VERSION} (this build's protocol)")
    serial_t = require(doc, "serial", dict, path=path)
    port = require(serial_t, "port", str, path=path, prefix="serial")
    baud = require(serial_t, "baud", int, path=path, prefix="serial", check=lambda v: 300 <= v <= 20_000_000,
                   expected="a baud rate from 300 to 20000000")
    rates = require(doc, "rates", dict, path=path)
    command_hz = _num(rates, "command_hz", path, "rates", _positive)
    telemetry_hz = require(rates, "telemetry_hz", int, path=path, prefix="rates")
    heartbeat_hz = _num(rates, "heartbeat_hz", path, "rates", default=DEFAULT_HEARTBEAT_HZ)
    setpoints = require(rates, "setpoints", str, path=path, prefix="rates", default=DEFAULT_SETPOINTS,
                        check=lambda v: v in SETPOINT_MODES, expected=" or ".join(f'"{m}"' for m in SETPOINT_MODES))
    watchdog_t = require(doc, "watchdog", dict, path=path)
    watchdog_s = _num(watchdog_t, "timeout_s", path, "watchdog",
                      (lambda v: 0.001 <= v <= 65.535, "a timeout from 0.001 to 65.535 s"))

    servo_items = _tables(doc, "servos", path)
    if not 1 <= len(servo_items) <= 255:
        raise ConfigError(path, "servos", "expected 1 to 255 servo channels")
    servos = [_servo(t, path, f"servos[{k}]") for k, t in enumerate(servo_items)]
    _unique([s.name for s in servos], path, "servos")
    strain = [_sensor(t, "strain", path, f"strain[{k}]") for k, t in enumerate(_tables(doc, "strain", path,
                                                                                       required=False))]
    load = [_sensor(t, "load", path, f"load[{k}]") for k, t in enumerate(_tables(doc, "load", path,
                                                                                 required=False))]
    _unique([s.name for s in strain + load], path, "strain/load")
    if len(strain) > 255 or len(load) > 255:
        raise ConfigError(path, "strain", "at most 255 channels of each kind")

    servo_names = [s.name for s in servos]
    joints = []
    for k, t in enumerate(_tables(doc, "joints", path, required=False)):
        prefix = f"joints[{k}]"
        joints.append(JointMap(
            joint=_name(t, "joint", path, prefix),
            servo=require(t, "servo", str, path=path, prefix=prefix, check=lambda v: v in servo_names,
                          expected=f"one of the servo names {servo_names}"),
            direction=require(t, "direction", int, path=path, prefix=prefix, default=1, check=_direction[0],
                              expected=_direction[1]),
            gain=_num(t, "gain", path, prefix, _positive, default=1.0),
            offset_rad=_num(t, "offset_rad", path, prefix, default=0.0)))

    n_max = max_samples_per_frame(len(servos), len(strain), len(load))
    samples_per_frame = require(rates, "samples_per_frame", int, path=path, prefix="rates",
                                check=lambda v: 1 <= v <= n_max,
                                expected=f"an integer from 1 to {n_max} (what fits in one frame)")
    emulator = _emulator(doc, path, servos, strain + load)
    return Rig(path=path, name=name, protocol_version=version, port=port, baud=baud, command_hz=command_hz,
               telemetry_hz=telemetry_hz, samples_per_frame=samples_per_frame, heartbeat_hz=heartbeat_hz,
               watchdog_timeout_s=watchdog_s, servos=servos, joints=joints, strain=strain, load=load,
               emulator=emulator, setpoints=setpoints, raw=doc)


def _emulator(doc: dict, path: Path, servos: list[ServoChannel], sensors: list[SensorChannel]) -> EmulatorConfig:
    emu = require(doc, "emulator", dict, path=path, default={})
    plant = require(emu, "plant", str, path=path, prefix="emulator", default="kinematic",
                    check=lambda v: v in PLANT_KINDS, expected=" or ".join(f'"{k}"' for k in PLANT_KINDS))
    seed = require(emu, "seed", int, path=path, prefix="emulator", default=0)
    fw = require(emu, "firmware_version", list, path=path, prefix="emulator", default=[1, 0, 0],
                 check=lambda v: len(v) == 3 and all(isinstance(x, int) and 0 <= x <= 255 for x in v),
                 expected="[major, minor, patch], integers 0..255")

    servo_names = [s.name for s in servos]
    servo_t = require(emu, "servo", dict, path=path, prefix="emulator", default={})
    default_servo = {k: v for k, v in servo_t.items() if not isinstance(v, dict)}
    truths = {}
    for s in servos:
        prefix = f"emulator.servo.{s.name}"
        t = {**default_servo, **require(servo_t, s.name, dict, path=path, prefix="emulator.servo", default={})}
        truths[s.name] = ServoTruth(
            max_rate_rad_s=_num(t, "max_rate_rad_s", path, prefix, _positive, default=2 * s.max_rate_rad_s),
            time_constant_s=_num(t, "time_constant_s", path, prefix, _non_negative, default=0.0),
            deadband_rad=_num(t, "deadband_rad", path, prefix, _non_negative, default=0.0))
    for key, value in servo_t.items():
        if isinstance(value, dict) and key not in servo_names:
            raise ConfigError(path, f"emulator.servo.{key}", f"no servo channel named {key!r}")

    sensor_names = [s.name for s in sensors]
    sensors_t = require(emu, "sensors", dict, path=path, prefix="emulator", default={})
    default_sensor = {k: v for k, v in sensors_t.items() if not isinstance(v, dict)}
    sensor_truths = {}
    for s in sensors:
        prefix = f"emulator.sensors.{s.name}"
        t = {**default_sensor, **require(sensors_t, s.name, dict, path=path, prefix="emulator.sensors", default={})}
        sensor_truths[s.name] = SensorTruth(
            gain=_num(t, "gain", path, prefix, default=1.0), offset=_num(t, "offset", path, prefix, default=0.0),
            noise_std=_num(t, "noise_std", path, prefix, _non_negative, default=0.0),
            drift_per_s=_num(t, "drift_per_s", path, prefix, default=0.0))
    for key, value in sensors_t.items():
        if isinstance(value, dict) and key not in sensor_names:
            raise ConfigError(path, f"emulator.sensors.{key}", f"no sensor channel named {key!r}")

    kin_t = require(emu, "kinematic", dict, path=path, prefix="emulator", default={})
    kinematic = {}
    for key, t in kin_t.items():
        prefix = f"emulator.kinematic.{key}"
        if key not in sensor_names:
            raise ConfigError(path, prefix, f"no sensor channel named {key!r}")
        if not isinstance(t, dict):
            raise ConfigError(path, prefix, "expected a table")
        coefficients = require(t, "servos", dict, path=path, prefix=prefix, default={})
        for servo in coefficients:
            if servo not in servo_names:
                raise ConfigError(path, f"{prefix}.servos.{servo}", f"no servo channel named {servo!r}")
            _num(coefficients, servo, path, f"{prefix}.servos")
        kinematic[key] = KinematicSource({k: float(v) for k, v in coefficients.items()},
                                         _num(t, "bias", path, prefix, default=0.0))

    physics = None
    if "physics" in emu or plant == "physics":
        phys_t = require(emu, "physics", dict, path=path, prefix="emulator")
        robot = Path(require(phys_t, "robot", str, path=path, prefix="emulator.physics"))
        robot = robot if robot.is_absolute() else (path.parent / robot)
        sources = {}
        src_t = require(phys_t, "sensors", dict, path=path, prefix="emulator.physics", default={})
        for key, t in src_t.items():
            prefix = f"emulator.physics.sensors.{key}"
            if key not in sensor_names:
                raise ConfigError(path, prefix, f"no sensor channel named {key!r}")
            if not isinstance(t, dict):
                raise ConfigError(path, prefix, "expected a table")
            signal = require(t, "signal", str, path=path, prefix=prefix, check=lambda v: v in PHYSICS_SIGNALS,
                             expected=" or ".join(f'"{k}"' for k in PHYSICS_SIGNALS))
            joint = index = None
            if signal in ("strain", "q", "tau"):
                joint = _name(t, "joint", path, prefix)
            else:
                index = require(t, "index", int, path=path, prefix=prefix, check=lambda v: 0 <= v <= 5,
                                expected="a wrench component 0..5 (fx, fy, fz, mx, my, mz)")
            sources[key] = PhysicsSource(signal, joint, index, _num(t, "scale", path, prefix, default=1.0))
        overrides = require(phys_t, "overrides", dict, path=path, prefix="emulator.physics", default={})
        if robot.is_file():  # a rig stored in a recording has no robot file beside it: checked when the plant runs
            _check_overrides(robot, overrides, path)
        physics = PhysicsPlant(
            robot=robot,
            overrides=overrides,
            dt=_num(phys_t, "dt", path, "emulator.physics", _positive, default=1e-4),
            integrator=require(phys_t, "integrator", str, path=path, prefix="emulator.physics", default="rk4",
                               check=lambda v: v in INTEGRATORS,
                               expected=" or ".join(f'"{name}"' for name in INTEGRATORS)),
            sensors=sources,
            clock=require(phys_t, "clock", str, path=path, prefix="emulator.physics", default="wall",
                          check=lambda v: v in PLANT_CLOCKS, expected=" or ".join(f'"{c}"' for c in PLANT_CLOCKS)))
    return EmulatorConfig(plant=plant, seed=seed, firmware_version=tuple(fw), servo=truths, sensors=sensor_truths,
                          kinematic=kinematic, physics=physics)


def _check_overrides(robot: Path, overrides: dict, path: Path) -> None:
    """The physics plant's robot file with ``overrides`` merged in must pass the robot schema (a misspelt override
    would otherwise be ignored and the "truth" model would not be the one the rig file describes)."""
    from sim.robots import check_robot   # here: the model's numba kernels are not paid by tools that read a rig

    try:
        check_robot(deep_merge(load_toml(robot), overrides), robot)
    except ConfigError as exc:
        if exc.path != str(robot) or exc.key is None:
            raise
        raise ConfigError(path, f"emulator.physics.overrides.{exc.key}", f"{exc.message} (robot {robot.name})") from None


def deep_merge(base: dict, overrides: dict) -> dict:
    """``base`` with ``overrides`` merged in, tables recursively (a new dict; the inputs are not changed)."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged
