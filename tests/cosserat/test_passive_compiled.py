"""The passive rod's compiled path (sim/cosserat/passive_kernels.py) against its Python form (sim/cosserat/passive.py,
the reference): the same arithmetic, so they agree to rounding (docs/cosserat.md, "The compiled path")."""
from __future__ import annotations

import numpy as np
import pytest

from sim.cosserat import passive_kernels
from sim.cosserat.passive import (PassiveRod, equations_of_motion, generalized_accelerations, kernel_model,
                                  round_section_stiffness, run)
from sim.cosserat.rod import round_rod

LENGTH, RADIUS, RHO, E = 1.0, 0.02, 1000.0, 1e8
H = round_section_stiffness(RADIUS, E, E / 3.0, 27.0 / 28.0)
#: Stretch, shear along Y, both bendings (indices into xi).
STRETCH_SHEAR_BENDING = (0, 1, 4, 5)
BENDING = (4, 5)


def loaded_rod(free, free_head: bool, modes: int = 3) -> PassiveRod:
    """A rod under gravity and a tip load, its head tilted off the world axes."""
    tilt = np.eye(4)
    c, s = np.cos(0.3), np.sin(0.3)
    tilt[:3, :3] = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]
    tilt[:3, 3] = [0.1, -0.2, 0.05]
    return PassiveRod(round_rod(LENGTH, RADIUS, RHO, gravity=(0.0, -9.81, 0.0), n_X=40), H, free, modes,
                      tip_force=np.array([0.0, -2.0, 1.0]), g_o=tilt, free_head=free_head)


def bent_moving_state(model: PassiveRod) -> tuple[np.ndarray, np.ndarray]:
    """(q, v): Legendre coefficients up to 0.05 1/m (stretch and shear 1000x smaller), rates up to 0.3 1/(m s),
    head twist up to 0.3 m/s and rad/s."""
    q = 0.05 * np.sin(np.arange(model.n_q) + 1.0)
    stiff = [k for k, component in enumerate(np.repeat(model.free, model.modes)) if component < 3]
    q[stiff] *= 1e-3
    return q, 0.3 * np.cos(np.arange(model.n_v) + 0.5)


def relative(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("free_head", [False, True], ids=["clamped", "free head"])
def test_compiled_equations_of_motion_equal_python(free_head):
    """M within 1e-14 (measured 1.2e-15 clamped, 4.0e-16 free head); Q within 1e-12 (measured 2.4e-13, 1.4e-13:
    the stretch is stored as ``xi_0 = 1 + Phi q``, so one rounding of 1 in ``xi - xi0`` is 2e-12 of a 5e-5 stretch);
    v_dot within 5e-11 (measured 8.7e-13, 6.9e-12: Q's rounding through M, whose condition number is 3.7e5 and
    3.1e6). All relative to the largest entry."""
    model = loaded_rod(STRETCH_SHEAR_BENDING, free_head)
    q, v = bent_moving_state(model)
    M, Q = passive_kernels.passive_motion(*kernel_model(model), model.g_o, q, v)
    python = equations_of_motion(model, q, v)
    errors = (relative(M, python.M), relative(Q, python.Q),
              relative(generalized_accelerations(model, q, v), generalized_accelerations(model, q, v, compiled=False)))
    print(f"compiled vs Python ({'free head' if free_head else 'clamped'}): M, Q, v_dot", errors)
    assert errors[0] <= 1e-14
    assert errors[1] <= 1e-12
    assert errors[2] <= 5e-11


@pytest.mark.parametrize("free_head", [False, True], ids=["clamped", "free head"])
def test_compiled_run_equals_python(free_head):
    """A bending rod (K_Y, K_Z, 3 modes each), bent and moving, 20 RK4 steps of 0.5 ms recorded every 5 (the
    compiled path takes each stretch between records in one call): q, v and the head pose within 1e-11 of the
    Python run's largest (measured clamped / free head: q 8.6e-15 / 1.1e-13, v 1.3e-14 / 3.1e-13, pose 0 / 2.1e-15), and the same times."""
    model = loaded_rod(BENDING, free_head)
    q, v = bent_moving_state(model)
    fast = run(model, q, 0.01, 5e-4, record_every=5, v0=v)
    slow = run(model, q, 0.01, 5e-4, record_every=5, v0=v, compiled=False)
    assert np.array_equal(fast.times, slow.times) and fast.times.size == 5
    assert relative(fast.q[-1], fast.q[0]) > 1e-3                  # it moved
    errors = [relative(getattr(fast, name), getattr(slow, name)) for name in ("q", "v", "g_o")]
    print(f"compiled vs Python run ({'free head' if free_head else 'clamped'}): q, v, g_o", errors)
    assert max(errors) <= 1e-11
