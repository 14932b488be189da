"""The STM32F405 board port (firmware_interface/firmware/rig/board/bsp_stm32f405.c, docs/firmware.md "The board
port") cross-compiled with arm-none-eabi-gcc and run in QEMU's netduinoplus2 (an STM32F405), its USART1 on a pty
that the driver's own serial link (hil/drive/links/serial.py) opens: the handshake against the rig file, setpoints
into the PWM timers' compare registers, the ADC read in channel order, LINK_STATS, the watchdog sending the servo
to neutral, the e-stop latch over the link. The timer and ADC registers are read through QEMU's QMP monitor.

QEMU 7.2 models the USART, the general-purpose timers' registers, the ADC (a fake ramp: each conversion is the
previous one plus 7), SysTick and the NVIC; not the GPIO ports (the e-stop button cannot be pressed: reads are 0,
released), the RCC (the clock tree is QEMU's: the image is built with -DBSP_PRESET_CLOCKS), DMA, or PWM pins."""
from __future__ import annotations

import contextlib
import json
import shutil
import socket
import struct
import subprocess
import time
from pathlib import Path

from firmware_interface import protocol as p
from firmware_interface.c_firmware import FIRMWARE, RIG_DIR, WARNINGS, config_c_source, config_table
from firmware_interface.rigs.mcu import load_rig
from hil.drive.links.serial import LinkError, SerialLink
from hil.testing import wait_for
from sim.processes import set_realtime_priority

RAYBOT = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "raybot_rig.toml"
BOARD = RIG_DIR / "board"
M4 = ("-mcpu=cortex-m4", "-mthumb", "-mfpu=fpv4-sp-d16", "-mfloat-abi=hard")
#: RM0090 §2.3 / §18.4 / §30.6: the registers read back through the monitor
TIM2, TIM3 = 0x40000000, 0x40000400
TIM2_PSC, TIM2_ARR = TIM2 + 0x28, TIM2 + 0x2C
TIM3_PSC, TIM3_ARR, TIM3_CCR1 = TIM3 + 0x28, TIM3 + 0x2C, TIM3 + 0x34
QEMU_TIMER_HZ = 1_000_000_000   # hw/arm/stm32f405_soc.c: TIM2-TIM5's "clock-frequency"
USART1_CR1, USART_CR1_UE = 0x4001100C, 1 << 13
QEMU_ADC_STEP = 7               # hw/adc/stm32f2xx_adc.c: each conversion returns the previous value + 7 (12 bit)
ADC_FULL_SCALE = 4096
SETPOINT_HZ = 50
TIMEOUT_S = 10.0                # for anything the device should do well within a second
#: SCHED_FIFO priority of QEMU and of the test's thread while the board runs (see netduinoplus2)
RT_PRIORITY = 1


def build_image(rig, folder: Path, *, qemu: bool = True) -> Path:
    """The board port with ``rig``'s generated table: for QEMU (the Makefile's `qemu` target, the clock tree
    preset) or for the part (`stm32f405`)."""
    table = folder / "rig_table.c"
    table.write_text(config_c_source(rig))
    elf = folder / ("rig_qemu.elf" if qemu else "rig_stm32f405.elf")
    sources = [BOARD / "rig_board.c", BOARD / "bsp_stm32f405.c", BOARD / "startup_stm32f405.c", table,
               RIG_DIR / "rig_fw.c", FIRMWARE / "mms_proto.c"]
    subprocess.run(["arm-none-eabi-gcc", *WARNINGS, *M4, "-O2", "-ffunction-sections", "-fdata-sections",
                    "-I", str(FIRMWARE), "-I", str(RIG_DIR), "-I", str(BOARD), "-nostartfiles", "--specs=nano.specs",
                    "--specs=nosys.specs", f"-T{BOARD / 'stm32f405.ld'}", "-Wl,--gc-sections",
                    *(["-DBSP_PRESET_CLOCKS"] if qemu else []), "-o", str(elf), *map(str, sources), "-lm"],
                   check=True, capture_output=True)
    return elf


