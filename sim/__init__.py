"""The Mobile Multibody System simulator: spatial algebra, models, the hybrid Newton-Euler algorithm,
force models, integrators, robot builders and the real-time server.

Main entry points (docs/sim-api.md, docs/sim-core.md)::

    from sim import load_urdf, load_robot, hybrid_dynamics, Model, Data, Simulation

The names are imported lazily (PEP 562), so ``import sim.config`` or ``import sim.messages`` in a process
that never simulates (driver, GUI) does not pay for numba.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "HybridResult": "sim.dynamics", "hybrid_dynamics": "sim.dynamics", "hybrid_step": "sim.dynamics",
    "ForceModel": "sim.forces", "Gravity": "sim.forces",
    "CallableMotion": "sim.laws", "CallableTorque": "sim.laws", "Constant": "sim.laws",
    "ExternalMotion": "sim.laws", "Free": "sim.laws", "JointLaw": "sim.laws", "MotionLaw": "sim.laws",
    "Polynomial": "sim.laws", "Sinusoid": "sim.laws", "Spline": "sim.laws", "ViscoElastic": "sim.laws",
    "Data": "sim.model", "Model": "sim.model", "ModelBuilder": "sim.model",
    "build_robot": "sim.robots", "load_robot": "sim.robots",
    "Simulation": "sim.simulation", "load_urdf": "sim.urdf",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'sim' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + __all__)
