"""Batched SE(3) operations for the rod's X-integrations (Boyer et al. 2012 notation).

Every function takes a leading batch axis (N nodes along X); twists and wrenches are (N, 6) in the paper's order
(linear then angular: eta = (V, Omega), xi = (Gamma, K), Lam = (N, C)); poses are (N, 4, 4). They agree with the
single-element :mod:`sim.spatial` functions (``Ad``, ``Ad_inv``, ``ad``, ``exp_se3``), which are compiled for
one element and would cost a call per node here.
"""
from __future__ import annotations

import numpy as np

#: Below this rotation angle (rad) the Rodrigues coefficients use their Taylor series: the closed forms divide
#: by theta^2..theta^3 and lose all digits there; the series' truncation error at 1e-4 rad is below 1e-16.
SERIES_ANGLE = 1e-4


#: hat(w)_ij = -epsilon_ijk w_k: the Levi-Civita symbol with its sign, so that one einsum builds every skew matrix.
_SKEW = -np.array([[[0, 0, 0], [0, 0, 1], [0, -1, 0]],
                   [[0, 0, -1], [0, 0, 0], [1, 0, 0]],
                   [[0, 1, 0], [-1, 0, 0], [0, 0, 0]]], dtype=float)


def hat3(w: np.ndarray) -> np.ndarray:
    """Skew matrices (N, 3, 3) of 3-vectors w (N, 3): ``hat3(w) @ x == cross(w, x)``."""
    return np.einsum("ijk,...k->...ij", _SKEW, w)


def prefix_products(steps: np.ndarray) -> np.ndarray:
    """``P_0 = I``, ``P_j = E_0 E_1 ... E_{j-1}`` (N + 1, 4, 4) for steps E (N, 4, 4), by a log-depth scan
    (Hillis-Steele: ceil(log2 N) batched products instead of N Python-level ones)."""
    out = np.concatenate([np.eye(4)[None], steps], axis=0)
    shift = 1
    while shift < out.shape[0]:
        out[shift:] = out[:-shift] @ out[shift:]
        shift *= 2
    return out


def ad(eta: np.ndarray) -> np.ndarray:
    """Small adjoints (N, 6, 6) of twists (N, 6): ``[[hat(Omega), hat(V)], [0, hat(Omega)]]``; ``ad_xi eta = [xi, eta]``."""
    out = np.zeros(eta.shape[:-1] + (6, 6))
    w = hat3(eta[..., 3:])
    out[..., :3, :3] = w
    out[..., 3:, 3:] = w
    out[..., :3, 3:] = hat3(eta[..., :3])
    return out


def Ad(g: np.ndarray) -> np.ndarray:
    """Adjoints (N, 6, 6) of poses g (N, 4, 4): a twist in the child frame -> the parent frame."""
    R, p = g[..., :3, :3], g[..., :3, 3]
    out = np.zeros(g.shape[:-2] + (6, 6))
    out[..., :3, :3] = R
    out[..., 3:, 3:] = R
    out[..., :3, 3:] = hat3(p) @ R
    return out


def Ad_inv(g: np.ndarray) -> np.ndarray:
    """Adjoints (N, 6, 6) of g^-1: a twist in the parent frame -> the child frame."""
    Rt = np.swapaxes(g[..., :3, :3], -1, -2)
    out = np.zeros(g.shape[:-2] + (6, 6))
    out[..., :3, :3] = Rt
    out[..., 3:, 3:] = Rt
    out[..., :3, 3:] = -Rt @ hat3(g[..., :3, 3])
    return out


def exp_se3(xi: np.ndarray) -> np.ndarray:
    """Poses (N, 4, 4) ``exp(hat(xi))`` of twists xi (N, 6) (closed form; series near zero rotation)."""
    v, w = xi[..., :3], xi[..., 3:]
    theta = np.linalg.norm(w, axis=-1)[..., None, None]
    small = theta < SERIES_ANGLE
    t = np.where(small, 1.0, theta)
    t2 = t * t
    a = np.where(small, 1.0 - theta ** 2 / 6.0, np.sin(t) / t)
    b = np.where(small, 0.5 - theta ** 2 / 24.0, (1.0 - np.cos(t)) / t2)
    c = np.where(small, 1.0 / 6.0 - theta ** 2 / 120.0, (t - np.sin(t)) / (t2 * t))
    W = hat3(w)
    W2 = W @ W
    eye = np.eye(3)
    out = np.zeros(xi.shape[:-1] + (4, 4))
    out[..., :3, :3] = eye + a * W + b * W2
    out[..., :3, 3] = ((eye + b * W + c * W2) @ v[..., None])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def inv_pose(g: np.ndarray) -> np.ndarray:
    """Inverses (N, 4, 4) of poses (N, 4, 4)."""
    Rt = np.swapaxes(g[..., :3, :3], -1, -2)
    out = np.zeros_like(g)
    out[..., :3, :3] = Rt
    out[..., :3, 3] = -(Rt @ g[..., :3, 3, None])[..., 0]
    out[..., 3, 3] = 1.0
    return out


def mv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Batched matrix-vector products (N, m) of A (N, m, k) and x (N, k) (or one x (k,) for every A)."""
    return A @ x if x.ndim == 1 else np.einsum("nij,nj->ni", A, x)


def mtv(A: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Batched transposed products ``A^T x`` (N, k) of A (N, m, k) and x (N, m)."""
    return np.einsum("nji,nj->ni", A, x)
