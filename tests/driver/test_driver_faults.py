"""Link faults: corrupted, dropped and noisy frames both ways for a bounded time; the emulator killed and
restarted. Real processes: the emulator (`mms emulate --applied-log FILE`: every setpoint frame the emulated
firmware applied or refused, docs/protocol.md; or the plain `mms emulate` child of `mms drive --emulate`),
`mms drive`, and a sim/state publisher in this process. The fault run goes against the Python emulator and the
rig's C firmware (`mms emulate --firmware`) with the same assertions, each for :data:`FAULT_RUN_S`; the bounds
scale with the number of faults injected (the run's length times the rates).
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import numpy as np

from firmware_interface.pty_device import read_applied_log

#: frames that may be in a pty buffer or on the way when a count is read
IN_FLIGHT_FRAMES = 5
#: the fault rates of a noisy link: 2 % of the device's frames dropped and 2 % corrupted, and a host -> device byte
#: error rate that spoils about 1 % of the driver's frames
BASE_RATES = {"--corrupt-rate": 0.02, "--drop-rate": 0.02, "--rx-byte-error-rate": 2e-4}
#: the issue asks for 60 s of injected faults at those rates: ~220 frames dropped, ~220 corrupted, ~90 spoilt
#: host -> device (measured: 229, 215 and 88)
ASKED_FAULT_EXPOSURE_S = 60.0
#: the length of each run, s. The Python emulator's run injects the issue's number of faults in it, at the rates
#: times ASKED_FAULT_EXPOSURE_S / FAULT_RUN_S (10 s: 188-205 dropped, 166-169 corrupted, 122-140 spoilt in two
#: runs at load 6-8); the C firmware's at the base rates (every fault still happens about forty times)
FAULT_RUN_S = float(os.environ.get("MMS_DRIVER_FAULT_S", "10"))


def start_emulator(stack, *fault_args: str):
    """`mms emulate` on the flapper rig with an applied log and a statistics file; (process, pty, log, stats)."""
    log = stack.tmp / "applied.jsonl"
    stats = stack.tmp / "emulator-stats.json"
    out = (stack.tmp / "emulator.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(stack.flapper_rig),
                             "--applied-log", str(log), "--stats", str(stats), *fault_args],
                            stdout=subprocess.PIPE, stderr=out, cwd=stack.root, start_new_session=True)
    path = proc.stdout.readline().decode().strip()
    assert path.startswith("/dev/"), path
    return proc, path, log, stats


def test_corrupt_and_drop_for_a_bounded_time_never_apply_a_bad_setpoint(stack, emulate_device):
    run_s = FAULT_RUN_S
    rate_factor = 1.0 if emulate_device else max(1.0, ASKED_FAULT_EXPOSURE_S / run_s)
    rates = [text for option, rate in BASE_RATES.items() for text in (option, f"{rate * rate_factor:g}")]
    proc, port, applied_log, stats_path = start_emulator(stack, *rates, *emulate_device)
    try:
        stack.sim(["stroke_r", "stroke_l"], lambda t: [0.6 * math.sin(2 * math.pi * 1.3 * t),
                                                        0.4 * math.cos(2 * math.pi * 0.7 * t)])
        # a busy machine may starve the emulator for a while: that is not the link fault under test here
        drv = stack.driver("--port", port, "--link-timeout", "3")
        # activated once our hw/* subscription is live, so that every command sent is also seen
        drv.wait_status(lambda s: s["lifecycle"] == "inactive" and s["link"]["state"] == "up", "the link up")
        assert drv.ctl("activate")["ok"]
        t_end = time.monotonic() + run_s

        def run_over():
            assert drv.proc.poll() is None and proc.poll() is None, "a process died under the faults"
            return time.monotonic() > t_end
        stack.wait_for(run_over, timeout_s=run_s + 10, poll_s=0.2, what="the end of the fault run")
        during = drv.ctl("status")
        assert drv.ctl("deactivate")["ok"]
        drv.wait_status(lambda s: s["watchdog"] == "idle", "the ramp to neutral to end")
        sent_at_stop = drv.ctl("status")["link"]["frames_sent"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    # the emulator is gone: the driver notices, and its counters stop moving
    drv.wait_status(lambda s: s["link"]["state"] != "up", "the link loss")
    link = drv.ctl("status")["link"]
    sent = {c["frame_seq"]: c for c in drv.collector.get("hw/command")}
    records = read_applied_log(applied_log)
    applied = [r for r in records if r["result"] == "applied"]
    stats = json.loads(stats_path.read_text())
    faults, rx = stats["faults"], stats["rx"]

    # every setpoint the emulated firmware applied is one the driver sent, bit for bit (float32 on the wire);
    # frame seqs are 16-bit: the run must not wrap them for the matching by seq to hold
    assert link["frames_sent"] < 2**16
    assert len(applied) > 100 * run_s * 0.5
    for a in applied:
        c = sent[a["seq"]]
        assert np.array_equal(np.float32(a["raw"]), np.float32(c["setpoint_raw"])), (a, c)
    # nothing the driver sent was refused (in range, no e-stop), and each frame was handled once, in order
    assert [r for r in records if r["result"] != "applied"] == []
    assert all(b["seq"] > a["seq"] and b["t_us"] >= a["t_us"] for a, b in zip(applied, applied[1:]))
    # faults really happened, both ways
    exposure_s = run_s * rate_factor       # the run's faults as so many seconds at the base rates
    assert faults["corrupted"] > 0.5 * exposure_s and faults["dropped"] > 0.5 * exposure_s
    assert faults["rx_corrupted"] > 0.5 * exposure_s
    # host -> device: every frame the driver wrote before the emulator was stopped reached the firmware intact or
    # is a gap in its sequence (a few may be on the way when the count is read; the emulator handles the backlog
    # at a stop); the frames written after the stop, before the driver noticed (longer on a loaded machine), are
    # lost with the port; a write that timed out (a starved emulator's full pty) used a seq the device sees as a
    # gap without counting as sent. The bad ones were counted as errors (one flipped byte spoils one frame, or two if it
    # makes or breaks a 0x00 delimiter); the firmware's counters as the driver saw them (LINK_STATS in
    # hw/status) are its own
    rx_bad = rx["crc_errors"] + rx["framing_errors"] + rx["malformed"] + rx["bad_version"] + rx["unknown_type"]
    assert sent_at_stop - IN_FLIGHT_FRAMES <= rx["frames"] + rx["seq_gaps"] \
        <= link["frames_sent"] + link["write_timeouts"], (sent_at_stop, rx, link)
    assert 0.5 * faults["rx_corrupted"] <= rx_bad <= 2 * faults["rx_corrupted"] + IN_FLIGHT_FRAMES
    assert 0.5 * rx["seq_gaps"] <= rx_bad <= 2 * rx["seq_gaps"] + IN_FLIGHT_FRAMES
    seen = during["link"]["device"]
    assert rx["crc_errors"] - seen["crc_errors"] >= 0 and rx["frames"] - seen["frames_rx"] >= 0
    # device -> host: each corrupted frame is one or two counted errors (a flipped bit can make a 0x00 and split
    # it); every dropped or corrupted frame is a sequence gap. Faults injected before the driver opened the
    # port (~1 s of the run) never reach it, hence the 10 % slack below.
    errors = link["crc_errors"] + link["framing_errors"] + link["malformed"] + link["oversize"]
    assert 0.9 * faults["corrupted"] - IN_FLIGHT_FRAMES <= errors <= 2 * faults["corrupted"] + IN_FLIGHT_FRAMES
    lost = faults["dropped"] + faults["corrupted"]
    assert 0.9 * lost - IN_FLIGHT_FRAMES <= link["seq_gaps"] <= lost + stats["tx_dropped"] + IN_FLIGHT_FRAMES
    # the link survived the noise: no reconnect, and the driver tracked throughout
    assert during["link"]["link_losses"] == 0 and during["link"]["reconnects"] == 0, drv.log_text()[-2000:]
    assert link["link_losses"] == 1     # the emulator's exit at the end
    modes = [c["mode"] for c in sent.values()]
    assert modes.count("track") > 0.7 * sum(m != "ramp" and m != "neutral" for m in modes)
