"""RayBot swimming: thrust only from the tail beat, speed growing with frequency, left/right symmetry, the
tethered (load-cell) mode, and the ``mms sim`` / ``mms sweep`` commands end to end."""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.config import load_toml
from sim.robots import build_robot, raybot
from sim.simulation import Simulation

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "robots" / "raybot.toml"
SUMMARY_KEYS = {"steady_speed_m_s", "forward_speed_m_s", "mean_thrust_N", "mean_power_W", "cost_of_transport",
                "flow_domain_exits", "vertical_speed_m_s", "tailbeat_frequency_Hz", "tailbeat_amplitude_m",
                "strouhal", "body_lengths_per_s", "mean_depth_change_m", "sim_time_s", "wall_time_s",
                "real_time_factor", "base_drift_m", "base_vertical_drift_m", "base_max_abs_pitch_deg",
                "base_total_rotation_deg", "steady_window_s", "warnings"}


def _config(**changes) -> dict:
    table = copy.deepcopy(load_toml(CONFIG))
    # neutral and deep: the swimming figures are not mixed with rising to the surface
    table["disc"]["net_buoyancy_fraction"] = 0.0
    table["water"]["initial_depth_m"] = 20.0
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        table[section][key] = value
    return table


def test_no_tail_motion_no_thrust():
    """Zero servo amplitude: the tethered disc feels no horizontal force, the free vehicle does not move."""
    model = build_robot(_config(tail_drive__servo_amplitude_deg=0.0, robot__base="fixed"), CONFIG)
    t, arrays, _ = raybot.swim(model, 1.0)
    assert np.abs(arrays["base_wrench"][:, :2]).max() < 1e-9
    free = build_robot(_config(tail_drive__servo_amplitude_deg=0.0), CONFIG)
    t, arrays, _ = raybot.swim(free, 1.0)
    assert np.abs(arrays["base_pos"] - arrays["base_pos"][0]).max() < 1e-9


def test_tethered_tail_beat_pulls_on_the_load_cell():
    """Tethered (base fixed): a tail beat pushes the disc forward, so the load cell pulls back (base_wrench x < 0
    on average), and the load cell balances the hydrodynamic force (base_wrench = -ext_wrench in the horizontal
    plane for a level disc, since gravity and buoyancy are vertical)."""
    model = build_robot(_config(robot__base="fixed", tail_drive__frequency_Hz=2.0), CONFIG)
    t, arrays, _ = raybot.swim(model, 3.0, record_every=2)
    window = t > 1.5
    tether = arrays["base_wrench"][window]
    assert tether[:, 0].mean() < -0.01
    # not an identity of the output plumbing: the wrench balance holds only on average (inertia of the tail)
    assert tether[:, 0].mean() == pytest.approx(-arrays["ext_wrench"][window, 0].mean(), rel=0.2)


def _mirror_runs(duration):
    left = build_robot(_config(tail_drive__frequency_Hz=2.0, tail_drive__phase_deg=0.0), CONFIG)
    right = build_robot(_config(tail_drive__frequency_Hz=2.0, tail_drive__phase_deg=180.0), CONFIG)
    return raybot.swim(left, duration)[1], raybot.swim(right, duration)[1]


def test_left_right_symmetry_of_a_mirrored_tail_beat():
    """Mirroring the beat (phase + 180 deg) mirrors the whole motion through the x-z plane: x and z equal,
    y opposite, roll and yaw opposite, pitch equal."""
    a, b = _mirror_runs(2.0)
    scale = max(1e-3, np.abs(a["base_pos"] - a["base_pos"][0]).max())
    assert np.abs(a["base_pos"][:, 0] - b["base_pos"][:, 0]).max() < 1e-6 * scale + 1e-9
    assert np.abs(a["base_pos"][:, 2] - b["base_pos"][:, 2]).max() < 1e-6 * scale + 1e-9
    assert np.abs(a["base_pos"][:, 1] + b["base_pos"][:, 1]).max() < 1e-6 * scale + 1e-9
    qa, qb = a["base_quat"], b["base_quat"]
    assert np.abs(qa[:, [0, 2]] - qb[:, [0, 2]]).max() < 1e-6
    assert np.abs(qa[:, [1, 3]] + qb[:, [1, 3]]).max() < 1e-6
    assert np.abs(a["base_pos"][:, 1]).max() > 1e-5      # the motion itself is not trivially symmetric


