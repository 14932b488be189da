"""Modal (flexible) bodies in the hybrid algorithm (sim/flexible.py; docs/flexible.md): checked by identities and
independent references, never by snapshots.

- no modes: the rigid algorithm (sim.dynamics) on the equivalent rigid model, to 1e-12;
- a fixed-base tree with a modal body mid-chain and a child at mid-span: the accelerations equal an independent
  Euler-Lagrange computation (mass matrix from finite-difference twist Jacobians of the poses, Coriolis from
  finite differences of that mass matrix, potential gradients by finite differences);
- forward -> inverse: actuated joints fed the accelerations a passive evaluation found return its torques;
- a cantilever's modal frequencies against Euler-Bernoulli's and St-Venant torsion's closed forms, and the period
  of its free vibration in a simulation against the first of them;
- a free body with a modal appendage, undamped and without gravity: world momentum constant, energy drift of
  RK4's order (dt^4);
- the stiff limit: stiffness x10^k, the trajectory tends to the rigid model's as 1/stiffness.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from sim.dynamics import hybrid_dynamics, kinetic_energy, momentum_world, potential_energy
from sim.flexible import (FlexData, FlexibleParts, ModalBody, beam_modes, flexible_step, modal_energy, modal_gravity_energy,
                          modal_momentum_world)
from sim.laws import ViscoElastic
from sim.model import ModelBuilder
from sim.simulation import Simulation
from sim.spatial import exp_se3, pose, spatial_inertia, transform_inertia

_SPEC = importlib.util.spec_from_file_location("ffa_numpy", Path(__file__).with_name("ffa_numpy.py"))
_REFERENCE = sys.modules.setdefault("ffa_numpy", importlib.util.module_from_spec(_SPEC))
_SPEC.loader.exec_module(_REFERENCE)
numpy_step = _REFERENCE.numpy_step     # the numpy implementation the compiled kernels are checked against

BEAM_LENGTH = 0.5          # m
BEAM_SECTION = dict(rho_A=0.8, rho_I=(2e-4, 1e-4, 1e-4), EI_y=5.0, EI_z=7.0, GJ=3.0, centroid=(0.0, 0.01, 0.0))


def _inertia(rng) -> np.ndarray:
    return spatial_inertia(rng.uniform(0.1, 1.0), rng.normal(size=3) * 0.05, np.diag(rng.uniform(1e-3, 1e-2, 3)))


def _axis(rng) -> np.ndarray:
    return rng.normal(size=3)


def rigid_equivalent(beam) -> np.ndarray:
    """The spatial inertia (6, 6) of a modal body's sections at rest, about its floating frame."""
    return sum(w * transform_inertia(pose(p=[x, 0.0, 0.0]), M) for x, w, M in zip(beam.X, beam.w, beam.M_s))


def tree(seed: int, beam, *, rigid: bool = False, base_mode: str = "floating", actuated_beam: bool = True,
         gravity=(0.0, 0.0, -9.81)):
    """base - l1 - beam (modal) - c1 (at mid-span) - c2, and c3 at the beam's tip: random axes, placements and
    inertias (the same for a seed), passive viscoelastic joints but the beam's (actuated unless told)."""
    rng = np.random.default_rng(seed)
    b = ModelBuilder("base", _inertia(rng), base_mode=base_mode, gravity=gravity)
    b.add_body("l1", "base", axis=_axis(rng), placement=pose(p=rng.normal(size=3) * 0.1), inertia=_inertia(rng),
               joint_law=ViscoElastic(2.0, 0.1))
    b.add_body("beam", "l1", axis=_axis(rng), placement=pose(p=rng.normal(size=3) * 0.1),
               inertia=rigid_equivalent(beam) if rigid else np.zeros((6, 6)), actuated=actuated_beam,
               joint_law=None if actuated_beam else ViscoElastic(3.0, 0.05))
    b.add_body("c1", "beam", axis=_axis(rng), placement=pose(p=[0.5 * BEAM_LENGTH, 0.02, 0.0]),
               inertia=_inertia(rng), joint_law=ViscoElastic(1.0, 0.05))
    b.add_body("c2", "c1", axis=_axis(rng), placement=pose(p=[0.1, 0.0, 0.0]), inertia=_inertia(rng))
    b.add_body("c3", "beam", axis=_axis(rng), placement=pose(p=[BEAM_LENGTH, 0.0, 0.01]), inertia=_inertia(rng),
               joint_law=ViscoElastic(0.5, 0.02))
    model = b.build()
    if rigid:
        return model
    return model.replace(flexible=FlexibleParts({2: beam}, {3: 0.5 * BEAM_LENGTH, 5: BEAM_LENGTH}))


