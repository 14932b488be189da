"""configs/robots/flapper_flexible.toml: the flapper with one modal body per wing (sim/robots/flapper_modal.py;
docs/flexible.md)."""
from __future__ import annotations

import copy
import functools
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, load_toml
from sim.dynamics import kinetic_energy
from sim.flexible import modal_energy
from sim.robots import build_robot, load_robot
from sim.simulation import Simulation

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "robots"
FLEXIBLE, RIGID = CONFIGS / "flapper_flexible.toml", CONFIGS / "flapper.toml"
#: docs/flexible.md "The flapper's wing": clamped modal frequencies of one wing in vacuum (Hz), bend 1, bend 2,
#: bend 3 / torsion 1 (the two families mix through the offset centroid), ... (measured; eig of a 5x5 problem)
WING_FREQUENCIES_HZ = (35.72, 84.71, 319.4, 500.4, 1547.0)


def test_modal_wing_has_the_blades_mass_and_the_documented_frequencies():
    """Both wings integrate the same quarter-ellipse planform, of mass rho e C S pi / 4: the modal wing's 10 Gauss
    sections to 1.6e-4, the rigid blades' 4 x 24 points to 1e-6 (the elliptic tip's square root limits
    Gauss-Legendre)."""
    flexible, rigid = load_robot(FLEXIBLE), load_robot(RIGID)
    wing = flexible.flexible.bodies[flexible.metadata["modal_wings"][0]]
    p = flexible.metadata["parameters"]
    planform = p["rho_w"] * p["e"] * p["C"] * p["S"] * np.pi / 4.0
    assert wing.mass() == pytest.approx(planform, rel=2e-4)
    assert rigid.total_mass() - rigid.inertia[0, 0, 0] == pytest.approx(2.0 * planform, rel=1e-5)
    assert flexible.metadata["weight_N"] == pytest.approx(rigid.metadata["weight_N"], rel=2e-4)
    assert wing.frequencies_hz() == pytest.approx(WING_FREQUENCIES_HZ, rel=1e-3)


#: docs/flexible.md "Limits": over the first 10 ms of the stroke (tip twist reaching ~60 deg), the linear FFA's
#: angular velocity Phi_r q_d, exact for one rotation axis, makes the stroke's work exceed the energy gained by
#: 0.71 % when the wing bends and twists (measured at dt = 200 and 50 us alike: not the integrator), and by
#: -0.016 % (the trapezoid rule's error) with one family of modes.
WORK_ENERGY_GAP = {(3, 0): (-1e-3, 1e-3), (0, 2): (-1e-3, 1e-3), (3, 2): (0.006, 0.008)}


@pytest.mark.parametrize("modes", sorted(WORK_ENERGY_GAP))
def test_stroke_work_is_the_wings_energy(modes):
    """Tethered, no air, no gravity, no modal damping, from rest: the work of the stroke torques over 10 ms
    (trapezoid rule, 50 steps) against the wings' kinetic plus strain energy at the end."""
    config = copy.deepcopy(load_toml(FLEXIBLE))
    config["robot"].update(base="fixed", gravity=0.0)
    config["aero"]["rho_air"] = 0.0
    config["modes"].update(damping_ratio=0.0, bending=modes[0], torsion=modes[1])
    model = build_robot(config, FLEXIBLE)
    sim = Simulation(model, "rk4", dt=2e-4)
    times, out = sim.record(50, 1)
    strokes = model.metadata["stroke_joints"]
    power = np.sum(out["tau"][:, strokes] * out["qd"][:, strokes], axis=1)
    work = np.trapezoid(np.concatenate([[0.0], power]), np.concatenate([[0.0], times]))   # from rest: no power at 0
    sim.outputs()
    kinetic, strain = modal_energy(model, sim.data)
    energy = kinetic + strain + kinetic_energy(model, sim.data)
    low, high = WORK_ENERGY_GAP[modes]
    assert energy > 0.0
    assert low < work / energy - 1.0 < high


@pytest.mark.parametrize("edit, key", [
    (lambda c: c.pop("modes"), "modes"),
    (lambda c: c["modes"].update(bending=0, torsion=0), "modes"),
    (lambda c: c["modes"].update(torsion=12), "modes.torsion"),
])
def test_bad_modal_wing_configs_name_the_key(edit, key):
    config = copy.deepcopy(load_toml(FLEXIBLE))
    edit(config)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_robot(config, FLEXIBLE)


