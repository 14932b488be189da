"""The TMT robots (sim/robots/biped.py, flapper2link.py, clemens.py) through `mms sim CONFIG --summary`, against
closed forms and independent facts (docs/tmt.md, "Robots")."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.config import load_toml

ROOT = Path(__file__).resolve().parents[2]
ROBOTS = ROOT / "configs" / "robots"


def toml_text(config: dict) -> str:
    """A robot table as TOML (tables of scalars and lists of numbers: what these configs hold)."""
    lines = []
    for name, body in config.items():
        lines.append(f"[{name}]")
        for key, value in body.items():
            lines.append(f"{key} = {json.dumps(value)}")
    return "\n".join(lines) + "\n"


def mms_sim(config: Path, tmp_path: Path, *options: str) -> dict:
    """`mms sim CONFIG --summary` in a subprocess; the summary (the run must succeed)."""
    summary = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(config), "--summary", str(summary), "--out",
                           str(tmp_path / "run"), "--quiet", *options], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(summary.read_text())


def variant(tmp_path: Path, name: str, **tables) -> Path:
    """A copy of configs/robots/<name>.toml with some tables' keys changed."""
    config = load_toml(ROBOTS / f"{name}.toml")
    for table, values in tables.items():
        config.setdefault(table, {}).update(values)
    path = tmp_path / f"{name}.toml"
    path.write_text(toml_text(config))
    return path


# ------------------------------------------------------------------------------------------- biped
#: docs/tmt.md: the simplest walker's limit (Garcia et al. 1998) of the biped without upper body, m_f/m_b = 1e-3,
#: no hip spring, slope 0.009: post-strike (q1, u1, u2), step time, stride eigenvalues (to 1e-4)
WALKER_FIXED_POINT, WALKER_STEP = (0.200161, -0.199906, 0.015805), 3.88194
WALKER_EIGENVALUE = complex(-0.197, 0.545)
#: docs/tmt.md: largest change of the biped's total energy within a step (m g l units) at rtol 1e-10, measured
#: 1.3e-9 over the default 10 steps (energy ~1e3 m g l, so ~1e-12 relative)
BIPED_ENERGY_DRIFT = 1e-8
#: On the gait, gravity's work over a step = the energy lost at its strike, up to the fixed point's residual (1e-8
#: in rad and rad per time unit, on a kinetic energy of ~20 m g l) and the flow's energy error: measured ~1e-8
#: relative (docs/tmt.md)
GAIT_ENERGY_BALANCE = 1e-6


def test_biped_walks_two_steps_conserving_energy_between_strikes(tmp_path):
    """The shipped biped (upper body, hip spring) over 8 time units: two heel strikes, each a plastic sticking impact
    with a positive normal impulse and an energy loss, the trailing foot lifting off (no flag); the stance foot
    pushes (normal force > 0) within the friction ratio; its constraint holds to 1e-12 and the total energy is
    constant between strikes (the integrator's error only). The three plots are written."""
    summary = mms_sim(ROBOTS / "biped.toml", tmp_path, "--duration", "8")
    assert summary["steps_completed"] == 2 and summary["outcome"] == "time"
    assert {path.name for path in (tmp_path / "run").glob("*.png")} == {"phase_portrait.png", "gait.png",
                                                                       "contact.png"}
    assert summary["warnings"] == []
    assert all(p > 0 for p in summary["normal_impulses"]) and summary["energy_lost_per_step"] > 0.0
    assert summary["min_normal_force"] > 0.0 and 0.0 < summary["max_friction_ratio"] < 1.0
    assert summary["max_constraint_residual"] < 1e-12
    assert summary["max_energy_drift"] < BIPED_ENERGY_DRIFT
    assert summary["step_period"] == pytest.approx(3.89, abs=0.05)           # near the simplest walker's 3.882
    assert summary["speed"] == pytest.approx(summary["step_length"] / summary["step_period"], rel=1e-12)


def test_biped_from_the_papers_printed_swing_rate_stumbles():
    """The paper's printed initial swing rate u2 = 0.3 (our reading of its coordinates): one strike, then the swing
    foot meets the slope ahead at mid-stance (docs/tmt.md: why the shipped config starts at u2 = 0.0158)."""
    from sim.robots import biped

    config = load_toml(ROBOTS / "biped.toml")
    params, _ = biped.read_config(config, None)
    model = biped.build_tree(params)
    y, t, outcomes = np.array([0, 0, 0.2, -0.4, -0.1, 0, 0, -0.2, 0.3, 0.1]), 0.0, []
    while not outcomes or outcomes[-1] == "strike":
        record = biped.step(model, params, t, y, 50.0, 10.0)
        outcomes.append(record.outcome)
        t, y = float(record.t[-1]), record.after
    assert outcomes == ["strike", "stumble"]


