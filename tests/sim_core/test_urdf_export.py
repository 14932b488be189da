"""``mms urdf`` (sim/urdf.py: model_to_urdf): the URDF of every kind of generated tree read back by our own loader
and by Pinocchio, with the same rigid-body dynamics at random states (relative agreement RTOL): the robot's own
actuated split against Pinocchio's partitioned mass-matrix solve, and every joint passive against ``pin.aba``.

The robots: the flapper (floating, massless links inside its wing joints), RayBot (floating, many actuated fins),
the fish (a floating chain) and the pendulum (a fixed chain from a URDF). Force models and joint laws are not URDF:
the original is compared without them. Pinocchio's free flyer: q = [p world, quat (x, y, z, w)], v = the base
twist (V, Omega) in the base frame, its acceleration our base acceleration (as in test_sim_core_pinocchio.py).
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

import numpy as np
import pinocchio as pin
import pytest

from hil.cli import main as mms_main
from sim import hybrid_dynamics, load_urdf
from sim.config import resolve_config
from sim.robots import load_robot
from sim.shapes import POINT_RADIUS_M, default_shapes
from sim.spatial import quat_to_matrix
from sim.testing import assert_relatively_close
from sim.urdf import model_to_urdf

#: Relative agreement required (double precision both sides; the URDF's 17 significant digits read back exactly,
#: the roll-pitch-yaw round trip costs ~1e-15).
RTOL = 1e-10
STATES = 4
ROBOTS = ["flapper", "raybot", "fish", "pendulum"]
#: those whose tree is solvable with every joint passive (the flapper's is not: its wings have no inertia about the
#: stroke axis, sim.urdf.check_solvable refuses it, and pin.aba returns NaN)
ABA_ROBOTS = ["raybot", "fish", "pendulum"]


def _random_state(rng, model):
    n = model.n
    quat = rng.normal(size=4)
    quat /= np.linalg.norm(quat)
    g0 = np.eye(4)
    if model.base_mode == "floating":
        g0[:3, :3] = quat_to_matrix(quat)
        g0[:3, 3] = rng.normal(size=3)
    else:
        quat = np.array([1.0, 0.0, 0.0, 0.0])
    twist = rng.normal(size=6) if model.base_mode == "floating" else np.zeros(6)
    return g0, twist, quat, rng.uniform(-1.0, 1.0, n), rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)


def _pinocchio(model, path, g0, twist, quat, q, qd, qdd, tau):
    """Base acceleration, qdd and tau from Pinocchio's mass matrix and bias forces, actuated joints' accelerations
    given, the others' torques given (the hybrid problem solved as one partitioned linear system)."""
    floating = model.base_mode == "floating"
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating else pin.buildModelFromUrdf(str(path))
    pm.gravity.linear = model.gravity
    pd = pm.createData()
    idx_v = np.array([pm.joints[pm.getJointId(name)].idx_v for name in model.joint_names])
    idx_q = np.array([pm.joints[pm.getJointId(name)].idx_q for name in model.joint_names])
    assert all(pm.joints[pm.getJointId(name)].nq == 1 for name in model.joint_names)
    qp, vp = np.zeros(pm.nq), np.zeros(pm.nv)
    if floating:
        qp[:3], qp[3:7], vp[:6] = g0[:3, 3], [quat[1], quat[2], quat[3], quat[0]], twist
    qp[idx_q], vp[idx_v] = q, qd
    M = pin.crba(pm, pd, qp)
    M = np.triu(M) + np.triu(M, 1).T
    nle = pin.nonLinearEffects(pm, pd, qp, vp)
    known = np.zeros(pm.nv, bool)
    known[idx_v[model.actuated]] = True
    a, effort = np.zeros(pm.nv), np.zeros(pm.nv)
    a[idx_v], effort[idx_v] = qdd, tau
    free = ~known
    a[free] = np.linalg.solve(M[np.ix_(free, free)], effort[free] - nle[free] - M[np.ix_(free, known)] @ a[known])
    effort = M @ a + nle
    return (a[:6] if floating else np.zeros(6)), a[idx_v], effort[idx_v]


