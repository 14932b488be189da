"""The TMT engine (sim/tmt/): closed forms, the sympy derivation, and the hybrid algorithm on random trees."""
from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy
from scipy.integrate import solve_ivp

from sim import hybrid_dynamics, load_urdf
from sim.laws import ViscoElastic
from sim.model import ModelBuilder
from sim.spatial import pose, quat_to_matrix, spatial_inertia
from sim.tmt import kinetic_energy, mass_matrix_and_bias, tmt_dynamics
from sim.tmt.symbolic import point_mass_equations
from sim.urdf import random_tree_urdf

ROOT = Path(__file__).resolve().parents[2]
# double pendulum of point masses, angles from the downward vertical (kg, m, m/s^2)
M1, M2, L1, L2, G = 0.7, 0.4, 0.5, 0.3, 9.81
#: the hybrid algorithm and the TMT engine share no code; both are exact up to rounding (measured 1e-14)
ENGINES_RTOL = 1e-9


def double_pendulum():
    builder = ModelBuilder("support", spatial_inertia(1.0, [0, 0, 0], np.eye(3)), base_mode="fixed",
                           gravity=(0.0, 0.0, -G))
    builder.add_body("upper", "support", joint_name="theta1", axis=[0, 1, 0], placement=pose(),
                     inertia=spatial_inertia(M1, [0, 0, -L1], np.zeros((3, 3))))
    builder.add_body("lower", "upper", joint_name="phi2", axis=[0, 1, 0], placement=pose(p=[0, 0, -L1]),
                     inertia=spatial_inertia(M2, [0, 0, -L2], np.zeros((3, 3))))
    return builder.build()


def closed_form_accelerations(theta, theta_d):
    """theta_dd of M theta_dd + h = 0 (absolute angles)."""
    C, S = math.cos(theta[0] - theta[1]), math.sin(theta[0] - theta[1])
    M = np.array([[(M1 + M2) * L1 ** 2, M2 * L1 * L2 * C], [M2 * L1 * L2 * C, M2 * L2 ** 2]])
    h = np.array([M2 * L1 * L2 * S * theta_d[1] ** 2 + (M1 + M2) * G * L1 * math.sin(theta[0]),
                  -M2 * L1 * L2 * S * theta_d[0] ** 2 + M2 * G * L2 * math.sin(theta[1])])
    return np.linalg.solve(M, -h)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_double_pendulum_numeric_and_symbolic_match_the_closed_form(seed):
    rng = np.random.default_rng(seed)
    theta, theta_d = rng.uniform(-2.0, 2.0, 2), rng.uniform(-3.0, 3.0, 2)
    expected = closed_form_accelerations(theta, theta_d)
    # numeric engine, relative joint angles phi2 = theta2 - theta1 (rotation about +y: the sign of every angle
    # flips against the closed form's, which the equations do not see)
    q = np.array([theta[0], theta[1] - theta[0]])
    qd = np.array([theta_d[0], theta_d[1] - theta_d[0]])
    result = tmt_dynamics(double_pendulum(), np.eye(4), np.zeros(6), q, qd, [False, False], np.zeros(2), np.zeros(2))
    absolute = np.array([result.qdd[0], result.qdd[0] + result.qdd[1]])
    np.testing.assert_allclose(absolute, expected, rtol=1e-12, atol=1e-12)
    # symbolic derivation (the paper's way) on absolute angles
    t1, t2 = sympy.symbols("theta1 theta2")
    positions = [(L1 * sympy.sin(t1), 0, -L1 * sympy.cos(t1)),
                 (L1 * sympy.sin(t1) + L2 * sympy.sin(t2), 0, -L1 * sympy.cos(t1) - L2 * sympy.cos(t2))]
    equations = point_mass_equations(positions, [M1, M2], [t1, t2], [0.0, 0.0, -G])
    M, d = equations(theta, theta_d)
    np.testing.assert_allclose(np.linalg.solve(M, d), expected, rtol=1e-12, atol=1e-12)


def _random_state(rng, model):
    n = model.n
    quaternion = rng.normal(size=4)
    base = np.eye(4)
    base[:3, :3] = quat_to_matrix(quaternion / np.linalg.norm(quaternion))
    base[:3, 3] = rng.normal(size=3)
    return base, rng.normal(size=6), rng.normal(size=n), rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)


