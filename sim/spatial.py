"""Spatial algebra on SE(3) / se(3) in the project's convention (docs/theory/hybrid-algorithm.md).

Conventions (same as Porez et al. 2014, section II, and Pinocchio's local frame):
- twist ``eta = (V, Omega)`` (6,): linear velocity first (m/s), angular second (rad/s), in the body's own frame;
- wrench ``f = (force, moment)`` (6,): N, N m;
- pose ``g = [[R, p], [0, 1]]`` (4, 4): R (3, 3) rotation, p (3,) position in m;
- ``Ad_g = [[R, hat(p) R], [0, R]]`` (6, 6) maps a twist in the child frame to the parent frame;
- ``ad_eta = [[hat(Omega), hat(V)], [0, hat(Omega)]]`` (6, 6); the co-adjoint is its transpose;
- unit quaternions are stored ``(w, x, y, z)``;
- spatial inertia ``M = [[m 1, -m hat(c)], [m hat(c), I_O]]`` (6, 6) about the frame origin.

The small kernels used inside the dynamics are ``@njit(cache=True)``; they also run as plain Python.
"""
from __future__ import annotations

import numpy as np
from numba import njit

#: Below this rotation angle (rad) the exp/log series expansions are used instead of the closed forms.
SMALL_ANGLE = 1e-8


@njit(cache=True)
def hat(w):
    """Skew matrix (3, 3) of a 3-vector: ``hat(w) @ x == cross(w, x)``."""
    out = np.zeros((3, 3))
    out[0, 1] = -w[2]
    out[0, 2] = w[1]
    out[1, 0] = w[2]
    out[1, 2] = -w[0]
    out[2, 0] = -w[1]
    out[2, 1] = w[0]
    return out


def vee(skew: np.ndarray) -> np.ndarray:
    """Inverse of :func:`hat`: the 3-vector (3,) of a skew matrix (3, 3)."""
    return np.array([skew[2, 1], skew[0, 2], skew[1, 0]])


@njit(cache=True)
def _mm3(A, B):
    """3x3 matrix product with explicit loops (no BLAS call, so the kernels compile fast)."""
    out = np.zeros((3, 3))
    for a in range(3):
        for b in range(3):
            out[a, b] = A[a, 0] * B[0, b] + A[a, 1] * B[1, b] + A[a, 2] * B[2, b]
    return out


@njit(cache=True)
def _mv3(A, x):
    """3x3 matrix times 3-vector with explicit loops."""
    out = np.zeros(3)
    for a in range(3):
        out[a] = A[a, 0] * x[0] + A[a, 1] * x[1] + A[a, 2] * x[2]
    return out


@njit(cache=True)
def Ad(g):
    """Adjoint (6, 6) of a pose g (4, 4): maps a twist in the child frame to the parent frame."""
    R = g[:3, :3]
    out = np.zeros((6, 6))
    out[:3, :3] = R
    out[3:, 3:] = R
    out[:3, 3:] = _mm3(hat(g[:3, 3]), R)
    return out


@njit(cache=True)
def Ad_inv(g):
    """Adjoint of g^-1 (6, 6): ``[[R^T, -R^T hat(p)], [0, R^T]]``, parent twist to child frame."""
    Rt = g[:3, :3].T.copy()  # (3, 3)
    out = np.zeros((6, 6))
    out[:3, :3] = Rt
    out[3:, 3:] = Rt
    out[:3, 3:] = -_mm3(Rt, hat(g[:3, 3]))
    return out


@njit(cache=True)
def ad(eta):
    """Small adjoint (6, 6) of a twist eta = (V, Omega): ``[[hat(Omega), hat(V)], [0, hat(Omega)]]``."""
    out = np.zeros((6, 6))
    wh = hat(eta[3:])
    out[:3, :3] = wh
    out[3:, 3:] = wh
    out[:3, 3:] = hat(eta[:3])
    return out


@njit(cache=True)
def coad(eta):
    """Co-adjoint ``ad_eta^T`` (6, 6), acting on wrenches (force, moment)."""
    return ad(eta).T.copy()


def inv_pose(g: np.ndarray) -> np.ndarray:
    """Inverse (4, 4) of a pose (4, 4)."""
    out = np.eye(4)
    R = g[:3, :3]
    out[:3, :3] = R.T
    out[:3, 3] = -R.T @ g[:3, 3]
    return out


