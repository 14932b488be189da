"""Dynamixel bus emulator: X-series smart servos (Protocol 2.0) on one pseudo-terminal, byte-paced like the bus.

Run ``python -m firmware_interface.dynamixel_emulator --rig configs/rigs/flapper_dynamixel_rig.toml``; the first
stdout line is the pty path, as with ``mms emulate`` (docs/dynamixel.md). The official ``dynamixel_sdk`` talks to
it unchanged.

Layers (protocol split from transport):

* :mod:`firmware_interface.dynamixel` — the codec and the control-table rules (pure);
* :class:`ServoModel` — one servo's motion: position loop, velocity limit, motor inertia and damping, current;
* :class:`Bus` — the servos' firmware, transport-free: ``receive(bytes, now)`` returns status packets with the
  wire time each may start (return delay, one servo after the other as on a half-duplex bus);
* :class:`DynamixelEmulator` — a :class:`firmware_interface.pty_device.PtyDevice` (the pty, 10 bits per byte at
  the baud rate both ways, the loop, signals and statistics, shared with ``mms emulate``) running the bus, with
  fault injection and, with ``--applied-log FILE``, a JSON line per goal position applied or refused.

The rig file format (``kind = "dynamixel"``) is loaded by :func:`load_dxl_rig`; docs/dynamixel.md documents it.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

from sim.cli_options import add_rig
from sim.config import ConfigError

from firmware_interface import dynamixel as dxl
from firmware_interface.command import module_main
from firmware_interface.pty_device import (AppliedLog, PtyDevice, add_applied_log_argument, line_fault,
                                           open_applied_log, serve)
from firmware_interface.rigs.dynamixel import RAD_S_PER_VELOCITY_UNIT, TICKS_PER_RAD, DxlRig, DxlServo, load_dxl_rig

#: Servo dynamics are integrated in steps no longer than this, s (the servo's own control loop is faster;
#: the lag and limits below are what matters at the bus rates of interest).
MAX_STEP_S = 1e-3
#: A partial packet older than this, with the line idle, is abandoned (a servo's receive timeout), s.
RX_IDLE_EXPIRE_S = 0.05
#: The loop never sleeps longer than this without looking at the port, s.
MAX_IDLE_S = 1e-3
#: After REBOOT a servo answers nothing for this long, s (the real one takes a few hundred ms; kept short).
REBOOT_S = 0.05
#: Current held at the limit for this long trips the overload error, s (the X series' overload detection).
OVERLOAD_S = 1.0
#: Status error numbers as named in the applied log.
ERROR_NAMES = {dxl.ERR_RESULT_FAIL: "result_fail", dxl.ERR_INSTRUCTION: "instruction", dxl.ERR_CRC: "crc",
               dxl.ERR_DATA_RANGE: "data_range", dxl.ERR_DATA_LENGTH: "data_length", dxl.ERR_DATA_LIMIT: "data_limit",
               dxl.ERR_ACCESS: "access"}
GOAL_POSITION = dxl.ITEMS["goal_position"]


# -- one servo -----------------------------------------------------------------------------------------------------
class ServoModel:
    """A servo's control table plus its mechanics (angle ``theta`` rad and rate ``omega`` rad/s at the horn,
    absolute: 0 rad = 0 ticks). Present current (A) is ``(J dω/dt + b ω) / kt``: the torque the motor makes,
    a load proxy as the real servo's current sense is."""

    def __init__(self, servo: DxlServo):
        self.config = servo
        self.truth = servo.truth
        self.table = dxl.ControlTable(overrides={"id": servo.id, "model_number": dxl.MODEL_NUMBERS[servo.model],
                                                 **servo.eeprom})
        self.theta = servo.to_ticks(servo.neutral_rad) / TICKS_PER_RAD   # rad, where the horn rests at power-up
        self.omega = 0.0                                                    # rad/s
        self.current_a = 0.0
        self.saturated_s = 0.0
        self.t = 0.0
        self.last_contact_s = 0.0
        self.booting_until_s = -math.inf
        self._publish()
        self.table.set("goal_position", self.table.get("present_position"))

    @property
    def id(self) -> int:
        return self.table.get("id")

    def reboot(self, now: float) -> None:
        self.table.reset()
        self.table.set("goal_position", self.table.get("present_position"))
        self.booting_until_s = now + REBOOT_S

    def hardware_error(self, bits: int) -> None:
        """Latch hardware error ``bits``; the shutdown setting (address 63) says which ones drop the torque."""
        self.table.set("hardware_error_status", self.table.get("hardware_error_status") | bits)
        if bits & self.table.get("shutdown"):
            self.table.set("torque_enable", 0)

    def advance(self, now: float) -> None:
        """Integrate the mechanics from the last call to ``now`` (s, device clock)."""
        while self.t < now:
            dt = min(MAX_STEP_S, now - self.t)
            self._step(dt)
            self.t += dt
        self._publish()

    def _step(self, dt: float) -> None:
        tr, table = self.truth, self.table
        omega0 = self.omega
        if table.get("torque_enable") and table.get("operating_mode") in (3, 4):
            goal = table.get("goal_position") / TICKS_PER_RAD
            v_max = table.get("velocity_limit") * RAD_S_PER_VELOCITY_UNIT
            profile = table.get("profile_velocity")
            if profile:
                v_max = min(v_max, profile * RAD_S_PER_VELOCITY_UNIT)
            target = max(-v_max, min(v_max, (goal - self.theta) / tr.position_time_constant_s))
            alpha = (target - omega0) * -math.expm1(-dt / tr.velocity_time_constant_s) / dt
            torque = tr.inertia_kg_m2 * alpha + tr.damping_n_m_s * omega0
            i_max = table.get("current_limit") * dxl.CURRENT_UNIT_A
            current = torque / tr.torque_constant_n_m_a
            if abs(current) > i_max:
                current = math.copysign(i_max, current)
                alpha = (current * tr.torque_constant_n_m_a - tr.damping_n_m_s * omega0) / tr.inertia_kg_m2
                self.saturated_s += dt
            else:
                self.saturated_s = 0.0
            self.current_a = current
            self.omega = omega0 + alpha * dt
            if self.saturated_s > OVERLOAD_S:
                self.hardware_error(dxl.HW_OVERLOAD)
        else:
            self.current_a = 0.0
            self.saturated_s = 0.0
            self.omega = omega0 * math.exp(-tr.damping_n_m_s / tr.inertia_kg_m2 * dt)   # coasting
        self.theta += 0.5 * (omega0 + self.omega) * dt

    def check_bus_watchdog(self, now: float) -> None:
        """Trip when no instruction reached this servo for the Bus Watchdog time (address 98, 20 ms units).
        Called by the loop after it has handled what the port delivered, so an emulator that was itself late
        (a loaded machine) does not trip on packets that were waiting in the pty."""
        period = self.table.get("bus_watchdog")
        if period > 0 and now - self.last_contact_s > period * dxl.BUS_WATCHDOG_UNIT_S:
            self.table.set("bus_watchdog", -1)                  # tripped: hold here, goals refused until reset
            self.table.set("goal_position", int(round(self.theta * TICKS_PER_RAD)))

    def _publish(self) -> None:
        t = self.table
        t.set("present_position", int(round(self.theta * TICKS_PER_RAD)))
        velocity = int(round(self.omega / RAD_S_PER_VELOCITY_UNIT))
        t.set("present_velocity", velocity)
        t.set("present_current", int(round(self.current_a / dxl.CURRENT_UNIT_A)))
        t.set("moving", int(abs(velocity) > t.get("moving_threshold")))
        t.set("realtime_tick", int(self.t * 1000) % 32768)

    def status_error(self, error: int) -> int:
        return error | (dxl.ERR_ALERT if self.table.get("hardware_error_status") else 0)


