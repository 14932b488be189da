"""`mms demo --closed-loop`: the real chain (mms serve --feedback, mms drive --emulate with the flapper rig's
physics plant, mms record) with the loop closed through the tether sensor, short."""
from __future__ import annotations

import json
import math

import pytest

from sim import messages
from tests.hil_demo.test_demo import DEMO_TEST_TIMEOUT_S, DEMO_TIMEOUT_S, _demo, _read_recording, _wait_no_processes

#: s: the live run (the tare takes the rig file's tare_s = 0.5 s, the phase table 8 periods of 0.2 s more: the loop
#: closes at 2.0-2.9 s simulated). Not longer: a longer run does not make vx more resolvable (the noise that decides
#: is the 8-stroke table's): 7 of the 10 runs of 5 s that closed, 5 of 13 of 10 s at loads 5.6-14.5; the stale
#: hold under that load held 3 of the 13 runs of 10 s early (3.9-7.7 s simulated), 2 of 12 of 5 s before the loop
#: closed (0.23, 2.55 s: the demo fails, a flake of both lengths). Wall time 12-66 s a
#: run (10 s: 28-83 s); this test's call with the criterion against main's without it, alternating at load 5.7 -> 4.9:
#: 15.4 / 13.1 s, 27.8 / 18.8 s (docs/closed-loop.md, "Which components the rig resolves")
CLOSED_LOOP_DURATION_S = 5
#: N: the zero offset of the emulated tether sensor's fz channel (configs/rigs/flapper_rig.toml,
#: [emulator.sensors.fz] offset) ...
FZ_OFFSET_N = 1e-3
#: ... within its noise over the tare's 0.5 s: noise_std 2e-4 N / sqrt(500 samples) = 9e-6 N; band 5 sigma
FZ_TARE_BAND_N = 4.5e-5
#: the fed-back wrench moves the thorax off the open loop's path by at least this fraction of the model's own error
#: (measured in one 6 s run at load ~10: 1.12 (vx), 1.26 (vz), 1.46 (wy))
INERT_FRACTION = 0.01
#: the resolvable component's nearness to the truth, judged in the part the loop feeds and the rig resolves: vx's
#: stroke harmonics (hil.experiment.closed_loop.part_distances; docs/closed-loop.md, "The drift the loop leaves").
#: Closed over open distance from the truth there: 0.075-0.694 in the 38 runs of 2026-11-28 that resolved vx (every
#: load from idle to 18, every recording on this machine that day: 0.075-0.488 in the 27 with the shipped rig file,
#: CI's failed run 0.223); the test asks what the verdict says, below 1. The whole motion's RMS ratio is no measure
#: of it: the thorax's drift, which the loop does not feed ([feedback] mean = false), and the loop's noise outside
#: the harmonics add to it (0.29-1.55 in the same runs; CI failed at 1.551 on a band of 1.5), and to the whole
#: motion's gain along the departure (0.17-0.96): both are reported, not asserted
FOLLOWING_RATIO_MAX = 1.0
#: vz, never resolvable (the stroke mean of fz, 0.21-0.36 uN against 4.4-203 uN of noise in the table, SNR 0.00-0.07
#: in all 23 runs that closed), is not taken along the truth's departure: gain -0.33 to 0.16 (23 runs), with the
#: table's mean -0.13 to -0.03 (3 runs); band below 0.5
NOT_FOLLOWED_GAIN_MAX = 0.5
#: wy, where its stroke harmonics decide: the rig's gravity, which the weightless free flight does not have, keeps
#: them from the truth (docs/closed-loop.md, "What keeps the pitch rate from the truth": offline, the closed loop's
#: periodic part is 0.610 of the open loop's distance on the Earth, 0.114 on a weightless rig); live 0.516-0.829 in
#: the 27 runs with the shipped rig file that resolved it (0.52-1.27 in all 39): above 0.4, the weightless rig's
#: figure well below
WY_GRAVITY_RATIO_MIN = 0.4
#: N: the wrench the truth's vx departure asks of the loop, the stroke harmonics 1-4 of fx (M*_0 d(truth - open)/dt),
#: measured 23.4-23.7 uN in all 23 runs that closed; independently, offline and tethered, the stiffer roots change the tether's fx
#: by 24 uN in those harmonics (docs/closed-loop.md, "The signal is small"): the free and the held thorax agree
VX_SIGNAL_N, VX_SIGNAL_BAND = 24e-6, 0.1
#: the rig's gravity (9.81 m/s^2; the demo's thorax flies weightless) changes the held model error's stroke
#: harmonics of my by 0.430 and of fx by 0.0004 (hil.experiment.closed_loop.gravity_mismatch: offline, the same in
#: every run; fitted over other stretches the same to 3 digits): bands +-0.03, below 0.01
MY_GRAVITY_MISMATCH, MY_GRAVITY_BAND, FX_GRAVITY_MISMATCH_MAX = 0.43, 0.03, 0.01


