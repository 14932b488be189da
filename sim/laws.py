"""Joint laws: motion laws for actuated joints and stress-strain (torque) laws for passive joints.

One signature per plug-in kind (docs/sim-api.md):
- ``MotionLaw.evaluate(t) -> (r, r_d, r_dd)``: position (rad or m), velocity, acceleration of an actuated joint
  at time t (s); the joint is not integrated, its motion is imposed (Porez et al. 2014, section III, J_a).
- ``JointLaw.torque(t, r, r_d) -> tau``: torque (N m) or force (N) of a passive joint (J_p).

A law that runs compiled is a plug-in (sim/plugins.py, docs/extending.md): a :class:`sim.plugins.ParamLayout`, a
numba kernel registered by name (``register_motion_law`` / ``register_joint_law``) and a class naming it
(``fused_kernel``) that packs its parameters once; its Python form (``evaluate`` / ``torque``) is that kernel, and
the fused stepper (sim/fused.py) calls the same kernel, so both paths give the same numbers. The built-in ones
below are written so: :class:`Constant`, :class:`Sinusoid`, :class:`Polynomial`, :class:`RampedSinusoid`,
:class:`ExternalMotion` (parameters set from outside between calls: ``live``), :class:`CompiledSpline` and
:class:`TrackingSpring`.
:class:`ScaledMotion` of a compiled law is compiled too (the stepper multiplies its row by the ratio).
:class:`ViscoElastic` joints are gathered by the model into arrays ``k, mu, r0`` (n,) and evaluated inside the
recursions (``tau = -k (r - r0) - mu r_d``). :class:`Spline` and the ``Callable*`` laws are Python only (a model
using them takes the Python path).
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np
from numba import njit

from .plugins import (JOINT_LAWS, MOTION_LAWS, Packed, ParamLayout, float_matrix, float_scalar, float_vector,
                      int_scalar, packed_scalar, register_joint_law, register_motion_law)


class MotionLaw(Packed):
    """Imposed motion of an actuated joint. A compiled law names its registered kernel (``fused_kernel``) and packs
    its parameters (``self.pack(...)``): ``evaluate`` is then that kernel; a Python law overrides ``evaluate``."""
    registry = MOTION_LAWS
    #: Whether the packed parameters may change between two calls of the fused stepper (set from outside, as
    #: :meth:`ExternalMotion.set` does): the stepper then reads them at every call, else once.
    live = False

    def evaluate(self, t: float) -> tuple[float, float, float]:
        """Return (r, r_d, r_dd) at time t in s (rad, rad/s, rad/s^2 or m, m/s, m/s^2)."""
        if self.packed is None:
            raise NotImplementedError(f"{type(self).__name__} has neither evaluate() nor a packed kernel")
        return self.kernel(t, *self.packed)


#: The reference of a joint law without one (the kernel receives zeros).
NO_REFERENCE = (0.0, 0.0, 0.0)


class JointLaw(Packed):
    """Torque law of a passive joint. A compiled law names its registered kernel (``fused_kernel``), packs its
    parameters and may name a motion law, ``reference``, whose (r, r_d, r_dd) its kernel receives (a spring about
    a moving reference); ``torque`` is then that kernel; a Python law overrides ``torque``."""
    registry = JOINT_LAWS
    reference: MotionLaw | None = None

    def torque(self, t: float, r: float, r_d: float) -> float:
        """Return the joint torque (N m, or N for a prismatic joint) at time t (s), position r, velocity r_d."""
        if self.packed is None:
            raise NotImplementedError(f"{type(self).__name__} has neither torque() nor a packed kernel")
        reference = NO_REFERENCE if self.reference is None else self.reference.evaluate(t)
        return self.kernel(t, r, r_d, *reference, *self.packed)


# ----------------------------------------------------------------------------------------- motion laws
# Each compiled law: its layout, its kernel (the law's only formula, evaluate() calls it), its registration and
# its class, together.
CONSTANT_LAYOUT = ParamLayout(floats=(("value", 0),))
CONSTANT = CONSTANT_LAYOUT.fields


def constant_kernel(t, fpar, ipar):
    return float_scalar(fpar, ipar, CONSTANT.value), 0.0, 0.0


register_motion_law("constant", CONSTANT_LAYOUT, constant_kernel)


class Constant(MotionLaw):
    """Joint held at a constant position (rad or m)."""
    fused_kernel = "constant"
    value = packed_scalar("value", "the position (rad or m)")

    def __init__(self, value: float = 0.0):
        self.pack(value=float(value))

    def __repr__(self) -> str:
        return f"Constant({self.value})"


SINUSOID_LAYOUT = ParamLayout(floats=(("amplitude", 0), ("omega", 0), ("phase", 0), ("offset", 0)))
SINUSOID = SINUSOID_LAYOUT.fields


def sinusoid_kernel(t, fpar, ipar):
    a, w = float_scalar(fpar, ipar, SINUSOID.amplitude), float_scalar(fpar, ipar, SINUSOID.omega)
    angle = w * t + float_scalar(fpar, ipar, SINUSOID.phase)
    s = math.sin(angle)
    return float_scalar(fpar, ipar, SINUSOID.offset) + a * s, a * w * math.cos(angle), -a * w * w * s


register_motion_law("sinusoid", SINUSOID_LAYOUT, sinusoid_kernel)


class Sinusoid(MotionLaw):
    """``r(t) = offset + amplitude sin(omega t + phase)``; amplitude in rad (or m), omega in rad/s,
    phase in rad. The flapper's stroke ``r = -A cos(w t)`` is ``Sinusoid(A, w, phase=-pi/2)``."""
    fused_kernel = "sinusoid"
    amplitude = packed_scalar("amplitude", "rad or m")
    omega = packed_scalar("omega", "rad/s")
    phase = packed_scalar("phase", "rad")
    offset = packed_scalar("offset", "rad or m")

    def __init__(self, amplitude: float, omega: float, phase: float = 0.0, offset: float = 0.0):
        self.pack(amplitude=float(amplitude), omega=float(omega), phase=float(phase), offset=float(offset))

    def __repr__(self) -> str:
        return f"Sinusoid({self.amplitude}, {self.omega}, phase={self.phase}, offset={self.offset})"


