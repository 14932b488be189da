"""The whole chain on the two-device Dynamixel rig, real processes and sockets: ``mms serve`` (the flapper,
tethered, one section per wing, a slow stroke) -> ``mms drive --rig flapper_dynamixel_rig.toml --emulate
--autostart`` -> the Dynamixel emulator (the servo bus) and ``mms emulate --rig flapper_rig.toml`` (the sensor
microcontroller), both on ptys, one driver owning both.

Checked: every tracking setpoint is the served stroke angle through the rig's joint map (exactly, unless the
driver marked it limited) and inside the servo's limits, its raw value the servo's goal ticks; the measured
servo angles (hw/telemetry, read back over the bus) follow the setpoints; the strains in the same messages come
from the microcontroller (its clock, its frames) and follow the stroke the driver mirrored to it; hw/status
carries the Dynamixel link section with the servos' Hardware Error Status and the sensor link's section; SIGINT
of the driver ends with both servos at neutral and their torque off, as the bus emulator's final statistics say.
"""
from __future__ import annotations

import json
import math
import signal
import statistics
from pathlib import Path

import numpy as np
import tomli_w

from firmware_interface import protocol as p
from firmware_interface.rigs.dynamixel import TICKS_PER_RAD, load_dxl_rig
from firmware_interface.rigs.mcu import load_rig
from sim.config import load_toml

RIG = Path(__file__).resolve().parents[2] / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
DEADLINE_S = 30.0
#: The served stroke: 41.3 deg at 0.5 Hz peaks at 2.3 rad/s, inside the rig's 4 rad/s rate limit, so the
#: driver passes it through unlimited once it has caught up.
STROKE_HZ = 0.5
TRACK_S = 2.5                   # how long the test watches the servos track
#: Each measured angle must be within TRACK_TOL_RAD of a setpoint sent during the TRACK_WINDOW_S before it (the
#: servo lags its goal by its position loop plus the pipeline; a loaded machine stretches the pipeline).
TRACK_TOL_RAD = 0.03
TRACK_WINDOW_S = 0.5
NEUTRAL_TOL_RAD = 0.02          # the driver's own "arrived at neutral"
#: sim/state rate: above the rig's 200 Hz command rate, well below the server's default 1 kHz (less load)
SIM_RATE_HZ = 250
#: The rig's Bus Watchdog (0.1 s) trips when the host is silent that long, which a heavily loaded machine can
#: cause: the servos stop where they are until the link re-arms them. Telemetry this close to a frame flagged
#: FLAG_WATCHDOG is left out of the tracking check (s before, s after), and the trip must show in hw/status.
TRIP_EXCLUDE_S = (0.3, 0.6)
#: The microcontroller's noise-free gauges (flapper_rig.toml, kinematic plant): strain = coefficient * the angle
#: of its own servo channel, which the driver drives with the bus's joint angles ("mirror").
GAUGES = {"root_twist_r": "stroke_right", "root_twist_l": "stroke_left"}


