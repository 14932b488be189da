"""Hydrodynamic force models for swimming robots (RayBot): buoyancy, added mass, bulk drag, control-surface lift.

The force model is the one of the RayBot paper (Krishnamurthy et al., IEEE CCA 2009, Section II.C, read in
``docs/theory/raybot.md``): each body is hydrodynamically independent and quasi-steady.
Every plug-in has the project's one signature ``apply(model, data, t)`` (docs/sim-api.md): it reads the world
poses ``data.g`` (N+1, 4, 4) and body twists ``data.eta`` (N+1, 6) (linear m/s, angular rad/s, body frame,
about the body origin O_j) and adds wrenches (N, N m; body frame, about O_j) to ``data.f_ext`` (N+1, 6), or
added inertia (kg, kg m, kg m^2; body frame, about O_j) to ``data.M_added`` (N+1, 6, 6).

Each plug-in is vectorised over the bodies it acts on (per-body parameter arrays) and runs one numba kernel
per call, so that a whole robot costs one Python call per effect. The fluid is at rest (no current); the free
surface is the horizontal plane ``z = surface_z`` (world frame, z up).

Free surface (an approximation named in the configs): a body is treated as a prism of vertical extent
``height`` centred on its centre of buoyancy, so its submerged fraction is
``clip((surface_z - z_B) / height + 1/2, 0, 1)``; buoyancy, drag and lift scale with that fraction.
Added mass does not (the vehicles here stay almost fully submerged).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from numba import njit

from sim.forces import ForceModel
from .plugins import (ParamLayout, float_array3, float_matrix, float_scalar, float_vector, int_vector,
                      register_force_kernel)
from .kernel_cache import discard_stale_kernels

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Fresh water at 20 degC, kg/m^3 (the default density; every config may override it).
RHO_FRESH_WATER = 1000.0
#: Relative speeds below this (m/s) produce no lift (the angle of attack is undefined at rest).
LIFT_MIN_SPEED = 1e-9


# ----------------------------------------------------------------------------------------- shared helpers
@njit(cache=True)
def submerged_fraction(z_centre: float, height: float, surface_z: float) -> float:
    """Submerged fraction (0..1) of a prism of vertical extent ``height`` (m) whose centre is at world height
    ``z_centre`` (m) under a free surface at ``surface_z`` (m). A zero height means a body always submerged
    below the surface and always dry above it."""
    if height <= 0.0:
        return 1.0 if z_centre <= surface_z else 0.0
    fraction = (surface_z - z_centre) / height + 0.5
    if fraction < 0.0:
        return 0.0
    if fraction > 1.0:
        return 1.0
    return fraction


@njit(cache=True)
def _point_world_z(g, point):
    """World height (m) of a point given in the body frame (3,), for a pose g (4, 4)."""
    return g[2, 0] * point[0] + g[2, 1] * point[1] + g[2, 2] * point[2] + g[2, 3]


@njit(cache=True)
def stall_shape(delta: float, delta_stall: float) -> float:
    """The paper's stall model (RayBot paper, Section II.C, eq. 8): ``sin(pi delta / (2 delta_stall))`` below
    stall, ``sign(delta)`` at and beyond it. delta, delta_stall in rad."""
    if abs(delta) < delta_stall:
        return math.sin(0.5 * math.pi * delta / delta_stall)
    return 1.0 if delta > 0.0 else -1.0


@njit(cache=True)
def fold_incidence(delta: float) -> float:
    """Fold an angle of attack delta in (-pi, pi] (rad) into [-pi/2, pi/2]: a thin plate is symmetric fore and
    aft, so flow arriving over the trailing edge at small incidence is small incidence, not deep stall."""
    if delta > 0.5 * math.pi:
        return math.pi - delta
    if delta < -0.5 * math.pi:
        return -math.pi - delta
    return delta


# ----------------------------------------------------------------------------------------- buoyancy
@njit(cache=True)
def buoyancy_kernel(g, bodies, volume, centre, height, rho, gravity, surface_z, f_ext, out_force_world):
    """Buoyancy (RayBot paper, Section II.C): ``f_B = R^T (-rho Vol g)`` at the centre of buoyancy ``p_B``.

    g (N+1, 4, 4) world poses; bodies (k,) body indices; volume (k,) m^3; centre (k, 3) centre of buoyancy in
    the body frame, m; height (k,) vertical extent for the free surface, m; gravity (3,) world, m/s^2;
    f_ext (N+1, 6) is added to (body frame, about O_j); out_force_world (k, 3) receives each force in world.
    """
    for i in range(bodies.shape[0]):
        j = bodies[i]
        frac = submerged_fraction(_point_world_z(g[j], centre[i]), height[i], surface_z)
        scale = -rho * volume[i] * frac
        fw0 = scale * gravity[0]
        fw1 = scale * gravity[1]
        fw2 = scale * gravity[2]
        out_force_world[i, 0] = fw0
        out_force_world[i, 1] = fw1
        out_force_world[i, 2] = fw2
        R = g[j, :3, :3]
        # R^T f_world: the force in the body frame.
        fx = R[0, 0] * fw0 + R[1, 0] * fw1 + R[2, 0] * fw2
        fy = R[0, 1] * fw0 + R[1, 1] * fw1 + R[2, 1] * fw2
        fz = R[0, 2] * fw0 + R[1, 2] * fw1 + R[2, 2] * fw2
        c = centre[i]
        f_ext[j, 0] += fx
        f_ext[j, 1] += fy
        f_ext[j, 2] += fz
        f_ext[j, 3] += c[1] * fz - c[2] * fy
        f_ext[j, 4] += c[2] * fx - c[0] * fz
        f_ext[j, 5] += c[0] * fy - c[1] * fx


BUOYANCY_LAYOUT = ParamLayout(floats=(("volume", 1), ("centre", 2), ("height", 1), ("rho", 0), ("gravity", 1),
                                       ("surface_z", 0), ("last_force_world", 2)), ints=(("bodies", 1),))
_BUOY = BUOYANCY_LAYOUT.fields


def buoyancy_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`buoyancy_kernel` on packed parameters (sim/plugins.py: the force-kernel signature)."""
    buoyancy_kernel(g, int_vector(ipar, _BUOY.bodies), float_vector(fpar, ipar, _BUOY.volume),
                    float_matrix(fpar, ipar, _BUOY.centre), float_vector(fpar, ipar, _BUOY.height),
                    float_scalar(fpar, ipar, _BUOY.rho), float_vector(fpar, ipar, _BUOY.gravity),
                    float_scalar(fpar, ipar, _BUOY.surface_z), f_ext, float_matrix(fpar, ipar, _BUOY.last_force_world))