@pytest.mark.parametrize("base_mode", ["floating", "fixed"])
def test_compiled_kernels_equal_the_numpy_implementation(base_mode):
    """The compiled recursions (sim/flexible_kernels.py) = a numpy implementation of the same equations with other
    data structures (tests/flexible/ffa_numpy.py), random tree, three mode families (padded to one size), 1e-12."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=2, bending_z=1, torsion=2, sections=8)
    model = tree(5, beam, actuated_beam=False, base_mode=base_mode)
    rng = np.random.default_rng(4)
    n = model.n
    q, qd, qdd, tau = (rng.normal(size=n) for _ in range(4))
    qe, qed = rng.normal(size=beam.n_e) * 0.02, rng.normal(size=beam.n_e)
    pose0, twist = exp_se3(rng.normal(size=6)), rng.normal(size=6)
    compiled = flexible_step(model, FlexData(model), 0.0, pose0, twist, q, qd, qe, qed, qdd, tau)
    reference = numpy_step(model, FlexData(model), 0.0, pose0, twist, q, qd, qe, qed, qdd, tau)
    for name in ("base_acc", "qdd", "tau", "qedd", "base_wrench", "eta_d", "f_ext"):
        a, b = getattr(compiled, name), getattr(reference, name)
        assert np.abs(a - b).max() <= 1e-12 * (1.0 + np.abs(b).max()), name


def test_no_modes_is_the_rigid_algorithm():
    """A modal body without modes (its mass on the sections) = the rigid body of the same inertia, to 1e-12."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, sections=8)
    flexible, rigid = tree(3, beam), tree(3, beam, rigid=True)
    rng = np.random.default_rng(7)
    n = rigid.n
    for _ in range(3):
        q, qd, qdd, tau = (rng.normal(size=n) for _ in range(4))
        pose0, twist = exp_se3(rng.normal(size=6)), rng.normal(size=6)
        ref = hybrid_dynamics(rigid, pose0, twist, q, qd, rigid.actuated, qdd, tau, use_laws=True)
        data = flexible_step(flexible, FlexData(flexible), 0.0, pose0, twist, q, qd, np.zeros(0), np.zeros(0),
                             qdd, tau)
        scale = 1.0 + np.abs(ref.qdd).max()
        assert np.abs(data.base_acc - ref.base_acc).max() < 1e-12 * scale
        assert np.abs(data.qdd - ref.qdd).max() < 1e-12 * scale
        assert np.abs(data.tau - ref.tau).max() < 1e-12 * (1.0 + np.abs(ref.tau).max())


# ----------------------------------------------------------------------------------------- Euler-Lagrange
def _vee_twist(g: np.ndarray, dg: np.ndarray) -> np.ndarray:
    """(V, Omega) of g^-1 dg (4, 4)."""
    X = np.linalg.solve(g, dg)
    return np.array([X[0, 3], X[1, 3], X[2, 3], X[2, 1], X[0, 2], X[1, 0]])


#: Step of the fourth-order central differences below (coordinates are rad, m and modal units of order 0.1): the
#: Euler-Lagrange residual falls as its 4th power (4.5e-8, 2.8e-9, 1.8e-10 at 2e-3, 1e-3, 5e-4): truncation.
FD_STEP = 5e-4


def _fd(f, x: np.ndarray, k: int):
    """d f / d x_k by the fourth-order central difference."""
    e = np.zeros_like(x)
    e[k] = FD_STEP
    return (8.0 * (f(x + e) - f(x - e)) - (f(x + 2 * e) - f(x - 2 * e))) / (12.0 * FD_STEP)