def test_biped_without_upper_body_finds_the_simplest_walkers_gait(tmp_path):
    """The biped without upper body, without hip spring (m_f / m_b = 1e-3): `mms sim --summary` finds the gait by
    Newton shooting on the stride map: the fixed point, step time and stride eigenvalues of the compass-gait
    limit (Garcia et al. 1998; 1e-4). On the gait, gravity's work
    over a step equals the energy lost at the strike."""
    config = variant(tmp_path, "biped", body={"upper_body_mass": 0.0, "hip_stiffness": 0.0},
                     initial={"q": [0.20016, -0.40032], "u": [-0.19991, 0.01581]},
                     walk={"strikes": 1, "find_gait": True, "sample_dt": 1.0})
    summary = mms_sim(config, tmp_path, "--no-plots")
    assert summary["gait_found"], summary
    np.testing.assert_allclose(summary["gait_fixed_point"], WALKER_FIXED_POINT, atol=1e-4)
    assert summary["gait_step_time"] == pytest.approx(WALKER_STEP, abs=1e-4)
    moduli = sorted(summary["stride_eigenvalue_moduli"], reverse=True)[:2]
    np.testing.assert_allclose(moduli, abs(WALKER_EIGENVALUE), atol=1e-3)
    lost, work = summary["gait_energy_lost_per_step"], summary["gait_gravity_work_per_step"]
    print(f"gait {summary['gait_fixed_point']}, step {summary['gait_step_time']:.6f}, moduli {moduli}; energy lost "
          f"{lost:.12f}, gravity work {work:.12f}, residual {summary['gait_residual']:.2e}")
    assert work == pytest.approx(lost, rel=GAIT_ENERGY_BALANCE)


# ------------------------------------------------------------------------------------------- flapper2link
def test_flapper2link_flaps_symmetrically_on_its_drive(tmp_path):
    """A short run (1.5 time units) of the shipped two-link flyer: the drive's constraint holds (|phi - phi(t)| < 1e-8), the two wings
    mirror each other (no lateral motion or force, equal flap torques), and the summary's means are the
    trapezoidal means of the recorded velocities."""
    summary = mms_sim(ROBOTS / "flapper2link.toml", tmp_path, "--duration", "1.5")
    data = np.load(tmp_path / "run" / "timeseries.npz")
    assert summary["max_constraint_residual"] < 1e-8
    assert np.abs(data["q"][:, 1]).max() < 1e-12 and abs(summary["mean_aero_force"][1]) < 1e-12
    np.testing.assert_allclose(data["flap_torque"][:, 0], data["flap_torque"][:, 1], rtol=1e-9, atol=1e-12)
    assert summary["peak_flap_torque"] == pytest.approx(np.abs(data["flap_torque"]).max(), rel=1e-12)
    assert summary["mean_forward_velocity"] == pytest.approx(np.trapezoid(data["u"][:, 0], data["t"]) / 1.5,
                                                                 rel=1e-9)
    assert summary["warnings"]                      # shorter than a period: said


def test_flapper2link_without_air_keeps_its_centre_of_mass_ballistic(tmp_path):
    """With rho = 0 the drive's torques are internal: the centre of mass (body and the two wings' mid-span masses)
    moves as a thrown point, x = -0.01 t, z = 0.01 t - t^2/2 from its start (1e-8)."""
    config = variant(tmp_path, "flapper2link", aero={"rho": 0.0})
    mms_sim(config, tmp_path, "--duration", "1.5", "--no-plots")
    data = np.load(tmp_path / "run" / "timeseries.npz")
    t, q = data["t"], data["q"]
    body, wing, half = 1.0, 0.1, 10.0
    com_x = q[:, 0]
    com_z = (body * q[:, 2] + wing * (2 * q[:, 2] + half * (np.sin(q[:, 3]) + np.sin(q[:, 4])))) / (body + 2 * wing)
    np.testing.assert_allclose(com_x, -0.01 * t, atol=1e-8)
    np.testing.assert_allclose(com_z - com_z[0], 0.01 * t - t ** 2 / 2, atol=1e-8)


# ------------------------------------------------------------------------------------------- clemens
def clemens_run(tmp_path: Path, mode: str, duration: str, **tables) -> tuple[dict, dict]:
    """`mms sim` of the Clemens joint in a run mode: (summary, recorded arrays)."""
    config = variant(tmp_path, "clemens", run={"mode": mode}, **tables)
    summary = mms_sim(config, tmp_path, "--duration", duration, "--no-plots")
    return summary, dict(np.load(tmp_path / "run" / "timeseries.npz"))


