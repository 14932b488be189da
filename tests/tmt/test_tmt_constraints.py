"""Constraints and impacts on the TMT equations (sim/tmt/constraints.py): identities and known answers."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.integrate import solve_ivp

from sim import hybrid_dynamics
from sim.model import ModelBuilder
from sim.spatial import pose, spatial_inertia
from sim.tmt.constraints import (PointOnBody, constrained_dynamics, impact, pinned_points, point_kinematics,
                                 project)
from sim.tmt.engine import tree_kinematics

MASS, LENGTH, I_COM, G = 0.8, 0.35, 2.5e-3, 9.81     # kg, m (hinge to centre of mass), kg m^2, m/s^2
#: tiny rotational inertia of a point mass (the spec's 1e-6 1): keeps its rotation coordinate in M
POINT_INERTIA = 1e-6


def planar_body(mass: float, inertia: float, gravity=(0.0, 0.0, -G), com=(0.0, 0.0, 0.0)):
    """A body in the x-z plane as a fixed-base chain: prismatic x, prismatic z, revolute about y."""
    builder = ModelBuilder("world", spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3))), base_mode="fixed",
                           gravity=gravity)
    massless = spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3)))
    builder.add_body("slider_x", "world", joint_name="x", joint_type="prismatic", axis=[1, 0, 0], placement=pose(),
                     inertia=massless)
    builder.add_body("slider_z", "slider_x", joint_name="z", joint_type="prismatic", axis=[0, 0, 1],
                     placement=pose(), inertia=massless)
    builder.add_body("body", "slider_z", joint_name="theta", axis=[0, 1, 0], placement=pose(),
                     inertia=spatial_inertia(mass, list(com), np.eye(3) * inertia))
    return builder.build()


def test_pinned_hinge_gives_the_pendulum_and_its_support_force():
    """A free planar rod whose hinge point is pinned to the world (2 constraint rows) moves as the revolute
    pendulum of the hybrid algorithm, and the multipliers are the hinge's support force."""
    rod = planar_body(MASS, I_COM, com=(0.0, 0.0, -LENGTH))
    hinge = PointOnBody(body=3, offset=np.zeros(3))
    constraints = pinned_points([(hinge, np.zeros(3))], axes=(0, 2))
    theta, omega = 0.9, -1.3
    q, u = project(rod, np.array([0.01, -0.02, theta]), np.array([0.0, 0.0, omega]), 0.0, constraints)
    assert np.abs(q[:2]).max() < 1e-12 and np.abs(u[:2]).max() < 1e-12 and q[2] == pytest.approx(theta)
    result = constrained_dynamics(rod, q, u, 0.0, constraints)
    builder = ModelBuilder("support", spatial_inertia(0.0, [0, 0, 0], np.zeros((3, 3))), base_mode="fixed",
                           gravity=(0.0, 0.0, -G))
    builder.add_body("rod", "support", joint_name="hinge", axis=[0, 1, 0], placement=pose(),
                     inertia=spatial_inertia(MASS, [0, 0, -LENGTH], np.eye(3) * I_COM))
    pendulum = builder.build()
    reference = hybrid_dynamics(pendulum, np.eye(4), np.zeros(6), [theta], [omega], [False], [0.0], [0.0])
    assert result.u_dot[2] == pytest.approx(reference.qdd[0], rel=1e-12)
    support = reference.base_wrench[:3]           # the support's force on the (massless) base = on the rod
    np.testing.assert_allclose(result.multipliers, support[[0, 2]], rtol=1e-12, atol=1e-12)