@njit(cache=True)
def exp_so3(w):
    """Rotation matrix (3, 3) of a rotation vector w (3,) in rad (Rodrigues)."""
    theta = np.sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    W = hat(w)
    W2 = _mm3(W, W)
    if theta < SMALL_ANGLE:
        return np.eye(3) + W + 0.5 * W2
    a = np.sin(theta) / theta
    b = (1.0 - np.cos(theta)) / (theta * theta)
    return np.eye(3) + a * W + b * W2


def log_so3(R: np.ndarray) -> np.ndarray:
    """Rotation vector (3,) in rad of a rotation matrix (3, 3), angle in [0, pi]."""
    cos_theta = np.clip(0.5 * (np.trace(R) - 1.0), -1.0, 1.0)
    theta = float(np.arccos(cos_theta))
    if theta < SMALL_ANGLE:
        return 0.5 * vee(R - R.T)
    if np.pi - theta < 1e-6:
        # Near pi the antisymmetric part vanishes: take the axis from the symmetric part.
        B = 0.5 * (R + np.eye(3))
        k = int(np.argmax(np.diag(B)))
        axis = B[:, k] / np.sqrt(B[k, k])
        axis /= np.linalg.norm(axis)
        if np.dot(vee(R - R.T), axis) < 0.0:
            axis = -axis
        return theta * axis
    return theta / (2.0 * np.sin(theta)) * vee(R - R.T)


@njit(cache=True)
def exp_se3(xi):
    """Pose (4, 4) of a twist coordinate xi = (v, w) (6,): ``expm(hat(xi))``."""
    v = xi[:3]
    w = xi[3:]
    theta = np.sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    W = hat(w)
    W2 = _mm3(W, W)
    if theta < SMALL_ANGLE:
        V = np.eye(3) + 0.5 * W + W2 / 6.0
    else:
        V = (np.eye(3) + (1.0 - np.cos(theta)) / theta ** 2 * W
             + (theta - np.sin(theta)) / theta ** 3 * W2)
    out = np.eye(4)
    out[:3, :3] = exp_so3(w)
    out[:3, 3] = _mv3(V, v)
    return out


def log_se3(g: np.ndarray) -> np.ndarray:
    """Twist coordinate (6,) = (v, w) with ``exp_se3(log_se3(g)) == g``."""
    w = log_so3(g[:3, :3])
    theta = float(np.linalg.norm(w))
    W = hat(w)
    if theta < SMALL_ANGLE:
        V_inv = np.eye(3) - 0.5 * W + (W @ W) / 12.0
    else:
        half = 0.5 * theta
        coef = (1.0 - half * np.cos(half) / np.sin(half)) / theta ** 2
        V_inv = np.eye(3) - 0.5 * W + coef * (W @ W)
    return np.concatenate([V_inv @ g[:3, 3], w])


def pose(R: np.ndarray | None = None, p=None) -> np.ndarray:
    """Pose (4, 4) from a rotation (3, 3) and a position (3,) in m."""
    out = np.eye(4)
    if R is not None:
        out[:3, :3] = R
    if p is not None:
        out[:3, 3] = p
    return out


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF roll-pitch-yaw (rad) to a rotation matrix (3, 3): ``Rz(yaw) Ry(pitch) Rx(roll)``."""
    roll, pitch, yaw = (float(v) for v in rpy)
    cr, sr = np.cos(roll), np.sin(roll)
    cp, sp = np.cos(pitch), np.sin(pitch)
    cy, sy = np.cos(yaw), np.sin(yaw)
    Rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    Ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    Rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return Rz @ Ry @ Rx


# ----------------------------------------------------------------------------------------- quaternions
@njit(cache=True)
def quat_to_matrix(q):
    """Rotation matrix (3, 3) of a unit quaternion q = (w, x, y, z)."""
    w, x, y, z = q[0], q[1], q[2], q[3]
    out = np.empty((3, 3))
    out[0, 0] = 1 - 2 * (y * y + z * z)
    out[0, 1] = 2 * (x * y - w * z)
    out[0, 2] = 2 * (x * z + w * y)
    out[1, 0] = 2 * (x * y + w * z)
    out[1, 1] = 1 - 2 * (x * x + z * z)
    out[1, 2] = 2 * (y * z - w * x)
    out[2, 0] = 2 * (x * z - w * y)
    out[2, 1] = 2 * (y * z + w * x)
    out[2, 2] = 1 - 2 * (x * x + y * y)
    return out


def matrix_to_quat(R: np.ndarray) -> np.ndarray:
    """Unit quaternion (4,) = (w, x, y, z), w >= 0, of a rotation matrix (3, 3) (Shepperd's method)."""
    tr = np.trace(R)
    if tr > 0.0:
        s = 2.0 * np.sqrt(tr + 1.0)
        q = np.array([0.25 * s, (R[2, 1] - R[1, 2]) / s, (R[0, 2] - R[2, 0]) / s, (R[1, 0] - R[0, 1]) / s])
    elif R[0, 0] > R[1, 1] and R[0, 0] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[0, 0] - R[1, 1] - R[2, 2])
        q = np.array([(R[2, 1] - R[1, 2]) / s, 0.25 * s, (R[0, 1] + R[1, 0]) / s, (R[0, 2] + R[2, 0]) / s])
    elif R[1, 1] > R[2, 2]:
        s = 2.0 * np.sqrt(1.0 + R[1, 1] - R[0, 0] - R[2, 2])
        q = np.array([(R[0, 2] - R[2, 0]) / s, (R[0, 1] + R[1, 0]) / s, 0.25 * s, (R[1, 2] + R[2, 1]) / s])
    else:
        s = 2.0 * np.sqrt(1.0 + R[2, 2] - R[0, 0] - R[1, 1])
        q = np.array([(R[1, 0] - R[0, 1]) / s, (R[0, 2] + R[2, 0]) / s, (R[1, 2] + R[2, 1]) / s, 0.25 * s])
    q /= np.linalg.norm(q)
    return q if q[0] >= 0.0 else -q


