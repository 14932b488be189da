"""The record of one offline run (`mms sim`): what the robots' run functions return and `mms sim` writes out.

Apart from sim/cli_sim.py so that a robot module can make one without importing the command (which imports the
warm-up, which imports the robots).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: Units and meaning of the recorded arrays (the fields of Simulation.outputs(), docs/messages.md).
OUTPUT_UNITS: dict[str, tuple[str, str]] = {
    "t": ("s", "simulation time of each row"),
    "q": ("rad or m", "joint positions, model.joint_names order"),
    "qd": ("rad/s or m/s", "joint velocities"),
    "qdd": ("rad/s^2 or m/s^2", "joint accelerations (imposed for actuated joints, computed for passive ones)"),
    "tau": ("N m or N", "joint torques (computed for actuated joints, applied by the joint law for passive ones)"),
    "strain": ("rad or m", "q - q_rest"),
    "base_pos": ("m", "position of the base frame origin O_0 in the world frame (x, y, z)"),
    "base_quat": ("1", "orientation of the base frame in the world, unit quaternion (w, x, y, z)"),
    "base_twist": ("m/s, rad/s", "base twist (V, Omega) in the base frame"),
    "base_wrench": ("N, N m", "wrench (force, moment) the support exerts on the base, base frame, about O_0 "
                              "(zero in free flight)"),
    "ext_wrench": ("N, N m", "total non-gravity external wrench (e.g. quasi-steady aerodynamics), world axes, "
                             "about O_0 (added-mass reactions are inside the dynamics, not in this field)"),
    "modal_q": ("1 (modal units)", "modal coordinates of the flexible bodies (sim/flexible.py; models with them only)"),
    "modal_qd": ("1/s", "modal coordinate rates"),
}


@dataclass
class SimRun:
    """Record of one run (see the module docstring). Arrays have one row per recorded time."""
    t: np.ndarray
    arrays: dict[str, np.ndarray]
    model: Any
    config: dict
    options: dict
    wall_time_s: float
    units: dict = field(default_factory=lambda: dict(OUTPUT_UNITS))

    @property
    def sim_time_s(self) -> float:
        return float(self.t[-1] - self.t[0]) if self.t.size else 0.0
