"""The hybrid algorithm against Pinocchio (an independent implementation) on random URDF trees.

Random trees (branching, 1-40 joints, revolute / continuous / prismatic joints of random axes, random
placements and inertial frames, some fixed joints) are written to temporary URDF files, read by our loader
and by ``pin.buildModelFromUrdf`` with a free-flyer root. Checks (relative agreement RTOL):
- all passive == pin.aba;
- all actuated == floating-base inverse dynamics (crba + nle, base acceleration from the first 6 rows);
- mixed == partitioned solve of crba / nle;
- fixed and imposed base: base acceleration given, the support wrench == the free-flyer rows of rnea.
Pinocchio's free flyer: q = [p world, quat (x, y, z, w)], v = [V local, Omega local] = our base twist, and its
acceleration is the derivative of v in the local frame = our eta_d_0.
"""
from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from sim import hybrid_dynamics, load_urdf
from sim.model import Data
from sim.spatial import quat_to_matrix
from sim.testing import assert_relatively_close
from sim.urdf import random_tree_urdf

#: Relative agreement required with Pinocchio (both in double precision; errors here are ~1e-14).
RTOL = 1e-9
SIZES = [1, 2, 3, 5, 8, 13, 17, 25, 40]


class Pair:
    """Our model and Pinocchio's model of the same random URDF, with state conversion."""

    def __init__(self, tmp_path, rng, n_joints, base_mode="floating"):
        path = tmp_path / f"tree_{n_joints}_{base_mode}.urdf"
        path.write_text(random_tree_urdf(rng, n_joints))
        self.model = load_urdf(path, base_mode=base_mode)
        self.pm = pin.buildModelFromUrdf(str(path), pin.JointModelFreeFlyer())
        self.pd = self.pm.createData()
        self.gravity = rng.normal(size=3) * 5.0
        self.pm.gravity.linear = self.gravity
        self.idx_v = np.array([self.pm.joints[self.pm.getJointId(name)].idx_v for name in self.model.joint_names])
        self.rng = rng

    def random_state(self):
        n, rng = self.model.n, self.rng
        q, qd = rng.uniform(-2.0, 2.0, n), rng.normal(size=n)
        quat = rng.normal(size=4)
        quat /= np.linalg.norm(quat)
        g0 = np.eye(4)
        g0[:3, :3] = quat_to_matrix(quat)
        g0[:3, 3] = rng.normal(size=3)
        twist = rng.normal(size=6)
        return g0, twist, q, qd, quat

    def pin_state(self, g0, twist, q, qd, quat):
        qp, vp = np.zeros(self.pm.nq), np.zeros(self.pm.nv)
        qp[:3] = g0[:3, 3]
        qp[3:7] = [quat[1], quat[2], quat[3], quat[0]]
        vp[:6] = twist
        for k, name in enumerate(self.model.joint_names):
            joint = self.pm.joints[self.pm.getJointId(name)]
            if joint.nq == 2:  # continuous joint: (cos q, sin q)
                qp[joint.idx_q:joint.idx_q + 2] = [np.cos(q[k]), np.sin(q[k])]
            else:
                qp[joint.idx_q] = q[k]
            vp[joint.idx_v] = qd[k]
        return qp, vp

    def partitioned(self, qp, vp, known_acc, a_known, tau_known):
        """Solve M a + nle = tau with a given on ``known_acc`` dofs and tau given elsewhere."""
        M = pin.crba(self.pm, self.pd, qp)
        M = np.triu(M) + np.triu(M, 1).T
        nle = pin.nonLinearEffects(self.pm, self.pd, qp, vp)
        K, U = known_acc, ~known_acc
        a = np.zeros(self.pm.nv)
        a[K] = a_known[K]
        a[U] = np.linalg.solve(M[np.ix_(U, U)], tau_known[U] - nle[U] - M[np.ix_(U, K)] @ a[K])
        tau = M @ a + nle
        tau[U] = tau_known[U]
        return a, tau


def assert_close(ours, theirs, what):
    assert_relatively_close(ours, theirs, what, RTOL)


@pytest.mark.parametrize("n_joints", SIZES)
def test_all_passive_matches_aba(tmp_path, n_joints):
    rng = np.random.default_rng(100 + n_joints)
    pair = Pair(tmp_path, rng, n_joints)
    n = pair.model.n
    for _ in range(3):
        g0, twist, q, qd, quat = pair.random_state()
        tau = rng.normal(size=n) * 3.0
        qp, vp = pair.pin_state(g0, twist, q, qd, quat)
        tau_pin = np.zeros(pair.pm.nv)
        tau_pin[pair.idx_v] = tau
        a = pin.aba(pair.pm, pair.pd, qp, vp, tau_pin)
        res = hybrid_dynamics(pair.model, g0, twist, q, qd, np.zeros(n, bool), np.zeros(n), tau, pair.gravity)
        assert_close(res.base_acc, a[:6], "base acceleration")
        assert_close(res.qdd, a[pair.idx_v], "joint accelerations")
        assert_close(res.tau, tau, "passive torques returned")
        assert np.all(res.base_wrench == 0.0)