register_force_kernel("buoyancy", BUOYANCY_LAYOUT, buoyancy_packed)


class Buoyancy(ForceModel):
    """Buoyancy of the displaced volume, at the centre of buoyancy, with a prismatic free-surface model.

    bodies (k,) indices; volume (k,) m^3; centre (k, 3) centre of buoyancy in the body frame, m; height (k,) m
    vertical extent used at the free surface; rho kg/m^3; gravity (3,) world m/s^2; surface_z m (world)."""

    name = "buoyancy"
    #: Registered kernel (sim/plugins.py): :func:`buoyancy_packed`, in ``apply`` and in the fused stepper.
    fused_kernel = "buoyancy"

    def __init__(self, bodies, volume, centre, height, rho=RHO_FRESH_WATER, gravity=(0.0, 0.0, -9.81),
                 surface_z=math.inf):
        self.bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        k = self.bodies.size
        self.volume = np.asarray(volume, dtype=float).reshape(k)
        self.centre = np.asarray(centre, dtype=float).reshape(k, 3)
        self.height = np.asarray(height, dtype=float).reshape(k)
        self.rho = float(rho)
        self.gravity = np.asarray(gravity, dtype=float).reshape(3)
        self.surface_z = float(surface_z)
        self.pack(volume=self.volume, centre=self.centre, height=self.height, rho=self.rho, gravity=self.gravity,
                  surface_z=self.surface_z, last_force_world=np.zeros((k, 3)), bodies=self.bodies)

    @property
    def last_force_world(self) -> np.ndarray:
        """(k, 3) last buoyancy forces, world frame, N (written by the kernel)."""
        return self.packed_view("last_force_world")

    def summary(self, model, data) -> dict[str, float]:
        return {"buoyancy_N": float(self.last_force_world[:, 2].sum())}


