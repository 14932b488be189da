"""The 3-D view's parts that need no OpenGL: the drawn solids, the forward kinematics against the simulator's own,
the pose carried from sim/state, and the dashboard without an OpenGL context (its one-line notice).

The drawing itself (a real OpenGL context, frames grabbed and their pixels checked) is tests/gui/test_view3d_gl.py.
"""
from __future__ import annotations

import numpy as np
import pytest

from gui.scene3d import ELLIPSOID, PLATE, POINT_MASS_RADIUS_FRACTION, TUBE, Kinematics, base_pose, body_shapes
from gui.signals import MessageProcessor
from sim import messages
from sim.dynamics import hybrid_dynamics
from sim.model import Data
from sim.robots import load_robot
from sim.spatial import inertia_parameters

DEADLINE_MS = 15_000
#: relative agreement of a drawn solid's inertia with its body's: both are the same closed forms in double precision
INERTIA_RTOL = 1e-9


@pytest.fixture(scope="module")
def flapper():
    return load_robot("configs/robots/flapper.toml")


@pytest.fixture(scope="module")
def raybot():
    return load_robot("configs/robots/raybot.toml")


def solid_moments(kind: str, half: np.ndarray, mass: float) -> np.ndarray:
    """Principal moments (3,) kg m^2 of the uniform solid drawn, about its centre, along its own axes."""
    a, b, c = half
    if kind == ELLIPSOID:
        return mass / 5.0 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])
    if kind == PLATE:
        return mass / 3.0 * np.array([b * b + c * c, a * a + c * c, a * a + b * b])
    return mass * np.array([b * b / 2.0, b * b / 4.0 + a * a / 3.0, b * b / 4.0 + a * a / 3.0])


@pytest.mark.parametrize("robot, expected", [
    ("flapper", {"thorax": ELLIPSOID, **{f"blade{i}_{side}": PLATE for i in range(1, 5) for side in "rl"}}),
    ("raybot", {"disc": ELLIPSOID, "seg_front_l": TUBE, "seg_rear_r": TUBE, "pelvic_l": PLATE,
                "tail_caudal": PLATE}),
])
def test_every_body_with_mass_is_drawn_as_the_solid_of_its_inertia(robot, expected, request):
    model = request.getfixturevalue(robot)
    shapes = {shape.name: shape for shape in body_shapes(model)}
    massive = {name for j, name in enumerate(model.body_names) if model.inertia[j, 0, 0] > 0}
    assert set(shapes) == massive          # the sections' massless joint frames draw nothing
    assert {name: shapes[name].kind for name in expected} == expected
    for shape in shapes.values():
        mass, com, inertia_com = inertia_parameters(model.inertia[shape.body])
        rotation = shape.pose[:3, :3]
        np.testing.assert_allclose(rotation.T @ rotation, np.eye(3), atol=1e-12)
        assert np.linalg.det(rotation) == pytest.approx(1.0)
        np.testing.assert_allclose(shape.pose[:3, 3], com, atol=1e-15)
        # the solid's inertia about its own axes is the body's; a tube (one transverse moment) has the mean of two
        body = rotation.T @ inertia_com @ rotation
        np.testing.assert_allclose(body - np.diag(np.diag(body)), 0.0, atol=INERTIA_RTOL * np.abs(body).max())
        moments = np.diag(body).copy()
        if shape.kind == TUBE:
            moments[1:] = moments[1:].mean()
        np.testing.assert_allclose(solid_moments(shape.kind, shape.half_extents, mass), moments, rtol=INERTIA_RTOL)


@pytest.mark.parametrize("robot", ["flapper", "raybot"])
def test_forward_kinematics_is_the_simulators(robot, request):
    model = request.getfixturevalue(robot)
    rng = np.random.default_rng(7)
    kinematics = Kinematics(model)
    for _ in range(3):
        q = rng.uniform(-1.0, 1.0, model.n)
        base = base_pose(rng.normal(size=3), rng.normal(size=4))
        data = Data(model)
        hybrid_dynamics(model, base, np.zeros(6), q, np.zeros(model.n), model.actuated, np.zeros(model.n),
                        np.zeros(model.n), data=data)
        np.testing.assert_allclose(kinematics.body_poses(base, q), data.g, rtol=0, atol=1e-12)


