"""Lighthill's large-amplitude elongated-body theory (LAEBT) as a compiled force plug-in (docs/swimming.md).

An elongated swimmer (a fish, RayBot's tail) is cut into rigid slices, each a body of the tree. Along the
swimmer's axis, arc length ``X`` from the head (0) to the trailing edge (l), every cross-section carries a
frame: ``e1`` the tangent head -> tail, ``e2`` lateral, ``e3`` dorsal; the section is an ellipse of semi-axes
``a`` (along e2) and ``b`` (along e3). Per unit length the fluid's added inertia is
``M_f = blkdiag(diag(0, m2, m3), diag(I1, 0, 0))`` with ``m2 = rho pi b^2``, ``m3 = rho pi a^2``,
``I1 = rho pi (a^2 - b^2)^2 / 8`` (kg/m, kg m). With ``eta_r = (V - V_f, Omega)`` the section's twist relative
to the ambient flow ``v_f`` (section frame), the force per length and the trailing-edge force are

    0 < X < l:  F   = -M_f d/dt(eta_r) + ad^T_{eta_r}(M_f eta_r) + m_b R^T gamma_f - R^T (grad v_f) R (m_f V_r)
    X = l:      F_l = (e1 . eta_r) (M_f eta_r) - 1/2 (eta_r . M_f eta_r) e1

(Boyer et al., J. Nonlinear Sci. 2017, App. 1.2; the trailing-edge sign is the one that gives thrust, see
docs/swimming.md), plus a drag that the theory lacks: ``f1 = -1/2 rho C_f P |V_r1| V_r1`` (skin friction, P the
perimeter) and ``f2 = -1/2 rho C_D 2b |V_r2| V_r2`` (cross-flow).

Split between the plug-in's two outputs: the acceleration term ``-M_f eta_d`` is added mass (``M_added``: the
core puts it in the articulated inertia and adds its Kirchhoff product ``ad^T_eta(M_f eta)``); everything else
is an explicit wrench in ``f_ext``: with a flow, ``M_f (d/dt V_f, 0) + ad^T_{eta_r}(M_f eta_r) -
ad^T_eta(M_f eta)`` and the two flow terms. So the model needs neither joint accelerations nor the previous step:
it is an ordinary registered kernel (docs/extending.md) and runs compiled inside the fused stepper.

Sections sit at fixed poses ``j g s`` in their slice's frame (6 Gauss points per slice); the slice receives
``sum w Ad_s^T F`` and ``sum w Ad_s^T M_f Ad_s`` (``Ad_s = Ad_{(j g s)^-1}``), the last slice ``Ad_l^T F_l``.

Ambient flows (world frame, in the horizontal plane): none, a uniform stream, or a Karman vortex street of
staggered Lamb-Oseen vortices convected downstream (:func:`karman_flow`).
"""
from __future__ import annotations

import cmath
import math

import numpy as np
from numba import njit

from sim.forces import ForceModel
from sim.spatial import Ad_inv
from .kernel_cache import discard_stale_kernels
from .plugins import (ParamLayout, float_array3, float_matrix, float_vector, int_scalar, int_vector,
                      register_force_kernel)

discard_stale_kernels()   # before any kernel of this module is loaded from numba's cache

