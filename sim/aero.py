"""Aerodynamic force models of flapping wings, as force plug-ins (docs/sim-api.md).

Porez, Boyer, Belkhiri 2014 (ICRA), section IV-B, and Boyer et al. 2017 (Appendix 1.1): on each wing blade
(rigid section of a discretised wing) the air exerts
- quasi-steady lift and drag (the fit of Dickinson et al. 1999) applied at the centre of pressure of each
  chordwise strip, summed over the span by Gauss-Legendre quadrature;
- the added-mass reaction of the air accelerated by the blade, ``-M_a eta_d + ad^T(M_a eta)``: the constant
  6x6 tensor ``M_a`` is handed to the core through ``data.M_added`` (the core adds it to the articulated
  inertia and adds the velocity-product term; it is never a lagged external force).

Strip geometry, per blade b, in the blade's own frame (the body frame of blade ``bodies[b]``):
- the leading edge is the blade's z axis; a strip at span abscissa xi (m) from the blade origin has its
  leading-edge point at ``(0, 0, xi)`` and chord ``c(xi)`` (m);
- ``t`` (3,): unit vector in the blade plane, from the trailing edge to the leading edge;
- ``w`` (3,): unit normal to the blade, from the lower surface (intrados) to the upper one (extrados);
- the centre of pressure is at ``cp_fraction * c`` behind the leading edge: ``p = (0,0,xi) - cp_fraction c t``.

Per unit span, with ``V_cp`` the velocity of the centre of pressure (quiescent air), ``v = V_cp/|V_cp|``,
``s = w.v``, ``c_t = t.v`` and the incidence ``alpha = atan2(s, c_t)`` (the spec's definition):
- drag ``D = 1/2 rho c C_D |V_cp|^2`` along ``-v``;
- lift ``L = 1/2 rho c |C_L| |V_cp|^2`` along ``u = -sign(s) unit(w - s v)``: perpendicular to v, in the plane
  (v, w), on the side away from the face that meets the air (a strip moving leading edge first with its
  leading edge raised, i.e. the air on its lower surface, has s < 0 and gets lift toward its upper side +w).
- coefficient fits (``fit``): ``FIT_PAPER`` (default, the papers): ``C_L = 1.8 sin 2 alpha``,
  ``C_D = 1.92 - 1.55 cos 2 alpha``; ``FIT_OFFSET`` (Dickinson et al. 1999 with offsets, on the acute
  incidence ``alpha_f = atan2(|s|, |c_t|)`` in degrees): ``C_L = 0.225 + 1.58 sin(2.13 alpha_f - 7.2)``,
  ``C_D = 1.92 - 1.55 cos(2.04 alpha_f - 9.82)``.
Added mass per unit span: ``m_a = k_a rho c^2 w w^T`` (3x3, kg/m) at the centre of pressure, integrated into
``M_a = int [[m_a, -m_a hat(p)], [hat(p) m_a, -hat(p) m_a hat(p)]] dxi`` (6x6, about O_j, blade frame).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from sim.forces import ForceModel
from .plugins import (ParamLayout, float_array3, float_matrix, float_scalar, int_scalar, int_vector,
                      register_force_kernel)
from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Coefficient fits selectable by name (config ``aero.coefficients``).
FIT_PAPER = 0
FIT_OFFSET = 1
FITS = {"paper": FIT_PAPER, "offset": FIT_OFFSET}

#: Below this squared speed (m^2/s^2) a strip is taken as at rest: no quasi-steady force (avoids 0/0).
STILL_AIR_SPEED2 = 1e-24
#: Below this norm the lift direction is undefined (flow along the normal or along the span): no lift.
DEGENERATE_DIRECTION = 1e-12


def gauss_span_points(length: float, n_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre abscissae xi (n,) in m on [0, length] and their weights (n,) in m."""
    x, w = np.polynomial.legendre.leggauss(int(n_points))
    return 0.5 * length * (x + 1.0), 0.5 * length * w


