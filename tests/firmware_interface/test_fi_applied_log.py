"""``--applied-log FILE`` of both emulators (firmware_interface/pty_device.py ``AppliedLog``): one JSON line per
setpoint applied or refused, readable while the emulator runs and complete after it is killed with SIGKILL.

The emulators run as subprocesses (`mms emulate`, which dispatches a Dynamixel rig to its bus emulator), the
host side is pyserial; every wait is a poll loop with a deadline.
"""
from __future__ import annotations

import contextlib
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import serial

from firmware_interface import dynamixel as dxl
from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import load_dxl_rig
from firmware_interface.link import DeviceLink
from firmware_interface.pty_device import AppliedLog, read_applied_log
from firmware_interface.rigs.mcu import load_rig
from hil.testing import wait_for

ROOT = Path(__file__).resolve().parents[2]
RAYBOT = ROOT / "configs" / "rigs" / "raybot_rig.toml"
DXL_RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
START_TIMEOUT_S = 30.0       # generous: the machine is shared
WAIT_S = 10.0


@contextlib.contextmanager
def emulate(rig: Path, log: Path, *extra: str):
    """`mms emulate --rig rig --applied-log log extra...`; yield (process, slave path); SIGKILL it afterwards if
    the test has not ended it."""
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(rig), "--applied-log",
                             str(log), *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        assert ready, "the emulator printed no port path"
        path = proc.stdout.readline().decode().strip()
        assert path.startswith("/dev/"), path
        yield proc, path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=15)


def wait_records(log: Path, predicate, what: str, timeout_s: float = WAIT_S) -> list[dict]:
    """Poll the log until ``predicate(records)`` holds; return the records."""
    def records():
        found = read_applied_log(log) if log.exists() else []
        return found if predicate(found) else None
    return wait_for(records, timeout_s, what=f"{what} in the applied log {log}")


def test_setpoints_applied_and_refused_are_logged_while_running_and_survive_sigkill(tmp_path):
    rig = load_rig(RAYBOT)
    servo = rig.servos[0]
    log = tmp_path / "applied.jsonl"
    with emulate(RAYBOT, log) as (proc, path):
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=WAIT_S) is not None
        # applied: the frame's values bit for bit (float32 on the wire), its seq, the device and host clocks
        raw = float(np.float32(servo.to_raw(0.3)))
        before_ns = time.time_ns()
        seq = link.send(p.Setpoints((raw,)))
        records = wait_records(log, lambda rs: any(r["seq"] == seq for r in rs), "applied frame")
        after_ns = time.time_ns()
        (rec,) = [r for r in records if r["seq"] == seq]
        assert rec["result"] == "applied" and "reason" not in rec
        assert rec["raw"] == [raw]
        assert before_ns <= rec["host_ns"] <= after_ns
        assert isinstance(rec["t_us"], int) and 0 < rec["t_us"] < 2**32

        # refused, with the reason the NACK gives
        cases = [((servo.max_raw + 100.0,), p.NACK_OUT_OF_RANGE, "out_of_range"),
                 ((float("nan"),), p.NACK_OUT_OF_RANGE, "out_of_range"),
                 ((raw, raw), p.NACK_CHANNEL_COUNT, "channel_count")]
        for values, nack, reason in cases:
            reply = link.request(p.Setpoints(values), (p.Ack, p.Nack), timeout_s=WAIT_S)
            assert reply is not None and reply.message.reason == nack
            rec = wait_records(log, lambda rs: bool(rs) and rs[-1]["seq"] == reply.message.seq, reason)[-1]
            assert rec["result"] == "refused" and rec["reason"] == reason
            assert rec["raw"] == [None if np.isnan(v) else float(np.float32(v)) for v in values]
        # while the e-stop is latched every frame is refused and logged, although the NACKs are rate-limited
        assert isinstance(link.request(p.EStop(p.ESTOP_HOST), (p.Ack, p.Nack), timeout_s=WAIT_S).message, p.Ack)
        latched = [link.send(p.Setpoints((raw,))) for _ in range(5)]
        records = wait_records(log, lambda rs: bool(rs) and rs[-1]["seq"] == latched[-1], "e-stop refusal")
        assert [(r["seq"], r["result"], r.get("reason")) for r in records[-5:]] == [
            (s, "refused", "estop_latched") for s in latched]
        assert all(b["t_us"] >= a["t_us"] for a, b in zip(records, records[1:]))
        link.close()
        lines_before = log.read_text().count("\n")
        # SIGKILL: nothing is lost, every line is whole
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=15) == -signal.SIGKILL
    text = log.read_text()
    assert text.endswith("\n") and text.count("\n") == lines_before == 1 + len(cases) + len(latched)
    assert [r["seq"] for r in read_applied_log(log)][-len(latched):] == latched


