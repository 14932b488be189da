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
    """Base class of the force plug-ins. A Python-only plug-in implements :meth:`apply`; a compiled one
    (docs/extending.md) sets ``fused_kernel`` to the name of a kernel registered in sim/plugins.py and calls
    :meth:`pack` with its parameters once: :meth:`apply` then runs that kernel (the fused stepper runs the same
    kernel inside its compiled loop). :meth:`summary` is optional."""

    #: Short name used in outputs and logs.
    name = "force"
    #: Name of the registered kernel (sim.plugins.register_force_kernel), None for a Python-only plug-in.
    fused_kernel: str | None = None
    #: True for a force model on the sections of modal bodies (sim/flexible.py): its kernel receives the
    #: sections' arrays of sim.flexible.FlexData in place of the bodies' (``sec["g"]`` (n_S, 4, 4) world poses,
    #: ``sec["eta"]`` (n_S, 6) twists, and adds to ``sec["f"]`` (n_S, 6) wrench densities N/m, N m/m and
    #: ``sec["M"]`` (n_S, 6, 6) added-inertia densities, section frame, about the section origin; rows: every
    #: modal body's sections, sim.flexible.FlexibleParts.section_rows), the same signature, so the same kernel
    #: serves strips of rigid blades and of modal sections.
    on_sections = False
    #: (fpar, ipar): the parameters packed by :meth:`pack` (the kernel's last two arguments).
    packed: tuple | None = None

    def pack(self, **values) -> None:
        """Pack the parameters (by the name of each field of the kernel's layout) into ``self.packed``."""
        from .plugins import force_kernel
        self.packed = force_kernel(self.fused_kernel).layout.pack(**values)

    def packed_view(self, name: str) -> np.ndarray:
        """A packed field as a numpy view: an output the kernel writes (e.g. the last wrenches) or a parameter."""
        from .plugins import force_kernel
        return force_kernel(self.fused_kernel).layout.view(*self.packed, name)

    def apply(self, model, data, t: float) -> None:
        """Add this model's wrenches to ``data.f_ext`` and added inertia to ``data.M_added`` at time t (s)."""
        if self.fused_kernel is None or self.packed is None:
            raise NotImplementedError(f"{type(self).__name__} has neither apply() nor a packed kernel")
        from .plugins import force_kernel
        kernel = force_kernel(self.fused_kernel).kernel
        if self.on_sections:
            sec = data.sec
            kernel(t, sec["g"], sec["eta"], sec["f"], sec["M"], *self.packed)
        else:
            kernel(t, data.g, data.eta, data.f_ext, data.M_added, *self.packed)

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