# ----------------------------------------------------------------------------------------- added mass
def elliptic_plate_added_mass(rho: float, a: float, b: float) -> float:
    """Added mass (kg) of a thin elliptic plate of semi-axes a, b (m) translating normal to itself in an
    unbounded ideal fluid: ``(4 pi / 3) rho a_max a_min^2 / E(e)``, E the complete elliptic integral of the second
    kind of eccentricity ``e^2 = 1 - (a_min/a_max)^2`` (Lamb, Hydrodynamics, art. 373; a circular disc of radius r
    gives ``(8/3) rho r^3``, the spec's reference value)."""
    from scipy.special import ellipe
    a_max, a_min = max(a, b), min(a, b)
    if a_min <= 0.0:
        return 0.0
    return (4.0 * math.pi / 3.0) * rho * a_max * a_min ** 2 / ellipe(1.0 - (a_min / a_max) ** 2)


def plate_added_inertia_diagonal(rho: float, length: float, width: float, thickness: float) -> np.ndarray:
    """Diagonal (6,) of the added-mass matrix of a flat body in its own principal axes at its centroid:
    x along ``length``, y along ``width``, z along ``thickness`` (all full dimensions, m).

    Translations (the paper's projected-area estimate, RayBot paper Section II.C): each direction takes the
    elliptic-plate value of the body's projected area normal to it (semi-axes = half the two other dimensions).
    Rotations about an in-plane axis: ``(2/15) m_z l^2`` with l the semi-extent perpendicular to that axis, the
    value that reproduces a circular disc's exact ``(16/45) rho r^5`` (an assumption for non-circular plates).
    Rotation about the normal moves no fluid for a thin plate: ``(2/15) m_x..`` of the edge-on areas, small.
    Units: kg (0..2), kg m^2 (3..5)."""
    a, b, c = 0.5 * length, 0.5 * width, 0.5 * thickness
    m_x = elliptic_plate_added_mass(rho, b, c)   # moving along x: projected area width x thickness
    m_y = elliptic_plate_added_mass(rho, a, c)
    m_z = elliptic_plate_added_mass(rho, a, b)
    i_x = (2.0 / 15.0) * m_z * b ** 2            # roll about x moves the plate's y extent normal to itself
    i_y = (2.0 / 15.0) * m_z * a ** 2
    i_z = (2.0 / 15.0) * (m_x * b ** 2 + m_y * a ** 2)
    return np.array([m_x, m_y, m_z, i_x, i_y, i_z])


def added_mass_about_origin(diagonal, rotation, centre) -> np.ndarray:
    """Added-mass matrix (6, 6) about the body origin O_j in frame j, from its diagonal (6,) in a principal frame
    h with axes ``rotation`` (3, 3, columns in frame j) and origin ``centre`` (3,) m:
    ``M_O = Ad_{h^-1}^T diag(M) Ad_{h^-1}`` (kinetic energy ``eta_h^T M eta_h / 2`` with ``eta_h = Ad_{h^-1} eta``)."""
    from sim.spatial import Ad_inv
    h = np.eye(4)
    h[:3, :3] = np.asarray(rotation, dtype=float)
    h[:3, 3] = np.asarray(centre, dtype=float)
    X = Ad_inv(h)
    return X.T @ np.diag(np.asarray(diagonal, dtype=float)) @ X


@njit(cache=True)
def added_mass_kernel(bodies, matrices, M_added):
    """``M_added[bodies[i]] += matrices[i]`` for the k listed bodies (matrices (k, 6, 6), M_added (N+1, 6, 6))."""
    for i in range(bodies.shape[0]):
        j = bodies[i]
        for r in range(6):
            for c in range(6):
                M_added[j, r, c] += matrices[i, r, c]


ADDED_MASS_LAYOUT = ParamLayout(floats=(("matrices", 3),), ints=(("bodies", 1),))
_ADDED = ADDED_MASS_LAYOUT.fields


