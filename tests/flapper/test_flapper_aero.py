"""Quasi-steady aerodynamics and added mass of one blade (sim/aero.py) against hand-computed values.

Porez et al. 2014 section IV-B; docs/theory/flapper.md. The blade here is a rectangle (constant
chord) so that every expected value is a closed form written out in the test.
"""
import math

import numpy as np
import pytest

from sim.aero import BladeAero
from sim.model import Data, ModelBuilder
from sim.spatial import spatial_inertia

RHO = 1.22            # kg/m^3
CHORD = 0.02          # m
LENGTH = 0.01         # m (blade span)
CP = 0.4              # centre of pressure, fraction of the chord behind the leading edge
T_DIR = np.array([1.0, 0.0, 0.0])   # chord, trailing -> leading edge
W_DIR = np.array([0.0, 1.0, 0.0])   # upper normal
REL = 1e-12


def blade(n_points=6, fit="paper", w_dir=W_DIR, k_a=math.pi / 4):
    x, w = np.polynomial.legendre.leggauss(n_points)
    xi, wt = 0.5 * LENGTH * (x + 1.0), 0.5 * LENGTH * w
    return BladeAero([1], xi[None, :], wt[None, :], np.full((1, n_points), CHORD), T_DIR[None, :],
                     np.asarray(w_dir, dtype=float)[None, :], rho_air=RHO, cp_fraction=CP, fit=fit,
                     added_mass_coefficient=k_a)


def twist(V=(0.0, 0.0, 0.0), Omega=(0.0, 0.0, 0.0)):
    eta = np.zeros((2, 6))
    eta[1, :3] = V
    eta[1, 3:] = Omega
    return eta


def test_uniform_stream_lift_drag_and_moment_equal_hand_values():
    # The strip moves forward (leading edge first) at U, slightly toward its lower side: the air meets the
    # lower surface at an angle of attack a, so lift must point to the upper side.
    U, a = 5.0, math.radians(30.0)
    wrench = blade().compute(twist(V=(U * math.cos(a), -U * math.sin(a), 0.0)))[0]
    q = 0.5 * RHO * CHORD * U ** 2 * LENGTH               # N (dynamic pressure x area)
    lift = q * 1.8 * math.sin(2 * a)                      # |C_L| = 1.8 |sin 2 alpha|
    drag = q * (1.92 - 1.55 * math.cos(2 * a))
    v = np.array([math.cos(a), -math.sin(a), 0.0])
    u = np.array([math.sin(a), math.cos(a), 0.0])         # perpendicular to v, toward the upper side
    force = lift * u - drag * v
    arm = np.array([-CP * CHORD, 0.0, 0.5 * LENGTH])      # uniform load: resultant at mid-span on the cp line
    moment = np.cross(arm, force)
    np.testing.assert_allclose(wrench[:3], force, rtol=REL, atol=1e-15)
    np.testing.assert_allclose(wrench[3:], moment, rtol=REL, atol=1e-15)


def test_lift_goes_to_the_upper_side_and_flips_with_the_surface():
    U, a = 4.0, math.radians(20.0)
    forward_up = blade().compute(twist(V=(U * math.cos(a), -U * math.sin(a), 0.0)))[0]
    assert forward_up[1] > 0.0                            # air on the lower surface: lift toward +w
    forward_down = blade().compute(twist(V=(U * math.cos(a), U * math.sin(a), 0.0)))[0]
    assert forward_down[1] < 0.0                          # air on the upper surface: lift toward -w
    # Trailing edge first, air on the lower surface: the force still pushes toward the upper side.
    backward = blade().compute(twist(V=(-U * math.cos(a), -U * math.sin(a), 0.0)))[0]
    assert backward[1] > 0.0
    # Mirrored normal (left-wing convention): the physical force is unchanged.
    mirrored = blade(w_dir=-W_DIR).compute(twist(V=(U * math.cos(a), -U * math.sin(a), 0.0)))[0]
    np.testing.assert_allclose(mirrored, forward_up, rtol=REL)
    # Zero incidence: drag only (C_D(0) = 0.37), no lift.
    flat = blade().compute(twist(V=(U, 0.0, 0.0)))[0]
    np.testing.assert_allclose(flat[:3], [-0.5 * RHO * CHORD * U ** 2 * LENGTH * 0.37, 0.0, 0.0], rtol=REL)


