"""RayBot's tail with Lighthill's elongated-body theory (``[tail] hydro_model = "lighthill"``, the default) against
the paper's quasi-steady plates (``"quasi_steady"``): which plug-ins act on the tail, and the Strouhal number and
speed of the default beat (docs/raybot.md, "Swimming figures")."""
from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, load_toml
from sim.hydro import AddedMass, ControlSurfaceLift
from sim.lighthill import Lighthill
from sim.dynamics import hybrid_step
from sim.model import Data
from sim.robots import build_robot, raybot
from sim.spatial import quat_to_matrix
from sim.swimming import heading, steady_window

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "robots" / "raybot.toml"
TAIL = ("peduncle", "tail_front", "tail_caudal")
#: docs/raybot.md: the default robot (1.5 Hz, 25 deg servo, buoyant), last three beats of a 10 s run: 0.233 m/s,
#: St 0.746 (the quasi-steady tail with its assumed suction: St 15.6). Band: the spread of the figure over run
#: lengths 8-12 s and dt/2 was below 3 %.
DEFAULT_SPEED_M_S, DEFAULT_STROUHAL, BAND = 0.233, 0.746, 0.05


def _model(**tail):
    table = copy.deepcopy(load_toml(CONFIG))
    table["tail"].update(tail)
    return build_robot(table, CONFIG)


def test_lighthill_replaces_added_mass_and_lift_on_the_tail_only():
    model = _model()
    tail = {model.body_names.index(name) for name in TAIL}
    lighthill = [m for m in model.force_models if isinstance(m, Lighthill)]
    assert len(lighthill) == 1
    assert set(lighthill[0].packed_view("sec_body").tolist()) == tail
    assert lighthill[0].packed_view("te_body").tolist() == [model.body_names.index("tail_caudal")]
    for cls in (AddedMass, ControlSurfaceLift):
        plugin = next(m for m in model.force_models if isinstance(m, cls))
        assert not tail & set(plugin.bodies.tolist())
        assert 0 in plugin.bodies                         # the disc keeps them
    quasi = _model(hydro_model="quasi_steady")
    assert not any(isinstance(m, Lighthill) for m in quasi.force_models)
    lift = next(m for m in quasi.force_models if isinstance(m, ControlSurfaceLift))
    assert {model.body_names.index(name) for name in TAIL[1:]} <= set(lift.bodies.tolist())   # the two plates


#: docs/raybot.md: what the tail's mean thrust (0.98 N) balances at the default run's steady speed, N, along the
#: heading: (force models, bodies) -> drag.
THRUST_N = 0.98
SEGMENTS = ("seg_front_l", "seg_front_r", "seg_rear_l", "seg_rear_r")
DRAG_BUDGET_N = {(("drag",), ("disc",)): 0.25, (("drag",), SEGMENTS): 0.39, (("lift",), ("disc", *SEGMENTS)): 0.21,
                 (("drag",), ("tail_front", "tail_caudal")): 0.07, (("drag", "lift"), ("pelvic_l", "pelvic_r")): 0.06}


def _forward_forces(model, t, arrays, ahead):
    """{(force model name, body name): mean force along the heading (N)} over the recorded states t."""
    data = Data(model)
    totals: dict = {}
    pose, zeros = np.eye(4), np.zeros(model.n)
    for i in range(t.size):
        pose[:3, :3] = quat_to_matrix(arrays["base_quat"][i])
        pose[:3, 3] = arrays["base_pos"][i]
        hybrid_step(model, data, float(t[i]), pose, arrays["base_twist"][i], arrays["q"][i], arrays["qd"][i],
                    zeros, zeros)
        for force_model in model.force_models:
            data.f_ext.fill(0.0)
            data.M_added.fill(0.0)
            force_model.apply(model, data, float(t[i]))
            world = np.einsum("jab,jb->ja", data.g[:, :3, :3], data.f_ext[:, :3])
            for j, name in enumerate(model.body_names):
                key = (force_model.name, name)
                totals[key] = totals.get(key, 0.0) + float(world[j, :2] @ ahead) / t.size
    return totals


def test_default_beat_strouhal_speed_and_drag_budget():
    model = _model()
    t, arrays, _ = raybot.swim(model, 10.0, record_every=5)
    figures = raybot.swim_figures(model, t, arrays)
    assert figures["steady_speed_m_s"] == pytest.approx(DEFAULT_SPEED_M_S, rel=BAND)
    assert figures["strouhal"] == pytest.approx(DEFAULT_STROUHAL, rel=BAND)
    assert figures["mean_thrust_N"] == pytest.approx(THRUST_N, rel=BAND)
    assert figures["cost_of_transport"] > 0.0
    window = steady_window(t, figures["tailbeat_frequency_Hz"])
    forces = _forward_forces(model, t[window], {k: v[window] for k, v in arrays.items()},
                             heading(arrays["base_quat"][window]))
    assert forces[("lighthill", "tail_caudal")] == pytest.approx(figures["mean_thrust_N"], rel=0.05)
    for (names, bodies), drag in DRAG_BUDGET_N.items():
        total = -sum(forces[(name, body)] for name in names for body in bodies)
        assert total == pytest.approx(drag, rel=0.1, abs=0.005), (names, bodies)


def test_unknown_hydro_model_names_the_key():
    with pytest.raises(ConfigError, match=r"tail\.hydro_model"):
        _model(hydro_model="potential")