def added_mass_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`added_mass_kernel` on packed parameters (sim/plugins.py: the force-kernel signature)."""
    added_mass_kernel(int_vector(ipar, _ADDED.bodies), float_array3(fpar, ipar, _ADDED.matrices), M_added)


register_force_kernel("added_mass", ADDED_MASS_LAYOUT, added_mass_packed)


class AddedMass(ForceModel):
    """Constant added-mass matrices (6, 6) per body (body frame, about O_j), put into ``data.M_added``; the core
    adds them to the articulated inertia and their Kirchhoff velocity product ``-ad^T(M_A eta)`` itself.

    bodies (k,) indices; matrices (k, 6, 6) kg, kg m, kg m^2 (symmetric, positive semi-definite)."""

    name = "added_mass"
    #: Registered kernel (sim/plugins.py): :func:`added_mass_packed`, in ``apply`` and in the fused stepper.
    fused_kernel = "added_mass"

    def __init__(self, bodies, matrices):
        self.bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        self.matrices = np.asarray(matrices, dtype=float).reshape(self.bodies.size, 6, 6)
        self.pack(matrices=self.matrices, bodies=self.bodies)


# ----------------------------------------------------------------------------------------- bulk drag
@njit(cache=True)
def drag_kernel(g, eta, bodies, rotation, centre, height, linear, quadratic, surface_z, f_ext, out_wrench):
    """Bulk drag ``-D(v) v`` (RayBot paper, Section II.C), linear plus quadratic per axis of a drag frame h.

    For body j, h has axes ``rotation[i]`` (3, 3, columns in frame j) and origin ``centre[i]`` (3,) m; the twist of
    h's origin in h axes is ``(v, w) = (R_h^T (V + Omega x p_h), R_h^T Omega)``; the wrench there is
    ``-(linear + quadratic |.|) (v, w)`` per component (linear (k, 6) N s/m | N m s/rad; quadratic (k, 6)
    N s^2/m^2 | N m s^2/rad^2), scaled by the submerged fraction, then moved to O_j and added to f_ext (N+1, 6).
    out_wrench (k, 6) receives it (body frame about O_j)."""
    for i in range(bodies.shape[0]):
        j = bodies[i]
        p = centre[i]
        Rh = rotation[i]
        frac = submerged_fraction(_point_world_z(g[j], p), height[i], surface_z)
        V = eta[j, :3]
        W = eta[j, 3:]
        # velocity of h's origin in frame j: V + W x p
        vj0 = V[0] + W[1] * p[2] - W[2] * p[1]
        vj1 = V[1] + W[2] * p[0] - W[0] * p[2]
        vj2 = V[2] + W[0] * p[1] - W[1] * p[0]
        fj = np.zeros(3)
        mj = np.zeros(3)
        for a in range(3):
            # component along h's axis a (column a of Rh)
            v = Rh[0, a] * vj0 + Rh[1, a] * vj1 + Rh[2, a] * vj2
            w = Rh[0, a] * W[0] + Rh[1, a] * W[1] + Rh[2, a] * W[2]
            fa = -frac * (linear[i, a] + quadratic[i, a] * abs(v)) * v
            ma = -frac * (linear[i, 3 + a] + quadratic[i, 3 + a] * abs(w)) * w
            for r in range(3):
                fj[r] += Rh[r, a] * fa
                mj[r] += Rh[r, a] * ma
        # moment about O_j: m + p x f
        mj[0] += p[1] * fj[2] - p[2] * fj[1]
        mj[1] += p[2] * fj[0] - p[0] * fj[2]
        mj[2] += p[0] * fj[1] - p[1] * fj[0]
        for r in range(3):
            f_ext[j, r] += fj[r]
            f_ext[j, 3 + r] += mj[r]
            out_wrench[i, r] = fj[r]
            out_wrench[i, 3 + r] = mj[r]


DRAG_LAYOUT = ParamLayout(floats=(("rotation", 3), ("centre", 2), ("height", 1), ("linear", 2), ("quadratic", 2),
                                   ("surface_z", 0), ("last_wrench", 2)), ints=(("bodies", 1),))
_DRAG = DRAG_LAYOUT.fields


def drag_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`drag_kernel` on packed parameters (sim/plugins.py: the force-kernel signature)."""
    drag_kernel(g, eta, int_vector(ipar, _DRAG.bodies), float_array3(fpar, ipar, _DRAG.rotation),
                float_matrix(fpar, ipar, _DRAG.centre), float_vector(fpar, ipar, _DRAG.height),
                float_matrix(fpar, ipar, _DRAG.linear), float_matrix(fpar, ipar, _DRAG.quadratic),
                float_scalar(fpar, ipar, _DRAG.surface_z), f_ext, float_matrix(fpar, ipar, _DRAG.last_wrench))