def _poses(model, beam, x: np.ndarray) -> list:
    """World poses of every rigid body and of every section of the beam (fixed base at the model's base pose)
    for generalized coordinates x = (q (n,), q_e (n_e,)): written from the definitions, not from the code."""
    n = model.n
    q, qe = x[:n], x[n:]
    parts = model.flexible

    def section(X) -> np.ndarray:
        u = beam.field(X) @ qe
        G = exp_se3(np.concatenate([np.zeros(3), u[3:]]))
        G[:3, 3] = [X + u[0], u[1], u[2]]
        return G

    g = [model.base_pose]
    for j in range(1, model.n_bodies):
        i = model.parent[j]
        joint = exp_se3(model.joint_axis[j] * q[j - 1])
        if i in parts.bodies:
            X_a = parts.attachments[j]
            rest = np.linalg.inv(pose(p=[X_a, 0.0, 0.0])) @ model.joint_placement[j]
            g.append(g[i] @ section(X_a) @ rest @ joint)
        else:
            g.append(g[i] @ model.joint_placement[j] @ joint)
    j_beam = next(iter(parts.bodies))
    return g + [g[j_beam] @ section(X) for X in beam.X]


def _jacobians(model, beam, x):
    """Twist Jacobians (bodies + sections, 6, n + n_e) of the poses, by central differences."""
    g0 = _poses(model, beam, x)
    columns = [_fd(lambda y: np.array(_poses(model, beam, y)), x, k) for k in range(x.size)]
    return np.array([[_vee_twist(g0[b], columns[k][b]) for k in range(x.size)] for b in range(len(g0))]
                    ).transpose(0, 2, 1)


def _mass_matrix(model, beam, x):
    J = _jacobians(model, beam, x)
    nb = model.n_bodies
    M = np.einsum("bai,bac,bck->ik", J[:nb], model.inertia, J[:nb])
    return M + np.einsum("s,sai,sac,sck->ik", beam.w, J[nb:], beam.M_s, J[nb:])


def _potential(model, beam, x):
    g = _poses(model, beam, x)
    nb, n = model.n_bodies, model.n
    V = 0.0
    for b in range(nb):
        m = model.inertia[b, 0, 0]
        mc = np.array([model.inertia[b, 5, 1], model.inertia[b, 3, 2], model.inertia[b, 4, 0]])
        V -= (m * g[b][:3, 3] + g[b][:3, :3] @ mc) @ model.gravity
    for s, (w, M) in enumerate(zip(beam.w, beam.M_s)):
        gs = g[nb + s]
        mc = np.array([M[5, 1], M[3, 2], M[4, 0]])
        V -= w * (M[0, 0] * gs[:3, 3] + gs[:3, :3] @ mc) @ model.gravity
    qe = x[n:]
    strain = x[:n] - model.law_r0
    return V + 0.5 * np.sum(model.law_k * strain * strain) + 0.5 * qe @ beam.K @ qe


def test_euler_lagrange_fixed_base_tree():
    """Passive tree on a fixed base, the modal body mid-chain with a child at mid-span and one at its tip, gravity
    and damping: the hybrid accelerations (joints and modes) = M(x)^-1 (Q - C(x, xd) xd - dV/dx)."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=3, sections=8, damping_ratio=1e-3)
    model = tree(11, beam, base_mode="fixed", actuated_beam=False)
    rng = np.random.default_rng(2)
    n, n_e = model.n, beam.n_e
    x = np.concatenate([rng.normal(size=n) * 0.5, rng.normal(size=n_e) * 0.05])
    xd = np.concatenate([rng.normal(size=n), rng.normal(size=n_e) * 0.5])
    data = flexible_step(model, FlexData(model), 0.0, model.base_pose, np.zeros(6), x[:n], xd[:n], x[n:], xd[n:],
                         np.zeros(n), np.zeros(n))
    hybrid = np.concatenate([data.qdd, data.qedd])

    M = _mass_matrix(model, beam, x)
    dM = [_fd(lambda y: _mass_matrix(model, beam, y), x, k) for k in range(x.size)]
    coriolis = sum(dM[k] * xd[k] for k in range(x.size)) @ xd - 0.5 * np.array([xd @ D @ xd for D in dM])
    gradient = np.array([_fd(lambda y: np.array(_potential(model, beam, y)), x, k) for k in range(x.size)])
    damping = np.concatenate([model.law_mu * xd[:n], beam.D @ xd[n:]])
    reference = np.linalg.solve(M, -coriolis - gradient - damping)
    assert np.abs(hybrid - reference).max() < 1e-9 * np.abs(reference).max()


def test_forward_inverse_round_trip():
    """Free base: the passive evaluation's joint accelerations, imposed on the same joints made actuated, give
    back the torques that were applied (and the same base and modal accelerations)."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=2, bending_z=2, torsion=2, sections=8)
    model = tree(5, beam, actuated_beam=False)
    rng = np.random.default_rng(4)
    n = model.n
    q, qd, tau = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    qe, qed = rng.normal(size=beam.n_e) * 0.02, rng.normal(size=beam.n_e)
    pose0, twist = exp_se3(rng.normal(size=6)), rng.normal(size=6)
    forward = flexible_step(model, FlexData(model), 0.0, pose0, twist, q, qd, qe, qed, np.zeros(n), tau,
                            use_laws=False)
    inverse_model = model.replace(actuated=np.ones(n, dtype=bool))
    inverse = flexible_step(inverse_model, FlexData(inverse_model), 0.0, pose0, twist, q, qd, qe, qed,
                            forward.qdd.copy(), np.zeros(n), use_laws=False)
    assert np.abs(inverse.tau - tau).max() < 1e-9 * (1.0 + np.abs(tau).max())
    assert np.abs(inverse.base_acc - forward.base_acc).max() < 1e-9 * (1.0 + np.abs(forward.base_acc).max())
    assert np.abs(inverse.qedd - forward.qedd).max() < 1e-9 * (1.0 + np.abs(forward.qedd).max())


