"""A measured wrench as a force plug-in (docs/closed-loop.md): the wrench a rig's sensor reports, fed into the
simulation on one body, between the measurements extrapolated with its recent rate.

``MeasuredWrench(body)`` adds to body ``body`` the wrench (force N, moment N m; body frame, about O_body)

    w(t) = w0 + (t - t0) * w_rate

where (t0 s, w0 (6,), w_rate (6,) per s) are live parameters: :meth:`MeasuredWrench.set` writes them between two
integration calls (the fused stepper reads this plug-in's packed parameters in place: sim.fused.kernel_table with
``share``). The caller then tells the simulation that its inputs changed (``Simulation.inputs_changed``), so no
derivative computed with the previous values is reused. Registered by name (``measured_wrench``) on import of
this module, which sim/fused.py imports with the other built-in force models (so the closed loop's processes load
the stepper compiled at install); nothing in the core calls it by name.
"""
from __future__ import annotations

import numpy as np

from sim.forces import ForceModel
from sim.plugins import ParamLayout, float_scalar, float_vector, int_scalar, register_force_kernel

LAYOUT = ParamLayout(floats=(("t0", 0), ("wrench", 1), ("rate", 1)), ints=(("body", 0),))
P = LAYOUT.fields


def measured_wrench_kernel(t, g, eta, f_ext, M_added, fpar, ipar):
    """Add w0 + (t - t0) w_rate (6,) (body frame, about O_body) to f_ext[body]."""
    body = int_scalar(ipar, P.body)
    elapsed = t - float_scalar(fpar, ipar, P.t0)
    w0, rate = float_vector(fpar, ipar, P.wrench), float_vector(fpar, ipar, P.rate)
    for k in range(6):
        f_ext[body, k] += w0[k] + elapsed * rate[k]


register_force_kernel("measured_wrench", LAYOUT, measured_wrench_kernel)


class MeasuredWrench(ForceModel):
    """The live measured wrench on body ``body`` (0: the base); zero until :meth:`set`."""

    name = fused_kernel = "measured_wrench"

    def __init__(self, body: int = 0):
        self.body = int(body)
        self.pack(t0=0.0, wrench=np.zeros(6), rate=np.zeros(6), body=self.body)

    def set(self, t0: float, wrench: np.ndarray, rate: np.ndarray) -> None:
        """From now on the wrench is ``wrench + (t - t0) rate``: wrench (6,) N, N m at t0 (s, simulated time),
        rate (6,) N/s, N m/s; body frame, about O_body."""
        self.packed_view("t0")[...] = t0
        self.packed_view("wrench")[:] = wrench
        self.packed_view("rate")[:] = rate

    def value(self, t: float) -> np.ndarray:
        """The wrench (6,) the kernel adds at ``t`` (s)."""
        return self.packed_view("wrench") + (t - float(self.packed_view("t0"))) * self.packed_view("rate")
