"""The free-head passive rod (sim/cosserat/passive.py, ``free_head=True``): the head's 6 DOF join the elastic
strain coordinates, so the rod floats. Checks by invariants and closed forms (docs/cosserat.md): world momentum
and energy constant (the errors fall at RK4's order), and the free-free bending frequency of a beam."""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.optimize import brentq

from sim.cosserat.passive import (PassiveRod, energy, equations_of_motion, round_section_stiffness, run,
                                  world_momentum)
from sim.cosserat.rod import Rod, round_rod

LENGTH, RADIUS, RHO, E = 1.0, 0.02, 1000.0, 1e8
H = round_section_stiffness(RADIUS, E, E / 3.0, 27.0 / 28.0)
BEND_Y, BEND_Z = 4, 5
#: The floating rod: bends both ways (K_Y, K_Z, 3 Legendre modes each: its fastest mode is 693 rad/s), launched
#: bent and moving, with a head twist (m/s, rad/s) and strain rates (1/(m s)) of the same order.
FREE_MODES, DURATION = 3, 0.1
Q0 = 0.05 * np.array([1.0, -0.5, 0.2, -0.6, 0.3, 0.1])                          # 1/m
V0 = np.concatenate([[0.1, 0.2, -0.1, 0.3, -0.2, 0.5], 0.05 * np.array([2.0, 0, 0, 0, -3.0, 0])])
STEPS = (5e-4, 2.5e-4)                                                           # s


def floating_rod(rod: Rod | None = None, free=(BEND_Y, BEND_Z), modes=FREE_MODES) -> PassiveRod:
    return PassiveRod(rod or round_rod(LENGTH, RADIUS, RHO, n_X=40), H, free, modes, free_head=True)


@functools.cache
def invariants(dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """World momentum (T, 6), total energy (T,) J and kinetic energy (T,) J every 10 ms of the floating rod."""
    model = floating_rod()
    motion = run(model, Q0, DURATION, dt, record_every=int(round(0.01 / dt)), v0=V0)
    states = list(zip(motion.q, motion.v, motion.g_o))
    momentum = np.array([world_momentum(model, q, v, g) for q, v, g in states])
    energies = np.array([energy(model, q, v, g) for q, v, g in states])
    return momentum, energies.sum(axis=1), energies[:, 0]


def test_floating_rod_keeps_its_world_momentum():
    """The sections' twists are the exact time derivatives of their Magnus poses, so the semi-discrete rod
    conserves momentum exactly; what remains is RK4's: 5e-9 of |P| over 0.1 s at dt = 0.25 ms (8e-8 at 0.5 ms,
    a 16x fall: order 4)."""
    drifts = []
    for dt in STEPS:
        P, _, _ = invariants(dt)
        drifts.append(float(np.max(np.abs(P - P[0]))) / float(np.max(np.abs(P[0]))))
    print("momentum drift at dt = 0.5, 0.25 ms:", drifts)
    assert drifts[1] <= 2e-8
    assert drifts[0] >= 10.0 * drifts[1]


def test_floating_rod_keeps_its_energy():
    """Kinetic + elastic energy constant: drift 6e-6 of the total over 0.1 s at dt = 0.25 ms, 32x less than at
    0.5 ms (RK4: at least 16x); meanwhile the rod trades a tenth of its energy between the two."""
    drifts = []
    for dt in STEPS:
        _, total, kinetic = invariants(dt)
        drifts.append(float(np.max(np.abs(total - total[0]))) / float(total[0]))
        assert np.ptp(kinetic) > 0.1 * total[0]
    print("energy drift at dt = 0.5, 0.25 ms:", drifts)
    assert drifts[1] <= 2e-5
    assert drifts[0] >= 16.0 * drifts[1]


def first_free_free_frequency(model: PassiveRod) -> float:
    """omega_1 (rad/s) of the rod linearised at rest, straight: ``M v_dot = -K q`` with the head's rows kept, so
    the head moves with the mode; the strain rows give ``q_ddot = -A q``."""
    n, amplitude = model.n_q, 1e-7            # small enough that the response is linear to ~1e-7
    rest = np.zeros(model.n_v)
    M = equations_of_motion(model, np.zeros(n), rest).M
    K = np.array([-equations_of_motion(model, amplitude * np.eye(n)[j], rest).Q / amplitude for j in range(n)]).T
    A = np.linalg.solve(M, K)[6:]
    omega = np.sort(np.sqrt(np.abs(np.linalg.eigvals(A))))
    return float(omega[0])


def test_free_free_bending_frequency():
    """``omega_1 = (beta l)^2 sqrt(EI / (rho A l^4))``, ``cos(beta l) cosh(beta l) = 1`` (beta l = 4.7300):
    without the section's rotary inertia within 1e-6 (measured -1.5e-7 with 8 Legendre modes; 5 or 6 modes give
    +9.5e-6); with it, within 1e-6 of Rayleigh's quotient on the Euler-Bernoulli mode
    ``EI int w''^2 / (rho A int w^2 + rho I int w'^2)`` (measured -4.4e-7: the quotient is an upper bound), which is
    2.5e-3 below Euler-Bernoulli."""
    bl = brentq(lambda b: math.cos(b) * math.cosh(b) - 1.0, 4.5, 5.0)
    s = (math.cosh(bl) - math.cos(bl)) / (math.sinh(bl) - math.sin(bl))

    def shape(x, derivative):
        c, co, sh, si = math.cosh(bl * x), math.cos(bl * x), math.sinh(bl * x), math.sin(bl * x)
        return bl ** derivative * [c + co - s * (sh + si), sh - si - s * (c + co), c - co - s * (sh - si)][derivative]

    rod = round_rod(LENGTH, RADIUS, RHO, n_X=40)
    rhoA, rhoI, EI = rod.Mc[0], rod.Mc[5], H[5]
    euler_bernoulli = bl ** 2 * math.sqrt(EI / (rhoA * LENGTH ** 4))
    integral = [quad(lambda x: shape(x, d) ** 2, 0.0, LENGTH)[0] for d in range(3)]
    rayleigh = math.sqrt(EI * integral[2] / (rhoA * integral[0] + rhoI * integral[1]))
    no_rotary = Rod(rod.length, rod.Mc * np.array([1, 1, 1, 1, 0, 0]), rod.gravity, rod.n_X)
    slender = first_free_free_frequency(floating_rod(no_rotary, (BEND_Z,), 8))
    real = first_free_free_frequency(floating_rod(rod, (BEND_Z,), 8))
    print(f"free-free omega_1: {slender:.6f} rad/s without rotary inertia (Euler-Bernoulli {euler_bernoulli:.6f}), "
          f"{real:.6f} with it (Rayleigh {rayleigh:.6f})")
    assert slender == pytest.approx(euler_bernoulli, rel=1e-6)
    assert real == pytest.approx(rayleigh, rel=1e-6)
    assert real / euler_bernoulli - 1.0 < -2e-3
