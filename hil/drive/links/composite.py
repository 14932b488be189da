"""Two serial devices behind one driver link: a Dynamixel servo bus and the microcontroller that samples the
sensors (docs/dynamixel.md, "Two devices, one `mms drive`").

A rig file of ``kind = "dynamixel"`` with a ``[microcontroller]`` table (configs/rigs/flapper_dynamixel_rig.toml)
moves its servos over the bus (:class:`hil.drive.links.dynamixel.DynamixelLink`) and reads its strain gauges and
tether sensor over the microcontroller's link (:class:`hil.drive.links.serial.SerialLink`, docs/protocol.md).
:class:`CompositeLink` gives the driver (hil/drive/driver.py) one link with the usual interface, so the driver's
lifecycle, limits, watchdogs and e-stop work unchanged:

* **telemetry**: one TELEMETRY per sensor frame (the microcontroller's clock, ``device_us``), each sample
  carrying the servo positions of the latest bus read (sample and hold: the bus is read once per command
  cycle, the sensors sampled at their own rate). The host time of that read goes out as ``servo_host_ns`` in
  hw/telemetry, so no one mistakes the held positions for samples of the sensors' clock;
* **setpoints** go to the bus; the microcontroller gets the same joint angles on its own servo channels
  (``servo_channels = "mirror"``: this feeds its watchdog, and its emulator computes the strains from the
  stroke) or neutral (``"neutral"``); on the rig its PWM outputs are not connected;
* **one e-stop for the rig**: an e-stop from either device (the microcontroller's button, a servo's hardware
  error) is sent on to the other, and a reset is acknowledged only when both devices have acknowledged it;
* **silence of either device** is silence of the link: ``last_rx_s`` is the older of the two, so the driver's
  link-silence rule trips when either goes quiet, and a port error on either takes the whole link down (the
  bus then turns the servos' torque off);
* the driver's rig is :func:`firmware_interface.rigs.host.two_device_rig` of the two rig files;
* with ``--emulate`` the composite owns the microcontroller's emulator (``mms emulate --rig <its rig file>``),
  started when the link opens and stopped when it closes; the driver owns the bus's.
"""
from __future__ import annotations

import dataclasses
import select
import time

from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import DxlRig
from firmware_interface.rigs.mcu import Rig
from hil.drive.links.dynamixel import DynamixelLink
from hil.drive.links.serial import SerialLink

#: ``[microcontroller] servo_channels`` (firmware_interface.rigs.dynamixel.load_dxl_rig checks it): "mirror"
#: sends the bus servos' joint angles, "neutral" the channels' neutral values
MIRROR = "mirror"


class ServoMirror:
    """Bus setpoints (goal ticks, one per bus servo) -> the microcontroller's setpoints (its raw units, one per
    channel): the same joint angle through each rig's joint map, clamped to the channel's limits. A channel
    whose joint no bus servo drives, or every channel in ``"neutral"`` mode, gets its neutral value."""

    def __init__(self, bus_rig: Rig, sensor_rig: Rig, mode: str):
        self.bus_rig, self.sensor_rig, self.mode = bus_rig, sensor_rig, mode
        bus_joint = {jm.joint: jm for jm in bus_rig.joints}
        #: per sensor channel: (bus servo index, bus joint map, sensor joint map) or None (neutral)
        self.routes = []
        for channel in sensor_rig.servos:
            sensor_jm = next((jm for jm in sensor_rig.joints if jm.servo == channel.name), None)
            bus_jm = bus_joint.get(sensor_jm.joint) if sensor_jm is not None else None
            if mode != MIRROR or bus_jm is None:
                self.routes.append(None)
                continue
            self.routes.append((bus_rig.servo_names.index(bus_jm.servo), bus_jm, sensor_jm))

    def __call__(self, bus_raw) -> tuple[float, ...]:
        out = []
        for channel, route in zip(self.sensor_rig.servos, self.routes):
            if route is None:
                out.append(channel.neutral_raw)
                continue
            k, bus_jm, sensor_jm = route
            joint = bus_jm.joint_angle(self.bus_rig.servos[k].to_rad(bus_raw[k]))
            angle = min(max(sensor_jm.servo_angle(joint), channel.min_rad), channel.max_rad)
            out.append(min(max(channel.to_raw(angle), channel.min_raw), channel.max_raw))
        return tuple(out)