# -- the bus (firmware logic, transport-free) ----------------------------------------------------------------------
@dataclass
class Reply:
    """A status packet and the earliest wire time it may start (s, device clock)."""
    start_s: float
    data: bytes
    servo_id: int


class Bus:
    """Every servo on one half-duplex bus: instructions in, status packets out, in bus order."""

    def __init__(self, servos: list[DxlServo], baud: int):
        self.models = [ServoModel(s) for s in servos]
        self.missing = {s.id for s in servos if s.truth.missing}
        self.byte_s = 10.0 / baud
        self.parser = dxl.StreamParser()
        self.instructions = 0
        self.replies = 0
        self.ignored = 0
        self.bus_free_s = 0.0           # when the last status packet scheduled ends on the wire
        #: called with one record per Goal Position written to a servo, applied or refused (the applied log)
        self.goal_sink: Callable[[dict], None] | None = None
        self._instruction: tuple[int, int] = (0, 0)     # (number, instruction) of the packet being handled

    def servo(self, servo_id: int) -> ServoModel | None:
        for m in self.models:
            if m.id == servo_id and servo_id not in self.missing:
                return m
        return None

    def advance(self, now: float) -> None:
        for m in self.models:
            m.advance(now)
            m.check_bus_watchdog(now)

    def receive(self, data: bytes, now: float) -> list[Reply]:
        out = []
        for packet in self.parser.feed(data):
            out += self.handle(packet, now)
        return out

    def expire(self, now: float) -> list[Reply]:
        out = []
        for packet in self.parser.expire():
            out += self.handle(packet, now)
        return out

    def _schedule(self, replies: list[tuple[ServoModel, bytes]], now: float) -> list[Reply]:
        """Status packets one after the other, each after its servo's return delay."""
        out = []
        t = max(now, self.bus_free_s)
        for model, data in replies:
            t += model.table.get("return_delay_time") * dxl.RETURN_DELAY_UNIT_S
            out.append(Reply(t, data, model.id))
            t += len(data) * self.byte_s
        if out:
            self.bus_free_s = t
        self.replies += len(out)
        return out

    def handle(self, packet: dxl.Packet, now: float) -> list[Reply]:
        if packet.is_status:
            return []                                     # another device's status: not for us
        self.instructions += 1
        for m in self.models:
            m.advance(now)
        inst, params = packet.instruction, packet.params
        self._instruction = (self.instructions, inst)
        broadcast = packet.id == dxl.BROADCAST_ID
        alive = [m for m in self.models if m.id not in self.missing and now >= m.booting_until_s]
        targets = alive if broadcast else [m for m in alive if m.id == packet.id]
        if inst in (dxl.SYNC_READ, dxl.SYNC_WRITE, dxl.BULK_READ, dxl.BULK_WRITE):
            if not broadcast:
                return self._schedule([(m, self._status(m, dxl.ERR_INSTRUCTION)) for m in targets], now)
            return self._schedule(self._group(inst, params, alive, now), now)
        if not targets:
            return []
        replies = []
        for m in targets:
            m.last_contact_s = now
            reply = self._single(m, inst, params, broadcast, now)
            if reply is not None:
                replies.append((m, reply))
        return self._schedule(replies, now)

    def _status(self, m: ServoModel, error: int, data: bytes = b"") -> bytes:
        return dxl.encode_status(m.id, m.status_error(error), data)

    def _wants_reply(self, m: ServoModel, inst: int, broadcast: bool) -> bool:
        """Status Return Level (address 68): 0 PING only, 1 PING and READ, 2 everything; broadcasts only PING."""
        if inst == dxl.PING:
            return True
        if broadcast:
            return False
        level = m.table.get("status_return_level")
        return level == 2 or (level == 1 and inst == dxl.READ)

    def _single(self, m: ServoModel, inst: int, params: bytes, broadcast: bool, now: float) -> bytes | None:
        table = m.table
        error, data = dxl.ERR_NONE, b""
        if inst == dxl.PING:
            if params:
                error = dxl.ERR_DATA_LENGTH
            else:
                data = dxl.pack_value(table.get("model_number"), 2) + bytes([table.get("firmware_version")])
        elif inst == dxl.READ:
            parsed = dxl.parse_read(params)
            if parsed is None:
                error = dxl.ERR_DATA_LENGTH
            else:
                error, data = table.read(*parsed)
        elif inst == dxl.WRITE:
            parsed = dxl.parse_write(params)
            error = dxl.ERR_DATA_LENGTH if parsed is None else self._write(m, *parsed, now)
        elif inst == dxl.REBOOT:
            m.reboot(now)
        else:
            error = dxl.ERR_INSTRUCTION
        if not self._wants_reply(m, inst, broadcast):
            return None
        return self._status(m, error, data)

    def _group(self, inst: int, params: bytes, alive: list[ServoModel], now: float) -> list[tuple]:
        by_id = {m.id: m for m in alive}
        replies = []
        if inst == dxl.SYNC_READ:
            parsed = dxl.parse_sync_read(params)
            if parsed is None:
                return []
            address, length, ids = parsed
            for servo_id in ids:                                     # status packets in the order listed
                m = by_id.get(servo_id)
                if m is not None:
                    m.last_contact_s = now
                    error, data = m.table.read(address, length)
                    replies.append((m, self._status(m, error, data)))
        elif inst == dxl.BULK_READ:
            for servo_id, address, length in dxl.parse_bulk_read(params) or []:
                m = by_id.get(servo_id)
                if m is not None:
                    m.last_contact_s = now
                    error, data = m.table.read(address, length)
                    replies.append((m, self._status(m, error, data)))
        elif inst == dxl.SYNC_WRITE:
            parsed = dxl.parse_sync_write(params)
            if parsed is not None:
                address, _, data = parsed
                for servo_id, value in data.items():
                    m = by_id.get(servo_id)
                    if m is not None:
                        m.last_contact_s = now
                        self._write(m, address, value, now)         # no status: errors are silent, as on the bus
        elif inst == dxl.BULK_WRITE:
            for servo_id, address, value in dxl.parse_bulk_write(params) or []:
                m = by_id.get(servo_id)
                if m is not None:
                    m.last_contact_s = now
                    self._write(m, address, value, now)
        return replies

    def _write(self, m: ServoModel, address: int, data: bytes, now: float) -> int:
        """Write ``data`` at ``address`` of servo ``m``'s table; return the error number. A write that covers
        Goal Position is told to :attr:`goal_sink`: the goal (ticks), applied (stored) or refused (why)."""
        error = m.table.write(address, data)
        offset = GOAL_POSITION.address - address
        if self.goal_sink is not None and 0 <= offset and offset + GOAL_POSITION.size <= len(data):
            number, inst = self._instruction
            goal = int.from_bytes(data[offset:offset + GOAL_POSITION.size], "little", signed=True)
            record = {"seq": number, "t_us": int(round(now * 1e6)) % 2**32, "host_ns": time.time_ns(),
                      "instruction": dxl.INSTRUCTION_NAMES[inst], "id": m.id, "goal_position": goal,
                      "result": "applied" if error == dxl.ERR_NONE else "refused"}
            if error != dxl.ERR_NONE:
                record["reason"] = ERROR_NAMES.get(error, str(error))
            self.goal_sink(record)
        return error


