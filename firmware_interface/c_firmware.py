"""The rig firmware in C (firmware_interface/firmware/rig/, docs/firmware.md), seen from Python.

* :func:`build` compiles the host port (``rig_host``: the firmware core ``rig_fw.c`` + the codec + the pipe HAL
  ``rig_host.c``) with gcc, cached by the hash of its sources and flags;
* :func:`config_table` is the rig file's table for the firmware (raw limits, neutral, rate limits in raw units
  per second, rates), given to the host port as its INIT record (:func:`init_record`) and to a board as a
  generated C file (:func:`config_c_source`, ``python -m firmware_interface.c_firmware RIG.toml``);
* :class:`FirmwareEmulator` is ``mms emulate --firmware``: the Python emulator's pty, pacing, faults, applied log
  and statistics, and its servo dynamics, sensor models and plant, around the C firmware instead of
  :class:`firmware_interface.emulator.Device`. The driver sees the same pty either way.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from firmware_interface import protocol as p
from firmware_interface.emulator import SETPOINT_REFUSALS, Emulator
from firmware_interface.pty_device import TX_BUFFER_BYTES
from firmware_interface.rigs.mcu import Rig, load_rig

FIRMWARE = Path(__file__).resolve().parent / "firmware"
RIG_DIR = FIRMWARE / "rig"
#: the host port's sources, in link order
HOST_SOURCES = (RIG_DIR / "rig_host.c", RIG_DIR / "rig_fw.c", FIRMWARE / "mms_proto.c")
#: what every build of the firmware must compile cleanly with (-Wdouble-promotion: no double on the board)
WARNINGS = ("-std=c99", "-Wall", "-Wextra", "-Werror", "-Wdouble-promotion")
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
US_PER_S = 1_000_000
#: the host port's pipe records (docs/firmware.md): u8 tag, 3 zero bytes, u32 payload length
RECORD_HEAD = struct.Struct("<B3xI")
TICK_HEAD = struct.Struct("<IB3xI")                  # now_us, e-stop input, room in the UART buffer
SAMPLE_HEAD = struct.Struct("<II")                   # t_us, dt_us
SEEN_HEAD = struct.Struct("<HBBI")                   # seq, nack (0: applied), n, t_us
DONE = struct.Struct("<15I")
DONE_FIELDS = ("wait_us", "frames_tx", "tx_dropped", "watchdog_trips", "overruns", "frames", "crc_errors",
               "framing_errors", "oversize", "malformed", "bad_version", "unknown_type", "seq_gaps", "seq_repeats",
               "flags")
MAX_SERVOS = 8                                       # RIG_MAX_SERVOS in rig_fw.h


def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        from sim.config import ConfigError
        raise ConfigError(None, "--firmware", "gcc not found: it builds the C firmware's host port")
    return gcc


def compile_c(sources, exe: Path, *flags: str) -> Path:
    """Compile and link C ``sources`` with the firmware's warnings and include folders (tests, the board port)."""
    subprocess.run([_gcc(), *WARNINGS, *flags, "-I", str(FIRMWARE), "-I", str(RIG_DIR), "-I", str(RIG_DIR / "board"),
                    "-o", str(exe), *map(str, sources), "-lm"], check=True, capture_output=True)
    return exe


def build(out_dir: Path | None = None, *, sanitize: bool = False) -> Path:
    """The host port's program, compiled unless a build of the same sources and flags exists in ``out_dir``
    (default: ``$XDG_CACHE_HOME/mms-hil``, else ``~/.cache/mms-hil``)."""
    flags = ["-O2", *(SANITIZE if sanitize else ())]
    digest = hashlib.sha256(" ".join([*WARNINGS, *flags]).encode())
    for source in HOST_SOURCES + (RIG_DIR / "rig_fw.h", FIRMWARE / "mms_proto.h"):
        digest.update(source.read_bytes())
    if out_dir is None:
        out_dir = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "mms-hil"
    exe = Path(out_dir) / f"rig_host-{digest.hexdigest()[:16]}"
    if not exe.exists():
        exe.parent.mkdir(parents=True, exist_ok=True)
        tmp = exe.with_name(f"{exe.name}.{os.getpid()}.tmp")
        compile_c(HOST_SOURCES, tmp, *flags)
        os.replace(tmp, exe)                          # atomic: a concurrent build never runs half a file
    return exe


def host_program(path: Path | None) -> Path:
    """``--firmware``'s program: ``path`` if it is an executable file, else a fresh :func:`build`; a one-line
    ConfigError when neither can be had."""
    from sim.config import ConfigError

    if path is not None:
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ConfigError(None, "--firmware", f"{path} is not an executable file (a built rig_host)")
        return path
    try:
        return build()
    except subprocess.CalledProcessError as exc:
        first = (exc.stderr or b"").decode(errors="replace").strip().splitlines()[:1]
        raise ConfigError(None, "--firmware", f"gcc could not build the host port: {' '.join(first)}") from None