class Qmp:
    """QEMU's machine protocol on a unix socket: human monitor commands with clean replies."""

    def __init__(self, path: Path):
        def connected():
            sock = socket.socket(socket.AF_UNIX)
            try:
                sock.connect(str(path))
            except (FileNotFoundError, ConnectionRefusedError):       # QEMU has not opened its socket yet
                sock.close()
                return None
            return sock
        self.sock = wait_for(connected, TIMEOUT_S, 0.02, f"QEMU's QMP socket {path}")
        self.file = self.sock.makefile("rwb")
        self._reply()                                     # the greeting
        self.execute("qmp_capabilities")

    def _reply(self) -> dict:
        while True:
            message = json.loads(self.file.readline())
            if "event" not in message:
                return message

    def execute(self, command: str, **arguments):
        self.file.write(json.dumps({"execute": command, "arguments": arguments}).encode() + b"\n")
        self.file.flush()
        reply = self._reply()
        assert "return" in reply, reply
        return reply["return"]

    def word(self, address: int) -> int:
        """One 32-bit word of the guest's physical address space (a peripheral register)."""
        text = self.execute("human-monitor-command", **{"command-line": f"xp /1wx {address:#x}"})
        return int(text.split(":")[1], 16)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


@contextlib.contextmanager
def netduinoplus2(elf: Path, folder: Path):
    """QEMU running ``elf`` with USART1 on a pty, under SCHED_FIFO at RT_PRIORITY as this thread (the test's end of
    the link) while it runs; yields (pty path, QMP). Why: the board's clock is the host's (QEMU's virtual clock
    without -icount), so a QEMU or a host held off the CPU for the watchdog's 0.2 s on a busy machine tripped it
    between two setpoints, and the test's count of trips was off by one; the board and the driver's host do not
    stall with the host's other load (the project's stand-ins run so: tests/firmware_interface/test_fi_physics.py)."""
    qmp_path = folder / "qmp.sock"
    set_realtime_priority(RT_PRIORITY, "QEMU board test")
    qemu = subprocess.Popen([shutil.which("qemu-system-arm") or "qemu-system-arm", "-M", "netduinoplus2",
                             "-nographic", "-serial", "pty", "-monitor", "none", "-qmp",
                             f"unix:{qmp_path},server=on,wait=off", "-kernel", str(elf)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        qmp = Qmp(qmp_path)
        serial0 = next(c["filename"] for c in qmp.execute("query-chardev") if c["label"] == "serial0")
        # bytes sent before the USART is enabled are dropped
        wait_for(lambda: qmp.word(USART1_CR1) & USART_CR1_UE, TIMEOUT_S, what="the firmware enabling USART1")
        yield serial0.removeprefix("pty:"), qmp
        qmp.close()
    finally:
        qemu.kill()
        qemu.wait(timeout=10)
        set_realtime_priority(0, "QEMU board test")


class Session:
    """The driver's serial link to the board, keeping every packet it receives."""

    def __init__(self, rig, port: str):
        self.link = SerialLink(rig)
        self.packets: list[p.Packet] = []
        deadline = time.monotonic() + TIMEOUT_S
        while not self.link.up:               # the driver's loop: a handshake that times out is started again
            assert time.monotonic() < deadline, "no handshake"
            try:
                if self.link.port is None:
                    self.link.open(port, time.monotonic())
                self.link.handshake_step(self.link.receive(time.monotonic()), time.monotonic())
            except LinkError:
                self.link.close()
            time.sleep(0.005)

    def pump(self, duration_s: float, setpoints: tuple[float, ...] | None = None) -> list[p.Packet]:
        """Read for ``duration_s``, sending ``setpoints`` at SETPOINT_HZ meanwhile; the packets received."""
        got = []
        end = time.monotonic() + duration_s
        next_send = time.monotonic()
        while time.monotonic() < end:
            if setpoints is not None and time.monotonic() >= next_send:
                self.link.send(p.Setpoints(setpoints))
                next_send += 1 / SETPOINT_HZ
            got += self.link.receive(time.monotonic())
            time.sleep(0.002)
        self.packets += got
        return got

    def pump_until(self, done, setpoints: tuple[float, ...] | None = None) -> list[p.Packet]:
        """Pump until ``done(packets received meanwhile)``, at most TIMEOUT_S. QEMU hands the guest one received
        byte per pass of its main loop (3-30 kB/s measured, docs/firmware.md), so what the device does in
        response to the host comes late by the backlog, never on a fixed schedule."""
        got = []
        deadline = time.monotonic() + TIMEOUT_S
        while not done(got):
            assert time.monotonic() < deadline, [pk.message for pk in got[-5:]]
            got += self.pump(0.05, setpoints)
        return got

    def request(self, message, answer, setpoints: tuple[float, ...] | None = None) -> p.Packet:
        """Send ``message``, pump (sending ``setpoints`` meanwhile) until ``answer(message, seq)`` holds for a
        packet; that packet. :attr:`sent_before` keeps the link's (frames sent, write timeouts) up to ``message``."""
        seq = self.link.send(message)
        self.sent_before = (self.link.totals.frames_sent, self.link.totals.write_timeouts)
        deadline = time.monotonic() + TIMEOUT_S
        while time.monotonic() < deadline:
            for packet in self.pump(0.01, setpoints):
                if answer(packet.message, seq):
                    return packet
        raise AssertionError(f"no answer to {message}")


def samples(packets) -> list[p.TelemetrySample]:
    return [s for pk in packets if isinstance(pk.message, p.Telemetry) for s in pk.message.samples]


def test_the_board_port_in_qemu_talks_to_the_driver_link(tmp_path):
    rig = load_rig(RAYBOT)
    servo = rig.servos[0]
    elf = build_image(rig, tmp_path)
    with netduinoplus2(elf, tmp_path) as (port, qmp):
        # the timers as RM0090 §18 wants them for 1 µs ticks from QEMU's 1 GHz timer clock (the part's image:
        # PSC 83 from 84 MHz): the PWM at 50 Hz, the µs clock free running over 32 bits
        assert (qmp.word(TIM3_PSC), qmp.word(TIM3_ARR)) == (QEMU_TIMER_HZ // 10**6 - 1, 19_999)
        assert (qmp.word(TIM2_PSC), qmp.word(TIM2_ARR)) == (QEMU_TIMER_HZ // 10**6 - 1, 2**32 - 1)
        session = Session(rig, port)                  # HELLO -> DEVICE_INFO checked against the rig file -> ACK
        assert session.link.device_info.rig_name == rig.name

        # setpoints: the compare register and the telemetry's servo position reach the pulse width (1 µs steps)
        target = servo.to_raw(0.2)
        assert abs(target - servo.neutral_raw) > 50
        at = lambda raw: lambda got: samples(got) and samples(got)[-1].servo == (float(round(raw)),)
        driven = samples(session.pump_until(at(target), (target,)))
        assert qmp.word(TIM3_CCR1) == round(target)
        # sampling on the device clock at the rig's rate: t_us exactly one period apart
        steps = {b.t_us - a.t_us for a, b in zip(driven, driven[1:])}
        assert steps == {round(1e6 / rig.telemetry_hz)}
        # the ADC read in channel order (strain then load), one conversion each: QEMU's ramp of 7 per conversion
        counts = [c for s in driven for c in (*s.strain, *s.load)]
        assert len(counts) == len(driven) * (len(rig.strain) + len(rig.load))
        assert {(b - a) % ADC_FULL_SCALE for a, b in zip(counts, counts[1:])} == {QEMU_ADC_STEP}

        # a corrupted frame is counted, not acted on; LINK_STATS counts what the link sent
        bad = bytearray(p.encode(p.Setpoints((servo.max_raw,)), session.link.tx_seq))
        bad[-2] ^= 0x10
        session.link.port.write(bytes(bad))
        session.link.tx_seq += 1                      # its sequence number is then missed: one gap
        # (the servo kept fed meanwhile: the count of watchdog trips below is the claim that a fed servo has none,
        # and an unfed one trips 0.2 s after its last setpoint, however slowly QEMU answers)
        stats = session.request(p.GetLinkStats(), lambda m, seq: isinstance(m, p.LinkStats), (target,)).message
        assert stats.crc_errors == 1 and stats.seq_gaps == 1 and stats.framing_errors == 0
        # every frame the link sent (handshake, setpoints, this request), not the one written corrupted past it;
        # a write the link timed out on (QEMU reads the pty a byte at a time) may have got through whole
        sent, timeouts = session.sent_before          # the setpoints sent after the request came after its answer
        assert sent <= stats.frames_rx <= sent + timeouts
        assert stats.watchdog_trips == 0

        # setpoints stop: the watchdog trips and the servo goes back to neutral
        tripped = lambda got: any(isinstance(pk.message, p.Heartbeat) and pk.message.flags & p.FLAG_WATCHDOG
                                  for pk in got)
        idle = session.pump_until(tripped)
        idle += session.pump_until(at(servo.neutral_raw))
        assert qmp.word(TIM3_CCR1) == round(servo.neutral_raw)
        # the way back is rate limited: per sample at most the rig's rate (raw/s) times the period, plus the
        # compare register's 1 µs rounding
        back = [s.servo[0] for s in samples(idle)]
        limit = config_table(rig)["max_rate_raw_per_s"][0] / rig.telemetry_hz + 1.0
        assert max(abs(b - a) for a, b in zip(back, back[1:])) <= limit
        assert len({*back}) > 2                        # and it took more than one step

        # the e-stop over the link: latched (setpoints refused, servo held), then reset
        session.request(p.EStop(reason=1), lambda m, seq: isinstance(m, p.Ack) and m.seq == seq)
        refused = session.request(p.Setpoints((target,)), lambda m, seq: isinstance(m, p.Nack) and m.seq == seq)
        assert refused.message.reason == 3
        heartbeats = lambda got: [pk.message for pk in got if isinstance(pk.message, p.Heartbeat)]
        beats = heartbeats(session.pump_until(lambda got: len(heartbeats(got)) >= 2))
        assert all(beat.flags & p.FLAG_ESTOP for beat in beats)
        assert qmp.word(TIM3_CCR1) == round(servo.neutral_raw)
        session.request(p.EStopReset(), lambda m, seq: isinstance(m, p.Ack) and m.seq == seq)
        session.pump_until(at(target), (target,))
        assert qmp.word(TIM3_CCR1) == round(target)

        # the driver's decoder saw a clean stream throughout
        assert session.link.decoder.counters.errors == 0
        stats = session.request(p.GetLinkStats(), lambda m, seq: isinstance(m, p.LinkStats), (target,)).message
        assert stats.watchdog_trips == 1 and stats.tx_dropped == 0


def test_the_image_for_the_part_boots_from_flash(tmp_path):
    """What the part reads at reset from 0x08000000 (RM0090 §2.4, the Cortex-M4 vector table): the initial stack
    pointer at the top of the 128 KiB SRAM, and a Thumb reset vector into the flash image."""
    elf = build_image(load_rig(RAYBOT), tmp_path, qemu=False)
    image = tmp_path / "rig_stm32f405.bin"
    subprocess.run(["arm-none-eabi-objcopy", "-O", "binary", str(elf), str(image)], check=True)
    data = image.read_bytes()
    stack_top, reset = struct.unpack_from("<II", data)
    assert stack_top == 0x2000_0000 + 128 * 1024
    assert reset & 1 and 0x0800_0000 <= reset - 1 < 0x0800_0000 + len(data)
    symbols = subprocess.run(["arm-none-eabi-nm", str(elf)], check=True, capture_output=True, text=True).stdout
    addresses = {line.split()[2]: int(line.split()[0], 16) for line in symbols.splitlines() if len(line.split()) == 3}
    assert reset - 1 == addresses["Reset_Handler"]
    # the static data leaves the stack its 8 KiB (the linker script asserts it too)
    assert addresses["_ebss"] + 8 * 1024 <= stack_top