def test_dynamixel_goal_positions_written_are_logged(tmp_path):
    """`mms emulate` with a Dynamixel rig: SYNC_WRITE and WRITE of Goal Position, one line per servo goal; a
    goal outside the position limits (position mode) refused as the servo's status error 6 says."""
    rig = load_dxl_rig(DXL_RIG)
    ids = rig.ids
    log = tmp_path / "applied.jsonl"
    goal = dxl.ITEMS["goal_position"]
    with emulate(DXL_RIG, log) as (proc, path):
        port = serial.Serial(path, rig.baud, timeout=0.01)
        goals = {servo_id: 2048 + 100 * k for k, servo_id in enumerate(ids)}
        port.write(dxl.sync_write(goal.address, goal.size,
                                  {i: dxl.pack_value(v, goal.size) for i, v in goals.items()}))
        records = wait_records(log, lambda rs: len(rs) >= len(ids), "SYNC_WRITE goals")
        assert [(r["instruction"], r["id"], r["goal_position"], r["result"]) for r in records] == [
            ("SYNC_WRITE", i, v, "applied") for i, v in goals.items()]
        assert len({r["seq"] for r in records}) == 1          # one instruction packet
        port.write(dxl.write(ids[0], goal.address, dxl.pack_value(5000, goal.size)))
        rec = wait_records(log, lambda rs: len(rs) > len(ids), "refused WRITE")[-1]
        assert (rec["instruction"], rec["id"], rec["goal_position"]) == ("WRITE", ids[0], 5000)
        assert rec["result"] == "refused" and rec["reason"] == "data_limit"
        assert rec["seq"] > records[0]["seq"] and rec["t_us"] >= records[0]["t_us"]
        port.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    assert len(read_applied_log(log)) == len(ids) + 1


def test_an_unwritable_applied_log_is_a_one_line_error(tmp_path):
    result = subprocess.run([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(RAYBOT), "--applied-log",
                             str(tmp_path / "no" / "such" / "dir.jsonl"), "--duration", "1"],
                            cwd=ROOT, capture_output=True, text=True, timeout=START_TIMEOUT_S)
    assert result.returncode != 0
    assert "--applied-log: cannot write" in result.stderr and "Traceback" not in result.stderr


def test_a_last_line_cut_short_is_left_out_and_non_finite_values_are_null(tmp_path):
    log = AppliedLog(tmp_path / "applied.jsonl")
    log.write({"seq": 1, "raw": [1500.0, float("nan"), float("inf")], "result": "refused", "reason": "out_of_range"})
    log.write({"seq": 2, "raw": [1500.25], "result": "applied"})
    log.close()
    path = tmp_path / "applied.jsonl"
    assert [r["raw"] for r in read_applied_log(path)] == [[1500.0, None, None], [1500.25]]
    with path.open("a") as handle:
        handle.write('{"seq": 3, "raw": [15')                 # what a kill in mid-write could leave
    assert [r["seq"] for r in read_applied_log(path)] == [1, 2]


def test_a_restarted_emulator_appends_to_its_applied_log(tmp_path):
    """Two runs of `mms emulate` on one log (the first killed with SIGKILL, its last line then cut short by hand as
    a kill in mid-write would leave it): the log holds both runs' lines, whole, in order."""
    rig = load_rig(RAYBOT)
    raw = float(np.float32(rig.servos[0].to_raw(0.2)))
    log = tmp_path / "applied.jsonl"
    runs = []
    for run in range(2):
        with emulate(RAYBOT, log) as (proc, path):
            link = DeviceLink(path, rig.baud)
            assert link.request(p.Hello(), p.DeviceInfo, timeout_s=WAIT_S) is not None
            sent = [link.send(p.Setpoints((raw,))) for _ in range(3)]
            wait_records(log, lambda rs: len(rs) == 3 * (run + 1) and [r["seq"] for r in rs][-3:] == sent,
                         f"run {run}'s frames")
            link.close()
            proc.send_signal(signal.SIGKILL)
            assert proc.wait(timeout=15) == -signal.SIGKILL
        runs.append(sent)
        if run == 0:
            with log.open("a") as handle:
                handle.write('{"seq": 9, "raw": [15')          # what a kill in mid-write could leave
    records = read_applied_log(log)
    assert [r["seq"] for r in records] == runs[0] + runs[1]
    assert all(r["result"] == "applied" and r["raw"] == [raw] for r in records)
    assert log.read_text().count("\n") == 6