#: docs/raybot.md "Swimming figures": frequency Hz -> (steady speed m/s, trailing edge peak to peak m, Strouhal),
#: neutral, deep, 25 deg, 8 s, last three beats. The same to 4 digits at dt/2; the band allows another platform's
#: rounding.
SWIM_FIGURES = {1.0: (0.147, 0.107, 0.73), 1.5: (0.260, 0.112, 0.65), 2.0: (0.289, 0.090, 0.63)}
SWIM_BAND = 0.03


def test_speed_grows_with_tailbeat_frequency_and_swims_straight():
    """Lighthill's tail, 25 deg of servo: the steady speed rises from 1 to 2 Hz (above about 2 Hz the servo's slew
    limit cuts the beat and the soft caudal fin is past its resonance: docs/raybot.md)."""
    speeds = []
    for frequency, expected in SWIM_FIGURES.items():
        model = build_robot(_config(tail_drive__frequency_Hz=frequency), CONFIG)
        t, arrays, _ = raybot.swim(model, 8.0, record_every=10)
        figures = raybot.swim_figures(model, t, arrays)
        speeds.append(figures["steady_speed_m_s"])
        measured = (figures["steady_speed_m_s"], figures["tailbeat_amplitude_m"], figures["strouhal"])
        assert measured == pytest.approx(expected, rel=SWIM_BAND)
        travel = arrays["base_pos"][-1] - arrays["base_pos"][0]
        if frequency >= 1.5:
            assert travel[0] > 0.0                                   # forwards (head first)
            assert abs(travel[1]) < 0.15 * travel[0]                # a symmetric beat swims straight
    assert speeds[0] < speeds[1] < speeds[2], speeds


def test_mms_sim_writes_summary_and_plots(tmp_path):
    out = tmp_path / "run"
    summary = tmp_path / "summary.json"
    env = dict(os.environ, MPLBACKEND="Agg")
    result = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(CONFIG), "--tailbeat-frequency", "2",
                             "--tailbeat-amplitude", "20", "--duration", "2", "--out", str(out), "--summary",
                             str(summary), "--quiet"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr
    data = json.loads(summary.read_text())
    assert set(data) == SUMMARY_KEYS
    assert data["tailbeat_frequency_Hz"] == 2.0
    assert data["sim_time_s"] == pytest.approx(2.0, rel=1e-6)
    assert data["real_time_factor"] == pytest.approx(data["sim_time_s"] / data["wall_time_s"], rel=1e-9)
    for name in ("trajectory", "speed", "tail_angles", "forces"):
        assert (out / f"{name}.png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(CONFIG), "--tailbeat-amplitude", "80",
                          "--duration", "0.1", "--out", str(out), "--quiet"], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert bad.returncode == 2 and "servo_amplitude_deg" in bad.stderr and "Traceback" not in bad.stderr


def test_sweep_tabulates_every_pair(tmp_path):
    from sim import cli_sweep
    rows = cli_sweep.sweep(load_toml(CONFIG), CONFIG, [1.5, 2.5], [15.0, 25.0], duration=1.5, progress=False)
    assert [(r["amplitude"], r["tailbeat_frequency_Hz"]) for r in rows] == [
        (15.0, 1.5), (15.0, 2.5), (25.0, 1.5), (25.0, 2.5)]
    path = cli_sweep.write_csv(rows, tmp_path / "sweep.csv")
    with path.open() as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == 4 and set(table[0]) == set(cli_sweep.CSV_COLUMNS)
    # a larger servo amplitude gives a larger tail-tip amplitude at the same frequency
    assert rows[2]["tailbeat_amplitude_m"] > rows[0]["tailbeat_amplitude_m"]
    assert cli_sweep.plot(rows, tmp_path / "sweep.png").stat().st_size > 1000


