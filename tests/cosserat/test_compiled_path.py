"""The compiled path of the Cosserat rod (sim/cosserat/kernels.py, sim/cosserat/laws/) against the Python path
(sim/cosserat/rod.py, the reference): the same arithmetic, so the same runs to ~1e-12 on all four robots; and the
2-D snake's converged resolution of docs/cosserat.md ("Resolution and speed")."""
from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path

import numpy as np
import pytest

from sim.config import load_toml
from sim.cosserat.algorithms import kinematic_instant, run_kinematic
from sim.cosserat.contacts import CannotHold
from sim.cosserat.examples import earthworm_robot, inchworm_robot, snake_robot
from sim.cosserat.laws import CompiledLaw, law_kernel
from sim.cosserat.rod import round_rod
from sim.cosserat.strains import constant_field
from sim.robots.cosserat import simulate_offline, summarize

LENGTH, RADIUS, RHO, G = 1.0, 0.02, 1000.0, 9.81
#: Rounding differences only (the two paths order a few sums differently): far below any modelling error.
SAME_ARITHMETIC = 1e-12
SNAKE2D = Path(__file__).resolve().parents[2] / "configs" / "robots" / "snake2d.toml"


def robots(n_X=40):
    """The four robots with everything switched on within 1.2 s: the accelerating earthworm (its anchor pushes),
    the inchworm under gravity (head anchor, then the tail's at 1 s), the snakes with their turn from t_o = 0.2 s
    (the 3-D one under gravity)."""
    rod = round_rod(LENGTH, RADIUS, RHO, n_X=n_X)
    heavy = round_rod(LENGTH, RADIUS, RHO, gravity=(0.0, 0.0, -G), n_X=n_X)
    return [earthworm_robot(rod, 0.004, 1.0, 0.05, 0.3), inchworm_robot(heavy, 1.8, 2 * math.pi * 0.25),
            snake_robot(rod, 10.0, 0.5, -0.5, 0.5, 0.2, 1.0, 5),
            snake_robot(heavy, 10.0, 0.5, -0.5, 0.5, 0.2, 1.0, 5, b_y=0.5)]


def largest(states, get) -> float:
    return max(float(np.max(np.abs(get(s)))) for s in states)


@pytest.mark.parametrize("index", range(4))
def test_compiled_run_is_the_python_run(index):
    """1.2 s at dt = 10 ms, recorded every 30 ms (the snakes' head steps in chunks of 3 between records): every
    recorded quantity within 1e-12 of the Python path's, relative to its largest value over the run (the
    wrenches relative to the largest internal wrench: the earthworm's Fc is rounding-sized)."""
    ex = robots()[index]
    runs = [run_kinematic(ex.rod, ex.strain, ex.contacts, ex.driver_at, 1.2, 0.01, 3, g_o=ex.g_o, compiled=compiled)
            for compiled in (False, True)]
    python, compiled = runs
    assert len(python) == len(compiled) == 41
    wrench_scale = largest(python, lambda s: s.Lam)
    assert wrench_scale > 1e-6
    for name in ("g_o", "eta_o", "etad_o", "eta", "etad", "Lam", "Fc"):
        scale = wrench_scale if name in ("Lam", "Fc") else largest(python, lambda s: getattr(s, name))
        error = max(float(np.max(np.abs(getattr(a, name) - getattr(b, name)))) for a, b in zip(python, compiled))
        print(f"{ex.name} {name}: {error / scale:.1e} of {scale:.3g}")
        assert error <= SAME_ARITHMETIC * scale, name
    for a, b in zip(python, compiled):
        assert a.t == b.t and a.nodes.segments == b.nodes.segments
        assert np.array_equal(a.nodes.X, b.nodes.X)
        for name in ("xi", "xi_X", "xi_t", "xi_tt", "g_rel", "Adk", "Adk_inv"):
            assert np.allclose(getattr(a.nodes, name), getattr(b.nodes, name), rtol=0.0, atol=1e-12), name
        assert [C for C, _ in a.wrenches] == [C for C, _ in b.wrenches]
        assert all(np.allclose(F, H, rtol=0.0, atol=SAME_ARITHMETIC * wrench_scale)
                   for (_, F), (_, H) in zip(a.wrenches, b.wrenches))
        assert b.closure <= 1e-8 and abs(a.contact_residual - b.contact_residual) <= 1e-12
    moved = float(np.max(np.abs(compiled[-1].g_o[:3, 3] - compiled[0].g_o[:3, 3])))
    assert moved > 0.05 or ex.name == "inchworm"       # the head went somewhere (the inchworm's is anchored first)


@pytest.mark.parametrize("index", range(4))
def test_compiled_strain_law_is_the_python_law(index):
    """Each robot's kernel against its Python law at 400 random (X, t), t over [0, 8] s (through the snakes' turn
    bump, its edges and outside it): the 4 arrays to 1e-12 of their size."""
    field = robots()[index].strain
    rng = np.random.default_rng(index)
    X, times = rng.uniform(0.0, LENGTH, 400), rng.uniform(0.0, 8.0, 400)
    kind, params, actuated = field.kernel_law()
    out = np.empty((4, actuated.size))
    for x, t in zip(X, times):
        expected = field(np.array([x]), t)
        law_kernel(kind, params, x, t, out)
        for row, array in enumerate(expected):
            assert np.allclose(out[row], array[0, actuated], rtol=1e-12, atol=1e-12 * (1.0 + np.max(np.abs(array))))


