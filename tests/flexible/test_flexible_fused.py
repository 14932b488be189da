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
    """30 records of 2 steps (ROSW: its Jacobian refreshed at rest and after 20 steps) from a bent, moving wing
    (set_modal_state): the fused path's records, state and outputs are the Python path's to FUSED_RTOL of each
    signal's magnitude (measured: equal to the last bit, the same kernels in the same order)."""
    model = _model(base)
    fused, python = Simulation(model, integrator, dt), Simulation(model, integrator, dt, fused=False)
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
    if integrator == "rosw":
        np.testing.assert_array_equal(fused.jacobian, python.jacobian)    # refreshed alike


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
