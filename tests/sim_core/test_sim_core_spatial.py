"""Spatial algebra identities (sim/spatial.py) on random elements."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import expm

from sim.spatial import (Ad, Ad_inv, ad, coad, exp_se3, exp_so3, hat, inertia_parameters, inv_pose, log_se3,
                         log_so3, matrix_to_quat, quat_derivative, quat_exp, quat_mul, quat_to_matrix,
                         spatial_inertia, transform_inertia)

rng = np.random.default_rng(3)
TOL = 1e-12


def se3_hat(xi):
    out = np.zeros((4, 4))
    out[:3, :3] = hat(xi[3:])
    out[:3, 3] = xi[:3]
    return out


@pytest.mark.parametrize("seed", range(5))
def test_exp_log_and_adjoints(seed):
    r = np.random.default_rng(seed)
    xi, zeta = r.normal(size=6), r.normal(size=6)
    g, h = exp_se3(xi), exp_se3(zeta)
    assert np.allclose(g, expm(se3_hat(xi)), atol=TOL)
    assert np.allclose(exp_se3(log_se3(g)), g, atol=1e-10)
    assert np.allclose(exp_so3(log_so3(g[:3, :3])), g[:3, :3], atol=1e-10)
    assert np.allclose(Ad(g @ h), Ad(g) @ Ad(h), atol=TOL)
    assert np.allclose(Ad_inv(g), Ad(inv_pose(g)), atol=TOL)
    # Ad_g hat(xi) Ad_g^-1 in matrix form: g hat(zeta) g^-1 = hat(Ad_g zeta); ad is the bracket.
    assert np.allclose(g @ se3_hat(zeta) @ inv_pose(g), se3_hat(Ad(g) @ zeta), atol=1e-11)
    bracket = se3_hat(xi) @ se3_hat(zeta) - se3_hat(zeta) @ se3_hat(xi)
    assert np.allclose(bracket, se3_hat(ad(xi) @ zeta), atol=TOL)
    assert np.allclose(coad(xi), ad(xi).T)


def test_log_near_pi_and_quaternions():
    axis = np.array([1.0, 2.0, -0.5]) / np.linalg.norm([1.0, 2.0, -0.5])
    w = (np.pi - 1e-9) * axis
    assert np.allclose(log_so3(exp_so3(w)), w, atol=1e-7)
    for _ in range(5):
        q = rng.normal(size=4)
        q /= np.linalg.norm(q)
        R = quat_to_matrix(q)
        assert np.allclose(R @ R.T, np.eye(3), atol=TOL)
        q2 = matrix_to_quat(R)
        assert np.allclose(q2, q if q[0] >= 0 else -q, atol=TOL)
        p = rng.normal(size=4)
        p /= np.linalg.norm(p)
        assert np.allclose(quat_to_matrix(quat_mul(q, p)), R @ quat_to_matrix(p), atol=TOL)
        v = rng.normal(size=3)
        assert np.allclose(quat_to_matrix(quat_exp(v)), exp_so3(v), atol=TOL)
        # q_dot = q (0, omega) / 2 is R_dot = R hat(omega) (finite difference).
        h = 1e-6
        Rd = (quat_to_matrix(q + h * quat_derivative(q, v)) - quat_to_matrix(q - h * quat_derivative(q, v))) / (2 * h)
        assert np.allclose(Rd, R @ hat(v), atol=1e-7)


def test_spatial_inertia_energy_and_transform():
    m, c = 1.7, rng.normal(size=3)
    L = rng.normal(size=(3, 3))
    Ic = L @ L.T + np.eye(3)
    M = spatial_inertia(m, c, Ic)
    eta = rng.normal(size=6)
    v_com = eta[:3] + np.cross(eta[3:], c)
    assert eta @ M @ eta == pytest.approx(m * v_com @ v_com + eta[3:] @ Ic @ eta[3:], rel=1e-12)
    m2, c2, I2 = inertia_parameters(M)
    assert m2 == m and np.allclose(c2, c) and np.allclose(I2, Ic)
    g = exp_se3(rng.normal(size=6))
    Ma = transform_inertia(g, M)  # same body seen from frame a, with g = a g b
    mA, cA, IA = inertia_parameters(Ma)
    assert mA == pytest.approx(m) and np.allclose(cA, g[:3, :3] @ c + g[:3, 3])
    assert np.allclose(IA, g[:3, :3] @ Ic @ g[:3, :3].T)
