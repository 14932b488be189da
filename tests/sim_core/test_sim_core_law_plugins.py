"""Motion laws and joint laws as plug-ins (sim/plugins.py, docs/extending.md): the example laws of the docs
(tests/sim_core/plugin_laws.py: an exponential approach imposed on the actuated joints, a hardening spring on the
passive ones) are registered from their file, run compiled inside the fused ``advance()`` and as the Python
path's ``evaluate`` / ``torque``, with the same numbers; nothing in sim/ names them. Also: the registries refuse a
name registered from another file, and a subclass that does not name its own kernel is not taken for its parent's.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim import load_urdf
from sim.fused import _kernel_joint_law, _kernel_motion_law, bound_kernels
from sim.laws import Free, Sinusoid
from sim.plugins import ParamLayout, register_motion_law
from sim.simulation import Simulation
from sim.testing import assert_paths_agree
from sim.urdf import random_tree_urdf
from tests.sim_core.conftest import PLUGIN_COMPILE_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]
#: The passive joints' motion with the hardening spring differs from the motion with free joints by far more than
#: rounding (rad): the spring's torques are O(1) N m over the run.
SPRING_EFFECT = 1e-3


def _tree(tmp_path, plugin, passive_law):
    """A floating random tree of 7 joints: every other joint actuated by an exponential approach (targets and time
    constants varied), the others on ``passive_law(k)``."""
    rng = np.random.default_rng(11)
    path = tmp_path / "tree.urdf"
    path.write_text(random_tree_urdf(rng, 7, fixed_fraction=0.0))
    model = load_urdf(path, base_mode="floating")
    actuated = np.arange(model.n) % 2 == 0
    motion = {k: plugin.ExponentialApproach(rng.uniform(-0.6, 0.6), rng.uniform(0.05, 0.3))
              for k in range(model.n) if actuated[k]}
    joint_laws = {k: passive_law(k) for k in range(model.n) if not actuated[k]}
    return model.replace(actuated=actuated, motion_laws=motion, joint_laws=joint_laws, gravity=(0.0, 0.0, -9.81))


def _run(model, fused, duration=0.2):
    sim = Simulation(model, "rk4", 1e-3, fused=fused)
    sim.reset(q=np.full(model.n, 0.1))
    sim.advance(duration)
    return sim


@pytest.mark.timeout(PLUGIN_COMPILE_TIMEOUT_S)
def test_plugin_laws_run_compiled_and_agree_with_the_python_path(tmp_path, law_plugins):
    """The plug-in motion law and joint law take the fused path (their kernels called by the stepper inside
    advance()), and it gives the Python path's numbers to 1e-12; the imposed joints are at the law's values, and
    the spring acts (the passive joints move otherwise with free joints)."""
    plugin = law_plugins
    spring = {k: plugin.HardeningSpring(k=2.0 + 0.3 * k, k3=40.0, mu=0.02) for k in range(7)}
    model = _tree(tmp_path, plugin, lambda k: spring[k])
    fused, python = _run(model, True), _run(model, False)
    assert fused.path == "fused", fused.fused_unsupported
    assert_paths_agree(fused, python, "law plug-ins")
    q = fused.outputs()["q"]
    for k, law in model.motion_laws.items():
        assert q[k] == law.evaluate(fused.t)[0], k
    free = _run(_tree(tmp_path, plugin, lambda k: Free()), True)
    passive = ~model.actuated
    assert np.abs(free.outputs()["q"][passive] - q[passive]).max() > SPRING_EFFECT


def test_the_core_does_not_name_the_plugin_laws(law_plugins):
    """Adding the laws took no edit of sim/: no file there names them, and the stepper bound to the registries has
    a slot for each."""
    names = ("exponential_approach", "ExponentialApproach", "hardening_spring", "HardeningSpring")
    for path in (ROOT / "sim").rglob("*.py"):
        text = path.read_text()
        assert not any(name in text for name in names), path
    bound = bound_kernels()
    assert "exponential_approach" in bound["motion_slots"] and "hardening_spring" in bound["joint_slots"]


def test_registry_refuses_a_name_from_another_file_and_subclasses_need_their_own_kernel(law_plugins):
    """A law name registered from another file is refused by name; a subclass that does not name a kernel of its
    own is not compiled as its parent (it may compute otherwise), unless its ``fused_form()`` gives a law that
    is."""
    plugin = law_plugins
    with pytest.raises(ValueError, match="'exponential_approach' is already registered from .*plugin_laws.py"):
        register_motion_law("exponential_approach", ParamLayout(floats=(("x", 0),)), lambda t, fpar, ipar: (t, t, t))

    class Slower(plugin.ExponentialApproach):
        def evaluate(self, t):
            return super().evaluate(0.5 * t)

    assert _kernel_motion_law(Slower(0.3, 0.1)) is None

    class Reformed(Slower):
        def fused_form(self):
            return Sinusoid(0.1, 2.0)

    form, scale = _kernel_motion_law(Reformed(0.3, 0.1))
    assert type(form) is Sinusoid and scale == 1.0

    class Stiffer(plugin.HardeningSpring):
        def torque(self, t, r, r_d):
            return 2.0 * super().torque(t, r, r_d)

    assert _kernel_joint_law(Stiffer(1.0, 1.0, 0.0)) is None
    assert _kernel_joint_law(plugin.HardeningSpring(1.0, 1.0, 0.0)) is not None