@njit(cache=True)
def quasi_steady_wrenches(eta, bodies, cp, chord, weight, t_dir, w_dir, half_rho, fit, out):
    """Quasi-steady lift + drag wrench on every blade (Porez et al. 2014, section IV-B, f_s,j).

    eta (N+1, 6): body twists (m/s, rad/s), own frame; bodies (nb,) int: blade body indices;
    cp (nb, nq, 3): centre-of-pressure positions in the blade frame (m); chord (nb, nq) m;
    weight (nb, nq): quadrature weights (m); t_dir, w_dir (nb, 3): unit chord and normal vectors (blade frame);
    half_rho: rho_air / 2 (kg/m^3); fit: FIT_PAPER or FIT_OFFSET.
    out (nb, 6): overwritten with the wrench (N, N m) on each blade, blade frame, about the blade origin.
    """
    deg = math.pi / 180.0
    nb = bodies.shape[0]
    nq = cp.shape[1]
    for b in range(nb):
        j = bodies[b]
        V0, V1, V2 = eta[j, 0], eta[j, 1], eta[j, 2]
        W0, W1, W2 = eta[j, 3], eta[j, 4], eta[j, 5]
        tx, ty, tz = t_dir[b, 0], t_dir[b, 1], t_dir[b, 2]
        wx, wy, wz = w_dir[b, 0], w_dir[b, 1], w_dir[b, 2]
        fx = 0.0
        fy = 0.0
        fz = 0.0
        mx = 0.0
        my = 0.0
        mz = 0.0
        for k in range(nq):
            px, py, pz = cp[b, k, 0], cp[b, k, 1], cp[b, k, 2]
            vx = V0 + W1 * pz - W2 * py
            vy = V1 + W2 * px - W0 * pz
            vz = V2 + W0 * py - W1 * px
            speed2 = vx * vx + vy * vy + vz * vz
            if speed2 <= STILL_AIR_SPEED2:
                continue
            speed = math.sqrt(speed2)
            ux, uy, uz = vx / speed, vy / speed, vz / speed
            s = wx * ux + wy * uy + wz * uz
            c = tx * ux + ty * uy + tz * uz
            h2 = s * s + c * c
            if fit == FIT_PAPER:
                if h2 > STILL_AIR_SPEED2:
                    sin2a = 2.0 * s * c / h2
                    cos2a = (c * c - s * s) / h2
                else:
                    sin2a = 0.0
                    cos2a = 1.0
                cl = 1.8 * abs(sin2a)
                cd = 1.92 - 1.55 * cos2a
            else:
                alpha_f = math.atan2(abs(s), abs(c)) / deg
                cl = 0.225 + 1.58 * math.sin((2.13 * alpha_f - 7.2) * deg)
                cd = 1.92 - 1.55 * math.cos((2.04 * alpha_f - 9.82) * deg)
            q = half_rho * chord[b, k] * speed2 * weight[b, k]
            # drag along -v
            Fx = -q * cd * ux
            Fy = -q * cd * uy
            Fz = -q * cd * uz
            # lift along -sign(s) unit(w - s v)
            nx = wx - s * ux
            ny = wy - s * uy
            nz = wz - s * uz
            nn = math.sqrt(nx * nx + ny * ny + nz * nz)
            if nn > DEGENERATE_DIRECTION and s != 0.0:
                scale = -q * cl / nn if s > 0.0 else q * cl / nn
                Fx += scale * nx
                Fy += scale * ny
                Fz += scale * nz
            fx += Fx
            fy += Fy
            fz += Fz
            mx += py * Fz - pz * Fy
            my += pz * Fx - px * Fz
            mz += px * Fy - py * Fx
        out[b, 0] = fx
        out[b, 1] = fy
        out[b, 2] = fz
        out[b, 3] = mx
        out[b, 4] = my
        out[b, 5] = mz


