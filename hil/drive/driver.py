"""``mms drive``: the servo driver, the only code that moves hardware (docs/driver.md).

Simulator states (``sim/state``) become servo setpoints through the rig's joint-to-servo map and limits
(hil/drive/mapping.py, hil/drive/core.py); device telemetry comes back calibrated on ``hw/telemetry``;
``hw/command`` says what was actually sent and ``hw/status`` the lifecycle, link counters, watchdog, e-stop
and latencies. One thread runs one loop: it polls the SUB socket, the control socket and the serial port,
and ticks the command clock at the rig's ``command_hz``.

Lifecycle (ros2_control style) over the control socket: configure / activate / deactivate / cleanup /
estop / reset_estop / status / shutdown. SIGINT and SIGTERM deactivate to neutral, then exit. With
``--emulate`` the driver starts ``mms emulate --rig RIG`` as a child, reads the pty path from its first
stdout line, restarts it when it dies (that is the emulated unplug/replug) and always terminates it on exit.

Every input is checked where it enters (hil/drive/safety.py for sim/state, hil/drive/inputs.py for telemetry
and the last line before the port, :meth:`Driver.handle_control` for requests); what fails is counted by reason
in hw/status ``health`` and dropped. An e-stop reset needs local authority: SIGUSR1 to this process, or
``reset_estop`` on the control socket when started with ``--allow-remote-reset``; either is refused while the
device reports its e-stop button held (docs/driver.md, "E-stop").
"""
from __future__ import annotations

import argparse
import math
import os
import signal
import sys
import time
from collections import Counter, deque

import numpy as np
import zmq

from firmware_interface import protocol as p
from firmware_interface.rigs.mcu import Rig
from hil.drive.core import DriverCore
from hil.drive.inputs import measurement_fault, measurement_ranges, telemetry_error
from hil.drive.lifecycle import State, TransitionError
from hil.drive.emulator_child import EmulatorChild
from hil.drive.links.base import Link
from hil.drive.links.factory import connect_rig
from hil.drive.links.serial import LinkError, now_us
from hil.drive.mapping import servo_map_from_rig
from hil.drive.messages import HwPublisherSeq, command_payload, telemetry_payload
from hil.drive.options import DriverOptions, options_from_args
from hil.drive.safety import MAX_SEQ_JUMP, Rejection, state_shape_error
from sim.processes import freeze_startup_heap, set_realtime_priority
from sim.messages import (TOPIC_HW_COMMAND, TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE,
                          TOPIC_SIM_STATUS, MalformedMessage, SeqTracker, decode, encode)
from sim.network import load_endpoints, open_socket
from sim.control import ControlError, encode_reply, error_reply, one_line, parse_request

#: control commands -> what they do (the reply of "help", and docs/driver.md)
COMMANDS = {
    "configure": "open the port, check the device (hello, protocol version, channels), configure it; "
                 "telemetry only",
    "activate": "start sending setpoints from the simulator (refused while the e-stop is latched)",
    "deactivate": "stop tracking and ramp the servos to neutral at the rate limits",
    "cleanup": "close the port (from inactive)",
    "estop": "latch the e-stop: stop sending, tell the device to hold neutral",
    "reset_estop": "release the e-stop on the device and in the driver; the driver stays inactive (needs "
                   "--allow-remote-reset; refused while the rig's e-stop button is held)",
    "status": "the latest hw/status payload",
    "help": "list the commands",
    "shutdown": "ramp to neutral and exit",
}
#: how long an explicit configure / reset_estop waits for the device before it replies with an error, s
CONTROL_WAIT_S = 10.0
#: reconnect backoff: first delay, factor, ceiling (s)
BACKOFF_FIRST_S, BACKOFF_FACTOR, BACKOFF_MAX_S = 0.05, 2.0, 1.0
#: zmq polls in whole milliseconds: the loop wakes this early (ms) and sleeps the rest
COARSE_WAIT_MS = 1.0
#: how often the loop looks for the booting emulator's pty path, s
EMULATOR_POLL_S = 0.01
#: a servo within this of neutral (rad) counts as arrived when the driver exits
NEUTRAL_ARRIVED_RAD = 0.02
#: after the commanded ramp ends, how long the driver waits for the measured servos to reach neutral, s
NEUTRAL_SETTLE_S = 1.0
#: how often the driver asks the device for its link counters, s
DEVICE_STATS_PERIOD_S = 0.5
#: how long the PUB socket may hold the last messages at exit, ms
PUB_LINGER_MS = 500
#: latency samples kept for the p50/p99 in hw/status
LATENCY_WINDOW = 2000
#: a control request longer than this is refused unread, bytes (the longest real one is under 100)
MAX_REQUEST_BYTES = 4096
#: control-request refusals a valid command can meet here (besides sim/control.py's REASONS), counted in
#: hw/status health.refused as control:REASON
REFUSED, REMOTE_RESET = "refused", "remote_reset"
#: how often the driver reads its emulator children's statistics files, s
EMULATOR_STATS_PERIOD_S = 1.0
#: a physics plant further behind the wall clock than this is reported on stderr, s: the emulated sensors then
#: lag the servos by as much, and a validation of that run compares the model with a late plant
PLANT_LAG_WARN_S = 0.5
#: at most one plant-lag line per this many s
PLANT_LAG_WARN_EVERY_S = 10.0


