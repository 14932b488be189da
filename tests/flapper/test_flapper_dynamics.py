"""The flapper model (sim/robots/flapper.py) in motion: structure, symmetry, energy, eigenfrequencies against
Pinocchio, convergence and periodicity (docs/theory/flapper.md, Porez et al. 2014 section IV).

Independent references: closed-form masses; Pinocchio (`pin`) for the kinetic/potential energy and for the
mass matrix (crba) whose generalised eigenproblem with the joint stiffnesses gives the structure's
frequencies (scipy.linalg.eigh).
"""
import copy
import math
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest
import scipy.linalg

from sim.cli_sim import simulate
from sim.config import ConfigError, load_toml
from sim.robots import build_robot
from sim.robots.flapper import stable_dt, summarize
from sim.simulation import Simulation
from sim.spatial import inertia_parameters
from sim.testing import to_pinocchio

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "robots" / "flapper.toml"


def config(**changes):
    """The Table I config with changes given as section__key=value."""
    table = copy.deepcopy(load_toml(CONFIG))
    for name, value in changes.items():
        section, key = name.split("__")
        table[section][key] = value
    return table



def pin_configuration(model, out):
    """Pinocchio (q, v) from one row of our outputs (free-flyer: position, quaternion x,y,z,w; local twist)."""
    if model.base_mode == "floating":
        w, x, y, z = out["base_quat"]
        q = np.concatenate([out["base_pos"], [x, y, z, w], out["q"]])
        v = np.concatenate([out["base_twist"], out["qd"]])
        return q, v
    return out["q"].copy(), out["qd"].copy()


def test_every_section_count_builds_and_runs():
    for M in range(1, 11):
        model = build_robot(config(wing__sections=M), CONFIG)
        assert model.n_bodies == 4 * M + 1 and model.n == 4 * M
        assert model.actuated.sum() == 2
        p = model.metadata["parameters"]
        thorax = p["rho_t"] * 4.0 / 3.0 * math.pi * p["ax"] * p["ay"] * p["az"]
        wings = 2 * p["rho_w"] * p["e"] * math.pi / 4.0 * p["S"] * p["C"]   # two quarter ellipses
        assert model.total_mass() == pytest.approx(thorax + wings, rel=1e-4)
        # A quarter of a stroke period at the advised step: the wing must stay on a physical trajectory.
        dt = stable_dt(model)
        sim = Simulation(model, "rk4", dt)
        sim.advance(0.25 * model.metadata["period_s"])
        out = sim.outputs()
        assert all(np.all(np.isfinite(v)) for v in out.values())
        assert np.abs(out["strain"]).max() > 1e-3
        assert np.abs(out["qd"]).max() < 10 * model.metadata["stroke_amplitude_rad"] * \
            model.metadata["stroke_omega_rad_s"]


@pytest.mark.parametrize("section,key,value,needle", [
    ("wing", "sections", 0, "wing.sections"),
    ("wing", "span", -0.07, "wing.span"),
    ("aero", "coefficients", "dickinson", "aero.coefficients"),
    ("wing", "stiffness_station", "tip", "wing.stiffness_station"),
    ("stroke", "amplitude_deg", "big", "stroke.amplitude_deg"),
    ("robot", "base", "orbit", "robot.base"),
])
def test_bad_values_give_one_line_config_errors(section, key, value, needle):
    with pytest.raises(ConfigError) as error:
        build_robot(config(**{f"{section}__{key}": value}), CONFIG)
    message = str(error.value)
    assert needle in message and str(CONFIG) in message and "\n" not in message


def test_mirrored_wings_move_identically_and_give_no_roll_or_yaw():
    model = build_robot(config(wing__sections=2), CONFIG)
    run = simulate(model, "rk4", 2e-4, 1.25 * model.metadata["period_s"], progress=False)
    md = model.metadata
    right = [md["stroke_joints"][0], *md["twist_joints"]["r"], *md["bend_joints"]["r"]]
    left = [md["stroke_joints"][1], *md["twist_joints"]["l"], *md["bend_joints"]["l"]]
    q, tau = run.arrays["q"], run.arrays["tau"]
    assert np.abs(q[:, right]).max() > 0.1
    np.testing.assert_allclose(q[:, left], q[:, right], rtol=0, atol=1e-9)
    np.testing.assert_allclose(tau[:, left], tau[:, right], rtol=0, atol=1e-9 * np.abs(tau).max())
    ext = run.arrays["ext_wrench"]
    scale = np.abs(ext[:, 4]).max()                     # pitch moment, the one that is not zero
    assert scale > 0.0
    assert np.abs(ext[:, 3]).max() < 1e-9 * scale       # roll
    assert np.abs(ext[:, 5]).max() < 1e-9 * scale       # yaw
    assert np.abs(ext[:, 1]).max() < 1e-9 * np.abs(ext[:, :3]).max()
    assert np.abs(run.arrays["base_pos"][:, 1]).max() < 1e-12


