"""Dynamixel backend of the servo driver: a Protocol 2.0 servo bus behind the driver's link interface.

``mms drive`` talks to its device through a :class:`hil.drive.links.base.Link`. :class:`DynamixelLink` is the link
for a rig file of ``kind = "dynamixel"`` (hil/drive/links/factory.py picks it) and translates the driver's messages (firmware_interface.protocol) to bus transactions:

* handshake (configure): PING every servo (model number checked against the rig), torque off, the rig's EEPROM
  values and position limits written, the Bus Watchdog set to the rig's watchdog timeout;
* SETPOINTS (raw = goal ticks): through the last line (:class:`hil.drive.inputs.SetpointLimits`, the limit
  ticks; a frame with a value that is not finite is not written), rounded to ticks, torque enabled on the first one (after the goal, so nothing jumps), then
  one SYNC_WRITE of goal positions and one SYNC_READ of present current, velocity and position; the status
  packets become a TELEMETRY packet (servo = present position ticks) for the driver;
* HEARTBEAT (the driver's heartbeat clock): a SYNC_READ only, so telemetry flows while inactive;
* ESTOP: goals to neutral at the rig's rate limit (Profile Velocity), further setpoints ignored until
  ESTOP_RESET (answered with an ACK, bus watchdogs re-armed); the telemetry carries FLAG_ESTOP meanwhile;
* every 0.1 s, and after a status packet with the alert bit, the cycle reads Hardware Error Status and Bus
  Watchdog instead; a tripped bus watchdog (the host was silent too long: the servos stopped where they were)
  is counted, flagged (FLAG_WATCHDOG in the telemetry) and re-armed; a non-zero hardware error is reported
  (``counters()["hardware_error_status"]``, which the driver puts in hw/status) and raised to the driver as a
  device ESTOP (reason fault), since the servo has dropped its torque;
* close (cleanup, shutdown): torque off on every servo, read back to confirm (the driver ramps to neutral
  first).

The driver needs a :class:`firmware_interface.rigs.mcu.Rig`; :func:`firmware_interface.rigs.host.driver_rig` makes
one from the Dynamixel rig (servo raw unit = ticks, no strain/load channels on this link).
"""
from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field

import serial

from firmware_interface import dynamixel as dxl
from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import RAD_S_PER_VELOCITY_UNIT, DxlRig
from firmware_interface.rigs.host import limit_ticks
from firmware_interface.rigs.mcu import Rig
from hil.drive.inputs import SetpointLimits
from hil.drive.links.serial import LinkError, LinkTotals, open_port

#: Each handshake transaction waits this long for its status packet, s (a servo answers within its return
#: delay, <= 0.5 ms; the margin is for a loaded host or emulator, and only an absent servo ever waits it out).
TRANSACTION_TIMEOUT_S = 0.5
#: A cycle's status packets not all back within this are counted as a read timeout, s.
READ_TIMEOUT_S = 0.05
READ_ADDRESS, READ_BYTES = 126, 10          # present current (2), velocity (4), position (4)
#: Every this often (and after a status with the alert bit) the cycle reads addresses 70..98 instead:
#: Hardware Error Status (70) and Bus Watchdog (98), s.
HEALTH_PERIOD_S = 0.1
HEALTH_ADDRESS, HEALTH_BYTES = 70, 29
A_TORQUE, A_HW_ERROR, A_BUS_WATCHDOG, A_PROFILE_VELOCITY, A_GOAL = 64, 70, 98, 112, 116
A_MAX_POSITION, A_MIN_POSITION = 48, 52
#: At close, the torque-off write is read back; each attempt waits this long for the servos' replies, s.
TORQUE_OFF_WAIT_S, TORQUE_OFF_ATTEMPTS = 0.05, 3


