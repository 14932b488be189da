"""RayBot hydrodynamics (sim/hydro.py) and hydrostatics of the built robot (sim/robots/raybot.py).

Checks are hand computations from the formulas of docs/theory/raybot.md (eqs. 5-8 of the RayBot paper) and
the config's own parameters, never snapshots of the simulator's output."""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, load_toml
from sim.hydro import ControlSurfaceLift, elliptic_plate_added_mass
from sim.model import Data, ModelBuilder
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.spatial import spatial_inertia

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "robots" / "raybot.toml"
RHO = 1000.0


def _config(**changes) -> dict:
    table = copy.deepcopy(load_toml(CONFIG))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        table[section][key] = value
    return table


def _plate_model():
    builder = ModelBuilder("plate", spatial_inertia(1.0, [0, 0, 0], np.eye(3) * 1e-2), base_mode="fixed")
    return builder.build({"name": "plate"})


# ------------------------------------------------------------------------------------------------ lift
@pytest.mark.parametrize("incidence_deg", [8.0, -12.0, 50.0, 120.0])
def test_control_surface_force_and_moment_match_hand_computation(incidence_deg):
    """A flat plate (chord x, normal z, CP 25% chord behind the leading edge) moving through still water at
    speed U and incidence alpha: normal force -q A C_N(alpha) n with the stall model, moment cp x force."""
    model = _plate_model()
    data = Data(model)
    area, cn0, stall, chord_len, speed = 0.02, 1.2, math.radians(30.0), 0.1, 0.8
    cp = np.array([0.25 * chord_len, 0.01, 0.0])     # CP off the origin, so the moment is non-trivial
    lift = ControlSurfaceLift([0], [[1, 0, 0]], [[0, 0, 1]], [cp], [area], [cn0], [0.0], [stall], [0.0],
                              rho=RHO)
    alpha = math.radians(incidence_deg)
    data.g[0] = np.eye(4)
    data.eta[0, :3] = speed * np.array([math.cos(alpha), 0.0, math.sin(alpha)])
    lift.apply(model, data, 0.0)
    # hand computation: velocity from behind the plate is the same plate seen from its other edge
    folded = alpha if abs(alpha) <= math.pi / 2 else math.copysign(math.pi, alpha) - alpha
    if abs(folded) < stall:
        cn = cn0 * math.sin(math.pi * folded / (2 * stall))
    else:
        cn = math.copysign(cn0, folded)
    force = np.array([0.0, 0.0, -0.5 * RHO * speed ** 2 * area * cn])
    moment = np.cross(cp, force)
    assert data.f_ext[0, :3] == pytest.approx(force, rel=1e-12, abs=1e-12)
    assert data.f_ext[0, 3:] == pytest.approx(moment, rel=1e-12, abs=1e-12)
    # the force opposes the plate's normal motion (it never pushes the plate along)
    assert force[2] * data.eta[0, 2] < 0.0


def test_control_surface_ignores_spanwise_flow_and_sees_rotation_at_the_cp():
    """Spanwise velocity is dropped from the advance velocity; a rotation adds Omega x cp at the CP."""
    model = _plate_model()
    data = Data(model)
    cp = np.array([0.3, 0.0, 0.0])
    lift = ControlSurfaceLift([0], [[1, 0, 0]], [[0, 0, 1]], [cp], [0.01], [1.0], [0.0], [math.radians(40)],
                              [0.0], rho=RHO)
    data.g[0] = np.eye(4)
    data.eta[0] = [0.0, 2.0, 0.0, 0.0, 0.0, 0.0]          # pure spanwise motion: no force
    lift.apply(model, data, 0.0)
    assert np.all(data.f_ext[0] == 0.0)
    data.eta[0] = [1.0, 0.0, 0.0, 0.0, -0.5, 0.0]         # pitch rate: CP heaves at w = -Omega_y * x_cp
    lift.apply(model, data, 0.0)
    vn = 0.5 * 0.3
    delta = math.atan2(vn, 1.0)
    expected = -0.5 * RHO * (1.0 + vn ** 2) * 0.01 * math.sin(math.pi * delta / (2 * math.radians(40)))
    assert data.f_ext[0, 2] == pytest.approx(expected, rel=1e-12)


def test_disc_added_mass_is_the_classical_value():
    """A circular plate of radius r: (8/3) rho r^3 (Lamb)."""
    assert elliptic_plate_added_mass(RHO, 0.2, 0.2) == pytest.approx(8.0 / 3.0 * RHO * 0.2 ** 3, rel=1e-12)


# ------------------------------------------------------------------------------------------------ hydrostatics
def _buoyancy_model(model):
    return next(f for f in model.force_models if f.name == "buoyancy")