@njit(cache=True)
def add_blade_wrenches(f_ext, M_added, bodies, wrenches, added_mass):
    """f_ext[bodies[b]] += wrenches[b] (6,); M_added[bodies[b]] += added_mass[b] (6, 6). In place."""
    for b in range(bodies.shape[0]):
        j = bodies[b]
        for a in range(6):
            f_ext[j, a] += wrenches[b, a]
            for c in range(6):
                M_added[j, a, c] += added_mass[b, a, c]


@njit(cache=True)
def blade_aero_kernel(eta, f_ext, M_added, bodies, cp, chord, weight, t_dir, w_dir, half_rho, fit, added_mass,
                      wrenches):
    """The whole plug-in in one numba call (for a numba-side stage loop): quasi-steady wrenches into
    ``wrenches`` (nb, 6), added to ``f_ext`` (N+1, 6), and the added-mass tensors (nb, 6, 6) added to
    ``M_added`` (N+1, 6, 6). Its packed form, registered for the fused stepper: :func:`blade_aero_packed`."""
    quasi_steady_wrenches(eta, bodies, cp, chord, weight, t_dir, w_dir, half_rho, fit, wrenches)
    add_blade_wrenches(f_ext, M_added, bodies, wrenches, added_mass)


#: Parameters of :func:`blade_aero_packed` (see :func:`blade_aero_kernel` for their shapes and units).
BLADE_AERO_LAYOUT = ParamLayout(
    floats=(("cp", 3), ("chord", 2), ("weight", 2), ("t_dir", 2), ("w_dir", 2), ("half_rho", 0), ("added_mass", 3),
            ("wrenches", 2)),
    ints=(("bodies", 1), ("fit", 0)))
_AERO = BLADE_AERO_LAYOUT.fields