@pytest.mark.parametrize("n_joints", SIZES)
def test_all_actuated_matches_floating_base_inverse_dynamics(tmp_path, n_joints):
    rng = np.random.default_rng(200 + n_joints)
    pair = Pair(tmp_path, rng, n_joints)
    n = pair.model.n
    for _ in range(3):
        g0, twist, q, qd, quat = pair.random_state()
        qdd = rng.normal(size=n) * 3.0
        qp, vp = pair.pin_state(g0, twist, q, qd, quat)
        known = np.zeros(pair.pm.nv, bool)
        known[pair.idx_v] = True
        a_known = np.zeros(pair.pm.nv)
        a_known[pair.idx_v] = qdd
        a, tau = pair.partitioned(qp, vp, known, a_known, np.zeros(pair.pm.nv))
        res = hybrid_dynamics(pair.model, g0, twist, q, qd, np.ones(n, bool), qdd, np.zeros(n), pair.gravity)
        assert_close(res.base_acc, a[:6], "base acceleration")
        assert_close(res.tau, tau[pair.idx_v], "actuated torques")
        assert_close(res.qdd, qdd, "imposed accelerations returned")
        # Same thing through rnea: with the base acceleration found, the base rows must vanish.
        tau_rnea = pin.rnea(pair.pm, pair.pd, qp, vp, a)
        assert_close(tau_rnea[:6], np.zeros(6), "rnea base rows")


@pytest.mark.parametrize("n_joints", SIZES)
def test_mixed_matches_partitioned_solve(tmp_path, n_joints):
    rng = np.random.default_rng(300 + n_joints)
    pair = Pair(tmp_path, rng, n_joints)
    n = pair.model.n
    data = Data(pair.model)
    for _ in range(3):
        g0, twist, q, qd, quat = pair.random_state()
        actuated = rng.random(n) < 0.5
        qdd, tau = rng.normal(size=n) * 3.0, rng.normal(size=n) * 3.0
        qp, vp = pair.pin_state(g0, twist, q, qd, quat)
        known = np.zeros(pair.pm.nv, bool)
        known[pair.idx_v[actuated]] = True
        a_known, tau_known = np.zeros(pair.pm.nv), np.zeros(pair.pm.nv)
        a_known[pair.idx_v] = qdd
        tau_known[pair.idx_v] = tau
        a, tau_ref = pair.partitioned(qp, vp, known, a_known, tau_known)
        res = hybrid_dynamics(pair.model, g0, twist, q, qd, actuated, qdd, tau, pair.gravity, data=data)
        assert_close(res.base_acc, a[:6], "base acceleration")
        assert_close(res.qdd, a[pair.idx_v], "joint accelerations")
        assert_close(res.tau, tau_ref[pair.idx_v], "joint torques")


@pytest.mark.parametrize("base_mode", ["fixed", "imposed"])
@pytest.mark.parametrize("n_joints", [1, 6, 17])
def test_support_wrench_matches_rnea_base_rows(tmp_path, n_joints, base_mode):
    """Fixed base (zero twist and acceleration) and imposed base (given twist and acceleration): the wrench
    the support exerts on the base equals the free-flyer rows of Pinocchio's inverse dynamics."""
    rng = np.random.default_rng(400 + n_joints)
    pair = Pair(tmp_path, rng, n_joints, base_mode=base_mode)
    n = pair.model.n
    for _ in range(3):
        g0, twist, q, qd, quat = pair.random_state()
        base_acc = rng.normal(size=6)
        if base_mode == "fixed":
            twist, base_acc = np.zeros(6), np.zeros(6)
        actuated = rng.random(n) < 0.5
        qdd, tau = rng.normal(size=n), rng.normal(size=n)
        qp, vp = pair.pin_state(g0, twist, q, qd, quat)
        known = np.zeros(pair.pm.nv, bool)
        known[:6] = True
        known[pair.idx_v[actuated]] = True
        a_known, tau_known = np.zeros(pair.pm.nv), np.zeros(pair.pm.nv)
        a_known[:6] = base_acc
        a_known[pair.idx_v] = qdd
        tau_known[pair.idx_v] = tau
        a, tau_ref = pair.partitioned(qp, vp, known, a_known, tau_known)
        res = hybrid_dynamics(pair.model, g0, twist, q, qd, actuated, qdd, tau, pair.gravity,
                              base_acc=None if base_mode == "fixed" else base_acc)
        assert_close(res.base_acc, base_acc, "base acceleration")
        assert_close(res.base_wrench, tau_ref[:6], "support wrench")
        assert_close(res.qdd, a[pair.idx_v], "joint accelerations")
        assert_close(res.tau, tau_ref[pair.idx_v], "joint torques")


def test_joint_order_has_parents_first(tmp_path):
    rng = np.random.default_rng(7)
    pair = Pair(tmp_path, rng, 40)
    parent = pair.model.parent
    assert parent[0] == -1 and all(0 <= parent[j] < j for j in range(1, pair.model.n_bodies))
    # Same set of moving joints as Pinocchio, and the same total mass (fixed links merged).
    assert sorted(pair.model.joint_names) == sorted(pair.pm.names[2:])
    assert abs(pair.model.total_mass() - sum(I.mass for I in pair.pm.inertias)) < 1e-12 * pair.model.total_mass()
