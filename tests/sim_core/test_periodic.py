"""Periodic orbits by shooting (sim/periodic.py): closed forms, identities and the flapper's hover."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg

from sim.config import load_toml
from sim.laws import ViscoElastic
from sim.model import CallableBaseMotion, ModelBuilder
from sim.periodic import ShootingCoordinates, multiple_shooting, newton_shooting, periodic_orbit, trimmed_orbit
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.spatial import pose, spatial_inertia

FLAPPER = Path(__file__).resolve().parents[2] / "configs" / "robots" / "flapper.toml"

# forced damped oscillator m x'' + c x' + k x = F cos(w t) (kg, N s/m, N/m, N, rad/s)
MASS, DAMPING, STIFFNESS, FORCE, OMEGA = 0.3, 0.4, 12.0, 0.7, 4.0
PERIOD = 2.0 * math.pi / OMEGA


def oscillator_flow(damping: float, stiffness: float, duration: float) -> np.ndarray:
    """Exact flow over ``duration`` (4, 4): the forcing is the state (cos w t, sin w t) of a harmonic oscillator
    appended to (x, v), so one matrix exponential carries the whole span."""
    A = np.array([[0.0, 1.0, 0.0, 0.0],
                  [-stiffness / MASS, -damping / MASS, FORCE / MASS, 0.0],
                  [0.0, 0.0, 0.0, -OMEGA],
                  [0.0, 0.0, OMEGA, 0.0]])
    return scipy.linalg.expm(A * duration)


def oscillator_period_map(state: np.ndarray) -> np.ndarray:
    return (oscillator_flow(DAMPING, STIFFNESS, PERIOD) @ np.array([state[0], state[1], 1.0, 0.0]))[:2]


def oscillator_orbit(damping: float, stiffness: float) -> np.ndarray:
    """(x, v) at t = 0 on the forced response x = Re(F / (k - m w^2 + i c w) e^{i w t})."""
    response = FORCE / (stiffness - MASS * OMEGA ** 2 + 1j * damping * OMEGA)
    return np.array([response.real, (1j * OMEGA * response).real])


@pytest.mark.parametrize("guess", [(0.0, 0.0), (1.5, -3.0), (-20.0, 40.0)])
def test_forced_damped_oscillator_orbit_and_multipliers_match_closed_form(guess):
    result = newton_shooting(oscillator_period_map, np.array(guess))
    assert result.converged
    np.testing.assert_allclose(result.x, oscillator_orbit(DAMPING, STIFFNESS), rtol=0.0, atol=1e-10)
    roots = np.roots([MASS, DAMPING, STIFFNESS])                                # free motion's exponents
    expected_multipliers = np.exp(roots * PERIOD)
    np.testing.assert_allclose(np.sort_complex(result.multipliers), np.sort_complex(expected_multipliers),
                               rtol=1e-8)


# an anti-damped oscillator (negative damping, N s/m; stiffness N/m): its free motion grows by
# exp(-c T / 2 m) = 1.0e10 per forcing period, so one period map amplifies its own rounding to ~1e-6
UNSTABLE_DAMPING, UNSTABLE_STIFFNESS = -8.8, 100.0
SEGMENTS = 12


def test_multiple_shooting_finds_the_orbit_single_shooting_cannot():
    """The forced response of the anti-damped oscillator is a periodic orbit (closed form) with multipliers of
    modulus 1e10. Single shooting stalls: the period map's rounding alone (~1e-6) is far above the tolerance.
    Cut into 12 parts, each amplifying by 1e10^(1/12) = 6.8, multiple shooting finds the orbit to 1e-10 and the
    product of the parts' Jacobians gives the multipliers exp(lambda T) of the free motion to 1e-8."""
    expected = oscillator_orbit(UNSTABLE_DAMPING, UNSTABLE_STIFFNESS)
    period_flow = oscillator_flow(UNSTABLE_DAMPING, UNSTABLE_STIFFNESS, PERIOD)
    single = newton_shooting(lambda s: (period_flow @ np.array([s[0], s[1], 1.0, 0.0]))[:2], np.zeros(2))
    assert not single.converged and single.residual > 1e-4

    part_flow = oscillator_flow(UNSTABLE_DAMPING, UNSTABLE_STIFFNESS, PERIOD / SEGMENTS)

    def segment_map(k: int, s: np.ndarray) -> np.ndarray:
        phase = OMEGA * k * PERIOD / SEGMENTS
        return (part_flow @ np.array([s[0], s[1], math.cos(phase), math.sin(phase)]))[:2]

    result = multiple_shooting(segment_map, np.zeros(2), SEGMENTS)
    assert result.converged and result.residual < 1e-10
    np.testing.assert_allclose(result.x, expected, rtol=0.0, atol=1e-10)
    expected_multipliers = np.exp(np.roots([MASS, UNSTABLE_DAMPING, UNSTABLE_STIFFNESS]) * PERIOD)
    assert np.abs(expected_multipliers).min() > 1e9
    np.testing.assert_allclose(np.sort_complex(result.multipliers), np.sort_complex(expected_multipliers), rtol=1e-8)
    # the period-map count is single shooting's per iteration: 2 m for the Jacobian plus the trial steps
    assert result.evaluations < 10 * (2 * 2 + 4)