register_force_kernel("drag", DRAG_LAYOUT, drag_packed)


class Drag(ForceModel):
    """Bulk drag per body: linear + quadratic per axis of a drag frame (see :func:`drag_kernel`).

    bodies (k,); rotation (k, 3, 3) drag-frame axes in the body frame; centre (k, 3) m; height (k,) m (free
    surface); linear (k, 6), quadratic (k, 6) coefficients (force rows N s/m, N s^2/m^2; moment rows
    N m s/rad, N m s^2/rad^2); surface_z m."""

    name = "drag"
    #: Registered kernel (sim/plugins.py): :func:`drag_packed`, in ``apply`` and in the fused stepper.
    fused_kernel = "drag"

    def __init__(self, bodies, rotation, centre, height, linear, quadratic, surface_z=math.inf):
        self.bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        k = self.bodies.size
        self.rotation = np.ascontiguousarray(np.asarray(rotation, dtype=float).reshape(k, 3, 3))
        self.centre = np.asarray(centre, dtype=float).reshape(k, 3)
        self.height = np.asarray(height, dtype=float).reshape(k)
        self.linear = np.asarray(linear, dtype=float).reshape(k, 6)
        self.quadratic = np.asarray(quadratic, dtype=float).reshape(k, 6)
        self.surface_z = float(surface_z)
        self.pack(rotation=self.rotation, centre=self.centre, height=self.height, linear=self.linear,
                  quadratic=self.quadratic, surface_z=self.surface_z, last_wrench=np.zeros((k, 6)), bodies=self.bodies)

    @property
    def last_wrench(self) -> np.ndarray:
        """(k, 6) last drag wrenches, body frame about O_j, N | N m (written by the kernel)."""
        return self.packed_view("last_wrench")


# ----------------------------------------------------------------------------------------- lift
@njit(cache=True)
def surface_force(v_cp, chord, normal, area, rho, cn0, ct0, delta_stall):
    """Quasi-steady force (3,) N on a control surface (RayBot paper, Section II.C, eqs. 5-8; spec reading).

    v_cp (3,) m/s velocity of the centre of pressure relative to the fluid; chord, normal (3,) unit vectors;
    area m^2; rho kg/m^3. The advance velocity ``v_av = (v.n) n + (v.c) c`` drops the spanwise component; the
    angle of attack is ``delta = atan2(v_av.n, v_av.c)``, folded into [-pi/2, pi/2] (:func:`fold_incidence`).
    Normal force ``-q A C_N0 s(delta) n`` and chordwise force ``-q A C_T0 |s(delta)| sign(v.c) c`` with
    ``q = rho |v_av|^2 / 2`` and s the stall shape: both oppose the surface's motion through the fluid (a
    negative C_T0 models leading-edge suction, a chordwise push towards the leading edge)."""
    vc = v_cp[0] * chord[0] + v_cp[1] * chord[1] + v_cp[2] * chord[2]
    vn = v_cp[0] * normal[0] + v_cp[1] * normal[1] + v_cp[2] * normal[2]
    speed2 = vc * vc + vn * vn
    out = np.zeros(3)
    if speed2 < LIFT_MIN_SPEED * LIFT_MIN_SPEED:
        return out
    delta = fold_incidence(math.atan2(vn, vc))
    s = stall_shape(delta, delta_stall)
    q = 0.5 * rho * speed2 * area
    f_n = -q * cn0 * s
    f_c = -q * ct0 * abs(s) * (1.0 if vc >= 0.0 else -1.0)
    for r in range(3):
        out[r] = f_n * normal[r] + f_c * chord[r]
    return out


