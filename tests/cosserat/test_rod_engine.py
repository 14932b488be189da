"""The paper-free checks of the rod engine (docs/cosserat.md "Checks"): closure of the wrench ODE, contacts
met, the rigid limit, momentum of a free rod, and convergence to the discrete N-link chain."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.linalg import expm

from sim.cosserat.algorithms import free_instant, kinematic_instant, run_free, run_kinematic, world_momentum
from sim.cosserat.examples import earthworm_robot, inchworm_robot, snake_robot
from sim.cosserat.rod import block1, build_nodes, round_rod
from sim.cosserat.strains import TABLE_I, StrainField, constant_field
from sim.dynamics import hybrid_dynamics
from sim.model import ModelBuilder
from sim.cosserat.lie import ad
from sim.spatial import pose, spatial_inertia

LENGTH, RADIUS, RHO, G = 1.0, 0.02, 1000.0, 9.81
#: Gauss-Legendre points for the arc's inertia: its integrand is trigonometric of degree <= 2 in kappa l = 2.5
#: rad, which 40 points integrate to rounding.
ARC_GAUSS_POINTS = 40


def examples(n_X=200):
    rod = round_rod(LENGTH, RADIUS, RHO, n_X=n_X)
    heavy = round_rod(LENGTH, RADIUS, RHO, gravity=(0.0, 0.0, -G), n_X=n_X)
    return [earthworm_robot(rod, 0.004, 1.0, 0.05, 0.3), inchworm_robot(heavy, 1.8, 2 * math.pi * 0.25),
            snake_robot(rod, 10.0, 0.5, -0.5, 0.5, 3.0, 4.0, 5), snake_robot(heavy, 10.0, 0.5, -0.5, 0.5, 3.0, 4.0, 5,
                                                                              b_y=0.5)]


@pytest.mark.parametrize("index", range(4))
def test_wrench_closes_and_anchors_hold_along_a_run(index):
    """Check 1 at every recorded instant (through the turn and both inchworm phases): |Lam(l) - F+| <= 1e-8
    max|Lam|; check 2 for the anchors (earthworm, inchworm), whose Block 0 uses the same quadrature: 1e-9."""
    ex = examples()[index]
    states = run_kinematic(ex.rod, ex.strain, ex.contacts, ex.driver_at, 4.5, 0.05, 5, g_o=ex.g_o)
    assert len(states) == 19
    closure = max(s.closure for s in states)
    print(f"{ex.name}: largest closure residual {closure:.2e}")
    assert closure <= 1e-8
    assert max(np.max(np.abs(s.Lam)) for s in states) > 1e-6       # a real wrench, not a zero that closes
    if ex.name in ("earthworm", "inchworm"):
        assert max(s.contact_residual for s in states) <= 1e-9


@pytest.mark.parametrize("index", [2, 3])
def test_snake_pegs_are_met_on_a_fine_grid(index):
    """Check 2 for the follower supports: the pegs' constraint V_Y (V_Z, Omega_X) = 0 is the continuous identity
    K_t = V_o K'; the recomputed twist meets it to 1e-9 once X is resolved (n_X = 1000, O(h^4))."""
    ex = examples(n_X=1000)[index]
    for t in (0.37, 4.2):                             # before and inside the turn
        state = kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(t), t, np.eye(4))
        print(f"{ex.name} t={t}: contact residual {state.contact_residual:.2e}")
        assert state.contact_residual <= 1e-9
        assert all(np.any(F != 0.0) for _, F in state.wrenches)