def test_offset_fit_at_known_incidence():
    U, a_deg = 3.0, 40.0
    a = math.radians(a_deg)
    wrench = blade(fit="offset").compute(twist(V=(U * math.cos(a), -U * math.sin(a), 0.0)))[0]
    q = 0.5 * RHO * CHORD * U ** 2 * LENGTH
    cl = 0.225 + 1.58 * math.sin(math.radians(2.13 * a_deg - 7.2))
    cd = 1.92 - 1.55 * math.cos(math.radians(2.04 * a_deg - 9.82))
    v = np.array([math.cos(a), -math.sin(a), 0.0])
    u = np.array([math.sin(a), math.cos(a), 0.0])
    np.testing.assert_allclose(wrench[:3], q * cl * u - q * cd * v, rtol=REL)


def test_spanwise_quadrature_of_a_flapping_blade():
    # Rotation about the blade's chord axis through the root: speed grows as xi, the load as xi^2, the
    # root moment as xi^3: Gauss-Legendre with 6 points integrates them exactly.
    Omega = 50.0  # rad/s
    wrench = blade().compute(twist(Omega=(Omega, 0.0, 0.0)))[0]
    cd = 1.92 + 1.55                                       # alpha = -90 deg: flow normal to the plate
    force_y = 0.5 * RHO * CHORD * cd * Omega ** 2 * LENGTH ** 3 / 3.0  # drag opposes the motion (-w): +y
    moment_x = -0.5 * RHO * CHORD * cd * Omega ** 2 * LENGTH ** 4 / 4.0
    moment_z = -CP * CHORD * force_y
    np.testing.assert_allclose(wrench, [0.0, force_y, 0.0, moment_x, 0.0, moment_z], rtol=1e-12, atol=1e-18)


def test_added_mass_tensor_matches_hand_integrals():
    k_a = math.pi / 4
    Ma = blade(k_a=k_a).added_mass[0]
    m = k_a * RHO * CHORD ** 2                              # kg/m, along w = y
    x_cp = -CP * CHORD
    expected = np.zeros((6, 6))
    expected[1, 1] = m * LENGTH
    # Force along y at p = (x_cp, 0, xi): moment p x F = (-xi F, 0, x_cp F).
    expected[1, 3] = expected[3, 1] = -m * LENGTH ** 2 / 2
    expected[1, 5] = expected[5, 1] = m * x_cp * LENGTH
    expected[3, 3] = m * LENGTH ** 3 / 3
    expected[5, 5] = m * x_cp ** 2 * LENGTH
    expected[3, 5] = expected[5, 3] = -m * x_cp * LENGTH ** 2 / 2
    np.testing.assert_allclose(Ma, expected, rtol=1e-12, atol=1e-20)
    assert np.all(np.linalg.eigvalsh(Ma) >= -1e-18)


def test_apply_adds_to_the_core_arrays():
    builder = ModelBuilder("base", spatial_inertia(1.0, np.zeros(3), np.eye(3) * 1e-3))
    builder.add_body("blade", "base", joint_name="hinge", axis=[1.0, 0.0, 0.0],
                     inertia=spatial_inertia(1e-3, [0.0, 0.0, 0.005], np.eye(3) * 1e-8))
    model = builder.build()
    aero = blade()
    data = Data(model)
    data.eta[:] = twist(V=(2.0, -1.0, 0.3), Omega=(1.0, 2.0, -3.0))
    data.f_ext[:] = 1.0
    data.M_added[:] = 1.0
    aero.apply(model, data, 0.0)
    np.testing.assert_allclose(data.f_ext[1], 1.0 + aero.compute(data.eta)[0], rtol=REL)
    np.testing.assert_allclose(data.M_added[1], 1.0 + aero.added_mass[0], rtol=REL)
    np.testing.assert_array_equal(data.f_ext[0], np.ones(6))


def test_bad_fit_name_is_refused():
    with pytest.raises(ValueError, match="offset"):
        blade(fit="dickinson")