def config_table(rig: Rig) -> dict:
    """The firmware's table from the rig file: per servo channel (frame order) the raw limits, neutral and rate
    limit (``max_rate_rad_s`` at the horn times ``|gain|`` raw units per rad), the power-up rates and whether the
    servo target is interpolated between setpoint frames (``[rates] setpoints``)."""
    return {"name": rig.name, "n_servo": len(rig.servos), "n_strain": len(rig.strain), "n_load": len(rig.load),
            "sample_rate_hz": rig.telemetry_hz, "samples_per_frame": rig.samples_per_frame,
            "interpolate": int(rig.setpoints == "interpolate"),
            "watchdog_us": round(rig.watchdog_timeout_s * US_PER_S),
            "heartbeat_period_us": round(US_PER_S / rig.heartbeat_hz),
            "min_raw": [s.min_raw for s in rig.servos], "max_raw": [s.max_raw for s in rig.servos],
            "neutral_raw": [s.neutral_raw for s in rig.servos],
            "max_rate_raw_per_s": [s.max_rate_rad_s * abs(s.gain) for s in rig.servos]}


def init_record(rig: Rig) -> bytes:
    """The host port's INIT record (rig_host.c: read_config)."""
    t = config_table(rig)
    name = t["name"].encode()
    n = t["n_servo"]
    payload = struct.pack("<4BHBBII32s", n, t["n_strain"], t["n_load"], len(name), t["sample_rate_hz"],
                          t["samples_per_frame"], t["interpolate"], t["watchdog_us"], t["heartbeat_period_us"], name)
    for key in ("min_raw", "max_raw", "neutral_raw", "max_rate_raw_per_s"):
        payload += struct.pack(f"<{n}f", *t[key])
    return RECORD_HEAD.pack(ord("I"), len(payload)) + payload


def config_c_source(rig: Rig) -> str:
    """The rig's table as a C file for a board port (``const rig_config rig_table``, and the UART's
    ``const uint32_t rig_baud`` in bit/s)."""
    t = config_table(rig)

    def floats(key: str) -> str:
        return "{" + ", ".join(f"{v!r}f" for v in t[key]) + "}"
    name = t["name"].encode()
    escaped = "".join(f"\\x{b:02x}" for b in name)
    return (f"/* Generated from {rig.path.name} by python -m firmware_interface.c_firmware: do not edit. */\n"
            '#include "rig_fw.h"\n\n'
            "const rig_config rig_table = {\n"
            f'    "{escaped}", {len(name)}, {t["n_servo"]}, {t["n_strain"]}, {t["n_load"]},\n'
            f'    {t["sample_rate_hz"]}, {t["samples_per_frame"]}, {t["interpolate"]}, {t["watchdog_us"]}u, '
            f'{t["heartbeat_period_us"]}u,\n'
            f'    {floats("min_raw")},\n    {floats("max_raw")},\n    {floats("neutral_raw")},\n'
            f'    {floats("max_rate_raw_per_s")}\n}};\n\n'
            f'const uint32_t rig_baud = {rig.baud}u;   /* bit/s */\n')


