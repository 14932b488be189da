"""The fused numba stepping path (sim/fused.py) against the Python-orchestrated path of Simulation.

Both paths run the same kernels in the same order, so they must agree to rounding (sim.testing.FUSED_RTOL, relative to
each signal's magnitude) step for step: on the Table I flapper (aero kernel in the loop) and on random URDF
trees with mixed joints (revolute / prismatic; Sinusoid, Polynomial, Constant, ExternalMotion actuators;
ViscoElastic / Free passive joints; floating, fixed and static imposed bases; applied torques). The Python
path itself is checked against Pinocchio and conservation laws in the other sim_core tests, and the fused
path runs those conservation tests too (their models qualify).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim import load_urdf
from sim.fused import TrackingSpring
from sim.hydro import HydroBody, build_hydro_models
from sim.laws import (CallableTorque, Constant, ExternalMotion, Free, MotionLaw, Polynomial, Sinusoid, Spline,
                      ViscoElastic)
from sim.model import CallableBaseMotion, StaticBase
from sim.robots import load_robot
from sim.simulation import Simulation
from sim.urdf import random_tree_urdf
from sim.testing import assert_paths_agree

ROOT = Path(__file__).resolve().parents[2]
#: Agreement when one path evaluates a law through its ``fused_form`` (same formula, other rounding order).
LAW_FORM_RTOL = 1e-10


def _pair(model, dt, **reset):
    fused, python = Simulation(model, "rk4", dt), Simulation(model, "rk4", dt, fused=False)
    fused.reset(**reset)
    python.reset(**reset)
    return fused, python


def test_flapper_fused_path_matches_python_path():
    model = load_robot(ROOT / "configs" / "robots" / "flapper.toml").replace(base_mode="floating")
    fused, python = _pair(model, 1e-4)
    for _ in range(20):                    # single steps, outputs in between (cached on the fused side)
        fused.step()
        python.step()
        assert_paths_agree(fused, python, "flapper step")
    fused.advance(0.004)                   # many steps in one call
    python.advance(0.004)
    assert_paths_agree(fused, python, "flapper advance")
    # The aero plug-in's own record (summary) is the one of the final state on both sides.
    aero_f, aero_p = fused.model.force_models[0], python.model.force_models[0]
    assert aero_f is aero_p
    python.outputs()
    summary_p = aero_p.summary(model, python.data)
    fused.outputs()
    summary_f = aero_f.summary(model, fused.data)
    for key, value in summary_p.items():
        assert summary_f[key] == pytest.approx(value, rel=1e-9, abs=1e-12)
    # The flapper really flapped: the wing strains are not at rest.
    assert np.abs(fused.outputs()["strain"]).max() > 1e-3


def _mixed_tree(tmp_path, seed, n_joints, base_mode):
    rng = np.random.default_rng(seed)
    path = tmp_path / f"tree_{seed}.urdf"
    path.write_text(random_tree_urdf(rng, n_joints))
    model = load_urdf(path, base_mode=base_mode)
    n = model.n
    actuated = rng.random(n) < 0.5
    actuated[0] = True
    motion, joint_laws, external = {}, {}, []
    for k in range(n):
        kind = k % 4
        if actuated[k]:
            if kind == 0:
                motion[k] = Sinusoid(rng.uniform(0.2, 0.6), rng.uniform(2.0, 9.0), rng.uniform(0, 6), 0.1)
            elif kind == 1:
                motion[k] = Polynomial(rng.normal(size=4) * [0.1, 0.5, 1.0, 2.0])
            elif kind == 2:
                motion[k] = Constant(rng.uniform(-0.3, 0.3))
            else:
                law = ExternalMotion(0.1, 0.2, -0.5)
                motion[k] = law
                external.append(law)
        else:
            joint_laws[k] = (ViscoElastic(k=rng.uniform(0.5, 5.0), mu=rng.uniform(0.0, 0.1), r0=0.05)
                             if kind % 2 else Free())
    extra = {}
    if base_mode == "imposed":
        pose = np.eye(4)
        pose[:3, 3] = [0.1, -0.2, 0.3]
        extra["base_motion"] = StaticBase(pose)
    model = model.replace(actuated=actuated, motion_laws=motion, joint_laws=joint_laws,
                          gravity=rng.normal(size=3) * 3.0, **extra)
    return model, rng, external


@pytest.mark.parametrize("base_mode", ["floating", "fixed", "imposed"])
def test_random_mixed_tree_fused_path_matches_python_path(tmp_path, base_mode):
    model, rng, external = _mixed_tree(tmp_path, {"floating": 3, "fixed": 4, "imposed": 5}[base_mode], 9,
                                       base_mode)
    assert model.joint_types.count("prismatic") + model.joint_types.count("revolute") == model.n
    q0 = rng.uniform(-0.5, 0.5, model.n)
    twist = rng.normal(size=6) * 0.5
    fused, python = _pair(model, 1e-3, q=q0, base_twist=twist)
    tau = rng.normal(size=model.n) * 0.2
    for sim in (fused, python):
        sim.tau_applied[:] = tau
    for rounds in range(3):
        fused.advance(0.02)
        python.advance(0.02)
        assert_paths_agree(fused, python, f"{base_mode} advance {rounds}")
        # Inputs changed from outside between calls: the fused path must not reuse its kept derivative.
        for law in external:
            law.set(0.05 * rounds, -0.1, 0.3 * rounds)
        new_tau = rng.normal(size=model.n) * 0.2
        fused.tau_applied[:] = new_tau
        python.tau_applied[:] = new_tau
        assert_paths_agree(fused, python, f"{base_mode} inputs changed {rounds}")
        fused.step()
        python.step()
        assert_paths_agree(fused, python, f"{base_mode} step {rounds}")
    # set_state in the middle of a run (the kept derivative is stale afterwards).
    state = dict(q=rng.uniform(-0.3, 0.3, model.n), qd=rng.normal(size=model.n) * 0.1)
    fused.set_state(**state)
    python.set_state(**state)
    fused.advance(0.01)
    python.advance(0.01)
    assert_paths_agree(fused, python, f"{base_mode} after set_state")
    assert np.abs(python.y[13:]).max() > 1e-3    # the passive joints moved


def test_outputs_after_a_fused_step_cost_no_evaluation(tmp_path):
    model, rng, _ = _mixed_tree(tmp_path, 7, 6, "floating")
    fused = Simulation(model, "rk4", 1e-3)
    fused.advance(0.005)
    before = fused.evaluations
    first = fused.outputs()
    assert fused.evaluations == before       # read from the step's last evaluation
    fused.tau_applied[:] = 0.3               # a changed input forces a fresh evaluation
    fresh = fused.outputs()
    assert fused.evaluations == before + 1
    assert np.abs(fresh["qdd"] - first["qdd"]).max() > 0.0
    # The steps cost 4 evaluations each, plus one at the first call (no kept derivative yet).
    sim = Simulation(model, "rk4", 1e-3)
    sim.advance(0.01)
    assert sim.evaluations == 4 * 10 + 1
    sim.advance(0.01)
    assert sim.evaluations == 4 * 20 + 1


def test_models_without_kernel_form_take_the_python_path(tmp_path):
    model, _, _ = _mixed_tree(tmp_path, 11, 5, "floating")
    passive = int(np.flatnonzero(~model.actuated)[0])
    actuated = int(np.flatnonzero(model.actuated)[0])
    cases = {
        "rk45": (model, "rk45"),
        "CallableTorque": (model.replace(joint_laws={passive: CallableTorque(lambda t, r, rd: -r)}), "rk4"),
        "Spline": (model.replace(motion_laws={actuated: Spline([0.0, 1.0, 2.0], [0.0, 0.3, 0.1])}), "rk4"),
        "CallableBaseMotion": (model.replace(base_mode="imposed", base_motion=CallableBaseMotion(
            lambda t: (np.eye(4), np.zeros(6), np.zeros(6)))), "rk4"),
    }
    for name, (case_model, integrator) in cases.items():
        sim = Simulation(case_model, integrator, 1e-3)
        assert sim.path == "python", name
        assert name in sim.fused_unsupported, (name, sim.fused_unsupported)
        sim.advance(0.003)
        assert np.all(np.isfinite(sim.y))
    # A plug-in without the kernel protocol falls back too.
    from sim.forces import Gravity
    sim = Simulation(model.replace(force_models=[Gravity()]), "rk4", 1e-3)
    assert sim.path == "python" and "Gravity" in sim.fused_unsupported
    assert Simulation(model, "rk4", 1e-3).path == "fused"
    assert Simulation(model, "rk4", 1e-3, fused=False).fused_unsupported is None


class _ScaledSine(MotionLaw):
    """A motion law outside the kernel's list with a kernel form (``fused_form``): ratio * a Sinusoid."""

    def __init__(self, source: Sinusoid, ratio: float):
        self.source, self.ratio = source, ratio

    def evaluate(self, t):
        r, r_d, r_dd = self.source.evaluate(t)
        return self.ratio * r, self.ratio * r_d, self.ratio * r_dd

    def fused_form(self):
        s = self.source
        return Sinusoid(self.ratio * s.amplitude, s.omega, s.phase, self.ratio * s.offset)


