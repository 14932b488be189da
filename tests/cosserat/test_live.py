"""The live path of the Cosserat robots (sim/cosserat/live.py, docs/cosserat.md "Live"): the joint angles against an
independent quadrature and the rod's own tangent, the stations against the grid, the head pose against the batch
algorithm, the contact forces against their total; `mms serve` on a rod over real ZeroMQ; bad input in one line.

Figures (deterministic: no spread; each band 10x or more above the measured error, 2026-11-27):
- q against scipy's adaptive quadrature of the strain law: <= 3.1e-15 rad (|q| up to 1.06 rad); band 1e-12 rad;
- sum of the joint angles up to X_j against the heading of g(X_j) by Magnus-4 on n_X = 400: <= 3.4e-10 rad; band 1e-8;
- the stations' Hermite positions against the grid cut at the stations (n_X = 40): <= 1.34e-6 m; band 2e-5 m;
- the head pose after 1 s at dt = 10 ms against `run_kinematic` at dt = 2.5 ms: <= 1.05e-8 m; band 1e-7 m;
- the contact forces' sum against the total reaction Fc: <= 3.6e-15 N of 12 N; band 1e-12 relative.
"""
from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest
import zmq
from scipy.integrate import quad

from sim.config import ConfigError, load_toml, shipped_config
from sim.cosserat.algorithms import run_kinematic
from sim.cosserat.live import check_rig_joints
from sim.cosserat.rod import build_nodes
from sim.messages import TOPIC_SIM_STATE, decode, validate
from sim.network import write_loopback_network
from sim.robots.cosserat import build_live

ROBOTS = ("earthworm", "inchworm", "snake2d", "snake3d")
#: the head segment's joints: one per actuated strain of the robot's Table I case
FIRST_JOINTS = {"earthworm": ["seg1_stretch"], "inchworm": ["seg1_bend_z"], "snake2d": ["seg1_bend_z"],
                "snake3d": ["seg1_bend_y", "seg1_bend_z"]}
ROOT = Path(__file__).resolve().parents[2]
Q_BAND_RAD = 1e-12
#: Magnus-4 on 400 steps against the 6-point Gauss quadrature (measured <= 3.4e-10 rad, the grid's O(h^4))
HEADING_BAND_RAD = 1e-8
HEADING_N_X = 400
STATION_BAND_M = 2e-5
HEAD_BAND_M = 1e-7
BATCH_DT_S = 2.5e-3
FORCE_BAND = 1e-12
#: central difference step of the qd check (s): its O(delta^2 q''') error is ~1e-7 rad/s on these laws
DIFF_STEP_S = 1e-4
QD_BAND = 1e-5
T_CHECK_S = 1.0
START_TIMEOUT_S = 120.0


def live(name: str, **overrides):
    config = load_toml(shipped_config("robot", name))
    for table, values in overrides.items():
        config[table] = {**config[table], **values}
    return build_live(config, name)


@pytest.mark.parametrize("name", ROBOTS)
def test_joint_angles_are_the_strain_integrated_over_each_segment(name):
    model = live(name)
    simulation = model.live_simulation(None, None)
    out = simulation.advance_to(T_CHECK_S)
    strain, chain = model.example.strain, model.chain
    reference = [quad(lambda X: strain(np.array([X]), T_CHECK_S).xi[0, c] - (1.0 if c == 0 else 0.0),
                      chain.stations[j], chain.stations[j + 1], epsabs=1e-14, epsrel=1e-12)[0]
                 for j in range(chain.segments) for c in chain.components]
    assert model.joint_names[:len(chain.components)] == FIRST_JOINTS[name]
    assert np.max(np.abs(out["q"] - reference)) < Q_BAND_RAD
    assert np.max(np.abs(out["q"])) > 1e-4          # the law moves the joints at t (the check is not on zeros)
    # qd and qdd are the time derivatives of q (central differences of the same quadrature)
    later, earlier = (chain.integrate(strain, T_CHECK_S + s * DIFF_STEP_S)[0] for s in (1, -1))
    scale = max(1.0, float(np.max(np.abs(out["qd"]))))
    assert np.max(np.abs((later - earlier) / (2 * DIFF_STEP_S) - out["qd"])) < QD_BAND * scale
    rates = [chain.integrate(strain, T_CHECK_S + s * DIFF_STEP_S)[1] for s in (1, -1)]
    assert np.max(np.abs((rates[0] - rates[1]) / (2 * DIFF_STEP_S) - out["qdd"])) < QD_BAND * max(
        1.0, float(np.max(np.abs(out["qdd"]))))


