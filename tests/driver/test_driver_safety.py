"""The rig is always left safe: stale or bad simulator states, a killed emulator, the e-stop, signals.

Real processes and sockets: `mms drive --emulate` (with its `mms emulate` child), a sim/state publisher in this
process, `mms serve` for the killed-simulator case. The driver's watchdog, the e-stop latch and the link loss run
against the Python emulator and the rig's C firmware (`mms emulate --firmware`) with the same assertions. Waits are polls with generous deadlines; the timing bounds
are "not before" (exact, from the design) and "not much after" (generous, for a busy machine).
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import time

import msgpack
import numpy as np
import zmq

from firmware_interface.rigs.mcu import load_rig

STATE_TIMEOUT_S, HOLD_S = 0.050, 0.200      # the driver's defaults (docs/driver.md)
#: how much later than designed an event may come on a busy two-core machine
LATE_S = 1.0
NEUTRAL_TOL_RAD = 0.02


def track_commands(drv) -> list[dict]:
    return [c for c in drv.collector.get("hw/command") if c["mode"] == "track"]


#: s: how long the driver and its emulator may take to start (their imports; the C firmware's build): at load 15
#: the driver had printed nothing yet after 20 s, twice in three runs
STARTUP_S = 120.0
#: SCHED_FIFO options of the emulated device where the test claims the servos' measured motion (`mms emulate
#: --rt-priority`): it stands in for the rig's microcontroller, whose servos move in real time whatever the host
#: runs. Under the normal scheduler at load 12-15 the emulator stood still through the driver's whole exit wait (the
#: ramp's time and 1 s): the ramp was sent, the servos measured still at the tracked posture (0.7, -0.6 rad). Not in
#: every test: beside a real-time emulator, the sim/state publisher of this process starved (4 states in the ramp)
DEVICE_REAL_TIME = ["--rt-priority", "1"]


def emulator_args(device: list[str]) -> list[str]:
    """`mms drive --emulate` options giving its emulator child the ``device`` options (tests/conftest.py)."""
    return ["--emulator-args", " ".join(device)] if device else []


def start_tracking(stack, q=(0.5, -0.4), *extra, device: list[str] = ()):
    sim = stack.sim(["stroke_r", "stroke_l"], lambda t: list(q))
    drv = stack.driver("--emulate", *emulator_args(device), *extra)
    drv.wait_status(lambda s: s["lifecycle"] == "inactive" and s["link"]["state"] == "up", "the link up", STARTUP_S)
    assert drv.ctl("activate")["ok"]
    stack.wait_for(lambda: len(track_commands(drv)) > 50, what="tracking")
    return sim, drv


def settle_at(drv, stack, target, what):
    """Wait until the measured servo angles (hw/telemetry) are within NEUTRAL_TOL_RAD of ``target``."""
    def arrived():
        m = drv.collector.last("hw/telemetry")
        return m is not None and np.all(np.abs(np.array(m["servo_rad"][-1]) - target) < NEUTRAL_TOL_RAD)
    stack.wait_for(arrived, what=what)


def test_stale_and_bad_states_hold_then_ramp_to_neutral_then_resume(stack, emulate_device):
    rig = load_rig(stack.flapper_rig)
    neutral = np.array([s.neutral_rad for s in rig.servos])
    sim, drv = start_tracking(stack, device=emulate_device)
    # NaN in a mapped joint: every such state is refused, so the driver sees no fresh state
    sim.override = lambda payload: {**payload, "q": [math.nan, payload["q"][1]]}
    drv.wait_status(lambda s: s["watchdog"] == "neutral", "hold, ramp, then neutral on NaN states")
    assert drv.status()["states"]["rejected"].get("non_finite", 0) > 10
    # valid again, then the simulator pauses: hold after the timeout, ramp after the hold, rest at neutral
    sim.override = None
    stack.wait_for(lambda: track_commands(drv)[-1]["stamp_ns"] > time.time_ns() - 200_000_000
                   and drv.status()["watchdog"] == "track", what="tracking again")
    sim.paused.set()
    drv.wait_status(lambda s: s["watchdog"] == "neutral", "neutral after the pause")
    commands = drv.collector.get("hw/command")
    assert not any(math.isnan(x) for c in commands for x in c["setpoint_rad"])
    last_track = max(k for k, c in enumerate(commands) if c["mode"] == "track")
    after = commands[last_track + 1:]
    modes = [c["mode"] for c in after]
    first_hold = modes.index("hold")
    first_ramp = modes.index("ramp")
    assert set(modes[:first_ramp]) == {"hold"} and "neutral" in modes and first_hold == 0
    state_ns = commands[last_track]["state_stamp_ns"]
    hold_delay = (after[0]["stamp_ns"] - state_ns) * 1e-9
    assert STATE_TIMEOUT_S <= hold_delay < STATE_TIMEOUT_S + LATE_S
    ramp_delay = (after[first_ramp]["stamp_ns"] - state_ns) * 1e-9
    assert STATE_TIMEOUT_S + HOLD_S <= ramp_delay < STATE_TIMEOUT_S + HOLD_S + LATE_S
    # the hold keeps the last setpoint exactly; the ramp ends exactly at neutral, within the rate limits
    assert all(c["setpoint_rad"] == commands[last_track]["setpoint_rad"] for c in after[:first_ramp])
    assert after[-1]["mode"] == "neutral" and np.array_equal(after[-1]["setpoint_rad"], neutral)
    rates = np.array([s.max_rate_rad_s for s in rig.servos])
    steps = np.abs(np.diff([c["setpoint_rad"] for c in after], axis=0))
    assert np.all(steps <= rates * 2 / rig.command_hz + 1e-9)
    settle_at(drv, stack, neutral, "the servos measured at neutral")
    # the simulator resumes: tracking resumes through the rate limit
    sim.paused.clear()
    stack.wait_for(lambda: drv.collector.get("hw/command")[-1]["mode"] == "track", what="tracking after resume")


def test_killed_simulator_leads_to_neutral(stack):
    rig = load_rig(stack.flapper_rig)
    neutral = np.array([s.neutral_rad for s in rig.servos])
    serve = stack.serve("flapper.toml")
    drv = stack.driver("--emulate", "--autostart")
    stack.wait_for(lambda: len(track_commands(drv)) > 50, what="tracking mms serve", timeout_s=90)
    os.killpg(serve.proc.pid, signal.SIGKILL)
    killed_ns = time.time_ns()
    drv.wait_status(lambda s: s["watchdog"] == "neutral", "neutral after the simulator died")
    commands = drv.collector.get("hw/command")
    first_hold = next(c for c in commands if c["mode"] == "hold" and c["stamp_ns"] > killed_ns - 10**9)
    assert (first_hold["stamp_ns"] - killed_ns) * 1e-9 < STATE_TIMEOUT_S + LATE_S
    assert commands[-1]["mode"] == "neutral" and np.array_equal(commands[-1]["setpoint_rad"], neutral)
    settle_at(drv, stack, neutral, "the servos measured at neutral")


def test_emulator_killed_and_restarted_reconnects_without_stale_setpoints(stack, emulate_device):
    rig = load_rig(stack.flapper_rig)
    sim, drv = start_tracking(stack, (0.6, 0.5), device=emulate_device)
    before = drv.ctl("status")
    old_pid = before["link"]["emulator_pid"]
    assert stack.alive(old_pid)
    killed_ns = time.time_ns()
    os.kill(old_pid, signal.SIGKILL)
    drv.wait_status(lambda s: s["link"]["state"] != "up", "the link loss")
    # the first status that showed the loss: a loaded machine may publish several before this test polls
    lost = next(s for s in drv.collector.get("hw/status") if s["stamp_ns"] > killed_ns and s["link"]["state"] != "up")
    lost_ns = lost["stamp_ns"]
    up = drv.wait_status(lambda s: s["link"]["state"] == "up" and s["link"]["emulator_starts"] == 2,
                         "the reconnect")
    assert up["link"]["reconnects"] == 1 and up["link"]["link_losses"] == 1
    assert up["link"]["emulator_pid"] != old_pid and stack.alive(up["link"]["emulator_pid"])
    assert up["lifecycle"] == "active"
    # why the link went down is in the status while it is down, and gone once it is up (no stale error shown)
    outage = [s for s in drv.collector.get("hw/status") if lost["seq"] <= s["seq"] < up["seq"]]
    assert any(s["error"] for s in outage) and up["error"] == "", [s["error"] for s in outage][-3:]
    # status kept coming during the outage
    stamps = [s["stamp_ns"] for s in drv.collector.get("hw/status") if lost_ns - 10**9 <= s["stamp_ns"]
              <= up["stamp_ns"]]
    assert max(np.diff(stamps)) * 1e-9 < LATE_S
    # the transitions: up -> down/connecting (retrying) -> up
    states = [s["link"]["state"] for s in drv.collector.get("hw/status") if s["seq"] >= lost["seq"] - 1]
    assert states[0] == "up" and states[1] in ("down", "connecting") and "up" in states[2:]
    stack.wait_for(lambda: drv.collector.get("hw/command")[-1]["stamp_ns"] > up["stamp_ns"]
                   and drv.collector.get("hw/command")[-1]["mode"] == "track", what="tracking after reconnect")
    # nothing from before the loss was sent again: the first setpoints after it start from where the restarted
    # device's servos are (neutral), and every tracked state was published after the loss
    after = [c for c in drv.collector.get("hw/command") if c["stamp_ns"] > lost_ns]
    neutral = np.array([s.neutral_rad for s in rig.servos])
    rates = np.array([s.max_rate_rad_s for s in rig.servos])
    assert np.all(np.abs(np.array(after[0]["setpoint_rad"]) - neutral) <= rates * 2 / rig.command_hz + 1e-9)
    assert all(c["state_stamp_ns"] > lost_ns - int(STATE_TIMEOUT_S * 1e9) for c in after if c["mode"] == "track")
    assert all(c["sim_seq"] == -1 for c in after if c["mode"] == "hold")


def test_estop_latches_until_reset_and_sigterm_leaves_neutral(stack, emulate_device):
    rig = load_rig(stack.flapper_rig)
    neutral = np.array([s.neutral_rad for s in rig.servos])
    sim, drv = start_tracking(stack, (0.7, -0.6), "--allow-remote-reset", device=[*emulate_device, *DEVICE_REAL_TIME])
    reply = drv.ctl("estop")
    assert reply["ok"] and reply["latched"] and reply["device_told"]
    stopped_ns = time.time_ns()
    status = drv.wait_status(lambda s: s["estop"] and s["device_flags"] & 0x01, "the device e-stopped")
    assert status["lifecycle"] == "inactive" and status["estop_sources"] == ["control"]
    settle_at(drv, stack, neutral, "the device holding neutral")
    later = [c for c in drv.collector.get("hw/command") if c["stamp_ns"] > stopped_ns + 100_000_000]
    assert later == []                                    # nothing sent while latched
    refused = drv.ctl("activate")
    assert not refused["ok"] and "e-stop" in refused["error"]
    assert drv.status()["estop"]                           # still latched: only an explicit reset clears it
    assert drv.ctl("reset_estop")["ok"]
    drv.wait_status(lambda s: not s["estop"] and not s["device_flags"] & 0x01, "the e-stop released")
    assert drv.status()["lifecycle"] == "inactive"
    # the rig's own button (SIGUSR1 to the emulator presses and holds it) latches the driver too; while it is held
    # no reset is taken (test_driver_inputs.py has the full sequence), after its release (SIGUSR2) one is
    emulator_pid = drv.ctl("status")["link"]["emulator_pid"]
    os.kill(emulator_pid, signal.SIGUSR1)
    # the driver's latch (from the button's E-STOP message) can come before the first heartbeat that carries the
    # held-button flag: wait for the flag itself, or a status from before it would pass for "released"
    drv.wait_status(lambda s: s["estop"] and "device:button" in s["estop_sources"] and s["device_flags"] & 0x08,
                    "the button e-stop, held")
    os.kill(emulator_pid, signal.SIGUSR2)
    drv.wait_status(lambda s: not s["device_flags"] & 0x08, "the button released")
    reply = drv.ctl("reset_estop")
    assert reply["ok"], reply
    assert drv.ctl("activate")["ok"]
    stack.wait_for(lambda: len([c for c in track_commands(drv) if c["stamp_ns"] > stopped_ns]) > 100,
                   what="tracking after the reset")
    settle_at(drv, stack, np.array([0.7, -0.6]), "the servos back on the simulator's posture")
    # SIGTERM: ramp to neutral at the rate limits, wait for the servos to get there, exit 0, emulator gone
    emulator_pid = drv.ctl("status")["link"]["emulator_pid"]
    drv.proc.send_signal(signal.SIGTERM)
    assert drv.proc.wait(stack.deadline_s) == 0
    stack.wait_for(lambda: not stack.alive(emulator_pid), what="the emulator child gone")
    commands = drv.collector.get("hw/command")
    assert commands[-1]["mode"] == "neutral" and np.array_equal(commands[-1]["setpoint_rad"], neutral)
    assert np.all(np.abs(np.array(drv.collector.get("hw/telemetry")[-1]["servo_rad"][-1]) - neutral)
                  < NEUTRAL_TOL_RAD)
    # the driver's last hw/status is sent as it exits: the collector's thread may take it in after the exit
    stack.wait_for(lambda: drv.collector.last("hw/status")["lifecycle"] == "finalized", what="the finalized hw/status")


def test_control_socket_lifecycle_bad_requests_unmapped_joints_and_sigint(stack):
    # the simulator has no stroke_l: nothing is tracked, and the status says why
    stack.sim(["stroke_r", "elbow"], lambda t: [0.2, 0.2])
    drv = stack.driver("--emulate")
    drv.wait_status(lambda s: s["link"]["state"] == "up" and s["lifecycle"] == "inactive", "the link up")
    ctx = zmq.Context.instance()
    for frames in ([b"\xc1garbage"], [msgpack.packb([1, 2])], [msgpack.packb({"cmd": 3})],
                   [msgpack.packb({"cmd": "fly"})], [msgpack.packb({"cmd": "status"}), b"x"]):
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, 10_000)
        sock.connect(drv.ep.driver_control)
        sock.send_multipart(frames)
        reply = msgpack.unpackb(sock.recv(), raw=False)
        sock.close(0)
        assert reply["ok"] is False and "\n" not in reply["error"] and reply["error"]
    assert "activate" in drv.ctl("help")["commands"]
    refused = drv.ctl("deactivate")
    assert not refused["ok"] and "cannot deactivate from inactive" in refused["error"]
    assert drv.ctl("activate")["ok"]
    status = drv.wait_status(lambda s: s["states"]["rejected"].get("unmapped", 0) > 10, "unmapped states")
    assert "stroke_l" in status["error"] and status["states"]["used"] == 0
    assert not any(c["mode"] == "track" for c in drv.collector.get("hw/command"))
    # deactivate -> cleanup closes the port and stops the emulator; configure brings both back
    assert drv.ctl("deactivate")["ok"]
    drv.wait_status(lambda s: s["watchdog"] == "idle", "the ramp to neutral to end")
    pid = drv.ctl("status")["link"]["emulator_pid"]
    assert drv.ctl("cleanup")["ok"]
    status = drv.wait_status(lambda s: s["lifecycle"] == "unconfigured" and s["link"]["state"] == "closed",
                             "unconfigured")
    stack.wait_for(lambda: not stack.alive(pid), what="the emulator stopped by cleanup")
    reply = drv.ctl("configure", timeout_s=30)
    # answered when the link is up; on a very slow machine the emulator may boot later than the reply's wait,
    # then the reply says so and the driver keeps trying
    assert reply["ok"] and reply["lifecycle"] == "inactive" or "still retrying" in reply["error"]
    drv.wait_status(lambda s: s["link"]["state"] == "up" and s["lifecycle"] == "inactive", "configured again")
    assert drv.proc.poll() is None
    drv.proc.send_signal(signal.SIGINT)
    assert drv.proc.wait(stack.deadline_s) == 0


def test_bad_rig_files_give_one_clear_line_each(stack):
    good = stack.flapper_rig.read_text()
    variants = {
        "missing_servos.toml": ("servos", good[:good.index("[[servos]]")]),
        "bad_direction.toml": ("servos[0].direction", good.replace("direction = 1\nmin_raw", "direction = 2\nmin_raw", 1)),
        "twice.toml": ("joints[1].servo", good.replace('servo = "stroke_left"', 'servo = "stroke_right"')),
        "unknown_servo.toml": ("joints[0].servo", good.replace('servo = "stroke_right"', 'servo = "elbow"')),
        "neutral_outside.toml": ("servos[0].neutral_rad", good.replace("neutral_rad = 0.0        # neutral posture",
                                                                      "neutral_rad = 1.5        # neutral posture")),
        "not_toml.toml": ("invalid TOML", "[rig\nname = "),
        "absent.toml": ("file not found", None),
    }
    for name, (key, text) in variants.items():
        path = stack.tmp / name
        if text is not None:
            assert text != good
            path.write_text(text)
        result = subprocess.run(stack.mms("drive", "--rig", str(path), "--emulate", "--network", str(stack.net)),
                                capture_output=True, text=True, timeout=60, cwd=stack.root)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2, (name, result.stderr)
        assert len(lines) == 1 and name in lines[0] and key in lines[0], (name, lines)
        assert "Traceback" not in result.stderr


def test_wrong_device_is_refused_at_configure(stack):
    """The handshake checks the device against the rig file: a RayBot rig on the port of the flapper's driver
    is refused (one line in hw/status.error), the driver stays unconfigured and sends no setpoint."""
    emulator = subprocess.Popen(stack.mms("emulate", "--rig", str(stack.raybot_rig)), stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, cwd=stack.root, start_new_session=True)
    try:
        port = emulator.stdout.readline().decode().strip()
        stack.sim(["stroke_r", "stroke_l"], lambda t: [0.2, 0.2])
        drv = stack.driver("--port", port, "--autostart")
        status = drv.wait_status(lambda s: "raybot-rig" in s["error"], "the device refused")
        assert "device is rig 'raybot-rig'" in status["error"] and "flapper-rig" in status["error"]
        assert status["lifecycle"] == "unconfigured" and status["link"]["state"] != "up"
        refused = drv.ctl("activate")
        assert not refused["ok"]
        assert drv.collector.get("hw/command") == []
    finally:
        emulator.terminate()
        emulator.wait(20)
