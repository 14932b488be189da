"""The JSON Schemas of rig files (configs/rigs/*.toml) and the limits of the devices they describe.

Both rig loaders check a file here before reading it: :func:`check_mcu_rig` (``[rig] kind = "mcu"``,
firmware_interface/rigs/mcu.py, docs/rigs.md) and :func:`check_dxl_rig` (``kind = "dynamixel"``,
firmware_interface/dynamixel_emulator.py, docs/dynamixel.md). A misspelt key, a wrong type or a value the
device cannot honour is refused with one line naming the file and the key (``sim.config.ConfigError``), and a
robot or network file given as a rig is named as such. The schemas are built from the document itself where
sub-tables are named after its channels (``[emulator.servo.<servo name>]``), so a misspelt channel name gets a
did-you-mean like any key.

Ranges tied to the devices:
- telemetry: at most :data:`MAX_SAMPLE_RATE_HZ`, the sample rate the firmware accepts (a higher CONFIGURE is
  NACKed, so a driver asking for it would retry forever);
- heartbeats: the host declares the link lost after :data:`HEARTBEATS_TO_LINK_LOSS` missed heartbeats, which must
  happen within :data:`MAX_LINK_LOSS_S`, so ``heartbeat_hz >= HEARTBEATS_TO_LINK_LOSS / MAX_LINK_LOSS_S``;
- setpoints: at least :data:`SETPOINTS_PER_WATCHDOG` per watchdog timeout (one lost frame must not trip the
  watchdog), and, with telemetry and heartbeats, within the serial link's bytes per second (:func:`link_load`);
- servo rates: at most :data:`MAX_SERVO_RATE_RAD_S`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from sim.config import (BOOLEAN, EXPECTED, REFERENCE, ConfigError, array, check_schema, integer, number, one_of, refuse_other_kind,
                        string, table)
from sim.integrator_names import INTEGRATORS

from firmware_interface import dynamixel as dxl
from firmware_interface import protocol as p

#: Highest telemetry sample rate the firmware accepts, Hz (CONFIGURE with more is NACKed: docs/protocol.md).
MAX_SAMPLE_RATE_HZ = 20_000
#: Missed heartbeats after which the host declares the link lost (hil/drive/driver.py's silence rule).
HEARTBEATS_TO_LINK_LOSS = 3
#: Longest a lost link may go unnoticed, s: the driver's default --link-timeout.
MAX_LINK_LOSS_S = 0.5
MIN_HEARTBEAT_HZ = HEARTBEATS_TO_LINK_LOSS / MAX_LINK_LOSS_S
#: Heartbeat rate of a rig file that names none, Hz.
DEFAULT_HEARTBEAT_HZ = 10.0
#: How the firmware moves the servo target between setpoint frames (`[rates] setpoints`, docs/rigs.md): each
#: frame held until the next, or interpolated from the previous over the measured setpoint interval.
SETPOINT_MODES = ("step", "interpolate")
DEFAULT_SETPOINTS = "step"
#: Setpoint frames per watchdog timeout, at least: one lost frame must not trip the device's watchdog.
SETPOINTS_PER_WATCHDOG = 2
#: Fastest servo rate limit, rad/s: twice the no-load speed of the fastest hobby and smart servos (~50 rad/s);
#: a larger limit is no limit at all (1e308 would switch the driver's rate limiting off).
MAX_SERVO_RATE_RAD_S = 100.0
#: Bits on the wire per byte of a UART frame (start + 8 data + stop).
BITS_PER_BYTE = 10
#: Fraction of the serial link's bytes per second the configured traffic may use (the rest absorbs retries,
#: ACKs and the host's heartbeats).
MAX_LINK_LOAD = 0.8
#: Largest angle, offset or calibration figure in rad (several turns).
MAX_ANGLE_RAD = 100.0
#: Largest seed accepted (u32: what every random generator of the emulators takes).
MAX_SEED = 2**32 - 1
#: Largest raw servo value (pulse width µs or ticks): float32 on the wire holds integers exactly up to 2^24.
MAX_RAW = 2.0**24
#: Largest calibration figure (sensor unit per count, offsets, plant coefficients, scales): float32 telemetry
#: and 32-bit counts leave no resolution for larger ones.
MAX_CALIBRATION = 1e6
#: Largest joint-to-servo gear ratio.
MAX_GEAR_RATIO = 100.0
#: Emulated servo mechanics: largest inertia at the horn (kg m^2), viscous damping (N m s/rad), torque constant
#: (N m/A) and time constant (s); each far beyond any hobby or smart servo.
MAX_HORN_INERTIA = 1.0
MAX_HORN_DAMPING = 1e3
MAX_TORQUE_CONSTANT = 100.0
MAX_TIME_CONSTANT_S = 10.0

_ANGLE = number(-MAX_ANGLE_RAD, MAX_ANGLE_RAD, expected=f"an angle in [-{MAX_ANGLE_RAD:g}, {MAX_ANGLE_RAD:g}] rad")
_DIRECTION = one_of(1, -1)
_SERVO_RATE = number(above=0.0, maximum=MAX_SERVO_RATE_RAD_S,
                     expected=f"a rate in (0, {MAX_SERVO_RATE_RAD_S:g}] rad/s")
_SEED = integer(0, MAX_SEED)
_RAW = number(-MAX_RAW, MAX_RAW, expected=f"a raw value in [-{MAX_RAW:.0f}, {MAX_RAW:.0f}] (float32 on the wire)")
_CALIBRATION = number(-MAX_CALIBRATION, MAX_CALIBRATION,
                      expected=f"a number in [-{MAX_CALIBRATION:g}, {MAX_CALIBRATION:g}]")
_TIME_CONSTANT = number(0.0, MAX_TIME_CONSTANT_S, expected=f"a time constant in [0, {MAX_TIME_CONSTANT_S:g}] s")


def _positive(maximum: float, unit: str) -> dict[str, Any]:
    return number(above=0.0, maximum=maximum, expected=f"a number in (0, {maximum:.10g}] {unit}".rstrip())


def _joints(servo_names: list[str]) -> dict[str, Any]:
    """``[[joints]]``: simulator joint -> servo."""
    return array(table({"joint": string(), "servo": one_of(*servo_names, expected=f"one of the servos {servo_names}") | {REFERENCE: True},
                        "direction": _DIRECTION, "gain": _positive(MAX_GEAR_RATIO, ""), "offset_rad": _ANGLE},
                       ["joint", "servo"]))


def _names(doc: dict[str, Any], *keys: str) -> list[str]:
    """The ``name`` of every table of the arrays ``keys`` (what other tables refer to)."""
    return [item["name"] for key in keys if isinstance(doc.get(key), list)
            for item in doc[key] if isinstance(item, dict) and isinstance(item.get("name"), str)]


def _check_unique_names(doc: dict[str, Any], path, *keys: str) -> None:
    """Channel names are unique across the arrays ``keys`` (other tables refer to channels by name)."""
    seen: set[str] = set()
    for key in keys:
        for k, item in enumerate(doc.get(key) if isinstance(doc.get(key), list) else []):
            name = item.get("name") if isinstance(item, dict) else None
            if isinstance(name, str) and name in seen:
                raise ConfigError(path, f"{key}[{k}].name", f"duplicate name {name!r}")
            seen.add(name)


def _defaults_and_channels(defaults: dict[str, Any], channels: list[str]) -> dict[str, Any]:
    """A table of default keys plus one optional sub-table per channel with the same keys."""
    return table({**defaults, **{name: table(defaults) for name in channels}}, **{REFERENCE: True})


def _sub_tables(channels: list[str], item: dict[str, Any]) -> dict[str, Any]:
    """A table of optional sub-tables, one per channel named in ``channels``."""
    return table({name: item for name in channels}, **{REFERENCE: True})


def mcu_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a microcontroller rig file (docs/rigs.md)."""
    servos, sensors = _names(doc, "servos"), _names(doc, "strain", "load")
    channel = table({"name": string(), "unit": string(), "gain": _CALIBRATION | {"not": {"const": 0}, EXPECTED: (
        f"a non-zero number in [-{MAX_CALIBRATION:g}, {MAX_CALIBRATION:g}]")},
        "offset_counts": number(-2**31, 2**31 - 1, expected="a count in the int32 range"),
        "adc_bits": integer(2, 32)}, ["name", "unit", "gain"])
    physics_source = table({"signal": one_of("strain", "q", "tau", "base_wrench", "ext_wrench"), "joint": string(),
                            "index": integer(0, 5, expected="a wrench component 0..5 (fx, fy, fz, mx, my, mz)"),
                            "scale": _CALIBRATION}, ["signal"])
    return table({
        "rig": table({"kind": {"const": "mcu"}, "name": string(),
                      "protocol_version": one_of(p.PROTOCOL_VERSION, expected=f"{p.PROTOCOL_VERSION} (this build's "
                                                                              "protocol)")},
                     ["name", "protocol_version"]),
        "serial": table({"port": string("a serial port name"),
                         "baud": integer(300, 20_000_000, expected="a baud rate from 300 to 20000000")},
                        ["port", "baud"]),
        "rates": table({
            "command_hz": number(above=0.0, maximum=MAX_SAMPLE_RATE_HZ,
                                 expected=f"a rate in (0, {MAX_SAMPLE_RATE_HZ}] Hz (the device's loop rate)"),
            "telemetry_hz": integer(1, MAX_SAMPLE_RATE_HZ, expected=f"an integer from 1 to {MAX_SAMPLE_RATE_HZ} "
                                                                    "Hz (the firmware's highest sample rate)"),
            "samples_per_frame": integer(1, 255),
            "setpoints": one_of(*SETPOINT_MODES),
            "heartbeat_hz": number(MIN_HEARTBEAT_HZ, MAX_SAMPLE_RATE_HZ, expected=(
                f"a rate in [{MIN_HEARTBEAT_HZ:g}, {MAX_SAMPLE_RATE_HZ}] Hz ({HEARTBEATS_TO_LINK_LOSS} missed "
                f"heartbeats must show a lost link within {MAX_LINK_LOSS_S:g} s)"))},
            ["command_hz", "telemetry_hz", "samples_per_frame"]),
        "watchdog": table({"timeout_s": number(0.001, 65.535, expected="a timeout from 0.001 to 65.535 s")},
                          ["timeout_s"]),
        "servos": array(table({
            "name": string(), "unit": one_of("us", "ticks"), "center": _RAW,
            "gain": _positive(MAX_RAW, "raw units per rad"),
            "direction": _DIRECTION, "min_raw": _RAW, "max_raw": _RAW, "min_rad": _ANGLE, "max_rad": _ANGLE,
            "max_rate_rad_s": _SERVO_RATE, "neutral_rad": _ANGLE},
            ["name", "unit", "center", "gain", "direction", "min_raw", "max_raw", "min_rad", "max_rad",
             "max_rate_rad_s"]), 1, 255, expected="1 to 255 [[servos]] tables"),
        "joints": _joints(servos),
        "strain": array(channel, 0, 255),
        "load": array(channel, 0, 255),
        "emulator": table({
            "plant": one_of("kinematic", "physics"), "seed": _SEED,
            "firmware_version": array(integer(0, 255), 3, 3, expected="[major, minor, patch], integers 0..255"),
            "servo": _defaults_and_channels({"max_rate_rad_s": _SERVO_RATE, "time_constant_s": _TIME_CONSTANT,
                                             "deadband_rad": number(0.0, MAX_ANGLE_RAD)}, servos),
            "sensors": _defaults_and_channels({"gain": _CALIBRATION, "offset": _CALIBRATION,
                                               "noise_std": number(0.0, MAX_CALIBRATION),
                                               "drift_per_s": _CALIBRATION}, sensors),
            "kinematic": _sub_tables(sensors, table({"servos": _sub_tables(servos, _CALIBRATION),
                                                     "bias": _CALIBRATION})),
            "physics": table({"robot": string("a robot file name"), "overrides": {"type": "object"},
                              "dt": number(above=0.0, maximum=1.0, expected="a time step in (0, 1] s"),
                              "integrator": one_of(*INTEGRATORS), "clock": one_of("wall", "samples"),
                              "sensors": _sub_tables(sensors, physics_source)}, ["robot"]),
        }),
        "feedback": feedback_schema(_names(doc, "load"), _names(doc, "strain") + servos),
    }, ["rig", "serial", "rates", "watchdog", "servos"])