# -- fault injection and the loop ----------------------------------------------------------------------------------
@dataclass
class DxlFaults:
    """Per status packet: dropped (never sent) or one bit flipped; plus hardware errors at given times."""
    drop_rate: float = 0.0
    corrupt_rate: float = 0.0
    hw_errors: list[tuple[float, int, int]] = field(default_factory=list)   # (at s, servo id, error bits)
    counts: dict = field(default_factory=lambda: {"dropped": 0, "corrupted": 0, "hw_errors": 0})


class DynamixelEmulator(PtyDevice):
    """The rig's servos on a pty: :class:`Bus` on a :class:`PtyDevice` (its pty link and loop), run by
    :meth:`run` (in a thread or process). ``applied_log``: where every Goal Position write is recorded (closed
    when the run ends)."""

    max_idle_s = MAX_IDLE_S

    def __init__(self, rig: DxlRig, *, baud: int | None = None, faults: DxlFaults | None = None,
                 seed: int | None = None, missing_ids: tuple[int, ...] = (), applied_log: AppliedLog | None = None):
        self.rig = rig
        self.faults = faults or DxlFaults()
        self.rng = random.Random(rig.seed if seed is None else seed)
        self.bus = Bus(rig.servos, baud or rig.baud)
        self.bus.missing |= set(missing_ids)
        self.applied_log = applied_log
        if applied_log is not None:
            self.bus.goal_sink = applied_log.write
        self.pending: list[Reply] = []
        self._hw_errors: list[tuple[float, int, int]] = []   # (at s, servo id, bits) still to come in this run
        self._last_rx_s = 0.0                                 # when the port last delivered bytes, s
        super().__init__(baud or rig.baud)

    def _release(self, now: float) -> None:
        """Hand every status packet whose start time has come to the UART (with the injected faults)."""
        due = [r for r in self.pending if r.start_s <= now]
        if not due:
            return
        self.pending = [r for r in self.pending if r.start_s > now]
        f = self.faults
        for reply in due:
            data = line_fault(reply.data, self.rng, f.drop_rate, f.corrupt_rate, f.counts)
            if data is not None:
                self.link.queue(data, reply.start_s)

    def on_start(self) -> None:
        self._hw_errors = sorted(self.faults.hw_errors)
        self._last_rx_s = 0.0

    def on_stop(self) -> None:
        if self.applied_log is not None:
            self.applied_log.close()

    def step(self, now: float) -> str | None:
        """One pass of the servos' loop: injected hardware errors, received bytes, mechanics, due replies."""
        bus = self.bus
        while self._hw_errors and self._hw_errors[0][0] <= now:
            _, servo_id, bits = self._hw_errors.pop(0)
            m = bus.servo(servo_id)
            if m is not None:
                m.advance(now)
                m.hardware_error(bits)
                self.faults.counts["hw_errors"] += 1
        data = self.link.read(now)
        if data:
            self._last_rx_s = now
            self.pending += bus.receive(data, now)
        elif bus.parser.pending and now - self._last_rx_s > RX_IDLE_EXPIRE_S:
            self.pending += bus.expire(now)
        bus.advance(now)
        self._release(now)
        return None

    def wake_s(self, now: float) -> float:
        return min([self.max_idle_s] + [r.start_s - now for r in self.pending])

    def stats(self) -> dict:
        b = self.bus
        return {"rig": self.rig.name, **self.link_stats(), "instructions": b.instructions,
                "status_packets": b.replies, "rx": b.parser.counters.as_dict(), "faults": self.faults.counts,
                "servos": {m.id: {"position": m.table.get("present_position"),
                                  "goal_position": m.table.get("goal_position"),
                                  "torque_enable": m.table.get("torque_enable"),
                                  "hardware_error_status": m.table.get("hardware_error_status")}
                           for m in b.models}}


