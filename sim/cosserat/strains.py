"""Strain fields of a Cosserat rod: the actuation cases of Table I (Boyer, Ali & Porez 2012).

A strain field ``xi(X, t) = (Gamma, K)`` (6,) per section (frame X, linear then angular: Gamma_X - 1 stretch,
Gamma_Y,Z shear, K_X twist, K_Y,Z curvatures, 1/m) has constrained components, held at the reference
``(1, 0, 0, 0, 0, 0)`` (unstretched, unsheared, untwisted, straight), and actuated ones that follow a time law.
A :class:`StrainField` pairs a :class:`StrainCase` with such a law; the law gives only the actuated components
and their derivatives, so a law cannot move a constrained strain.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

from .laws import CompiledLaw

#: xi of the straight, unstretched reference configuration (paper order: Gamma then K).
REFERENCE_STRAIN = np.array([1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
#: Smallest stretch Gamma_X accepted: at 0 a section has collapsed onto its neighbour (the beam is singular:
#: the mass per unit length rho A / Gamma_X and the kinematics X -> g lose their meaning).
MIN_STRETCH = 1e-3


@dataclass(frozen=True)
class StrainCase:
    """One row of Table I: which strain components (indices into xi) are actuated; the others are constrained."""
    name: str
    actuated: tuple[int, ...]
    beam: str


#: Table I (plus the 1-D axial case of the earthworm, where only the stretch moves).
TABLE_I: dict[str, StrainCase] = {
    "reissner": StrainCase("reissner", (0, 1, 2, 3, 4, 5), "Reissner (case 1, 6 DoF)"),
    "kirchhoff-extensible": StrainCase("kirchhoff-extensible", (0, 3, 4, 5), "extensible Kirchhoff (case 2, 4 DoF)"),
    "kirchhoff": StrainCase("kirchhoff", (3, 4, 5), "inextensible Kirchhoff (case 3, 3 DoF)"),
    "twistless": StrainCase("twistless", (4, 5), "inextensible, untwisted (case 4, 2 DoF)"),
    "planar": StrainCase("planar", (5,), "planar Kirchhoff (case 5, 1 DoF)"),
    "axial": StrainCase("axial", (0,), "stretch only (1-D earthworm)"),
}


class StrainSample(NamedTuple):
    """The strain field at nodes X (N,): each (N, 6), frame X. xi (1/m, Gamma unitless), xi_X = d/dX (1/m^2),
    xi_t = d/dt (1/(m s)), xi_tt = d2/dt2 (1/(m s^2))."""
    xi: np.ndarray
    xi_X: np.ndarray
    xi_t: np.ndarray
    xi_tt: np.ndarray


#: A law of the actuated components: (X (N,) m, t s) -> (values, d/dX, d/dt, d2/dt2), each (N, n_actuated).
ActuationLaw = Callable[[np.ndarray, float], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class StrainField:
    """The imposed strain ``xi_d(X, t)`` of a rod: a Table I case and the law of its actuated components;
    ``compiled``: the law's compiled form (sim/cosserat/laws/), None when it has none (the Python path only)."""
    case: StrainCase
    law: ActuationLaw
    compiled: CompiledLaw | None = None

    def __call__(self, X: np.ndarray, t: float) -> StrainSample:
        X = np.asarray(X, dtype=float)
        values = self.law(X, t)
        out = [np.zeros((X.size, 6)) for _ in range(4)]
        out[0][:] = REFERENCE_STRAIN
        for target, value in zip(out, values):
            target[:, self.case.actuated] = np.reshape(value, (X.size, len(self.case.actuated)))
        return StrainSample(*out)

    def kernel_law(self) -> tuple[int, np.ndarray, np.ndarray]:
        """(kind id, params (P,), actuated component indices (m,)): the law as sim/cosserat/kernels.py takes it."""
        if self.compiled is None:
            raise ValueError(f"this {self.case.name} strain law has no compiled form (sim/cosserat/laws/)")
        return self.compiled.kind_id, self.compiled.params, np.array(self.case.actuated, dtype=np.int64)

    def singular_at(self, X: np.ndarray, t: float) -> float | None:
        """The first X (m) where the beam is singular at time t (stretch Gamma_X below :data:`MIN_STRETCH`, or
        a non-finite strain), else None."""
        sample = self(X, t)
        bad = (sample.xi[:, 0] < MIN_STRETCH) | ~np.all(np.isfinite(np.hstack(sample)), axis=1)
        return float(np.asarray(X)[np.argmax(bad)]) if bad.any() else None


def constant_field(case: str, xi: np.ndarray) -> StrainField:
    """A time-invariant, X-uniform strain field of ``case`` with the actuated components of xi (6,)."""
    chosen = TABLE_I[case]
    values = np.asarray(xi, dtype=float)[list(chosen.actuated)]

    def law(X, t):
        zeros = np.zeros((X.size, values.size))
        return np.broadcast_to(values, zeros.shape), zeros, zeros, zeros
    return StrainField(chosen, law, CompiledLaw("constant", values))