def test_energy_is_conserved_without_air_and_damping():
    # Stroke held (amplitude 0), floating thorax under gravity, wing released from a bent and twisted shape.
    # Energy from Pinocchio (kinetic + gravity) plus the springs; RK4's drift must fall at its order.
    model = build_robot(config(wing__sections=2, aero__rho_air=0.0, stiffness__damping=0.0,
                               stroke__amplitude_deg=0.0), CONFIG)
    pm = to_pinocchio(model)
    pd = pm.createData()
    q0 = np.where(model.actuated, 0.0, 0.15)
    spring0 = 0.5 * float(np.sum(model.law_k * q0 ** 2))
    drifts = []
    for dt in (5e-5, 2.5e-5):
        sim = Simulation(model, "rk4", dt)
        sim.reset(q=q0)

        def energy():
            out = sim.outputs()
            q, v = pin_configuration(model, out)
            spring = 0.5 * float(np.sum(model.law_k * out["q"] ** 2))
            kinetic = pin.computeKineticEnergy(pm, pd, q, v)
            return kinetic + pin.computePotentialEnergy(pm, pd, q) + spring, kinetic

        e0, _ = energy()
        drift, most_kinetic = 0.0, 0.0
        for _ in range(10):
            sim.advance(2e-3)
            e, kinetic = energy()
            drift = max(drift, abs(e - e0) / abs(e0))
            most_kinetic = max(most_kinetic, kinetic)
        assert most_kinetic > 0.1 * spring0          # energy did move between springs and motion
        drifts.append(drift)
    print("relative energy drift over 20 ms at dt = 50, 25 us:", drifts)
    assert drifts[1] < 1e-7
    assert drifts[1] < drifts[0] / 8.0                # at least third order; RK4 gives ~2^5


def test_strains_oscillate_at_the_linearised_eigenfrequencies():
    model = build_robot(config(wing__sections=2, aero__rho_air=0.0, stiffness__damping=0.0,
                               stroke__amplitude_deg=0.0, robot__gravity=0.0, robot__base="fixed"), CONFIG)
    pm = to_pinocchio(model)
    mass = pin.crba(pm, pm.createData(), np.zeros(model.n))
    mass = np.triu(mass) + np.triu(mass, 1).T
    passive = np.flatnonzero(~model.actuated)
    Mp = mass[np.ix_(passive, passive)]
    Kp = np.diag(model.law_k[passive])
    omega2, modes = scipy.linalg.eigh(Kp, Mp)
    omega = np.sqrt(omega2)
    amplitude = 1e-4  # rad: linear regime
    for i in (0, len(omega) - 1):
        phi = modes[:, i] / np.abs(modes[:, i]).max()
        q0 = np.zeros(model.n)
        q0[passive] = amplitude * phi
        period = 2 * math.pi / omega[i]
        dt = period / 400
        sim = Simulation(model, "rk4", dt)
        sim.reset(q=q0)
        times, modal = [], []
        for _ in range(int(3 * period / dt)):
            sim.step()
            strain = sim.outputs()["q"][passive]
            times.append(sim.t)
            modal.append(phi @ Mp @ strain / (phi @ Mp @ phi))
        times, modal = np.array(times), np.array(modal)
        # Upward zero crossings of the modal coordinate give the period.
        up = np.flatnonzero((modal[:-1] < 0) & (modal[1:] >= 0))
        crossings = times[up] - modal[up] * (times[up + 1] - times[up]) / (modal[up + 1] - modal[up])
        measured = 2 * math.pi / np.mean(np.diff(crossings))
        assert measured == pytest.approx(omega[i], rel=2e-3), (i, measured, omega[i])
        # And it is a pure mode: the response is amplitude * phi * cos(omega t).
        np.testing.assert_allclose(modal, amplitude * np.cos(omega[i] * times), atol=0.02 * amplitude)