@dataclass
class BusCounters:
    status_ok: int = 0
    status_errors: int = 0            # status packets with an error number (not just the alert bit)
    read_timeouts: int = 0            # cycles whose status packets did not all come back
    missing: dict = field(default_factory=dict)     # id -> cycles it did not answer
    watchdog_trips: int = 0           # bus watchdog trips seen (and re-armed)
    ignored_estop: int = 0            # setpoints ignored while the e-stop is latched
    late_replies: int = 0             # status packets of a timed-out cycle that came in the next one


class DynamixelLink:
    """A Protocol 2.0 bus with the interface of :class:`hil.drive.links.serial.SerialLink` (``state``: closed ->
    hello -> up; any port error -> closed)."""

    def __init__(self, dxl_rig: DxlRig, rig: Rig):
        self.dxl_rig = dxl_rig
        self.rig = rig
        self.ids = dxl_rig.ids
        self.limits = {s.id: limit_ticks(s) for s in dxl_rig.servos}
        self.neutral = {s.id: s.to_ticks(s.neutral_rad) for s in dxl_rig.servos}
        self.setpoint_limits = SetpointLimits(rig.servos)     # the last line before the port
        self.port_name: str | None = None
        self.port: serial.Serial | None = None
        self.parser = dxl.StreamParser()
        self.totals = LinkTotals()
        self.bus = BusCounters()
        self.state = "closed"
        self.tx_seq = 0
        self.rx_seq = 0
        self.device_info = None
        self.device_stats: p.LinkStats | None = None
        self.last_rx_s: float | None = None
        self.torque_on = False
        self.estop = False
        self.fault_reported = False
        self.hardware_errors: dict[int, int] = {}
        self.outstanding: tuple[str, float, dict] | None = None     # (what, sent at, id -> status packet)
        self.want_error_read = False
        self.next_health_s = 0.0
        self.watchdog_flag = False
        self.present_current_a: dict[int, float] = {}      # id -> A, from the last cycle (a load proxy)
        #: the telemetry's time stamps are this host's read times already (device_us): nothing to add
        self.servo_read_ns: int | None = None
        self.queue: list[p.Packet] = []
        self._t0 = time.monotonic()

    # ---- port ---------------------------------------------------------------------------------------
    def open(self, port_name: str, now_s: float) -> None:
        self.close()
        self.port = open_port(port_name, self.rig.baud)
        self.port_name = port_name
        self.parser = dxl.StreamParser()
        self.state = "hello"
        self.torque_on = False
        self.outstanding = None
        self.queue = []
        self.last_rx_s = None
        self.totals.connects += 1

    def close(self) -> None:
        """Torque off on every servo (confirmed by reading it back, best effort), then close the port."""
        if self.port is not None:
            try:
                if self.state == "up" and not self._torque_off():
                    print(f"mms drive: {self.port_name}: torque off not confirmed by every servo "
                          f"({TORQUE_OFF_ATTEMPTS} attempts)", file=sys.stderr, flush=True)
                self.port.close()
            except (serial.SerialException, OSError, LinkError):
                pass
        self.port = None
        self.state = "closed"
        self.torque_on = False

    def _torque_off(self) -> bool:
        """SYNC_WRITE torque off, then SYNC_READ Torque Enable until every servo reads 0 (retried). Only the
        read-back proves the bus took the write: a SYNC_WRITE has no status packets, and a port closed (or an
        emulator stopped) right after the write can lose it."""
        for _ in range(TORQUE_OFF_ATTEMPTS):
            self._write(dxl.sync_write(A_TORQUE, 1, {i: b"\x00" for i in self.ids}))
            self._write(dxl.sync_read(A_TORQUE, 1, self.ids))
            got: dict[int, int] = {}
            deadline = time.monotonic() + TORQUE_OFF_WAIT_S
            while time.monotonic() < deadline and len(got) < len(self.ids):
                for status in self._read():       # a cycle's late replies are longer: only the 1-byte reads count
                    if status.id in self.ids and len(status.data) == 1:
                        got[status.id] = status.data[0]
                time.sleep(1e-4)
            if len(got) == len(self.ids) and not any(got.values()):
                return True
        return False

    def fileno(self) -> int | None:
        return None if self.port is None else self.port.fileno()

    @property
    def up(self) -> bool:
        return self.state == "up"

    def _write(self, data: bytes) -> None:
        try:
            self.port.write(data)
        except serial.SerialTimeoutException:
            self.totals.write_timeouts += 1
            return
        except (serial.SerialException, OSError) as exc:
            raise LinkError(f"write to {self.port_name} failed: {exc}") from None
        self.totals.frames_sent += 1
        self.totals.bytes_sent += len(data)

    def _read(self) -> list[dxl.Packet]:
        try:
            data = self.port.read(65536)
        except (serial.SerialException, OSError) as exc:
            raise LinkError(f"read from {self.port_name} failed: {exc}") from None
        self.totals.bytes_rx += len(data)
        return [pk for pk in self.parser.feed(data) if pk.is_status] if data else []

    # ---- handshake (blocking, a few ms at 1 Mbaud) ------------------------------------------------------
    def _transact(self, data: bytes, servo_id: int, what: str) -> dxl.Packet:
        self._write(data)
        deadline = time.monotonic() + TRANSACTION_TIMEOUT_S
        while time.monotonic() < deadline:
            for packet in self._read():
                if packet.id == servo_id:
                    return packet
            time.sleep(1e-4)
        raise LinkError(f"{self.port_name}: servo {servo_id} did not answer {what} within "
                        f"{TRANSACTION_TIMEOUT_S:.2f} s")

    def _write_checked(self, servo_id: int, name: str, value: int) -> None:
        item = dxl.ITEMS[name]
        status = self._transact(dxl.write(servo_id, item.address, dxl.pack_value(value, item.size)), servo_id,
                                f"WRITE {name}")
        if status.error & 0x7F:
            raise LinkError(f"servo {servo_id} refused {name} = {value} (status error {status.error & 0x7F})")

    def handshake_step(self, packets: list[p.Packet], now_s: float) -> list[p.Packet]:
        if self.state != "hello":
            return packets
        for servo in self.dxl_rig.servos:
            status = self._transact(dxl.ping(servo.id), servo.id, "PING")
            model = int.from_bytes(status.data[:2], "little")
            if model != dxl.MODEL_NUMBERS[servo.model]:
                raise LinkError(f"servo {servo.id} is model number {model}, the rig file says {servo.model} "
                                f"({dxl.MODEL_NUMBERS[servo.model]})")
            self._write_checked(servo.id, "torque_enable", 0)
            self._write_checked(servo.id, "bus_watchdog", 0)
            for name, value in servo.eeprom.items():
                self._write_checked(servo.id, name, value)
            lo, hi = self.limits[servo.id]
            self._write_checked(servo.id, "max_position_limit", hi)
            self._write_checked(servo.id, "min_position_limit", lo)
            self._write_checked(servo.id, "profile_velocity", 0)
            self._write_checked(servo.id, "bus_watchdog", self.watchdog_units)
        self.state = "up"
        self.last_rx_s = now_s
        return packets

    # ---- the driver's messages ----------------------------------------------------------------------
    def send(self, message: p.Message, t_us: int = 0) -> int | None:
        if self.port is None:
            raise LinkError("port not open")
        if isinstance(message, p.Setpoints):
            raw = self.setpoint_limits.apply(message.raw)
            if raw is None:
                return None
            message = p.Setpoints(raw)
        seq = self.tx_seq
        self.tx_seq = (self.tx_seq + 1) % p.SEQ_MODULUS
        now = time.monotonic()
        if isinstance(message, p.Setpoints):
            if self.estop:
                self.bus.ignored_estop += 1
            else:
                self._setpoints(message.raw)
            self._start_read(now)
        elif isinstance(message, p.Heartbeat):
            self._start_read(now)
        elif isinstance(message, p.EStop):
            self.estop = True
            self._to_neutral()
        elif isinstance(message, p.EStopReset):
            self.estop = False
            self.fault_reported = False
            self._write(dxl.sync_write(A_PROFILE_VELOCITY, 4, {i: dxl.pack_value(0, 4) for i in self.ids}))
            self._rearm_watchdog()
            self._emit(p.Ack(p.T_ESTOP_RESET, seq))
        elif isinstance(message, p.GetLinkStats):
            c = self.parser.counters
            self._emit(p.LinkStats(frames_rx=self.bus.status_ok, frames_tx=self.totals.frames_sent,
                                   crc_errors=c.crc_errors, framing_errors=c.bad_length, oversize=0,
                                   malformed=c.malformed, seq_gaps=self.bus.read_timeouts, tx_dropped=0,
                                   watchdog_trips=self.bus.watchdog_trips))
        return seq

    def _rearm_watchdog(self) -> None:
        """Clear a tripped Bus Watchdog (write 0) and set it again to the rig's timeout."""
        self._write(dxl.sync_write(A_BUS_WATCHDOG, 1, {i: b"\x00" for i in self.ids}))
        self._write(dxl.sync_write(A_BUS_WATCHDOG, 1, {i: bytes([self.watchdog_units]) for i in self.ids}))

    @property
    def watchdog_units(self) -> int:
        return max(1, min(127, round(self.dxl_rig.watchdog_timeout_s / dxl.BUS_WATCHDOG_UNIT_S)))

    def _setpoints(self, raw) -> None:
        """Goal ticks from setpoints that passed the last line (within the limit ticks, finite)."""
        goals = {servo_id: dxl.pack_value(int(round(value)), 4) for servo_id, value in zip(self.ids, raw)}
        self._write(dxl.sync_write(A_GOAL, 4, goals))
        if not self.torque_on:
            self._write(dxl.sync_write(A_TORQUE, 1, {i: b"\x01" for i in self.ids}))
            self.torque_on = True

    def _to_neutral(self) -> None:
        """Goals to neutral at each servo's rate limit (Profile Velocity), torque on so they get there."""
        velocity = {s.id: dxl.pack_value(max(1, int(s.max_rate_rad_s / RAD_S_PER_VELOCITY_UNIT)), 4)
                    for s in self.dxl_rig.servos}
        self._write(dxl.sync_write(A_PROFILE_VELOCITY, 4, velocity))
        self._write(dxl.sync_write(A_GOAL, 4, {i: dxl.pack_value(self.neutral[i], 4) for i in self.ids}))
        if not self.torque_on:
            self._write(dxl.sync_write(A_TORQUE, 1, {i: b"\x01" for i in self.ids}))
            self.torque_on = True

    def _start_read(self, now: float) -> None:
        if self.outstanding is not None:
            what, sent, got = self.outstanding
            if now - sent < READ_TIMEOUT_S:
                return                                        # the last cycle's replies are still due
            self.bus.read_timeouts += 1
            for i in self.ids:
                if i not in got:
                    self.bus.missing[i] = self.bus.missing.get(i, 0) + 1
        if self.want_error_read or now >= self.next_health_s:
            self.want_error_read = False
            self.next_health_s = now + HEALTH_PERIOD_S
            self._write(dxl.sync_read(HEALTH_ADDRESS, HEALTH_BYTES, self.ids))
            self.outstanding = ("health", now, {})
        else:
            self._write(dxl.sync_read(READ_ADDRESS, READ_BYTES, self.ids))
            self.outstanding = ("state", now, {})

    def _emit(self, message: p.Message) -> None:
        self.queue.append(p.Packet(self.rx_seq, int((time.monotonic() - self._t0) * 1e6) % p.TIME_MODULUS,
                                   message))
        self.rx_seq = (self.rx_seq + 1) % p.SEQ_MODULUS

    def receive(self, now_s: float) -> list[p.Packet]:
        if self.port is None:
            return []
        for status in self._read():
            self.last_rx_s = now_s
            if status.error & 0x7F:
                self.bus.status_errors += 1
            else:
                self.bus.status_ok += 1
            if status.error & dxl.ERR_ALERT:
                self.want_error_read = True
            if self.outstanding is None:
                continue
            what, sent, got = self.outstanding
            if not status.error & 0x7F and len(status.data) != (HEALTH_BYTES if what == "health" else READ_BYTES):
                self.bus.late_replies += 1            # the other read's reply, of a cycle that timed out
                continue
            if status.id in self.ids:
                got[status.id] = status
            if all(i in got for i in self.ids):
                self.outstanding = None
                self._cycle_done(what, got)
        out, self.queue = self.queue, []
        self.totals.frames_ok += len(out)
        return out

    def _cycle_done(self, what: str, got: dict[int, dxl.Packet]) -> None:
        if what == "health":
            tripped = []
            for i, status in got.items():
                if len(status.data) == HEALTH_BYTES:
                    self.hardware_errors[i] = status.data[0]
                    if dxl.to_signed(status.data[A_BUS_WATCHDOG - HEALTH_ADDRESS], 1) < 0:
                        tripped.append(i)
            if tripped:
                self.bus.watchdog_trips += 1
                self.watchdog_flag = True
                self._rearm_watchdog()
            if any(self.hardware_errors.values()) and not self.fault_reported:
                self.fault_reported = True
                self.estop = True
                self._emit(p.EStop(p.ESTOP_FAULT))
            return
        if any(len(got[i].data) != READ_BYTES for i in self.ids):
            self.bus.status_errors += 1
            return
        positions = tuple(float(dxl.to_signed(int.from_bytes(got[i].data[6:10], "little"), 4)) for i in self.ids)
        t_us = int((time.monotonic() - self._t0) * 1e6) % p.TIME_MODULUS
        flags = (p.FLAG_CONFIGURED | (p.FLAG_ESTOP if self.estop else 0)
                 | (p.FLAG_WATCHDOG if self.watchdog_flag else 0))
        self.watchdog_flag = False
        self.present_current_a = {i: dxl.to_signed(int.from_bytes(got[i].data[0:2], "little"), 2)
                                  * dxl.CURRENT_UNIT_A for i in self.ids}
        self._emit(p.Telemetry(flags, len(self.ids), 0, 0, (p.TelemetrySample(t_us, positions, (), ()),)))

    # ---- counters (the driver puts these in hw/status "link") -------------------------------------------
    def counters(self) -> dict:
        c, t, b = self.parser.counters, self.totals, self.bus
        return {"frames_ok": t.frames_ok, "crc_errors": c.crc_errors, "framing_errors": c.bad_length,
                "oversize": 0, "malformed": c.malformed, "seq_gaps": b.read_timeouts, "seq_repeats": 0,
                "bytes_rx": t.bytes_rx, "frames_sent": t.frames_sent, "bytes_sent": t.bytes_sent,
                "write_timeouts": t.write_timeouts, "reconnects": t.reconnects, "link_losses": t.link_losses,
                "nacks": dict(t.nacks), "bus": "dynamixel",
                "status_ok": b.status_ok, "status_errors": b.status_errors, "read_timeouts": b.read_timeouts,
                "missing": {str(k): v for k, v in b.missing.items()}, "clamped": self.setpoint_limits.clamped,
                "last_line": self.setpoint_limits.counters(),
                "watchdog_trips": b.watchdog_trips, "ignored_estop": b.ignored_estop,
                "late_replies": b.late_replies,
                "hardware_error_status": {str(k): v for k, v in self.hardware_errors.items()}}

    def emulators(self) -> tuple:
        return ()                                   # the bus's emulator is the device's: the driver runs it