#: Ambient flows (the ``flow_kind`` parameter).
FLOW_NONE, FLOW_UNIFORM, FLOW_KARMAN = 0, 1, 2
FLOW_KINDS = {"none": FLOW_NONE, "uniform": FLOW_UNIFORM, "karman": FLOW_KARMAN}
#: Entries of the packed flow vector: stream speed along world x (m/s, signed), vortex convection speed along x
#: (m/s, signed), circulation of the upper row's vortices (m^2/s, signed), core radius (m), spacing of one row's
#: vortices (m, the street's wavelength), lateral distance between the rows (m), street origin x0, y0 (m: an upper
#: vortex sits at (x0 + c t, y0 + spacing/2) at t = 0), domain x_min, x_max, y_min, y_max (m).
FLOW_SIZE = 12
#: A row's vortices whose Lamb-Oseen core is added to the row's point-vortex sum: the nearest and one on each side.
#: Farther cores differ from point vortices by exp(-r^2 / r_core^2) <= exp(-(1.5 lambda / r_core)^2) (zero in
#: double precision for any street :func:`flow_vector` accepts), so the street is exact and smooth in x.
KARMAN_CORES_EACH_SIDE = 1
#: Smallest street wavelength in vortex cores :func:`flow_vector` accepts (the spec's street has 45): at 5 the
#: cores left out above weigh exp(-56) ~ 5e-25.
MIN_WAVELENGTH_IN_CORES = 5.0
#: Below this |x| (x = pi zeta / lambda) the regular part of a row's sum, cot x - 1/x, is taken from its Laurent
#: series (the closed form cancels there); the first term left out, 2 x^9 / 93555, is below 2e-12 of the kept ones.
ROW_SERIES_BELOW = 0.1
#: Beyond this |Im x| cot x = -i sign(Im x) to double precision (the closed form's sin and cos overflow far off
#: the row): the rest is 2 exp(-2 |Im x|) < 1e-17.
ROW_FAR_FIELD = 20.0
#: Below this r^2 / r_core^2 a Lamb-Oseen vortex's velocity is taken from its series (the closed form divides
#: 0 by 0 at the centre); the series' next term is u^2/24 ~ 4e-10 of the value there.
LAMB_OSEEN_SERIES_BELOW = 1e-4
#: Gauss-Legendre points per slice (the spec's quadrature for a fluid slice).
GAUSS_POINTS = 6


# ----------------------------------------------------------------------------------------- ambient flow
@njit(cache=True)
def _add_swirl(dx, dy, f, fp, v, grad):
    """Add the swirl v += f(s) (-dy, dx) seen from the offset (dx, dy) m (s = r^2, f in 1/s, fp = df/ds in
    1/(s m^2)) to the velocity ``v`` (3,) and its gradient ``grad`` (3, 3) [d v_i / d x_k]."""
    v[0] += -dy * f
    v[1] += dx * f
    grad[0, 0] += -2.0 * dx * dy * fp
    grad[0, 1] += -f - 2.0 * dy * dy * fp
    grad[1, 0] += f + 2.0 * dx * dx * fp
    grad[1, 1] += 2.0 * dx * dy * fp


@njit(cache=True)
def _lamb_oseen(dx, dy, gamma, core2, v, grad):
    """Add one Lamb-Oseen vortex (circulation gamma m^2/s, counterclockwise positive, core radius^2 core2 m^2)
    seen from the offset (dx, dy) m: velocity ``v`` (3,) += f(s) (-dy, dx), gradient ``grad`` (3, 3)
    [d v_i / d x_k] +=, with s = r^2 and f(s) = gamma / (2 pi s) (1 - exp(-s / core2))."""
    s = dx * dx + dy * dy
    u = s / core2
    c = gamma / (2.0 * math.pi)
    if u < LAMB_OSEEN_SERIES_BELOW:
        f = c / core2 * (1.0 - 0.5 * u + u * u / 6.0)
        fp = c / (core2 * core2) * (-0.5 + u / 3.0)
    else:
        e = math.exp(-u)
        f = c * (1.0 - e) / s
        fp = c * (e / (core2 * s) - (1.0 - e) / (s * s))
    _add_swirl(dx, dy, f, fp, v, grad)


@njit(cache=True)
def _core_excess(dx, dy, gamma, core2, v, grad):
    """Add a Lamb-Oseen vortex minus the point vortex of the same circulation (the core's correction, which
    decays as exp(-r^2 / r_core^2)) seen from the offset (dx, dy) m, r > 0: f(s) = -gamma / (2 pi s) exp(-s /
    core2) in v += f (-dy, dx) and its gradient, as :func:`_lamb_oseen`."""
    s = dx * dx + dy * dy
    e = math.exp(-s / core2)
    c = gamma / (2.0 * math.pi)
    f = -c * e / s
    fp = c * e * (1.0 / (s * s) + 1.0 / (core2 * s))
    _add_swirl(dx, dy, f, fp, v, grad)