#: Longest age limit and stale time of `[feedback]`, s: beyond a second a measurement is no longer part of the loop.
MAX_FEEDBACK_AGE_S = 1.0
#: Largest wrench bound of `[feedback.guard]`: N and N m (a bench rig's F/T sensor reads far less).
MAX_FEEDBACK_WRENCH = 1e4
#: Largest gravity of `[feedback]`, m/s^2 (ten times the Earth's: a bench rig stands on a planet)
MAX_GRAVITY = 100.0
#: The measured wrench's channels, in order: force x, y, z (N), moment x, y, z (N m).
WRENCH_COMPONENTS = ("fx", "fy", "fz", "mx", "my", "mz")


def feedback_schema(load_names: list[str], angle_names: list[str]) -> dict[str, Any]:
    """The `[feedback]` table of a rig file (docs/rigs.md, docs/closed-loop.md): ``mms serve --feedback``. Its
    wrench channels must be `[[load]]` channels of the rig, its joints' channels `[[strain]]` or `[[servos]]`
    channels (a channel the rig does not measure is refused with the channels it has)."""
    seconds = number(above=0.0, maximum=MAX_FEEDBACK_AGE_S, expected=f"a time in (0, {MAX_FEEDBACK_AGE_S:g}] s")
    channel = one_of(*load_names, expected=f"a [[load]] channel of this rig ({', '.join(load_names) or 'it has none'})")
    bound = number(above=0.0, maximum=MAX_FEEDBACK_WRENCH, expected=f"a bound in (0, {MAX_FEEDBACK_WRENCH:g}]")
    return table({
        "max_age_s": seconds, "stale_s": seconds,
        "latency_s": number(0.0, MAX_FEEDBACK_AGE_S, expected=f"a latency in [0, {MAX_FEEDBACK_AGE_S:g}] s"),
        "compensation": one_of("extrapolate", "periodic", "none"),
        "rate_window_s": seconds,
        "period_s": number(above=0.0, maximum=60.0, expected="the drive's period in (0, 60] s"),
        "periods": integer(1, 1000), "harmonics": integer(1, 1000),
        "tare_s": number(0.0, 10.0, expected="a time in [0, 10] s"),
        "gravity": number(0.0, MAX_GRAVITY, expected=f"a gravity in [0, {MAX_GRAVITY:g}] m/s^2"),
        "sensor_delay_samples": integer(0, 1000),
        "smoothing_s": number(0.0, MAX_FEEDBACK_AGE_S, expected=f"a window in [0, {MAX_FEEDBACK_AGE_S:g}] s"),
        "mean": {"type": "boolean", EXPECTED: "true or false"},
        "frame": one_of("body", "averaged"),
        "average": one_of("median", "mean"),
        "wrench": table({
            "channels": array(channel, len(WRENCH_COMPONENTS), len(WRENCH_COMPONENTS),
                              expected="six [[load]] channels: fx, fy, fz (N), mx, my, mz (N m), body frame"),
            "left_out": array(channel, 0, len(WRENCH_COMPONENTS) - 1, expected="at most five of the channels"),
            "body": integer(0, 100_000), "scale": _CALIBRATION | {"not": {"const": 0}, EXPECTED: (
                f"a non-zero number in [-{MAX_CALIBRATION:g}, {MAX_CALIBRATION:g}]")}}, ["channels"]),
        "joints": {"type": "object", "additionalProperties": table({
            "channel": one_of(*angle_names, expected=("a [[strain]] or [[servos]] channel of this rig "
                                                      f"({', '.join(angle_names) or 'it has none'})")),
            "scale": _CALIBRATION | {"not": {"const": 0}, EXPECTED: (
                f"a non-zero number in [-{MAX_CALIBRATION:g}, {MAX_CALIBRATION:g}]")}}, ["channel"])},
        "guard": table({"max_force_n": bound, "max_moment_nm": bound,
                        "max_growth": number(above=1.0, maximum=1e3, expected="a factor in (1, 1000]"),
                        "growth_window_s": seconds}),
    }, ["wrench"])