def _thorax_weight_difference_n() -> float:
    """g (rho_demo - rho_rig) V of the thorax ellipsoid, N: the demo's closed-loop thorax against the rig's."""
    from hil.experiment.closed_loop import FREE
    from sim.config import load_toml, shipped_config

    robot, rig = load_toml(shipped_config("robot", "flapper")), load_toml(shipped_config("rig", "flapper"))
    thorax = robot["thorax"]
    volume = 4.0 / 3.0 * math.pi * thorax["half_axis_x"] * thorax["half_axis_y"] * thorax["half_axis_z"]
    return rig["feedback"]["gravity"] * volume * (FREE["thorax"]["density"] - thorax["density"])


@pytest.mark.timeout(DEMO_TEST_TIMEOUT_S)
def test_closed_loop_demo_feeds_the_tether_back_into_the_free_thorax(tmp_path):
    out = tmp_path / "run"
    demo = _demo(out, CLOSED_LOOP_DURATION_S, "--closed-loop")
    stdout, stderr = demo.communicate(timeout=DEMO_TIMEOUT_S)
    assert demo.returncode == 0, stdout[-3000:] + stderr[-3000:]
    recording = _read_recording(out / "run.mcap")
    statuses = [s for s in recording[messages.TOPIC_SIM_STATUS] if "feedback" in s]
    feedback = statuses[-1]["feedback"]
    # the loop closed on the rig's measurements and stayed closed: no guard tripped, no e-stop
    assert feedback["ready"] and feedback["used"] > 0.5 * 1000 * CLOSED_LOOP_DURATION_S, feedback
    assert feedback["trips"] == 0 and recording[messages.TOPIC_HW_STATUS][-1]["estop"] is False
    # at rest the model's twin predicts the tether exactly but for the sensor's own zero offset and the weight of its
    # denser thorax (hil.experiment.closed_loop.FREE; both under the rig's gravity): m - m_hat = offset + g V drho
    tare = dict(zip(("fx", "fy", "fz", "mx", "my", "mz"), feedback["tare"]))
    assert abs(tare["fz"] - FZ_OFFSET_N - _thorax_weight_difference_n()) < FZ_TARE_BAND_N, tare
    # the thorax flew free (base_pos moved) and the fed-back wrench moved it off the open loop's path
    states = recording[messages.TOPIC_SIM_STATE]
    assert states[-1]["base_pos"] != states[0]["base_pos"]
    figures = json.loads((out / "report" / "closed_loop.json").read_text())
    assert figures["duration_s"] > CLOSED_LOOP_DURATION_S - 1 and 0.0 < figures["closed_at_s"] < figures["duration_s"]
    for name, entry in figures["components"].items():
        # an inert loop would leave the closed loop on the open loop's path to rounding (same model, step and start)
        assert entry["closed_minus_open_rms"] > INERT_FRACTION * entry["open_error_rms"] > 0.0, (name, entry)
        # how far it moved along the truth's departure from the model: a projection and a correlation (bounded by
        # Cauchy-Schwarz); no band on them: live they scatter around 0 (docs/closed-loop.md, run table)
        assert math.isfinite(entry["gain"]) and -1.0 <= entry["correlation"] <= 1.0, (name, entry)
    # the run's health comes with the figures: the compared stretch mapped onto the recording clock spans the same
    # time as in simulated time (the server paced to the wall clock: within 5 %), and it is said on stdout
    health = figures["health"]
    compared_s = health["compared_s"][1] - health["compared_s"][0]
    assert abs(compared_s - (figures["duration_s"] - figures["closed_at_s"])) < 0.05 * compared_s, health
    assert all(d in health["disturbances"] for d in health["compared_disturbances"])
    # the comparison ends where the driver leaves tracking (the demo's stop): its ramp to neutral after it is not the
    # experiment (inside the compared stretch in all three idle runs before, each then INVALID-looking)
    assert not [d for d in health["compared_disturbances"] if d["what"] == "driver ramp"], health
    assert (out / "report" / "closed_loop.png").stat().st_size > 0
    assert "thorax vx: closed loop" in stdout and "run health: " in stdout
    _assert_the_verdict_follows_from_the_numbers(figures, stdout)
    _wait_no_processes(str(out))