def test_external_servo_input_drives_the_tail_through_the_mechanism():
    """``tail_drive.source = "external"``: the rig's servo angle sets the actuated fin-ray joint through the
    rack-and-pinion shear kinematics, q = (r_pinion / 2 d) theta, and moves the passive caudal fin's rest angle."""
    model = build_robot(_config(tail_drive__source="external", robot__base="fixed"), CONFIG)
    servo = raybot.servo_input(model)
    p = model.metadata["parameters"]
    ratio = p["drive_pinion_radius_m"] / (2.0 * p["drive_plate_gap_m"])
    sim = Simulation(model, dt=p["dt"])
    theta = math.radians(20.0)
    servo.set(theta, 0.0, 0.0)
    sim.advance(2.0)                                    # the caudal fin settles on its new rest angle
    q = sim.outputs()["q"]
    assert q[model.joint_index("tail_yaw")] == pytest.approx(ratio * theta, rel=1e-12)
    assert q[model.joint_index("caudal")] == pytest.approx(ratio * theta, rel=0.05)
    with pytest.raises(ValueError):
        raybot.servo_input(build_robot(_config(), CONFIG))


@pytest.mark.parametrize("velocity", [(0.05, 0.0, 0.0), (-0.03, 0.0, 0.02), (0.1, 0.0, 0.3), (0.2, 0.0, 0.05)])
def test_summary_speed_is_signed_along_the_heading(velocity):
    """A base moved at a prescribed constant velocity, heading 30 deg left of +x: the summary's forward speed is
    the velocity's signed component along the heading, its vertical speed the z component, and a backward or
    rising drift is warned about."""
    model = build_robot(_config(tail_drive__frequency_Hz=2.0), CONFIG)
    t = np.linspace(0.0, 3.0, 601)
    yaw = math.radians(30.0)
    ahead = np.array([math.cos(yaw), math.sin(yaw)])
    world = np.array([velocity[0] * ahead[0], velocity[0] * ahead[1], velocity[2]])
    pos = world * t[:, None]
    quat = np.tile([math.cos(yaw / 2), 0.0, 0.0, math.sin(yaw / 2)], (t.size, 1))
    zeros = np.zeros((t.size, model.n))
    arrays = {"base_pos": pos, "base_quat": quat, "base_twist": np.zeros((t.size, 6)), "q": zeros, "qd": zeros,
              "tau": zeros,
              "base_wrench": np.zeros((t.size, 6)), "ext_wrench": np.zeros((t.size, 6))}
    from sim.cli_sim import SimRun

    s = raybot.summarize(SimRun(t=t, arrays=arrays, model=model, config={}, options={}, wall_time_s=1.0))
    assert s["forward_speed_m_s"] == pytest.approx(velocity[0], abs=1e-12)
    assert s["vertical_speed_m_s"] == pytest.approx(velocity[2], abs=1e-12)
    assert s["base_drift_m"] == pytest.approx(np.linalg.norm(world) * 3.0, rel=1e-9)
    assert s["base_vertical_drift_m"] == pytest.approx(velocity[2] * 3.0, abs=1e-12)
    assert s["body_lengths_per_s"] == pytest.approx(velocity[0] / model.metadata["body_length_m"], rel=1e-9)
    backwards = velocity[0] < 0
    assert (s["strouhal"] is None) == backwards
    assert any("drifts backwards" in w for w in s["warnings"]) == backwards
    rise = velocity[2] * s["steady_window_s"]
    steep = math.degrees(math.atan2(abs(velocity[2]), abs(velocity[0]))) > raybot.MAX_CLIMB_DEG
    assert any("rises" in w for w in s["warnings"]) == (
        steep and rise > raybot.LEVEL_DRIFT_BODY_LENGTHS * model.metadata["body_length_m"])


#: docs/raybot.md "Commands": the default robot (buoyant, near the surface, Lighthill's tail) over 3 s swims
#: forwards while rising at 0.041 m/s (measured; the band allows for another platform's rounding)
DEFAULT_RISE_M_S, DEFAULT_RISE_BAND = 0.041, 0.1


def test_default_run_swims_forwards_while_rising():
    from sim.cli_sim import SimRun, simulate

    model = build_robot(load_toml(CONFIG), CONFIG)
    run = simulate(model, "rk4", model.metadata["parameters"]["dt"], 3.0, progress=False)
    s = raybot.summarize(SimRun(t=run.t, arrays=run.arrays, model=model, config={}, options={}, wall_time_s=1.0))
    assert s["steady_speed_m_s"] > 0.1 and s["strouhal"] is not None
    assert s["vertical_speed_m_s"] == pytest.approx(DEFAULT_RISE_M_S, rel=DEFAULT_RISE_BAND)
    assert s["warnings"] == []