def _drift(rod, constraints, baumgarte, project_every, rtol):
    """max |c| (m) over 1 s of the pinned rod integrated with the constrained equations (DOP853 at ``rtol``),
    projected every ``project_every`` s (None: never), and the largest |c| right after a projection."""
    def rate(t, y):
        return np.concatenate([y[3:], constrained_dynamics(rod, y[:3], y[3:], t, constraints,
                                                           baumgarte=baumgarte).u_dot])

    def violation(y, t):
        kin = tree_kinematics(rod, rod.base_pose, y[:3], y[3:])
        return float(np.abs(constraints(rod, kin, y[:3], y[3:], t)[0]).max())

    y = np.concatenate(project(rod, np.array([0.0, 0.0, 1.2]), np.zeros(3), 0.0, constraints))
    worst, after_projection, t = 0.0, violation(y, 0.0), 0.0
    while t < 1.0 - 1e-12:
        span = (t, t + (project_every or 1.0))
        run = solve_ivp(rate, span, y, method="DOP853", rtol=rtol, atol=1e-3 * rtol, dense_output=True)
        worst = max([worst] + [violation(run.sol(sample), sample) for sample in np.linspace(*span, 20)])
        y, t = run.y[:, -1], span[1]
        if project_every:
            y = np.concatenate(project(rod, y[:3], y[3:], t, constraints))
            after_projection = max(after_projection, violation(y, t))
    return worst, after_projection


def test_constraint_drift_unstabilised_baumgarte_and_projected():
    """The spec's integration (DOP853, rtol 1e-10): Baumgarte (omega_b = 10) holds |c| below 1e-8 and a projection
    puts it below 1e-12; at a loose rtol (1e-6) the unstabilised drift is larger than the stabilised one."""
    rod = planar_body(MASS, I_COM, com=(0.0, 0.0, -LENGTH))
    # a hinge off the body's origin: c is nonlinear in q (a linear c would be kept exactly by any integrator)
    constraints = pinned_points([(PointOnBody(3, np.array([0.0, 0.0, 0.2])), np.zeros(3))], axes=(0, 2))
    stabilised, _ = _drift(rod, constraints, 10.0, None, 1e-10)
    _, projected = _drift(rod, constraints, 10.0, 0.25, 1e-10)
    loose_free, _ = _drift(rod, constraints, 0.0, None, 1e-6)
    loose_stabilised, _ = _drift(rod, constraints, 10.0, None, 1e-6)
    print(f"max |c| over 1 s: Baumgarte {stabilised:.2e} m, after projections {projected:.2e} m; at rtol 1e-6: "
          f"unstabilised {loose_free:.2e} m, Baumgarte {loose_stabilised:.2e} m")
    assert stabilised < 1e-8 and projected < 1e-12
    assert loose_free > 2 * loose_stabilised, (loose_free, loose_stabilised)


def test_bouncing_ball_restitution_and_apex_heights():
    """v+ = -e v- at each bounce (the impact equations with E = e on the normal row), so the apex heights fall as
    e^(2k) h0; events found by solve_ivp (DOP853, rtol 1e-10)."""
    restitution, height = 0.7, 1.0
    ball = planar_body(0.2, POINT_INERTIA)
    apexes, y, t = [], np.array([0.0, height, 0.0, 0.3, 0.0, 0.0]), 0.0

    def rate(_t, state):
        return np.concatenate([state[3:], constrained_dynamics(ball, state[:3], state[3:], _t,
                                                               pinned_points([])).u_dot])

    def ground(_t, state):
        return state[1]
    ground.terminal, ground.direction = True, -1

    for _ in range(4):
        run = solve_ivp(rate, (t, t + 10.0), y, method="DOP853", rtol=1e-10, atol=1e-12, events=ground)
        t, y = run.t_events[0][0], run.y_events[0][0].copy()
        kin = tree_kinematics(ball, ball.base_pose, y[:3], y[3:])
        _, jacobian, _ = point_kinematics(kin, PointOnBody(3, np.zeros(3)), y[3:])
        bounce = impact(ball, y[:3], y[3:], jacobian[[2]], np.array([restitution]))
        assert bounce.flags == [] and bounce.energy_change < 0.0
        assert bounce.u_after[1] == pytest.approx(-restitution * y[4], rel=1e-12)
        y[3:] = bounce.u_after
        y[1] = 0.0
        apexes.append(bounce.u_after[1] ** 2 / (2 * G))
    expected = [restitution ** (2 * (k + 1)) * height for k in range(4)]
    np.testing.assert_allclose(apexes, expected, rtol=1e-9)


