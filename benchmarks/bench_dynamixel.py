"""Benchmark of the Dynamixel bus emulator: sync-write + sync-read cycle rate against the bus-time limit.

One cycle is what a HIL driver does per control period: a SYNC_WRITE of the goal positions (4 bytes per servo,
no reply) and a SYNC_READ of present current + velocity + position (10 bytes per servo, one status packet each).
For 2 and 4 servos at 1 and 4 Mbaud the emulator runs as a subprocess on a pty (servos with return delay 0)
and two hosts drive it for --seconds each:

* ``sdk``: the official dynamixel_sdk, GroupSyncWrite + GroupSyncRead (it busy-polls the port);
* ``codec``: our codec (firmware_interface.dynamixel) over a blocking pyserial port, reading until every
  status packet has arrived.

The baseline, computed in the same run from the exact packet sizes, is the bus-time limit: a cycle occupies the
wire for ``(14 + 5 n) + (14 + n) + n (11 + 10)`` bytes at 10 bits per byte, plus n return delays (0 here), so
``limit_hz = baud / (10 * bytes)``. Printed: cycles/s, the ratio to that limit, and failed cycles.

    .venv/bin/python benchmarks/bench_dynamixel.py [--seconds 3] [--quick]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import serial
import tomli_w
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from firmware_interface import dynamixel as dxl  # noqa: E402
from sim.config import load_toml  # noqa: E402

RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
GOAL, READ_ADDRESS, READ_BYTES = 116, 126, 10      # goal position; present current..position
HOST_TIMEOUT_S = 0.1


def cycle_bytes(n: int) -> int:
    """Wire bytes of one cycle for ``n`` servos (no stuffing: the data here never holds FF FF FD)."""
    sync_write = len(dxl.sync_write(GOAL, 4, {i: dxl.pack_value(2048, 4) for i in range(1, n + 1)}))
    sync_read = len(dxl.sync_read(READ_ADDRESS, READ_BYTES, list(range(1, n + 1))))
    status = len(dxl.encode_status(1, 0, bytes(READ_BYTES)))
    return sync_write + sync_read + n * status


def rig_with(n: int, directory: Path) -> Path:
    doc = load_toml(RIG)
    template = doc["servos"][0]
    doc["servos"] = [dict(template, name=f"servo_{k}", id=k, return_delay_time=0) for k in range(1, n + 1)]
    doc.pop("joints", None)
    doc.pop("microcontroller", None)
    doc["emulator"] = {"seed": 1}
    path = directory / f"bench_{n}.toml"
    path.write_text(tomli_w.dumps(doc))
    return path


def sdk_cycles(path: str, baud: int, n: int, seconds: float, bar) -> tuple[int, int, float]:
    from dynamixel_sdk import COMM_SUCCESS, GroupSyncRead, GroupSyncWrite, PacketHandler, PortHandler
    port = PortHandler(path)
    port.openPort()
    port.setBaudRate(baud)
    ph = PacketHandler(2.0)
    writer, reader = GroupSyncWrite(port, ph, GOAL, 4), GroupSyncRead(port, ph, READ_ADDRESS, READ_BYTES)
    for i in range(1, n + 1):
        ph.write1ByteTxRx(port, i, 64, 1)
        writer.addParam(i, list(dxl.pack_value(2048, 4)))
        reader.addParam(i)
    ok = failed = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for i in range(1, n + 1):
            writer.changeParam(i, list(dxl.pack_value(2048 + (ok % 200), 4)))
        writer.txPacket()
        if reader.txRxPacket() == COMM_SUCCESS:
            ok += 1
        else:
            failed += 1
        bar.update(1)
    elapsed = time.perf_counter() - t0
    port.closePort()
    return ok, failed, elapsed


def codec_cycles(path: str, baud: int, n: int, seconds: float, bar) -> tuple[int, int, float]:
    port = serial.Serial(path, baud, timeout=HOST_TIMEOUT_S)
    parser = dxl.StreamParser()
    ids = list(range(1, n + 1))
    for i in ids:
        port.write(dxl.write(i, 64, b"\x01"))
        port.read(11)
    port.reset_input_buffer()
    read_packet = dxl.sync_read(READ_ADDRESS, READ_BYTES, ids)
    status_bytes = n * (11 + READ_BYTES)
    ok = failed = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        goal = dxl.pack_value(2048 + (ok % 200), 4)
        port.write(dxl.sync_write(GOAL, 4, {i: goal for i in ids}) + read_packet)
        got = []
        deadline = time.perf_counter() + HOST_TIMEOUT_S
        while len(got) < n and time.perf_counter() < deadline:
            got += parser.feed(port.read(max(1, min(port.in_waiting, status_bytes))))
        if sorted(p.id for p in got) == ids and all(p.error == 0 for p in got):
            ok += 1
        else:
            failed += 1
            parser.expire()
        bar.update(1)
    elapsed = time.perf_counter() - t0
    port.close()
    return ok, failed, elapsed


def run_case(rig: Path, baud: int, n: int, host: str, seconds: float) -> dict:
    proc = subprocess.Popen([sys.executable, "-m", "firmware_interface.dynamixel_emulator", "--rig", str(rig),
                             "--baud", str(baud)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    path = proc.stdout.readline().strip()
    try:
        with tqdm(desc=f"{host} n={n} {baud / 1e6:g} Mbaud", unit="cycle", leave=False) as bar:
            run = sdk_cycles if host == "sdk" else codec_cycles
            ok, failed, elapsed = run(path, baud, n, seconds, bar)
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    limit = baud / (10 * cycle_bytes(n))
    rate = ok / elapsed
    return {"host": host, "servos": n, "baud": baud, "cycle_bytes": cycle_bytes(n), "limit_hz": round(limit, 1),
            "cycles_hz": round(rate, 1), "ratio_to_limit": round(rate / limit, 3), "failed": failed,
            "emulator": err.strip().splitlines()[-1][-160:] if err.strip() else ""}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="cycling time per case, s (default 3)")
    parser.add_argument("--quick", action="store_true", help="1 s per case")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else args.seconds
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        rigs = {n: rig_with(n, Path(tmp)) for n in (2, 4)}
        for baud in (1_000_000, 4_000_000):
            for n in (2, 4):
                for host in ("sdk", "codec"):
                    results.append(run_case(rigs[n], baud, n, host, seconds))
    print(f"{'host':6} {'servos':>6} {'baud':>9} {'bytes':>6} {'limit Hz':>9} {'cycles Hz':>10} {'ratio':>6} "
          f"{'failed':>6}")
    for r in results:
        print(f"{r['host']:6} {r['servos']:>6} {r['baud']:>9} {r['cycle_bytes']:>6} {r['limit_hz']:>9} "
              f"{r['cycles_hz']:>10} {r['ratio_to_limit']:>6} {r['failed']:>6}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
