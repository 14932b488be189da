"""Benchmark of `mms emulate`: sustained telemetry rate, frame loss, wire throughput and CPU use.

Each case starts `mms emulate` as a subprocess on a pty, opens it with pyserial, says HELLO, sends SETPOINTS at
the rig's command rate (a sinusoid on every servo) for --seconds, and counts what arrives. Figures are printed
as ratios against baselines computed in the same run:

* telemetry: samples received / (configured rate x measured duration);
* wire: device -> host bytes per second (the emulator's own count over its run) / the UART's theoretical byte
  rate (baud / 10 bits per byte), and against the protocol's own expected byte rate for the configured
  telemetry (frames + heartbeats);
* loss: sequence gaps and decoder errors at the host, frames the device dropped (transmit buffer full);
* CPU: the emulator's user + system CPU seconds (os.times() of the reaped child, including its physics plant
  process) per wall-clock second of its whole life (start-up, robot build and numba compilation included).

* device: each kinematic case runs twice, with the Python device logic and with the rig's C firmware
  (`mms emulate --firmware`, docs/firmware.md), side by side; rtt: the median round trip of a host HEARTBEAT to
  the device's answer, ms (the latency the device logic adds on top of the wire and the host).

The last case runs the flapper rig at half its baud rate, where its telemetry cannot fit: the emulator must
keep the UART pace and drop (and count) what does not fit, not speed up.

    .venv/bin/python benchmarks/bench_emulator.py [--seconds 5] [--quick]
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from firmware_interface import protocol as p  # noqa: E402
from firmware_interface.c_firmware import build  # noqa: E402
from firmware_interface.link import DeviceLink  # noqa: E402
from firmware_interface.rigs.mcu import load_rig  # noqa: E402

SETPOINT_AMPLITUDE_RAD = 0.3
SETPOINT_FREQUENCY_HZ = 2.0
HOST_READ_TIMEOUT_S = 5e-4      # short, so the host keeps the command rate while it reads
ROUND_TRIPS = 20                # heartbeat round trips timed after each case


def expected_wire_bytes_s(rig, baud_rate_limit: float) -> float:
    """Device -> host bytes/s the protocol needs for the rig's telemetry and heartbeats (exact frame sizes)."""
    sample = p.TelemetrySample(0, (1.0,) * len(rig.servos), (1,) * len(rig.strain), (1,) * len(rig.load))
    frame = p.encode(p.Telemetry(0, len(rig.servos), len(rig.strain), len(rig.load),
                                 (sample,) * rig.samples_per_frame), 1)
    heartbeat = p.encode(p.Heartbeat(0, 1), 1)
    need = len(frame) * rig.telemetry_hz / rig.samples_per_frame + len(heartbeat) * rig.heartbeat_hz
    return min(need, baud_rate_limit)


