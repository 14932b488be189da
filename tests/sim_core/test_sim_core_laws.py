"""Motion and joint laws: derivatives by finite differences, config parsing, and the kernel's viscoelastic
path against the Python-callable path."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim import hybrid_dynamics
from sim.config import ConfigError
from sim.laws import (CallableMotion, CallableTorque, Constant, ExternalMotion, Polynomial, Sinusoid, Spline,
                      ViscoElastic, joint_law_from_config, motion_law_from_config)
from sim.model import ModelBuilder
from sim.spatial import pose, spatial_inertia

#: Central-difference step (s) and the agreement expected from it on smooth laws.
H = 1e-5
FD_TOL = 1e-6


@pytest.mark.parametrize("law", [
    Sinusoid(0.7, 9.0, phase=0.3, offset=-0.1),
    Polynomial([0.1, -0.5, 2.0, 0.3]),
    Spline([0.0, 0.1, 0.25, 0.4, 0.6], [0.0, 0.3, -0.2, 0.5, 0.1]),
    CallableMotion(lambda t: (math.exp(t), math.exp(t), math.exp(t))),
])
def test_motion_law_derivatives_match_finite_differences(law):
    for t in (0.05, 0.17, 0.33):
        r, r_d, r_dd = law.evaluate(t)
        r_plus, rd_plus, _ = law.evaluate(t + H)
        r_minus, rd_minus, _ = law.evaluate(t - H)
        assert r_d == pytest.approx((r_plus - r_minus) / (2 * H), rel=FD_TOL, abs=FD_TOL)
        assert r_dd == pytest.approx((rd_plus - rd_minus) / (2 * H), rel=FD_TOL, abs=FD_TOL)


def test_flapper_stroke_convention_and_external_motion():
    A, w = 1.1, 2 * math.pi * 26.0
    law = Sinusoid(A, w, phase=-math.pi / 2)
    for t in (0.0, 0.004, 0.013):
        assert law.evaluate(t)[0] == pytest.approx(-A * math.cos(w * t), abs=1e-12)
    ext = ExternalMotion()
    ext.set(0.2, 1.0, -3.0)
    assert ext.evaluate(123.0) == (0.2, 1.0, -3.0)
    assert Constant(0.4).evaluate(5.0) == (0.4, 0.0, 0.0)


def test_laws_from_config_and_their_errors():
    law = motion_law_from_config({"type": "sinusoid", "amplitude": 1, "omega": 2.0}, "x.toml", "joints.a.law")
    assert isinstance(law, Sinusoid) and law.amplitude == 1.0 and law.phase == 0.0
    spline = motion_law_from_config({"type": "spline", "times": [0, 1, 2], "values": [0, 1, 0]}, "x.toml")
    assert spline.evaluate(1.0)[0] == pytest.approx(1.0)
    elastic = joint_law_from_config({"type": "viscoelastic", "k": 3, "mu": 0.1}, "x.toml")
    assert isinstance(elastic, ViscoElastic) and elastic.torque(0, 0.5, 2.0) == pytest.approx(-1.7)
    for table, key in [({"type": "sinusoid", "omega": 1}, "joints.a.law.amplitude"),
                       ({"type": "wobble"}, "joints.a.law.type"),
                       ({"type": "spline", "times": [0, 0], "values": [1, 2]}, "joints.a.law"),
                       ({"type": "constant", "value": 1, "speed": 2}, "joints.a.law.speed")]:
        with pytest.raises(ConfigError) as exc_info:
            motion_law_from_config(table, "x.toml", "joints.a.law")
        assert str(exc_info.value).startswith(f"x.toml: {key}") and "\n" not in str(exc_info.value)


def test_kernel_viscoelastic_path_equals_python_callable_path():
    def chain(law_factory):
        b = ModelBuilder("base", spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 0.01))
        parent = "base"
        for i in range(4):
            b.add_body(f"l{i}", parent, joint_name=f"j{i}", axis=[0, 1, i * 0.3], placement=pose(p=[0.1, 0, 0]),
                       inertia=spatial_inertia(0.2, [0.05, 0, 0], np.eye(3) * 1e-3), joint_law=law_factory(i))
            parent = f"l{i}"
        return b.build()

    k, mu, r0 = [1.0, 2.0, 3.0, 4.0], [0.1, 0.0, 0.2, 0.05], [0.0, 0.3, -0.2, 0.1]
    kernel = chain(lambda i: ViscoElastic(k[i], mu[i], r0[i]))
    python = chain(lambda i: CallableTorque(lambda t, r, rd, i=i: -k[i] * (r - r0[i]) - mu[i] * rd))
    assert len(kernel.python_laws) == 0 and len(python.python_laws) == 4
    rng = np.random.default_rng(1)
    q, qd = rng.normal(size=4), rng.normal(size=4)
    g0, twist = np.eye(4), rng.normal(size=6)
    a = hybrid_dynamics(kernel, g0, twist, q, qd, np.zeros(4, bool), np.zeros(4), np.zeros(4), use_laws=True)
    b = hybrid_dynamics(python, g0, twist, q, qd, np.zeros(4, bool), np.zeros(4), np.zeros(4), use_laws=True)
    expected_tau = -np.array(k) * (q - r0) - np.array(mu) * qd
    assert np.allclose(a.tau, expected_tau, atol=1e-14) and np.allclose(b.tau, expected_tau, atol=1e-14)
    assert np.allclose(a.qdd, b.qdd, atol=1e-12) and np.allclose(a.base_acc, b.base_acc, atol=1e-12)
    # Without the laws, the same call with the torques passed explicitly gives the same answer.
    c = hybrid_dynamics(kernel, g0, twist, q, qd, np.zeros(4, bool), np.zeros(4), expected_tau)
    assert np.allclose(c.qdd, a.qdd, atol=1e-12)