def _relative(a, b):
    return float(np.abs(a - b).max() / max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("n_joints", [1, 4, 12, 40])
@pytest.mark.parametrize("base_mode", ["fixed", "floating"])
def test_tmt_equals_the_hybrid_algorithm_on_random_trees(tmp_path, n_joints, base_mode):
    rng = np.random.default_rng(n_joints)
    urdf = tmp_path / "tree.urdf"
    urdf.write_text(random_tree_urdf(rng, n_joints))
    model = load_urdf(urdf).replace(base_mode=base_mode)
    base, twist, q, qd, qdd, tau = _random_state(rng, model)
    for actuated in (np.zeros(model.n, bool), np.ones(model.n, bool), rng.random(model.n) < 0.5):
        hybrid = hybrid_dynamics(model, base, twist, q, qd, actuated, qdd, tau)
        tmt = tmt_dynamics(model, base, twist, q, qd, actuated, qdd, tau)
        assert _relative(hybrid.qdd, tmt.qdd) < ENGINES_RTOL
        assert _relative(hybrid.tau, tmt.tau) < ENGINES_RTOL
        assert _relative(hybrid.base_acc, tmt.base_acc) < ENGINES_RTOL
    M, _, _ = mass_matrix_and_bias(model, base, q, np.concatenate([twist if base_mode == "floating" else [], qd]),
                                   tau)
    assert np.allclose(M, M.T, rtol=0.0, atol=1e-12 * np.abs(M).max()) and np.linalg.eigvalsh(M).min() > 0.0


def test_joint_springs_and_dampers_as_generalised_forces():
    builder = ModelBuilder("base", spatial_inertia(2.0, [0, 0, 0], np.eye(3) * 0.02), base_mode="floating",
                           gravity=(0.0, 0.0, -G))
    parent = "base"
    for k, axis in enumerate(([0, 1, 0], [1, 0, 0], [0, 0, 1])):
        builder.add_body(f"link{k}", parent, joint_name=f"j{k}", axis=axis, placement=pose(p=[0.1, 0.02, -0.05]),
                         inertia=spatial_inertia(0.3, [0.05, 0, 0], np.eye(3) * 1e-3),
                         joint_law=ViscoElastic(1.5 + k, 0.02 * (k + 1), 0.1 * k))
        parent = f"link{k}"
    model = builder.build()
    base, twist, q, qd, qdd, tau = _random_state(np.random.default_rng(7), model)
    passive = np.zeros(model.n, bool)
    hybrid = hybrid_dynamics(model, base, twist, q, qd, passive, qdd, tau, use_laws=True)
    tmt = tmt_dynamics(model, base, twist, q, qd, passive, qdd, tau, use_laws=True)
    assert _relative(hybrid.qdd, tmt.qdd) < ENGINES_RTOL and _relative(hybrid.base_acc, tmt.base_acc) < ENGINES_RTOL
    assert _relative(hybrid.tau, tmt.tau) < ENGINES_RTOL          # applied + law torques, as both report them


def test_energy_of_a_conservative_tmt_run_is_constant():
    """The double pendulum integrated with the TMT engine alone (DOP853, rtol 1e-10): kinetic plus potential
    energy drifts less than 1e-8 of its value over 2 s."""
    model = double_pendulum()

    def energy(y):
        q, u = y[:2], y[2:]
        heights = [-L1 * math.cos(q[0]), -L1 * math.cos(q[0]) - L2 * math.cos(q[0] + q[1])]
        return kinetic_energy(model, np.eye(4), q, u) + G * (M1 * heights[0] + M2 * heights[1])

    def rate(_t, y):
        M, d, _ = mass_matrix_and_bias(model, np.eye(4), y[:2], y[2:], np.zeros(2), use_laws=False)
        return np.concatenate([y[2:], np.linalg.solve(M, d)])

    start = np.array([1.2, -0.7, 0.5, 2.0])
    run = solve_ivp(rate, (0.0, 2.0), start, method="DOP853", rtol=1e-10, atol=1e-12)
    assert run.success
    assert abs(energy(run.y[:, -1]) - energy(start)) < 1e-8 * abs(energy(start))


#: docs/tmt.md's table, largest relative difference of the joint accelerations with `mms check`'s default states
#: (deterministic: seed 0): flapper 6.4e-11, RayBot 7.8e-15, pendulum 3.5e-15; the bounds allow another platform's
#: rounding (a factor of about 1.5) and the docs state them
DOCUMENTED_AGREEMENT = {"flapper": 1e-10, "raybot": 1e-13, "pendulum": 1e-14}


def runs_offline(config: Path) -> bool:
    """A robot kind that runs its own engine (a TMT system with events, sim/cli_sim.py's simulate_offline), not a
    rigid tree that both engines can evaluate."""
    import importlib

    from sim.config import load_toml
    from sim.robots import KINDS

    return hasattr(importlib.import_module(KINDS[load_toml(config)["robot"]["kind"]]), "simulate_offline")


def has_modal_bodies(config: Path) -> bool:
    """A robot with flexible (modal) bodies (sim/flexible.py): `mms check` refuses it (rigid trees only)."""
    from sim.robots import load_robot

    return load_robot(config).flexible is not None


TREE_CONFIGS = [path for path in sorted((ROOT / "configs" / "robots").glob("*.toml"))
                if not runs_offline(path) and not has_modal_bodies(path)]


@pytest.mark.parametrize("config", TREE_CONFIGS, ids=lambda p: p.stem)
def test_mms_check_agrees_on_every_robot_config(config):
    done = subprocess.run([sys.executable, "-m", "hil.cli", "check", str(config)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "-> agree" in done.stdout
    worst = float(done.stdout.split("joint accelerations ")[1].split(",")[0])
    assert worst < DOCUMENTED_AGREEMENT.get(config.stem, ENGINES_RTOL), done.stdout


def test_mms_check_refuses_modal_bodies_in_one_line():
    done = subprocess.run([sys.executable, "-m", "hil.cli", "check", str(ROOT / "configs" / "robots" /
                                                                         "flapper_flexible.toml")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "wing.body" in done.stderr and "modal" in done.stderr


def test_mms_check_refuses_a_tmt_system_in_one_line():
    """`mms check` on a robot that is not a rigid tree (the biped: constraints and impacts) names what failed."""
    from sim.cli_check import run
    from sim.cli_check_args import add_arguments
    from sim.config import ConfigError

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError, match=r"biped\.toml: robot\.kind: 'biped' is a constrained TMT system .* not a "
                                          r"rigid tree: run it with `mms sim`"):
        run(parser.parse_args([str(ROOT / "configs" / "robots" / "biped.toml")]))
