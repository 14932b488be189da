"""Force-model plug-ins (docs/sim-api.md): ``ForceModel.apply(model, data, t) -> None``.

A force model is called by :func:`sim.dynamics.hybrid_step` after the first forward (kinematic) recursion, so
``data.g`` (N+1, 4, 4) world poses and ``data.eta`` (N+1, 6) body twists are current. It *adds* to
- ``data.f_ext`` (N+1, 6): external wrench (force N, moment N m) on body j, in frame j, about O_j;
- ``data.M_added`` (N+1, 6, 6): acceleration-proportional (added-mass) inertia of body j in frame j, about O_j
  (kg, kg m, kg m^2). The core puts it into the articulated inertia and its Kirchhoff velocity product
  ``-ad^T(M_added eta)`` into Pi (Porez et al. 2014, eq. 15 and following); never lag it as a force.
Both arrays are zeroed by the core before the force models run.
"""
from __future__ import annotations

import numpy as np


class ForceModel:
    """Base class of the force plug-ins. Subclasses implement :meth:`apply`; :meth:`summary` is optional."""

    #: Short name used in outputs and logs.
    name = "force"

    def apply(self, model, data, t: float) -> None:
        """Add this model's wrenches to ``data.f_ext`` and added inertia to ``data.M_added`` at time t (s)."""
        raise NotImplementedError

    def summary(self, model, data) -> dict[str, float]:
        """Scalar figures for the outputs (e.g. lift in N); empty by default."""
        return {}


class Gravity(ForceModel):
    """Uniform gravity ``g`` (3,) in m/s^2, world frame: the wrench ``M_j [R_j^T g; 0]`` on every body.

    The core already applies ``model.gravity``; this plug-in is for configs that list gravity among the
    forces (the robot builders turn such an entry into ``model.gravity``) or for code that wants an extra
    field. It writes into ``data.f_gravity`` (N+1, 6), not into ``data.f_ext``, so that the outputs'
    ``ext_wrench`` stays the non-gravity external wrench."""

    name = "gravity"

    def __init__(self, g=(0.0, 0.0, -9.81)):
        self.g = np.asarray(g, dtype=float).reshape(3)

    def apply(self, model, data, t: float) -> None:
        # Acceleration of gravity in each body frame, (N+1, 3): R_j^T g.
        g_body = np.einsum("jki,k->ji", data.g[:, :3, :3], self.g)
        data.f_gravity += np.einsum("jab,jb->ja", model.inertia[:, :, :3], g_body)


def force_model_from_config(table: dict, path=None, prefix: str = "forces"):
    """A force model from a ``[[forces]]`` entry: ``{type = "gravity", g = [0, 0, -9.81]}`` or
    ``{type = "package.module:ClassName", ...keyword arguments...}`` (any ForceModel subclass)."""
    import importlib

    from .config import ConfigError, require
    kind = require(table, "type", str, path=path, prefix=prefix, expected='"gravity" or "module:Class"')
    kwargs = {key: value for key, value in table.items() if key != "type"}
    if kind == "gravity":
        unknown = sorted(set(kwargs) - {"g"})
        if unknown:
            raise ConfigError(path, f"{prefix}.{unknown[0]}", "unknown key, expected g")
        return Gravity(kwargs.get("g", (0.0, 0.0, -9.81)))
    module_name, _, class_name = kind.partition(":")
    if not class_name:
        raise ConfigError(path, f"{prefix}.type", f"unknown force {kind!r}, expected \"gravity\" or \"module:Class\"")
    try:
        cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(path, f"{prefix}.type", f"cannot load {kind!r}: {exc}") from None
    try:
        model = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(path, prefix, f"{kind}: {exc}") from None
    if not isinstance(model, ForceModel):
        raise ConfigError(path, f"{prefix}.type", f"{kind} is not a ForceModel")
    return model