def _pinocchio_aba(model, path, g0, twist, quat, q, qd, tau):
    """Base acceleration and qdd of every joint passive under ``tau``: Pinocchio's articulated-body algorithm."""
    floating = model.base_mode == "floating"
    pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer()) if floating else pin.buildModelFromUrdf(str(path))
    pm.gravity.linear = model.gravity
    idx_v = np.array([pm.joints[pm.getJointId(name)].idx_v for name in model.joint_names])
    idx_q = np.array([pm.joints[pm.getJointId(name)].idx_q for name in model.joint_names])
    qp, vp, effort = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
    if floating:
        qp[:3], qp[3:7], vp[:6] = g0[:3, 3], [quat[1], quat[2], quat[3], quat[0]], twist
    qp[idx_q], vp[idx_v], effort[idx_v] = q, qd, tau
    a = pin.aba(pm, pm.createData(), qp, vp, effort)
    return (a[:6] if floating else np.zeros(6)), a[idx_v]


def _close(ours, theirs, what):
    assert_relatively_close(ours, theirs, what, RTOL)


@pytest.mark.parametrize("robot", ROBOTS)
def test_urdf_reloads_with_the_same_dynamics_in_ours_and_pinocchio(tmp_path, robot):
    assert mms_main(["urdf", robot, "--out", str(tmp_path)]) == 0
    path = tmp_path / f"{robot}.urdf"
    original = load_robot(resolve_config("robot", robot)).replace(force_models=[])
    reloaded = load_urdf(path, base_mode=original.base_mode, gravity=original.gravity,
                         actuated=dict(zip(original.joint_names, original.actuated.tolist())))
    assert reloaded.joint_names == original.joint_names
    assert reloaded.body_names == original.body_names
    rng = np.random.default_rng(sum(map(ord, robot)))
    for _ in range(STATES):
        g0, twist, quat, q, qd, qdd, tau = _random_state(rng, original)
        ours = hybrid_dynamics(original, g0, twist, q, qd, original.actuated, qdd, tau)
        again = hybrid_dynamics(reloaded, g0, twist, q, qd, original.actuated, qdd, tau)
        for field in ("base_acc", "qdd", "tau", "base_wrench"):
            _close(getattr(again, field), getattr(ours, field), f"{robot} reloaded {field}")
        base_acc, qdd_pin, tau_pin = _pinocchio(original, path, g0, twist, quat, q, qd, qdd, tau)
        _close(ours.base_acc if original.base_mode == "floating" else np.zeros(6), base_acc, f"{robot} base_acc")
        _close(ours.qdd, qdd_pin, f"{robot} qdd vs Pinocchio")
        _close(ours.tau, tau_pin, f"{robot} tau vs Pinocchio")
        if robot not in ABA_ROBOTS:
            continue
        passive = np.zeros(original.n, bool)
        free = hybrid_dynamics(reloaded, g0, twist, q, qd, passive, qdd, tau)
        base_aba, qdd_aba = _pinocchio_aba(original, path, g0, twist, quat, q, qd, tau)
        _close(free.base_acc if original.base_mode == "floating" else np.zeros(6), base_aba, f"{robot} aba base")
        _close(free.qdd, qdd_aba, f"{robot} every joint passive: qdd vs pin.aba")


def test_every_body_gets_a_default_shape_from_its_inertia(tmp_path):
    """No robot file describes geometry: each link's <visual> is the box of equal inertia (the pendulum's uniform
    0.5 m rods come out 0.5 m long), a massless link (inside the flapper's wing joints) a small sphere."""
    pendulum = load_robot(resolve_config("robot", "pendulum"))
    rod = default_shapes(pendulum)[pendulum.body_names.index("upper_rod")]
    assert rod.kind == "box" and abs(max(rod.size) - 0.5) < 1e-3
    assert abs(rod.pose[2, 3] + 0.25) < 1e-12          # centred on the rod's centre of mass
    flapper = load_robot(resolve_config("robot", "flapper"))
    root = ET.fromstring(model_to_urdf(flapper))
    links = root.findall("link")
    assert len(links) == flapper.n_bodies
    assert all(link.find("visual/geometry") is not None for link in links)
    massless = [link for link in links if link.find("inertial") is None]
    assert massless, "the flapper has massless links (its wing joints' intermediate frames)"
    for link in massless:
        assert float(link.find("visual/geometry/sphere").get("radius")) == POINT_RADIUS_M


def test_a_robot_with_modal_bodies_is_refused_in_one_line(tmp_path, capsys):
    assert mms_main(["urdf", "flapper-flexible", "--out", str(tmp_path)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "modal (flexible) bodies have no URDF form" in lines[0], lines
    assert not list(tmp_path.iterdir())