def test_halving_dt_and_doubling_quadrature_change_the_summary_by_less_than_one_percent():
    results = []
    for dt, points in ((1e-4, 6), (5e-5, 12)):
        model = build_robot(config(aero__quadrature_points=points), CONFIG)
        results.append(summarize(simulate(model, "rk4", dt, 3 * model.metadata["period_s"], progress=False)))
    coarse, fine = results
    for key in ("peak_stroke_torque_Nm", "mean_power_per_wing_W", "tip_twist_amplitude_deg",
                "tip_bend_amplitude_deg", "mean_vertical_force_over_weight", "thorax_pitch_amplitude_deg"):
        assert coarse[key] == pytest.approx(fine[key], rel=0.01), key
    for axis in "xz":
        assert coarse["thorax_amplitude_mm"][axis] == pytest.approx(fine["thorax_amplitude_mm"][axis], rel=0.01)
    for key in ("tip_twist_phase_lag_deg", "tip_bend_phase_lag_deg"):
        assert abs(coarse[key] - fine[key]) < 3.6, key   # 1 % of the cycle


def test_tethered_strains_become_periodic():
    model = build_robot(config(robot__base="fixed"), CONFIG)
    period = model.metadata["period_s"]
    dt = 1e-4
    run = simulate(model, "rk4", dt, 6 * period, progress=False)
    per = int(round(period / dt))
    q = run.arrays["q"]
    differences = [np.abs(q[c * per:(c + 1) * per] - q[(c - 1) * per:c * per]).max() / np.abs(q).max()
                   for c in range(1, 6)]
    print("cycle-to-cycle max strain difference / max strain:", [f"{d:.1e}" for d in differences])
    assert differences[-1] < 1e-4
    assert differences[-1] < 0.01 * differences[0]
    # Momentum balance over the (periodic) last period: tether + aerodynamic force + weight average to zero
    # (the added-mass reactions are derivatives of a periodic fluid impulse and average out too).
    last = run.t >= run.t[-1] - period - 1e-12
    t = run.t[last]
    mean = lambda x: np.trapezoid(x, t, axis=0) / (t[-1] - t[0])  # noqa: E731
    tether = mean(run.arrays["base_wrench"][last, :3])        # thorax frame = world (held level)
    aero = mean(run.arrays["ext_wrench"][last, :3])
    weight = model.total_mass() * model.gravity
    np.testing.assert_allclose(tether + aero + weight, 0.0, atol=1e-3 * np.linalg.norm(weight))
    assert aero[2] > 0.1 * np.linalg.norm(weight)             # the wings do lift


def test_blade_inertia_matches_a_dense_planform_integral():
    model = build_robot(config(wing__sections=3), CONFIG)
    p = model.metadata["parameters"]
    length = p["S"] / p["M"]
    for section in range(p["M"]):
        body = model.metadata["blade_bodies"][section]           # right wing, root to tip
        # Midpoint rule on a fine grid of the planform: span xi, chord coordinate x (leading edge at 0).
        n_span, n_chord = 4000, 200
        xi = (np.arange(n_span) + 0.5) / n_span * length
        chord = p["C"] * np.sqrt(np.clip(1 - ((section * length + xi) / p["S"]) ** 2, 0, None))
        s = (np.arange(n_chord) + 0.5) / n_chord
        X = -chord[:, None] * s[None, :]                         # (n_span, n_chord) chord coordinate, m
        Z = np.broadcast_to(xi[:, None], X.shape)
        dm = p["rho_w"] * p["e"] * (chord[:, None] / n_chord) * (length / n_span) * np.ones_like(X)
        m = dm.sum()
        c = np.array([(dm * X).sum(), 0.0, (dm * Z).sum()]) / m
        Ixx = (dm * Z ** 2).sum() + m * p["e"] ** 2 / 12          # thin plate: thickness term on x and z
        Iyy = (dm * (X ** 2 + Z ** 2)).sum()
        Izz = (dm * X ** 2).sum() + m * p["e"] ** 2 / 12
        Ixz = -(dm * X * Z).sum()
        mass, com, I_c = inertia_parameters(model.inertia[body])
        I_O = I_c + mass * (np.dot(com, com) * np.eye(3) - np.outer(com, com))
        assert mass == pytest.approx(m, rel=1e-4)
        np.testing.assert_allclose(com, c, rtol=1e-3, atol=1e-9)
        np.testing.assert_allclose(I_O, [[Ixx, 0, Ixz], [0, Iyy, 0], [Ixz, 0, Izz]], rtol=1e-3, atol=1e-14)