POLYNOMIAL_LAYOUT = ParamLayout(floats=(("r", 1), ("r_d", 1), ("r_dd", 1)))
POLYNOMIAL = POLYNOMIAL_LAYOUT.fields


@njit(cache=True)
def _horner(coef, t):
    """sum_k coef[k] t^k, in numpy's polyval order (Horner from the highest power)."""
    acc = coef[coef.shape[0] - 1]
    for i in range(coef.shape[0] - 2, -1, -1):
        acc = coef[i] + acc * t
    return acc


def polynomial_kernel(t, fpar, ipar):
    return (_horner(float_vector(fpar, ipar, POLYNOMIAL.r), t), _horner(float_vector(fpar, ipar, POLYNOMIAL.r_d), t),
            _horner(float_vector(fpar, ipar, POLYNOMIAL.r_dd), t))


register_motion_law("polynomial", POLYNOMIAL_LAYOUT, polynomial_kernel)


class Polynomial(MotionLaw):
    """``r(t) = sum_k coefficients[k] t^k`` (coefficients in increasing powers, units rad/s^k or m/s^k)."""
    fused_kernel = "polynomial"

    def __init__(self, coefficients: Sequence[float]):
        self.coefficients = np.asarray(coefficients, dtype=float)
        if self.coefficients.ndim != 1 or self.coefficients.size == 0:
            raise ValueError("Polynomial needs a non-empty list of coefficients")
        poly = np.polynomial.Polynomial(self.coefficients)
        self.pack(r=poly.coef, r_d=poly.deriv(1).coef, r_dd=poly.deriv(2).coef)


