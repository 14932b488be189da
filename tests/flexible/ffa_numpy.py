"""A second implementation of sim/flexible.py's recursions, in numpy (vectorised over the sections), written
from the same equations as the compiled kernels (sim/flexible_kernels.py) with other data structures: the tests
compare the two to 1e-12. Results as :func:`sim.flexible.flexible_step`."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.dynamics import _ad_inv, _joint_pose
from sim.flexible import FlexData, store_inputs
from sim.model import Model

def _hat3(v: np.ndarray) -> np.ndarray:
    """Skew matrices (..., 3, 3) of vectors (..., 3)."""
    out = np.zeros(v.shape[:-1] + (3, 3))
    out[..., 0, 1], out[..., 0, 2] = -v[..., 2], v[..., 1]
    out[..., 1, 0], out[..., 1, 2] = v[..., 2], -v[..., 0]
    out[..., 2, 0], out[..., 2, 1] = -v[..., 1], v[..., 0]
    return out


def _exp_so3(w: np.ndarray) -> np.ndarray:
    """Rodrigues (..., 3, 3) of rotation vectors (..., 3) (series below the small-angle bound)."""
    theta2 = np.einsum("...a,...a->...", w, w)
    theta = np.sqrt(theta2)
    small = theta < SMALL_ROTATION
    safe = np.where(small, 1.0, theta)
    a = np.where(small, 1.0 - theta2 / 6.0, np.sin(safe) / safe)
    b = np.where(small, 0.5 - theta2 / 24.0, (1.0 - np.cos(safe)) / (safe * safe))
    W = _hat3(w)
    return np.eye(3) + a[..., None, None] * W + b[..., None, None] * (W @ W)


#: Below this rotation (rad) Rodrigues' coefficients are taken from their series (sin x / x to O(x^4): exact in
#: double precision there, and no 0/0).
SMALL_ROTATION = 1e-4


def _ad_inv_many(R: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Ad_{G^-1} (..., 6, 6) = [[R^T, -R^T hat(p)], [0, R^T]] of poses G = (R (..., 3, 3), p (..., 3))."""
    Rt = np.swapaxes(R, -1, -2)
    out = np.zeros(R.shape[:-2] + (6, 6))
    out[..., :3, :3] = Rt
    out[..., 3:, 3:] = Rt
    out[..., :3, 3:] = -Rt @ _hat3(p)
    return out


def _cross(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a x b (..., 3) (np.cross's axis handling costs more than the product for these small arrays)."""
    a0, a1, a2 = a[..., 0], a[..., 1], a[..., 2]
    b0, b1, b2 = b[..., 0], b[..., 1], b[..., 2]
    return np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], axis=-1)


def _ad(eta: np.ndarray, x: np.ndarray) -> np.ndarray:
    """ad_eta x (..., 6) = (Omega x x_v + V x x_w, Omega x x_w)."""
    V, W = eta[..., :3], eta[..., 3:]
    return np.concatenate([_cross(W, x[..., :3]) + _cross(V, x[..., 3:]), _cross(W, x[..., 3:])], axis=-1)


def _minus_coad(eta: np.ndarray, P: np.ndarray) -> np.ndarray:
    """-ad^T_eta P (..., 6) = (Omega x P_f, V x P_f + Omega x P_m) for a momentum-like wrench P (..., 6)."""
    V, W = eta[..., :3], eta[..., 3:]
    return np.concatenate([_cross(W, P[..., :3]), _cross(V, P[..., :3]) + _cross(W, P[..., 3:])], axis=-1)


