"""The live path of a Cosserat robot (`mms serve`): its rod stepped against the wall clock and sampled as a chain of
servo joints for ``sim/state`` (docs/cosserat.md, "Live"; docs/messages.md).

The robot file's ``[live]`` table cuts the rod into ``segments`` equal segments at the stations (segment boundaries)
``X_j = j l / N``, j = 0..N (head at 0). Each actuated strain component ``c`` of the robot's Table I case gives one
joint per segment, ``seg<j>_<component>``, whose position is the strain integrated over the segment,
``q_j = int_{X_(j-1)}^{X_j} (xi_c - xi_c,ref) dX`` (rad for a curvature or twist, m for a stretch or shear); ``qd``
and ``qdd`` integrate ``xi_t`` and ``xi_tt`` likewise. For a chain whose joint j sits in segment j, link j's heading
is then the rod's tangent at ``X_j``. These depend on the imposed strain law only (a quadrature per publish). The
head pose (the ``base_*`` fields: the head is the rod's reference body), the internal wrench (``tau``), the stations'
world positions and the contact forces come from the kinematic algorithm (Fig. 5) run at ``[live] n_X``, its head
pose integrated by RK4 with ``[live] dt``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.config import ConfigError

from .algorithms import RodState, advance_head, has_compiled_form, kinematic_instant
from .contacts import CannotHold
from .strains import REFERENCE_STRAIN, StrainField

#: The joint-name suffix of each strain component (xi order: Gamma_X, Gamma_Y, Gamma_Z, K_X, K_Y, K_Z).
COMPONENT_NAMES = ("stretch", "shear_y", "shear_z", "twist", "bend_y", "bend_z")
#: Gauss-Legendre points per segment of the joint quadrature: exact for polynomials of degree 11; on the shipped laws
#: (a wave of at least 5 segments per wavelength) within 3.1e-15 rad of scipy's adaptive quadrature
#: (tests/cosserat/test_live.py, band 1e-12 rad).
QUADRATURE_POINTS = 6
#: Defaults of [live]: a publish rate and step the pure-numpy rod keeps in real time on a 2-core machine (one
#: kinematic instant, 1-2 ms at n_X = 40, per 10 ms period; docs/cosserat.md "Live"), and the X grid it runs on.
DEFAULT_RATE_HZ = 100.0
DEFAULT_DT_S = 0.01
DEFAULT_N_X = 40
#: Most segments a live chain may have (a servo chain of 64 is far beyond any bus's cycle time).
MAX_SEGMENTS = 64
#: A step count of ``(t - t_now) / dt`` within this of an integer is that integer (rounding of the publish times).
STEP_COUNT_SLACK = 1e-9


@dataclass(frozen=True)
class LiveSettings:
    """``[live]`` of a cosserat robot file: ``segments`` (stations at j l / segments), the X grid ``n_X`` of the
    kinematic algorithm, its head-pose step ``dt`` (s) and the ``sim/state`` rate ``rate_hz`` (Hz)."""
    segments: int
    n_X: int
    dt: float
    rate_hz: float


def live_settings(config: dict, path) -> LiveSettings:
    """The checked ``[live]`` table (its schema: sim/robots/cosserat.py); a one-line ConfigError when it is missing."""
    table = config.get("live")
    if not isinstance(table, dict):
        raise ConfigError(path, "live", "missing: `mms serve` publishes the rod as a chain of servo joints and needs "
                                        "its stations: expected a [live] table with segments = N (equal segments, "
                                        "one joint per segment and actuated strain; docs/cosserat.md, Live)")
    return LiveSettings(int(table["segments"]), int(table.get("n_X", DEFAULT_N_X)), float(table.get("dt", DEFAULT_DT_S)),
                        float(table.get("rate_hz", DEFAULT_RATE_HZ)))


def serve_rate_hz(config: dict) -> float | None:
    """The ``sim/state`` rate a robot file asks of `mms serve` (a cosserat robot's ``[live] rate_hz``), else None."""
    robot, table = config.get("robot"), config.get("live")
    if isinstance(robot, dict) and robot.get("kind") == "cosserat" and isinstance(table, dict):
        return float(table.get("rate_hz", DEFAULT_RATE_HZ))
    return None


class SegmentChain:
    """The servo chain of a rod: N equal segments of [0, l], one joint per segment and actuated component."""

    def __init__(self, length: float, segments: int, actuated: tuple[int, ...]):
        self.stations = np.linspace(0.0, length, segments + 1)                     # (N + 1,) m, X_0 = 0 the head
        self.middles = 0.5 * (self.stations[1:] + self.stations[:-1])              # (N,) m, where each joint sits
        self.components = tuple(actuated)
        self.joint_names = [f"seg{j}_{COMPONENT_NAMES[c]}" for j in range(1, segments + 1) for c in self.components]
        nodes, weights = np.polynomial.legendre.leggauss(QUADRATURE_POINTS)        # on [-1, 1]
        half = 0.5 * (self.stations[1] - self.stations[0])
        self.X = (self.middles[:, None] + half * nodes[None, :]).ravel()          # (N * P,) m quadrature points
        self.weights = half * weights                                              # (P,) m
        self.segments = segments

    def integrate(self, strain: StrainField, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, qd, qdd)`` (N * n_c,) at t: ``xi - xi_ref``, ``xi_t``, ``xi_tt`` integrated over each segment, in
        ``joint_names`` order (rad or m; per s; per s^2)."""
        sample = strain(self.X, t)
        c = list(self.components)
        out = []
        for values in (sample.xi[:, c] - REFERENCE_STRAIN[c], sample.xi_t[:, c], sample.xi_tt[:, c]):
            per_point = values.reshape(self.segments, QUADRATURE_POINTS, len(c))
            out.append(np.einsum("spc,p->sc", per_point, self.weights).ravel())
        return out[0], out[1], out[2]


def station_positions(state: RodState, X: np.ndarray) -> np.ndarray:
    """World positions (len(X), 3) m of the sections at abscissae X: cubic Hermite between the grid's nodes, with
    the tangent ``dp/dX = R Gamma`` of each node (error O(h^4), h the node spacing)."""
    nodes = state.nodes
    keep = np.concatenate([[True], np.diff(nodes.X) > 0.0])          # a cut's two nodes are one section
    g = state.g_o @ nodes.g_rel[keep]
    Xn, p = nodes.X[keep], g[:, :3, 3]
    dp = np.einsum("nij,nj->ni", g[:, :3, :3], nodes.xi[keep, :3])
    k = np.clip(np.searchsorted(Xn, X, side="right") - 1, 0, Xn.size - 2)
    h = Xn[k + 1] - Xn[k]
    s = ((X - Xn[k]) / h)[:, None]
    h00, h10, h01, h11 = 2 * s ** 3 - 3 * s ** 2 + 1, s ** 3 - 2 * s ** 2 + s, -2 * s ** 3 + 3 * s ** 2, s ** 3 - s ** 2
    return h00 * p[k] + h10 * h[:, None] * dp[k] + h01 * p[k + 1] + h11 * h[:, None] * dp[k + 1]


class LiveRodModel:
    """What `mms serve` asks of a model (``joint_names``, ``actuated``, ``metadata``) for a cosserat robot file, and
    the simulation it serves (:meth:`live_simulation`). ``contact_names``: the reacting contacts, in the order of the
    ``contact_*`` fields of ``sim/state``."""

    def __init__(self, example, settings: LiveSettings, name: str, path):
        self.path = path
        self.settings = settings
        self.example = example
        rod = example.rod
        self.chain = SegmentChain(rod.length, self.settings.segments, self.example.strain.case.actuated)
        self.joint_names = list(self.chain.joint_names)
        self.actuated = np.ones(len(self.joint_names), dtype=bool)
        self.contact_names = [c.name for c in self.example.contacts if c.reaction.shape[1] > 0]
        self.metadata = {"name": name, "example": self.example.name,
                         "segments": self.settings.segments, "n_X": rod.n_X}

    def live_simulation(self, dt: float | None, integrator: str | None) -> "LiveRodSimulation":
        """The served simulation: ``dt`` (s) the head-pose step (default ``[live] dt``); RK4 only."""
        if integrator not in (None, "rk4"):
            raise ConfigError(None, "--integrator", f"got {integrator!r}: a cosserat rod's head pose is integrated by "
                                                    "RK4 only; expected rk4 or no --integrator")
        return LiveRodSimulation(self, self.settings.dt if dt is None else dt)


class LiveRodSimulation:
    """The rod against the clock, with the interface `mms serve` steps (``reset``, ``advance``, ``advance_to``,
    ``outputs``, ``t``, ``dt``): the head pose by RK4 steps of at most ``dt`` landing on each requested time, then one
    kinematic instant there. ``outputs()``: the ``sim/state`` arrays (docs/messages.md) of the current time."""

    #: the arrays beyond the rigid-tree ones that `mms serve` puts into sim/state
    extra_state_keys = ("station_X", "backbone", "contact_X", "contact_force")

    def __init__(self, model: LiveRodModel, dt: float):
        if not (math.isfinite(dt) and dt > 0.0):
            raise ConfigError(model.path, "live.dt", f"got {dt!r}, expected a head-pose step > 0 s")
        self.model, self.dt = model, float(dt)
        self.reset()

    def reset(self) -> None:
        example = self.model.example
        self.t = 0.0
        self.g = np.array(example.g_o, dtype=float)
        self.driver = example.driver_at(0.0)
        self.driver.engage(example.rod, example.strain, 0.0, self.g)
        self._outputs = self._sample(0.0)

    def advance(self, duration: float) -> dict[str, np.ndarray]:
        return self.advance_to(self.t + duration)

    def advance_to(self, t: float) -> dict[str, np.ndarray]:
        """Integrate the head pose to time t (s) in equal steps of at most dt; the outputs at t."""
        if t <= self.t:
            return self._outputs
        example = self.model.example
        steps = max(1, math.ceil((t - self.t) / self.dt - STEP_COUNT_SLACK))
        h, start = (t - self.t) / steps, self.t
        for n in range(steps):
            now = start + n * h
            driver = example.driver_at(now)
            if driver is not self.driver:
                self.driver = driver
                driver.engage(example.rod, example.strain, now, self.g)
            self.g = advance_head(example.rod, example.strain, driver, now, h, self.g,
                                  compiled=has_compiled_form(example.strain))
        self.t = t
        self._outputs = self._sample(t)
        return self._outputs

    def outputs(self) -> dict[str, np.ndarray]:
        return self._outputs

    def _sample(self, t: float) -> dict[str, Any]:
        """The sim/state arrays at t: the joints from the strain law, the rest from one kinematic instant."""
        from sim.spatial import matrix_to_quat

        example, chain = self.model.example, self.model.chain
        try:
            state = kinematic_instant(example.rod, example.strain, example.contacts, self.driver, t, self.g,
                                      example.dynamics, compiled=has_compiled_form(example.strain))
        except CannotHold as exc:
            key = "snake.supports" if example.name.startswith("snake") else "robot.example"
            raise ConfigError(self.model.path, key, f"the supports cannot hold the body at t = {t:.6g} s: {exc}") \
                from None
        q, qd, qdd = chain.integrate(example.strain, t)
        R = state.g_o[:3, :3]
        tau = np.stack([-np.interp(chain.middles, state.nodes.X, state.Lam[:, c]) for c in chain.components],
                       axis=1).ravel()
        forces = [R @ state.nodes.g_rel[state.nodes.at(C), :3, :3] @ F[:3] for C, F in state.wrenches]
        return {"q": q, "qd": qd, "qdd": qdd, "tau": tau, "strain": np.zeros(0),
                "base_pos": state.g_o[:3, 3].copy(), "base_quat": matrix_to_quat(R), "base_twist": state.eta_o,
                "base_wrench": state.Fc, "ext_wrench": np.zeros(6),
                "station_X": chain.stations, "backbone": station_positions(state, chain.stations),
                "contact_X": np.array([C for C, _ in state.wrenches], dtype=float),
                "contact_force": np.array(forces, dtype=float).reshape(-1, 3)}


def check_rig_joints(joint_names: list[str], rig_path: Path, robot: str, every_joint: bool) -> None:
    """A one-line ConfigError unless every ``[[joints]] joint`` of the rig is one of the robot's joints, and (with
    ``every_joint``: a servo chain) every robot joint drives a servo of the rig. Only the joint map is read here (the
    simulator does not depend on the rig loaders of firmware_interface); the driver checks the whole file."""
    from sim.config import load_toml

    table = load_toml(rig_path).get("joints", [])
    if not isinstance(table, list) or not all(isinstance(j, dict) and isinstance(j.get("joint"), str) for j in table):
        raise ConfigError(rig_path, "joints", "expected [[joints]] tables, each with a joint name (docs/rigs.md)")
    rig_joints = [j["joint"] for j in table]
    known = set(joint_names)
    for k, joint in enumerate(rig_joints):
        if joint not in known:
            raise ConfigError(rig_path, f"joints[{k}].joint",
                              f"got {joint!r}: robot {robot} has no such joint; expected one of {_span(joint_names)}")
    if every_joint:
        mapped = set(rig_joints)
        missing = [name for name in joint_names if name not in mapped]
        if missing:
            raise ConfigError(rig_path, "joints", f"robot {robot}'s joints {_span(missing)} drive no servo: expected "
                                                  f"one [[joints]] per segment joint ({len(joint_names)}: "
                                                  f"{_span(joint_names)}; the robot's [live] segments)")


def _span(names: list[str]) -> str:
    return ", ".join(names) if len(names) <= 3 else f"{names[0]}, {names[1]}, ..., {names[-1]}"
