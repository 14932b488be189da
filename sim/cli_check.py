"""``mms check``: evaluate a robot with both dynamics engines and compare them (docs/tmt.md).

    mms check ROBOT [--random-states 20] [--run-states 10] [--seed 0] [--tolerance 1e-9]

For states of a short run of the robot (its own motion, its force models active) and random states (random
joint positions and rates, base pose and twist; all joints passive, all actuated and the model's own split),
the hybrid Newton-Euler algorithm (sim/dynamics.py) computes the accelerations and the actuated joints'
torques. The TMT engine (sim/tmt/) solves the same problem from the same inputs: the passive joints' torques
(joint laws included) and the force models' wrenches and added inertias, frozen at that state. The command
prints the largest relative difference of accelerations and torques and exits 1 when it exceeds the tolerance.
"""
from __future__ import annotations

import argparse

import numpy as np

from sim.cli_check_args import RUN_DT, RUN_SPAN_S
from sim.config import ConfigError

#: Vectors whose entries are all below this (their units) are zero for both engines: no relative difference.
ZERO_FLOOR = 1e-12
#: States whose free mass-matrix block is worse conditioned than this are ill-posed (a passive joint moving no
#: inertia: the hybrid algorithm divides by its zero articulated inertia, the TMT solve is singular) and skipped.
ILL_POSED_CONDITION = 1e12
#: Spread of the random states: joint positions (rad or m) about rest, rates, base twist (m/s, rad/s).
RANDOM_POSITION, RANDOM_RATE, RANDOM_TWIST = 0.5, 1.0, 0.5


def relative_difference(reference: np.ndarray, other: np.ndarray) -> float:
    """max |a - b| / max(|a|, |b|) over the entries (0 when both are below ZERO_FLOOR)."""
    scale = max(float(np.abs(reference).max(initial=0.0)), float(np.abs(other).max(initial=0.0)))
    if scale < ZERO_FLOOR:
        return 0.0
    return float(np.abs(reference - other).max()) / scale


def compare_at(model, data, t, base_pose, base_twist, q, qd, actuated, qdd, tau) -> dict[str, float] | None:
    """Both engines at one state; relative differences of qdd, the actuated torques and the base acceleration
    (None for an ill-posed state, see ILL_POSED_CONDITION)."""
    from sim.dynamics import hybrid_dynamics
    from sim.tmt import tmt_dynamics

    hybrid = hybrid_dynamics(model, base_pose, base_twist, q, qd, actuated, qdd, tau, t=t, data=data, use_laws=True)
    passive_tau = np.where(actuated, 0.0, hybrid.tau)           # applied + laws, as the hybrid used them
    tmt = tmt_dynamics(model, base_pose, base_twist, q, qd, actuated, qdd, passive_tau, use_laws=False,
                       extra_inertia=data.M_added.copy(), body_wrench=data.f_ext + data.f_gravity)
    if tmt.condition > ILL_POSED_CONDITION:
        return None
    return {"qdd": relative_difference(hybrid.qdd, tmt.qdd),
            "tau": relative_difference(hybrid.tau[actuated], tmt.tau[actuated]) if actuated.any() else 0.0,
            "base_acc": relative_difference(hybrid.base_acc, tmt.base_acc)}


def check(model, *, random_states: int, run_states: int, seed: int) -> tuple[int, int, dict[str, float]]:
    """(states checked, ill-posed states skipped, the largest relative difference of each quantity)."""
    from sim.model import Data
    from sim.simulation import Simulation
    from sim.spatial import quat_to_matrix

    data = Data(model)
    worst = {"qdd": 0.0, "tau": 0.0, "base_acc": 0.0}
    count = skipped = 0

    def record(difference: dict[str, float] | None) -> None:
        nonlocal count, skipped
        if difference is None:
            skipped += 1
            return
        count += 1
        for key, value in difference.items():
            worst[key] = max(worst[key], value)

    if run_states > 0:
        sim = Simulation(model, "rk4", RUN_DT)
        sim.reset()
        for _ in range(run_states):
            sim.advance(RUN_SPAN_S / run_states)
            out = sim.outputs()
            twist = out["base_twist"] if model.base_mode == "floating" else np.zeros(6)
            record(compare_at(model, data, sim.t, sim.base_pose, twist, out["q"], out["qd"], model.actuated,
                              out["qdd"], sim.tau_applied))
    rng = np.random.default_rng(seed)
    n = model.n
    for _ in range(random_states):
        q = model.q_rest + rng.normal(scale=RANDOM_POSITION, size=n)
        qd = rng.normal(scale=RANDOM_RATE, size=n)
        quaternion = rng.normal(size=4)
        pose = np.eye(4)
        pose[:3, :3] = quat_to_matrix(quaternion / np.linalg.norm(quaternion))
        pose[:3, 3] = model.base_pose[:3, 3]
        twist = rng.normal(scale=RANDOM_TWIST, size=6) if model.base_mode == "floating" else np.zeros(6)
        qdd = rng.normal(scale=RANDOM_RATE, size=n)
        tau = rng.normal(scale=RANDOM_RATE, size=n) * 1e-3
        for actuated in (np.zeros(n, dtype=bool), np.ones(n, dtype=bool), model.actuated):
            record(compare_at(model, data, 0.0, pose, twist, q, qd, actuated, qdd, tau))
    return count, skipped, worst


def run(args: argparse.Namespace) -> int:
    from sim.config import load_toml
    from sim.robots import build_rigid_robot

    if args.random_states < 0 or args.run_states < 0 or args.random_states + args.run_states == 0:
        raise ConfigError(None, "--random-states/--run-states", "expected counts >= 0, not both 0")
    config = load_toml(args.config)
    model = build_rigid_robot(config, args.config, "are not checked: the TMT engine takes rigid trees (the modal "
                                                   "recursions are checked against Euler-Lagrange in tests/flexible)")
    if model.base_mode == "imposed":
        raise ConfigError(args.config, "robot.base", "an imposed base is not checked (the TMT engine takes a fixed "
                                                     "or a floating base)")
    count, skipped, worst = check(model, random_states=args.random_states, run_states=args.run_states,
                                  seed=args.seed)
    agree = count > 0 and all(value <= args.tolerance for value in worst.values())
    ill_posed = f" ({skipped} ill-posed states skipped: a passive joint moving no inertia)" if skipped else ""
    print(f"mms check {args.config}: {count} states{ill_posed}, {model.n} joints, {model.base_mode} base; largest relative "
          f"difference hybrid vs TMT: joint accelerations {worst['qdd']:.2e}, actuated torques {worst['tau']:.2e}, "
          f"base acceleration {worst['base_acc']:.2e} -> "
          + ("agree" if agree else "DISAGREE") + f" (tolerance {args.tolerance:g})")
    return 0 if agree else 1