# rimless wheel (non-dimensional: g = l = 1): hub point mass, massless spokes 2a apart, slope gamma
SPOKE_HALF_ANGLE, SLOPE = math.pi / 8, 0.1
#: ../docs/tmt.md: omega- at the fixed point = sqrt(4 sin a sin gamma) / sin 2a (McGeer 1990), step time
FIXED_POINT_OMEGA, FIXED_POINT_STEP = 0.552844, 2.36408


def _foot(spoke: int) -> PointOnBody:
    angle = 2.0 * SPOKE_HALF_ANGLE * spoke
    return PointOnBody(3, np.array([-math.sin(angle), 0.0, -math.cos(angle)]))


def test_rimless_wheel_reaches_its_fixed_point_and_step_time():
    """x along the slope (downhill), z normal; each heel strike is a plastic, sticking impact of the next spoke's
    foot (E = 0), the old foot lifts off. omega+ = cos 2a omega- at every strike (up to the point mass's tiny
    rotational inertia), and the walk settles on the closed-form fixed point."""
    wheel = planar_body(1.0, POINT_INERTIA, gravity=(math.sin(SLOPE), 0.0, -math.cos(SLOPE)))
    a = SPOKE_HALF_ANGLE
    stance, foot_x = 0, 0.0
    theta, omega = -a, 0.39092                # just after a strike, at the fixed point's omega+ to 1e-5
    # the stance foot at the origin, the hub vaulting over it: velocity omega x (hub - foot)
    y = np.array([-math.sin(a), math.cos(a), theta, omega * math.cos(a), omega * math.sin(a), omega])
    t, strikes = 0.0, []
    for _ in range(3):
        constraints = pinned_points([(_foot(stance), np.array([foot_x, 0.0, 0.0]))], axes=(0, 2))
        q, u = project(wheel, y[:3], y[3:], t, constraints)
        y = np.concatenate([q, u])

        def rate(_t, state, constraints=constraints):
            return np.concatenate([state[3:], constrained_dynamics(wheel, state[:3], state[3:], _t,
                                                                   constraints).u_dot])

        def next_foot_height(_t, state, spoke=stance - 1):
            kin = tree_kinematics(wheel, wheel.base_pose, state[:3], state[3:])
            return point_kinematics(kin, _foot(spoke), state[3:])[0][2]
        next_foot_height.terminal, next_foot_height.direction = True, -1

        run = solve_ivp(rate, (t, t + 20.0), y, method="DOP853", rtol=1e-10, atol=1e-12, events=next_foot_height)
        assert run.t_events[0].size == 1, "the wheel stopped or fell back"
        step_time = run.t_events[0][0] - t
        t, y = run.t_events[0][0], run.y_events[0][0].copy()
        kin = tree_kinematics(wheel, wheel.base_pose, y[:3], y[3:])
        position, jacobian, _ = point_kinematics(kin, _foot(stance - 1), y[3:])
        strike = impact(wheel, y[:3], y[3:], jacobian[[0, 2]], np.zeros(2))
        assert strike.flags == [] and strike.energy_change <= 0.0
        old_foot_velocity = point_kinematics(tree_kinematics(wheel, wheel.base_pose, y[:3], strike.u_after),
                                             _foot(stance), strike.u_after)[1] @ strike.u_after
        assert old_foot_velocity[2] > 0.0                                     # the trailing foot lifts off
        # angular momentum about the new foot is kept: (l^2 cos 2a + I) omega- = (l^2 + I) omega+ (m = l = 1)
        ratio = (math.cos(2 * a) + POINT_INERTIA) / (1.0 + POINT_INERTIA)
        assert strike.u_after[2] == pytest.approx(ratio * y[5], rel=1e-9)
        strikes.append((y[5], step_time))
        y[3:] = strike.u_after
        stance, foot_x = stance - 1, position[0]
    omega_before, step = strikes[-1]
    assert omega_before == pytest.approx(FIXED_POINT_OMEGA, abs=1e-5)
    assert step == pytest.approx(FIXED_POINT_STEP, abs=1e-4)
    closed_form = math.sqrt(4 * math.sin(a) * math.sin(SLOPE)) / math.sin(2 * a)
    assert closed_form == pytest.approx(FIXED_POINT_OMEGA, abs=1e-6)


