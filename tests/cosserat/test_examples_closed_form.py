"""Closed-form facts of the paper's examples (docs/cosserat.md "The robots"), to 1e-6."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import quad
from scipy.special import j0

from sim.cosserat.algorithms import kinematic_instant, run_kinematic
from sim.cosserat.examples import BUMP_INTEGRAL, bump, earthworm_robot, inchworm_robot, snake_robot
from sim.cosserat.rod import round_rod

LENGTH, RADIUS, RHO, G = 1.0, 0.02, 1000.0, 9.81
EPS, WAVELENGTH, C = 0.004, 1.0, 0.3
TOL = 1e-6


def rod(gravity=(0.0, 0.0, 0.0), n_X=200):
    return round_rod(LENGTH, RADIUS, RHO, gravity=gravity, n_X=n_X)


def gamma(X, t, a_c=0.0):
    s = C * t + 0.5 * a_c * t * t
    return 1.0 + EPS * np.sin(2.0 * math.pi * (s - X) / WAVELENGTH)


@pytest.mark.parametrize("t", [0.0, 0.41, 1.37, 2.9])
def test_earthworm_moves_at_minus_c_gamma_and_needs_no_force_at_constant_wave_speed(t):
    """Constant c: every section moves at ``x_dot = -c Gamma_X(X, t)`` (so the head at -c Gamma_X(0, t));
    ``n_c = int m x_ddot = 0`` over a whole wavelength; ``n(X) = -m eps c^2 (sin(2pi s/lambda) -
    sin(2pi (s - X)/lambda))`` behind the anchor and ``n(l) = 0``."""
    ex = earthworm_robot(rod(), EPS, WAVELENGTH, 0.0, C)
    state = kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(t), t, np.eye(4))
    X = state.nodes.X
    assert state.eta_o[0] == pytest.approx(-C * gamma(0.0, t), abs=TOL)
    assert np.max(np.abs(state.eta[:, 0] + C * gamma(X, t))) <= TOL
    assert np.max(np.abs(state.eta[:, 1:])) == 0.0
    assert np.max(np.abs(state.Fc)) <= TOL
    m = ex.rod.Mc[0]
    k, s = 2.0 * math.pi / WAVELENGTH, C * t
    C_anchor = ex.contacts[0].abscissa(t)
    n = -m * EPS * C * C * (np.sin(k * s) - np.sin(k * (s - X)))
    behind = X >= C_anchor
    # the anchor's force is n_c = 0 here, so n is continuous through it
    assert np.max(np.abs(state.Lam[:, 0] - n)) <= TOL * max(1.0, np.max(np.abs(n)))
    assert behind.any() and abs(state.Lam[-1, 0]) <= TOL * 1e-3


def test_accelerating_earthworm_is_pushed_by_its_anchor():
    """Run 2, ``c = a_c t + b_c``: still ``x_dot = -c Gamma_X``; the anchor's force is ``n_c = -m l a_c``."""
    a_c = 0.05
    ex = earthworm_robot(rod(), EPS, WAVELENGTH, a_c, C)
    for t in (0.2, 3.3):
        state = kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(t), t, np.eye(4))
        c = C + a_c * t
        assert np.max(np.abs(state.eta[:, 0] + c * gamma(state.nodes.X, t, a_c))) <= TOL
        assert state.Fc[0] == pytest.approx(-ex.rod.mass * a_c, abs=TOL)
        assert np.max(np.abs(state.Fc[1:])) <= TOL
        assert abs(state.wrenches[0][1][0] + ex.rod.mass * a_c) <= TOL