@pytest.mark.parametrize("name", ("inchworm", "snake2d"))
def test_a_chain_of_these_joints_has_the_rods_tangent_at_every_station(name):
    """Planar rods: the heading of g(X_j) in the head frame (Magnus-4 on a fine grid) is the sum of the joint
    angles of the segments before X_j."""
    model = live(name)
    strain, chain, rod = model.example.strain, model.chain, model.example.rod
    fine = rod.__class__(rod.length, rod.Mc, rod.gravity, HEADING_N_X)
    for t in (0.7, T_CHECK_S):
        q = chain.integrate(strain, t)[0]
        nodes = build_nodes(fine, strain, t, cuts=list(chain.stations[1:-1]))
        heading = [math.atan2(nodes.g_rel[nodes.at(X), 1, 0], nodes.g_rel[nodes.at(X), 0, 0]) for X in chain.stations]
        wrapped = (np.array(heading) - np.concatenate([[0.0], np.cumsum(q)]) + np.pi) % (2 * np.pi) - np.pi
        assert np.max(np.abs(wrapped)) < HEADING_BAND_RAD


@pytest.mark.parametrize("name", ROBOTS)
def test_stations_head_pose_and_contact_forces_against_the_batch_algorithm(name):
    model = live(name)
    example, chain = model.example, model.chain
    simulation = model.live_simulation(None, None)
    out = simulation.advance_to(T_CHECK_S)
    # the stations' world positions: the grid cut at the stations carries them as nodes
    nodes = build_nodes(example.rod, example.strain, T_CHECK_S, cuts=list(chain.stations[1:-1]))
    exact = np.array([(simulation.g @ nodes.g_rel[nodes.at(X)])[:3, 3] for X in chain.stations])
    assert np.max(np.abs(out["backbone"].reshape(-1, 3) - exact)) < STATION_BAND_M
    assert np.array_equal(out["station_X"], np.linspace(0.0, example.rod.length, chain.segments + 1))
    # the head pose: RK4 at the served dt (10 ms) against the batch run at 2.5 ms
    batch = run_kinematic(example.rod, example.strain, example.contacts, example.driver_at, T_CHECK_S,
                          BATCH_DT_S, round(T_CHECK_S / BATCH_DT_S), g_o=example.g_o)[-1]
    assert np.max(np.abs(batch.g_o[:3, 3] - out["base_pos"])) < HEAD_BAND_M
    # the contact forces (world) add up to the total reaction Fc (head frame, rotated to the world)
    total = simulation.g[:3, :3] @ out["base_wrench"][:3]
    forces = out["contact_force"].reshape(-1, 3)
    assert forces.shape[0] == len(model.contact_names) == out["contact_X"].size
    assert np.max(np.abs(forces.sum(axis=0) - total)) <= FORCE_BAND * max(1.0, float(np.max(np.abs(total))))