RAMPED_SINUSOID_LAYOUT = ParamLayout(floats=(("amplitude", 0), ("omega", 0), ("phase", 0), ("ramp_time", 0)))
RAMPED_SINUSOID = RAMPED_SINUSOID_LAYOUT.fields


def ramped_sinusoid_kernel(t, fpar, ipar):
    a, w = float_scalar(fpar, ipar, RAMPED_SINUSOID.amplitude), float_scalar(fpar, ipar, RAMPED_SINUSOID.omega)
    ramp_time = float_scalar(fpar, ipar, RAMPED_SINUSOID.ramp_time)
    angle = w * t + float_scalar(fpar, ipar, RAMPED_SINUSOID.phase)
    s, c = math.sin(angle), math.cos(angle)
    x, x_d, x_dd = a * s, a * w * c, -a * w * w * s
    if ramp_time > 0.0 and t < ramp_time:
        k = math.pi / ramp_time
        r, r_d, r_dd = 0.5 * (1.0 - math.cos(k * t)), 0.5 * k * math.sin(k * t), 0.5 * k * k * math.cos(k * t)
        return r * x, r_d * x + r * x_d, r_dd * x + 2.0 * r_d * x_d + r * x_dd
    return x, x_d, x_dd


register_motion_law("ramped_sinusoid", RAMPED_SINUSOID_LAYOUT, ramped_sinusoid_kernel)


class RampedSinusoid(MotionLaw):
    """Sinusoid with a soft start: ``r(t) = amplitude ramp(t) sin(omega t + phase)`` (amplitude rad or m, omega
    rad/s, phase rad), ``ramp(t) = (1 - cos(pi t / ramp_time)) / 2`` for ``0 <= t < ramp_time`` s and 1 after
    (raised cosine: rises from 0 to 1 with zero slope at both ends, so the velocity does not jump); no ramp when
    ramp_time is 0. r_d and r_dd by the product rule."""
    fused_kernel = "ramped_sinusoid"
    amplitude = packed_scalar("amplitude", "rad or m")
    omega = packed_scalar("omega", "rad/s")
    phase = packed_scalar("phase", "rad")
    ramp_time = packed_scalar("ramp_time", "s")

    def __init__(self, amplitude: float, omega: float, phase: float = 0.0, ramp_time: float = 0.0):
        self.pack(amplitude=float(amplitude), omega=float(omega), phase=float(phase), ramp_time=float(ramp_time))

    def __repr__(self) -> str:
        return (f"RampedSinusoid({self.amplitude}, {self.omega}, phase={self.phase}, "
                f"ramp_time={self.ramp_time})")


class ScaledMotion(MotionLaw):
    """A joint driven through a linear mechanism: ``r = ratio * source(t)`` (r_d, r_dd likewise; ratio in rad
    or m per unit of the source law, e.g. RayBot's fin-ray chord per servo radian). The fused kernel evaluates
    the source's kernel form and multiplies by ratio, as here, so both paths give the same numbers."""

    def __init__(self, source: MotionLaw, ratio: float):
        self.source = source
        self.ratio = float(ratio)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        r, r_d, r_dd = self.source.evaluate(t)
        k = self.ratio
        return k * r, k * r_d, k * r_dd

    def __repr__(self) -> str:
        return f"ScaledMotion({self.source!r}, ratio={self.ratio})"


class Spline(MotionLaw):
    """Cubic spline (scipy ``CubicSpline``) through samples (times s, positions rad or m).

    ``bc_type`` is passed to CubicSpline ("not-a-knot", "clamped", "natural" or "periodic"); outside the
    sample range the spline is extrapolated unless ``hold=True`` (then the end values are held, at rest)."""

    def __init__(self, times: Sequence[float], values: Sequence[float], bc_type: str = "not-a-knot",
                 hold: bool = False):
        from scipy.interpolate import CubicSpline
        self.times = np.asarray(times, dtype=float)
        self.values = np.asarray(values, dtype=float)
        if self.times.ndim != 1 or self.times.size < 2 or self.times.shape != self.values.shape:
            raise ValueError("Spline needs at least two (time, value) samples of equal length")
        if np.any(np.diff(self.times) <= 0.0):
            raise ValueError("Spline sample times must be strictly increasing")
        self.hold = bool(hold)
        self._spline = CubicSpline(self.times, self.values, bc_type=bc_type)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        if self.hold and (t <= self.times[0] or t >= self.times[-1]):
            end = self.times[0] if t <= self.times[0] else self.times[-1]
            return float(self._spline(end)), 0.0, 0.0
        s = self._spline
        return float(s(t)), float(s(t, 1)), float(s(t, 2))