def _assert_the_verdict_follows_from_the_numbers(figures: dict, stdout: str) -> None:
    """docs/closed-loop.md, "Which components the rig resolves": nearness where the run resolves the truth's
    departure, none where it does not, and each verdict on stdout."""
    from hil.experiment.closed_loop import RESOLVING_SNR, entry_follows

    components = figures["components"]
    vx = components["vx"]["resolvability"]
    harmonics = vx["parts"]["harmonics"]
    assert abs(harmonics["signal"] - VX_SIGNAL_N) < VX_SIGNAL_BAND * VX_SIGNAL_N, vx
    for name in ("vz", "wy"):
        resolvability = components[name]["resolvability"]
        part = resolvability["parts"][resolvability["dominant"]]
        if resolvability["dominant"] == "mean":     # a mean force below its noise: the criterion can fail here
            assert part["signal"] < RESOLVING_SNR * part["noise"] and not resolvability["resolvable"], components[name]
            assert f"thorax {name}: not resolvable by this rig's sensor (the stroke mean of " in stdout
    assert components["vz"]["gain"] < NOT_FOLLOWED_GAIN_MAX, components["vz"]
    assert components["vz"]["resolvability"]["dominant"] == "mean", components["vz"]
    # the captive limit of a rig on the Earth: its gravity is in the pitching moment's error, not in the forward force's
    wy = components["wy"]["resolvability"]
    assert abs(wy["gravity_mismatch"] - MY_GRAVITY_MISMATCH) < MY_GRAVITY_BAND, wy
    assert vx["gravity_mismatch"] < FX_GRAVITY_MISMATCH_MAX, vx
    if wy["resolvable"] and wy["dominant"] == "harmonics":
        assert (f"the rig's gravity, which the simulation does not have, changes the held model error there by "
                f"{100 * wy['gravity_mismatch']:.0f} %") in stdout
        assert components["wy"]["distances"]["harmonics"]["ratio"] > WY_GRAVITY_RATIO_MIN, components["wy"]
    for name, entry in components.items():          # each verdict on stdout, with the figure that decides it
        assert f"thorax {name}: {entry['verdict']}" in stdout
        if entry["resolvability"]["resolvable"]:
            assert entry["verdict"].startswith("follows the truth" if entry_follows(entry) else "does not follow")
    if vx["resolvable"]:
        assert vx["dominant"] == "harmonics", vx
        assert components["vx"]["distances"]["harmonics"]["ratio"] < FOLLOWING_RATIO_MAX, components["vx"]
        assert components["vx"]["verdict"].startswith("follows the truth (the stroke harmonics of fx: "), components["vx"]
    else:
        # the rig's noise in this run hid the departure: said so with its numbers, and no nearness claimed
        assert harmonics["signal"] < RESOLVING_SNR * harmonics["noise"], vx
        assert "thorax vx: not resolvable by this rig's sensor (the stroke harmonics of fx: signal " in stdout
    assert f"verdict: {figures['verdict']}" in stdout