# -- command line --------------------------------------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rig(parser, required=True, extra=' of [rig] kind = "dynamixel" (flapper-dynamixel)')
    parser.add_argument("--baud", type=int, default=None, help="override the rig's baud rate (bit/s)")
    parser.add_argument("--seed", type=int, default=None, help="fault-injection random seed (default: the rig's)")
    parser.add_argument("--duration", type=float, default=None, help="exit after this many seconds "
                        "(default: run until SIGINT/SIGTERM)")
    faults = parser.add_argument_group("fault injection")
    faults.add_argument("--drop-rate", type=float, default=0.0, help="probability a status packet is not sent")
    faults.add_argument("--corrupt-rate", type=float, default=0.0,
                        help="probability a status packet gets one bit flipped")
    faults.add_argument("--missing-ids", default="", metavar="ID,ID",
                        help="servo IDs that never answer (unplugged), comma-separated")
    faults.add_argument("--hw-error", action="append", default=[], metavar="T:ID:BITS",
                        help="at T s latch Hardware Error Status BITS on servo ID (e.g. 1.0:2:32 = overload); "
                        "repeatable")
    parser.add_argument("--stats", default=None, metavar="FILE",
                        help="also write the statistics as JSON to FILE, replaced whole every second and at exit")
    add_applied_log_argument(parser)


