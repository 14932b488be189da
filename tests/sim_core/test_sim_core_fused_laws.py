"""Kernel forms of RampedSinusoid and ScaledMotion (sim/fused.py) against their Python ``evaluate``.

The fused kernel evaluates a RampedSinusoid with the operations of ``RampedSinusoid.evaluate`` in the same
order and a ScaledMotion as ``ratio * (its source's kernel form)``, as ``ScaledMotion.evaluate`` does, so the
law values must be equal bit for bit (one level of scaling; nested ScaledMotions multiply their ratios first
and agree to rounding only). Which models these laws let onto the fused path, and that the fused path then
matches the Python path on a tree with a scaled external input changed between calls, is checked here too;
RayBot itself (ServoBeat, ScaledMotion, CaudalSpring) is in tests/raybot/test_raybot_fused.py.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import load_urdf
from sim.fused import TrackingSpring, bound_kernels
from sim.laws import (Constant, ExternalMotion, Free, Polynomial, RampedSinusoid, ScaledMotion, Sinusoid, Spline,
                      ViscoElastic)
from sim.simulation import Simulation
from sim.urdf import random_tree_urdf
from sim.testing import assert_paths_agree

#: Central-difference step (s) and the agreement expected from it on smooth laws (as test_sim_core_laws.py).
H = 1e-5
FD_TOL = 1e-6
#: Time (s) before a ramp's end at which its left limit is probed.
RAMP_END_GAP = 1e-9

RAMP = RampedSinusoid(0.6, 2.0 * math.pi * 1.5, phase=0.4, ramp_time=0.5)


def test_ramped_sinusoid_derivatives_and_ramp():
    """r_d, r_dd are the derivatives of r (finite differences, inside and after the ramp); the ramp starts at
    rest and ends with zero slope (no velocity jump at ramp_time); after it the law is the plain sinusoid."""
    for t in (0.05, 0.21, 0.37, 0.8):
        r, r_d, r_dd = RAMP.evaluate(t)
        r_plus, rd_plus, _ = RAMP.evaluate(t + H)
        r_minus, rd_minus, _ = RAMP.evaluate(t - H)
        assert r_d == pytest.approx((r_plus - r_minus) / (2 * H), rel=FD_TOL, abs=FD_TOL)
        assert r_dd == pytest.approx((rd_plus - rd_minus) / (2 * H), rel=FD_TOL, abs=FD_TOL)
    assert RAMP.evaluate(0.0)[:2] == (0.0, 0.0)      # at rest (the acceleration may jump, not the velocity)
    # One-sided limits at the ramp's end: r and r_d continuous (a jump would be O(amplitude omega), not
    # O(RAMP_END_GAP * r_dd), which stays under FD_TOL for these rates).
    before, after = RAMP.evaluate(RAMP.ramp_time - RAMP_END_GAP), RAMP.evaluate(RAMP.ramp_time)
    assert before[0] == pytest.approx(after[0], abs=FD_TOL)
    assert before[1] == pytest.approx(after[1], abs=FD_TOL)
    plain = Sinusoid(RAMP.amplitude, RAMP.omega, RAMP.phase)
    for t in (0.5, 0.9, 3.3):
        assert RAMP.evaluate(t) == pytest.approx(plain.evaluate(t), rel=1e-15, abs=1e-15)


def _all_actuated_tree(tmp_path, laws, seed=1, base_mode="floating"):
    """A random tree whose joints are all actuated by ``laws`` (list of MotionLaw, one per joint)."""
    path = tmp_path / f"tree_{seed}.urdf"
    path.write_text(random_tree_urdf(np.random.default_rng(seed), len(laws), fixed_fraction=0.0))
    model = load_urdf(path, base_mode=base_mode)
    assert model.n == len(laws)
    return model.replace(actuated=np.ones(model.n, dtype=bool), motion_laws=dict(enumerate(laws)))


def test_kernel_law_values_equal_python_values_bitwise(tmp_path):
    """The fused path's law table (FusedStepper.laws) evaluated by the stepper's kernel gives exactly the numbers
    of each law's ``evaluate`` at times inside the ramp, at its end and after it."""
    external = ExternalMotion(0.3, -1.1, 4.0)
    laws = [RAMP, RampedSinusoid(0.2, 7.0, phase=-1.0, ramp_time=0.0),
            ScaledMotion(RAMP, 0.375), ScaledMotion(Sinusoid(0.4, 5.0, 0.2, 0.1), -1.3),
            ScaledMotion(Polynomial([0.1, -0.5, 2.0, 0.3]), 0.7), ScaledMotion(Constant(0.25), 3.0),
            ScaledMotion(external, 0.75)]
    sim = Simulation(_all_actuated_tree(tmp_path, laws), "rk4", 1e-3)
    assert sim.path == "fused", sim.fused_unsupported
    stepper = sim._fused
    assert list(stepper.laws.scale) == [1.0, 1.0, 0.375, -1.3, 0.7, 3.0, 0.75]
    assert list(stepper.laws.act_index) == list(range(len(laws)))
    motion_row = bound_kernels()["_motion_row"]
    for value in (0.3, -0.8):
        external.set(value, 2.0 * value, -value)    # live rows read the source law's parameters at every call
        stepper._read_live()
        for t in (0.0, 0.013, 0.25, RAMP.ramp_time - 1e-3, RAMP.ramp_time, 0.5005, 1.7):
            for k, law in enumerate(laws):
                assert motion_row(t, stepper.laws, k) == law.evaluate(t), (k, law, t)