def test_modes_table_on_a_blade_wing_is_refused():
    config = copy.deepcopy(load_toml(RIGID))
    config["modes"] = {"bending": 1, "torsion": 1, "sections": 4}
    with pytest.raises(ConfigError, match="modes"):
        build_robot(config, RIGID)


#: docs/flexible.md, the comparison table's modal columns (6 periods at 25 Hz, `mms sim`'s defaults: the fused ROSW
#: stepper at 0.4 ms): tethered and free. Deterministic runs; the bands allow another platform's rounding (the free
#: flight tumbles, which amplifies it, as docs/flapper.md's free-flight figures, tests/flapper/test_flapper_cli.py).
TETHERED = {"peak_stroke_torque_Nm": 0.01557, "mean_power_per_wing_W": 0.4095, "tip_twist_amplitude_deg": 66.13,
            "tip_bend_amplitude_deg": 28.16, "mean_vertical_force_over_weight": 0.6761}
TETHERED_BAND = 0.005
FREE = {"mean_vertical_force_over_weight": 0.990, "base_vertical_drift_m": -0.211, "base_max_abs_pitch_deg": 383.0}
FREE_BAND = 0.05
#: The summary keys of docs/flexible.md's table that depend on the integration (not the wall clock).
SUMMARY_KEYS = ("peak_stroke_torque_Nm", "mean_power_per_wing_W", "tip_twist_amplitude_deg", "tip_twist_phase_lag_deg",
                "tip_bend_amplitude_deg", "tip_bend_phase_lag_deg", "mean_vertical_force_over_weight",
                "base_vertical_drift_m", "base_max_abs_pitch_deg")
#: The config's ROSW step against the RK4 reference at 0.1 ms, largest relative deviation over SUMMARY_KEYS
#: (measured: 0.22 % tethered, the peak stroke torque; 0.18 % free; at 0.5 ms 0.20 % / 0.24 %; at 0.8 ms ROSW
#: diverges): the accuracy the step is chosen for.
ROSW_ACCURACY = 0.01


@functools.cache
def _summary(base: str, integrator: str | None = None, dt: float | None = None) -> dict:
    """`mms sim`'s summary of 6 periods, the config's integrator and step unless given."""
    from sim.cli_sim import simulate
    from sim.robots.flapper import summarize

    config = copy.deepcopy(load_toml(FLEXIBLE))
    config["robot"]["base"] = base
    model = build_robot(config, FLEXIBLE)
    table = config["simulation"]
    run = simulate(model, integrator or table["integrator"], dt or table["dt"],
                   table["periods"] * model.metadata["period_s"], progress=False)
    return summarize(run)


@pytest.mark.parametrize("base, expected, band", [("fixed", TETHERED, TETHERED_BAND), ("floating", FREE, FREE_BAND)])
def test_documented_summary_of_the_modal_flapper(base, expected, band):
    summary = _summary(base)
    for key, value in expected.items():
        assert summary[key] == pytest.approx(value, rel=band), key


@pytest.mark.parametrize("base", ["fixed", "floating"])
def test_rosw_default_is_within_one_percent_of_the_rk4_reference(base):
    """The config's ROSW step (its Jacobian over the modal coordinates damps the 1.5 kHz mode that bounds RK4)
    against RK4 at 0.1 ms, both on the fused path, on every summary key of docs/flexible.md's table."""
    assert load_toml(FLEXIBLE)["simulation"]["integrator"] == "rosw"
    default, reference = _summary(base), _summary(base, "rk4", 1e-4)
    for key in SUMMARY_KEYS:
        if reference[key] == 0.0:       # a held thorax: no drift, no pitch
            assert default[key] == 0.0, key
        else:
            assert abs(default[key] / reference[key] - 1.0) < ROSW_ACCURACY, (key, default[key], reference[key])


def test_periodic_refuses_modal_wings_in_one_line():
    """`mms sim --periodic` shoots on the joints and the base only: a modal model is refused, naming the option."""
    import argparse

    from sim.cli_sim import run
    from sim.cli_sim_args import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(ConfigError, match=r"--periodic does not cover modal \(flexible\) bodies"):
        run(parser.parse_args([str(FLEXIBLE), "--periodic", "--quiet", "--no-plots"]))