def arc_inertia(kappa: float, rod) -> np.ndarray:
    """Spatial inertia (6, 6) about the head of a rod bent to constant curvature kappa about z, by direct
    quadrature of the closed-form arc (p(X) = (sin kX, 1 - cos kX, 0) / k, R(X) = Rz(kX))."""
    rhoA, J = rod.Mc[0], np.diag(rod.Mc[3:])

    def density(X):
        c, s = math.cos(kappa * X), math.sin(kappa * X)
        p = np.array([s, 1.0 - c, 0.0]) / kappa
        R = np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])
        out = np.zeros((6, 6))
        P = np.array([[0, -p[2], p[1]], [p[2], 0, -p[0]], [-p[1], p[0], 0]])
        out[:3, :3] = rhoA * np.eye(3)
        out[:3, 3:] = -rhoA * P
        out[3:, :3] = rhoA * P
        out[3:, 3:] = -rhoA * P @ P + R @ J @ R.T
        return out
    nodes, weights = np.polynomial.legendre.leggauss(ARC_GAUSS_POINTS)
    X = 0.5 * rod.length * (nodes + 1.0)
    return 0.5 * rod.length * sum(w * density(x) for w, x in zip(weights, X))


def test_rigid_limit_matches_the_rigid_body():
    """Check 3: constant strain, free, no gravity: Mo is the rigid body's inertia (direct quadrature of the arc)
    and etad_o obeys Euler's equations ``M etad = ad_eta^T M eta``."""
    rod = round_rod(LENGTH, RADIUS, RHO, n_X=200)
    kappa = 2.5
    field = constant_field("planar", np.array([1.0, 0, 0, 0, 0, kappa]))
    eta_o = np.array([0.3, -0.2, 0.1, 0.7, -0.4, 1.1])
    state = free_instant(rod, field, 0.0, np.eye(4), eta_o)
    Mo = block1(rod, state.nodes, np.eye(4), eta_o).Mo
    M = arc_inertia(kappa, rod)
    assert np.max(np.abs(Mo - M)) <= 1e-10 * np.max(np.abs(M))
    euler = np.linalg.solve(M, ad(eta_o[None])[0].T @ M @ eta_o)
    assert np.max(np.abs(state.etad_o - euler)) <= 1e-9 * np.max(np.abs(euler))
    assert np.max(np.abs(euler)) > 0.1


def test_free_rod_keeps_its_momentum_while_it_bends():
    """Check 4: a free rod, time-varying curvatures K_Y, K_Z (case 4), no load: world momentum constant to 1e-9
    (relative) over 2 s. The residual drift is the O(h^4) mismatch between the Magnus poses and the Simpson
    twists, and RK4's O(dt^4): n_X = 160, dt = 10 ms keep both near 2e-10."""
    w = math.pi / 2.0

    def law(X, t):
        s, c = math.sin(w * t), math.cos(w * t)
        value = np.stack([0.25 * s * np.cos(np.pi * X), 0.4 * np.sin(w * t + X)], 1)
        d_X = np.stack([-0.25 * np.pi * s * np.sin(np.pi * X), 0.4 * np.cos(w * t + X)], 1)
        d_t = np.stack([0.25 * w * c * np.cos(np.pi * X), 0.4 * w * np.cos(w * t + X)], 1)
        d_tt = np.stack([-0.25 * w * w * s * np.cos(np.pi * X), -0.4 * w * w * np.sin(w * t + X)], 1)
        return value, d_X, d_t, d_tt
    rod = round_rod(LENGTH, RADIUS, RHO, n_X=160)
    states = run_free(rod, StrainField(TABLE_I["twistless"], law), 2.0, 1e-2,
                      eta_o=np.array([0.2, 0.0, 0.0, 0.0, 0.0, 0.3]), record_every=50)
    P = np.array([world_momentum(rod, s) for s in states])
    drift = np.max(np.abs(P - P[0])) / np.max(np.abs(P[0]))
    print(f"free rod momentum drift over 2 s: {drift:.2e}")
    assert drift <= 1e-9
    travel = np.linalg.norm(states[-1].g_o[:3, 3])
    assert travel > 0.1                                          # it moved and turned: the check is not at rest
    assert max(s.closure for s in states) <= 1e-8


