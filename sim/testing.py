"""Checks shared by the simulator's tests and benchmarks (as numpy.testing is numpy's).

:func:`assert_paths_agree`: the fused numba RK4 path (sim/fused.py) and the Python path of :class:`Simulation`
give the same state and outputs, to a relative tolerance of each signal's magnitude.
:func:`assert_relatively_close`: two engines' (or two models') results agree relative to the reference's scale.
:func:`to_pinocchio`: the same tree as a Pinocchio model.
"""
from __future__ import annotations

import numpy as np

from sim.simulation import Simulation
from sim.spatial import inertia_parameters

#: The two paths run the same operations: agreement to rounding.
FUSED_RTOL = 1e-12
#: Magnitude floor (the signal's own unit) below which a signal is compared absolutely, so that a signal that is
#: zero on one path is not held to a relative tolerance of zero.
MAGNITUDE_FLOOR = 1e-9


def assert_paths_agree(fused: Simulation, python: Simulation, label: str, rtol: float = FUSED_RTOL) -> None:
    """``fused`` took the fused path and ``python`` the Python path, at the same time, with the same state
    vector and the same outputs (every key of ``outputs()``), each within ``rtol`` of its largest magnitude."""
    assert fused.path == "fused" and python.path == "python", (fused.fused_unsupported, label)
    assert fused.t == python.t
    scale = max(MAGNITUDE_FLOOR, float(np.abs(python.y).max()))
    assert np.abs(fused.y - python.y).max() <= rtol * scale, (label, "y")
    out_f, out_p = fused.outputs(), python.outputs()
    assert set(out_f) == set(out_p)
    for key, value in out_p.items():
        # initial=0: a field may be empty (no passive joint: no strain)
        scale = max(MAGNITUDE_FLOOR, float(np.abs(value).max(initial=0.0)))
        err = float(np.abs(out_f[key] - value).max(initial=0.0))
        assert err <= rtol * scale, (label, key, err, scale)


def assert_relatively_close(ours, theirs, what: str, rtol: float) -> None:
    """``max |ours - theirs| / max(1, max |theirs|) < rtol`` (the unit scale floor: a result near zero is held to an
    absolute ``rtol``)."""
    scale = max(1.0, float(np.abs(theirs).max()))
    error = float(np.abs(np.asarray(ours) - np.asarray(theirs)).max()) / scale
    assert error < rtol, f"{what}: relative error {error:.3e}"


def to_pinocchio(model):
    """An equivalent ``pin.Model`` built from our Model's arrays (free-flyer root for a floating base): the
    independent reference of the tests and benchmarks (Pinocchio is a test extra, imported here only)."""
    import pinocchio as pin

    pm = pin.Model()
    joint_of_body = [0]
    if model.base_mode == "floating":
        root = pm.addJoint(0, pin.JointModelFreeFlyer(), pin.SE3.Identity(), "base")
        joint_of_body[0] = root
        m, c, I = inertia_parameters(model.inertia[0])
        pm.appendBodyToJoint(root, pin.Inertia(m, c, I), pin.SE3.Identity())
    for j in range(1, model.n_bodies):
        X = model.joint_placement[j]
        jid = pm.addJoint(joint_of_body[model.parent[j]], pin.JointModelRevoluteUnaligned(model.joint_axis[j, 3:]),
                          pin.SE3(X[:3, :3], X[:3, 3]), model.joint_names[j - 1])
        m, c, I = inertia_parameters(model.inertia[j])
        pm.appendBodyToJoint(jid, pin.Inertia(m, c, I) if m > 0 else pin.Inertia.Zero(), pin.SE3.Identity())
        joint_of_body.append(jid)
    pm.gravity = pin.Motion(np.concatenate([model.gravity, np.zeros(3)]))
    return pm