# compound pendulum hinged on a base driven horizontally: x_base = a sin(w t)
ROD_MASS, ROD_LENGTH, ROD_I_CYY, G = 0.8, 0.35, 2.5e-3, 9.81        # kg, m, kg m^2, m/s^2
HINGE_INERTIA = ROD_I_CYY + ROD_MASS * ROD_LENGTH ** 2                  # kg m^2 about the hinge
HINGE_DAMPING = 0.05                                                     # N m s/rad
DRIVE_AMPLITUDE, DRIVE_OMEGA = 0.02, 7.0                                 # m, rad/s
STEPS_PER_DRIVE_PERIOD = 250


def driven_pendulum():
    def motion(t):
        x = DRIVE_AMPLITUDE * math.sin(DRIVE_OMEGA * t)
        v = DRIVE_AMPLITUDE * DRIVE_OMEGA * math.cos(DRIVE_OMEGA * t)
        a = -DRIVE_OMEGA ** 2 * x
        return pose(p=[x, 0.0, 0.0]), np.array([v, 0, 0, 0, 0, 0.0]), np.array([a, 0, 0, 0, 0, 0.0])

    builder = ModelBuilder("support", spatial_inertia(3.0, [0, 0, 0.1], np.eye(3) * 0.01), base_mode="imposed",
                           gravity=(0.0, 0.0, -G),
                           base_motion=CallableBaseMotion(motion))
    builder.add_body("rod", "support", joint_name="hinge", axis=[0, 1, 0], placement=pose(p=[0.0, 0.0, 0.0]),
                     inertia=spatial_inertia(ROD_MASS, [0, 0, -ROD_LENGTH], np.diag([ROD_I_CYY, ROD_I_CYY, 1e-5])),
                     joint_law=ViscoElastic(0.0, HINGE_DAMPING, 0.0))
    return builder.build()


def test_pendulum_driven_at_its_base_orbit_is_periodic_and_obeys_liouville():
    """The hinge's phase-space volume contracts at the constant rate mu / I (the only dissipation is the hinge's
    linear damper and the inertia about the hinge is constant), so det(monodromy) = exp(-mu T / I) exactly for
    the flow; the RK4 map at 250 steps per period agrees to its own error (2.1e-9 measured)."""
    period = 2.0 * math.pi / DRIVE_OMEGA
    sim = Simulation(driven_pendulum(), "rk4", period / STEPS_PER_DRIVE_PERIOD)
    orbit = periodic_orbit(sim, period, np.array([0.3, 0.0]))
    assert orbit.shooting.converged and orbit.shooting.residual < 1e-10
    assert abs(orbit.initial_state["q:hinge"]) > 1e-3          # a real swing, not the rest state
    liouville = math.exp(-HINGE_DAMPING * period / HINGE_INERTIA)
    assert np.linalg.det(orbit.shooting.monodromy) == pytest.approx(liouville, rel=1e-8)   # measured 2.1e-9
    # stable (both multipliers inside the unit circle): 10 periods from the orbit stay on it
    assert np.abs(orbit.shooting.multipliers).max() < 1.0
    ShootingCoordinates(sim).start(orbit.shooting.x)
    sim.advance(10 * period)
    np.testing.assert_allclose(sim.y[13:], orbit.shooting.x, rtol=0.0, atol=1e-9)
    # multiple shooting on the simulator (5 parts, each started at its own time of the drive): the same orbit
    # and the same multipliers
    segmented = periodic_orbit(sim, period, np.array([0.3, 0.0]), segments=5)
    assert segmented.shooting.converged
    np.testing.assert_allclose(segmented.shooting.x, orbit.shooting.x, rtol=0.0, atol=1e-10)
    np.testing.assert_allclose(np.sort_complex(segmented.shooting.multipliers),
                               np.sort_complex(orbit.shooting.multipliers), rtol=1e-8)