@njit(cache=True)
def _row_regular(x):
    """cot x - 1/x and its derivative 1/x^2 - csc^2 x at complex x (both regular at x = 0)."""
    if abs(x) < ROW_SERIES_BELOW:
        x2 = x * x
        return (-x * (1.0 / 3.0 + x2 * (1.0 / 45.0 + x2 * (2.0 / 945.0 + x2 / 4725.0))),
                -(1.0 / 3.0 + x2 * (3.0 / 45.0 + x2 * (10.0 / 945.0 + 7.0 * x2 / 4725.0))))
    if abs(x.imag) > ROW_FAR_FIELD:
        cot = complex(0.0, -1.0 if x.imag > 0.0 else 1.0)
    else:
        cot = cmath.cos(x) / cmath.sin(x)
    return cot - 1.0 / x, 1.0 / (x * x) - (1.0 + cot * cot)


@njit(cache=True)
def _point_row_but_one(dx, dy, gamma, spacing, v, grad):
    """Add an infinite row of point vortices (circulation gamma m^2/s each, ``spacing`` m apart along x) minus
    its vortex at the offset's origin, seen from (dx, dy) m: with zeta = dx + i dy, x = pi zeta / spacing, the
    complex velocity u - i v = gamma / (2 i spacing) (cot x - 1/x) (the sum of gamma / (2 pi i (zeta - m
    spacing)) over m != 0, closed form), gradient from its derivative (irrotational: u_y = v_x, v_y = -u_x)."""
    scale = gamma / (2j * spacing)
    regular, slope = _row_regular(math.pi * complex(dx, dy) / spacing)
    w = scale * regular
    dw = scale * (math.pi / spacing) * slope         # d(u - i v)/dx = u_x - i v_x
    v[0] += w.real
    v[1] += -w.imag
    grad[0, 0] += dw.real
    grad[1, 0] += -dw.imag
    grad[0, 1] += -dw.imag
    grad[1, 1] += -dw.real


@njit(cache=True)
def karman_flow(x, y, t, flow, v, dvdt, grad) -> bool:
    """The Karman street at world (x, y) m, time t s: writes velocity v (3,) m/s, local time derivative dvdt (3,)
    m/s^2 and gradient grad (3, 3) 1/s (world frame; z components zero). Two staggered infinite rows of
    Lamb-Oseen vortices (``flow``: :data:`FLOW_SIZE` entries) in a uniform stream, translating along x at the
    convection speed, so ``d/dt v = -c d v / d x``. Each row: its point vortices in closed form
    (:func:`_point_row_but_one` plus the nearest one's Lamb-Oseen field) and the core corrections of the
    :data:`KARMAN_CORES_EACH_SIDE` neighbours: smooth in x and t (no sum cut off at a moving vortex). Returns
    whether (x, y) lies inside the street's domain."""
    stream, conv, gamma, core, spacing, rows = flow[0], flow[1], flow[2], flow[3], flow[4], flow[5]
    for a in range(3):
        v[a] = 0.0
        dvdt[a] = 0.0
        for b in range(3):
            grad[a, b] = 0.0
    core2 = core * core
    for row in range(2):
        sign = 1.0 if row == 0 else -1.0
        y_row = flow[7] + 0.5 * sign * rows
        x_row = flow[6] + conv * t + (0.0 if row == 0 else 0.5 * spacing)
        nearest = math.floor((x - x_row) / spacing + 0.5)
        dx = x - (x_row + nearest * spacing)
        dy = y - y_row
        _point_row_but_one(dx, dy, sign * gamma, spacing, v, grad)
        _lamb_oseen(dx, dy, sign * gamma, core2, v, grad)
        for m in range(1, KARMAN_CORES_EACH_SIDE + 1):
            _core_excess(dx - m * spacing, dy, sign * gamma, core2, v, grad)
            _core_excess(dx + m * spacing, dy, sign * gamma, core2, v, grad)
    for a in range(3):
        dvdt[a] = -conv * grad[a, 0]
    v[0] += stream
    return flow[8] <= x <= flow[9] and flow[10] <= y <= flow[11]


@njit(cache=True)
def ambient_flow(kind, x, y, t, flow, v, dvdt, grad) -> bool:
    """Ambient flow of ``kind`` (:data:`FLOW_KINDS`) at world (x, y), time t: see :func:`karman_flow`; a
    uniform stream is ``(flow[0], 0, 0)`` everywhere; none is zero. Returns whether the point is in the domain."""
    if kind == FLOW_KARMAN:
        return karman_flow(x, y, t, flow, v, dvdt, grad)
    for a in range(3):
        v[a] = 0.0
        dvdt[a] = 0.0
        for b in range(3):
            grad[a, b] = 0.0
    if kind == FLOW_UNIFORM:
        v[0] = flow[0]
        return flow[8] <= x <= flow[9] and flow[10] <= y <= flow[11]
    return True