def state(seq: int, q, base_pos=(0.0, 0.0, 0.0), base_quat=(1.0, 0.0, 0.0, 0.0)) -> dict:
    n = len(q)
    return {"v": 1, "seq": seq, "stamp_ns": 1_700_000_000_000_000_000 + seq * 1_000_000, "t": seq * 1e-3,
            "joint_names": [f"j{k}" for k in range(n)], "actuated": [True] * n, "q": list(q), "qd": [0.0] * n,
            "qdd": [0.0] * n, "tau": [0.0] * n, "strain": [], "base_pos": list(base_pos),
            "base_quat": list(base_quat), "base_twist": [0.0] * 6, "base_wrench": [0.0] * 6, "ext_wrench": [0.0] * 6}


def test_the_newest_drawable_pose_rides_on_the_batch():
    processor = MessageProcessor(origin_ns=0)
    quarter_turn = (np.cos(np.pi / 4), 0.0, 0.0, np.sin(np.pi / 4))
    processor.feed(messages.TOPIC_SIM_STATE, state(0, [0.1, 0.2], (1.0, 2.0, 3.0), quarter_turn))
    pose = processor.take_batch().pose
    assert pose.joint_names == ("j0", "j1") and pose.t == 0.0
    np.testing.assert_allclose(pose.q, [0.1, 0.2])
    np.testing.assert_allclose(base_pose(pose.base_pos, pose.base_quat),
                               [[0, -1, 0, 1], [1, 0, 0, 2], [0, 0, 1, 3], [0, 0, 0, 1]], atol=1e-15)
    # a state the view cannot draw keeps the previous pose (its curves still go to the plots)
    processor.feed(messages.TOPIC_SIM_STATE, state(1, [0.3, np.nan]))
    processor.feed(messages.TOPIC_SIM_STATE, state(2, [0.3, 0.4], base_quat=(0.0, 0.0, 0.0, 0.0)))
    batch = processor.take_batch()
    assert batch.pose is pose and batch.malformed == 0
    assert len([c for c in batch.chunks if c.key == "sim.q"][0].times) == 2
    # a base pose of the wrong shape is a malformed message, counted and dropped
    bad = state(3, [0.3, 0.4])
    bad["base_quat"] = [1.0, 0.0, 0.0]
    processor.feed(messages.TOPIC_SIM_STATE, bad)
    assert processor.take_batch().malformed == 1


def test_without_opengl_the_pane_is_one_line_and_the_dashboard_runs(qtbot, make_window, publisher, responder,
                                                                     endpoints):
    simulator = responder(endpoints.sim_control)
    window = make_window(opengl=False)
    view = window.robot_view
    assert view.gl is None and view.notice.text() == "3-D view unavailable: turned off"
    qtbot.waitUntil(lambda: len(window.store.buffers.get("sim.q", [])) > 20, timeout=DEADLINE_MS)
    qtbot.waitUntil(lambda: window.frames_drawn > 2, timeout=DEADLINE_MS)
    # nothing is asked or computed for a pane that cannot draw
    assert simulator.requests == [] and view.model is None and view.poses_set == 0
    assert window.panels["torque"].curves


def test_a_body_without_rotational_inertia_is_drawn_as_a_small_sphere():
    from sim.model import Model
    from sim.spatial import spatial_inertia

    placement = np.tile(np.eye(4), (3, 1, 1))
    placement[2, 0, 3] = 0.5
    axis = np.array([[0.0] * 6, [0, 0, 0, 0, 0, 1.0], [0, 0, 0, 0, 0, 1.0]])
    inertia = [spatial_inertia(1.0, np.zeros(3), np.diag([0.01, 0.02, 0.02])),
               np.zeros((6, 6)),                                                     # a joint frame: nothing
               spatial_inertia(0.2, [0.5, 0.0, 0.0], np.zeros((3, 3)))]              # a point mass 0.5 m out
    model = Model(joint_names=["a", "b"], body_names=["base", "frame", "bob"], parent=[-1, 0, 1],
                  joint_placement=placement, joint_axis=axis, inertia=inertia, actuated=[True, False])
    base, bob = body_shapes(model)
    assert (base.name, base.kind, bob.name, bob.kind) == ("base", ELLIPSOID, "bob", ELLIPSOID)
    np.testing.assert_allclose(bob.half_extents, POINT_MASS_RADIUS_FRACTION * base.half_extents.max())
    np.testing.assert_allclose(bob.pose[:3, 3], [0.5, 0.0, 0.0])