def _percentiles_us(samples) -> dict:
    if not samples:
        return {"n": 0}
    a = np.asarray(samples, dtype=float)
    return {"n": int(a.size), "p50": float(np.percentile(a, 50)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max())}


class Driver:
    """The driver of ``rig`` (the host's view, firmware_interface/rigs/host.py) over ``link``. ``port``: the
    device's port; with an ``emulator`` child instead, the pty it prints (hil/drive/links/factory.py builds all
    three from a rig file)."""

    def __init__(self, rig: Rig, link: Link, options: DriverOptions, *, port: str | None = None,
                 emulator: EmulatorChild | None = None):
        self.rig = rig
        self.options = options
        self.endpoints = load_endpoints(options.network)
        self.map = servo_map_from_rig(rig)
        self.period = 1.0 / rig.command_hz
        self.core = DriverCore(self.map, self.period, state_timeout_s=options.state_timeout_s,
                               hold_s=options.hold_s, max_state_age_s=options.max_state_age_s,
                               lead_s=options.state_lead_s)
        self.link = link
        self.emulator = emulator
        self.port_name = port
        self.seqs = HwPublisherSeq()
        self.sim_seq = SeqTracker()
        self.sim_malformed = 0
        self.states_received = 0
        self.states_superseded = 0          # well-formed states a newer one replaced in the same read
        self.want_link = False              # configure requested: keep (re)connecting
        self.activate_when_up = options.autoactivate
        self.backoff_s = BACKOFF_FIRST_S
        self.next_connect_s = 0.0
        self.last_error = ""
        self.device_flags = 0
        self.pending_reply: tuple[str, float] | None = None    # (command, deadline) awaiting the device
        self.reset_seq: int | None = None
        self.stop_requested = False
        self.shutdown_deadline: float | None = None
        self.settle_deadline: float | None = None
        self.state_to_send_us: deque = deque(maxlen=LATENCY_WINDOW)
        self.tick_late_us: deque = deque(maxlen=LATENCY_WINDOW)
        self.overruns = 0
        self.last_status: dict = {}
        self.published_key: tuple = ()
        self.last_sent_sim_seq = -1
        self._poller: zmq.Poller | None = None
        self._poller_key: tuple | None = None
        sensors = [*rig.strain, *rig.load]
        self.sensor_gain = np.array([s.gain for s in sensors], dtype=float)             # (n_sensor,) unit/count
        self.sensor_offset = np.array([s.offset_counts for s in sensors], dtype=float)  # (n_sensor,) counts
        self.ranges = measurement_ranges(rig)
        #: inputs dropped at the boundary, "<input>:<reason>" -> count (sim/state's own are core.rejections)
        self.refused: Counter[str] = Counter()
        self.measurement_faults: Counter[str] = Counter()
        self.watchdog_trips = 0
        self.watchdog_was_tripped = True            # a device comes up with its watchdog flag set
        self.seq_jumps = 0
        self.reset_by: str | None = None            # who asked for the pending e-stop reset: control or local
        self.reset_deadline = math.inf
        self.local_reset_requested = False          # SIGUSR1 (set by the handler, acted on by the loop)
        self.plant: dict | None = None              # the emulator's physics plant, from its statistics file
        self.next_plant_read_s = 0.0
        self.last_lag_warning_s = -math.inf

    # ---- sockets ------------------------------------------------------------------------------------
    def open_sockets(self) -> None:
        self.ctx = zmq.Context()
        curve = self.endpoints.curve
        self.sub = open_socket(self.ctx, zmq.SUB, self.endpoints.sim_pub, bind=False, curve=curve, what="sim.pub",
                               options={zmq.RCVHWM: 1000, zmq.LINGER: 0})
        self.sub.setsockopt(zmq.SUBSCRIBE, TOPIC_SIM_STATE.encode())
        self.sub.setsockopt(zmq.SUBSCRIBE, TOPIC_SIM_STATUS.encode())
        # the PUB lingers a little at exit so that the last hw/status (finalized) leaves
        self.pub = open_socket(self.ctx, zmq.PUB, self.endpoints.driver_pub, bind=True, curve=curve,
                               what="driver.pub", options={zmq.SNDHWM: 10000, zmq.LINGER: PUB_LINGER_MS})
        self.rep = open_socket(self.ctx, zmq.REP, self.endpoints.driver_control, bind=True, curve=curve,
                               what="driver.control", options={zmq.LINGER: 0})

    def close(self) -> None:
        self.link.close()
        for child in self.emulator_children():
            child.cleanup()
        # close() without a linger argument: close(0) would set the PUB's LINGER to 0 and drop what the loop
        # published last (the ramp's final neutral command, the finalized hw/status) when ZeroMQ's I/O thread had
        # not sent it yet, as on a busy machine; each socket keeps the LINGER it was opened with
        for sock in (getattr(self, "sub", None), getattr(self, "pub", None), getattr(self, "rep", None)):
            if sock is not None:
                sock.close()
        if getattr(self, "ctx", None) is not None:
            self.ctx.term()

    def publish(self, topic: str, payload: dict) -> None:
        self.pub.send_multipart(encode(topic, payload))

    # ---- main loop ----------------------------------------------------------------------------------
    def run(self) -> int:
        self.open_sockets()
        self.request_configure()
        now = time.monotonic()
        next_tick = now + self.period
        next_status = now
        next_heartbeat = now
        next_stats = now
        try:
            while True:
                now = time.monotonic()
                if self.stop_requested and self.shutdown_deadline is None:
                    self.begin_shutdown(now)
                if self.shutdown_deadline is not None and self.shutdown_done(now):
                    break
                deadline = min(next_tick, next_status, next_heartbeat if self.link.up else math.inf,
                               self.next_connect_s if self.want_link and self.link.state == "closed" else math.inf)
                timeout_ms = max(0.0, (deadline - now) * 1000.0)
                fd = self.link.fileno()
                poller = self.poller(fd)
                # zmq polls in whole ms: poll coarsely until COARSE_WAIT_MS before the deadline, then sleep finely
                events = dict(poller.poll(timeout=int(timeout_ms - COARSE_WAIT_MS) if timeout_ms > 2 * COARSE_WAIT_MS
                                          else 0))
                now = time.monotonic()
                if not events and now < deadline and deadline - now < 2 * COARSE_WAIT_MS * 1e-3:
                    time.sleep(deadline - now)
                    events = dict(poller.poll(timeout=0))   # what arrived meanwhile (the newest state)
                    now = time.monotonic()
                if self.sub in events:
                    self.read_sim(now)
                if fd is not None and fd in events or self.link.state in ("hello", "configuring"):
                    self.read_serial(now)
                if self.rep in events and self.pending_reply is None:
                    self.serve_control(now)
                if self.local_reset_requested:
                    self.local_reset(now)
                self.check_pending(now)
                if self.want_link and self.link.state == "closed" and now >= self.next_connect_s:
                    self.connect(now)
                self.check_link_silence(now)
                if now >= next_tick:
                    late = now - next_tick
                    self.tick_late_us.append(late * 1e6)
                    next_tick += self.period
                    if now >= next_tick:
                        self.overruns += 1
                        next_tick = now + self.period
                    # the time read again: the setpoint is computed for the moment it is written, not for the loop's
                    # wake-up before the reads above (0.6 ms apart at std under load, docs/driver.md)
                    self.command_tick(time.monotonic())
                if self.link.up and now >= next_heartbeat:
                    next_heartbeat = now + 1.0 / self.rig.heartbeat_hz
                    self.send_safe(p.Heartbeat(0, int(now * 1000) % p.TIME_MODULUS), now)
                if self.link.up and now >= next_stats:
                    next_stats = now + DEVICE_STATS_PERIOD_S
                    self.send_safe(p.GetLinkStats(), now)
                if now >= self.next_plant_read_s:
                    self.next_plant_read_s = now + EMULATOR_STATS_PERIOD_S
                    self.read_plant(now)
                if now >= next_status or self.status_key() != self.published_key:
                    next_status = now + 1.0 / self.options.status_hz
                    self.publish_status()
        finally:
            self.core.lifecycle.state = State.FINALIZED
            self.publish_status()
            self.close()
        return 0

    def poller(self, fd: int | None) -> zmq.Poller:
        """The poller for the current sockets: the SUB, the REP unless a reply is pending, the serial port."""
        key = (fd, self.pending_reply is None)
        if key != self._poller_key:
            self._poller = zmq.Poller()
            self._poller.register(self.sub, zmq.POLLIN)
            if self.pending_reply is None:
                self._poller.register(self.rep, zmq.POLLIN)
            if fd is not None:
                self._poller.register(fd, zmq.POLLIN)
            self._poller_key = key
        return self._poller

    # ---- simulator input ----------------------------------------------------------------------------
    def read_sim(self, now: float) -> None:
        """Drain the SUB socket: every state's shape is checked (bad ones counted and dropped), the newest
        well-formed one goes to the core, which decides whether it is used."""
        latest = None
        for _ in range(100_000):
            try:
                frames = self.sub.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                topic, payload = decode(frames)
            except MalformedMessage:
                self.sim_malformed += 1
                continue
            if topic == TOPIC_SIM_STATE:
                self.states_received += 1
                reason = state_shape_error(payload)
                if reason is not None:
                    self.core.rejections[reason.value] += 1
                    continue
                self.track_seq(topic, payload["seq"])
                self.states_superseded += latest is not None
                latest = payload
            elif topic == TOPIC_SIM_STATUS and not self.core.on_sim_status(payload):
                self.refused["sim_status:joint_names"] += 1
        if latest is not None:
            restarts = self.core.state_check.stream_restarts
            self.core.on_state(latest, now, time.time_ns())
            if self.core.state_check.stream_restarts != restarts:
                self.note(f"sim/state: a new stream from seq {latest['seq']} (the publisher restarted)")

    def track_seq(self, topic: str, seq: int) -> None:
        """Count gaps and restarts of ``topic``'s seq (docs/messages.md); a jump of more than MAX_SEQ_JUMP is
        counted as a jump, not as that many lost messages (one forged seq would read as 9e18 lost)."""
        last = self.sim_seq.last_seq.get(topic)
        if last is not None and seq - last > MAX_SEQ_JUMP:
            self.seq_jumps += 1
            self.sim_seq.received[topic] = self.sim_seq.received.get(topic, 0) + 1
            self.sim_seq.last_seq[topic] = seq
            return
        self.sim_seq.update(topic, seq)

    # ---- serial -------------------------------------------------------------------------------------
    def request_configure(self) -> None:
        self.want_link = True
        self.next_connect_s = 0.0

    def connect(self, now: float) -> None:
        try:
            if self.emulator is not None:
                if self.emulator.process is None or not self.emulator.alive:
                    self.emulator.spawn(now)
                path = self.emulator.poll_path(now)
                if path is None:
                    self.next_connect_s = now + EMULATOR_POLL_S
                    return
                self.port_name = path
            self.link.open(self.port_name, now)
        except LinkError as exc:
            self.link_lost(now, str(exc))

    def link_lost(self, now: float, why: str) -> None:
        was_up = self.link.up
        self.link.close()
        if was_up:
            self.link.totals.link_losses += 1
        self.core.link_reset(now)
        self.note(why)
        self.next_connect_s = now + self.backoff_s
        self.backoff_s = min(self.backoff_s * BACKOFF_FACTOR, BACKOFF_MAX_S)
        if self.emulator is not None and self.emulator.alive and was_up:
            # the emulated device is still there but its link failed: replug it
            self.emulator.stop()

    def note(self, message: str) -> None:
        """Keep ``message`` as the status error; say it on stderr unless it repeats the last one (retries)."""
        line = one_line(message)
        if line != self.last_error:
            print(f"mms drive: {line}", file=sys.stderr, flush=True)
        self.last_error = line

    def read_serial(self, now: float) -> None:
        try:
            packets = self.link.receive(now)
            was_up = self.link.up
            packets = self.link.handshake_step(packets, now)
        except LinkError as exc:
            self.link_lost(now, str(exc))
            return
        if self.link.up and not was_up:
            self.link_came_up(now)
        for packet in packets:
            self.handle_packet(packet, now)

    def link_came_up(self, now: float) -> None:
        # the error kept in the status was why the link was down: with the link up it is history (stderr has it)
        self.last_error = ""
        if self.link.totals.connects > 1:
            self.link.totals.reconnects += 1
        self.backoff_s = BACKOFF_FIRST_S
        self.watchdog_was_tripped = True
        self.core.link_reset(now)
        if self.core.lifecycle.state is State.UNCONFIGURED:
            self.core.lifecycle.apply("configure")
        if self.core.estop.latched and "control" in self.core.estop.sources:
            self.send_safe(p.EStop(p.ESTOP_HOST), now)
        if self.pending_reply is not None and self.pending_reply[0] == "configure":
            self.reply({"ok": True, "lifecycle": self.core.lifecycle.state.value, "port": self.link.port_name})
        if self.activate_when_up and self.core.lifecycle.state is State.INACTIVE and not self.core.estop.latched:
            self.activate_when_up = False
            try:
                self.core.activate(now)
            except TransitionError as exc:
                self.note(str(exc))

    def check_link_silence(self, now: float) -> None:
        """A device that sends nothing for several telemetry frames is gone even if the port still opens."""
        if not self.link.up or self.link.last_rx_s is None:
            return
        frame_period = self.rig.samples_per_frame / self.rig.telemetry_hz
        silence = max(self.options.link_timeout_s, 10 * frame_period, 3.0 / self.rig.heartbeat_hz)
        if now - self.link.last_rx_s > silence:
            self.link_lost(now, f"{self.link.port_name}: nothing received for {silence:.2f} s")

    def send_safe(self, message: p.Message, now: float) -> int | None:
        try:
            return self.link.send(message, now_us())
        except LinkError as exc:
            self.link_lost(now, str(exc))
            return None

    def handle_packet(self, packet: p.Packet, now: float) -> None:
        m = packet.message
        if isinstance(m, p.Telemetry):
            self.on_telemetry(packet, m, now)
        elif isinstance(m, p.Heartbeat):
            self.on_device_flags(m.flags)
        elif isinstance(m, p.EStop):
            names = {p.ESTOP_HOST: "host", p.ESTOP_BUTTON: "button", p.ESTOP_FAULT: "fault"}
            self.cancel_reset()
            self.core.trigger_estop(f"device:{names.get(m.reason, m.reason)}")
        elif isinstance(m, p.LinkStats):
            self.link.device_stats = m
        elif isinstance(m, p.Ack):
            if m.msg_type == p.T_ESTOP_RESET and m.seq == self.reset_seq:
                self.reset_seq = None
                try:
                    self.core.reset_estop(device_still_stopped=self.button_held())
                    self.reset_answer({"ok": True, "lifecycle": self.core.lifecycle.state.value})
                except ValueError as exc:
                    self.reset_answer(error_reply(str(exc)))
        elif isinstance(m, p.Nack):
            nacks = self.link.totals.nacks
            reason = p.NACK_REASONS.get(m.reason, str(m.reason))
            nacks[reason] = nacks.get(reason, 0) + 1
            if m.msg_type == p.T_ESTOP_RESET and m.seq == self.reset_seq:
                self.reset_seq = None
                self.reset_answer(error_reply(f"device refused the e-stop reset: {reason}"))

    def on_device_flags(self, flags: int) -> None:
        # a watchdog trip while active is the host failing to keep the device fed (the driver sends every tick
        # while active; after a deactivate the device's watchdog taking over is the design)
        tripped = bool(flags & p.FLAG_WATCHDOG)
        if tripped and not self.watchdog_was_tripped and self.core.lifecycle.state is State.ACTIVE \
                and not self.core.estop.latched:
            self.watchdog_trips += 1
        self.watchdog_was_tripped = tripped
        self.device_flags = flags
        if flags & p.FLAG_ESTOP and self.reset_seq is None and not self.core.estop.latched:
            self.core.trigger_estop("device")

    def on_telemetry(self, packet: p.Packet, m: p.Telemetry, now: float) -> None:
        """A TELEMETRY frame: refused if its channel counts are not the rig's; a measurement fault (counted, not
        taken as the servos' position, not published) if a value cannot be a measurement."""
        host_ns = time.time_ns()
        n_servo, n_strain = len(self.map), len(self.rig.strain)
        reason = telemetry_error(m, n_servo, n_strain, len(self.rig.load))
        if reason is not None:
            self.refused[f"telemetry:{reason}"] += 1
            return
        self.on_device_flags(m.flags)
        if not m.samples:
            return
        k = len(m.samples)
        servo_raw = np.array([s.servo for s in m.samples], dtype=float).reshape(k, n_servo)   # (k, n_servo) raw
        counts = np.array([(*s.strain, *s.load) for s in m.samples], dtype=float).reshape(k, len(self.sensor_gain))
        fault = measurement_fault(servo_raw, counts, self.ranges)
        if fault is not None:
            self.measurement_faults[fault] += 1
            self.core.on_measurement_fault(now)
            return
        servo_rad = self.map.raw_to_angles(servo_raw)                             # (k, n_servo) rad
        sensors = self.sensor_gain * (counts - self.sensor_offset)                # (k, n_sensor) channel units
        strain, load = sensors[:, :n_strain], sensors[:, n_strain:]
        self.core.on_measured(servo_rad[-1])
        payload = telemetry_payload(
            self.seqs.header(TOPIC_HW_TELEMETRY, host_ns), host_ns=host_ns,
            device_us=[s.t_us for s in m.samples], servo_names=self.map.names, servo_rad=servo_rad,
            strain_names=[s.name for s in self.rig.strain], strain=strain,
            load_names=[s.name for s in self.rig.load], load=load, device_flags=m.flags, frame_seq=packet.seq,
            servo_host_ns=self.link.servo_read_ns)
        self.publish(TOPIC_HW_TELEMETRY, payload)

    # ---- commands to the device ---------------------------------------------------------------------
    def command_tick(self, now: float) -> None:
        if not self.link.up:
            return
        command = self.core.tick(now)
        if command is None:
            return
        raw = tuple(float(r) for r in command.raw)
        frame_seq = self.send_safe(p.Setpoints(raw), now)
        if frame_seq is None:
            return
        stamp = time.time_ns()
        if command.state_stamp_ns and command.sim_seq != self.last_sent_sim_seq:
            # the first frame carrying a state: its latency (later frames re-sending it measure its age)
            self.state_to_send_us.append((stamp - command.state_stamp_ns) / 1e3)
        self.last_sent_sim_seq = command.sim_seq
        self.publish(TOPIC_HW_COMMAND, command_payload(
            self.seqs.header(TOPIC_HW_COMMAND, stamp), mode=command.mode.value, channels=self.map.names,
            angles=command.angles, raw=command.raw, limited=command.limited, sim_seq=command.sim_seq,
            sim_t=command.sim_t, state_stamp_ns=command.state_stamp_ns, frame_seq=frame_seq,
            lifecycle=self.core.lifecycle.state.value, setpoint_t=command.setpoint_t))

    # ---- shutdown -----------------------------------------------------------------------------------
    def begin_shutdown(self, now: float) -> None:
        self.core.begin_shutdown()
        self.want_link = self.link.state != "closed"
        start = self.core.previous if self.core.previous is not None else self.core.measured
        ramp_s = 0.0 if start is None else float(np.max(np.abs(start - self.map.neutral) / self.map.max_rate))
        self.shutdown_deadline = now + ramp_s + 2 * self.period + NEUTRAL_SETTLE_S

    def shutdown_done(self, now: float) -> bool:
        """True once the servos are at neutral (commanded, and measured when the rig reports positions), or
        the link is gone (the device's own watchdog then takes them to neutral), or time is up."""
        if not self.link.up or now >= self.shutdown_deadline:
            return True
        if self.core.ramping:
            return False
        measured = self.core.measured
        return measured is None or bool(np.all(np.abs(measured - self.map.neutral) <= NEUTRAL_ARRIVED_RAD))

    # ---- control socket -----------------------------------------------------------------------------
    def reply(self, reply: dict) -> None:
        if self.pending_reply is None:
            return
        self.pending_reply = None
        self.rep.send(encode_reply(reply))

    def check_pending(self, now: float) -> None:
        if self.reset_by == "local" and now >= self.reset_deadline:
            self.reset_seq = self.reset_by = None
            self.note(f"e-stop reset (SIGUSR1): no answer from the device within {CONTROL_WAIT_S:.0f} s")
        if self.pending_reply is None or now < self.pending_reply[1]:
            return
        what = self.pending_reply[0]
        if what == "configure":
            self.reply(error_reply(f"device not configured within {CONTROL_WAIT_S:.0f} s "
                                   f"({self.last_error or 'no answer'}); still retrying, send cleanup to stop"))
        else:
            self.reset_seq = self.reset_by = None
            self.reply(error_reply(f"no answer from the device to the e-stop reset within {CONTROL_WAIT_S:.0f} s"))

    def serve_control(self, now: float) -> None:
        try:
            frames = self.rep.recv_multipart(flags=zmq.NOBLOCK)
        except zmq.Again:
            return
        self.pending_reply = ("immediate", math.inf)
        try:
            result = self.handle_control(frames, now)
        except ControlError as exc:
            self.refused[f"control:{exc.reason}"] += 1
            result = error_reply(str(exc))
        except (ValueError, TransitionError) as exc:      # a valid request the current state does not allow
            self.refused[f"control:{REFUSED}"] += 1
            result = error_reply(str(exc))
        if result is not None:
            self.reply(result)

    def handle_control(self, frames: list[bytes], now: float) -> dict | None:
        """The reply to a request, or None when it comes later (the device has to answer first)."""
        cmd = parse_request(frames, COMMANDS, max_bytes=MAX_REQUEST_BYTES)["cmd"]
        core = self.core
        if self.shutdown_deadline is not None and cmd not in ("status", "help", "estop"):
            raise ValueError("shutting down")
        if cmd == "status":
            return {"ok": True, **self.status_payload()}
        if cmd == "help":
            return {"ok": True, "commands": COMMANDS}
        if cmd == "configure":
            core.lifecycle.target("configure")
            self.request_configure()
            self.pending_reply = ("configure", now + CONTROL_WAIT_S)
            return None
        if cmd == "activate":
            if not self.link.up:
                raise ValueError(f"cannot activate: the link is {self.link_state_name()} ({self.last_error or 'no device'})")
            core.activate(now)
            return {"ok": True, "lifecycle": core.lifecycle.state.value}
        if cmd == "deactivate":
            core.deactivate()
            return {"ok": True, "lifecycle": core.lifecycle.state.value}
        if cmd == "cleanup":
            core.lifecycle.target("cleanup")
            if core.ramping:
                raise ValueError("cannot cleanup while the servos ramp to neutral; try again")
            self.want_link = False
            self.link.close()
            if self.emulator is not None:
                self.emulator.stop()
            core.link_reset(now)
            core.lifecycle.apply("cleanup")
            return {"ok": True, "lifecycle": core.lifecycle.state.value}
        if cmd == "estop":
            self.cancel_reset()
            newly = core.trigger_estop("control")
            sent = self.link.up and self.send_safe(p.EStop(p.ESTOP_HOST), now) is not None
            return {"ok": True, "latched": True, "newly": newly, "device_told": bool(sent),
                    "lifecycle": core.lifecycle.state.value}
        if cmd == "reset_estop":
            if not self.options.allow_remote_reset:
                raise ControlError(f"an e-stop reset over the control socket is off: confirm on "
                                   f"the driver's host with `kill -USR1 {os.getpid()}`, or start mms drive with "
                                   f"--allow-remote-reset", REMOTE_RESET)
            if not core.estop.latched:
                return {"ok": True, "latched": False, "lifecycle": core.lifecycle.state.value}
            self.send_estop_reset(now, "control")
            self.pending_reply = ("reset_estop", now + CONTROL_WAIT_S)
            return None
        if cmd == "shutdown":
            self.stop_requested = True
            return {"ok": True, "lifecycle": core.lifecycle.state.value}
        raise ControlError(f"command {cmd!r} has no handler", "unknown_command")     # COMMANDS lists one too many

    # ---- e-stop reset: local authority, never while the rig's button is held -------------------------
    def button_held(self) -> bool:
        """The device reports its e-stop button still pressed (FLAG_BUTTON): only a release at the rig ends it."""
        return bool(self.device_flags & p.FLAG_BUTTON)

    def send_estop_reset(self, now: float, by: str) -> None:
        """Ask the device to release its e-stop (the driver's latch clears on its ACK); ValueError, nothing
        sent, while the link is not up or the device reports its button held."""
        if not self.link.up:
            raise ValueError(f"cannot reset the e-stop: the link is {self.link_state_name()}")
        if self.button_held():
            raise ValueError("cannot reset the e-stop: the rig's e-stop button is still pressed "
                             "(release it on the rig first)")
        self.reset_seq = self.send_safe(p.EStopReset(), now)
        self.reset_by = by
        self.reset_deadline = now + CONTROL_WAIT_S

    def cancel_reset(self) -> None:
        """An e-stop after a reset was sent: that reset's ACK must not clear the new latch (the device took the
        reset first, then the new e-stop)."""
        if self.reset_seq is not None:
            self.reset_seq = None
            self.reset_answer(error_reply("the e-stop was triggered again before the device answered the reset"))

    def local_reset(self, now: float) -> None:
        """SIGUSR1: the e-stop reset confirmed on the driver's own host; the outcome goes to stderr."""
        self.local_reset_requested = False
        if not self.core.estop.latched:
            self.note("e-stop reset (SIGUSR1): the e-stop is not latched")
            return
        if self.reset_seq is not None:
            return                                  # one already on its way
        try:
            self.send_estop_reset(now, "local")
        except ValueError as exc:
            self.note(f"e-stop reset (SIGUSR1): {exc}")

    def reset_answer(self, reply: dict) -> None:
        """The device answered the e-stop reset: to the control client that asked, or on stderr (SIGUSR1)."""
        by, self.reset_by = self.reset_by, None
        if by == "control":
            self.reply(reply)
        else:
            self.note("e-stop reset (SIGUSR1): " + ("released" if reply.get("ok") else reply.get("error", "")))

    # ---- run health (hw/status "health", docs/messages.md) ----------------------------------------------
    def emulator_children(self) -> list[EmulatorChild]:
        """The emulators this driver runs: the device's (--emulate), and a composite link's microcontroller's."""
        return [c for c in (self.emulator, *self.link.emulators()) if c is not None]

    def read_plant(self, now: float) -> None:
        """The physics plant's figures from the emulator child that runs one (its --stats file, rewritten every
        second); a plant further behind than PLANT_LAG_WARN_S is said on stderr, at most every
        PLANT_LAG_WARN_EVERY_S."""
        for child in self.emulator_children():
            stats = child.read_stats()
            plant = stats.get("plant") if stats is not None else None
            if not (isinstance(plant, dict) and plant.get("plant") == "physics"):
                continue
            try:
                self.plant = {"rtf": float(plant["rtf"]), "lag_s": float(plant["lag_s"]),
                              "alive": bool(plant["alive"] and child.alive), "restarts": max(0, child.starts - 1)}
            except (KeyError, TypeError, ValueError):
                self.refused["emulator_stats:malformed"] += 1
                continue
            lag = self.plant["lag_s"]
            if lag > PLANT_LAG_WARN_S and now - self.last_lag_warning_s >= PLANT_LAG_WARN_EVERY_S:
                self.last_lag_warning_s = now
                print(f"mms drive: warning: the emulator's physics plant lags the wall clock by {lag:.2f} s "
                      f"(real-time factor {self.plant['rtf']:.2f}): its sensors are late", file=sys.stderr,
                      flush=True)
            return

    def health(self) -> dict:
        core = self.core
        refused = Counter({f"state:{k}": v for k, v in core.rejections.items()})
        refused.update(self.refused)
        if self.sim_malformed:
            refused["sim:undecodable"] = self.sim_malformed
        health = {"holds": core.holds, "hold_s": round(core.time_held_s, 6),
                  "stale_states": core.rejections.get(Rejection.STALE.value, 0), "refused": dict(refused),
                  "measurement_faults": dict(self.measurement_faults), "watchdog_trips": self.watchdog_trips,
                  "reconnects": self.link.totals.reconnects}
        if self.plant is not None:
            health["plant"] = dict(self.plant)
        return health

    # ---- status -------------------------------------------------------------------------------------
    def watchdog_state(self) -> str:
        core = self.core
        if core.lifecycle.state is State.ACTIVE and not core.estop.latched or core.ramping:
            return core.mode.value
        return "idle"

    def link_state_name(self) -> str:
        """closed (not wanted), connecting (handshake), up, down (lost or not reachable, retrying)."""
        if self.link.up:
            return "up"
        if self.link.state in ("hello", "configuring"):
            return "connecting"
        return "down" if self.want_link else "closed"

    def status_payload(self) -> dict:
        core = self.core
        link = {"state": self.link_state_name(), "port": self.link.port_name or "", **self.link.counters()}
        if self.link.device_stats is not None:
            link["device"] = {k: getattr(self.link.device_stats, k) for k in
                              ("frames_rx", "frames_tx", "crc_errors", "framing_errors", "oversize", "malformed",
                               "seq_gaps", "tx_dropped", "watchdog_trips")}
        if self.emulator is not None:
            link["emulator_pid"] = self.emulator.pid or 0
            link["emulator_starts"] = self.emulator.starts
        return {"lifecycle": core.lifecycle.state.value, "rig": self.rig.name, "estop": core.estop.latched,
                "estop_sources": list(core.estop.sources), "watchdog": self.watchdog_state(), "link": link,
                "device_flags": self.device_flags,
                "states": {"received": self.states_received, "used": core.states_used,
                           "gaps": self.sim_seq.gaps.get(TOPIC_SIM_STATE, 0),
                           "restarts": self.sim_seq.restarts.get(TOPIC_SIM_STATE, 0),
                           "malformed": self.sim_malformed, "rejected": dict(core.rejections),
                           "superseded": self.states_superseded, "seq_jumps": self.seq_jumps, "stream_restarts": core.state_check.stream_restarts},
                "latency_us": {"state_to_send": _percentiles_us(self.state_to_send_us),
                               "tick_late": _percentiles_us(self.tick_late_us), "overruns": self.overruns},
                "health": self.health(), "error": core.mapping_error or self.last_error}

    def status_key(self) -> tuple:
        """What a subscriber must hear about at once, not at the next status period."""
        return (self.core.lifecycle.state, self.core.estop.latched, self.link_state_name(), self.watchdog_state())

    def publish_status(self) -> None:
        self.published_key = self.status_key()
        payload = {**self.seqs.header(TOPIC_HW_STATUS), **self.status_payload()}
        self.last_status = payload
        self.publish(TOPIC_HW_STATUS, payload)


def run_until_signalled(driver: "Driver") -> int:
    """Run ``driver`` with SIGINT/SIGTERM asking it to stop (servos to neutral) and SIGUSR1 confirming an e-stop
    reset on this host, restoring the handlers after."""
    def on_signal(signum, frame):
        driver.stop_requested = True

    def on_reset(signum, frame):
        driver.local_reset_requested = True

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    previous[signal.SIGUSR1] = signal.signal(signal.SIGUSR1, on_reset)
    try:
        return driver.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(args: argparse.Namespace) -> int:
    """``mms drive``: the typed options, the link the rig file calls for (hil/drive/links/factory.py), the loop."""
    options, device = options_from_args(args)
    connection = connect_rig(args.rig, device)
    set_realtime_priority(options.rt_priority, "mms drive")    # before the sockets: their I/O thread inherits it
    driver = Driver(connection.rig, connection.link, options, port=connection.port, emulator=connection.emulator)
    freeze_startup_heap()
    return run_until_signalled(driver)