def test_serve_drive_dynamixel_emulator_chain(stack):
    dxl_rig = load_dxl_rig(RIG)
    sensor_rig = load_rig(dxl_rig.microcontroller)
    # the flapper as `mms demo` serves it (hil/experiment/demo.py), lighter still: tethered, one section per wing, and a
    # stroke slow enough for the servos' rate limit
    robot = load_toml(stack.root / "configs" / "robots" / "flapper.toml")
    robot["robot"]["base"] = "fixed"
    robot["wing"]["sections"] = 1
    robot["stroke"]["frequency_hz"] = STROKE_HZ
    robot.setdefault("simulation", {})["dt"] = 5e-4
    robot_path = stack.tmp / "flapper_dxl.toml"
    robot_path.write_text(tomli_w.dumps(robot))
    amplitude = math.radians(robot["stroke"]["amplitude_deg"])
    stats_path, sensor_stats_path = stack.tmp / "bus_stats.json", stack.tmp / "sensor_stats.json"

    sim = stack.collect(stack.ep.sim_pub, ("sim/state", "sim/status"), validate_every=50)
    stack.serve(str(robot_path), "--rate", str(SIM_RATE_HZ))
    drive = stack.driver("--emulate", "--autostart", "--emulator-args", f"--stats {stats_path}",
                         "--sensor-emulator-args", f"--stats {sensor_stats_path}", rig=RIG)
    hw = drive.collector
    logs = (drive.log_path, *(m.log_path for m in stack.made if hasattr(m, "log_path")))

    def wait(predicate, what: str, timeout_s: float = DEADLINE_S):
        return stack.wait_for(predicate, timeout_s, what=what, logs=logs)

    joint_names = wait(lambda: (s := sim.last("sim/status")) and s["joint_names"], "a sim/status")
    index = {name: k for k, name in enumerate(joint_names)}
    wait(lambda: (s := hw.last("hw/status")) and s["lifecycle"] == "active", "the driver active")
    # watch the servos track for a while (the first commands ramp from neutral onto the stroke)
    wait(lambda: sum(c["mode"] == "track" for c in hw.get("hw/command")) > 50 + TRACK_S * dxl_rig.command_hz,
         f"{TRACK_S} s of tracking commands")

    # ---- setpoints follow the served stroke through the rig's joint map and limits
    states = {s["seq"]: s for s in sim.get("sim/state")}
    commands = hw.get("hw/command")
    tracking = [c for c in commands if c["mode"] == "track"]
    servos = {s.name: s for s in dxl_rig.servos}
    unlimited = 0
    for c in tracking:
        state = states.get(c["sim_seq"])
        if state is None:
            continue
        assert c["state_stamp_ns"] == state["stamp_ns"]
        for jm in dxl_rig.joints:
            k = c["channels"].index(jm.servo)
            servo = servos[jm.servo]
            sent, raw = c["setpoint_rad"][k], c["setpoint_raw"][k]
            assert servo.min_rad <= sent <= servo.max_rad
            # float32 on the driver's message path; the link rounds to whole goal ticks
            assert abs(raw - (servo.center_ticks + servo.direction * TICKS_PER_RAD * sent)) < 1e-3
            if not c["limited"][k]:
                assert abs(sent - jm.servo_angle(state["q"][index[jm.joint]])) < 1e-12
                unlimited += 1
    assert unlimited > 100, unlimited
    # the stroke really moved them: both setpoints near the stroke amplitude at some point
    for k in range(len(dxl_rig.servos)):
        assert max(abs(c["setpoint_rad"][k]) for c in tracking) > 0.8 * amplitude

    # ---- the measured servo angles follow the setpoints
    t_first = tracking[0]["stamp_ns"]
    telemetry = [m for m in hw.get("hw/telemetry") if m["host_ns"] > t_first + TRACK_WINDOW_S * 1e9]
    assert len(telemetry) > 100, len(telemetry)
    assert telemetry[0]["servo_names"] == [s.name for s in dxl_rig.servos]
    trips = [m["host_ns"] for m in telemetry if m.get("device_flags", 0) & p.FLAG_WATCHDOG]
    telemetry = [m for m in telemetry if not any(-TRIP_EXCLUDE_S[0] * 1e9 <= m["host_ns"] - t
                                                 <= TRIP_EXCLUDE_S[1] * 1e9 for t in trips)]
    assert len(telemetry) > 100, (len(telemetry), len(trips))
    errors = []
    for m in telemetry:
        recent = [c for c in commands if 0 <= m["host_ns"] - c["stamp_ns"] <= TRACK_WINDOW_S * 1e9]
        errors.append(min(max(abs(a - b) for a, b in zip(m["servo_rad"][-1], c["setpoint_rad"]))
                          for c in recent))
    gaps_ms = [(b["stamp_ns"] - a["stamp_ns"]) / 1e6 for a, b in zip(commands, commands[1:])]
    assert max(errors) < TRACK_TOL_RAD, (max(errors), f"{len(trips)} watchdog trips, largest gap between "
                                                      f"commands {max(gaps_ms):.0f} ms")
    assert max(abs(x) for m in telemetry for x in m["servo_rad"][-1]) > 0.8 * amplitude

    # ---- the sensors: the microcontroller's frames (its channels, its clock), in the same messages
    assert telemetry[0]["strain_names"] == [c.name for c in sensor_rig.strain]
    assert telemetry[0]["load_names"] == [c.name for c in sensor_rig.load]
    assert all(len(m["device_us"]) == sensor_rig.samples_per_frame for m in telemetry)
    device_us = np.array([u for m in telemetry for u in m["device_us"]], dtype=np.int64)
    assert statistics.median(np.diff(device_us) % 2**32) == 1e6 / sensor_rig.telemetry_hz
    # the held servo positions say when the bus was read: before the frame arrived, and never older than the
    # link-silence limit (older, and the link would have been declared lost)
    held_age_s = [(m["host_ns"] - m["servo_host_ns"]) / 1e9 for m in telemetry]
    assert all(0 <= age < 0.5 for age in held_age_s), max(held_age_s)
    # the strains follow the stroke: each gauge's implied servo angle (strain / coefficient, noise-free gauges)
    # is within the tracking tolerance of a setpoint of the preceding window, and reaches the stroke amplitude
    kin = sensor_rig.emulator.kinematic
    implied_max = 0.0
    for gauge, servo_name in GAUGES.items():
        g, k = telemetry[0]["strain_names"].index(gauge), telemetry[0]["servo_names"].index(servo_name)
        coefficient = kin[gauge].coefficients[servo_name]
        for m in telemetry:
            sent = [c["setpoint_rad"][k] for c in commands if 0 <= m["host_ns"] - c["stamp_ns"] <= TRACK_WINDOW_S * 1e9]
            for row in m["strain"]:
                implied = row[g] / coefficient
                assert min(abs(implied - a) for a in sent) < TRACK_TOL_RAD, (gauge, implied, min(sent), max(sent))
                implied_max = max(implied_max, abs(implied))
    assert implied_max > 0.8 * amplitude, implied_max

    # ---- hw/status: the Dynamixel link section, no hardware error, a clean bus
    status = hw.last("hw/status")
    link = status["link"]
    assert status["rig"] == dxl_rig.name and link["state"] == "up" and not status["estop"]
    assert link["bus"] == "dynamixel"
    assert link["hardware_error_status"] == {str(i): 0 for i in dxl_rig.ids}
    assert link["status_errors"] == 0 and link["crc_errors"] == 0
    assert link["watchdog_trips"] >= (1 if trips else 0), (link["watchdog_trips"], len(trips))
    assert link["status_ok"] > 0 and link["emulator_starts"] == 1
    assert status["states"]["used"] > 0
    sensor = link["sensor"]
    assert sensor["state"] == "up" and sensor["emulator_starts"] == 1 and sensor["crc_errors"] == 0
    assert sensor["frames_ok"] > 0 and link["servo_channels"] == "mirror"
    assert status["link"]["device"]["crc_errors"] == 0       # the microcontroller's own counters (LINK_STATS)

    # ---- SIGINT: ramp to neutral, torque off, exit 0
    drive.proc.send_signal(signal.SIGINT)
    assert drive.proc.wait(DEADLINE_S) == 0
    final = wait(lambda: (s := hw.last("hw/status")) and s["lifecycle"] == "finalized" and s,
                 "the finalized hw/status", timeout_s=5)
    assert final["estop"] is False
    last = hw.get("hw/telemetry")[-1]["servo_rad"][-1]
    assert all(abs(x - s.neutral_rad) <= NEUTRAL_TOL_RAD for x, s in zip(last, dxl_rig.servos)), last
    assert hw.get("hw/command")[-1]["mode"] in ("ramp", "neutral")
    stats = json.loads(wait(lambda: stats_path.exists() and stats_path.read_text(), "bus emulator stats",
                            timeout_s=5))
    for s in dxl_rig.servos:
        servo = stats["servos"][str(s.id)]
        assert servo["torque_enable"] == 0, stats
        assert servo["hardware_error_status"] == 0
        assert abs(servo["position"] - s.to_ticks(s.neutral_rad)) <= NEUTRAL_TOL_RAD * TICKS_PER_RAD, stats
    sensor_stats = json.loads(wait(lambda: sensor_stats_path.exists() and sensor_stats_path.read_text(),
                                   "sensor emulator stats", timeout_s=5))
    assert sensor_stats["rx"]["frames"] > TRACK_S * dxl_rig.command_hz and sensor_stats["rx"]["crc_errors"] == 0
    assert not sim.invalid and not hw.invalid, (sim.invalid + hw.invalid)[:5]