def test_earthworm_head_position_integrates_its_velocity_law():
    """``x_o(t) = -c t - eps lambda / (2 pi) (1 - cos(2 pi c t / lambda))`` (RK4 on the head pose, dt = 20 ms)."""
    ex = earthworm_robot(rod(), EPS, WAVELENGTH, 0.0, C)
    states = run_kinematic(ex.rod, ex.strain, ex.contacts, ex.driver_at, 1.7, 2e-2, 10 ** 6)
    t = states[-1].t
    expected = -C * t - EPS * WAVELENGTH / (2.0 * math.pi) * (1.0 - math.cos(2.0 * math.pi * C * t / WAVELENGTH))
    assert states[-1].g_o[0, 3] == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize("b_y", [None, 0.5])
def test_snake_sections_follow_the_head_without_slipping_sideways(b_y):
    """Every section: ``V_X = V_o``, lateral velocity ``V_Y = 0`` (and ``V_Z = Omega_X = 0`` in 3-D),
    ``Omega_Z = V_o K_Z`` (``Omega_Y = V_o K_Y``), inside the turn too (O(h^4): n_X = 200 leaves 3e-6, 400 2e-7)."""
    V_o = -0.5
    ex = snake_robot(rod(n_X=400), 10.0, 0.5, V_o, 0.5, 3.0, 4.0, 5, b_y=b_y)
    for t in (0.8, 4.6):
        state = kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(t), t, np.eye(4))
        xi = state.nodes.xi
        assert np.max(np.abs(state.eta[:, 0] - V_o)) <= TOL
        assert np.max(np.abs(state.eta[:, 1:4])) <= TOL
        assert np.max(np.abs(state.eta[:, 4:] - V_o * xi[:, 4:])) <= TOL
        if b_y is not None and t > 3.0:
            assert np.max(np.abs(xi[:, 4])) > 0.1         # the vertical turn is on


def test_snake_turn_changes_the_heading_by_v_b_t_times_the_bump_integral():
    """After the turn has passed the head (t > t_o + T_o), the heading changed by ``V_o b T_o int B`` (the
    cosine part is whole periods at t = 10 s); ``int B = 0.60345 T_o``."""
    integral = quad(lambda s: bump(np.array([s]), 1.0)[0][0], -0.5, 0.5, epsabs=1e-13)[0]
    assert integral == pytest.approx(BUMP_INTEGRAL, abs=5e-6)
    V_o, b, T_o = -0.5, 0.5, 4.0
    ex = snake_robot(rod(), 10.0, b, V_o, 0.5, 3.0, T_o, 5)
    states = run_kinematic(ex.rod, ex.strain, ex.contacts, ex.driver_at, 10.0, 1e-2, 10 ** 6, dynamics=False)
    R = states[-1].g_o[:3, :3]
    heading = math.atan2(R[1, 0], R[0, 0])
    assert heading == pytest.approx(V_o * b * T_o * integral, abs=TOL)


def test_inchworm_steps_by_the_chord_it_loses_when_arched():
    """Head locked while bending, tail while unbending: per cycle the head advances by ``l (1 - J0(alpha))``
    toward -x (the arched chord is ``int cos(theta) = l J0(alpha)``) and comes back to the ground (z = 0)."""
    alpha, omega = 1.8, 2.0 * math.pi * 0.25
    T = math.pi / omega
    ex = inchworm_robot(rod((0.0, 0.0, -G)), alpha, omega)
    states = run_kinematic(ex.rod, ex.strain, ex.contacts, ex.driver_at, 2 * T, 1e-2, 50, g_o=ex.g_o)
    head = np.array([s.g_o[:3, 3] for s in states])
    times = np.array([s.t for s in states])
    first_half = (times % T) < T / 2 - 1e-9
    # the head does not move while it is the anchor
    assert np.max(np.abs(head[(times < T / 2)] - head[0])) <= TOL
    assert head[-1, 0] == pytest.approx(-2 * LENGTH * (1.0 - j0(alpha)), abs=TOL)
    assert 1.0 - j0(alpha) == pytest.approx(0.660, abs=5e-4)           # docs/cosserat.md
    assert np.max(np.abs(head[-1, 1:])) <= TOL
    assert np.any(~first_half)
    assert max(s.closure for s in states) <= 1e-8
