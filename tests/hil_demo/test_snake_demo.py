"""`mms demo --rig snake`: the 2-D snake (a Cosserat rod served live, sim/cosserat/live.py) on the ten-servo Dynamixel
chain (configs/rigs/snake_dynamixel_rig.toml, emulated), recorded and validated: commanded joint angles against the
servos' measured ones, with the run's health.

Figures over four 10 s demos the run health called VALID (2026-11-27, the shared 2-core machine at load 4-10; a fifth,
INVALID, had a 0.17 s stall of every process at once): per servo, amplitude ratio 0.9984-1.0001 (the servo loops
predict 0.999), phase lag 5.16-6.08 deg (centre 5.62, half-range 0.46; predicted 4.95 from the loops and the goal's
hold), residual after the lag is taken out 2.0-5.6 mrad of a 0.94 rad wave, sim/state deadline misses 0-0.9 %
(reported, not asserted: they depend on the machine's load). Bands: lag 5.6 +/- 1.5 deg (3x the half-range), ratio
0.999 +/- 0.01, residual < 15 mrad. The driver's rate limit (0.02 rad per 5 ms frame) splits the steps between the
100 Hz states (up to 0.029 rad) over two frames: tracking frames with a channel flagged `limited` 0.505-0.521 of them
over five runs (the INVALID one included); band 0.51 +/- 0.05.
"""
from __future__ import annotations

import json

import pytest

from sim import messages
from tests.hil_demo.test_demo import DEMO_TEST_TIMEOUT_S, DEMO_TIMEOUT_S, NEUTRAL_TOLERANCE_RAD, _demo, _read_recording, _wait_no_processes

#: s: 12 s leaves one healthy window of >= 5 s (docs/validation.md) after a stall of the busy machine; four 10 s runs
#: analysed 5.9-9.3 s
SNAKE_DEMO_S = 12
SERVOS = [f"seg{j}" for j in range(1, 11)]
LAG_DEG, LAG_BAND_DEG = 5.6, 1.5
RATIO, RATIO_BAND = 0.999, 0.01
RESIDUAL_MAX_RAD = 0.015
LIMITED_FRACTION, LIMITED_BAND = 0.51, 0.05


@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
def test_snake_demo_servo_chain_tracks_the_rods_joint_angles(tmp_path):
    out = tmp_path / "run"
    demo = _demo(out, SNAKE_DEMO_S, "--rig", "snake")
    stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT_S)
    assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert "no replay: the model of a servo chain is a Cosserat rod" in stdout

    recording = _read_recording(out / "run.mcap")
    states = recording[messages.TOPIC_SIM_STATE]
    named = next(s for s in states if "joint_names" in s)
    assert named["joint_names"] == [f"{s}_bend_z" for s in SERVOS]
    assert named["contact_names"] == [f"peg {i}" for i in range(1, 6)]
    assert len(states[-1]["backbone"]) == 33 and len(states[-1]["contact_force"]) == 15
    # the head advances along -x at the demo's |V_o| = 0.25 m/s (the head guide's imposed speed)
    assert states[-1]["base_pos"][0] < -0.2 * (states[-1]["t"] - states[0]["t"])
    commands = recording[messages.TOPIC_HW_COMMAND]
    assert commands[-1]["channels"] == SERVOS
    assert all(abs(x) < NEUTRAL_TOLERANCE_RAD for x in commands[-1]["setpoint_rad"])   # the chain laid straight
    tracking = [c for c in commands if c["mode"] == "track"]
    limited = sum(any(c["limited"]) for c in tracking) / len(tracking)
    assert abs(limited - LIMITED_FRACTION) < LIMITED_BAND, limited

    metrics = json.loads((out / "report" / "metrics.json").read_text())
    assert metrics["health"]["valid"] is True and metrics["health"]["analysed_s"] >= 5.0, metrics["health"]
    channels = {c["measured"].split(":")[-1]: c for c in metrics["channels"]}
    assert set(channels) == set(SERVOS)
    for name in SERVOS:
        figures = channels[name]["metrics"]
        assert channels[name]["simulated"].endswith(f"q:{name}_bend_z"), channels[name]
        assert abs(figures["amplitude_ratio"] - RATIO) < RATIO_BAND, (name, figures)
        assert abs(figures["phase_lag_deg"] - LAG_DEG) < LAG_BAND_DEG, (name, figures)
        assert figures["residual_rms"] < RESIDUAL_MAX_RAD, (name, figures)
    narrative = (out / "report" / "narrative.md").read_text()
    assert narrative.count(": as expected") == 4 and "CONTRADICTS" not in narrative, narrative
    _wait_no_processes(str(out))