def test_clemens_tracking_keeps_the_mirror_symmetry(tmp_path):
    """Run 1 (the platform's centre on a 3-D path): the spherical joints' centres lie on the plane bisecting the base
    centre and the platform's centre p, and the platform is the base mirrored in it: R_P = (1 - 2 n n^T)
    diag(1, 1, -1), n = p / |p| (1e-8); the centre follows its path and the loops close (1e-8)."""
    from sim.robots import clemens
    from sim.tmt.engine import tree_kinematics

    summary, data = clemens_run(tmp_path, "track", "1")
    assert summary["max_constraint_residual"] < 1e-8 and summary["max_centre_error"] < 1e-8
    assert summary["min_singular_value"] > 0.1
    model = clemens.build_tree(clemens.parameters({}))
    for q, p, R in zip(data["q"], data["platform_centre"], data["platform_rotation"]):
        kin = tree_kinematics(model, model.base_pose, q, np.zeros(q.size))
        spheres = [kin.origin[3]] + [kin.origin[lower] + kin.R[lower] @ np.array([1.0, 0, 0])
                                     for _, lower in clemens.CUT_LEGS]
        for sphere in spheres:
            assert abs(2 * sphere @ p - p @ p) < 1e-8
        n = p / np.linalg.norm(p)
        np.testing.assert_allclose(R, (np.eye(3) - 2 * np.outer(n, n)) @ np.diag([1.0, 1.0, -1.0]), atol=1e-8)


def test_clemens_is_a_constant_velocity_joint(tmp_path):
    """The input shaft turning at Omega with the centre held at (sin b, 0, cos b), b = 10 deg: the platform turns
    about its own z axis at Omega (output/input speed ratio 1, no off-axis rate, output angle = input angle, 1e-8),
    the output axis is (sin 2b, 0, cos 2b)."""
    summary, _ = clemens_run(tmp_path, "constant_velocity", "1")
    beta = math.radians(10.0)
    assert summary["max_speed_ratio_deviation"] < 1e-8 and summary["max_off_axis_rate"] < 1e-8
    assert summary["max_angle_deviation"] < 1e-8
    np.testing.assert_allclose(summary["output_axis"], [math.sin(2 * beta), 0.0, math.cos(2 * beta)], atol=1e-8)


def test_clemens_released_falls_freely_with_massless_legs(tmp_path):
    """Run 2 (released from home under gravity, legs of mass 1e-6): the platform falls freely, z = 1 - t^2/2,
    x = y = 0, R_P = 1 (1e-5); the energy is kept (1e-8 relative) and Baumgarte holds the loops (1e-8)."""
    summary, data = clemens_run(tmp_path, "release", "1")
    t = data["t"]
    np.testing.assert_allclose(data["platform_centre"], np.column_stack([0 * t, 0 * t, 1 - t ** 2 / 2]), atol=1e-5)
    np.testing.assert_allclose(data["platform_rotation"], np.broadcast_to(np.eye(3), (t.size, 3, 3)), atol=1e-5)
    assert summary["energy_drift"] < 1e-8 and summary["max_constraint_residual"] < 1e-8


def test_clemens_projection_and_unstabilised_drift():
    """The release run's loop residual: projected after every sample below 1e-12; unstabilised (omega_b = 0) and with
    Baumgarte (omega_b = 10) below 1e-8 at rtol 1e-10 (measured: all three ~4e-14 over 0.5, the falling platform
    loads its massless legs with ~1e-6 forces only)."""
    import argparse

    from sim.robots import clemens

    def residual(**run) -> float:
        config = load_toml(ROBOTS / "clemens.toml")
        config["run"].update(mode="release", **run)
        args = argparse.Namespace(duration=0.5, base=None, integrator=None, periods=None, dt=None, record_every=None)
        return clemens.summarize(clemens.simulate_offline(config, ROBOTS / "clemens.toml", args, False)
                                 )["max_constraint_residual"]

    projected, free, stabilised = residual(project=True), residual(baumgarte=0.0), residual()
    print(f"max |c| over 0.5: projected {projected:.2e}, unstabilised {free:.2e}, Baumgarte {stabilised:.2e}")
    assert projected < 1e-12
    assert free < 1e-8 and stabilised < 1e-8


@pytest.mark.parametrize("robot, table, key, value, says", [
    ("biped", "body", "hip_mas", 1.0, "body"),
    ("biped", "initial", "q", [0.2, -0.4], "initial.q: got 2 values, expected 3"),
    ("flapper2link", "wing", "span", -1.0, "wing.span"),
    ("clemens", "run", "mode", "fly", "run.mode"),
    ("clemens", "geometry", "link_length", 0.1, "no configuration closes"),       # legs too short to close
])
def test_a_bad_tmt_robot_config_names_its_key_in_one_line(tmp_path, capsys, robot, table, key, value, says):
    from hil.cli import main as mms_main

    config = variant(tmp_path, robot, **{table: {key: value}})
    assert mms_main(["sim", str(config), "--out", str(tmp_path / "run"), "--quiet", "--no-plots"]) != 0
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and says in message and str(config) in message, message