def test_bouncing_ball_goes_zeno_then_rests_on_the_ground():
    """The bounces of a ball with e < 1 accumulate at t_inf = sqrt(2 h / g) (1 + e) / (1 - e) (closed form): the event
    loop (sim/tmt/hybrid.py) makes the contact persistent there (approach speed below ZENO_SPEED or ZENO_IMPACTS
    impacts) and the ball then rests, its normal force m g. Every impact: v+ = -e v-, no flag."""
    from sim.tmt.hybrid import PlaneContact, simulate_contacts

    restitution, height, mass = 0.5, 1.0, 0.2
    ball = planar_body(mass, POINT_INERTIA)
    ground = PlaneContact("ground", PointOnBody(3, np.zeros(3)), np.array([0.0, 0.0, 1.0]), restitution=restitution)
    t_inf = math.sqrt(2 * height / G) * (1 + restitution) / (1 - restitution)
    run = simulate_contacts(ball, np.array([0.0, height, 0.0]), np.zeros(3), t_inf + 0.5, [ground], sample_dt=0.05)
    bounces = [record for record in run.impacts if not record.persistent]
    persistent = [record for record in run.impacts if record.persistent]
    assert len(persistent) == 1 and run.flags == []
    print(f"{len(bounces)} bounces, persistent at t = {persistent[0].t:.12f} (closed form {t_inf:.12f}), "
          f"approach speed {persistent[0].approach_speeds[0]:.2e} m/s")
    for record in bounces:
        assert record.u_after[1] == pytest.approx(restitution * record.approach_speeds[0], rel=1e-9)
    assert persistent[0].t == pytest.approx(t_inf, abs=1e-8)
    resting = run.t > persistent[0].t + 0.1
    np.testing.assert_allclose(run.normal_force[resting, 0], mass * G, rtol=1e-9)
    assert np.abs(run.q[resting, 1]).max() < 1e-12


def test_a_rod_landing_flat_is_a_double_impact():
    """A rod falling flat strikes with both ends at once: the event loop solves the two contacts together, flags a
    double impact; the plastic impact stops it (no rebound, no energy gain) and it rests on both ends (forces sum to
    m g)."""
    from sim.tmt.hybrid import PlaneContact, simulate_contacts

    half = 0.3
    rod = planar_body(MASS, MASS * (2 * half) ** 2 / 12)
    up = np.array([0.0, 0.0, 1.0])
    ends = [PlaneContact(name, PointOnBody(3, np.array([side * half, 0.0, 0.0])), up) for name, side in
            (("left", -1), ("right", 1))]
    run = simulate_contacts(rod, np.array([0.0, 0.5, 0.0]), np.zeros(3), 0.5, ends, sample_dt=0.05)
    assert len(run.impacts) == 1
    record = run.impacts[0]
    assert sorted(record.contacts) == ["left", "right"]
    assert [flag for flag in record.flags if flag.startswith("double impact")]
    assert np.abs(record.u_after).max() < 1e-12 and record.energy_change < 0.0
    assert record.persistent and run.lift_offs == []
    resting = run.t > record.t + 0.05
    np.testing.assert_allclose(run.normal_force[resting].sum(axis=1), MASS * G, rtol=1e-9)