def dxl_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a Dynamixel rig file (docs/dynamixel.md)."""
    servos = _names(doc, "servos")
    eeprom = {item.name: integer(item.lo, item.hi) for item in dxl.ITEMS.values()
              if item.name in ("return_delay_time", "velocity_limit", "current_limit", "operating_mode", "drive_mode")}
    truth = {"inertia_kg_m2": _positive(MAX_HORN_INERTIA, "kg m^2"), "damping_n_m_s": _positive(MAX_HORN_DAMPING,
                                                                                              "N m s/rad"),
             "torque_constant_n_m_a": _positive(MAX_TORQUE_CONSTANT, "N m/A"),
             "position_time_constant_s": _positive(MAX_TIME_CONSTANT_S, "s"),
             "velocity_time_constant_s": _positive(MAX_TIME_CONSTANT_S, "s"), "missing": BOOLEAN}
    return table({
        "rig": table({"kind": {"const": "dynamixel"}, "name": string()}, ["kind", "name"]),
        "bus": table({"port": string("a serial port name"),
                      "baud": one_of(*sorted(dxl.BAUD_RATES.values()),
                                     expected=f"one of the X series' baud rates {sorted(dxl.BAUD_RATES.values())}"),
                      "protocol": one_of(2, expected="2 (Protocol 2.0)")}, ["port", "baud"]),
        "rates": table({"command_hz": number(above=0.0, maximum=MAX_SAMPLE_RATE_HZ,
                                             expected=f"a rate in (0, {MAX_SAMPLE_RATE_HZ}] Hz")}),
        "watchdog": table({"timeout_s": number(0.02, 127 * dxl.BUS_WATCHDOG_UNIT_S,
                                               expected="0.02 to 2.54 s (the servo's bus watchdog, 20 ms units)")}),
        "servos": array(table({
            "name": string(), "id": integer(0, dxl.MAX_ID, expected=f"an ID 0..{dxl.MAX_ID}"),
            "model": one_of(*sorted(dxl.MODEL_NUMBERS)), "center_ticks": integer(0, 4095), "direction": _DIRECTION,
            "min_rad": _ANGLE, "max_rad": _ANGLE, "max_rate_rad_s": _SERVO_RATE, "neutral_rad": _ANGLE, **eeprom},
            ["name", "id", "min_rad", "max_rad", "max_rate_rad_s"]), 1, dxl.MAX_ID + 1,
            expected=f"1 to {dxl.MAX_ID + 1} [[servos]] tables"),
        "joints": _joints(servos),
        "microcontroller": table({"rig": string("a rig file name"), "port": string("a serial port name"),
                                  "servo_channels": one_of("mirror", "neutral")}),
        "emulator": table({"seed": _SEED, "servo": _defaults_and_channels(truth, servos)}),
    }, ["rig", "bus", "servos"])


def check_mcu_rig(doc: dict[str, Any], path: str | Path | None) -> None:
    """Refuse a microcontroller rig file that breaks :func:`mcu_schema` or the device's limits (one line)."""
    refuse_other_kind(doc, path, "rig")
    _check_unique_names(doc, path, "servos")
    _check_unique_names(doc, path, "strain", "load")
    check_schema(doc, mcu_schema(doc), path)
    rates, watchdog_s = doc["rates"], doc["watchdog"]["timeout_s"]
    _check_setpoint_rate(rates["command_hz"], watchdog_s, path)
    n_servo, n_strain, n_load = (len(doc.get(key, [])) for key in ("servos", "strain", "load"))
    samples = rates["samples_per_frame"]
    if samples > p.max_samples_per_frame(n_servo, n_strain, n_load):
        raise ConfigError(path, "rates.samples_per_frame", f"got {samples}, expected an integer from 1 to "
                          f"{p.max_samples_per_frame(n_servo, n_strain, n_load)} (what fits in one frame)")
    to_device, to_host = link_load(rates["command_hz"], rates["telemetry_hz"], samples,
                                   rates.get("heartbeat_hz", DEFAULT_HEARTBEAT_HZ), n_servo, n_strain, n_load)
    capacity = doc["serial"]["baud"] / BITS_PER_BYTE
    for key, load in (("rates.command_hz", to_device), ("rates.telemetry_hz", to_host)):
        if load > MAX_LINK_LOAD * capacity:
            raise ConfigError(path, key, f"needs {load:.0f} bytes/s on a link of {capacity:.0f} bytes/s "
                              f"(serial.baud {doc['serial']['baud']}); expected at most {MAX_LINK_LOAD:.0%} of it")