# ----------------------------------------------------------------------------------------- cantilever
#: beta_n l of a clamped-free Euler-Bernoulli beam (roots of cos x cosh x = -1).
CANTILEVER_ROOTS = (1.8751040687, 4.6940911330, 7.8547574382)


def test_cantilever_frequencies_closed_form():
    """Six polynomial modes per family: the first three bending frequencies (each plane) and the first torsion
    frequency from eig(K_e, E*) within 0.1 % of the closed forms."""
    l, rho_A, EI_y, EI_z, GJ, rho_Ip = 0.4, 0.3, 2.0, 3.5, 1.5, 4e-4
    beam = beam_modes(l, rho_A=rho_A, rho_I=(rho_Ip, 0.0, 0.0), EI_y=EI_y, EI_z=EI_z, GJ=GJ, bending_y=6,
                      bending_z=6, torsion=6, sections=8)
    found = beam.frequencies_hz()
    expected = [(b / l) ** 2 / (2 * math.pi) * math.sqrt(EI / rho_A) for EI in (EI_y, EI_z) for b in CANTILEVER_ROOTS]
    expected.append(1.0 / (4.0 * l) * math.sqrt(GJ / rho_Ip))
    for f in expected:
        assert np.min(np.abs(found / f - 1.0)) < 1e-3, (f, found)
    # the polynomial basis overestimates (Rayleigh-Ritz): the lowest found is the first bending's, from above
    assert 0.0 <= found[0] / expected[0] - 1.0 < 1e-3


def test_cantilever_free_vibration_period():
    """A beam clamped on a fixed base (its joint held), released from its first mode shape: its tip crosses zero
    at the first bending frequency of the closed form (0.1 %: three modes, 0.03 % above it; RK4 with 150 steps
    per period, stable for the third mode at 34 f1; 3 periods)."""
    l, rho_A, EI = 0.4, 0.3, 2.0
    beam = beam_modes(l, rho_A=rho_A, rho_I=(0.0, 0.0, 0.0), EI_y=EI, bending_y=3, sections=8)
    f1 = (CANTILEVER_ROOTS[0] / l) ** 2 / (2 * math.pi) * math.sqrt(EI / rho_A)
    b = ModelBuilder("base", spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 1e-3), base_mode="fixed", gravity=(0, 0, 0))
    b.add_body("beam", "base", axis=[0, 0, 1], actuated=True)
    model = b.build().replace(flexible=FlexibleParts({1: beam}))
    sim = Simulation(model, "rk4", dt=1.0 / (150 * f1))
    E = np.einsum("s,sai,sab,sbk->ik", beam.w, beam.Psi, beam.M_s, beam.Psi)
    values, vectors = np.linalg.eig(np.linalg.solve(E, beam.K))
    first = np.real(vectors[:, np.argmin(np.real(values))])
    sim.set_modal_state(qe=0.01 * first / np.abs(first).max())
    times, out = sim.record(450, 1)
    tip = out["modal_q"] @ beam.field(l)[1]
    crossings = [t0 - y0 * (t1 - t0) / (y1 - y0) for t0, t1, y0, y1 in zip(times, times[1:], tip, tip[1:])
                 if y0 * y1 < 0.0]
    period = 2.0 * (crossings[-1] - crossings[0]) / (len(crossings) - 1)
    assert len(crossings) >= 5
    assert abs(1.0 / period / f1 - 1.0) < 1e-3