PIECEWISE_CUBIC_LAYOUT = ParamLayout(floats=(("breaks", 1), ("coefficients", 2)), ints=(("hold", 0),))
PIECEWISE_CUBIC = PIECEWISE_CUBIC_LAYOUT.fields


def piecewise_cubic_kernel(t, fpar, ipar):
    """A scipy ``PPoly`` of order 4 (breaks (n+1,) s, coefficients (4, n) highest power first, in local time
    ``t - breaks[i]``), its first piece before the range and its last after; with ``hold`` the end values, at rest."""
    breaks = float_vector(fpar, ipar, PIECEWISE_CUBIC.breaks)
    c = float_matrix(fpar, ipar, PIECEWISE_CUBIC.coefficients)
    last = breaks.shape[0] - 2
    rest = int_scalar(ipar, PIECEWISE_CUBIC.hold) != 0 and (t <= breaks[0] or t >= breaks[last + 1])
    if rest:
        t = breaks[0] if t <= breaks[0] else breaks[last + 1]
    i = min(max(np.searchsorted(breaks, t, side="right") - 1, 0), last)
    s = t - breaks[i]
    r = ((c[0, i] * s + c[1, i]) * s + c[2, i]) * s + c[3, i]
    if rest:
        return r, 0.0, 0.0
    return r, (3.0 * c[0, i] * s + 2.0 * c[1, i]) * s + c[2, i], 6.0 * c[0, i] * s + 2.0 * c[1, i]


register_motion_law("piecewise_cubic", PIECEWISE_CUBIC_LAYOUT, piecewise_cubic_kernel)


class CompiledSpline(MotionLaw):
    """:class:`Spline`'s not-a-knot cubic through (times s, positions rad or m), compiled: a model driven by it keeps
    the fused path (a re-simulation driven by thousands of measured samples runs ~10x faster than through scipy's
    Python-side evaluation). ``hold=True`` holds the end values, at rest, outside the samples."""
    fused_kernel = "piecewise_cubic"

    def __init__(self, times: Sequence[float], values: Sequence[float], hold: bool = False):
        from scipy.interpolate import CubicSpline
        times, values = np.asarray(times, dtype=float), np.asarray(values, dtype=float)
        if times.ndim != 1 or times.size < 2 or times.shape != values.shape:
            raise ValueError("CompiledSpline needs at least two (time, value) samples of equal length")
        if np.any(np.diff(times) <= 0.0):
            raise ValueError("CompiledSpline sample times must be strictly increasing")
        spline = CubicSpline(times, values)
        self.pack(breaks=spline.x, coefficients=np.ascontiguousarray(spline.c), hold=int(bool(hold)))


class CallableMotion(MotionLaw):
    """Motion given by a Python function ``fn(t) -> (r, r_d, r_dd)``."""

    def __init__(self, fn: Callable[[float], tuple[float, float, float]]):
        self.fn = fn

    def evaluate(self, t: float) -> tuple[float, float, float]:
        r, r_d, r_dd = self.fn(t)
        return float(r), float(r_d), float(r_dd)


EXTERNAL_LAYOUT = ParamLayout(floats=(("r", 0), ("r_d", 0), ("r_dd", 0)))
EXTERNAL = EXTERNAL_LAYOUT.fields


def external_kernel(t, fpar, ipar):
    return float_scalar(fpar, ipar, EXTERNAL.r), float_scalar(fpar, ipar, EXTERNAL.r_d), float_scalar(fpar, ipar, EXTERNAL.r_dd)