@njit(cache=True)
def lift_kernel(g, eta, bodies, chord, normal, cp, area, cn0, ct0, delta_stall, height, rho, surface_z,
                f_ext, out_wrench):
    """Control-surface forces on every listed body: :func:`surface_force` at the centre of pressure
    ``cp[i]`` (3,) m (body frame), moment ``cp x force`` about O_j, scaled by the submerged fraction, added to
    f_ext (N+1, 6) and written to out_wrench (k, 6). chord, normal (k, 3) unit vectors in the body frame;
    area (k,) m^2; cn0, ct0 (k,); delta_stall (k,) rad; height (k,) m."""
    for i in range(bodies.shape[0]):
        j = bodies[i]
        p = cp[i]
        frac = submerged_fraction(_point_world_z(g[j], p), height[i], surface_z)
        V = eta[j, :3]
        W = eta[j, 3:]
        v = np.empty(3)
        v[0] = V[0] + W[1] * p[2] - W[2] * p[1]
        v[1] = V[1] + W[2] * p[0] - W[0] * p[2]
        v[2] = V[2] + W[0] * p[1] - W[1] * p[0]
        f = surface_force(v, chord[i], normal[i], area[i], rho, cn0[i], ct0[i], delta_stall[i])
        f *= frac
        m0 = p[1] * f[2] - p[2] * f[1]
        m1 = p[2] * f[0] - p[0] * f[2]
        m2 = p[0] * f[1] - p[1] * f[0]
        f_ext[j, 0] += f[0]
        f_ext[j, 1] += f[1]
        f_ext[j, 2] += f[2]
        f_ext[j, 3] += m0
        f_ext[j, 4] += m1
        f_ext[j, 5] += m2
        out_wrench[i, 0] = f[0]
        out_wrench[i, 1] = f[1]
        out_wrench[i, 2] = f[2]
        out_wrench[i, 3] = m0
        out_wrench[i, 4] = m1
        out_wrench[i, 5] = m2


LIFT_LAYOUT = ParamLayout(floats=(("chord", 2), ("normal", 2), ("cp", 2), ("area", 1), ("cn0", 1), ("ct0", 1),
                                   ("delta_stall", 1), ("height", 1), ("rho", 0), ("surface_z", 0),
                                   ("last_wrench", 2)), ints=(("bodies", 1),))
_LIFT = LIFT_LAYOUT.fields