# ----------------------------------------------------------------------------------------- free body
def _free_body(stiffness_scale: float = 1.0):
    beam = beam_modes(BEAM_LENGTH, rho_A=0.8, rho_I=(2e-4, 1e-4, 1e-4), EI_y=5.0 * stiffness_scale,
                      GJ=3.0 * stiffness_scale, bending_y=2, sections=6, centroid=(0.0, 0.01, 0.0),
                      damping_ratio=0.0)
    b = ModelBuilder("base", spatial_inertia(0.5, [0.01, 0, 0], np.diag([1e-3, 2e-3, 3e-3])), gravity=(0, 0, 0))
    b.add_body("beam", "base", axis=[0, 1, 1], placement=pose(p=[0.05, 0, 0]), joint_law=ViscoElastic(1.0, 0.0))
    b.add_body("tip", "beam", axis=[1, 0, 0], placement=pose(p=[BEAM_LENGTH, 0, 0]),
               inertia=spatial_inertia(0.05, [0.02, 0, 0], np.eye(3) * 1e-5), joint_law=ViscoElastic(0.3, 0.0))
    return b.build().replace(flexible=FlexibleParts({1: beam}, {2: BEAM_LENGTH})), beam


def _momentum_energy(sim):
    sim.outputs()   # evaluates at the current state
    model, data = sim.model, sim.data
    kinetic, strain = modal_energy(model, data)
    energy = kinetic + strain + kinetic_energy(model, data) + potential_energy(model, data)
    return momentum_world(model, data) + modal_momentum_world(model, data), energy


def _free_run(dt: float, duration: float = 0.2):
    model, beam = _free_body()
    sim = Simulation(model, "rk4", dt=dt)
    sim.set_state(qd=[2.0, -1.0], base_twist=[0.1, 0.0, 0.2, 0.5, -1.0, 0.3])
    sim.set_modal_state(qe=[0.02, -0.01], qed=[0.5, -1.0])
    start = _momentum_energy(sim)
    sim.advance(duration)
    return start, _momentum_energy(sim)


def test_free_flexible_body_momentum_and_energy():
    """Undamped, no gravity, modes in one bending plane (the linear FFA's kinematics is then exact): the world
    momentum's and the energy's errors over 0.2 s are RK4's, falling at least as dt^4 (measured: momentum
    1.6e-7 -> 9.8e-9 relative, energy 7.5e-5 -> 2.4e-6, from dt = 1 ms to 0.5 ms)."""
    (p0, e0), (p1, e1) = _free_run(1e-3)
    (p0h, e0h), (p1h, e1h) = _free_run(5e-4)
    momentum, momentum_half = (np.abs(b - a).max() / np.abs(a).max() for a, b in ((p0, p1), (p0h, p1h)))
    assert momentum_half < 1e-7
    assert momentum / momentum_half > 12.0     # 2^4 = 16 for a fourth-order method
    drift, drift_half = abs(e1 - e0) / e0, abs(e1h - e0h) / e0h
    assert drift_half < 1e-5
    assert drift / drift_half > 12.0


