"""Modal bodies on the fused path (sim/fused.py; docs/flexible.md, "Fused stepping"): whole RK4 and ROSW steps of
the flapper with modal wings (configs/robots/flapper_flexible.toml) in one compiled call give the numbers of the
Python-orchestrated path (the same kernels: sim/flexible_kernels.py's recursions, the section aero's registered
kernel, sim/integrators.py's arithmetic), and ROSW's Jacobian block covers the modal coordinates."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from sim.config import load_toml
from sim.integrators import coordinate_jacobian
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.testing import FUSED_RTOL, MAGNITUDE_FLOOR, assert_paths_agree

FLEXIBLE = Path(__file__).resolve().parents[2] / "configs" / "robots" / "flapper_flexible.toml"


def _model(base: str):
    config = copy.deepcopy(load_toml(FLEXIBLE))
    config["robot"]["base"] = base
    return build_robot(config, FLEXIBLE)


@pytest.mark.parametrize("integrator, dt", [("rk4", 1e-4), ("rosw", 4e-4)])
@pytest.mark.parametrize("base", ["fixed", "floating"])
def test_fused_modal_flapper_equals_the_python_path(base, integrator, dt):
    """30 records of 2 steps from a bent, moving wing (set_modal_state): the fused path's records, state and
    outputs are the Python path's to FUSED_RTOL of each signal's magnitude. ROSW holds its Jacobian from rest
    here (``jacobian_every=0``: the same J on both paths, computed once by the Python path), so both run the same
    arithmetic; its refreshes are checked below."""
    model = _model(base)
    refresh = {"jacobian_every": 0} if integrator == "rosw" else {}
    fused = Simulation(model, integrator, dt, **refresh)
    python = Simulation(model, integrator, dt, fused=False, **refresh)
    n_e = fused.data.n_e
    rng = np.random.default_rng(1)
    start_qe, start_qed = 1e-3 * rng.standard_normal(n_e), 0.1 * rng.standard_normal(n_e)
    for sim in (fused, python):
        sim.set_modal_state(start_qe, start_qed)
    if integrator == "rosw":
        n_g = fused.passive_index.size + n_e
        assert fused.jacobian.shape == (2 * n_g, 2 * n_g)
        np.testing.assert_array_equal(fused.jacobian, python.jacobian)
    times_f, out_f = fused.record(30, 2)
    times_p, out_p = python.record(30, 2)
    np.testing.assert_array_equal(times_f, times_p)
    for key, value in out_p.items():
        scale = max(MAGNITUDE_FLOOR, float(np.abs(value).max(initial=0.0)))
        assert float(np.abs(out_f[key] - value).max(initial=0.0)) <= FUSED_RTOL * scale, key
    assert_paths_agree(fused, python, f"{base} {integrator}")
    assert np.abs(out_p["modal_q"][-1] - start_qe).max() > 1e-3     # the wings bent


#: A refreshed Jacobian's columns are forward differences of step JACOBIAN_FD_STEP = 1e-7: last-bit differences
#: between the two paths' evaluations (two compilations of the same kernels) reach J divided by 1e-7. Measured: 0
#: (bitwise equal) with the kernels as they are; 9e-7 of the largest entry (1.4e7 1/s^2) with an earlier form of the
#: section loops written inline, whose two compilations differed in the last bit (sections' twists 3e-18 m/s apart,
#: modal accelerations 1e-6 of 1e6 after E*'s condensation). The band allows that.
REFRESHED_JACOBIAN_RTOL = 1e-5


@pytest.mark.parametrize("base", ["fixed", "floating"])
def test_fused_rosw_refreshes_the_modal_jacobian(base):
    """The fused stepper's refresh (after a new modal state, then every 20 steps) is the Python path's finite
    differences at the same state, to the differences' rounding (REFRESHED_JACOBIAN_RTOL), and follows the state
    (it moved by 7e-5 of its scale after the first step, 2.1-2.3 times its scale after 20)."""
    model = _model(base)
    fused, python = Simulation(model, "rosw", 4e-4), Simulation(model, "rosw", 4e-4, fused=False)
    rng = np.random.default_rng(2)
    n_e = fused.data.n_e
    fused.set_modal_state(1e-3 * rng.standard_normal(n_e), 0.1 * rng.standard_normal(n_e))
    rest = fused.jacobian.copy()
    for before in (0, 19):          # the refresh at the new state's first step, then 20 steps later
        if before:
            fused.advance(before * fused.dt)
        y, t = fused.y.copy(), fused.t
        fused.step()                # refreshes J at (t, y), then steps
        reference = coordinate_jacobian(python._evaluate, t, y, python._branch)
        scale = float(np.abs(reference).max())
        error = np.abs(fused.jacobian - reference).max()
        assert error < REFRESHED_JACOBIAN_RTOL * scale, before
        assert np.abs(fused.jacobian - rest).max() > max(10.0 * error, 1e-5 * scale), before   # it follows the state


def test_rosw_jacobian_holds_the_wings_modal_stiffness():
    """Tethered, no air, no gravity, stroke held (its law at rest): the Jacobian's block d(q_e_dd)/d(q_e) at rest
    is the clamped wings' -E*^-1 K_e (sim.robots.flapper_modal.stable_dt's matrix), each wing its own branch (the
    other wing's block zero), to the finite differences' error."""
    config = copy.deepcopy(load_toml(FLEXIBLE))
    config["robot"].update(base="fixed", gravity=0.0)
    config["aero"]["rho_air"] = 0.0
    config["stroke"]["amplitude_deg"] = 0.0
    model = build_robot(config, FLEXIBLE)
    sim = Simulation(model, "rosw", 4e-4)
    wing = model.flexible.bodies[model.metadata["modal_wings"][0]]
    n, n_g = wing.n_e, sim.data.n_e
    E = np.einsum("s,sai,sab,sbk->ik", wing.w, wing.Psi, wing.M_s, wing.Psi)
    expected = -np.linalg.solve(E, wing.K)
    block = sim.jacobian[n_g:, :n_g]
    for first in (0, n):
        own = block[first:first + n, first:first + n]
        assert np.abs(own - expected).max() < 1e-5 * np.abs(expected).max()
    assert not block[:n, n:].any() and not block[n:, :n].any()
    np.testing.assert_array_equal(sim.jacobian[:n_g, n_g:], np.eye(n_g))