def test_tethered_flapper_orbit_is_the_limit_of_a_long_run():
    """Held thorax: the wings' passive joints are strongly damped (multipliers < 0.1), so the state after many
    periods of a plain run is the periodic orbit; shooting finds it in a few iterations."""
    model = build_robot(load_toml(FLAPPER), FLAPPER).replace(base_mode="fixed")
    period = model.metadata["period_s"]
    sim = Simulation(model, "rosw", 4e-4, jacobian_every=0)
    orbit = periodic_orbit(sim, period)
    assert orbit.shooting.converged and orbit.shooting.iterations <= 4
    assert np.abs(orbit.shooting.multipliers).max() < 0.1
    sim.reset()
    sim.advance(15 * period)
    np.testing.assert_allclose(sim.y[13:], orbit.shooting.x, rtol=0.0,
                               atol=1e-7 * np.abs(orbit.shooting.x).max())


def test_flapper_hover_trimmed_by_stroke_offset_and_amplitude():
    """Free flight: with the stroke's mean angle and amplitude as unknowns beside the state, the orbit has no net
    translation (a hover). It is unstable, and 40 periods from it diverge at the rate of the largest multiplier.
    The Rosenbrock integrator keeps its Jacobian from rest (jacobian_every=0): a refresh would add the rounding
    of its own finite differences (~1e-7) to the period map."""
    config = load_toml(FLAPPER)

    def simulation_for(values):
        changed = copy.deepcopy(config)
        changed["stroke"]["offset_deg"], changed["stroke"]["amplitude_deg"] = map(float, values)
        return Simulation(build_robot(changed, FLAPPER), "rosw", 4e-4, jacobian_every=0)

    period = 1.0 / config["stroke"]["frequency_hz"]
    hover = trimmed_orbit(simulation_for, ["offset_deg", "amplitude_deg"], np.array([-20.0, 41.3]), period)
    assert hover.solve.converged and hover.solve.residual < 1e-9
    np.testing.assert_allclose(hover.orbit.mean_velocity_m_s, 0.0, atol=1e-7)
    assert abs(hover.orbit.initial_state["roll_rad"]) < 1e-9               # left-right symmetric
    # docs/periodic.md's ROSW column (deterministic figures: the bands allow for another platform's rounding)
    assert hover.parameters["offset_deg"] == pytest.approx(-23.36, abs=0.02)
    assert hover.parameters["amplitude_deg"] == pytest.approx(53.39, abs=0.02)
    assert math.degrees(-hover.orbit.initial_state["pitch_rad"]) == pytest.approx(4.4, abs=0.05)
    growth = np.abs(hover.orbit.shooting.multipliers).max()
    assert growth > 1.0
    sim, coordinates = hover.orbit.coordinates.sim, hover.orbit.coordinates
    coordinates.start(hover.orbit.shooting.x)
    deviation = []
    for _ in range(40):
        sim.advance(period)
        state = coordinates.from_state(sim.y)
        deviation.append(np.max(np.abs(state - hover.orbit.shooting.x) / np.maximum(1.0, np.abs(state))))
    rate = (deviation[39] / deviation[19]) ** (1.0 / 20)
    assert growth == pytest.approx(1.371, abs=0.002)
    assert rate == pytest.approx(growth, rel=0.03), (rate, growth)
    # a periodic orbit without net motion returns the momentum: the mean aerodynamic force is the weight, up to the
    # integrator's error (RK4 at 0.1 ms: 2e-6; this Rosenbrock step with its Jacobian from rest: 0.66 %)
    coordinates.start(hover.orbit.shooting.x)
    first = sim.outputs()["ext_wrench"]
    _, out = sim.record(int(round(period / sim.dt)), 1)
    wrenches = np.vstack([first, out["ext_wrench"]])[:-1]           # one whole period, uniform samples
    lift_over_weight = wrenches[:, 2].mean() / sim.model.metadata["weight_N"]
    assert lift_over_weight == pytest.approx(1.0066, abs=0.001), lift_over_weight