def test_modal_gravity_energy_is_the_sections_weight():
    """The modal bodies' gravity energy at rest = -m g . x_G of the beam's distributed mass."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=1, sections=8)
    model = tree(2, beam)
    data = flexible_step(model, FlexData(model), 0.0, np.eye(4), np.zeros(6), np.zeros(model.n), np.zeros(model.n),
                         np.zeros(beam.n_e), np.zeros(beam.n_e), np.zeros(model.n), np.zeros(model.n))
    M = rigid_equivalent(beam)
    m, mc = M[0, 0], np.array([M[5, 1], M[3, 2], M[4, 0]])
    g_beam = data.g[2]
    expected = -(m * g_beam[:3, 3] + g_beam[:3, :3] @ mc) @ model.gravity
    assert modal_gravity_energy(model, data) == pytest.approx(expected, rel=1e-12)


def test_stiff_limit_tends_to_the_rigid_body():
    """Stiffness x10^k: the base's trajectory over 20 ms tends to the rigid model's, the error falling ~10x per
    decade (1/stiffness; measured 1.05e-3 -> 7.7e-5, x13.6)."""
    model_rigid_beam = _free_body()[1]
    errors = []
    for scale in (1e2, 1e3):
        model, _ = _free_body(scale)
        rigid = model.replace(flexible=None, inertia=np.concatenate(
            [model.inertia[:1], rigid_equivalent(model_rigid_beam)[None], model.inertia[2:]]))
        ends = []
        for m in (model, rigid):
            sim = Simulation(m, "rk4", dt=1e-4, fused=False)
            sim.set_state(qd=[2.0, -1.0], base_twist=[0.1, 0.0, 0.2, 0.5, -1.0, 0.3])
            sim.advance(0.02)
            ends.append(sim.y[:13].copy())
        errors.append(np.abs(ends[0] - ends[1]).max())
    assert 5.0 < errors[0] / errors[1] < 20.0


def test_bad_modal_bodies_are_refused_naming_the_part():
    """Modes that move the clamped root, a child attached off its parent's span, a section attachment under a
    rigid parent: one ValueError each, naming what is wrong."""
    beam = beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=1, sections=4)
    with pytest.raises(ValueError, match="clamped root"):
        ModalBody(length=beam.length, X=beam.X.copy(), w=beam.w.copy(), Psi=beam.Psi.copy(), M_s=beam.M_s.copy(),
                  K=beam.K.copy(), D=beam.D.copy(), field=lambda X: beam.field(X) + 1e-3)
    model = tree(1, beam, rigid=True)
    with pytest.raises(ValueError, match="'c1' attached at X = 0.7 m, outside"):
        model.replace(flexible=FlexibleParts({2: beam}, {3: 0.7}))
    with pytest.raises(ValueError, match="parent 'base' is not a modal body"):
        model.replace(flexible=FlexibleParts({2: beam}, {1: 0.1}))
    with pytest.raises(ValueError, match="expected 0..8"):
        beam_modes(BEAM_LENGTH, **BEAM_SECTION, torsion=9)


def test_torsion_wing_body_sums_closed_form():
    """Boyer et al. 2017, Appendix 2's unit test: a torsion-only beam with I_2 = I_3 = I_rho / 2, at rest: M* has
    mass mu0, first moment (mu_x0, 0, 0), I = diag(mu2, mu_xx0 + mu2/2, mu_xx0 + mu2/2); C* = (0,0,0, mu2_tau, 0,0)
    per mode; E* = mu2_tautau; K_e = int G I_rho phi_t'^2 (exact integrals of (X/l)^p, constant sections)."""
    l, rho_A, rho_Ir, GIr, modes = 0.3, 0.5, 2e-4, 0.8, 3
    beam = beam_modes(l, rho_A=rho_A, rho_I=(rho_Ir, 0.5 * rho_Ir, 0.5 * rho_Ir), GJ=GIr, torsion=modes, sections=8)
    b = ModelBuilder("base", spatial_inertia(1.0, [0, 0, 0], np.eye(3)), base_mode="fixed", gravity=(0, 0, 0))
    b.add_body("wing", "base", axis=[0, 0, 1], actuated=True)
    model = b.build().replace(flexible=FlexibleParts({1: beam}))
    data = flexible_step(model, FlexData(model), 0.0, np.eye(4), np.zeros(6), np.zeros(1), np.zeros(1),
                         np.zeros(modes), np.zeros(modes), np.zeros(1), np.zeros(1))
    p = np.arange(1, modes + 1)
    mu0, mu_x0, mu_xx0, mu2 = rho_A * l, rho_A * l ** 2 / 2, rho_A * l ** 3 / 3, rho_Ir * l
    expected_M = np.zeros((6, 6))
    expected_M[:3, :3] = mu0 * np.eye(3)
    expected_M[3:, :3] = spatial_inertia(1.0, [mu_x0, 0, 0], np.zeros((3, 3)))[3:, :3]   # hat(first moment)
    expected_M[:3, 3:] = expected_M[3:, :3].T
    expected_M[3:, 3:] = np.diag([mu2, mu_xx0 + mu2 / 2, mu_xx0 + mu2 / 2])
    expected_C = np.zeros((modes, 6))
    expected_C[:, 3] = rho_Ir * l / (p + 1)
    expected_E = rho_Ir * l / (p[:, None] + p[None, :] + 1)
    expected_K = GIr * np.outer(p, p) / (l * (p[:, None] + p[None, :] - 1))
    work = data.work
    assert np.abs(data.Mstar[1] - expected_M).max() < 1e-14
    assert np.abs(work["C"][1] - expected_C).max() < 1e-15
    assert np.abs(work["E"][1] - expected_E).max() < 1e-15
    assert np.abs(beam.K - expected_K).max() < 1e-12 * np.abs(expected_K).max()


