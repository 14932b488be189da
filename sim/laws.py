"""Joint laws: motion laws for actuated joints and stress-strain (torque) laws for passive joints.

One signature per plug-in kind (docs/sim-api.md):
- ``MotionLaw.evaluate(t) -> (r, r_d, r_dd)``: position (rad or m), velocity, acceleration of an actuated joint
  at time t (s); the joint is not integrated, its motion is imposed (Porez et al. 2014, section III, J_a).
- ``JointLaw.torque(t, r, r_d) -> tau``: torque (N m) or force (N) of a passive joint (J_p).

:class:`ViscoElastic` joints are gathered by the model into arrays ``k, mu, r0`` (n,) and evaluated inside the
numba kernel (``tau = -k (r - r0) - mu r_d``); the other laws are called from Python, except on the fused RK4
path (sim/fused.py), whose kernel also evaluates :class:`Sinusoid`, :class:`Polynomial`,
:class:`RampedSinusoid` and :class:`ScaledMotion` with the same operations and reads :class:`Constant` /
:class:`ExternalMotion` once per call.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np


class MotionLaw:
    """Imposed motion of an actuated joint."""

    def evaluate(self, t: float) -> tuple[float, float, float]:
        """Return (r, r_d, r_dd) at time t in s (rad, rad/s, rad/s^2 or m, m/s, m/s^2)."""
        raise NotImplementedError


class JointLaw:
    """Torque law of a passive joint."""

    def torque(self, t: float, r: float, r_d: float) -> float:
        """Return the joint torque (N m, or N for a prismatic joint) at time t (s), position r, velocity r_d."""
        raise NotImplementedError


# ----------------------------------------------------------------------------------------- motion laws
class Constant(MotionLaw):
    """Joint held at a constant position (rad or m)."""

    def __init__(self, value: float = 0.0):
        self.value = float(value)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        return self.value, 0.0, 0.0

    def __repr__(self) -> str:
        return f"Constant({self.value})"


class Sinusoid(MotionLaw):
    """``r(t) = offset + amplitude sin(omega t + phase)``; amplitude in rad (or m), omega in rad/s,
    phase in rad. The flapper's stroke ``r = -A cos(w t)`` is ``Sinusoid(A, w, phase=-pi/2)``."""

    def __init__(self, amplitude: float, omega: float, phase: float = 0.0, offset: float = 0.0):
        self.amplitude = float(amplitude)
        self.omega = float(omega)
        self.phase = float(phase)
        self.offset = float(offset)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        angle = self.omega * t + self.phase
        s = math.sin(angle)
        a, w = self.amplitude, self.omega
        return self.offset + a * s, a * w * math.cos(angle), -a * w * w * s

    def __repr__(self) -> str:
        return f"Sinusoid({self.amplitude}, {self.omega}, phase={self.phase}, offset={self.offset})"


class Polynomial(MotionLaw):
    """``r(t) = sum_k coefficients[k] t^k`` (coefficients in increasing powers, units rad/s^k or m/s^k)."""

    def __init__(self, coefficients: Sequence[float]):
        self.coefficients = np.asarray(coefficients, dtype=float)
        if self.coefficients.ndim != 1 or self.coefficients.size == 0:
            raise ValueError("Polynomial needs a non-empty list of coefficients")
        self._poly = np.polynomial.Polynomial(self.coefficients)
        self._d1 = self._poly.deriv(1)
        self._d2 = self._poly.deriv(2)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        return float(self._poly(t)), float(self._d1(t)), float(self._d2(t))


class RampedSinusoid(MotionLaw):
    """Sinusoid with a soft start: ``r(t) = amplitude ramp(t) sin(omega t + phase)`` (amplitude rad or m, omega
    rad/s, phase rad), ``ramp(t) = (1 - cos(pi t / ramp_time)) / 2`` for ``0 <= t < ramp_time`` s and 1 after
    (raised cosine: rises from 0 to 1 with zero slope at both ends, so the velocity does not jump); no ramp when
    ramp_time is 0. r_d and r_dd by the product rule. Evaluated in the fused kernel (sim/fused.py) with the
    same operations in the same order."""

    def __init__(self, amplitude: float, omega: float, phase: float = 0.0, ramp_time: float = 0.0):
        self.amplitude = float(amplitude)
        self.omega = float(omega)
        self.phase = float(phase)
        self.ramp_time = float(ramp_time)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        a, w = self.amplitude, self.omega
        angle = w * t + self.phase
        s, c = math.sin(angle), math.cos(angle)
        x, x_d, x_dd = a * s, a * w * c, -a * w * w * s
        if self.ramp_time > 0.0 and t < self.ramp_time:
            k = math.pi / self.ramp_time
            r, r_d, r_dd = 0.5 * (1.0 - math.cos(k * t)), 0.5 * k * math.sin(k * t), 0.5 * k * k * math.cos(k * t)
            return r * x, r_d * x + r * x_d, r_dd * x + 2.0 * r_d * x_d + r * x_dd
        return x, x_d, x_dd

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


class CallableMotion(MotionLaw):
    """Motion given by a Python function ``fn(t) -> (r, r_d, r_dd)``."""

    def __init__(self, fn: Callable[[float], tuple[float, float, float]]):
        self.fn = fn

    def evaluate(self, t: float) -> tuple[float, float, float]:
        r, r_d, r_dd = self.fn(t)
        return float(r), float(r_d), float(r_dd)


class ExternalMotion(MotionLaw):
    """Motion set from outside (emulator physics plant, HIL measured positions): ``set(r, r_d, r_dd)``;
    ``evaluate`` returns the last values set, whatever t."""

    def __init__(self, r: float = 0.0, r_d: float = 0.0, r_dd: float = 0.0):
        self.r, self.r_d, self.r_dd = float(r), float(r_d), float(r_dd)

    def set(self, r: float, r_d: float = 0.0, r_dd: float = 0.0) -> None:
        self.r, self.r_d, self.r_dd = float(r), float(r_d), float(r_dd)

    def evaluate(self, t: float) -> tuple[float, float, float]:
        return self.r, self.r_d, self.r_dd


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


class TrackingSpring(JointLaw):
    """Spring-damper about a moving reference: ``tau = -k (r - ratio theta(t)) - mu (r_d - ratio theta_d(t))``
    (N m or N), with (theta, theta_d) from the motion law ``source`` (e.g. a fin driven through a linkage by
    a servo: k N m/rad, mu N m s/rad, ratio rad/rad). A Python joint law everywhere, evaluated in the kernel
    by the fused path (sim/fused.py) when ``source`` has a kernel form."""

    def __init__(self, source: MotionLaw, ratio: float, k: float, mu: float):
        self.source = source
        self.ratio = float(ratio)
        self.k = float(k)
        self.mu = float(mu)

    def torque(self, t: float, r: float, r_d: float) -> float:
        theta, theta_d, _ = self.source.evaluate(t)
        return -self.k * (r - self.ratio * theta) - self.mu * (r_d - self.ratio * theta_d)

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
