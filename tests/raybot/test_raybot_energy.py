"""Energy of the coasting RayBot: the added mass (Kirchhoff form in the core) and buoyancy are conservative,
drag and the normal force on control surfaces only dissipate.

Energy of the whole system, hand-assembled from the model and the evaluated Data:
``E = sum_j eta_j^T (M_j + M_added_j) eta_j / 2 + sum_j m_j g z_Gj - sum_j rho g Vol_j z_Bj + k q_caudal^2 / 2``
(fully submerged, joints held except the passive caudal fin, servo at rest so the spring's rest angle is 0)."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np

from sim.config import load_toml
from sim.robots import build_robot
from sim.simulation import Simulation

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "robots" / "raybot.toml"
INITIAL_TWIST = np.array([0.3, 0.05, -0.04, 0.4, -0.3, 0.6])   # m/s, rad/s in the disc frame
#: Energy drift allowed from RK4 at dt = 1 ms over 2 s of a motion carrying about 0.5 J of kinetic energy, J.
INTEGRATION_TOLERANCE_J = 1e-7


def _model(conservative: bool):
    table = copy.deepcopy(load_toml(CONFIG))
    table["water"]["initial_depth_m"] = 20.0
    table["tail_drive"]["frequency_Hz"] = 0.0
    table["tail_drive"]["caudal_damping_N_m_s_rad"] = 0.0
    for section in ("disc", "segments", "pelvic_fins", "tail"):
        table[section]["ct0"] = 0.0            # leading-edge suction does work; the normal force does not
    model = build_robot(table, CONFIG)
    if conservative:
        model = model.replace(force_models=[f for f in model.force_models if f.name in ("buoyancy", "added_mass")])
    return model


def _energy(sim: Simulation) -> float:
    sim.outputs()                                 # evaluates Data at the current state
    model, data = sim.model, sim.data
    g = -model.gravity[2]
    kinetic = 0.5 * sum(data.eta[j] @ (model.inertia[j] + data.M_added[j]) @ data.eta[j]
                        for j in range(model.n_bodies))
    potential = 0.0
    for j in range(model.n_bodies):
        m = model.inertia[j, 0, 0]
        com = np.array([model.inertia[j, 5, 1], model.inertia[j, 3, 2], model.inertia[j, 4, 0]]) / m  # m hat(c)
        potential += m * g * (data.g[j, :3, :3] @ com + data.g[j, :3, 3])[2]
    buoyancy = next(f for f in model.force_models if f.name == "buoyancy")
    for i, j in enumerate(buoyancy.bodies):
        z_b = (data.g[j, :3, :3] @ buoyancy.centre[i] + data.g[j, :3, 3])[2]
        potential -= buoyancy.rho * g * buoyancy.volume[i] * z_b
    k = model.joint_index("caudal")
    spring = 0.5 * model.metadata["parameters"]["drive_caudal_k"] * sim.q[k] ** 2
    return kinetic + potential + spring


def _energies(conservative: bool, duration=2.0, every=0.05):
    model = _model(conservative)
    sim = Simulation(model, dt=0.001)
    sim.reset(base_twist=INITIAL_TWIST)
    energies = [_energy(sim)]
    while sim.t < duration - 1e-9:
        sim.advance(every)
        energies.append(_energy(sim))
    return np.array(energies)


def test_added_mass_and_buoyancy_conserve_energy():
    energies = _energies(conservative=True)
    assert np.ptp(energies) < INTEGRATION_TOLERANCE_J, np.ptp(energies)


def test_drag_and_lift_only_dissipate():
    energies = _energies(conservative=False)
    assert np.diff(energies).max() < INTEGRATION_TOLERANCE_J   # never gains energy
    assert energies[0] - energies[-1] > 0.1                     # and loses a good part of its ~0.5 J