def blade_aero_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`blade_aero_kernel` on packed parameters (sim/plugins.py: the force-kernel signature)."""
    blade_aero_kernel(eta, f_ext, M_added, int_vector(ipar, _AERO.bodies), float_array3(fpar, ipar, _AERO.cp),
                      float_matrix(fpar, ipar, _AERO.chord), float_matrix(fpar, ipar, _AERO.weight),
                      float_matrix(fpar, ipar, _AERO.t_dir), float_matrix(fpar, ipar, _AERO.w_dir),
                      float_scalar(fpar, ipar, _AERO.half_rho), int_scalar(ipar, _AERO.fit),
                      float_array3(fpar, ipar, _AERO.added_mass), float_matrix(fpar, ipar, _AERO.wrenches))


register_force_kernel("blade_aero", BLADE_AERO_LAYOUT, blade_aero_packed)


def added_mass_tensor(cp: np.ndarray, chord: np.ndarray, weight: np.ndarray, w_dir: np.ndarray,
                      rho_air: float, k_a: float) -> np.ndarray:
    """6x6 added-mass tensor of one blade about its origin, blade frame (kg, kg m, kg m^2).

    Porez et al. 2014, section IV-B, M_a,j: ``int [[m_a, -m_a hat(p)], [hat(p) m_a, -hat(p) m_a hat(p)]]``
    with ``m_a = k_a rho c^2 w w^T``; cp (nq, 3) m, chord (nq,) m, weight (nq,) m, w_dir (3,).
    """
    out = np.zeros((6, 6))
    ww = np.outer(w_dir, w_dir)
    for p, c, wt in zip(cp, chord, weight):
        m_a = k_a * rho_air * c * c * ww * wt
        P = np.array([[0.0, -p[2], p[1]], [p[2], 0.0, -p[0]], [-p[1], p[0], 0.0]])
        out[:3, :3] += m_a
        out[:3, 3:] += -m_a @ P
        out[3:, :3] += P @ m_a
        out[3:, 3:] += -P @ m_a @ P
    return out


class BladeAero(ForceModel):
    """Quasi-steady lift/drag + added mass on a set of blades (Porez et al. 2014, section IV-B).

    Parameters (all arrays in each blade's own frame):
    - bodies (nb,) int: body indices of the blades;
    - span_points (nb, nq) m: span abscissae xi of the quadrature points along the blade's z axis
      (leading edge), from the blade origin; weights (nb, nq) m: quadrature weights;
    - chord (nb, nq) m: chord at each point; t_dir, w_dir (nb, 3): chord (trailing->leading) and normal units;
    - rho_air kg/m^3; cp_fraction: centre of pressure behind the leading edge, fraction of the chord;
    - fit: "paper" or "offset"; added_mass_coefficient k_a (pi/4 for a flat plate); with_added_mass.
    """

    name = "aero"
    #: Registered kernel (sim/plugins.py): :func:`blade_aero_packed`, in ``apply`` and in the fused stepper.
    fused_kernel = "blade_aero"

    def __init__(self, bodies, span_points, weights, chord, t_dir, w_dir, *, rho_air: float,
                 cp_fraction: float = 0.4, fit: str = "paper", added_mass_coefficient: float = math.pi / 4,
                 with_added_mass: bool = True):
        self.bodies = np.ascontiguousarray(bodies, dtype=np.int64)
        nb = self.bodies.shape[0]
        self.span_points = np.ascontiguousarray(span_points, dtype=float).reshape(nb, -1)
        self.weights = np.ascontiguousarray(weights, dtype=float).reshape(self.span_points.shape)
        self.chord = np.ascontiguousarray(chord, dtype=float).reshape(self.span_points.shape)
        self.t_dir = np.ascontiguousarray(t_dir, dtype=float).reshape(nb, 3)
        self.w_dir = np.ascontiguousarray(w_dir, dtype=float).reshape(nb, 3)
        self.rho_air = float(rho_air)
        self.cp_fraction = float(cp_fraction)
        if fit not in FITS:
            raise ValueError(f"unknown aerodynamic coefficient fit {fit!r}, expected one of {sorted(FITS)}")
        self.fit_name = fit
        self.fit = FITS[fit]
        self.added_mass_coefficient = float(added_mass_coefficient)
        # cp (nb, nq, 3): centre of pressure of each strip, blade frame, m.
        self.cp = np.zeros(self.span_points.shape + (3,))
        self.cp[:, :, 2] = self.span_points
        self.cp -= self.cp_fraction * self.chord[:, :, None] * self.t_dir[:, None, :]
        # added_mass (nb, 6, 6): constant in the blade frame.
        self.added_mass = np.zeros((nb, 6, 6))
        if with_added_mass:
            for b in range(nb):
                self.added_mass[b] = added_mass_tensor(self.cp[b], self.chord[b], self.weights[b],
                                                       self.w_dir[b], self.rho_air,
                                                       self.added_mass_coefficient)
        self.pack(cp=self.cp, chord=self.chord, weight=self.weights, t_dir=self.t_dir, w_dir=self.w_dir,
                  half_rho=0.5 * self.rho_air, added_mass=self.added_mass, wrenches=np.zeros((nb, 6)),
                  bodies=self.bodies, fit=self.fit)

    @property
    def wrenches(self) -> np.ndarray:
        """(nb, 6) last quasi-steady wrench on each blade, blade frame, N and N m (written by the kernel)."""
        return self.packed_view("wrenches")

    def compute(self, eta: np.ndarray) -> np.ndarray:
        """Quasi-steady wrenches (nb, 6) for body twists eta (N+1, 6); also kept in ``self.wrenches``."""
        quasi_steady_wrenches(eta, self.bodies, self.cp, self.chord, self.weights, self.t_dir, self.w_dir,
                              0.5 * self.rho_air, self.fit, self.wrenches)
        return self.wrenches

    def summary(self, model, data) -> dict[str, float]:
        """Total quasi-steady aerodynamic force on the blades in the world frame (N)."""
        total = np.zeros(3)
        for b, j in enumerate(self.bodies):
            total += data.g[j, :3, :3] @ self.wrenches[b, :3]
        return {"aero_force_x_N": float(total[0]), "aero_force_y_N": float(total[1]),
                "aero_force_z_N": float(total[2])}