class CompositeLink:
    """The bus and the sensor link as one link for the driver. ``state``: closed -> hello (the sensor link's
    handshake, then the bus's, then the first bus read) -> up; an error on either -> closed."""

    def __init__(self, dxl_rig: DxlRig, bus_rig: Rig, sensor_rig: Rig, *, servo_channels: str = MIRROR,
                 sensor_port: str | None = None, sensor_emulator=None):
        self.bus = DynamixelLink(dxl_rig, bus_rig)
        self.sensor = SerialLink(sensor_rig)
        self.mirror = ServoMirror(bus_rig, sensor_rig, servo_channels)
        self.sensor_port = sensor_port or sensor_rig.port
        self.sensor_emulator = sensor_emulator          # hil.drive.emulator_child.EmulatorChild or None
        self.totals = self.bus.totals                   # the driver's reconnect, loss and NACK totals
        self.state = "closed"
        self.device_stats: p.LinkStats | None = None    # the microcontroller's own counters
        self.servo_read_ns: int | None = None           # wall clock of the bus read held in the last telemetry
        self.held_servo: tuple[float, ...] | None = None    # goal-tick positions of the latest bus read
        self.held_flags = 0                             # bus FLAG_WATCHDOG since the last merged frame
        self.sensor_flags = 0                           # the microcontroller's own flags, latest
        self.handshake_packets: list[p.Packet] = []
        self.reset: dict | None = None                  # the e-stop reset awaiting both devices' answers
        self.tx_seq = 0
        self.rx_seq = 0
        self.frames_before_positions = 0
        self.estops_forwarded = 0
        self.stray_reset_answers = 0
        self.epoll: select.epoll | None = None

    # ---- port ---------------------------------------------------------------------------------------
    def open(self, port_name: str, now_s: float) -> None:
        """Open the bus at ``port_name``; the sensor port opens in :meth:`handshake_step` (its emulator, if
        any, is started here and may take a while to print its pty)."""
        self.close()
        self.epoll = select.epoll()
        self.bus.open(port_name, now_s)
        self.epoll.register(self.bus.fileno(), select.EPOLLIN)
        if self.sensor_emulator is not None and not self.sensor_emulator.alive:
            self.sensor_emulator.spawn(now_s)
        self.state = "hello"
        self.held_servo, self.held_flags, self.reset = None, 0, None
        self.handshake_packets = []

    def close(self) -> None:
        """The bus first (torque off, confirmed), then the sensor link and its emulator."""
        self.bus.close()
        self.sensor.close()
        if self.sensor_emulator is not None:
            self.sensor_emulator.stop()
        if self.epoll is not None:
            self.epoll.close()
            self.epoll = None
        self.state = "closed"

    def fileno(self) -> int | None:
        """An epoll descriptor over both ports: readable when either is (the driver polls one descriptor)."""
        return None if self.epoll is None else self.epoll.fileno()

    @property
    def up(self) -> bool:
        return self.state == "up"

    @property
    def port_name(self) -> str | None:
        if self.bus.port_name is None:
            return None
        return f"{self.bus.port_name} + {self.sensor.port_name or '(sensors not open)'}"

    @property
    def last_rx_s(self) -> float | None:
        """The older of the two devices' last receptions: either going quiet is the link going quiet."""
        times = (self.bus.last_rx_s, self.sensor.last_rx_s)
        return None if None in times else min(times)

    # ---- handshake ----------------------------------------------------------------------------------
    def handshake_step(self, packets: list[p.Packet], now_s: float) -> list[p.Packet]:
        """Sensor link first (its emulator may still be booting; the bus's watchdog must not run meanwhile),
        then the bus (blocking, a few ms), then one bus read so that the first frame has servo positions."""
        if self.state != "hello":
            return packets
        if self.sensor.port is None:
            path = self.sensor_port if self.sensor_emulator is None else self.sensor_emulator.poll_path(now_s)
            if path is None:
                return packets
            self.sensor.open(path, now_s)
            self.epoll.register(self.sensor.fileno(), select.EPOLLIN)
        rest = self.sensor.handshake_step(self.handshake_packets, now_s)
        self.handshake_packets = []
        self.frames_before_positions += sum(isinstance(pk.message, p.Telemetry) for pk in rest)
        if not self.sensor.up:
            return packets
        if self.bus.state == "hello":
            self.bus.handshake_step([], now_s)
        if self.held_servo is None:
            self.bus.send(p.Heartbeat(0, 0))            # a read (none while one is outstanding)
        else:
            self.state = "up"
        return packets

    # ---- the driver's messages ----------------------------------------------------------------------
    def send(self, message: p.Message, t_us: int = 0) -> int | None:
        """One message to the device(s) it concerns; its seq, or None when the bus's last line refused the
        setpoints (then the microcontroller gets none either; its mirrored values pass its own last line)."""
        if isinstance(message, p.Setpoints):
            if self.bus.send(message, t_us) is None:
                return None
            self.sensor.send(p.Setpoints(self.mirror(message.raw)), t_us)
            return self._next_seq()
        seq = self._next_seq()
        if isinstance(message, p.EStopReset):
            self.reset = {"seq": seq, "bus": self.bus.send(message, t_us), "sensor": self.sensor.send(message, t_us),
                          "acked": set()}
        elif isinstance(message, p.GetLinkStats):
            self.sensor.send(message, t_us)             # the bus's counters are in counters() already
        else:                                           # Heartbeat, EStop: both devices
            self.bus.send(message, t_us)
            self.sensor.send(message, t_us)
        return seq

    def _next_seq(self) -> int:
        seq = self.tx_seq
        self.tx_seq = (self.tx_seq + 1) % p.SEQ_MODULUS
        return seq

    def receive(self, now_s: float) -> list[p.Packet]:
        """Both devices' packets, merged: bus reads update the held positions, each sensor frame becomes one
        telemetry packet with them; e-stops cross over; the reset is answered once for both."""
        bus_packets = self.bus.receive(now_s)
        sensor_packets = self.sensor.receive(now_s) if self.sensor.port is not None else []
        out: list[p.Packet] = []
        for packet in bus_packets:
            m = packet.message
            if isinstance(m, p.Telemetry):
                self.held_servo = m.samples[-1].servo
                # a bus-watchdog trip is an event to pass on; the bus's e-stop is a state, read live in _merged
                # (a flag held from before a reset would latch the driver again right after it)
                self.held_flags |= m.flags & p.FLAG_WATCHDOG
                self.servo_read_ns = time.time_ns()
            elif isinstance(m, p.EStop):                # a servo's hardware error: stop the other device too
                self._forward_estop(self.sensor)
                out.append(packet)
            elif isinstance(m, (p.Ack, p.Nack)):
                out.extend(self._answer("bus", packet))
        if self.state != "up":
            self.handshake_packets.extend(sensor_packets)
            return out
        for packet in sensor_packets:
            m = packet.message
            if isinstance(m, (p.Telemetry, p.Heartbeat)):
                self.sensor_flags = m.flags
            if isinstance(m, p.Telemetry):
                out.append(self._merged(packet, m))
            elif isinstance(m, p.EStop):                # the button: the servos go to neutral at once
                self._forward_estop(self.bus)
                out.append(packet)
            elif isinstance(m, p.LinkStats):
                self.device_stats = m
            elif isinstance(m, (p.Ack, p.Nack)):
                out.extend(self._answer("sensor", packet))
            else:
                out.append(packet)
        return out

    def _merged(self, packet: p.Packet, m: p.Telemetry) -> p.Packet:
        flags = m.flags | self.held_flags | (p.FLAG_ESTOP if self.bus.estop else 0)
        self.held_flags = 0
        samples = tuple(dataclasses.replace(s, servo=self.held_servo) for s in m.samples)
        return p.Packet(packet.seq, packet.t_us,
                        p.Telemetry(flags, len(self.held_servo), m.n_strain, m.n_load, samples))

    def _forward_estop(self, link) -> None:
        self.estops_forwarded += 1
        link.send(p.EStop(p.ESTOP_HOST))

    def _answer(self, device: str, packet: p.Packet) -> list[p.Packet]:
        """ACKs and NACKs: those of the e-stop reset become one ACK for the driver once both devices have
        acknowledged (the first NACK is the NACK); a reset answer that matches no pending reset is dropped,
        since its sequence number is the device's, not ours; the rest (e.g. setpoints NACKed) pass."""
        m = packet.message
        if m.msg_type != p.T_ESTOP_RESET:
            return [packet]
        reset = self.reset
        if reset is None or m.seq != reset[device]:
            self.stray_reset_answers += 1
            return []
        if isinstance(m, p.Nack):
            self.reset = None
            return [self._packet(p.Nack(p.T_ESTOP_RESET, reset["seq"], m.reason))]
        reset["acked"].add(device)
        if reset["acked"] == {"bus", "sensor"}:
            self.reset = None
            return [self._packet(p.Ack(p.T_ESTOP_RESET, reset["seq"]))]
        return []

    def _packet(self, message: p.Message) -> p.Packet:
        packet = p.Packet(self.rx_seq, time.monotonic_ns() // 1000 % p.TIME_MODULUS, message)
        self.rx_seq = (self.rx_seq + 1) % p.SEQ_MODULUS
        return packet

    # ---- counters (hw/status "link": the bus's at top level, the sensor link's under "sensor") -------------
    def counters(self) -> dict:
        sensor = {**self.sensor.counters(), "port": self.sensor.port_name or "", "state": self.sensor.state,
                  "device_flags": self.sensor_flags, "frames_before_positions": self.frames_before_positions}
        if self.sensor_emulator is not None:
            sensor["emulator_pid"] = self.sensor_emulator.pid or 0
            sensor["emulator_starts"] = self.sensor_emulator.starts
        return {**self.bus.counters(), "estops_forwarded": self.estops_forwarded,
                "stray_reset_answers": self.stray_reset_answers,
                "servo_channels": self.mirror.mode, "sensor": sensor}

    def emulators(self) -> tuple:
        return () if self.sensor_emulator is None else (self.sensor_emulator,)