# ----------------------------------------------------------------------------------------- the kernel
@njit(cache=True)
def _cross(a, b, out):
    out[0] = a[1] * b[2] - a[2] * b[1]
    out[1] = a[2] * b[0] - a[0] * b[2]
    out[2] = a[0] * b[1] - a[1] * b[0]


@njit(cache=True)
def _section_state(g, eta, j, ad_s, R_s, p_s, t, kind, flow, eta_s, V_r, dVf, R, vw, dvdt, grad):
    """Kinematics of the section at pose (R_s, p_s) in body j (Ad_{(j g s)^-1} = ad_s): its twist eta_s (6,),
    world rotation R (3, 3), velocity relative to the flow V_r (3,) and the section-frame time derivative of the
    flow velocity dVf (3,), all in the section frame. Returns whether the section is inside the flow's domain."""
    for a in range(6):
        acc = 0.0
        for b in range(6):
            acc += ad_s[a, b] * eta[j, b]
        eta_s[a] = acc
    pos = np.empty(3)
    for a in range(3):
        acc = g[j, a, 3]
        for b in range(3):
            acc += g[j, a, b] * p_s[b]
            R[a, b] = g[j, a, 0] * R_s[0, b] + g[j, a, 1] * R_s[1, b] + g[j, a, 2] * R_s[2, b]
        pos[a] = acc
    inside = ambient_flow(kind, pos[0], pos[1], t, flow, vw, dvdt, grad)
    if kind == FLOW_NONE:
        for a in range(3):
            V_r[a] = eta_s[a]
            dVf[a] = 0.0
        return inside
    # world velocity of the section's origin, p_d = R V; d/dt V_f = -Omega x V_f + R^T (d_t v_f + grad v_f p_d)
    pd = np.empty(3)
    for a in range(3):
        pd[a] = R[a, 0] * eta_s[0] + R[a, 1] * eta_s[1] + R[a, 2] * eta_s[2]
    Vf = np.empty(3)
    rate = np.empty(3)
    for a in range(3):
        Vf[a] = R[0, a] * vw[0] + R[1, a] * vw[1] + R[2, a] * vw[2]
        rate[a] = dvdt[a] + grad[a, 0] * pd[0] + grad[a, 1] * pd[1] + grad[a, 2] * pd[2]
    om_x_vf = np.empty(3)
    _cross(eta_s[3:], Vf, om_x_vf)
    for a in range(3):
        dVf[a] = -om_x_vf[a] + R[0, a] * rate[0] + R[1, a] * rate[1] + R[2, a] * rate[2]
        V_r[a] = eta_s[a] - Vf[a]
    return inside


@njit(cache=True)
def _coad(V, Om, Pf, Pm, out):
    """``ad^T_eta(P)`` in the project's sign (sim/dynamics.py: the equation is ``M eta_d - ad^T_eta(M eta) = F``):
    ``-(Omega x P_f, V x P_f + Omega x P_m)`` for eta = (V, Omega), P = (P_f, P_m); written to out (6,)."""
    c = np.empty(3)
    _cross(Om, Pf, c)
    out[0], out[1], out[2] = -c[0], -c[1], -c[2]
    _cross(V, Pf, c)
    d = np.empty(3)
    _cross(Om, Pm, d)
    out[3], out[4], out[5] = -c[0] - d[0], -c[1] - d[1], -c[2] - d[2]


@njit(cache=True)
def _relative_momentum(m, V_r, Omega, Pf, Pm):
    """The water's momentum per length ``M_f eta_r`` of a section of added inertia m = (m2, m3, I1), with
    eta_r = (V_r, Omega): linear part Pf (3,), angular part Pm (3,)."""
    Pf[0], Pf[1], Pf[2] = 0.0, m[0] * V_r[1], m[1] * V_r[2]
    Pm[0], Pm[1], Pm[2] = m[2] * Omega[0], 0.0, 0.0