def link_load(command_hz: float, telemetry_hz: float, samples_per_frame: int, heartbeat_hz: float,
              n_servo: int, n_strain: int, n_load: int) -> tuple[float, float]:
    """Bytes per second on the wire (framed, COBS-encoded, delimited) host -> device (setpoints) and device ->
    host (telemetry frames and heartbeats) of a microcontroller rig, from the real codec."""
    setpoints = len(p.encode(p.Setpoints((0.0,) * n_servo), 0))
    sample = p.TelemetrySample(0, (0.0,) * n_servo, (0,) * n_strain, (0,) * n_load)
    telemetry = len(p.encode(p.Telemetry(0, n_servo, n_strain, n_load, (sample,) * samples_per_frame), 0))
    heartbeat = len(p.encode(p.Heartbeat(0, 0), 0))
    return command_hz * setpoints, telemetry_hz / samples_per_frame * telemetry + heartbeat_hz * heartbeat


def check_dxl_rig(doc: dict[str, Any], path: str | Path | None) -> None:
    """Refuse a Dynamixel rig file that breaks :func:`dxl_schema` or the bus's limits (one line)."""
    refuse_other_kind(doc, path, "rig")
    _check_unique_names(doc, path, "servos")
    check_schema(doc, dxl_schema(doc), path)
    command_hz = doc.get("rates", {}).get("command_hz", DXL_DEFAULT_COMMAND_HZ)
    _check_setpoint_rate(command_hz, doc.get("watchdog", {}).get("timeout_s", DXL_DEFAULT_WATCHDOG_S), path)
    servos = doc["servos"]
    cycle_s = dxl_cycle_s(doc["bus"]["baud"], [s["id"] for s in servos],
                          [s.get("return_delay_time", DXL_FACTORY_RETURN_DELAY) for s in servos])
    if command_hz * cycle_s > MAX_LINK_LOAD:
        raise ConfigError(path, "rates.command_hz", f"got {command_hz:g}, expected at most "
                          f"{MAX_LINK_LOAD / cycle_s:.0f} Hz: one cycle (sync write + sync read of "
                          f"{len(servos)} servos) takes {cycle_s * 1e3:.3g} ms at {doc['bus']['baud']} bit/s")