register_motion_law("external", EXTERNAL_LAYOUT, external_kernel)


class ExternalMotion(MotionLaw):
    """Motion set from outside (emulator physics plant, HIL measured positions): ``set(r, r_d, r_dd)``;
    ``evaluate`` returns the last values set, whatever t (the fused stepper reads them at every call)."""
    fused_kernel = "external"
    live = True
    r = packed_scalar("r", "rad or m")
    r_d = packed_scalar("r_d", "rad/s or m/s")
    r_dd = packed_scalar("r_dd", "rad/s^2 or m/s^2")

    def __init__(self, r: float = 0.0, r_d: float = 0.0, r_dd: float = 0.0):
        self.pack(r=float(r), r_d=float(r_d), r_dd=float(r_dd))

    def set(self, r: float, r_d: float = 0.0, r_dd: float = 0.0) -> None:
        self.packed[0][:3] = float(r), float(r_d), float(r_dd)


# ----------------------------------------------------------------------------------------- joint laws
class ViscoElastic(JointLaw):
    """``tau = -k (r - r0) - mu r_d``; k in N m/rad (N/m), mu in N m s/rad (N s/m), r0 in rad (m).
    Evaluated in the numba kernel from the model's arrays; ``torque`` is the same formula in Python."""

    def __init__(self, k: float = 0.0, mu: float = 0.0, r0: float = 0.0):
        self.k, self.mu, self.r0 = float(k), float(mu), float(r0)

    def torque(self, t: float, r: float, r_d: float) -> float:
        return -self.k * (r - self.r0) - self.mu * r_d

    def __repr__(self) -> str:
        return f"ViscoElastic(k={self.k}, mu={self.mu}, r0={self.r0})"


class Free(ViscoElastic):
    """Zero torque (a free passive joint)."""

    def __init__(self):
        super().__init__(0.0, 0.0, 0.0)

    def __repr__(self) -> str:
        return "Free()"


TRACKING_SPRING_LAYOUT = ParamLayout(floats=(("k", 0), ("mu", 0), ("ratio", 0)))
TRACKING_SPRING = TRACKING_SPRING_LAYOUT.fields


def tracking_spring_kernel(t, r, r_d, ref_r, ref_rd, ref_rdd, fpar, ipar):
    ratio = float_scalar(fpar, ipar, TRACKING_SPRING.ratio)
    return (-float_scalar(fpar, ipar, TRACKING_SPRING.k) * (r - ratio * ref_r)
            - float_scalar(fpar, ipar, TRACKING_SPRING.mu) * (r_d - ratio * ref_rd))


register_joint_law("tracking_spring", TRACKING_SPRING_LAYOUT, tracking_spring_kernel)


class TrackingSpring(JointLaw):
    """Spring-damper about a moving reference: ``tau = -k (r - ratio theta(t)) - mu (r_d - ratio theta_d(t))``
    (N m or N), with (theta, theta_d) from the motion law ``source`` (its ``reference``; e.g. a fin driven
    through a linkage by a servo: k N m/rad, mu N m s/rad, ratio rad/rad). Compiled when ``source`` is."""
    fused_kernel = "tracking_spring"
    k = packed_scalar("k", "N m/rad or N/m")
    mu = packed_scalar("mu", "N m s/rad or N s/m")
    ratio = packed_scalar("ratio", "rad/rad (or m per unit of the source)")

    def __init__(self, source: MotionLaw, ratio: float, k: float, mu: float):
        self.source = self.reference = source
        self.pack(k=float(k), mu=float(mu), ratio=float(ratio))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.source!r}, ratio={self.ratio}, k={self.k}, mu={self.mu})"


class CallableTorque(JointLaw):
    """Torque given by a Python function ``fn(t, r, r_d) -> tau`` (N m or N)."""

    def __init__(self, fn: Callable[[float, float, float], float]):
        self.fn = fn

    def torque(self, t: float, r: float, r_d: float) -> float:
        return float(self.fn(t, r, r_d))


