"""URDF as written in the wild: links without <inertial> (massless), e.g. the two links between the three revolute
joints of a spherical joint. Our loader accepts them where the tree stays solvable and the hybrid algorithm gives
Pinocchio's accelerations (pin.aba on the same file); a massless chain that makes a passive joint singular is
refused naming the joint, and accepted once that joint is actuated."""
from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from sim import hybrid_dynamics, load_robot, load_urdf
from sim.config import ConfigError
from sim.spatial import quat_to_matrix

#: Relative agreement with Pinocchio required by the task (double precision; measured errors are ~1e-15).
RTOL = 1e-10
STATES = 5


def _inertial(mass, com, diagonal):
    return (f'<inertial><origin xyz="{com}" rpy="0.3 -0.2 0.1"/><mass value="{mass}"/>'
            f'<inertia ixx="{diagonal[0]}" ixy="{0.1 * min(diagonal)}" ixz="0" iyy="{diagonal[1]}" iyz="0" '
            f'izz="{diagonal[2]}"/>'
            '</inertial>')


def _revolute(name, parent, child, xyz, axis):
    return (f'<joint name="{name}" type="revolute"><parent link="{parent}"/><child link="{child}"/>'
            f'<origin xyz="{xyz}" rpy="0.1 0.2 -0.3"/><axis xyz="{axis}"/>'
            '<limit lower="-3" upper="3" effort="10" velocity="10"/></joint>')


HAND = f'<link name="hand">{_inertial(0.3, "0.05 0 0.01", (0.0004, 0.0005, 0.0006))}</link>'
WRIST_ROLL = _revolute("wrist_roll", "wrist_1", "hand", "0 0 0", "1 0 0")
#: A torso, a shoulder made of three revolute joints through two massless links (a spherical joint), an upper arm,
#: a massless frame on a fixed joint, an elbow, a two-axis wrist through one massless link, a hand; and a massless
#: sensor frame fixed to the torso.
SPHERICAL_ARM = "".join([
    '<robot name="spherical_arm">',
    f'<link name="torso">{_inertial(3.0, "0 0 0.1", (0.05, 0.06, 0.04))}</link>',
    '<link name="imu"/>', '<link name="shoulder_1"/>', '<link name="shoulder_2"/>',
    f'<link name="upper_arm">{_inertial(1.2, "0.15 0 0", (0.004, 0.01, 0.011))}</link>',
    '<link name="elbow_frame"/>',
    f'<link name="forearm">{_inertial(0.8, "0.12 0.01 0", (0.002, 0.006, 0.007))}</link>',
    '<link name="wrist_1"/>',
    HAND,
    '<joint name="imu_mount" type="fixed"><parent link="torso"/><child link="imu"/>'
    '<origin xyz="0 0.05 0.2" rpy="0 0 0.5"/></joint>',
    _revolute("shoulder_z", "torso", "shoulder_1", "0.1 0.2 0.3", "0 0 1"),
    _revolute("shoulder_y", "shoulder_1", "shoulder_2", "0 0 0", "0 1 0"),
    _revolute("shoulder_x", "shoulder_2", "upper_arm", "0 0 0", "1 0 0"),
    '<joint name="elbow_mount" type="fixed"><parent link="upper_arm"/><child link="elbow_frame"/>'
    '<origin xyz="0.3 0 0" rpy="0 0.2 0"/></joint>',
    _revolute("elbow", "elbow_frame", "forearm", "0 0 0", "0 1 0"),
    _revolute("wrist_pitch", "forearm", "wrist_1", "0.25 0 0", "0 1 0"),
    WRIST_ROLL,
    "</robot>",
])


@pytest.fixture
def arm_file(tmp_path):
    path = tmp_path / "spherical_arm.urdf"
    path.write_text(SPHERICAL_ARM)
    return path


def _assert_close(ours, theirs, what):
    scale = max(1.0, float(np.abs(theirs).max()))
    error = float(np.abs(np.asarray(ours) - np.asarray(theirs)).max()) / scale
    assert error < RTOL, f"{what}: relative error {error:.3e}"