def _parse_ids(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ConfigError(None, "--missing-ids", f"got {text!r}, expected comma-separated integers") from None


def _parse_hw_error(text: str) -> tuple[float, int, int]:
    try:
        at, servo_id, bits = text.split(":")
        return float(at), int(servo_id), int(bits, 0)
    except ValueError:
        raise ConfigError(None, "--hw-error", f"got {text!r}, expected T:ID:BITS (e.g. 1.0:2:32)") from None


def run(args: argparse.Namespace) -> int:
    for name in ("drop_rate", "corrupt_rate"):
        if not 0.0 <= getattr(args, name) <= 1.0:
            raise ConfigError(None, "--" + name.replace("_", "-"), "expected a probability from 0 to 1")
    rig = load_dxl_rig(args.rig)
    if args.baud is not None and args.baud not in dxl.BAUD_RATES.values():
        raise ConfigError(None, "--baud", f"got {args.baud}, expected one of {sorted(dxl.BAUD_RATES.values())}")
    faults = DxlFaults(drop_rate=args.drop_rate, corrupt_rate=args.corrupt_rate,
                       hw_errors=[_parse_hw_error(h) for h in args.hw_error])
    missing_ids = _parse_ids(args.missing_ids)
    emulator = DynamixelEmulator(rig, baud=args.baud, faults=faults, seed=args.seed, missing_ids=missing_ids,
                                 applied_log=open_applied_log(args.applied_log))
    banner = f"rig {rig.name!r} on {emulator.slave_path} at {emulator.baud} baud, servo IDs {rig.ids}"
    return serve(emulator, "dynamixel emulator", banner, duration_s=args.duration, stats_path=args.stats)


def main(argv: list[str] | None = None) -> int:
    return module_main("python -m firmware_interface.dynamixel_emulator",
                       "emulate a Dynamixel (Protocol 2.0) servo bus on a pseudo-terminal", add_arguments, run,
                       "dynamixel emulator", argv)


if __name__ == "__main__":
    sys.exit(main())