def test_bad_input_is_one_line_naming_the_key(tmp_path):
    config = load_toml(shipped_config("robot", "snake2d"))
    del config["live"]
    with pytest.raises(ConfigError) as missing:
        build_live(config, "snake2d.toml")
    assert missing.value.key == "live" and "segments" in str(missing.value) and "\n" not in str(missing.value)
    joint_names = live("snake2d").joint_names
    with pytest.raises(ConfigError) as foreign:     # the flapper's rig names the flapper's joints
        check_rig_joints(joint_names, shipped_config("rig", "flapper-dynamixel"), "snake2d", every_joint=True)
    assert foreign.value.key == "joints[0].joint" and "'stroke_r'" in str(foreign.value)
    eight = live("snake2d", live={"segments": 8}).joint_names       # the rig's ten servos on an 8-segment rod
    with pytest.raises(ConfigError) as extra:
        check_rig_joints(eight, shipped_config("rig", "snake-dynamixel"), "snake2d", every_joint=True)
    assert extra.value.key == "joints[8].joint" and "seg9_bend_z" in str(extra.value)
    twelve = live("snake2d", live={"segments": 12}).joint_names
    with pytest.raises(ConfigError) as short:
        check_rig_joints(twelve, shipped_config("rig", "snake-dynamixel"), "snake2d", every_joint=True)
    assert short.value.key == "joints" and "seg11_bend_z, seg12_bend_z" in str(short.value)
    check_rig_joints(joint_names, shipped_config("rig", "snake-dynamixel"), "snake2d", every_joint=True)


def test_mms_serve_publishes_the_rod_over_zeromq(tmp_path):
    """`mms serve snake3d` in lockstep: every state valid against the schema, 20 joints, the stations' positions
    and the five pegs' forces, and the head pose the in-process simulation has at the same time."""
    network = tmp_path / "network.toml"
    endpoints = write_loopback_network(network)
    serve = subprocess.Popen([sys.executable, "-m", "hil.cli", "serve", "snake3d", "--network", str(network),
                              "--mode", "lockstep"], cwd=ROOT, stderr=subprocess.PIPE, text=True)
    context = zmq.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, TOPIC_SIM_STATE.encode())
    sub.connect(endpoints["sim_pub"])
    control = context.socket(zmq.REQ)
    control.setsockopt(zmq.LINGER, 0)
    control.connect(endpoints["sim_control"])
    try:
        control.send(msgpack.packb({"cmd": "get", "what": "joint_names"}))
        assert control.poll(START_TIMEOUT_S * 1000), serve.stderr.read() if serve.poll() is not None else "no reply"
        assert len(msgpack.unpackb(control.recv())["joint_names"]) == 20
        # one state at a time until one arrives (the subscription has reached the publisher), then a reset: the
        # first state after it carries the name lists, and none of the run can be missed
        while True:
            control.send(msgpack.packb({"cmd": "step", "n": 1}))
            assert control.poll(START_TIMEOUT_S * 1000)
            assert msgpack.unpackb(control.recv())["ok"] is True
            if sub.poll(200):
                break
        while sub.poll(200):
            sub.recv_multipart()
        for request in ({"cmd": "reset"}, {"cmd": "step", "n": 100}):
            control.send(msgpack.packb(request))
            assert control.poll(START_TIMEOUT_S * 1000)
            assert msgpack.unpackb(control.recv())["ok"] is True
        states = []
        while sub.poll(2000):
            states.append(decode(sub.recv_multipart())[1])
            if states[-1]["t"] >= T_CHECK_S - 1e-9:
                break
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
        context.destroy(linger=0)
    for state in states:
        validate(TOPIC_SIM_STATE, state)
    first, last = states[0], states[-1]
    assert len(first["joint_names"]) == 20 and first["contact_names"] == [f"peg {i}" for i in range(1, 6)]
    assert abs(last["t"] - T_CHECK_S) < 1e-9 and len(last["backbone"]) == 33 and len(last["contact_force"]) == 15
    reference = live("snake3d").live_simulation(None, None).advance_to(T_CHECK_S)
    assert np.allclose(last["base_pos"], reference["base_pos"], rtol=0, atol=1e-12)
    assert np.allclose(last["q"], reference["q"], rtol=0, atol=1e-12)
