"""Lighthill's elongated-body plug-in (sim/lighthill.py) on the test fish (configs/robots/fish.toml).

- The mean thrust of a prescribed wave (head held, the water streaming past at U: the fish swims head-first at U
  in the water's frame) equals the small-amplitude formula ``1/2 m2(l) mean(h_t^2 - U^2 h_x^2)`` (trailing-edge
  lateral velocity, last slice's slope): within 0.5 %.
- The fused stepper runs the plug-in compiled and agrees with the Python path to 1e-12, in still water and in the
  Karman street (every flow term).
- The Karman street's velocity gradient is the derivative of its velocity; its closed form equals a direct sum of
  400 001 Lamb-Oseen vortices per row (to that sum's truncation) and has no jump where a section passes from one
  vortex's half-wavelength to the next; a bad slice geometry or a fish outside the flow's domain is one line naming
  the key.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import ConfigError, load_toml
from sim.lighthill import FLOW_SIZE, ambient_flow, flow_vector, FLOW_KARMAN
from sim.robots import build_robot
from sim.simulation import Simulation
from sim.swimming import tail_tip_positions
from sim.testing import assert_paths_agree

ROOT = Path(__file__).resolve().parents[2]
FISH = ROOT / "configs" / "robots" / "fish.toml"
DEAD_FISH = ROOT / "configs" / "robots" / "dead_fish.toml"
#: The spec's check: head-first speed (m/s), tail-beat frequency (Hz).
SPEED, FREQUENCY = 0.3, 2.0
#: Measured: 0.17 % at A/L = 0.02, 0.06 % at 0.01 (the spec: 0.19 / 0.05 %); the issue's bound.
THRUST_TOLERANCE = 0.005


def _fish(path=FISH, **sections):
    table = copy.deepcopy(load_toml(path))
    for section, values in sections.items():
        table.setdefault(section, {}).update(values)
    return table


@pytest.mark.parametrize("tail_ratio", [0.01, 0.02])
def test_mean_thrust_of_a_prescribed_wave_matches_the_small_amplitude_formula(tail_ratio):
    length = 0.3
    table = _fish(robot={"base": "fixed"}, body={"skin_friction": 0.0},
                  muscle={"tail_amplitude_m": tail_ratio * length, "frequency_Hz": FREQUENCY},
                  flow={"kind": "uniform", "stream_m_s": -SPEED})
    model = build_robot(table, FISH)
    dt = model.metadata["parameters"]["dt"]
    sim = Simulation(model, "rk4", dt)
    assert sim.path == "fused"
    sim.advance(2.0 / FREQUENCY)                       # the two-beat ramp
    steps = int(round(3.0 / FREQUENCY / dt))           # three whole beats
    wrench, q = np.empty((steps, 6)), np.empty((steps, model.n))
    t = np.empty(steps)
    for i in range(steps):
        sim.step()
        out = sim.outputs()
        t[i], wrench[i], q[i] = sim.t, out["base_wrench"], out["q"]
    thrust = -wrench[:, 0].mean()                      # the support holds the head back (body x forward)
    tip = tail_tip_positions(model, np.zeros((steps, 3)), np.tile([1.0, 0.0, 0.0, 0.0], (steps, 1)), q)
    h_t = np.gradient(tip[:, 1], t)                    # lateral velocity of the trailing edge (world y)
    h_x = np.tan(q.sum(axis=1))                        # slope of the last slice (all joints turn about z)
    b_tail = 0.5 * table["body"]["tail_height_m"]
    m2 = 1000.0 * math.pi * b_tail ** 2
    formula = 0.5 * m2 * np.mean(h_t ** 2 - SPEED ** 2 * h_x ** 2)
    assert formula > 0.0
    assert thrust == pytest.approx(formula, rel=THRUST_TOLERANCE)


@pytest.mark.parametrize("path", [FISH, DEAD_FISH], ids=["fish, still water", "dead fish, Karman street"])
def test_fused_path_matches_python_path(path):
    model = build_robot(load_toml(path), path)
    dt = model.metadata["parameters"]["dt"]
    fused, python = Simulation(model, "rk4", dt), Simulation(model, "rk4", dt, fused=False)
    for _ in range(10):
        fused.step()
        python.step()
        assert_paths_agree(fused, python, f"{path.name} step")
    for _ in range(4):
        fused.advance(20 * dt)
        python.advance(20 * dt)
        assert_paths_agree(fused, python, f"{path.name} t = {python.t:.3f}")
    out = python.outputs()
    assert np.abs(out["ext_wrench"][:3]).max() > 1e-4       # the water pushes: not two resting fish
    assert np.abs(out["qd"]).max() > 1e-3


def test_karman_gradient_is_the_derivative_of_the_velocity():
    flow = flow_vector("karman", stream=-0.3, diameter=0.05)
    assert flow.shape == (FLOW_SIZE,)
    v, dvdt, grad = np.empty(3), np.empty(3), np.empty((3, 3))
    vp, vm, scratch, g2 = np.empty(3), np.empty(3), np.empty(3), np.empty((3, 3))
    step = 1e-6
    for x, y, t in [(-0.1, 0.02, 0.3), (-0.25, -0.03, 1.1), (-0.05, 0.0313, 0.0)]:
        ambient_flow(FLOW_KARMAN, x, y, t, flow, v, dvdt, grad)
        for k, (dx, dy) in enumerate([(step, 0.0), (0.0, step)]):
            ambient_flow(FLOW_KARMAN, x + dx, y + dy, t, flow, vp, scratch, g2)
            ambient_flow(FLOW_KARMAN, x - dx, y - dy, t, flow, vm, scratch, g2)
            np.testing.assert_allclose(grad[:, k], (vp - vm) / (2 * step), rtol=1e-6, atol=1e-8)
        ambient_flow(FLOW_KARMAN, x, y, t + step, flow, vp, scratch, g2)
        ambient_flow(FLOW_KARMAN, x, y, t - step, flow, vm, scratch, g2)
        np.testing.assert_allclose(dvdt, (vp - vm) / (2 * step), rtol=1e-6, atol=1e-8)
        assert np.abs(v[:2] - [-0.3, 0.0]).max() > 1e-3          # the vortices are there


#: Vortices on each side of the nearest in the direct sum: its truncation, gamma / (2 pi K lambda), is 1.1e-7 m/s.
DIRECT_SUM_EACH_SIDE = 200_000


def _direct_street(flow, x, y, t):
    """The street's velocity (2,) m/s at (x, y, t) by summing Lamb-Oseen vortices (the packed flow's fields)."""
    stream, conv, gamma, core, spacing, rows = flow[:6]
    v = np.array([stream, 0.0])
    for sign in (1.0, -1.0):
        x_row = flow[6] + conv * t + (0.0 if sign > 0 else 0.5 * spacing)
        nearest = math.floor((x - x_row) / spacing + 0.5)
        dx = x - (x_row + (nearest + np.arange(-DIRECT_SUM_EACH_SIDE, DIRECT_SUM_EACH_SIDE + 1)) * spacing)
        dy = y - (flow[7] + 0.5 * sign * rows)
        s = dx * dx + dy * dy
        f = sign * gamma / (2 * math.pi) * -np.expm1(-s / core ** 2) / s
        v += [np.sum(-dy * f), np.sum(dx * f)]
    return v


def test_karman_street_is_the_sum_of_its_vortices_and_smooth():
    flow = flow_vector("karman", stream=-0.3, diameter=0.05)
    truncation = abs(flow[2]) / (2 * math.pi * DIRECT_SUM_EACH_SIDE * flow[4])
    v, dvdt, grad = np.empty(3), np.empty(3), np.empty((3, 3))
    rng = np.random.default_rng(19)
    for x, y, t in zip(rng.uniform(-1.0, 0.3, 12), rng.uniform(-0.1, 0.1, 12), rng.uniform(0.0, 5.0, 12)):
        ambient_flow(FLOW_KARMAN, x, y, t, flow, v, dvdt, grad)
        np.testing.assert_allclose(v[:2], _direct_street(flow, x, y, t), rtol=0.0, atol=2 * truncation)
    # across the half-wavelength where the nearest upper vortex changes (x = -lambda/2 at t = 0) the lateral velocity
    # changes by its slope times the step; the cut-off sum it replaces jumped by 3.4e-3 m/s there
    step = 1e-7
    lateral = []
    for x in (-0.5 * flow[4] - step, -0.5 * flow[4] + step):
        ambient_flow(FLOW_KARMAN, x, 0.01, 0.0, flow, v, dvdt, grad)
        lateral.append(v[1])
    assert abs(lateral[1] - lateral[0]) < 2 * step * abs(grad[1, 0]) + 1e-12


def test_zero_area_slice_names_the_key():
    with pytest.raises(ConfigError, match=r"body.*non-zero area") as error:
        build_robot(_fish(body={"tail_width_m": 0.0}), FISH)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("key, start", [("flow.domain_x_m", {"head_x_m": 1.0}),
                                        ("flow.domain_y_m", {"head_y_m": -0.5})])
def test_fish_outside_the_flow_domain_names_the_key(key, start):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")) as error:
        build_robot(_fish(DEAD_FISH, start=start), DEAD_FISH)
    assert "\n" not in str(error.value)