def test_constant_law_has_its_compiled_form():
    field = constant_field("kirchhoff", np.array([9.0, 9.0, 9.0, 0.3, -1.2, 2.0]))
    kind, params, actuated = field.kernel_law()
    out = np.empty((4, 3))
    law_kernel(kind, params, 0.4, 1.0, out)
    assert np.array_equal(out[0], [0.3, -1.2, 2.0]) and not out[1:].any()


def test_compiled_path_refuses_what_the_python_path_refuses():
    """One peg cannot hold the snake: the compiled split raises CannotHold like the Python one."""
    ex = snake_robot(round_rod(LENGTH, RADIUS, RHO, n_X=40), 10.0, 0.5, -0.5, 0.5, 3.0, 4.0, 1)
    messages = []
    for compiled in (False, True):
        with pytest.raises(CannotHold) as error:
            kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(0.3), 0.3, np.eye(4), compiled=compiled)
        messages.append(str(error.value).split("[")[0])
    assert messages[0] == messages[1]


def test_a_support_off_the_body_is_refused_on_both_paths():
    """A peg whose path leaves [0, l] is no node of the grid: ValueError on both paths (the kernel must not read
    another node's frame in its place)."""
    ex = snake_robot(round_rod(LENGTH, RADIUS, RHO, n_X=40), 10.0, 0.5, -0.5, 0.5, 3.0, 4.0, 3)
    ex.contacts[1].path = lambda t: 1.5
    for compiled in (False, True):
        with pytest.raises(ValueError, match="1.5"):
            kinematic_instant(ex.rod, ex.strain, ex.contacts, ex.driver_at(0.3), 0.3, np.eye(4), compiled=compiled)
    with pytest.raises(ValueError, match="snake"):
        CompiledLaw("snake", np.zeros(3))


def snake_summary(n_X: int, dt: float) -> dict:
    """`mms sim snake2d --summary` at (n_X, dt), recorded at 100 Hz, the full 10 s."""
    config = copy.deepcopy(load_toml(SNAKE2D))
    config["rod"]["n_X"] = n_X
    config["simulation"]["record_every"] = max(1, round(0.01 / dt))
    args = argparse.Namespace(base=None, integrator=None, periodic=False, dt=dt, duration=None, periods=None,
                              record_every=None)
    return summarize(simulate_offline(config, SNAKE2D, args, False))


def test_snake_summary_converges_at_n_x_100_and_dt_10_ms():
    """docs/cosserat.md's convergence table: against n_X = 200 (itself within 4e-5 of n_X = 800; dt does not
    matter below 10 ms, 2.5e-8), every motion and load key of the 2-D snake's summary is within 0.1 % at
    (n_X = 100, dt = 10 ms) (table: 5.2e-4 largest) but not at n_X = 80 (1.2e-3): 100 is the coarsest converged
    grid of the ladder. The cycle-mean contact force is zero at convergence: it is measured against the peak."""
    reference = snake_summary(200, 0.01)
    keys = ("head_displacement_m", "mean_head_velocity_m_s", "peak_head_speed_m_s", "max_contact_force_N",
            "cycle_mean_contact_force_N", "max_internal_torque_Nm")

    def worst(values):
        errors = {}
        for key in keys:
            scale = reference["max_contact_force_N" if key == "cycle_mean_contact_force_N" else key]
            errors[key] = float(np.linalg.norm(np.subtract(values[key], reference[key])) / np.linalg.norm(scale))
        print(errors)
        return max(errors.values())
    converged, coarse = worst(snake_summary(100, 0.01)), worst(snake_summary(80, 0.01))
    assert converged <= 1e-3 < coarse
    assert reference["closure_residual"] <= 1e-8


def test_an_edit_of_a_law_discards_the_cosserat_kernels(tmp_path):
    """numba keys a cached kernel on its own file: kernels.instant has the laws compiled in, so the group's
    cache folders are cleared together when any of its sources changes (sim/kernel_cache.py)."""
    from sim.kernel_cache import STAMP_NAME, _discard_stale, _sources_hash, cosserat_sources

    names = {path.name for path in cosserat_sources()}
    assert {"kernels.py", "passive_kernels.py", "snake.py", "earthworm.py", "inchworm.py", "legendre.py",
            "__init__.py"} <= names
    folders = [tmp_path / "cosserat", tmp_path / "laws"]
    for folder in folders:
        folder.mkdir()
        for name in ("kernels.instant-1.py311.nbi", "kernels.instant-1.py311.1.nbc", "other.pyc"):
            (folder / name).write_bytes(b"x")
    (folders[0] / STAMP_NAME).write_text("the hash of older sources")
    current = _sources_hash(cosserat_sources())
    assert _discard_stale(folders, current)
    assert sorted(p.name for p in folders[0].iterdir()) == ["kernels.stamp", "other.pyc"]
    assert sorted(p.name for p in folders[1].iterdir()) == ["other.pyc"]
    (folders[1] / "snake.snake_kernel-1.py311.nbi").write_bytes(b"compiled from the current sources")
    assert not _discard_stale(folders, current)
    assert (folders[1] / "snake.snake_kernel-1.py311.nbi").exists()