@njit(cache=True)
def _add_transformed(ad_s, F, weight, out):
    """out (6,) += weight Ad_s^T F: a section wrench (section frame, about its origin) on its body."""
    for b in range(6):
        acc = 0.0
        for a in range(6):
            acc += ad_s[a, b] * F[a]
        out[b] += weight * acc


@njit(cache=True)
def lighthill_kernel(t, g, eta, f_ext, sec_body, sec_ad, sec_R, sec_p, sec_w, sec_m, sec_mb, sec_drag,
                     te_body, te_ad, te_R, te_p, te_m, added_body, added, kind, flow, te_force_world, outside):
    """LAEBT on every listed section (see the module docstring).

    Sections (n_s): sec_body (n_s,) body index; sec_ad (n_s, 6, 6) Ad_{(j g s)^-1}; sec_R (n_s, 3, 3), sec_p
    (n_s, 3) m the section pose in its body; sec_w (n_s,) quadrature weight, m; sec_m (n_s, 3) m2, m3 (kg/m), I1
    (kg m); sec_mb (n_s,) rho A, kg/m; sec_drag (n_s, 2) 1/2 rho C_f P and 1/2 rho C_D 2b, kg/m^2. Trailing edges
    (k): te_body, te_ad, te_R, te_p, te_m likewise. added_body (n_a,), added (n_a, 6, 6): the slices' added
    inertia (constant for rigid slices), put into M_added by the caller. kind, flow: the ambient flow.
    Outputs: f_ext (N+1, 6) +=; te_force_world (k, 3) N the trailing-edge forces in world axes; outside (1,) +=
    the number of sections evaluated outside the flow's domain (bad input, counted)."""
    eta_s = np.empty(6)
    V_r = np.empty(3)
    dVf = np.empty(3)
    R = np.empty((3, 3))
    vw = np.empty(3)
    dvdt = np.empty(3)
    grad = np.empty((3, 3))
    Pf = np.empty(3)
    Pm = np.empty(3)
    Qf = np.empty(3)
    Qm = np.empty(3)
    F = np.empty(6)
    ad_r = np.empty(6)
    ad_0 = np.empty(6)
    RP = np.empty(3)
    flow_force = np.empty(3)           # world: m_b gamma_f - (grad v_f) R P_f
    for s in range(sec_body.shape[0]):
        j = sec_body[s]
        if not _section_state(g, eta, j, sec_ad[s], sec_R[s], sec_p[s], t, kind, flow, eta_s, V_r, dVf, R, vw,
                              dvdt, grad):
            outside[0] += 1.0
        for a in range(6):
            F[a] = 0.0
        if kind != FLOW_NONE:
            _relative_momentum(sec_m[s], V_r, eta_s[3:], Pf, Pm)
            _relative_momentum(sec_m[s], eta_s[:3], eta_s[3:], Qf, Qm)
            _coad(V_r, eta_s[3:], Pf, Pm, ad_r)
            _coad(eta_s[:3], eta_s[3:], Qf, Qm, ad_0)
            # m_b R^T gamma_f - R^T (grad v_f) R P_f, gamma_f = d_t v_f + (grad v_f) v_f (world)
            for a in range(3):
                RP[a] = R[a, 0] * Pf[0] + R[a, 1] * Pf[1] + R[a, 2] * Pf[2]
            for a in range(3):
                flow_force[a] = (sec_mb[s] * (dvdt[a] + grad[a, 0] * vw[0] + grad[a, 1] * vw[1] + grad[a, 2] * vw[2])
                                 - (grad[a, 0] * RP[0] + grad[a, 1] * RP[1] + grad[a, 2] * RP[2]))
            for a in range(3):
                F[a] += R[0, a] * flow_force[0] + R[1, a] * flow_force[1] + R[2, a] * flow_force[2]
            F[1] += sec_m[s, 0] * dVf[1]
            F[2] += sec_m[s, 1] * dVf[2]
            for a in range(6):
                F[a] += ad_r[a] - ad_0[a]
        F[0] -= sec_drag[s, 0] * abs(V_r[0]) * V_r[0]
        F[1] -= sec_drag[s, 1] * abs(V_r[1]) * V_r[1]
        _add_transformed(sec_ad[s], F, sec_w[s], f_ext[j])
    for e in range(te_body.shape[0]):
        j = te_body[e]
        if not _section_state(g, eta, j, te_ad[e], te_R[e], te_p[e], t, kind, flow, eta_s, V_r, dVf, R, vw,
                              dvdt, grad):
            outside[0] += 1.0
        _relative_momentum(te_m[e], V_r, eta_s[3:], Pf, Pm)
        tangential = V_r[0]
        energy = V_r[1] * Pf[1] + V_r[2] * Pf[2] + eta_s[3] * Pm[0]
        F[0] = tangential * Pf[0] - 0.5 * energy
        F[1] = tangential * Pf[1]
        F[2] = tangential * Pf[2]
        F[3] = tangential * Pm[0]
        F[4] = 0.0
        F[5] = 0.0
        _add_transformed(te_ad[e], F, 1.0, f_ext[j])
        for a in range(3):
            te_force_world[e, a] = R[a, 0] * F[0] + R[a, 1] * F[1] + R[a, 2] * F[2]


