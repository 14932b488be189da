"""The simulator's extension point (sim/plugins.py, docs/extending.md): a force model added by one file.

The example plug-in of the docs (tests/sim_core/plugin_constant_force.py: a constant world-frame force at a point)
is registered from its file, runs compiled inside the fused ``advance()`` and as the Python path's ``apply``, and
obeys the momentum theorem; nothing in sim/ names it. Also: the parameter layout refuses bad parameters by name,
and the kernels' views of the Data and Model buffers are the layouts of sim/model.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.dynamics import _data_views, _model_views, momentum_world
from sim.model import DATA_FIELDS, MODEL_FIELDS, Data, ModelBuilder
from sim.plugins import ParamLayout
from sim.simulation import Simulation
from sim.spatial import pose, spatial_inertia
from sim.testing import assert_paths_agree
from tests.sim_core.conftest import PLUGIN_COMPILE_TIMEOUT_S

ROOT = Path(__file__).resolve().parents[2]
#: Momentum theorem over the run: the integrators are exact for a constant acceleration, so only rounding is left.
MOMENTUM_RTOL = 1e-12
#: The force goes through the centre of mass and the body starts without rotation: it must not start rotating.
NO_ROTATION = 1e-12


def _two_body_model(force_models=()):
    """A free base (2 kg) and an arm (0.5 kg) on a revolute joint held at 0 (an actuated joint's default law):
    one rigid body, without gravity."""
    builder = ModelBuilder("base", spatial_inertia(2.0, [0.05, -0.02, 0.01], np.diag([4e-3, 5e-3, 6e-3])),
                           gravity=(0.0, 0.0, 0.0))
    builder.add_body("arm", parent="base", joint_name="hinge", joint_type="revolute", axis=[0, 0, 1],
                     placement=pose(p=[0.2, 0.0, 0.0]), inertia=spatial_inertia(0.5, [0.1, 0.0, 0.0], np.eye(3) * 1e-4),
                     actuated=True)
    model = builder.build()
    return model.replace(force_models=list(force_models))


def _centre_of_mass(model) -> np.ndarray:
    """Centre of mass (3,) of the rigid tree at q = 0, base frame, m (from the first moments M[3:, :3] = m hat(c))."""
    sim = Simulation(model, "rk4", 1e-3, fused=False)
    sim.reset(base_pose=np.eye(4))
    sim.outputs()
    data = sim.data
    total, moment = 0.0, np.zeros(3)
    for j in range(model.n_bodies):
        m = model.inertia[j, 0, 0]
        c = np.array([model.inertia[j, 5, 1], model.inertia[j, 3, 2], model.inertia[j, 4, 0]]) / m
        moment += m * (data.g[j, :3, :3] @ c + data.g[j, :3, 3])
        total += m
    return moment / total


@pytest.mark.timeout(PLUGIN_COMPILE_TIMEOUT_S)
def test_example_plugin_runs_compiled_and_in_python_and_obeys_the_momentum_theorem(constant_force_plugin):
    """The plug-in's force F through the centre of mass of a free rigid body turned and moving: after T the linear
    momentum has changed by F T on both paths (to rounding), the body has not started to rotate, and the fused
    path gives the Python path's numbers."""
    plugin = constant_force_plugin
    force = np.array([0.3, -0.2, 0.5])                                   # N, world frame
    model = _two_body_model()
    centre = _centre_of_mass(model)
    model = model.replace(force_models=[plugin.ConstantForce([0], force, centre)])
    turned = pose(R=np.array([[0.0, -1.0, 0.0], [0.6, 0.0, -0.8], [0.8, 0.0, 0.6]]), p=[0.1, 0.2, 0.3])
    twist = np.array([0.4, 0.1, -0.3, 0.0, 0.0, 0.0])                   # m/s, body frame; no rotation
    duration = 0.2
    runs = {}
    for label, fused in (("fused", True), ("python", False)):
        sim = Simulation(model, "rk4", 1e-3, fused=fused)
        assert sim.path == label, sim.fused_unsupported
        sim.reset(base_pose=turned, base_twist=twist)
        sim.outputs()
        before = momentum_world(model, sim.data)[:3]
        sim.advance(duration)
        sim.outputs()
        after = momentum_world(model, sim.data)[:3]
        expected = before + force * duration
        assert np.abs(after - expected).max() <= MOMENTUM_RTOL * np.abs(expected).max(), (label, after, expected)
        assert np.abs(sim.y[10:13]).max() <= NO_ROTATION, (label, sim.y[10:13])
        runs[label] = sim
    assert_paths_agree(runs["fused"], runs["python"], "constant force plug-in")
    # the kernel wrote into the Data of both paths: the force reached the base, in its frame
    for sim in runs.values():
        assert np.allclose(sim.data.g[0, :3, :3] @ sim.data.f_ext[0, :3], force, rtol=0, atol=1e-14)


def test_the_core_does_not_name_the_plugin(constant_force_plugin):
    """Adding the plug-in took no edit of sim/: no file there names it, and the fused stepper bound to the registry
    has a slot for it."""
    from sim.fused import bound_kernels
    for path in (ROOT / "sim").rglob("*.py"):
        text = path.read_text()
        assert "constant_force" not in text and "ConstantForce" not in text, path
    assert "constant_force" in bound_kernels()["slots"]


def test_param_layout_refuses_bad_parameters_by_name():
    """A missing or unknown field, a field of the wrong dimension or a NaN is refused with its name; a packed field
    reads back as a view of the packed array."""
    layout = ParamLayout(floats=(("gain", 0), ("axis", 1)), ints=(("bodies", 1),))
    fpar, ipar = layout.pack(gain=2.5, axis=[0.0, 0.0, 1.0], bodies=[3, 4])
    assert layout.view(fpar, ipar, "gain") == 2.5
    np.testing.assert_array_equal(layout.view(fpar, ipar, "bodies"), [3, 4])
    layout.view(fpar, ipar, "axis")[2] = -1.0
    assert fpar[3] == -1.0
    with pytest.raises(ValueError, match="missing \\['bodies'\\]"):
        layout.pack(gain=1.0, axis=[1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="unknown \\['gian'\\]"):
        layout.pack(gian=1.0, gain=1.0, axis=[1.0, 0.0, 0.0], bodies=[1])
    with pytest.raises(ValueError, match="'axis': expected 1 dimensions"):
        layout.pack(gain=1.0, axis=[[1.0, 0.0, 0.0]], bodies=[1])
    with pytest.raises(ValueError, match="'gain': NaN"):
        layout.pack(gain=float("nan"), axis=[1.0, 0.0, 0.0], bodies=[1])


def test_kernel_views_are_the_declared_layouts():
    """The kernels' views of Data.buffer and Model.kernel_floats are, field by field, the arrays of Data and Model
    (same shape, same memory): the layouts of sim/model.py are their one source."""
    model = _two_body_model()
    data = Data(model)
    views = _data_views(model.n_bodies, model.n, data.buffer)
    assert len(views) == len(DATA_FIELDS)
    for (name, _), view in zip(DATA_FIELDS, views):
        mine = getattr(data, name)
        assert view.shape == mine.shape and view.ctypes.data == mine.ctypes.data, name
    views = _model_views(model.n_bodies, model.n, model.kernel_floats)
    assert len(views) == len(MODEL_FIELDS)
    for (name, _), view in zip(MODEL_FIELDS, views):
        np.testing.assert_array_equal(view, getattr(model, name), err_msg=name)