def run_case(rig_path: Path, plant: str, seconds: float, baud: int | None, firmware: Path | None) -> dict:
    rig = load_rig(rig_path)
    baud = baud or rig.baud
    stats_file = Path(tempfile.mkstemp(suffix=".json")[1])
    cpu_before = os.times()
    launched = time.monotonic()
    cmd = [sys.executable, "-m", "hil.cli", "emulate", "--rig", str(rig_path), "--plant", plant,
           "--baud", str(baud), "--stats", str(stats_file), *(["--firmware", str(firmware)] if firmware else [])]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 300)
        if not ready:
            raise RuntimeError("emulator did not start")
        path = proc.stdout.readline().strip()
        link = DeviceLink(path, baud, read_timeout_s=HOST_READ_TIMEOUT_S)
        if link.request(p.Hello(), p.DeviceInfo, timeout_s=30) is None:
            raise RuntimeError("no DEVICE_INFO")
        samples = setpoints = 0
        first_t_us = last_t_us = None
        period = 1.0 / rig.command_hz
        start = time.monotonic()
        next_send = start
        while (now := time.monotonic()) - start < seconds:
            if now >= next_send:
                angle = SETPOINT_AMPLITUDE_RAD * math.sin(2 * math.pi * SETPOINT_FREQUENCY_HZ * (now - start))
                link.send(p.Setpoints(tuple(s.to_raw(s.neutral_rad + angle) for s in rig.servos)))
                setpoints += 1
                next_send += period
                if next_send < now:                 # fell behind: do not burst to catch up
                    next_send = now + period
            for packet in link.poll():
                if isinstance(packet.message, p.Telemetry):
                    samples += len(packet.message.samples)
                    if first_t_us is None:
                        first_t_us = packet.message.samples[0].t_us
                    last_t_us = packet.message.samples[-1].t_us
        wall = time.monotonic() - start
        device_stats = link.request(p.GetLinkStats(), p.LinkStats, timeout_s=5)
        counters = link.decoder.counters
        round_trips = []
        for _ in range(ROUND_TRIPS):
            sent = time.monotonic()
            if link.request(p.Heartbeat(0, 0), p.Heartbeat, timeout_s=5) is not None:
                round_trips.append(time.monotonic() - sent)
        link.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    lifetime = time.monotonic() - launched
    cpu_after = os.times()
    emulator = json.loads(stats_file.read_text())
    stats_file.unlink()
    cpu = (cpu_after.children_user - cpu_before.children_user) + (cpu_after.children_system
                                                                  - cpu_before.children_system)
    uart_bytes_s = baud / 10.0
    return {
        "rig": rig.name, "plant": plant, "device": "C" if firmware else "python", "baud": baud, "seconds": wall,
        "rtt_ms": 1e3 * statistics.median(round_trips) if round_trips else math.nan,
        "telemetry_ratio": samples / (rig.telemetry_hz * wall),
        "device_clock_ratio": ((last_t_us - first_t_us) / 1e6 / wall) if first_t_us is not None else 0.0,
        "wire_bytes_s": emulator["bytes_tx"] / emulator["elapsed_s"],
        "wire_vs_uart": emulator["bytes_tx"] / emulator["elapsed_s"] / uart_bytes_s,
        "wire_vs_needed": emulator["bytes_tx"] / emulator["elapsed_s"] / expected_wire_bytes_s(rig, uart_bytes_s),
        "needed_vs_uart": expected_wire_bytes_s(rig, math.inf) / uart_bytes_s,
        "setpoints_hz": setpoints / wall,
        "seq_gaps": counters.seq_gaps, "host_errors": counters.errors,
        "frames": counters.frames,
        "device_tx_dropped": device_stats.message.tx_dropped if device_stats else -1,
        "device_rx_errors": (device_stats.message.crc_errors + device_stats.message.framing_errors
                             if device_stats else -1),
        "cpu_per_wall_s": cpu / lifetime,
        "serial_loop_cpu_per_s": emulator["cpu_s"] / lifetime,
        "plant_cpu_per_s": emulator["children_cpu_s"] / lifetime,
        "plant_rtf": emulator["plant"].get("rtf"),
        "plant_lag_s": emulator["plant"].get("lag_s"),
        "overruns": emulator["overruns"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measurement time per case, s (default 5)")
    parser.add_argument("--quick", action="store_true", help="kinematic flapper case only")
    args = parser.parse_args()
    flapper = ROOT / "configs" / "rigs" / "flapper_rig.toml"
    raybot = ROOT / "configs" / "rigs" / "raybot_rig.toml"
    firmware = build()
    cases = [(flapper, "kinematic", None, None), (flapper, "kinematic", None, firmware)]
    if not args.quick:
        cases += [(raybot, "kinematic", None, None), (raybot, "kinematic", None, firmware),
                  (flapper, "physics", None, None), (raybot, "physics", None, None),
                  (flapper, "kinematic", load_rig(flapper).baud // 2, None)]
    rows = [run_case(rig, plant, args.seconds, baud, fw)
            for rig, plant, baud, fw in tqdm(cases, desc="cases", unit="case")]
    print()
    print("baselines: telemetry = configured sample rate; UART = baud / 10 bytes/s; needed = the protocol's "
          "bytes/s for the configured telemetry + heartbeats")
    header = (f"{'rig':<12} {'plant':<9} {'device':<6} {'baud':>7} {'telem/cfg':>9} {'devclk/wall':>11} {'wire B/s':>9} "
              f"{'wire/UART':>9} {'wire/need':>9} {'need/UART':>9} {'gaps':>5} {'err':>4} {'tx_drop':>7} "
              f"{'cpu/s':>6} {'loop':>5} {'plant':>5} {'rtf/lag':>11} {'cmd Hz':>6} {'rtt ms':>6}")
    print(header)
    print("(cpu/s: the emulator's CPU seconds per second of its life, from os.times() of the reaped child; loop and "
          "plant: the same split by the emulator itself, serial loop vs its physics plant process)")
    for r in rows:
        rtf = "-" if r["plant_rtf"] is None else f"{r['plant_rtf']:.3f}/{1e3 * r['plant_lag_s']:.0f}ms"
        print(f"{r['rig']:<12} {r['plant']:<9} {r['device']:<6} {r['baud']:>7} {r['telemetry_ratio']:>9.3f} "
              f"{r['device_clock_ratio']:>11.3f} {r['wire_bytes_s']:>9.0f} {r['wire_vs_uart']:>9.3f} "
              f"{r['wire_vs_needed']:>9.3f} {r['needed_vs_uart']:>9.3f} {r['seq_gaps']:>5} {r['host_errors']:>4} "
              f"{r['device_tx_dropped']:>7} {r['cpu_per_wall_s']:>6.3f} {r['serial_loop_cpu_per_s']:>5.2f} "
              f"{r['plant_cpu_per_s']:>5.2f} {rtf:>11} {r['setpoints_hz']:>6.0f} {r['rtt_ms']:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
