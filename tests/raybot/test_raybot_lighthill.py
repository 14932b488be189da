"""RayBot's tail with Lighthill's elongated-body theory (``[tail] hydro_model = "lighthill"``, the default) against
the paper's quasi-steady plates (``"quasi_steady"``): which plug-ins act on the tail, and the Strouhal number and
speed of the default beat (docs/raybot.md, "Swimming figures")."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from sim.config import ConfigError, load_toml
from sim.hydro import AddedMass, ControlSurfaceLift
from sim.lighthill import Lighthill
from sim.robots import build_robot, raybot

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


def test_default_beat_strouhal_and_speed():
    model = _model()
    t, arrays, _ = raybot.swim(model, 10.0, record_every=5)
    figures = raybot.swim_figures(model, t, arrays)
    assert figures["steady_speed_m_s"] == pytest.approx(DEFAULT_SPEED_M_S, rel=BAND)
    assert figures["strouhal"] == pytest.approx(DEFAULT_STROUHAL, rel=BAND)
    assert figures["mean_thrust_N"] > 0.0 and figures["cost_of_transport"] > 0.0


def test_unknown_hydro_model_names_the_key():
    with pytest.raises(ConfigError, match=r"tail\.hydro_model"):
        _model(hydro_model="potential")