def test_scaled_motion_qualifies_only_with_a_qualifying_source(tmp_path):
    """ScaledMotion is a kernel form when its source is (nested too); a Spline source keeps the Python path,
    and so does a TrackingSpring about such a source."""
    qualify = _all_actuated_tree(tmp_path, [ScaledMotion(ScaledMotion(RAMP, 2.0), 0.5), Constant(0.1)])
    assert Simulation(qualify, "rk4", 1e-3).path == "fused"
    spline = Spline([0.0, 1.0, 2.0], [0.0, 0.3, 0.1])
    blocked = qualify.replace(motion_laws={0: ScaledMotion(spline, 2.0), 1: Constant(0.1)})
    sim = Simulation(blocked, "rk4", 1e-3)
    assert sim.path == "python" and "ScaledMotion" in sim.fused_unsupported
    spring = qualify.replace(actuated=np.array([True, False]), motion_laws={0: RAMP},
                             joint_laws={1: TrackingSpring(ScaledMotion(spline, 2.0), 1.0, 1.0, 0.1)})
    sim = Simulation(spring, "rk4", 1e-3)
    assert sim.path == "python" and "TrackingSpring" in sim.fused_unsupported


def test_scaled_external_input_and_spring_about_it_fused_matches_python(tmp_path):
    """A linkage driven from outside: an actuated joint at ``ratio * input`` (ScaledMotion of an
    ExternalMotion) and a passive joint on a TrackingSpring about the same scaled input, the input changed
    between calls (as the rig emulator does): the fused path reads it at every call, like the Python path."""
    rng = np.random.default_rng(5)
    path = tmp_path / "linkage.urdf"
    path.write_text(random_tree_urdf(rng, 5, fixed_fraction=0.0))
    model = load_urdf(path, base_mode="floating")
    external = ExternalMotion()
    actuated = np.array([True, False, True, False, False])
    model = model.replace(
        actuated=actuated, gravity=np.array([0.0, 0.0, -9.81]),
        motion_laws={0: ScaledMotion(external, 0.4), 2: ScaledMotion(RAMP, -0.8)},
        joint_laws={1: TrackingSpring(ScaledMotion(external, 0.4), 1.5, 3.0, 0.05),
                    3: ViscoElastic(k=2.0, mu=0.02), 4: Free()})
    fused, python = Simulation(model, "rk4", 1e-3), Simulation(model, "rk4", 1e-3, fused=False)
    for i in range(40):
        t = fused.t
        external.set(0.5 * math.sin(9.0 * t), 4.5 * math.cos(9.0 * t), -40.5 * math.sin(9.0 * t))
        fused.advance(0.005)
        python.advance(0.005)
        assert_paths_agree(fused, python, f"round {i}")
    # The input drove the linkage: the spring joint left its rest, the actuated joint follows the input.
    assert abs(python.y[13]) > 1e-3
    assert python.outputs()["q"][0] == 0.4 * external.r
