"""Physics identities of the simulation (no reference implementation needed):
- free floating, no gravity: linear and angular momentum constant whatever the actuated joints do;
- all passive, undamped springs + gravity: total energy constant, RK4 converging at order 4;
- Kirchhoff added mass on a free body in a fluid at rest: the kinetic energy of body + fluid and the fluid
  impulse are conserved (so the added-mass velocity product is right; a lagged force would not do this).
"""
from __future__ import annotations

import numpy as np

from sim import Simulation, load_urdf
from sim.dynamics import kinetic_energy, momentum_world, potential_energy
from sim.forces import ForceModel
from sim.laws import Sinusoid, ViscoElastic
from sim.model import ModelBuilder
from sim.spatial import pose, quat_to_matrix, spatial_inertia
from sim.urdf import random_tree_urdf


def _random_model(tmp_path, seed, n_joints):
    rng = np.random.default_rng(seed)
    path = tmp_path / f"tree{seed}.urdf"
    path.write_text(random_tree_urdf(rng, n_joints))
    return load_urdf(path), rng


def test_free_floating_momentum_is_conserved_with_moving_joints(tmp_path):
    model, rng = _random_model(tmp_path, 11, 8)
    n = model.n
    actuated = np.arange(n) % 2 == 0
    motion = {k: Sinusoid(rng.uniform(0.3, 0.8), rng.uniform(3.0, 8.0), rng.uniform(0, 6.0), 0.0)
              for k in range(n) if actuated[k]}
    springs = {k: ViscoElastic(k=rng.uniform(1.0, 5.0), mu=0.05, r0=0.1) for k in range(n) if not actuated[k]}
    model = model.replace(actuated=actuated, motion_laws=motion, joint_laws=springs, gravity=np.zeros(3))
    sim = Simulation(model, dt=1e-3)
    sim.reset(base_twist=rng.normal(size=6))
    sim.outputs()
    h0 = momentum_world(model, sim.data)
    worst = 0.0
    for _ in range(20):
        sim.advance(0.1)
        sim.outputs()
        worst = max(worst, float(np.abs(momentum_world(model, sim.data) - h0).max()))
    assert abs(sim.t - 2.0) < 1e-9
    # The joints really moved the bodies: the base is far from its initial pose.
    assert np.linalg.norm(sim.outputs()["base_pos"]) > 0.05
    assert worst < 1e-7 * max(1.0, np.abs(h0).max()), worst


def _elastic_chain():
    """A 5-link undamped elastic chain hanging from a floating torso, with gravity."""
    b = ModelBuilder("torso", spatial_inertia(2.0, [0, 0, 0], np.diag([0.02, 0.03, 0.04])))
    parent = "torso"
    axes = ([0, 1, 0], [1, 0, 0], [0, 0, 1], [0, 1, 0], [1, 1, 0])
    for i, axis in enumerate(axes):
        name = f"link{i}"
        b.add_body(name, parent, joint_name=f"j{i}", axis=axis, placement=pose(p=[0.1, 0.02 * i, -0.05]),
                   inertia=spatial_inertia(0.3, [0.05, 0, -0.02], np.diag([1e-3, 2e-3, 1.5e-3])),
                   joint_law=ViscoElastic(k=2.0 + i, mu=0.0, r0=0.2))
        parent = name
    b.add_body("slider", parent, joint_name="slide", joint_type="prismatic", axis=[0, 0, 1],
               placement=pose(p=[0.05, 0, 0]), inertia=spatial_inertia(0.1, [0, 0, 0], np.eye(3) * 1e-4),
               joint_law=ViscoElastic(k=50.0, mu=0.0, r0=0.0))
    return b.build()


def _energy(sim):
    sim.outputs()
    return kinetic_energy(sim.model, sim.data) + potential_energy(sim.model, sim.data)


def test_undamped_elastic_chain_conserves_energy_and_rk4_has_order_four():
    model = _elastic_chain()
    q0 = np.array([0.5, -0.3, 0.8, 0.1, -0.4, 0.02])
    twist0 = np.array([0.1, 0.0, 0.2, 0.5, -0.3, 0.2])
    finals, drifts = {}, {}
    steps = (2e-3, 1e-3, 5e-4, 2.5e-4)
    for dt in steps:
        sim = Simulation(model, dt=dt)
        sim.reset(q=q0, base_twist=twist0)
        e0 = _energy(sim)
        sim.advance(1.0)
        drifts[dt] = abs(_energy(sim) - e0) / abs(e0)
        finals[dt] = sim.y.copy()
    assert drifts[1e-3] < 1e-6 and drifts[2.5e-4] < 1e-8, drifts
    # Differences between successive halvings shrink by 2^order.
    differences = np.array([np.abs(finals[a] - finals[b]).max() for a, b in zip(steps[:-1], steps[1:])])
    orders = np.log2(differences[:-1] / differences[1:])
    assert np.all(orders > 3.5), (differences, orders)
    assert drifts[2e-3] / drifts[1e-3] > 8.0, drifts


def test_rk45_agrees_with_rk4_and_respects_tolerance():
    model = _elastic_chain()
    q0 = np.array([0.5, -0.3, 0.8, 0.1, -0.4, 0.02])
    reference = Simulation(model, dt=2.5e-4)
    reference.reset(q=q0)
    reference.advance(0.5)
    adaptive = Simulation(model, integrator="rk45", dt=0.01, rtol=1e-9, atol=1e-11)
    adaptive.reset(q=q0)
    e0 = _energy(adaptive)
    adaptive.advance(0.5)
    assert abs(adaptive.t - 0.5) < 1e-12
    assert np.abs(adaptive.y - reference.y).max() < 1e-6
    assert abs(_energy(adaptive) - e0) < 1e-6 * abs(e0)
    assert adaptive._adaptive.accepted >= 50  # it really adapted below the 0.01 s output step


class KirchhoffFluid(ForceModel):
    """Constant added-mass inertia (6, 6) on the base, fluid at rest, no other force."""

    def __init__(self, added):
        self.added = added

    def apply(self, model, data, t):
        data.M_added[0] += self.added


def test_added_mass_free_body_conserves_kirchhoff_energy_and_impulse():
    rng = np.random.default_rng(5)
    L = rng.normal(size=(6, 6))
    added = L @ L.T * 0.05 + np.eye(6) * 0.1
    b = ModelBuilder("body", spatial_inertia(1.0, [0.02, -0.01, 0.03], np.diag([0.01, 0.02, 0.03])),
                     gravity=(0.0, 0.0, 0.0))
    b.add_force_model(KirchhoffFluid(added))
    model = b.build()
    sim = Simulation(model, dt=1e-3)
    sim.reset(base_twist=[0.3, -0.1, 0.2, 1.0, 0.5, -0.8])
    total = model.inertia[0] + added

    def invariants():
        twist = sim.y[7:13]
        R = quat_to_matrix(sim.y[3:7])
        impulse = total @ twist
        return 0.5 * twist @ impulse, R @ impulse[:3]

    e0, p0 = invariants()
    sim.advance(2.0)
    e1, p1 = invariants()
    assert abs(e1 - e0) < 1e-8 * e0
    assert np.abs(p1 - p0).max() < 1e-8 * np.abs(p0).max()
    assert np.abs(sim.y[7:13] - [0.3, -0.1, 0.2, 1.0, 0.5, -0.8]).max() > 0.05  # it did tumble
