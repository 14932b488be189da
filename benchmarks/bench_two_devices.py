"""Benchmark of one ``mms drive`` owning both devices of the Dynamixel rig (hil/drive/links/composite.py).

Real processes: a sim/state publisher (a sinusoidal stroke at 500 Hz on a real ZeroMQ socket), ``mms drive
--emulate --autostart`` and its emulators on ptys. Two runs of --seconds each, in the same session:

* baseline: the bus alone (flapper_dynamixel_rig.toml without its ``[microcontroller]``);
* two devices: the rig as it is, the sensor microcontroller's emulator beside the bus's.

Printed: the bus's completed read cycles per second (status packets / servos / s) in both runs and their ratio
(what the second device costs the bus cycle), hw/telemetry frames per second against the microcontroller's
configured frame rate, and the age of the held servo positions in each frame (``host_ns - servo_host_ns``, p50 /
p99 / max) against the bus read period (1 / command_hz).

    .venv/bin/python benchmarks/bench_two_devices.py [--seconds 10]
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import tomli_w

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from firmware_interface.rigs.dynamixel import load_dxl_rig  # noqa: E402
from firmware_interface.rigs.mcu import load_rig  # noqa: E402
from hil.testing import Stack, write_network  # noqa: E402
from sim.config import load_toml  # noqa: E402

RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
STROKE_RAD, STROKE_HZ = 0.4, 0.5


def one_run(rig: Path, seconds: float, folder: Path) -> dict:
    stack = Stack(folder, write_network(folder / "network.toml"), ROOT)
    try:
        stack.sim(["stroke_r", "stroke_l"], lambda t: [STROKE_RAD * math.sin(2 * math.pi * STROKE_HZ * t)] * 2,
                  rate_hz=500)
        drv = stack.driver("--emulate", "--autostart", rig=rig)
        drv.wait_status(lambda s: s["lifecycle"] == "active", "the driver active", timeout_s=120)
        start = drv.status()
        t0 = time.time_ns()
        stack.wait_for(lambda: time.time_ns() - t0 > seconds * 1e9, timeout_s=seconds + 5, poll_s=0.1,
                       what="the measuring window")
        end = drv.status()
        elapsed_s = (end["stamp_ns"] - start["stamp_ns"]) / 1e9
        telemetry = [m for m in drv.collector.get("hw/telemetry")
                     if start["stamp_ns"] <= m["host_ns"] <= end["stamp_ns"]]
        n_servo = len(telemetry[-1]["servo_names"])
        out = {"elapsed_s": elapsed_s, "frames_per_s": len(telemetry) / elapsed_s,
               "bus_reads_per_s": (end["link"]["status_ok"] - start["link"]["status_ok"]) / n_servo / elapsed_s,
               "read_timeouts": end["link"]["read_timeouts"] - start["link"]["read_timeouts"]}
        ages = [(m["host_ns"] - m["servo_host_ns"]) / 1e6 for m in telemetry if "servo_host_ns" in m]
        if ages:
            out["held_age_ms"] = {"p50": float(np.percentile(ages, 50)), "p99": float(np.percentile(ages, 99)),
                                  "max": float(np.max(ages))}
        assert drv.stop() == 0
        return out
    finally:
        stack.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring window per run, s (default 10)")
    args = parser.parse_args()
    dxl_rig, sensor_rig = load_dxl_rig(RIG), load_rig(load_dxl_rig(RIG).microcontroller)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        doc = load_toml(RIG)
        del doc["microcontroller"]
        bus_only = folder / "bus_only.toml"
        bus_only.write_text(tomli_w.dumps(doc))
        (folder / "a").mkdir()
        (folder / "b").mkdir()
        print(f"bus alone, {args.seconds:g} s ...", flush=True)
        base = one_run(bus_only, args.seconds, folder / "a")
        print(f"bus + sensor microcontroller, {args.seconds:g} s ...", flush=True)
        two = one_run(RIG, args.seconds, folder / "b")
    read_period_ms = 1e3 / dxl_rig.command_hz
    frame_hz = sensor_rig.telemetry_hz / sensor_rig.samples_per_frame
    print(f"\nbus read cycles/s (command rate {dxl_rig.command_hz:g} Hz): alone {base['bus_reads_per_s']:.1f}, "
          f"with the sensors {two['bus_reads_per_s']:.1f}, ratio {two['bus_reads_per_s'] / base['bus_reads_per_s']:.3f}"
          f" (read timeouts {base['read_timeouts']} / {two['read_timeouts']})")
    print(f"hw/telemetry frames/s: {two['frames_per_s']:.1f} against the microcontroller's {frame_hz:g} "
          f"(ratio {two['frames_per_s'] / frame_hz:.3f}); the bus alone: {base['frames_per_s']:.1f}")
    age = two["held_age_ms"]
    print(f"held servo positions' age in a frame: p50 {age['p50']:.2f} ms, p99 {age['p99']:.2f} ms, max "
          f"{age['max']:.2f} ms against the {read_period_ms:.1f} ms read period (p99 ratio "
          f"{age['p99'] / read_period_ms:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
