"""The passive elastic rod (sim/cosserat/passive.py): cantilever statics against Timoshenko and the elastica,
the first bending frequency, and energy conservation of a released cantilever (docs/cosserat.md)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from sim.cosserat.passive import (PassiveRod, basis, energy, generalized_accelerations, round_section_stiffness,
                                  run, static_equilibrium, strain_field, tail_wrench, tip_position, weak_residual)
from sim.cosserat.rod import accelerations, build_nodes, round_rod, twists

LENGTH, RADIUS, RHO, E = 1.0, 0.02, 1000.0, 1e8
G, SHEAR_FACTOR = E / 3.0, 27.0 / 28.0
H = round_section_stiffness(RADIUS, E, G, SHEAR_FACTOR)
EI, KGA = H[5], H[1]
#: Shear (Gamma_Y) and curvature (K_Z) of the planar cantilever, indices into xi.
SHEAR_Y, BEND_Z = 1, 5


def cantilever(free, modes, tip_load=0.0, n_X=40):
    return PassiveRod(round_rod(LENGTH, RADIUS, RHO, n_X=n_X), H, free, modes,
                      tip_force=np.array([0.0, -tip_load, 0.0]))


def test_small_tip_load_deflects_as_timoshenko_says():
    """``P l^2 / EI = 1e-3``: tip deflection ``P l^3 / (3 EI) + P l / (kGA)`` (measured within 1.2e-7; the shear
    term alone is 9e-4 of it, so Euler-Bernoulli would fail this band)."""
    P = 1e-3 * EI / LENGTH ** 2
    model = cantilever((SHEAR_Y, BEND_Z), 4, P)
    deflection = -tip_position(model, static_equilibrium(model))[1]
    timoshenko = P * LENGTH ** 3 / (3 * EI) + P * LENGTH / KGA
    assert deflection == pytest.approx(timoshenko, rel=1e-5)
    assert abs(deflection / (P * LENGTH ** 3 / (3 * EI)) - 1.0) > 5e-4


def test_large_tip_load_bends_to_the_elastica():
    """Inextensible, unshearable, ``P l^2 / EI = 1``: tip deflection 0.30172 l, shortening 0.05643 l
    (the elastica's tabulated values, to their last digit)."""
    model = cantilever((BEND_Z,), 6, EI / LENGTH ** 2)
    tip = tip_position(model, static_equilibrium(model))
    assert -tip[1] / LENGTH == pytest.approx(0.30172, abs=1e-5)
    assert (LENGTH - tip[0]) / LENGTH == pytest.approx(0.05643, abs=1e-5)


def test_first_bending_frequency_is_euler_bernoulli():
    """``omega_1 = 1.8751^2 sqrt(EI / (rho A l^4))`` within 1e-3 (measured -2.3e-4: the section's rotary inertia)."""
    model = cantilever((BEND_Z,), 4)
    n, amplitude = model.n_q, 1e-7             # small enough that the response is linear to ~1e-7
    J = np.array([generalized_accelerations(model, amplitude * np.eye(n)[j], np.zeros(n)) / amplitude for j in range(n)]).T
    omega = np.sort(np.sqrt(np.linalg.eigvals(-J).real))
    expected = 1.8751 ** 2 * math.sqrt(EI / (model.rod.Mc[0] * LENGTH ** 4))
    print(f"first bending frequency {omega[0]:.6f} rad/s, Euler-Bernoulli {expected:.6f}")
    assert omega[0] == pytest.approx(expected, rel=1e-3)
    assert abs(omega[0] / expected - 1.0) > 1e-5                    # a real rod, not the formula


def test_released_cantilever_keeps_its_energy():
    """Bent by a 2 N tip load, released: kinetic + elastic energy constant; the drift over 0.1 s falls with dt
    (RK4: 1e-5 at dt = 1 ms)."""
    bent = static_equilibrium(cantilever((BEND_Z,), 3, 2.0))
    model = cantilever((BEND_Z,), 3)
    drifts = []
    for dt in (2e-3, 1e-3):
        motion = run(model, bent, 0.1, dt, record_every=int(round(0.025 / dt)))
        total = np.array([sum(energy(model, a, b)) for a, b in zip(motion.q, motion.v)])
        drifts.append(np.max(np.abs(total - total[0])) / total[0])
        assert energy(model, motion.q[-1], motion.v[-1])[0] > 0.1 * total[0]       # it is moving: energy is exchanged
    print("energy drift at dt = 2 ms, 1 ms:", drifts)
    assert drifts[1] <= 5e-5
    assert drifts[0] >= 4.0 * drifts[1]



def papers_residual(model, q, q_dot, q_ddot):
    """(the weak residual ``int Phi^T (Lam - H (xi - xi0)) dX`` with Lam from Block 2 run from the tail and the
    kinematics pass of sim/cosserat/rod.py: the paper's algorithm, and the size of its elastic term) at
    (q, q_dot, q_ddot)."""
    nodes = build_nodes(model.rod, strain_field(model, q, q_dot, q_ddot), 0.0)
    Phi = basis(model, nodes.X)[0]
    eta = twists(nodes, np.zeros(6))
    Lam = tail_wrench(model, nodes, eta, accelerations(nodes, eta, np.zeros(6)))
    elastic = weak_residual(model, nodes, Phi, np.zeros_like(Lam))
    return weak_residual(model, nodes, Phi, Lam), float(np.max(np.abs(elastic)))


def test_equations_of_motion_are_the_papers_weak_residual():
    """At the accelerations ``M^-1 Q`` of a bent, moving cantilever under gravity and a tip load (stretch, shear
    and both bendings free), the paper's residual (Block 2 from the tail) vanishes to quadrature error: ours swaps
    its two X-integrals and differentiates the Magnus poses exactly, which changes it at O(h^4): measured 4.4e-4,
    2.8e-5 of the elastic term at n_X = 40, 80 (16.0x per halving of h from n_X = 20 to 160)."""
    strain = {0: [1e-4, -5e-5, 2e-5], 1: [2e-5, 1e-5, -1e-5], 4: [0.3, -0.2, 0.1], 5: [-0.5, 0.4, 0.2]}  # per mode
    q = np.concatenate(list(strain.values()))
    q_dot = np.linspace(-1.0, 1.0, q.size) * np.abs(q) * 20.0             # 1/(m s): rates of ~20 1/s
    residuals = []
    for n_X in (40, 80):
        model = PassiveRod(round_rod(LENGTH, RADIUS, RHO, gravity=(0.0, -9.81, 0.0), n_X=n_X), H, tuple(strain), 3,
                           tip_force=np.array([0.0, -2.0, 1.0]))
        residual, elastic = papers_residual(model, q, q_dot, generalized_accelerations(model, q, q_dot))
        residuals.append(float(np.max(np.abs(residual))) / elastic)
    print("paper's residual at our accelerations, n_X = 40, 80:", residuals)
    assert residuals[1] <= 5e-5
    assert residuals[0] >= 12.0 * residuals[1]