LIGHTHILL_LAYOUT = ParamLayout(
    floats=(("sec_ad", 3), ("sec_R", 3), ("sec_p", 2), ("sec_w", 1), ("sec_m", 2), ("sec_mb", 1), ("sec_drag", 2),
            ("te_ad", 3), ("te_R", 3), ("te_p", 2), ("te_m", 2), ("added", 3), ("flow", 1),
            ("te_force_world", 2), ("outside", 1)),
    ints=(("sec_body", 1), ("te_body", 1), ("added_body", 1), ("flow_kind", 0)))
_L = LIGHTHILL_LAYOUT.fields


def lighthill_packed(t, g, eta, f_ext, M_added, fpar, ipar):
    """:func:`lighthill_kernel` on packed parameters (sim/plugins.py: the force-kernel signature), and the
    slices' constant added inertia into M_added."""
    added_body = int_vector(ipar, _L.added_body)
    added = float_array3(fpar, ipar, _L.added)
    for i in range(added_body.shape[0]):
        M_added[added_body[i]] += added[i]
    lighthill_kernel(t, g, eta, f_ext, int_vector(ipar, _L.sec_body), float_array3(fpar, ipar, _L.sec_ad),
                     float_array3(fpar, ipar, _L.sec_R), float_matrix(fpar, ipar, _L.sec_p),
                     float_vector(fpar, ipar, _L.sec_w), float_matrix(fpar, ipar, _L.sec_m),
                     float_vector(fpar, ipar, _L.sec_mb), float_matrix(fpar, ipar, _L.sec_drag),
                     int_vector(ipar, _L.te_body), float_array3(fpar, ipar, _L.te_ad),
                     float_array3(fpar, ipar, _L.te_R), float_matrix(fpar, ipar, _L.te_p),
                     float_matrix(fpar, ipar, _L.te_m), added_body, added, int_scalar(ipar, _L.flow_kind),
                     float_vector(fpar, ipar, _L.flow), float_matrix(fpar, ipar, _L.te_force_world),
                     float_vector(fpar, ipar, _L.outside))


register_force_kernel("lighthill", LIGHTHILL_LAYOUT, lighthill_packed)


# ----------------------------------------------------------------------------------------- geometry
def ellipse_perimeter(a: float, b: float) -> float:
    """Perimeter (m) of an ellipse of semi-axes a, b (m), Ramanujan's second approximation (exact for a circle,
    within 4e-5 relative for a 10:1 ellipse)."""
    h = ((a - b) / (a + b)) ** 2 if a + b > 0 else 0.0
    return math.pi * (a + b) * (1.0 + 3.0 * h / (10.0 + math.sqrt(4.0 - 3.0 * h)))


def section_added_inertia(rho: float, a: float, b: float) -> np.ndarray:
    """(m2 kg/m, m3 kg/m, I1 kg m) of an elliptic section of semi-axes a (lateral), b (dorsal), m."""
    return np.array([rho * math.pi * b * b, rho * math.pi * a * a, rho * math.pi * (a * a - b * b) ** 2 / 8.0])


def section_matrix(m: np.ndarray) -> np.ndarray:
    """M_f (6, 6) per length from (m2, m3, I1)."""
    return np.diag([0.0, m[0], m[1], m[2], 0.0, 0.0])