@njit(cache=True)
def quat_mul(a, b):
    """Hamilton product (4,) of quaternions a, b stored (w, x, y, z)."""
    out = np.empty(4)
    out[0] = a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3]
    out[1] = a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2]
    out[2] = a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1]
    out[3] = a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0]
    return out


@njit(cache=True)
def quat_derivative(q, omega):
    """Time derivative (4,) of a unit quaternion (w, x, y, z) for a body angular velocity omega (3,) rad/s
    expressed in the body frame: ``q_dot = q * (0, omega) / 2``."""
    out = np.empty(4)
    w, x, y, z = q[0], q[1], q[2], q[3]
    ox, oy, oz = omega[0], omega[1], omega[2]
    out[0] = 0.5 * (-x * ox - y * oy - z * oz)
    out[1] = 0.5 * (w * ox + y * oz - z * oy)
    out[2] = 0.5 * (w * oy + z * ox - x * oz)
    out[3] = 0.5 * (w * oz + x * oy - y * ox)
    return out


def quat_exp(w: np.ndarray) -> np.ndarray:
    """Unit quaternion (4,) of a rotation vector w (3,) in rad."""
    theta = float(np.linalg.norm(w))
    if theta < SMALL_ANGLE:
        q = np.array([1.0, 0.5 * w[0], 0.5 * w[1], 0.5 * w[2]])
        return q / np.linalg.norm(q)
    s = np.sin(0.5 * theta) / theta
    return np.array([np.cos(0.5 * theta), s * w[0], s * w[1], s * w[2]])


# ----------------------------------------------------------------------------------------- inertia
def spatial_inertia(mass: float, com, inertia_com) -> np.ndarray:
    """Spatial inertia (6, 6) about the frame origin from the mass (kg), the centre of mass c (3,) in m in
    that frame and the rotational inertia I_c (3, 3) in kg m^2 about the centre of mass (frame axes):
    ``[[m 1, -m hat(c)], [m hat(c), I_c - m hat(c)^2]]`` (parallel-axis theorem)."""
    c = np.asarray(com, dtype=float)
    C = hat(c)
    out = np.zeros((6, 6))
    out[:3, :3] = mass * np.eye(3)
    out[:3, 3:] = -mass * C
    out[3:, :3] = mass * C
    out[3:, 3:] = np.asarray(inertia_com, dtype=float) - mass * (C @ C)
    return out


def transform_inertia(g: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Express a spatial inertia M (6, 6) given in frame b in frame a, with g = a g b (4, 4):
    ``Ad_{b g a}^T M Ad_{b g a}``."""
    A = Ad_inv(g)
    return A.T @ M @ A


def inertia_parameters(M: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """Inverse of :func:`spatial_inertia`: (mass kg, com (3,) m, I_c (3, 3) kg m^2)."""
    m = float(M[0, 0])
    if m <= 0.0:
        return m, np.zeros(3), M[3:, 3:].copy()
    C = M[3:, :3] / m
    c = vee(C)
    return m, c, M[3:, 3:] + m * (C @ C)