def chain(N: int, rod):
    """The N-link chain of the rod: link j covers [jh, (j+1)h], revolute joints about z at X_j = jh."""
    h = rod.length / N
    m = rod.Mc[0] * h
    I_c = np.diag([rod.Mc[3] * h, rod.Mc[4] * h + m * h * h / 12.0, rod.Mc[5] * h + m * h * h / 12.0])
    builder = ModelBuilder("link0", spatial_inertia(m, [h / 2, 0, 0], I_c), gravity=(0.0, 0.0, 0.0))
    for j in range(1, N):
        builder.add_body(f"link{j}", f"link{j - 1}", joint_name=f"joint{j}", axis=[0, 0, 1],
                         placement=pose(p=[h, 0, 0]), inertia=spatial_inertia(m, [h / 2, 0, 0], I_c), actuated=True)
    return builder.build()


def test_planar_rod_is_the_limit_of_the_n_link_chain():
    """Check 5: ``sim.hybrid_dynamics`` on the N-link chain with ``r_j = int K_Z`` over [X_j -/+ h/2]: base
    acceleration -> etad_o and ``tau_j -> -C_Z(X_j)``, at first order in h (measured order ~1.0)."""
    A, B, w = 2.0, 1.0, 2.0 * math.pi

    def law(X, t):
        s, c = math.sin(w * t), math.cos(w * t)
        return ((A * s * np.cos(np.pi * X) + B * X)[:, None], (-A * np.pi * s * np.sin(np.pi * X) + B)[:, None],
                (A * w * c * np.cos(np.pi * X))[:, None], (-A * w * w * s * np.cos(np.pi * X))[:, None])

    def angles(a, b, t):
        S = (np.sin(np.pi * b) - np.sin(np.pi * a)) / np.pi
        s, c = math.sin(w * t), math.cos(w * t)
        return A * s * S + B * (b * b - a * a) / 2.0, A * w * c * S, -A * w * w * s * S

    rod = round_rod(LENGTH, RADIUS, RHO, n_X=400)
    t, eta_o = 0.3, np.array([0.1, 0.05, 0.0, 0.0, 0.0, 0.2])
    state = free_instant(rod, StrainField(TABLE_I["planar"], law), t, np.eye(4), eta_o)
    errors = []
    for N in (8, 16, 32, 64):
        h = rod.length / N
        X_j = h * np.arange(1, N)
        q, qd, qdd = angles(X_j - h / 2, X_j + h / 2, t)
        result = hybrid_dynamics(chain(N, rod), np.eye(4), eta_o, q, qd, np.ones(N - 1, bool), qdd,
                                 np.zeros(N - 1), np.zeros(3))
        C_Z = np.interp(X_j, state.nodes.X, state.Lam[:, 5])
        errors.append((np.max(np.abs(result.base_acc - state.etad_o)) / np.max(np.abs(state.etad_o)),
                       np.max(np.abs(result.tau + C_Z)) / np.max(np.abs(C_Z))))
    errors = np.array(errors)
    order = np.log2(errors[:-1] / errors[1:])
    print("N-link errors (base acc, torque):", errors.round(5).tolist(), "orders:", order.round(3).tolist())
    assert np.all(order > 0.9) and np.all(order < 1.2)
    assert errors[-1, 0] < 0.04 and errors[-1, 1] < 0.015


def test_magnus_poses_match_the_closed_form_arc():
    """The pose pass: a constant-curvature, stretched and sheared rod lands where exp(l hat(xi)) says."""
    rod = round_rod(LENGTH, RADIUS, RHO, n_X=20)
    xi = np.array([1.02, 0.01, -0.03, 0.4, 1.3, -2.1])
    nodes = build_nodes(rod, constant_field("reissner", xi), 0.0)
    twist = np.zeros((4, 4))
    twist[:3, :3] = [[0, -xi[5], xi[4]], [xi[5], 0, -xi[3]], [-xi[4], xi[3], 0]]
    twist[:3, 3] = xi[:3]
    assert np.max(np.abs(nodes.g_rel[-1] - expm(rod.length * twist))) < 1e-12