def gauss_points(x0: float, x1: float, n: int = GAUSS_POINTS) -> tuple[np.ndarray, np.ndarray]:
    """Gauss-Legendre points (n,) and weights (n,) on [x0, x1] (m)."""
    nodes, weights = np.polynomial.legendre.leggauss(n)
    half = 0.5 * (x1 - x0)
    return x0 + half * (nodes + 1.0), half * weights


def flow_vector(kind: str, *, stream: float = 0.0, diameter: float = 0.0, x0: float = 0.0, y0: float = 0.0,
                domain=(-math.inf, math.inf, -math.inf, math.inf), strouhal: float = 0.2,
                wavelength_factor: float = 0.9, row_ratio: float = 0.281, circulation_factor: float = 2.0,
                core_factor: float = 0.1) -> np.ndarray:
    """The packed flow (:data:`FLOW_SIZE`,) of ``kind``. A Karman street behind a cylinder of diameter D (m) in
    a stream U (m/s along world x, signed): shedding ``f_s = St U / D``, wavelength ``lambda = wavelength_factor
    U / f_s`` (the vortices convect at ``lambda f_s``), rows ``row_ratio lambda`` apart, circulation
    ``circulation_factor U D``, core ``core_factor D`` (the spec's street); the upper row turns against the
    stream (a drag wake). ``domain`` (x_min, x_max, y_min, y_max) m: where the street model is valid."""
    out = np.zeros(FLOW_SIZE)
    out[8:12] = domain
    if kind == "none":
        return out
    out[0] = stream
    if kind == "karman":
        f_s = strouhal * abs(stream) / diameter
        spacing = wavelength_factor * abs(stream) / f_s
        out[1] = math.copysign(spacing * f_s, stream)
        out[2] = -math.copysign(circulation_factor * abs(stream) * diameter, stream)
        out[3] = core_factor * diameter
        if not spacing >= MIN_WAVELENGTH_IN_CORES * out[3]:
            raise ValueError(f"a street of wavelength {spacing:g} m and core {out[3]:g} m: expected a wavelength of "
                             f"at least {MIN_WAVELENGTH_IN_CORES:g} cores (karman_flow adds only the nearest cores)")
        out[4] = spacing
        out[5] = row_ratio * spacing
        out[6], out[7] = x0, y0
    return out


def shedding_frequency(flow: np.ndarray) -> float:
    """Vortices shed per row per second (Hz) of a packed Karman street: convection speed / wavelength."""
    return abs(flow[1]) / flow[4] if flow[4] > 0 else 0.0


class Lighthill(ForceModel):
    """LAEBT on rigid slices (module docstring). Build it with :func:`slices_model` from a swimmer's geometry.

    sections: dict of arrays body (n_s,), pose (n_s, 4, 4) section poses in their body, weight (n_s,) m, m (n_s, 3),
    mb (n_s,), drag (n_s, 2); trailing: body (k,), pose (k, 4, 4), m (k, 3); flow_kind one of :data:`FLOW_KINDS`;
    flow (:data:`FLOW_SIZE`,) from :func:`flow_vector`."""

    name = "lighthill"
    fused_kernel = "lighthill"

    def __init__(self, sections: dict, trailing: dict, flow_kind: str = "none", flow=None):
        sec_pose = np.asarray(sections["pose"], dtype=float).reshape(-1, 4, 4)
        te_pose = np.asarray(trailing["pose"], dtype=float).reshape(-1, 4, 4)
        sec_body = np.asarray(sections["body"], dtype=np.int64).reshape(-1)
        weight = np.asarray(sections["weight"], dtype=float).reshape(-1)
        sec_m = np.asarray(sections["m"], dtype=float).reshape(-1, 3)
        bodies = sorted(set(int(b) for b in sec_body))
        added = np.zeros((len(bodies), 6, 6))
        ads = np.array([Ad_inv(p) for p in sec_pose])
        for s, j in enumerate(sec_body):
            added[bodies.index(int(j))] += weight[s] * ads[s].T @ section_matrix(sec_m[s]) @ ads[s]
        flow = flow_vector("none") if flow is None else np.asarray(flow, dtype=float).reshape(FLOW_SIZE)
        self.flow_kind = flow_kind
        self.pack(sec_ad=ads, sec_R=np.ascontiguousarray(sec_pose[:, :3, :3]),
                  sec_p=np.ascontiguousarray(sec_pose[:, :3, 3]), sec_w=weight, sec_m=sec_m,
                  sec_mb=np.asarray(sections["mb"], dtype=float).reshape(-1),
                  sec_drag=np.asarray(sections["drag"], dtype=float).reshape(-1, 2),
                  te_ad=np.array([Ad_inv(p) for p in te_pose]).reshape(-1, 6, 6),
                  te_R=np.ascontiguousarray(te_pose[:, :3, :3]), te_p=np.ascontiguousarray(te_pose[:, :3, 3]),
                  te_m=np.asarray(trailing["m"], dtype=float).reshape(-1, 3), added=added, flow=flow,
                  te_force_world=np.zeros((te_pose.shape[0], 3)), outside=np.zeros(1),
                  sec_body=sec_body, te_body=np.asarray(trailing["body"], dtype=np.int64).reshape(-1),
                  added_body=np.asarray(bodies, dtype=np.int64), flow_kind=FLOW_KINDS[flow_kind])

    @property
    def trailing_edge_force_world(self) -> np.ndarray:
        """(k, 3) N: the last trailing-edge forces, world axes (written by the kernel)."""
        return self.packed_view("te_force_world")

    @property
    def outside_count(self) -> int:
        """Sections evaluated outside the flow's domain since the model was built (bad input, counted)."""
        return int(self.packed_view("outside")[0])

    @property
    def flow(self) -> np.ndarray:
        return self.packed_view("flow")