def test_hydro_plugins_tracking_springs_and_law_forms_in_the_fused_path(tmp_path):
    """A swimming random tree: the four hydrodynamic plug-ins (sim/hydro.py kernels), a TrackingSpring joint
    law and a motion law with a ``fused_form``, fused against Python. Both paths evaluate the scaled sine
    differently (ratio * (o + a s) against (ratio o) + (ratio a) s), so they agree to rounding, not bitwise."""
    model, rng, _ = _mixed_tree(tmp_path, 21, 8, "floating")
    passive = np.flatnonzero(~model.actuated)
    actuated = np.flatnonzero(model.actuated)
    source = Sinusoid(0.4, 6.0, 0.3, 0.05)
    motion = dict(model.motion_laws)
    motion[int(actuated[0])] = _ScaledSine(source, 1.7)
    joint_laws = dict(model.joint_laws)
    joint_laws[int(passive[0])] = TrackingSpring(source, 0.8, 2.0, 0.05)
    joint_laws[int(passive[-1])] = TrackingSpring(ExternalMotion(0.2, -0.1), 1.2, 1.0, 0.02)
    bodies = []
    for j in range(model.n_bodies):
        bodies.append(HydroBody(
            body=j, volume=rng.uniform(1e-4, 1e-3), centre_of_buoyancy=rng.normal(size=3) * 0.02, height=0.05,
            added_mass_diagonal=rng.uniform(0.01, 0.1, 6), drag_linear=rng.uniform(0.0, 0.5, 6),
            drag_quadratic=rng.uniform(0.0, 2.0, 6), frame_centre=rng.normal(size=3) * 0.02,
            surface=None if j % 2 else dict(chord=[1.0, 0.0, 0.0], normal=[0.0, 0.0, 1.0],
                                            cp=rng.normal(size=3) * 0.02, area=0.01, cn0=2.0, ct0=0.1,
                                            delta_stall=0.4)))
    forces = build_hydro_models(bodies, rho=1000.0, gravity=model.gravity, surface_z=0.3)
    assert [f.fused_kernel for f in forces] == ["buoyancy", "added_mass", "drag", "lift"]
    model = model.replace(motion_laws=motion, joint_laws=joint_laws, force_models=forces)
    assert len(model.python_laws) == 2
    fused, python = _pair(model, 1e-3, base_twist=rng.normal(size=6) * 0.3)
    for rounds in range(3):
        fused.advance(0.02)
        python.advance(0.02)
        assert_paths_agree(fused, python, f"hydro advance {rounds}", rtol=LAW_FORM_RTOL)
        joint_laws[int(passive[-1])].source.set(0.1 * rounds, 0.3)
    # The water acted: the buoyancy and drag wrenches are not zero.
    assert np.abs(fused.outputs()["ext_wrench"]).max() > 1e-3