def test_raybot_has_prototype_mass_size_and_tree():
    model = build_robot(_config(), CONFIG)
    assert model.n_bodies == 10 and model.n == 9                       # disc + 9 hinged bodies
    assert set(model.joint_types) == {"revolute"}
    assert model.total_mass() == pytest.approx(5.5, abs=1e-9)
    assert model.metadata["body_length_m"] == pytest.approx(0.75, abs=1e-9)
    buoyancy = _buoyancy_model(model)
    # slightly buoyant: displaced mass = (1 + net_buoyancy_fraction) x mass
    assert RHO * buoyancy.volume.sum() == pytest.approx(1.03 * 5.5, rel=1e-12)


def test_neutral_vehicle_stays_put():
    """Buoyancy = weight, centre of buoyancy straight above the centre of gravity: nothing moves."""
    model = build_robot(_config(disc__net_buoyancy_fraction=0.0, tail_drive__frequency_Hz=0.0), CONFIG)
    sim = Simulation(model, dt=model.metadata["parameters"]["dt"])
    sim.advance(2.0)
    out = sim.outputs()
    assert np.linalg.norm(out["base_pos"] - model.base_pose[:3, 3]) < 1e-9
    assert np.linalg.norm(out["base_twist"]) < 1e-9
    assert out["base_quat"] == pytest.approx([1, 0, 0, 0], abs=1e-9)


def test_buoyant_vehicle_rises_slowly_and_floats_at_the_surface():
    """Released 0.3 m deep, the 3% buoyant vehicle rises (slowly: well under 0.2 m/s) and ends floating at the
    surface (top of the disc out), bobbing about the level where the buoyancy of its submerged part equals its
    weight: over a window, the mean buoyancy equals the weight and the mean heave velocity vanishes."""
    model = build_robot(_config(water__initial_depth_m=0.3, tail_drive__frequency_Hz=0.0), CONFIG)
    sim = Simulation(model, dt=model.metadata["parameters"]["dt"])
    z0 = sim.outputs()["base_pos"][2]
    sim.advance(1.0)
    z1 = sim.outputs()["base_pos"][2]
    assert 0.0 < (z1 - z0) < 0.2                    # rising, slowly
    sim.advance(11.0)
    buoyancy, heave, depth = [], [], []
    while sim.t < 18.0:
        sim.advance(0.05)
        out = sim.outputs()
        buoyancy.append(_buoyancy_model(model).last_force_world[:, 2].sum())
        heave.append(out["base_twist"][2])
        depth.append(out["base_pos"][2])
    weight = model.total_mass() * 9.81
    assert np.mean(buoyancy) == pytest.approx(weight, rel=0.02)
    assert abs(np.mean(heave)) < 5e-3
    assert -model.metadata["parameters"]["disc_height_m"] < np.mean(depth) < 0.0


def test_offset_centre_of_buoyancy_rights_a_tilted_disc():
    """Rolled by phi and held (tethered), the load cell must supply the hydrostatic righting moment of the
    centre of gravity hanging |z_G| below the centre of buoyancy: m_disc g |z_G| sin(phi) (appendages are
    neutral with CB = CG); released, the vehicle starts rolling back."""
    phi = math.radians(20.0)
    table = _config(disc__net_buoyancy_fraction=0.0, tail_drive__frequency_Hz=0.0, robot__base="fixed")
    model = build_robot(table, CONFIG)
    pose = model.base_pose.copy()
    c, s = math.cos(phi), math.sin(phi)
    pose[:3, :3] = [[1, 0, 0], [0, c, -s], [0, s, c]]
    sim = Simulation(model, dt=0.002)
    sim.reset(base_pose=pose)
    wrench = sim.outputs()["base_wrench"]
    p = model.metadata["parameters"]
    righting = p["disc_mass_kg"] * 9.81 * abs(p["disc_com_z"]) * math.sin(phi)
    assert wrench[3] == pytest.approx(righting, rel=1e-9)
    assert np.abs(wrench[:3]).max() < 1e-9 and abs(wrench[4]) < 1e-9 and abs(wrench[5]) < 1e-9
    free = Simulation(model.replace(base_mode="floating"), dt=0.002)
    free.reset(base_pose=pose)
    free.advance(0.2)
    assert free.outputs()["base_twist"][3] < 0.0         # rolling back towards level


def test_bad_config_gives_one_line_error():
    with pytest.raises(ConfigError, match="tail_drive.servo_amplitude_deg"):
        build_robot(_config(tail_drive__servo_amplitude_deg=90.0), CONFIG)
    with pytest.raises(ConfigError, match="disc.mass_kg"):
        build_robot(_config(disc__mass_kg=-1.0), CONFIG)
