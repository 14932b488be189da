"""Closed-form checks on a compound pendulum (fixed and imposed base) and the Simulation API."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from sim import ExternalMotion, Simulation, load_robot
from sim.forces import ForceModel
from sim.model import CallableBaseMotion, ModelBuilder
from sim.spatial import pose, quat_to_matrix, spatial_inertia

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "robots"
MASS, LENGTH, I_CYY, G = 0.8, 0.35, 2.5e-3, 9.81   # kg, m (hinge to centre of mass), kg m^2, m/s^2
I_HINGE = I_CYY + MASS * LENGTH ** 2


def pendulum(base_mode="fixed", base_motion=None, gravity=(0.0, 0.0, -G)):
    b = ModelBuilder("support", spatial_inertia(3.0, [0, 0, 0.1], np.eye(3) * 0.01), base_mode=base_mode,
                     gravity=gravity, base_motion=base_motion)
    b.add_body("rod", "support", joint_name="hinge", axis=[0, 1, 0], placement=pose(p=[0.0, 0.0, 0.0]),
               inertia=spatial_inertia(MASS, [0, 0, -LENGTH], np.diag([I_CYY, I_CYY, 1e-5])))
    return b.build()


def measured_period(sim, duration):
    """Time between the first and the last downward zero crossing of the hinge angle, over their count."""
    crossings, previous = [], sim.q[0]
    while sim.t < duration:
        t0 = sim.t
        sim.step()
        current = sim.q[0]
        if previous > 0.0 >= current:
            crossings.append(t0 + sim.dt * previous / (previous - current))
        previous = current
    assert len(crossings) >= 2
    return (crossings[-1] - crossings[0]) / (len(crossings) - 1)


def test_small_amplitude_period_matches_closed_form():
    amplitude = 0.01  # rad; finite-amplitude correction (1 + amplitude^2 / 16) included
    sim = Simulation(pendulum(), dt=1e-3)
    sim.reset(q=[amplitude])
    expected = 2 * math.pi * math.sqrt(I_HINGE / (MASS * G * LENGTH)) * (1 + amplitude ** 2 / 16)
    assert measured_period(sim, 3.2 * expected) == pytest.approx(expected, rel=2e-6)


def test_period_on_an_upward_accelerating_support():
    """Imposed base accelerating upward at a: the pendulum feels g + a."""
    a = 4.0  # m/s^2

    def motion(t):
        return pose(p=[0.0, 0.0, 0.5 * a * t * t]), np.array([0, 0, a * t, 0, 0, 0.0]), np.array([0, 0, a, 0, 0, 0.0])

    sim = Simulation(pendulum("imposed", CallableBaseMotion(motion)), dt=1e-3)
    sim.reset(q=[0.01])
    expected = 2 * math.pi * math.sqrt(I_HINGE / (MASS * (G + a) * LENGTH)) * (1 + 0.01 ** 2 / 16)
    assert measured_period(sim, 3.2 * expected) == pytest.approx(expected, rel=2e-6)
    out = sim.outputs()
    assert out["base_pos"][2] == pytest.approx(0.5 * a * sim.t ** 2)
    assert out["base_twist"][2] == pytest.approx(a * sim.t)


def test_support_reaction_matches_newton_for_the_whole_pendulum():
    """Support force = m a_G - m g with the closed-form a_G; no moment (the hinge is free, the rod symmetric)."""
    model = pendulum()
    sim = Simulation(model, dt=1e-3)
    sim.reset(q=[1.1], qd=[-0.7])
    sim.advance(0.237)
    out = sim.outputs()
    theta, omega = out["q"][0], out["qd"][0]
    alpha = -MASS * G * LENGTH * math.sin(theta) / I_HINGE
    assert out["qdd"][0] == pytest.approx(alpha, rel=1e-12)
    a_com = np.array([-LENGTH * (math.cos(theta) * alpha - math.sin(theta) * omega ** 2), 0.0,
                      LENGTH * (math.sin(theta) * alpha + math.cos(theta) * omega ** 2)])
    support_mass = model.inertia[0, 0, 0]
    weight = (support_mass + MASS) * np.array([0.0, 0.0, -G])
    expected_force = MASS * a_com - weight
    expected_moment = -np.cross([0.0, 0.0, 0.1], support_mass * np.array([0.0, 0.0, -G]))
    assert np.allclose(out["base_wrench"][:3], expected_force, rtol=1e-12, atol=1e-12)
    assert np.allclose(out["base_wrench"][3:], expected_moment, rtol=1e-12, atol=1e-12)
    # Hanging at rest: the support carries the weight and nothing else.
    sim.reset()
    rest = sim.outputs()
    assert np.allclose(rest["base_wrench"][:3], -weight, atol=1e-12)


def test_outputs_of_the_example_config_follow_the_api():
    model = load_robot(CONFIGS / "pendulum.toml")
    assert model.joint_names == ["shoulder", "elbow"] and list(model.actuated) == [True, False]
    assert model.base_mode == "fixed" and "tip_marker" in model.frames
    sim = Simulation(model, dt=1e-4)
    sim.advance(0.05)
    out = sim.outputs()
    assert set(out) == {"q", "qd", "qdd", "tau", "strain", "base_pos", "base_quat", "base_twist",
                        "base_wrench", "ext_wrench"}
    for key, size in dict(q=2, qd=2, qdd=2, tau=2, strain=1, base_pos=3, base_quat=4, base_twist=6,
                          base_wrench=6, ext_wrench=6).items():
        assert out[key].shape == (size,), key
    law = model.motion_laws[0]
    assert out["q"][0] == pytest.approx(law.evaluate(sim.t)[0], abs=1e-12)
    assert out["qdd"][0] == pytest.approx(law.evaluate(sim.t)[2], abs=1e-12)
    assert out["strain"][0] == pytest.approx(out["q"][1] - model.q_rest[1])
    assert sim.t == pytest.approx(0.05) and sim.advance(0.0003) == 3
    # The support pushes up (it carries the weight); finite everywhere.
    assert np.all(np.isfinite(out["base_wrench"])) and out["base_wrench"][2] > 0.0


class PushOnChild(ForceModel):
    """Constant force (1, 0, 0) N in the frame of body 1."""

    def apply(self, model, data, t):
        data.f_ext[1, 0] += 1.0


def test_external_motion_and_ext_wrench_in_world_frame():
    b = ModelBuilder("base", spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 0.01), base_mode="fixed",
                     gravity=(0, 0, 0))
    b.add_body("arm", "base", joint_name="yaw", axis=[0, 0, 1], placement=pose(p=[1.0, 0.0, 0.0]),
               inertia=spatial_inertia(0.5, [0, 0, 0], np.eye(3) * 0.01), actuated=True,
               motion_law=ExternalMotion())
    b.add_force_model(PushOnChild())
    model = b.build()
    sim = Simulation(model, dt=1e-3)
    model.motion_laws[0].set(math.pi / 2, 0.0, 0.0)
    out = sim.outputs()
    assert out["q"][0] == pytest.approx(math.pi / 2)
    # Body 1 at (1, 0, 0), rotated 90 deg about z: its x force is +y in the world; moment about O_0 is +z.
    assert np.allclose(out["ext_wrench"], [0, 1, 0, 0, 0, 1], atol=1e-12)
    # The push is along the arm's line through the hinge: no torque on the motor; the support takes it all.
    assert out["tau"][0] == pytest.approx(0.0, abs=1e-12)
    assert np.allclose(out["base_wrench"][:3], [0, -1, 0], atol=1e-12)


def test_floating_base_quaternion_stays_unit_and_matches_rotation():
    model = pendulum("floating", gravity=(0.0, 0.0, 0.0))
    sim = Simulation(model, dt=1e-3)
    sim.reset(q=[0.3], base_twist=[0.0, 0.0, 0.0, 2.0, 1.0, -3.0])
    sim.advance(1.0)
    out = sim.outputs()
    assert abs(np.linalg.norm(out["base_quat"]) - 1.0) < 1e-12
    R = quat_to_matrix(out["base_quat"])
    assert np.allclose(R, sim.data.g[0, :3, :3], atol=1e-12)
    assert np.allclose(out["base_wrench"], 0.0)
