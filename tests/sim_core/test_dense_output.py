"""Dense output (Simulation.advance_to): the states `mms serve` publishes at its publish times when the step does
not divide the publish period (the flapper's ROSW step of 0.4 ms against 1 ms).

- at a step end it is the step loop's own output (to rounding: one compiled call against several);
- between step ends it is the chord between the two step ends around the target (the quaternion renormalised)
  with the actuated joints exactly on their laws: checked against a twin simulation's step-end outputs;
- a target before the previous step end, or in the past after the state was changed, is refused.
The published states' accuracy against the RK4 reference is held in test_sim_core_rosw.py.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sim.robots import load_robot
from sim.simulation import Simulation
from sim.testing import FUSED_RTOL, MAGNITUDE_FLOOR

ROOT = Path(__file__).resolve().parents[2]
DT = 4e-4                   # the flapper's ROSW step (s)
PUBLISH_PERIOD = 1e-3       # mms serve's 1 kHz (s)
#: the same floating-point operations in another order (a + w (b - a) against the test's own formula)
CHORD_RTOL = 1e-12
CHORD_ATOL = 1e-12


@pytest.fixture(scope="module")
def model():
    return load_robot(ROOT / "configs/robots/flapper.toml")


def test_a_target_on_a_step_end_is_the_step_loops_output(model):
    dense, stepped = Simulation(model, "rosw", DT), Simulation(model, "rosw", DT)
    for k in range(1, 6):
        published = dense.advance_to(k * DT)
        stepped.step()
        expected = stepped.outputs()
        assert dense.t == stepped.t
        for name, value in expected.items():
            np.testing.assert_allclose(published[name], value, rtol=FUSED_RTOL, atol=MAGNITUDE_FLOOR, err_msg=name)


def test_between_step_ends_the_state_is_on_the_chord_with_the_laws_exact(model):
    dense, twin = Simulation(model, "rosw", DT), Simulation(model, "rosw", DT)
    ticks = np.arange(1, 11) * PUBLISH_PERIOD
    start = twin.outputs()
    times, steps = twin.record(int(np.ceil(ticks[-1] / DT)) + 1, 1)
    times = np.concatenate([[0.0], times])
    actuated = np.flatnonzero(model.actuated)
    interior = 0
    for t in ticks:
        published = dense.advance_to(t)
        b = int(np.searchsorted(times, t - DT * 1e-9))  # the step end at or after t (to rounding); b - 1 before
        weight = (t - times[b - 1]) / (times[b] - times[b - 1])
        interior += bool(weight < 1.0 - 1e-9)         # odd ms fall between step ends, even ones on them
        assert dense.t == pytest.approx(times[b], abs=1e-15)
        for name, value in published.items():
            a_row = start[name] if b == 1 else steps[name][b - 2]
            expected = a_row + weight * (steps[name][b - 1] - a_row)
            if name == "base_quat":
                expected = expected / np.linalg.norm(expected)
            if name in ("q", "qd", "qdd"):
                for k in actuated:
                    expected[k] = model.motion_laws[k].evaluate(t)[("q", "qd", "qdd").index(name)]
            np.testing.assert_allclose(value, expected, rtol=CHORD_RTOL, atol=CHORD_ATOL, err_msg=f"{name} at {t}")
    assert interior == 5
    # the actuated joints are on their laws, not on the chord between the step ends
    chord = start["q"] + 0.5 * (steps["q"][0] - start["q"])
    midway = Simulation(model, "rosw", DT).advance_to(DT / 2)
    law_q = np.array([model.motion_laws[k].evaluate(DT / 2)[0] for k in actuated])
    np.testing.assert_allclose(midway["q"][actuated], law_q, rtol=0, atol=1e-15)
    assert np.abs(chord[actuated] - law_q).max() > 1e-9


def test_a_target_in_the_past_is_refused(model):
    sim = Simulation(model, "rosw", DT)
    sim.advance_to(PUBLISH_PERIOD)                     # steps to 1.2 ms
    assert sim.t == pytest.approx(3 * DT)
    sim.advance_to(1.1e-3)                             # between the two step ends kept: fine
    with pytest.raises(ValueError, match="before the previous step end"):
        sim.advance_to(0.7e-3)                         # before 0.8 ms
    sim.set_state(qd=np.full(model.n, 0.1))            # the kept step ends no longer describe this state
    with pytest.raises(ValueError, match="before the previous step end"):
        sim.advance_to(1.1e-3)