def _nu(eta_s: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Velocity-product acceleration of a section (..., 6): ad_{eta_s} xi - blkdiag(hat w, hat w) xi, where
    xi = J q_d (..., 6) is its twist relative to the floating frame and w = xi's angular part."""
    w = xi[..., 3:]
    return _ad(eta_s, xi) - np.concatenate([_cross(w, xi[..., :3]), _cross(w, xi[..., 3:])], axis=-1)


def section_poses(X, Psi: np.ndarray, qe: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(R (..., 3, 3), p (..., 3)) of the sections at X (...) (m) whose field is Psi (..., 6, n_e), in the
    floating frame, for modal coordinates qe (n_e,)."""
    u = Psi @ qe
    R = _exp_so3(u[..., 3:])
    p = u[..., :3].copy()
    p[..., 0] += X
    return R, p


def _section_jacobian(R: np.ndarray, Psi: np.ndarray) -> np.ndarray:
    """J = blkdiag(R^T, R^T) Psi (..., 6, n_e): modal rates -> section twist in the section frame."""
    Rt = np.swapaxes(R, -1, -2)
    return np.concatenate([Rt @ Psi[..., :3, :], Rt @ Psi[..., 3:, :]], axis=-2)


# ----------------------------------------------------------------------------------------- the recursions
@dataclass
class _Tree:
    """Per-model constants of the recursion: the rest pose of each child in its attachment section's frame
    (``placement`` (N+1, 4, 4)), its section X_a, and the attachment field Psi(X_a) (6, n_e of the parent)."""
    placement: np.ndarray
    X_a: np.ndarray
    psi_a: dict


_TREES: dict = {}


def _tree(model: Model) -> _Tree:
    key = id(model)
    cached = _TREES.get(key)
    if cached is not None and cached[0] is model:
        return cached[1]
    parts = model.flexible
    placement = np.array(model.joint_placement)
    X_a = np.zeros(model.n_bodies)
    psi_a = {}
    for j in range(1, model.n_bodies):
        i = int(model.parent[j])
        if i in parts.bodies:
            X_a[j] = float(parts.attachments.get(j, 0.0))
            placement[j, 0, 3] -= X_a[j]   # rest section frame = floating frame translated by X_a e1
            psi_a[j] = np.asarray(parts.bodies[i].field(X_a[j]), dtype=float)
    tree = _Tree(placement, X_a, psi_a)
    _TREES[key] = (model, tree)
    return tree


def numpy_step(model: Model, data: FlexData, t: float, base_pose, base_twist, q, qd, qe, qed, qdd_actuated,
                  tau_passive, *, base_acc=None, use_laws: bool = True) -> FlexData:
    """One evaluation of the hybrid algorithm with modal bodies, in place on ``data`` (module docstring).

    Inputs as :func:`sim.dynamics.hybrid_step`, plus ``qe``, ``qed`` (n_e total,) the modal coordinates and
    rates (``data.offset[j]``: body j's first). Results: ``data.base_acc``, ``data.qdd``, ``data.tau``,
    ``data.base_wrench``, ``data.qedd`` (n_e,), ``data.eta_d`` (N+1, 6) floating-frame accelerations;
    ``data.f_ext[j]`` of a modal body ends holding its sections' wrench densities integrated too (floating frame,
    for the outputs' ``ext_wrench``).
    """
    parts = model.flexible
    bodies = parts.bodies
    tree = _tree(model)
    nb, n = model.n_bodies, model.n
    mode = model._mode_code
    tau = store_inputs(model, data, t, base_pose, base_twist, q, qd, qe, qed, tau_passive, use_laws)
    axis = model.joint_axis

    def modal(j):
        o = data.offset[j]
        return slice(o, o + bodies[j].n_e)

    # ---- forward 1: poses, twists, velocity products (children hang on their parent's section G_a)
    g, eta = data.g, data.eta
    Ad = np.zeros((nb, 6, 6))                        # Ad_{(G_a P E)^-1}: parent floating frame -> child frame
    S = [None] * nb                                  # B J_a (6, n_e parent): parent modal rates -> child twist
    nu = np.zeros((nb, 6))                           # velocity-product acceleration of the child's frame
    g[0] = base_pose
    eta[0] = data.base_twist
    PE = np.zeros((4, 4))
    B = np.zeros((6, 6))
    sec = {}
    for j in range(nb):
        if j > 0:
            i = int(model.parent[j])
            k = j - 1
            _joint_pose(tree.placement[j], axis[j], q[k], PE)
            _ad_inv(PE, B)
            if i in bodies:
                R_a, p_a = section_poses(tree.X_a[j], tree.psi_a[j], qe[modal(i)])
                G_a = np.eye(4)
                G_a[:3, :3], G_a[:3, 3] = R_a, p_a
                A_a = _ad_inv_many(R_a, p_a)
                J_a = _section_jacobian(R_a, tree.psi_a[j])
                xi = J_a @ qed[modal(i)]
                eta_a = A_a @ eta[i] + xi
                Ad[j] = B @ A_a
                S[j] = B @ J_a
                nu_a = B @ _nu(eta_a, xi)
                g[j] = g[i] @ G_a @ PE
            else:
                eta_a, nu_a = eta[i], 0.0
                Ad[j] = B
                g[j] = g[i] @ PE
            data.Xj[j] = PE
            data.AdJ[j] = Ad[j]
            rd = axis[j] * qd[k]
            eta[j] = B @ eta_a + rd
            nu[j] = nu_a + _ad(eta[j], rd)
            data.zeta[j] = nu[j]
        if j in bodies:
            body = bodies[j]
            R, p = section_poses(body.X, body.Psi, qe[modal(j)])
            A = _ad_inv_many(R, p)                               # (n_s, 6, 6)
            J = _section_jacobian(R, body.Psi)                       # (n_s, 6, n_e)
            xi = J @ qed[modal(j)]
            eta_s = A @ eta[j] + xi
            sec[j] = (R, A, J, eta_s, _nu(eta_s, xi))
            data.g_sec[j][:, :3, :3] = g[j, :3, :3] @ R
            data.g_sec[j][:, :3, 3] = p @ g[j, :3, :3].T + g[j, :3, 3]
            data.g_sec[j][:, 3, 3] = 1.0
            data.eta_sec[j][:] = eta_s

    # ---- force models (rigid wrenches on the frames, densities on the sections)
    data.f_ext.fill(0.0)
    data.f_gravity.fill(0.0)
    data.M_added.fill(0.0)
    for j in bodies:
        data.f_sec[j].fill(0.0)
        data.M_sec[j].fill(0.0)
    for force_model in model.force_models:
        force_model.apply(model, data, t)

    # ---- body sums: M*, Pi* (floating frame), C*, E*, Pe* (modes)
    gravity = model.gravity
    Mstar, Pistar = data.Mstar, data.Pistar
    C, E, Pe = {}, {}, {}
    for j in range(nb):
        M = model.inertia[j] + data.M_added[j]
        Mstar[j] = M
        Pistar[j] = _minus_coad(eta[j], M @ eta[j]) - data.f_ext[j] - data.f_gravity[j]
        Pistar[j] -= model.inertia[j][:, :3] @ (g[j, :3, :3].T @ gravity)
        if j in bodies:
            body = bodies[j]
            R, A, J, eta_s, nu_s = sec[j]
            M_s = body.M_s + data.M_sec[j]
            g_sec = np.einsum("sba,b->sa", data.g_sec[j][:, :3, :3], gravity)     # R_ws^T g
            F = data.f_sec[j] + np.einsum("sab,sb->sa", body.M_s[:, :, :3], g_sec)
            h = (np.einsum("sab,sb->sa", M_s, nu_s) + _minus_coad(eta_s, np.einsum("sab,sb->sa", M_s, eta_s)) - F)
            MA = M_s @ A
            wA = body.w[:, None, None] * A
            wJ = body.w[:, None, None] * J
            Mstar[j] += np.einsum("sca,scb->ab", wA, MA)
            Pistar[j] += np.einsum("sca,sc->a", wA, h)
            C[j] = np.einsum("sci,scb->ib", wJ, MA)
            E[j] = np.einsum("sci,scd,sdk->ik", wJ, M_s, J)
            Pe[j] = np.einsum("sci,sc->i", wJ, h) + body.K @ qe[modal(j)] + body.D @ qed[modal(j)]

    # ---- passive torques, backward recursion (condensing the modes)
    actuated = model.actuated
    qdd, qedd = data.qdd, data.qedd
    for k in range(n):
        if actuated[k]:
            qdd[k] = qdd_actuated[k]
        elif use_laws:
            tau[k] += -model.law_k[k] * (q[k] - model.law_r0[k]) - model.law_mu[k] * qd[k]
    Mt = np.zeros((nb, 6, 6))
    Pt = np.zeros((nb, 6))
    H = data.H
    Einv_C, Einv_P = {}, {}

    def condense(j):
        if j in bodies and bodies[j].n_e > 0:
            Einv_C[j] = np.linalg.solve(E[j], C[j])
            Einv_P[j] = np.linalg.solve(E[j], Pe[j])
            Mt[j] = Mstar[j] - C[j].T @ Einv_C[j]
            Mt[j] = 0.5 * (Mt[j] + Mt[j].T)
            Pt[j] = Pistar[j] - C[j].T @ Einv_P[j]
        else:
            Mt[j], Pt[j] = Mstar[j], Pistar[j]

    for j in range(nb - 1, 0, -1):
        condense(j)
        i = int(model.parent[j])
        k = j - 1
        Aj = axis[j]
        if actuated[k]:
            K = Mt[j]
            alpha = Pt[j] + Mt[j] @ (Aj * qdd[k] + nu[j])
        else:
            MA = Mt[j] @ Aj
            H[j] = Aj @ MA
            K = Mt[j] - np.outer(MA, MA) / H[j]
            alpha = K @ nu[j] + MA * (tau[k] - Aj @ Pt[j]) / H[j] + Pt[j]
        KAd = K @ Ad[j]
        Mstar[i] += Ad[j].T @ KAd
        Pistar[i] += Ad[j].T @ alpha
        if i in bodies:
            C[i] += S[j].T @ KAd
            E[i] += S[j].T @ K @ S[j]
            Pe[i] += S[j].T @ alpha
    condense(0)

    # ---- root
    eta_d = data.eta_d
    if mode == 0:
        eta_d[0] = -np.linalg.solve(Mt[0], Pt[0])
        data.base_wrench[:] = 0.0
    else:
        eta_d[0] = 0.0 if mode == 1 else (model.base_motion.evaluate(t)[2] if base_acc is None else base_acc)
        data.base_wrench[:] = Mt[0] @ eta_d[0] + Pt[0]
    data.base_acc[:] = eta_d[0]
    if 0 in bodies and bodies[0].n_e > 0:
        qedd[modal(0)] = -(Einv_C[0] @ eta_d[0] + Einv_P[0])

    # ---- forward 2
    for j in range(1, nb):
        i = int(model.parent[j])
        k = j - 1
        Aj = axis[j]
        mu = Ad[j] @ eta_d[i] + nu[j]
        if i in bodies:
            mu = mu + S[j] @ qedd[modal(i)]
        if actuated[k]:
            eta_d[j] = mu + Aj * qdd[k]
            tau[k] = Aj @ (Mt[j] @ eta_d[j] + Pt[j])
        else:
            qdd[k] = (tau[k] - Aj @ (Mt[j] @ mu + Pt[j])) / H[j]
            eta_d[j] = mu + Aj * qdd[k]
        if j in bodies and bodies[j].n_e > 0:
            qedd[modal(j)] = -(Einv_C[j] @ eta_d[j] + Einv_P[j])
    data.tau[:] = tau
    # The outputs' ext_wrench sums data.f_ext: the sections' force densities join it now, moved to the floating
    # frame (after the recursions, which took them per section).
    for j in bodies:
        data.f_ext[j] += np.einsum("s,sca,sc->a", bodies[j].w, sec[j][1], data.f_sec[j])
    return data
