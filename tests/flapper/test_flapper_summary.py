"""The summary's definitions (sim/robots/flapper.py summarize) on signals whose answers are known in closed
form: semi-amplitudes and lags of the fundamental harmonic, mean power, drift-free thorax amplitudes."""
import copy
import math
from pathlib import Path

import numpy as np
import pytest

from sim.cli_sim import SimRun
from sim.config import load_toml
from sim.robots import build_robot
from sim.robots.flapper import summarize, thorax_pitch
from sim.spatial import matrix_to_quat

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "robots" / "flapper.toml"


def test_summary_of_known_harmonics():
    table = copy.deepcopy(load_toml(CONFIG))
    table["wing"]["sections"] = 2
    model = build_robot(table, CONFIG)
    md = model.metadata
    A, w, T = md["stroke_amplitude_rad"], md["stroke_omega_rad_s"], md["period_s"]
    t = np.linspace(0.0, 3 * T, 3 * 400 + 1)
    n = model.n
    q, qd, tau = np.zeros((t.size, n)), np.zeros((t.size, n)), np.zeros((t.size, n))
    stroke = md["stroke_joints"][0]
    q[:, stroke] = -A * np.cos(w * t)
    qd[:, stroke] = A * w * np.sin(w * t)
    tau[:, stroke] = 0.01 * np.sin(w * t) + 0.004 * np.cos(w * t)       # N m
    twist_lag, bend_lag = math.radians(50.0), math.radians(-120.0)
    twist_joint = md["twist_joints"]["r"][0]
    bend_joints = md["bend_joints"]["r"]
    q[:, twist_joint] = 0.3 * -np.cos(w * t - twist_lag) + 0.05 * np.cos(2 * w * t)
    for k in bend_joints:   # the tip bending is the sum along the wing
        q[:, k] = 0.1 * -np.cos(w * t - bend_lag)
    pos = np.zeros((t.size, 3))
    pos[:, 2] = -0.5 * 9.81 * t ** 2 + 0.002 * np.sin(2 * w * t)     # falling + 2 mm at twice the stroke
    pitch = 0.3 * t + math.radians(5.0) * np.sin(w * t)
    quat = np.array([matrix_to_quat(np.array([[math.cos(a), 0, -math.sin(a)], [0, 1, 0],
                                              [math.sin(a), 0, math.cos(a)]])) for a in pitch])
    ext = np.zeros((t.size, 6))
    ext[:, 2] = md["weight_N"] * (0.7 + 0.5 * np.sin(2 * w * t))
    arrays = {"q": q, "qd": qd, "tau": tau, "base_pos": pos, "base_quat": quat, "ext_wrench": ext}
    run = SimRun(t=t, arrays=arrays, model=model, config=table, options={}, wall_time_s=0.5)
    s = summarize(run)
    assert s["tip_twist_amplitude_deg"] == pytest.approx(math.degrees(0.3), rel=1e-4)
    assert s["tip_twist_phase_lag_deg"] == pytest.approx(50.0, abs=0.05)
    assert s["tip_bend_amplitude_deg"] == pytest.approx(math.degrees(0.1 * len(bend_joints)), rel=1e-4)
    assert s["tip_bend_phase_lag_deg"] == pytest.approx(-120.0, abs=0.05)
    assert s["mean_power_per_wing_W"] == pytest.approx(0.01 * A * w / 2, rel=1e-4)
    assert s["peak_stroke_torque_Nm"] == pytest.approx(math.hypot(0.01, 0.004), rel=1e-4)
    assert s["thorax_amplitude_mm"]["z"] == pytest.approx(2.0, rel=1e-6)
    assert s["thorax_pitch_amplitude_deg"] == pytest.approx(5.0, rel=1e-6)
    assert s["mean_vertical_force_over_weight"] == pytest.approx(0.7, rel=1e-4)
    assert s["sim_time_s"] == pytest.approx(3 * T) and s["real_time_factor"] == pytest.approx(3 * T / 0.5)
    # the run is no hover: it falls 0.5 g (3T)^2 and pitches up 0.3 rad/s (plus 5 deg at the stroke frequency)
    fall = 0.5 * 9.81 * (3 * T) ** 2
    assert s["base_vertical_drift_m"] == pytest.approx(-fall, rel=1e-9) and s["base_drift_m"] == pytest.approx(fall)
    assert s["base_max_abs_pitch_deg"] == pytest.approx(math.degrees(np.max(np.abs(pitch))), rel=1e-9)
    turned = np.sum(np.abs(np.diff(pitch)))          # about one axis: the sum of the steps' angles
    assert s["base_total_rotation_deg"] == pytest.approx(math.degrees(turned), rel=1e-6)
    drift_warning = [w for w in s["warnings"] if "drifted" in w]
    assert len(drift_warning) == 1 and f"{-1e3 * fall:+.0f} mm vertically" in drift_warning[0]
    assert all("tumbled" not in w for w in s["warnings"]) == (np.max(np.abs(pitch)) <= math.pi / 2)


def test_a_base_that_turns_over_is_said_to_tumble_and_a_still_one_gives_no_warning():
    table = copy.deepcopy(load_toml(CONFIG))
    table["wing"]["sections"] = 2
    model = build_robot(table, CONFIG)
    T, n = model.metadata["period_s"], model.n
    t = np.linspace(0.0, 2 * T, 801)
    pitch = np.radians(420.0) * t / t[-1]       # a steady pitch-up through 420 deg
    quat = np.array([matrix_to_quat(np.array([[math.cos(a), 0, -math.sin(a)], [0, 1, 0],
                                              [math.sin(a), 0, math.cos(a)]])) for a in pitch])
    zeros = np.zeros((t.size, n))
    arrays = {"q": zeros, "qd": zeros, "tau": zeros, "base_pos": np.zeros((t.size, 3)), "base_quat": quat,
              "ext_wrench": np.zeros((t.size, 6))}
    s = summarize(SimRun(t=t, arrays=arrays, model=model, config=table, options={}, wall_time_s=1.0))
    assert s["base_max_abs_pitch_deg"] == pytest.approx(420.0, rel=1e-9)
    assert s["base_total_rotation_deg"] == pytest.approx(420.0, rel=1e-9)
    assert s["base_drift_m"] == 0.0 and len(s["warnings"]) == 1 and "tumbled: pitch up to 420 deg" in s["warnings"][0]
    arrays["base_quat"] = np.tile([1.0, 0.0, 0.0, 0.0], (t.size, 1))
    still = summarize(SimRun(t=t, arrays=arrays, model=model, config=table, options={}, wall_time_s=1.0))
    assert still["warnings"] == [] and still["base_total_rotation_deg"] == 0.0


def test_pitch_is_continuous_through_the_vertical():
    angles = np.linspace(-3.0, 3.0, 61)
    quat = np.array([matrix_to_quat(np.array([[math.cos(a), 0, -math.sin(a)], [0, 1, 0],
                                              [math.sin(a), 0, math.cos(a)]])) for a in angles])
    np.testing.assert_allclose(thorax_pitch(quat), angles, atol=1e-12)