class FirmwareProcess:
    """The host port running: one pipe pair of records (docs/firmware.md), in lockstep.

    :meth:`tick` hands it the clock, the e-stop input and the received bytes, answers its sampling requests with
    ``sample(t_us, dt_us, servo_out_raw) -> (servo_raw, counts)`` and returns the frames it sent; ``seen`` gets
    every SETPOINTS frame it handled as ``(seq, t_us, raw, nack)``. :attr:`done` holds its last counters.
    """

    def __init__(self, program: Path, rig: Rig, sample, seen=None):
        self.n_servo, self.n_sensor = len(rig.servos), len(rig.sensors)
        self.sample, self.seen = sample, seen
        self.proc = subprocess.Popen([str(program)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        self.done = dict.fromkeys(DONE_FIELDS, 0)
        self._write(init_record(rig))
        self._sensors_head = RECORD_HEAD.pack(ord("S"), 4 * (self.n_servo + self.n_sensor))
        self._sensors = struct.Struct(f"<{self.n_servo}f{self.n_sensor}i")

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:                                   # an unbuffered pipe write may be partial (a signal)
            view = view[self.proc.stdin.write(view):]

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.proc.stdout.read(n - len(out))
            if not chunk:
                raise RuntimeError(f"the C firmware ended (exit code {self.proc.wait()})")
            out += chunk
        return out

    def tick(self, now_us: int, data: bytes, button: bool, tx_room: int) -> list[bytes]:
        self._write(RECORD_HEAD.pack(ord("T"), TICK_HEAD.size + len(data))
                    + TICK_HEAD.pack(now_us % p.TIME_MODULUS, int(button), max(0, tx_room)) + data)
        frames = []
        while True:
            tag, n = RECORD_HEAD.unpack(self._read(RECORD_HEAD.size))
            body = self._read(n)
            if tag == ord("F"):
                frames.append(body)
            elif tag == ord("Q"):
                t_us, dt_us = SAMPLE_HEAD.unpack_from(body)
                out = struct.unpack_from(f"<{self.n_servo}f", body, SAMPLE_HEAD.size)
                servo, counts = self.sample(t_us, dt_us, out)
                self._write(self._sensors_head + self._sensors.pack(*servo, *counts))
            elif tag == ord("A"):
                seq, nack, k, t_us = SEEN_HEAD.unpack_from(body)
                if self.seen is not None:
                    self.seen(seq, t_us, struct.unpack_from(f"<{k}f", body, SEEN_HEAD.size), nack)
            elif tag == ord("D"):
                self.done = dict(zip(DONE_FIELDS, DONE.unpack(body)))
                return frames
            else:
                raise RuntimeError(f"the C firmware sent an unknown record {tag:#x}")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


class FirmwareEmulator(Emulator):
    """``mms emulate --firmware``: :class:`Emulator` with the C firmware as the device. The Python side keeps
    what is not firmware: the pty and its pacing, fault injection, the applied log, and the rig's physics (the
    servos' own dynamics, the plant, the sensor models: those of :class:`~firmware_interface.emulator.Device`,
    seeded alike)."""

    def __init__(self, rig: Rig, program: Path, **kwargs):
        super().__init__(rig, **kwargs)
        self.button_held = False
        self.firmware = FirmwareProcess(program, rig, self._sample,
                                        self._seen if self.applied_log is not None else None)

    def _sample(self, t_us: int, dt_us: int, out_raw) -> tuple[list[float], list[int]]:
        """The rig between the firmware's servo outputs and its sensor inputs, over one sampling period."""
        d, servos = self.device, self.device.servos
        dt = dt_us / US_PER_S
        target = np.array([s.to_rad(r) for s, r in zip(self.rig.servos, out_raw)])     # (n_servo,) rad
        before = servos.angle
        servos.step(target, dt)
        truth = d.plant.sense(servos.angle, (servos.angle - before) / dt, t_us / US_PER_S)
        raw = [float(s.to_raw(a)) for s, a in zip(self.rig.servos, servos.angle)]
        return raw, d.sensors.sample(truth, t_us / US_PER_S)

    def _seen(self, seq: int, t_us: int, raw, nack: int) -> None:
        record = {"seq": seq, "t_us": t_us, "host_ns": time.time_ns(), "raw": list(raw),
                  "result": "applied" if nack == 0 else "refused"}
        if nack:
            record["reason"] = SETPOINT_REFUSALS[nack]
        self.applied_log.write(record)

    def _send(self, frames: list[bytes], now: float) -> None:
        """As the Python device's, but the firmware counted frames_tx and its own tx_dropped already."""
        for frame in frames:
            frame = self._line(frame)
            if frame is not None and not self.link.queue(frame, now):
                self.device.tx_dropped += 1             # a noise burst made a frame longer than the room it had

    def step(self, now: float) -> str | None:
        if self.faults.disconnect_after_s is not None and now >= self.faults.disconnect_after_s:
            return "disconnect"
        if self._button_pressed.is_set():               # a press and a release between two passes: both seen
            self._button_pressed.clear()
            self.button_held = True
        elif self._button_released.is_set():
            self._button_released.clear()
            self.button_held = False
        data = self._corrupt_rx(self.link.read(now))
        room = TX_BUFFER_BYTES - self.link.tx_queued_bytes
        self._send(self.firmware.tick(round(now * US_PER_S), data, self.button_held, room), now)
        return None

    def wake_s(self, now: float) -> float:
        return self.firmware.done["wait_us"] / US_PER_S

    def on_stop(self) -> None:
        super().on_stop()
        self.firmware.close()

    def stats(self) -> dict:
        stats = super().stats()
        done = self.firmware.done
        rx = {k: done[k] for k in ("frames", "crc_errors", "framing_errors", "oversize", "malformed", "bad_version",
                                   "unknown_type", "seq_gaps", "seq_repeats")}
        stats.update(firmware="c", frames_tx=done["frames_tx"], tx_dropped=done["tx_dropped"] + self.device.tx_dropped,
                     watchdog_trips=done["watchdog_trips"], overruns=done["overruns"],
                     rx={"bytes": self.link.bytes_rx, **rx})
        return stats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m firmware_interface.c_firmware",
                                     description="write a rig file's table for the C firmware as a C file")
    parser.add_argument("rig", help="rig TOML (configs/rigs/*.toml)")
    parser.add_argument("-o", "--out", default=None, help="output file (default: stdout)")
    args = parser.parse_args(argv)
    source = config_c_source(load_rig(args.rig))
    if args.out is None:
        sys.stdout.write(source)
    else:
        Path(args.out).write_text(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
