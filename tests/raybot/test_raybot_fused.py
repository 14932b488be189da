"""RayBot on the fused RK4 path (sim/fused.py): it qualifies, and it gives the Python path's numbers.

RayBot's tail laws have kernel forms: the servo beat (``ServoBeat``) is a :class:`sim.laws.RampedSinusoid`, the
fin-ray chord a :class:`sim.laws.ScaledMotion` of it, the caudal spring (``CaudalSpring``) a
:class:`sim.fused.TrackingSpring` about it, and the four hydrodynamic plug-ins have kernels. Both paths then
run the same formulas in the same order, so they agree to rounding (sim.testing.FUSED_RTOL) step for step; the
runs cross the end of the soft-start ramp (the kernel's two branches) and, with an external servo input, inputs changed
between calls.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import load_toml
from sim.fused import TrackingSpring, _kernel_joint_law, _kernel_motion_law, fused_unsupported
from sim.laws import ExternalMotion, RampedSinusoid
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.testing import assert_paths_agree

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "robots" / "raybot.toml"
#: Steps of each comparison run at the config's dt (4 ms): 1.6 s, past the 1.33 s ramp of 2 beats at 1.5 Hz.
STEPS = 400
#: Servo input of the externally driven variant: amplitude rad, angular frequency rad/s.
EXTERNAL_AMPLITUDE, EXTERNAL_OMEGA = 0.4, 2.0 * math.pi * 1.5

VARIANTS = {
    "free swim": {},
    "tethered": {"robot__base": "fixed"},
    "external servo": {"tail_drive__source": "external"},
    "passive rim and fins": {"segments__drive": "passive", "pelvic_fins__drive": "passive"},
}


def _model(changes: dict):
    table = copy.deepcopy(load_toml(CONFIG))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        table[section][key] = value
    return build_robot(table, CONFIG)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_raybot_qualifies_for_the_fused_path(variant):
    """No piece of RayBot sends it back to the Python path (a regression would show the reason here)."""
    model = _model(VARIANTS[variant])
    assert fused_unsupported(model, "rk4") is None
    assert Simulation(model, "rk4", model.metadata["parameters"]["dt"]).path == "fused"
    # The tail's laws go through their kernel forms (not some other route to qualifying).
    ratio = model.metadata["tail_joint_ratio"]
    form, scale = _kernel_motion_law(model.motion_laws[model.joint_index("tail_yaw")])
    assert scale == ratio
    servo = model.metadata["servo_law"]
    if isinstance(servo, ExternalMotion):
        assert form is servo                       # held row: read from the live input at every call
    else:
        assert type(form) is RampedSinusoid
        assert (form.amplitude, form.omega, form.phase, form.ramp_time) == \
            (servo.amplitude, servo.omega, servo.phase, servo.ramp_time)
    spring = _kernel_joint_law(dict(model.python_laws)[model.joint_index("caudal")])
    assert type(spring) is TrackingSpring and spring.source is servo and spring.ratio == ratio
    # rk45 is not fused: the check above is not vacuous.
    assert "rk4" in fused_unsupported(model, "rk45")


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_raybot_fused_path_matches_python_path(variant):
    """STEPS steps on both paths: single steps with outputs in between, then several steps per call."""
    model = _model(VARIANTS[variant])
    dt = model.metadata["parameters"]["dt"]
    fused, python = Simulation(model, "rk4", dt), Simulation(model, "rk4", dt, fused=False)
    servo = model.metadata["servo_law"]

    def drive():
        if isinstance(servo, ExternalMotion):      # the rig's input, set between calls
            t, w = fused.t, EXTERNAL_OMEGA
            servo.set(EXTERNAL_AMPLITUDE * math.sin(w * t), EXTERNAL_AMPLITUDE * w * math.cos(w * t),
                      -EXTERNAL_AMPLITUDE * w * w * math.sin(w * t))

    for _ in range(20):
        drive()
        fused.step()
        python.step()
        assert_paths_agree(fused, python, f"{variant} step")
    chunk = 20
    for _ in range((STEPS - 20) // chunk):
        drive()
        fused.advance(chunk * dt)
        python.advance(chunk * dt)
        assert_paths_agree(fused, python, f"{variant} advance t = {python.t:.3f}")
    assert python.t > (servo.ramp_time if isinstance(servo, RampedSinusoid) else 0.0)
    # The tail beat and the caudal fin really moved (the comparison is not of two resting robots).
    out = python.outputs()
    assert abs(out["q"][model.joint_index("tail_yaw")]) + abs(out["qd"][model.joint_index("tail_yaw")]) > 1e-2
    assert np.abs(out["strain"]).max() > 1e-3
    assert np.abs(out["ext_wrench"][:3]).max() > 1e-2