# ----------------------------------------------------------------------------------------- from config
MOTION_LAW_TYPES = ("constant", "sinusoid", "polynomial", "spline")
JOINT_LAW_TYPES = ("viscoelastic", "free")


def _law_number(table, key, path, prefix, default=None):
    from .config import require
    if default is None:
        return require(table, key, float, path=path, prefix=prefix)
    return require(table, key, float, path=path, prefix=prefix, default=default)


def _numbers(table, key, path, prefix) -> list[float]:
    from .config import ConfigError, require
    values = require(table, key, list, path=path, prefix=prefix, expected="an array of numbers")
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
        raise ConfigError(path, f"{prefix}.{key}", "expected a non-empty array of numbers")
    return [float(v) for v in values]


def _check_keys(table, allowed, path, prefix) -> None:
    from .config import ConfigError
    unknown = sorted(set(table) - set(allowed))
    if unknown:
        raise ConfigError(path, f"{prefix}.{unknown[0]}", f"unknown key, expected one of {sorted(allowed)}")


def motion_law_from_config(table: dict, path=None, prefix: str = "law") -> MotionLaw:
    """A MotionLaw from a config table ``{type = "sinusoid", amplitude, omega, phase, offset}``,
    ``{type = "constant", value}``, ``{type = "polynomial", coefficients = [...]}`` or
    ``{type = "spline", times = [...], values = [...], bc = "not-a-knot"}`` (SI units: rad, rad/s, s)."""
    from .config import ConfigError, require
    kind = require(table, "type", str, path=path, prefix=prefix, expected=f"one of {MOTION_LAW_TYPES}")
    if kind == "constant":
        _check_keys(table, {"type", "value"}, path, prefix)
        return Constant(_law_number(table, "value", path, prefix, 0.0))
    if kind == "sinusoid":
        _check_keys(table, {"type", "amplitude", "omega", "phase", "offset"}, path, prefix)
        return Sinusoid(_law_number(table, "amplitude", path, prefix), _law_number(table, "omega", path, prefix),
                        _law_number(table, "phase", path, prefix, 0.0), _law_number(table, "offset", path, prefix, 0.0))
    if kind == "polynomial":
        _check_keys(table, {"type", "coefficients"}, path, prefix)
        return Polynomial(_numbers(table, "coefficients", path, prefix))
    if kind == "spline":
        _check_keys(table, {"type", "times", "values", "bc", "hold"}, path, prefix)
        times, values = _numbers(table, "times", path, prefix), _numbers(table, "values", path, prefix)
        bc = require(table, "bc", str, path=path, prefix=prefix, default="not-a-knot")
        hold = require(table, "hold", bool, path=path, prefix=prefix, default=False)
        try:
            return Spline(times, values, bc_type=bc, hold=hold)
        except ValueError as exc:
            raise ConfigError(path, prefix, str(exc).splitlines()[0]) from None
    raise ConfigError(path, f"{prefix}.type", f"unknown motion law {kind!r}, expected one of {MOTION_LAW_TYPES}")


def joint_law_from_config(table: dict, path=None, prefix: str = "law") -> JointLaw:
    """A JointLaw from ``{type = "viscoelastic", k, mu, r0}`` (N m/rad, N m s/rad, rad) or ``{type = "free"}``."""
    from .config import ConfigError, require
    kind = require(table, "type", str, path=path, prefix=prefix, expected=f"one of {JOINT_LAW_TYPES}")
    if kind == "viscoelastic":
        _check_keys(table, {"type", "k", "mu", "r0"}, path, prefix)
        return ViscoElastic(_law_number(table, "k", path, prefix, 0.0), _law_number(table, "mu", path, prefix, 0.0),
                            _law_number(table, "r0", path, prefix, 0.0))
    if kind == "free":
        _check_keys(table, {"type"}, path, prefix)
        return Free()
    raise ConfigError(path, f"{prefix}.type", f"unknown joint law {kind!r}, expected one of {JOINT_LAW_TYPES}")