def test_mms_sim_periodic_starts_on_the_orbit_and_reports_it(tmp_path):
    """`mms sim --periodic` on the tethered flapper: the run starts on the orbit (its first and last recorded
    states over a whole number of periods agree), and the summary carries the orbit's figures."""
    import json
    import subprocess
    import sys

    summary_path = tmp_path / "summary.json"
    done = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(FLAPPER), "--base", "tethered", "--periodic",
                           "--periods", "2", "--integrator", "rosw", "--dt", "4e-4", "--no-plots", "--quiet",
                           "--out", str(tmp_path / "run"), "--summary", str(summary_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "periodic orbit found" in done.stderr
    summary = json.loads(summary_path.read_text())
    assert summary["periodic_converged"] is True and summary["floquet_stable"] is True
    assert max(summary["floquet_multipliers"]) < 0.1
    positions = {k.split(":", 1)[1] for k in summary["initial_state"] if k.startswith("q:")}
    rates = {k.split(":", 1)[1] for k in summary["initial_state"] if k.startswith("qd:")}
    assert positions == rates and len(positions) + len(rates) == len(summary["initial_state"]) == 28
    series = np.load(tmp_path / "run" / "timeseries.npz")
    np.testing.assert_allclose(series["q"][-1], series["q"][0], atol=1e-6)
    refused = subprocess.run([sys.executable, "-m", "hil.cli", "sim", str(FLAPPER), "--trim", "--no-plots"],
                             capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--trim" in refused.stderr and "--periodic" in refused.stderr


@pytest.mark.parametrize("options, complaint", [
    (["--segments", "3"], "applies only with --periodic"),
    (["--periodic", "--segments", "0"], "expected an integer >= 1"),
    (["--periodic", "--trim", "--segments", "3"], "not available with --trim"),
])
def test_mms_sim_segments_are_refused_where_they_do_not_apply(options, complaint, capsys):
    from hil.cli import main

    assert main(["sim", str(FLAPPER), "--no-plots", "--quiet", *options]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--segments" in lines[0] and complaint in lines[0], lines


RAYBOT = FLAPPER.with_name("raybot.toml")
#: RayBot's steady swim as `mms sim raybot --periodic` found it (RK4, the period / 167; residual 9.2e-15),
#: full precision: docs/periodic.md's RayBot section
RAYBOT_ORBIT = {"roll_rad": 0.013763397281649171, "pitch_rad": 0.14177972666015656, "vx_m_s": 0.23717855902004942,
                "vy_m_s": 0.006074463855273972, "vz_m_s": 0.02667065492207621, "wx_rad_s": -0.0014425170565912364,
                "wy_rad_s": 0.0032602761207343083, "wz_rad_s": -0.5861956844626445,
                "q:caudal": -0.38577562755987366, "qd:caudal": 1.630532210982295}
RAYBOT_STEPS_PER_BEAT = 167


def test_raybot_steady_swim_through_mms_sims_set_up_is_the_documented_orbit(capsys):
    """`mms sim raybot --periodic`'s set-up (its config with the tail beat's soft start off, said on stderr) and
    the orbit it found, without the solve (benchmarks/bench_periodic.py --raybot runs it): one period from the
    documented state returns to it and moves at the documented mean velocity with no net turn; the monodromy's
    multipliers are the documented ones (a stable swim); three beats from it swim at the documented speed and
    Strouhal number. Deterministic figures: the bands allow for another platform's rounding."""
    from sim.cli_options import make_parser
    from sim.cli_sim import load_config, periodic_config, prepare
    from sim.cli_sim_args import add_arguments
    from sim.periodic import central_jacobian, floquet_multipliers, yaw_pitch_roll
    from sim.spatial import quat_to_matrix
    from sim.swimming import swim_figures

    parser = make_parser("mms sim")
    add_arguments(parser)
    args = parser.parse_args([str(RAYBOT), "--periodic"])
    loaded = periodic_config(load_config(args))
    assert "tail_drive.ramp_cycles = 0" in capsys.readouterr().err
    model = prepare(args, loaded)[0]
    period = model.metadata["period_s"]
    sim = Simulation(model, "rk4", period / RAYBOT_STEPS_PER_BEAT)
    coordinates = ShootingCoordinates(sim)
    orbit = np.array([RAYBOT_ORBIT[name] for name in coordinates.names])

    def period_map(x):
        coordinates.start(x)
        sim.advance(period)
        return coordinates.from_state(sim.y)

    coordinates.start(orbit)
    sim.advance(period)
    np.testing.assert_allclose(coordinates.from_state(sim.y), orbit, rtol=0.0, atol=1e-12)
    velocity = (sim.y[0:3] - coordinates.origin[:3, 3]) / period
    np.testing.assert_allclose(1e3 * velocity, [233.11, -14.85, -6.34], atol=0.01)                   # mm/s
    assert abs(yaw_pitch_roll(quat_to_matrix(sim.y[3:7]))[0]) < 1e-8                              # no net turn
    moduli = np.abs(floquet_multipliers(central_jacobian(period_map, orbit)))
    assert moduli[0] == pytest.approx(0.6718, abs=1e-4) and moduli[2] == pytest.approx(0.5471, abs=1e-4)

    coordinates.start(orbit)
    first = sim.outputs()
    t, out = sim.record(3 * RAYBOT_STEPS_PER_BEAT, 1)
    arrays = {k: np.concatenate([np.asarray(first[k])[None], v]) for k, v in out.items()}
    swim = swim_figures(model, np.concatenate([[0.0], t]), arrays, 1.0 / period)
    assert swim["steady_speed_m_s"] == pytest.approx(0.2335, abs=1e-4)
    assert swim["strouhal"] == pytest.approx(0.665, abs=1e-3)
