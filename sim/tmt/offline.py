"""What the TMT robot kinds (sim/robots/biped.py, flapper2link.py, clemens.py) share to run under ``mms sim``
through its ``simulate_offline`` hook (sim/cli_sim.py): the generic options they accept, the refusal of a rigid-tree
build, the run record, the energy of a state and the point-mass bodies they are made of."""
from __future__ import annotations

import argparse
from pathlib import Path
import time
from dataclasses import dataclass, field

import numpy as np

from ..config import ConfigError
from ..model import Model
from ..spatial import spatial_inertia
from .engine import body_inertias, tree_kinematics

#: Rotational inertia of a point mass about its centre (the spec's 1e-6 1, in mass x length^2 units): keeps the
#: coordinate that turns it in the mass matrix without changing the motion beyond ~1e-6.
POINT_INERTIA = 1e-6

#: `mms sim` options a TMT run does not take (they configure the rigid-tree integrator or a tree's base).
REFUSED_OPTIONS = {"base": "--base", "integrator": "--integrator", "periods": "--periods", "dt": "--dt"}


def check_options(args: argparse.Namespace, path, kind: str) -> float | None:
    """The ``--duration`` asked for (None: the config's); a one-line ConfigError for a generic option that does
    not apply to a TMT run (the integrator is solve_ivp's DOP853 at rtol 1e-10, the sample interval a config key)."""
    for name, flag in REFUSED_OPTIONS.items():
        if getattr(args, name, None) is not None:
            raise ConfigError(path, None, f"{flag} does not apply to robot kind {kind!r} (a TMT system integrated by "
                                          "DOP853 at rtol 1e-10; its sample interval and span are config keys)")
    if getattr(args, "record_every", None) is not None:
        raise ConfigError(path, None, f"--record-every does not apply to robot kind {kind!r}")
    return getattr(args, "duration", None)


def not_a_tree(kind: str, path) -> ConfigError:
    """The error of building a TMT system as a rigid tree (``mms serve``, ``mms check``)."""
    return ConfigError(path, "robot.kind", f"{kind!r} is a constrained TMT system with events, not a rigid tree: "
                                           "run it with `mms sim`")


@dataclass
class TMTSystem:
    """The ``model`` of a TMT run as ``mms sim`` records it: the tree (its coordinates, bodies) and the metadata."""

    tree: Model
    metadata: dict
    joint_names: list[str] = field(init=False)
    body_names: list[str] = field(init=False)
    joint_types: list[str] = field(init=False)

    def __post_init__(self):
        self.joint_names = list(self.tree.joint_names)
        self.body_names = list(self.tree.body_names)
        self.joint_types = list(self.tree.joint_types)


def point_body(mass: float, position, point_inertia: float = POINT_INERTIA) -> np.ndarray:
    """The spatial inertia (6, 6) of a point mass (kg) at ``position`` (3,) in its body's frame."""
    return spatial_inertia(mass, list(position), np.eye(3) * point_inertia)


def potential_energy(model: Model, q: np.ndarray, springs: bool = True) -> float:
    """Gravity's potential energy -sum m_i g . r_i, plus (``springs``) the joint springs' 1/2 k (q - r0)^2 (J)."""
    kin = tree_kinematics(model, model.base_pose, q, np.zeros(model.n))
    masses = np.array([mass for mass, _, _ in body_inertias(model)])
    energy = -float(masses @ (kin.com @ model.gravity))
    return energy + (0.5 * float(model.law_k @ (q - model.law_r0) ** 2) if springs else 0.0)


class Stopwatch:
    """Wall time of a run (s), for the run record."""

    def __init__(self):
        self.start = time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start


def with_defaults(config: dict, defaults: dict) -> dict:
    """The config's tables of ``defaults`` with every missing key filled from it (the schema has checked types)."""
    return {name: {**values, **config.get(name, {})} for name, values in defaults.items()}


def save_figure(fig, path: Path) -> Path:
    """Lay out, write (110 dpi) and close a matplotlib figure; its path."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