def lift_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`lift_kernel` on packed parameters (sim/plugins.py: the force-kernel signature)."""
    lift_kernel(g, eta, int_vector(ipar, _LIFT.bodies), float_matrix(fpar, ipar, _LIFT.chord),
                float_matrix(fpar, ipar, _LIFT.normal), float_matrix(fpar, ipar, _LIFT.cp),
                float_vector(fpar, ipar, _LIFT.area), float_vector(fpar, ipar, _LIFT.cn0),
                float_vector(fpar, ipar, _LIFT.ct0), float_vector(fpar, ipar, _LIFT.delta_stall),
                float_vector(fpar, ipar, _LIFT.height), float_scalar(fpar, ipar, _LIFT.rho),
                float_scalar(fpar, ipar, _LIFT.surface_z), f_ext, float_matrix(fpar, ipar, _LIFT.last_wrench))


register_force_kernel("lift", LIFT_LAYOUT, lift_packed)


class ControlSurfaceLift(ForceModel):
    """Quasi-steady normal and chordwise force on control surfaces (fins, tail plates, disc) with the paper's
    stall model, at the centre of pressure (see :func:`surface_force`).

    bodies (k,); chord, normal (k, 3) unit vectors in the body frame (orthogonal; span = chord x normal);
    cp (k, 3) centre of pressure in the body frame, m (about 25% chord behind the leading edge); area (k,) m^2;
    cn0, ct0 (k,) coefficients; delta_stall (k,) rad; height (k,) m (free surface); rho kg/m^3; surface_z m."""

    name = "lift"
    #: Registered kernel (sim/plugins.py): :func:`lift_packed`, in ``apply`` and in the fused stepper.
    fused_kernel = "lift"

    def __init__(self, bodies, chord, normal, cp, area, cn0, ct0, delta_stall, height, rho=RHO_FRESH_WATER,
                 surface_z=math.inf):
        self.bodies = np.asarray(bodies, dtype=np.int64).reshape(-1)
        k = self.bodies.size
        self.chord = _unit_rows(np.asarray(chord, dtype=float).reshape(k, 3))
        self.normal = _unit_rows(np.asarray(normal, dtype=float).reshape(k, 3))
        if np.any(np.abs(np.einsum("ij,ij->i", self.chord, self.normal)) > ORTHOGONALITY_TOLERANCE):
            raise ValueError("control surface chord and normal must be orthogonal")
        self.cp = np.asarray(cp, dtype=float).reshape(k, 3)
        self.area = np.asarray(area, dtype=float).reshape(k)
        self.cn0 = np.asarray(cn0, dtype=float).reshape(k)
        self.ct0 = np.asarray(ct0, dtype=float).reshape(k)
        self.delta_stall = np.asarray(delta_stall, dtype=float).reshape(k)
        if np.any(self.delta_stall <= 0.0):
            raise ValueError("stall angles must be positive")
        self.height = np.asarray(height, dtype=float).reshape(k)
        self.rho = float(rho)
        self.surface_z = float(surface_z)
        self.pack(chord=self.chord, normal=self.normal, cp=self.cp, area=self.area, cn0=self.cn0, ct0=self.ct0,
                  delta_stall=self.delta_stall, height=self.height, rho=self.rho, surface_z=self.surface_z,
                  last_wrench=np.zeros((k, 6)), bodies=self.bodies)

    @property
    def last_wrench(self) -> np.ndarray:
        """(k, 6) last lift wrenches, body frame about O_j, N | N m (written by the kernel)."""
        return self.packed_view("last_wrench")


#: |chord . normal| above this is not an orthogonal pair of unit vectors.
ORTHOGONALITY_TOLERANCE = 1e-9


def _unit_rows(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1)
    if np.any(norms <= 0.0):
        raise ValueError("control surface directions must be non-zero vectors")
    return np.ascontiguousarray(vectors / norms[:, None])


@dataclass
class HydroBody:
    """Hydrodynamic description of one body (all in the body frame, SI units), gathered by
    :func:`build_hydro_models` into the vectorised plug-ins above."""

    body: int
    volume: float = 0.0                                        # m^3 displaced when fully submerged
    centre_of_buoyancy: np.ndarray = field(default_factory=lambda: np.zeros(3))   # (3,) m
    height: float = 0.0                                        # m, vertical extent (free surface)
    frame_rotation: np.ndarray = field(default_factory=lambda: np.eye(3))        # (3, 3) hydro axes in body frame
    frame_centre: np.ndarray = field(default_factory=lambda: np.zeros(3))       # (3,) m, hydro centre
    added_mass_diagonal: np.ndarray = field(default_factory=lambda: np.zeros(6))  # (6,) kg | kg m^2, hydro axes
    drag_linear: np.ndarray = field(default_factory=lambda: np.zeros(6))          # (6,) hydro axes
    drag_quadratic: np.ndarray = field(default_factory=lambda: np.zeros(6))       # (6,) hydro axes
    surface: dict | None = None   # control surface: chord (3,), normal (3,), cp (3,), area, cn0, ct0, delta_stall


def build_hydro_models(bodies: list[HydroBody], rho: float, gravity, surface_z: float) -> list[ForceModel]:
    """The four plug-ins (buoyancy, added mass, drag, lift) for a list of per-body descriptions."""
    models: list[ForceModel] = []
    floats = [b for b in bodies if b.volume > 0.0]
    if floats:
        models.append(Buoyancy([b.body for b in floats], [b.volume for b in floats],
                               [b.centre_of_buoyancy for b in floats], [b.height for b in floats],
                               rho=rho, gravity=gravity, surface_z=surface_z))
    massive = [b for b in bodies if np.any(np.asarray(b.added_mass_diagonal) > 0.0)]
    if massive:
        models.append(AddedMass([b.body for b in massive],
                                [added_mass_about_origin(b.added_mass_diagonal, b.frame_rotation, b.frame_centre)
                                 for b in massive]))
    dragged = [b for b in bodies if np.any(np.asarray(b.drag_linear) > 0) or np.any(np.asarray(b.drag_quadratic) > 0)]
    if dragged:
        models.append(Drag([b.body for b in dragged], [b.frame_rotation for b in dragged],
                           [b.frame_centre for b in dragged], [b.height for b in dragged],
                           [b.drag_linear for b in dragged], [b.drag_quadratic for b in dragged],
                           surface_z=surface_z))
    lifting = [b for b in bodies if b.surface is not None]
    if lifting:
        s = [b.surface for b in lifting]
        models.append(ControlSurfaceLift([b.body for b in lifting], [x["chord"] for x in s],
                                         [x["normal"] for x in s], [x["cp"] for x in s], [x["area"] for x in s],
                                         [x["cn0"] for x in s], [x["ct0"] for x in s],
                                         [x["delta_stall"] for x in s], [b.height for b in lifting],
                                         rho=rho, surface_z=surface_z))
    return models