def slices_model(rho: float, slices: list[tuple[int, float, float]], half_axes, *, skin_friction: float,
                 cross_drag: float, flow_kind: str = "none", flow=None, config_path=None,
                 key: str = "geometry") -> Lighthill:
    """The :class:`Lighthill` model of an elongated body made of rigid slices along -x of their frames.

    slices: (body index, X at the body's origin, X at its end) m along the swimmer from its head, in order, the
    last ending at the trailing edge; each body's frame has x forward (towards the head) and its origin at arc
    length ``X0``, so a section at X sits at ``(Rz(pi), (-(X - X0), 0, 0))`` (e1 towards the tail, e2 to the
    right (-y), e3 up). half_axes(X) -> (a, b) m: lateral and dorsal semi-axes. skin_friction C_f, cross_drag C_D.
    A section of zero area is refused (ConfigError naming ``key``)."""
    from sim.config import ConfigError

    flip = np.diag([-1.0, -1.0, 1.0])
    rows = {"body": [], "pose": [], "weight": [], "m": [], "mb": [], "drag": []}
    for body, x_start, x_end in slices:
        points, weights = gauss_points(x_start, x_end)
        for X, w in zip(points, weights):
            a, b = half_axes(X)
            if not (a > 0.0 and b > 0.0 and math.isfinite(a) and math.isfinite(b)):
                raise ConfigError(config_path, key, f"section at X = {X:.4g} m has semi-axes a = {a:g}, b = {b:g} m:"
                                  " expected a cross-section of non-zero area (a > 0 and b > 0)")
            pose = np.eye(4)
            pose[:3, :3] = flip
            pose[0, 3] = -(X - x_start)
            rows["body"].append(body)
            rows["pose"].append(pose)
            rows["weight"].append(w)
            rows["m"].append(section_added_inertia(rho, a, b))
            rows["mb"].append(rho * math.pi * a * b)
            rows["drag"].append((0.5 * rho * skin_friction * ellipse_perimeter(a, b), 0.5 * rho * cross_drag * 2 * b))
    body, x_start, x_end = slices[-1]
    a, b = half_axes(x_end)
    if not (a > 0.0 and b > 0.0):
        raise ConfigError(config_path, key, f"the trailing edge has semi-axes a = {a:g}, b = {b:g} m: expected a "
                          "cross-section of non-zero area (a > 0 and b > 0)")
    te_pose = np.eye(4)
    te_pose[:3, :3] = flip
    te_pose[0, 3] = -(x_end - x_start)
    trailing = {"body": [body], "pose": [te_pose], "m": [section_added_inertia(rho, a, b)]}
    return Lighthill(rows, trailing, flow_kind, flow)