@pytest.mark.parametrize("base_mode", ["fixed", "floating"])
def test_massless_links_and_a_spherical_joint_match_pinocchio_aba(arm_file, base_mode):
    model = load_urdf(arm_file, base_mode=base_mode)
    floating = base_mode == "floating"
    pm = pin.buildModelFromUrdf(str(arm_file), pin.JointModelFreeFlyer()) if floating \
        else pin.buildModelFromUrdf(str(arm_file))
    pd = pm.createData()
    assert model.n == 6 and pm.nv == model.n + (6 if floating else 0)
    joints = [pm.joints[pm.getJointId(name)] for name in model.joint_names]
    rng = np.random.default_rng(6)
    gravity = np.array([0.3, -0.2, -9.81])
    pm.gravity.linear = gravity
    for _ in range(STATES):
        q, qd, tau = rng.uniform(-2.0, 2.0, model.n), rng.normal(size=model.n), rng.normal(size=model.n)
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        g0, twist = np.eye(4), np.zeros(6)
        qp, vp, tau_pin = np.zeros(pm.nq), np.zeros(pm.nv), np.zeros(pm.nv)
        if floating:
            g0[:3, :3], g0[:3, 3] = quat_to_matrix(quat), rng.normal(size=3)
            twist = rng.normal(size=6)
            qp[:3], qp[3:7], vp[:6] = g0[:3, 3], [quat[1], quat[2], quat[3], quat[0]], twist
        for k, joint in enumerate(joints):
            qp[joint.idx_q], vp[joint.idx_v], tau_pin[joint.idx_v] = q[k], qd[k], tau[k]
        a = pin.aba(pm, pd, qp, vp, tau_pin)
        result = hybrid_dynamics(model, g0, twist, q, qd, np.zeros(model.n, bool), np.zeros(model.n), tau, gravity)
        _assert_close(result.qdd, a[[joint.idx_v for joint in joints]], "joint accelerations")
        if floating:
            _assert_close(result.base_acc, a[:6], "base acceleration")


def test_a_massless_tip_is_refused_passive_and_accepted_actuated(tmp_path):
    # the hand removed: the wrist's two joints move nothing but the massless wrist_1
    path = tmp_path / "no_hand.urdf"
    path.write_text(SPHERICAL_ARM.replace(HAND, "").replace(WRIST_ROLL, ""))
    with pytest.raises(ConfigError) as caught:
        load_urdf(path, base_mode="fixed")
    message = str(caught.value)
    assert message.startswith(f"{path}: joint 'wrist_pitch': passive, but what it moves has no inertia about its "
                              "axis (0 kg m^2)"), message
    assert load_urdf(path, base_mode="fixed", actuated={"wrist_pitch": True}).actuated.sum() == 1
    robot = tmp_path / "robot.toml"
    robot.write_text('[robot]\nkind = "urdf"\nurdf = "no_hand.urdf"\nbase = "fixed"\n\n[joints.wrist_pitch]\n'
                     'mode = "passive"\n')
    with pytest.raises(ConfigError, match=r"no_hand\.urdf: joint 'wrist_pitch': passive, but"):
        load_robot(robot)
    robot.write_text(robot.read_text().replace('mode = "passive"', 'mode = "actuated"'))
    assert load_robot(robot).actuated[load_robot(robot).joint_index("wrist_pitch")]


def test_a_floating_base_of_massless_links_is_refused(tmp_path):
    path = tmp_path / "ghost.urdf"
    path.write_text('<robot name="ghost"><link name="a"/><link name="b"/>'
                    + _revolute("j", "a", "b", "0 0 0", "0 0 1")
                    + "</robot>")
    with pytest.raises(ConfigError) as caught:
        load_urdf(path, base_mode="floating", actuated={"j": True})
    assert str(caught.value).startswith(f"{path}: link 'a': a floating base, but the tree has no inertia")
    assert load_urdf(path, base_mode="fixed", actuated={"j": True}).n == 1