def test_cantilever_against_a_fine_rigid_chain():
    """The modal cantilever's first two bending frequencies against a chain of 20 rigid slices with joint springs
    k = EI / l_k (l_k = slice length, half at the clamped root; the spec's GEA discretisation) linearised with the
    rigid hybrid algorithm: the chain is within 0.2 % / 0.6 % of the closed form (measured -0.115 % / -0.40 %, the
    spec's 0.12 / 0.4 %), the modal body within 0.1 % (+0.0000 / +0.0014 %), the two within 0.3 % / 0.7 %."""
    l, rho_A, EI, slices = 0.4, 0.3, 2.0, 20
    delta = l / slices
    b = ModelBuilder("base", spatial_inertia(1.0, [0, 0, 0], np.eye(3)), base_mode="fixed", gravity=(0, 0, 0))
    parent = "base"
    for k in range(slices):
        m = rho_A * delta
        b.add_body(f"s{k}", parent, axis=[0, 0, 1], placement=pose(p=[0.0 if k == 0 else delta, 0, 0]),
                   inertia=spatial_inertia(m, [0.5 * delta, 0, 0], np.diag([0.0, m * delta ** 2 / 12, m * delta ** 2 / 12])),
                   joint_law=ViscoElastic(EI / (0.5 * delta if k == 0 else delta), 0.0))
        parent = f"s{k}"
    chain = b.build()
    n = chain.n
    step = 1e-6
    stiffness = np.zeros((n, n))
    for k in range(n):
        q = np.zeros(n)
        q[k] = step
        plus = hybrid_dynamics(chain, np.eye(4), np.zeros(6), q, np.zeros(n), chain.actuated, np.zeros(n), np.zeros(n),
                               use_laws=True).qdd
        stiffness[:, k] = -(plus - (-plus)) / (2 * step)   # qdd is odd in q about rest (no gravity, linear springs)
    chain_f = np.sort(np.sqrt(np.abs(np.linalg.eigvals(stiffness)))) / (2 * math.pi)
    beam = beam_modes(l, rho_A=rho_A, rho_I=(0.0, 0.0, 0.0), EI_y=EI, bending_y=6, sections=8)
    modal_f = beam.frequencies_hz()
    closed = [(r / l) ** 2 / (2 * math.pi) * math.sqrt(EI / rho_A) for r in CANTILEVER_ROOTS[:2]]
    for order, (chain_band, agree_band) in enumerate(((2e-3, 3e-3), (6e-3, 7e-3))):
        assert abs(chain_f[order] / closed[order] - 1.0) < chain_band
        assert abs(modal_f[order] / closed[order] - 1.0) < 1e-3
        assert abs(chain_f[order] / modal_f[order] - 1.0) < agree_band


def test_the_rigid_entry_points_refuse_modal_bodies():
    """hybrid_dynamics / hybrid_step do not read the modal coordinates: given a model with modal bodies they raise
    instead of returning the dynamics of another (rigid) system."""
    from sim.dynamics import hybrid_step
    from sim.model import Data

    model = tree(5, beam_modes(BEAM_LENGTH, **BEAM_SECTION, bending_y=1, sections=4))
    n = model.n
    with pytest.raises(ValueError, match="modal bodies"):
        hybrid_dynamics(model, np.eye(4), np.zeros(6), np.zeros(n), np.zeros(n), model.actuated, np.zeros(n),
                        np.zeros(n))
    with pytest.raises(ValueError, match="modal bodies"):
        hybrid_step(model, Data(model), 0.0, np.eye(4), np.zeros(6), np.zeros(n), np.zeros(n), np.zeros(n),
                    np.zeros(n))