#: Defaults of a Dynamixel rig file (docs/dynamixel.md): command rate, Hz; bus watchdog, s; the servos'
#: factory Return Delay Time, 2 µs units.
DXL_DEFAULT_COMMAND_HZ = 200.0
DXL_DEFAULT_WATCHDOG_S = 0.1
DXL_FACTORY_RETURN_DELAY = 250
#: Return Delay Time unit, s.
DXL_RETURN_DELAY_UNIT_S = 2e-6


def dxl_cycle_s(baud: int, ids: list[int], return_delays: list[int]) -> float:
    """Time on the bus of one driver cycle, s: the sync write of the goal positions, the sync read of present
    current, velocity and position, each servo's status packet and its return delay."""
    goal = dxl.ITEMS["goal_position"]
    first, last = dxl.ITEMS["present_current"], dxl.ITEMS["present_position"]
    span = last.address + last.size - first.address
    wire = (len(dxl.sync_write(goal.address, goal.size, {i: bytes(goal.size) for i in ids}))
            + len(dxl.sync_read(first.address, span, ids))
            + sum(len(dxl.encode_status(i, 0, bytes(span))) for i in ids))
    return wire * BITS_PER_BYTE / baud + sum(return_delays) * DXL_RETURN_DELAY_UNIT_S


def _check_setpoint_rate(command_hz: float, watchdog_s: float, path) -> None:
    if command_hz * watchdog_s < SETPOINTS_PER_WATCHDOG:
        raise ConfigError(path, "rates.command_hz", f"got {command_hz:g}, expected at least "
                          f"{SETPOINTS_PER_WATCHDOG / watchdog_s:g} Hz ({SETPOINTS_PER_WATCHDOG} setpoints per "
                          f"watchdog.timeout_s = {watchdog_s:g} s, so that one lost frame does not trip it)")
