"""The public ``sim.hybrid_dynamics``: the same results with a caller's ``data=`` and without it (then a workspace
kept per model is reused, not rebuilt per call), whatever form the inputs come in."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.dynamics import _WORKSPACES, hybrid_dynamics
from sim.model import Data
from sim.robots import load_robot

ROOT = Path(__file__).resolve().parents[2]


def _results_equal(a, b) -> None:
    for field in ("base_acc", "qdd", "tau", "base_wrench"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_with_and_without_data_identical():
    model = load_robot(ROOT / "configs/robots/flapper.toml")
    rng = np.random.default_rng(3)
    n = model.n
    data = Data(model)
    for mask in (model.actuated.copy(), rng.random(n) < 0.5):        # the model's mask and another one
        q, qd, qdd, tau = (rng.normal(size=n) * 0.3 for _ in range(4))
        twist = rng.normal(size=6) * 0.1
        pose = model.base_pose.copy()
        with_data = hybrid_dynamics(model, pose, twist, q, qd, mask, qdd, tau, data=data)
        without = hybrid_dynamics(model, pose, twist, q, qd, mask, qdd, tau)
        as_lists = hybrid_dynamics(model, pose.tolist(), twist.tolist(), q.tolist(), qd.tolist(),
                                   mask.tolist(), qdd.tolist(), tau.tolist())
        _results_equal(with_data, without)
        _results_equal(with_data, as_lists)
        assert np.abs(with_data.qdd).max() > 0.0
    # the inputs are not changed, and the results do not alias the reused workspace
    again = hybrid_dynamics(model, pose, twist, q, qd, mask, qdd, tau)
    assert again.qdd is not without.qdd
    _results_equal(again, without)


def test_no_workspace_built_per_call():
    model = load_robot(ROOT / "configs/robots/pendulum.toml")
    n = model.n
    hybrid_dynamics(model, model.base_pose, np.zeros(6), np.zeros(n), np.zeros(n), model.actuated, np.zeros(n),
                    np.zeros(n))
    workspace = _WORKSPACES[model]
    for k in range(3):
        hybrid_dynamics(model, model.base_pose, np.zeros(6), np.full(n, 0.1 * k), np.zeros(n), model.actuated,
                        np.zeros(n), np.zeros(n))
        assert _WORKSPACES[model] is workspace
    assert abs(workspace.q[0] - 0.2) < 1e-15          # the last call ran in it


def test_equals_hybrid_step():
    """hybrid_dynamics (inputs converted without copies where possible, the model's mask passed as its own)
    equals hybrid_step on the same state, force models and joint laws included."""
    from sim.dynamics import hybrid_step
    from sim.testing import FUSED_RTOL

    rng = np.random.default_rng(5)
    for config, base in (("flapper.toml", "floating"), ("raybot.toml", "fixed"), ("pendulum.toml", "fixed")):
        model = load_robot(ROOT / "configs/robots" / config).replace(base_mode=base)
        n = model.n
        q, qd, qdd, tau = (rng.normal(size=n) * 0.2 for _ in range(4))
        twist = rng.normal(size=6) * 0.1
        result = hybrid_dynamics(model, model.base_pose, twist, q, qd, model.actuated, qdd, tau, use_laws=True)
        data = Data(model)
        hybrid_step(model, data, 0.0, model.base_pose, np.zeros(6) if base == "fixed" else twist, q, qd, qdd, tau,
                    use_laws=True)
        for field in ("base_acc", "qdd", "tau", "base_wrench"):
            expected = getattr(data, field)
            scale = max(1e-9, float(np.abs(expected).max()))
            assert np.abs(getattr(result, field) - expected).max() <= FUSED_RTOL * scale, (config, field)
