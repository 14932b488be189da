"""Parametric builder of the soft flapping-wing MAV (hawk moth, Manduca sexta).

Porez, Boyer, Belkhiri 2014 (ICRA), section IV-A and Table I; the project's reading is
docs/theory/flapper.md. ``build(config, path) -> Model`` turns the TOML table of
configs/robots/flapper.toml into a :class:`sim.model.Model` with the aerodynamic plug-in of sim/aero.py.

Structure (M sections per wing, N = 4M + 1 bodies, 4M joints):
- body 0: the thorax, a solid ellipsoid, centre O_0;
- right wing: bodies 1..2M, left wing 2M+1..4M (its mirror image through the thorax's x-z plane). Section i
  (1..M) of a wing is two co-located joints: the odd one about the leading edge (twist; for section 1 it is
  the actuated **stroke** joint instead, about the thorax's z axis) followed by a massless body, then the even
  one (bending, about the chord direction) followed by the blade, a thin elliptic-planform plate.

Frames (stated in the config's comments and in ``model.metadata["frames"]``):
- thorax: x0 forward along the body axis (half-axis ``thorax.half_axis_x``, Table I's c), y0 to the left,
  z0 up; the wing roots are at ``(d, -/+ lateral, 0)``; gravity along -z of the world (thorax starts level);
- blade frames: origin on the leading edge at the section root, z along the leading edge toward the tip,
  x along the chord from the trailing to the leading edge (the aerodynamic ``t``), y = +/- the upper normal
  (``w = +y`` right wing, ``w = -y`` left: the left frames are the mirror of the right ones with y flipped
  so that they stay right-handed);
- joint signs, identical for both wings (mirror-symmetric motions have equal joint values): stroke > 0
  moves the wing tip forward (+x0) (the stroke law is r = phi0 - A cos(w t), phi0 = ``stroke.offset_deg``,
  default 0: the mean stroke position, an open choice that trims the thorax's pitch, docs/periodic.md); twist > 0 raises the leading edge toward the upper side (nose up);
  bending > 0 moves the tip toward the upper side;
- rest pitch ``wing.rest_pitch_deg``: rotation of the wing about its leading edge out of the stroke plane
  (0: chord in the horizontal stroke plane, leading edge forward; 90: chord hanging below the leading edge).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.aero import FITS, BladeAero, gauss_span_points
from sim.flexible import MAX_MODES_PER_FAMILY
from sim.config import BOOLEAN, ConfigError, integer, number, one_of, require, table
from sim.laws import Sinusoid, ViscoElastic
from sim.model import Model, ModelBuilder
from sim.robots.schema import (MAX_GRAVITY_M_S2, SIMULATION, damping, degrees, density,
                               frequency_hz, length, position, robot_table)
from sim.robots.schema import stiffness as stiffness_range
from sim.spatial import spatial_inertia
from sim.summary import base_motion, base_pitch, steady_state_warnings

#: Quadrature points used to integrate a blade's mass distribution along its span (elliptic planform).
INERTIA_QUADRATURE_POINTS = 24
#: Largest number of sections per wing accepted from a config.
MAX_SECTIONS = 50
#: Largest Gauss-Legendre order per blade: beyond it the nodes bring nothing (the strips are smooth).
MAX_QUADRATURE_POINTS = 64
#: Largest added-mass coefficient k_a: a flat plate's is pi/4; ten times that is no wing.
MAX_ADDED_MASS_COEFFICIENT = 10.0

STIFFNESS_STATIONS = ("joint", "mid")
#: ``wing.body``: "blades" (a chain of rigid blades, 2 joints per section) or "modal" (one modal body per wing with
#: bending and torsion modes, sim/robots/flapper_modal.py; its ``[modes]`` table).
WING_BODIES = ("blades", "modal")
BASE_MODES = {"floating": "floating", "free": "floating", "fixed": "fixed", "tethered": "fixed"}

#: Mirror of the right wing into the left: reflection y -> -y (world) and flip of the local y axis.
_FLIP_Y = np.diag([1.0, -1.0, 1.0])


def _positive(value) -> bool:
    return value > 0.0


def _non_negative(value) -> bool:
    return value >= 0.0


def config_schema(config: dict, path) -> dict:
    """The JSON Schema of a flapper robot file (configs/robots/flapper.toml; sim/robots/schema.py)."""
    return table({
        "robot": robot_table("flapper", {
            "base": one_of(*BASE_MODES),
            "gravity": number(0.0, MAX_GRAVITY_M_S2, expected=f"a gravity in [0, {MAX_GRAVITY_M_S2:g}] m/s^2")}),
        "wing": table({
            "sections": integer(1, MAX_SECTIONS), "span": length(), "root_chord": length(), "thickness": length(),
            "density": density(), "rest_pitch_deg": degrees(-180.0, 180.0),
            "stiffness_station": one_of(*STIFFNESS_STATIONS), "root_lateral_offset": length(0.0),
            "body": one_of(*WING_BODIES)},
            ["sections", "span", "root_chord", "thickness", "density", "rest_pitch_deg"]),
        "thorax": table({"half_axis_x": length(), "half_axis_y": length(), "half_axis_z": length(),
                         "density": density(), "wing_root_offset": position()},
                        ["half_axis_x", "half_axis_y", "half_axis_z", "density", "wing_root_offset"]),
        "stroke": table({"amplitude_deg": degrees(0.0, 90.0), "frequency_hz": frequency_hz(),
                         "offset_deg": degrees(-90.0, 90.0)},
                        ["amplitude_deg", "frequency_hz"]),
        "stiffness": table({"twist_root": stiffness_range(positive=True), "twist_tip": stiffness_range(positive=True),
                            "bend_root": stiffness_range(positive=True), "bend_tip": stiffness_range(positive=True),
                            "damping": damping()},
                           ["twist_root", "twist_tip", "bend_root", "bend_tip", "damping"]),
        "aero": table({"rho_air": density(zero_allowed=True), "coefficients": one_of(*FITS),
                       "cp_fraction": number(0.0, 1.0, expected="a chord fraction in [0, 1]"),
                       "added_mass_coefficient": number(0.0, MAX_ADDED_MASS_COEFFICIENT),
                       "added_mass": BOOLEAN, "quadrature_points": integer(1, MAX_QUADRATURE_POINTS)}, ["rho_air"]),
        "modes": table({"bending": integer(0, MAX_MODES_PER_FAMILY), "torsion": integer(0, MAX_MODES_PER_FAMILY),
                        "sections": integer(1, MAX_QUADRATURE_POINTS),
                        "damping_ratio": number(0.0, 1.0, expected="a modal damping ratio beta_d in [0, 1] s")},
                       ["bending", "torsion", "sections"]),
        "simulation": SIMULATION,
    }, ["robot", "wing", "thorax", "stroke", "stiffness", "aero"])


def read_parameters(config: dict, path) -> dict:
    """Check the config table and return the flat parameter dict (SI units) the builder uses.

    Every value is checked with :func:`sim.config.require`; a bad value raises a one-line ConfigError.
    """
    robot = require(config, "robot", dict, path=path)
    kind = require(robot, "kind", str, path=path, prefix="robot")
    if kind != "flapper":
        raise ConfigError(path, "robot.kind", f"got {kind!r}, expected \"flapper\"")
    wing = require(config, "wing", dict, path=path)
    thorax = require(config, "thorax", dict, path=path)
    stroke = require(config, "stroke", dict, path=path)
    stiff = require(config, "stiffness", dict, path=path)
    aero = require(config, "aero", dict, path=path)
    p: dict = {}
    p["name"] = require(robot, "name", str, path=path, prefix="robot", default="flapper")
    base = require(robot, "base", str, path=path, prefix="robot", default="floating",
                   check=lambda v: v in BASE_MODES, expected="\"floating\" (free) or \"fixed\" (tethered)")
    p["base_mode"] = BASE_MODES[base]
    p["gravity"] = require(robot, "gravity", float, path=path, prefix="robot", default=9.81,
                           check=_non_negative, expected="a number >= 0 (m/s^2)")
    pos = dict(check=_positive, expected="a number > 0")
    p["M"] = require(wing, "sections", int, path=path, prefix="wing",
                     check=lambda v: 1 <= v <= MAX_SECTIONS, expected=f"an integer in 1..{MAX_SECTIONS}")
    p["S"] = require(wing, "span", float, path=path, prefix="wing", **pos)
    p["C"] = require(wing, "root_chord", float, path=path, prefix="wing", **pos)
    p["e"] = require(wing, "thickness", float, path=path, prefix="wing", **pos)
    p["rho_w"] = require(wing, "density", float, path=path, prefix="wing", **pos)
    p["rest_pitch"] = math.radians(require(wing, "rest_pitch_deg", float, path=path, prefix="wing",
                                           check=lambda v: -180.0 <= v <= 180.0,
                                           expected="an angle in [-180, 180] degrees"))
    p["stiffness_station"] = require(wing, "stiffness_station", str, path=path, prefix="wing", default="joint",
                                     check=lambda v: v in STIFFNESS_STATIONS,
                                     expected="\"joint\" or \"mid\"")
    p["lateral"] = require(wing, "root_lateral_offset", float, path=path, prefix="wing", default=0.0,
                           check=_non_negative, expected="a number >= 0 (m)")
    p["ax"] = require(thorax, "half_axis_x", float, path=path, prefix="thorax", **pos)
    p["ay"] = require(thorax, "half_axis_y", float, path=path, prefix="thorax", **pos)
    p["az"] = require(thorax, "half_axis_z", float, path=path, prefix="thorax", **pos)
    p["rho_t"] = require(thorax, "density", float, path=path, prefix="thorax", **pos)
    p["d"] = require(thorax, "wing_root_offset", float, path=path, prefix="thorax")
    p["A"] = math.radians(require(stroke, "amplitude_deg", float, path=path, prefix="stroke",
                                  check=lambda v: 0.0 <= v <= 90.0, expected="an angle in [0, 90] degrees"))
    p["f"] = require(stroke, "frequency_hz", float, path=path, prefix="stroke", **pos)
    p["phi0"] = math.radians(require(stroke, "offset_deg", float, path=path, prefix="stroke", default=0.0,
                                     check=lambda v: -90.0 <= v <= 90.0, expected="an angle in [-90, 90] degrees"))
    p["kt1"] = require(stiff, "twist_root", float, path=path, prefix="stiffness", **pos)
    p["kt2"] = require(stiff, "twist_tip", float, path=path, prefix="stiffness", **pos)
    p["kb1"] = require(stiff, "bend_root", float, path=path, prefix="stiffness", **pos)
    p["kb2"] = require(stiff, "bend_tip", float, path=path, prefix="stiffness", **pos)
    p["mu"] = require(stiff, "damping", float, path=path, prefix="stiffness", check=_non_negative,
                      expected="a number >= 0 (N m s/rad)")
    p["rho_air"] = require(aero, "rho_air", float, path=path, prefix="aero", check=_non_negative,
                           expected="a number >= 0 (kg/m^3)")
    p["fit"] = require(aero, "coefficients", str, path=path, prefix="aero", default="paper",
                       check=lambda v: v in FITS, expected=" or ".join(f'"{k}"' for k in FITS))
    p["cp_fraction"] = require(aero, "cp_fraction", float, path=path, prefix="aero", default=0.4,
                               check=lambda v: 0.0 <= v <= 1.0, expected="a chord fraction in [0, 1]")
    p["k_a"] = require(aero, "added_mass_coefficient", float, path=path, prefix="aero", default=math.pi / 4,
                       check=_non_negative, expected="a number >= 0")
    p["added_mass"] = require(aero, "added_mass", bool, path=path, prefix="aero", default=True)
    p["nq"] = require(aero, "quadrature_points", int, path=path, prefix="aero", default=6)
    p["wing_body"] = require(wing, "body", str, path=path, prefix="wing", default="blades",
                             check=lambda v: v in WING_BODIES, expected=" or ".join(f'"{k}"' for k in WING_BODIES))
    modes = config.get("modes")
    if p["wing_body"] == "modal":
        if not isinstance(modes, dict):
            raise ConfigError(path, "modes", 'wing.body = "modal" needs a [modes] table (bending, torsion, sections)')
        p["modes"] = {key: require(modes, key, int, path=path, prefix="modes") for key in ("bending", "torsion",
                                                                                           "sections")}
        if p["modes"]["bending"] + p["modes"]["torsion"] == 0:
            raise ConfigError(path, "modes", "expected at least one bending or torsion mode")
        p["modes"]["damping_ratio"] = require(modes, "damping_ratio", float, path=path, prefix="modes",
                                              default=0.0, check=_non_negative, expected="a number >= 0 (s)")
    elif modes is not None:
        raise ConfigError(path, "modes", 'only for wing.body = "modal"')
    return p


def chord(X, S: float, C: float):
    """Chord (m) of the elliptic wing at span position X (m) from the root: C sqrt(1 - X^2/S^2)."""
    X = np.asarray(X, dtype=float)
    return C * np.sqrt(np.clip(1.0 - (X / S) ** 2, 0.0, None))


def stiffness(X: float, S: float, k_root: float, k_tip: float) -> float:
    """Stiffness (N m/rad) at span position X (m): linear from k_root at X = 0 to k_tip at X = S."""
    return k_root + (X / S) * (k_tip - k_root)


def blade_inertia(X0: float, length: float, S: float, C: float, e: float, rho_w: float) -> np.ndarray:
    """Spatial inertia (6, 6) of the blade covering span [X0, X0 + length] about its origin (leading edge at
    X0), blade frame (x chord toward the leading edge, y normal, z span): a plate of thickness e (m) and
    density rho_w (kg/m^3) with the elliptic chord, integrated strip by strip (Gauss-Legendre)."""
    xi, wt = gauss_span_points(length, INERTIA_QUADRATURE_POINTS)
    out = np.zeros((6, 6))
    for x, w in zip(xi, wt):
        c = float(chord(X0 + x, S, C))
        dm = rho_w * e * c * w
        strip = np.diag([e * e, c * c, c * c + e * e]) * dm / 12.0  # about the strip centre (kg m^2)
        out += spatial_inertia(dm, [-0.5 * c, 0.0, x], strip)
    return out


def thorax_inertia(ax: float, ay: float, az: float, rho: float) -> np.ndarray:
    """Spatial inertia (6, 6) of a solid ellipsoid of half-axes ax, ay, az (m) about its centre."""
    m = rho * 4.0 / 3.0 * math.pi * ax * ay * az
    I = m / 5.0 * np.diag([ay * ay + az * az, ax * ax + az * az, ax * ax + ay * ay])
    return spatial_inertia(m, np.zeros(3), I)


def _rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _pose(R, p) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = R
    out[:3, 3] = p
    return out


def _right_wing(p: dict) -> list[dict]:
    """Bodies of the right wing, root to tip: dicts with name, joint, kind (stroke/twist/bend), parent
    offset (-1 = thorax, else index in this list), R, pos (placement in the parent frame), axis (joint frame),
    inertia (6, 6), X (span position of the joint, m) and, for blades, the blade's span range."""
    M, S, C = p["M"], p["S"], p["C"]
    length = S / M
    # Root frame at zero stroke: x forward (t), y up (w), z outward (-y0); then pitched about z.
    R0 = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    R_root = R0 @ _rot_z(p["rest_pitch"])
    bodies: list[dict] = []
    for i in range(1, M + 1):
        X_joint = (i - 1) * length
        X_k = X_joint if p["stiffness_station"] == "joint" else X_joint + 0.5 * length
        if i == 1:
            bodies.append(dict(name="root", joint="stroke", kind="stroke", parent=-1, R=R_root,
                               pos=np.array([p["d"], -p["lateral"], 0.0]),
                               axis=R_root.T @ np.array([0.0, 0.0, 1.0]), inertia=np.zeros((6, 6)),
                               X=X_joint, k=0.0))
        else:
            bodies.append(dict(name=f"section{i}", joint=f"twist{i}", kind="twist", parent=len(bodies) - 1,
                               R=np.eye(3), pos=np.array([0.0, 0.0, length]), axis=np.array([0.0, 0.0, 1.0]),
                               inertia=np.zeros((6, 6)), X=X_joint,
                               k=stiffness(X_k, S, p["kt1"], p["kt2"])))
        bodies.append(dict(name=f"blade{i}", joint=f"bend{i}", kind="bend", parent=len(bodies) - 1,
                           R=np.eye(3), pos=np.zeros(3), axis=np.array([-1.0, 0.0, 0.0]),
                           inertia=blade_inertia(X_joint, length, S, C, p["e"], p["rho_w"]), X=X_joint,
                           k=stiffness(X_k, S, p["kb1"], p["kb2"]), span=(X_joint, length)))
    return bodies


def _mirror(body: dict) -> dict:
    """Left-wing copy of a right-wing body (reflection y -> -y, local y flipped; joint sign kept)."""
    D = _FLIP_Y
    out = dict(body)
    out["R"] = D @ body["R"] @ D  # for the root: P R D with P = D (world reflection of the y axis)
    out["pos"] = D @ body["pos"]
    out["axis"] = -D @ body["axis"]
    D6 = np.zeros((6, 6))
    D6[:3, :3] = D
    D6[3:, 3:] = D
    # M' = [[m, -m hat(Dc)], [m hat(Dc), D I D]]; hat(Dc) = -D hat(c) D since det D = -1.
    M = body["inertia"]
    Mp = D6 @ M @ D6
    Mp[:3, 3:] *= -1.0
    Mp[3:, :3] *= -1.0
    out["inertia"] = Mp
    return out


def build(config: dict, path=None) -> Model:
    """The flapper Model of a parsed config table (configs/robots/flapper.toml); ConfigError on bad values."""
    p = read_parameters(config, path)
    if p["wing_body"] == "modal":
        from sim.robots import flapper_modal
        root = _right_wing(p)[0]

        def chord_at(X):
            return chord(X, p["S"], p["C"])

        wing = flapper_modal.wing_body(p, chord_at, lambda X: stiffness(X, p["S"], p["kt1"], p["kt2"]),
                                       lambda X: stiffness(X, p["S"], p["kb1"], p["kb2"]))
        return flapper_modal.build(p, path, thorax=thorax_inertia(p["ax"], p["ay"], p["az"], p["rho_t"]),
                                   roots={"r": root, "l": _mirror(root)}, wing=wing, chord=chord_at)
    M, S, C = p["M"], p["S"], p["C"]
    length = S / M
    omega = 2.0 * math.pi * p["f"]
    builder = ModelBuilder("thorax", thorax_inertia(p["ax"], p["ay"], p["az"], p["rho_t"]),
                           base_mode=p["base_mode"], gravity=(0.0, 0.0, -p["gravity"]))
    right = _right_wing(p)
    wings = {"r": right, "l": [_mirror(b) for b in right]}
    blade_bodies, blade_w = [], []
    joints = {side: {"stroke": None, "twist": [], "bend": []} for side in wings}
    for side, bodies in wings.items():
        names = []
        for b in bodies:
            name = f"{b['name']}_{side}"
            parent = "thorax" if b["parent"] < 0 else names[b["parent"]]
            names.append(name)
            actuated = b["kind"] == "stroke"
            law = None if actuated else ViscoElastic(b["k"], p["mu"], 0.0)
            motion = Sinusoid(p["A"], omega, phase=-0.5 * math.pi, offset=p["phi0"]) if actuated else None
            j = builder.add_body(name, parent, joint_name=f"{b['joint']}_{side}", joint_type="revolute",
                                 axis=b["axis"], placement=_pose(b["R"], b["pos"]), inertia=b["inertia"],
                                 actuated=actuated, q_rest=0.0, motion_law=motion, joint_law=law)
            if b["kind"] == "stroke":
                joints[side]["stroke"] = j - 1
            else:
                joints[side][b["kind"]].append(j - 1)
            if "span" in b:
                blade_bodies.append(j)
                blade_w.append(1.0 if side == "r" else -1.0)
    xi, wt = gauss_span_points(length, p["nq"])
    nb = len(blade_bodies)
    span_points = np.tile(xi, (nb, 1))
    weights = np.tile(wt, (nb, 1))
    section_of_blade = [k % M for k in range(nb)]
    chords = np.array([chord(s * length + xi, S, C) for s in section_of_blade])
    t_dir = np.tile([1.0, 0.0, 0.0], (nb, 1))
    w_dir = np.array([[0.0, s, 0.0] for s in blade_w])
    aero = BladeAero(blade_bodies, span_points, weights, chords, t_dir, w_dir, rho_air=p["rho_air"],
                     cp_fraction=p["cp_fraction"], fit=p["fit"], added_mass_coefficient=p["k_a"],
                     with_added_mass=p["added_mass"])
    builder.add_force_model(aero)
    period = 1.0 / p["f"]
    metadata = {
        "kind": "flapper", "name": p["name"], "config_path": None if path is None else str(Path(path)),
        "sections": M, "stroke_amplitude_rad": p["A"], "stroke_offset_rad": p["phi0"],
        "stroke_omega_rad_s": omega, "period_s": period,
        "stroke_joints": [joints["r"]["stroke"], joints["l"]["stroke"]],
        "twist_joints": {"r": joints["r"]["twist"], "l": joints["l"]["twist"]},
        "bend_joints": {"r": joints["r"]["bend"], "l": joints["l"]["bend"]},
        "blade_bodies": blade_bodies,
        "parameters": {k: v for k, v in p.items()},
        "frames": ("thorax: x0 forward along the body, y0 left, z0 up; blades: z along the leading edge toward "
                   "the tip, x from trailing to leading edge, upper normal w = +y (right) / -y (left); "
                   "stroke > 0 tip forward, twist > 0 leading edge up (nose up), bend > 0 tip toward the "
                   "upper side; both wings' joint values are equal for mirror-symmetric motion; "
                   f"rest pitch {math.degrees(p['rest_pitch']):g} deg about the leading edge "
                   "(0 = chord in the stroke plane, 90 = chord hanging below the leading edge)"),
        "amplitudes": "semi-amplitudes (half peak-to-peak) of the fundamental harmonic",
    }
    model = builder.build(metadata=metadata)
    model.metadata["weight_N"] = model.total_mass() * p["gravity"]
    return model


def wing_joints(model: Model) -> dict:
    """Joint indices of the flapper: {"stroke": [right, left], "twist": {"r": [...], "l": [...]}, "bend": ...}
    (twist and bend lists ordered root to tip)."""
    md = model.metadata
    return {"stroke": list(md["stroke_joints"]), "twist": md["twist_joints"], "bend": md["bend_joints"]}


#: Stability boundary of classical RK4 on the negative real axis (|lambda dt| below it is stable).
RK4_STABILITY_BOUNDARY = 2.78
#: Fraction of the RK4 boundary used when choosing a time step (margin for the aerodynamic damping and
#: the stiffening of the linearisation along the stroke).
STABLE_STEP_SAFETY = 0.8
#: Relative finite-difference increment for the linearisation.
FD_STEP = 1e-7


def stiffest_rate(model: Model) -> float:
    """Largest |eigenvalue| (1/s) of the passive joints' linearised dynamics at rest (thorax held, still air,
    actuated joints at their t = 0 values), from finite differences of the hybrid algorithm.

    The stiffest eigenvalue of the flapper is real and negative: the structural damping mu acting on the
    small twist inertia of the outer blades (rate ~ mu / I), growing roughly as M^2 with the section count."""
    from sim.dynamics import hybrid_step
    from sim.model import Data

    held = model.replace(base_mode="fixed")
    data = Data(held)
    n = held.n
    q0, qd0, qdd_act = held.q_rest.copy(), np.zeros(n), np.zeros(n)
    for k, law in held.motion_laws.items():
        q0[k] = law.evaluate(0.0)[0]
    passive = np.flatnonzero(~held.actuated)
    zero_tau = np.zeros(n)

    def qdd(q, qd):
        hybrid_step(held, data, 0.0, held.base_pose, np.zeros(6), q, qd, qdd_act, zero_tau)
        return data.qdd[passive].copy()

    f0 = qdd(q0, qd0)
    n_p = passive.size
    J = np.zeros((2 * n_p, 2 * n_p))
    J[:n_p, n_p:] = np.eye(n_p)
    for a, k in enumerate(passive):
        q = q0.copy()
        q[k] += FD_STEP
        J[n_p:, a] = (qdd(q, qd0) - f0) / FD_STEP
        qd = qd0.copy()
        qd[k] += FD_STEP
        J[n_p:, n_p + a] = (qdd(q0, qd) - f0) / FD_STEP
    return float(np.abs(np.linalg.eigvals(J)).max())


def stable_dt(model: Model, integrator: str = "rk4") -> float | None:
    """`mms sim` hook: largest fixed time step (s) advised for ``integrator`` (None for adaptive ones):
    ``STABLE_STEP_SAFETY * RK4_STABILITY_BOUNDARY / stiffest_rate``, rounded down to a whole fraction of
    the stroke period so that periods hold whole numbers of steps."""
    if model.flexible is not None:
        from sim.robots import flapper_modal
        return flapper_modal.stable_dt(model, integrator, RK4_STABILITY_BOUNDARY, STABLE_STEP_SAFETY)
    if integrator != "rk4":
        return None
    limit = STABLE_STEP_SAFETY * RK4_STABILITY_BOUNDARY / stiffest_rate(model)
    period = model.metadata["period_s"]
    return period / math.ceil(period / limit)


# ------------------------------------------------------------------------------------- mms sim hooks
def apply_cli_overrides(config: dict, args) -> dict:
    """`mms sim` hook: the flapper has no tail-beat options (its stroke is set in [stroke])."""
    for name in ("tailbeat_frequency", "tailbeat_amplitude"):
        if getattr(args, name, None) is not None:
            raise ConfigError(getattr(args, "config", None), None,
                              f"--{name.replace('_', '-')} does not apply to the flapper "
                              "(set stroke.frequency_hz / stroke.amplitude_deg in the config)")
    return config


def last_period(t: np.ndarray, period: float) -> np.ndarray:
    """Boolean mask (T,) of the samples of the last full period [t_end - period, t_end] (s)."""
    tolerance = 1e-9 * max(1.0, abs(t[-1]))
    return t >= t[-1] - period - tolerance


def fundamental(t: np.ndarray, y: np.ndarray, omega: float) -> tuple[float, float]:
    """Semi-amplitude and phase (rad) of the fundamental harmonic of y (T,) over the window t (T,) s (one
    period of the angular frequency omega, rad/s): y ~ mean + amp cos(omega t - phase) (trapezoid rule)."""
    span = t[-1] - t[0]
    a = 2.0 / span * np.trapezoid(y * np.cos(omega * t), t)
    b = 2.0 / span * np.trapezoid(y * np.sin(omega * t), t)
    return float(math.hypot(a, b)), float(math.atan2(b, a))


def phase_lag_deg(phase: float, reference: float) -> float:
    """Lag (deg of the cycle, in (-180, 180]) of a harmonic of phase ``phase`` behind one of phase
    ``reference`` (rad); positive when it peaks later."""
    lag = math.degrees(phase - reference) % 360.0
    return lag - 360.0 if lag > 180.0 else lag


#: `mms sim --periodic --trim`: the config keys adjusted for a hover (sim/cli_sim.py: find_periodic): the mean
#: stroke angle moves the mean lift along the body (the thorax's pitch balance), the amplitude scales the lift.
TRIM_KEYS = (("stroke", "offset_deg"), ("stroke", "amplitude_deg"))

#: Harmonics of the stroke frequency kept in the periodic part of a drifting signal.
DRIFT_FIT_HARMONICS = 10


def detrended_semi_amplitude(t: np.ndarray, y: np.ndarray, omega: float) -> float:
    """Half peak-to-peak (same unit as y) of the periodic part of y (T,) over the window t (T,) s: y is fitted
    by least squares as a quadratic drift plus harmonics 1..DRIFT_FIT_HARMONICS of omega (rad/s), and the
    harmonic part alone is measured (the drift of an unbalanced free flight is removed)."""
    if y.size < 3 + 2 * DRIFT_FIT_HARMONICS:
        return 0.0
    x = (t - t.mean()) / (t[-1] - t[0])
    harmonics = [f(h * omega * t) for h in range(1, DRIFT_FIT_HARMONICS + 1) for f in (np.cos, np.sin)]
    basis = np.column_stack([np.ones_like(x), x, x * x, *harmonics])
    coefficients, *_ = np.linalg.lstsq(basis, y, rcond=None)
    periodic = basis[:, 3:] @ coefficients[3:]
    return float(0.5 * (periodic.max() - periodic.min()))


#: the thorax's nose-up pitch: the base's (sim/summary.py)
thorax_pitch = base_pitch


def tip_angles(model: Model, q: np.ndarray, side: str = "r") -> tuple[np.ndarray, np.ndarray]:
    """Tip twist and tip bending (rad), (T,) each: sums of the relative angles along one wing."""
    md = model.metadata
    twist = q[:, md["twist_joints"][side]].sum(axis=1) if md["twist_joints"][side] else np.zeros(q.shape[0])
    bend = q[:, md["bend_joints"][side]].sum(axis=1)
    return twist, bend


def summarize(run) -> dict:
    """`mms sim --summary` hook: figures over the last full stroke period (semi-amplitudes of the fundamental
    harmonic; lags in degrees of the cycle, positive when the strain lags the stroke angle), the base's drift and
    tumbling over the run, and ``warnings`` when the run is no steady hover (:mod:`sim.summary`)."""
    from sim.cli_sim import generic_summary

    model = run.model
    md = model.metadata
    period, omega = md["period_s"], md["stroke_omega_rad_s"]
    if run.t[-1] - run.t[0] < period * (1.0 - 1e-9):
        raise ConfigError(None, "--summary", f"needs at least one full stroke period ({period:g} s); "
                                             f"the run lasted {run.t[-1] - run.t[0]:g} s")
    mask = last_period(run.t, period)
    t = run.t[mask]
    q = run.arrays["q"][mask]
    qd = run.arrays["qd"][mask]
    tau = run.arrays["tau"][mask]
    stroke = md["stroke_joints"][0]
    _, phase_stroke = fundamental(t, q[:, stroke], omega)
    if model.flexible is not None:
        from sim.robots import flapper_modal
        twist, bend = flapper_modal.tip_angles(model, run.arrays["modal_q"][mask])
    else:
        twist, bend = tip_angles(model, q, "r")
    twist_amp, twist_phase = fundamental(t, twist, omega)
    bend_amp, bend_phase = fundamental(t, bend, omega)
    power = tau[:, stroke] * qd[:, stroke]
    pos = run.arrays["base_pos"][mask]
    pitch = thorax_pitch(run.arrays["base_quat"][mask])
    fz = run.arrays["ext_wrench"][mask][:, 2]
    weight = md["weight_N"]
    out = {
        "peak_stroke_torque_Nm": float(np.max(np.abs(tau[:, stroke]))),
        "mean_power_per_wing_W": float(np.trapezoid(power, t) / (t[-1] - t[0])),
        "tip_twist_amplitude_deg": math.degrees(twist_amp),
        "tip_twist_phase_lag_deg": phase_lag_deg(twist_phase, phase_stroke) if twist_amp > 0 else 0.0,
        "tip_bend_amplitude_deg": math.degrees(bend_amp),
        "tip_bend_phase_lag_deg": phase_lag_deg(bend_phase, phase_stroke) if bend_amp > 0 else 0.0,
        "thorax_amplitude_mm": {axis: 1e3 * detrended_semi_amplitude(t, pos[:, a], omega)
                                for a, axis in enumerate("xyz")},
        "thorax_pitch_amplitude_deg": math.degrees(detrended_semi_amplitude(t, pitch, omega)),
        # the same without removing any drift (equal to the above on a periodic orbit, `--periodic`)
        "thorax_excursion_mm": {axis: 1e3 * 0.5 * float(np.ptp(pos[:, a])) for a, axis in enumerate("xyz")},
        "thorax_pitch_excursion_deg": math.degrees(0.5 * float(np.ptp(pitch))),
        "mean_vertical_force_over_weight": (float(np.trapezoid(fz, t) / (t[-1] - t[0])) / weight
                                            if weight > 0 else float("nan")),
    }
    out.update(generic_summary(run))
    # the figures above describe a hover: say how far the thorax drifted and whether it tumbled, and warn when
    # it did (a free flight that falls or turns over is no hover); the drift limit is one wing span
    out.update(base_motion(run.t, run.arrays))
    out["warnings"] = steady_state_warnings(out, "steady hover", md["parameters"]["S"])
    return out


def make_plots(run, out_dir) -> list:
    """`mms sim` hook: the flapper's plots (PNG) in out_dir; returns their paths."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    model = run.model
    md = model.metadata
    t = run.t
    q, qd, tau = run.arrays["q"], run.arrays["qd"], run.arrays["tau"]
    sr, sl = md["stroke_joints"]
    note = "amplitudes: semi-amplitudes (half peak-to-peak) of the fundamental harmonic"
    paths = []

    def save(fig, name):
        fig.tight_layout()
        path = out_dir / name
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    fig, ax = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    ax[0].plot(t, np.degrees(q[:, sr]), label="right")
    ax[0].plot(t, np.degrees(q[:, sl]), "--", label="left")
    ax[0].set_ylabel("stroke angle (deg)")
    ax[0].legend()
    ax[1].plot(t, 1e3 * tau[:, sr], label="right")
    ax[1].plot(t, 1e3 * tau[:, sl], "--", label="left")
    ax[1].set_ylabel("stroke torque (mN m)")
    ax[1].set_xlabel("time (s)")
    fig.suptitle("Stroke actuators (" + note + ")", fontsize=8)
    save(fig, "stroke.png")

    fig, ax = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for k in md["twist_joints"]["r"]:
        ax[0].plot(t, np.degrees(q[:, k]), label=model.joint_names[k])
    for k in md["bend_joints"]["r"]:
        ax[1].plot(t, np.degrees(q[:, k]), label=model.joint_names[k])
    ax[0].set_ylabel("twist strains (deg)")
    ax[1].set_ylabel("bending strains (deg)")
    ax[1].set_xlabel("time (s)")
    for a in ax:
        if a.lines:
            a.legend(fontsize=7, ncol=2)
    fig.suptitle("Right wing strains along the span, root to tip", fontsize=9)
    save(fig, "strains.png")

    fig, ax = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    for side, style in (("r", "-"), ("l", "--")):
        twist, bend = tip_angles(model, q, side)
        ax[0].plot(t, np.degrees(twist), style, label=f"{side} tip twist")
        ax[1].plot(t, np.degrees(bend), style, label=f"{side} tip bending")
    ax[0].set_ylabel("tip twist (deg)")
    ax[1].set_ylabel("tip bending (deg)")
    ax[1].set_xlabel("time (s)")
    for a in ax:
        a.legend(fontsize=7)
    fig.suptitle("Tip angles = sums of the relative angles along each wing (" + note + ")", fontsize=8)
    save(fig, "tip.png")

    fig, ax = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    pos = run.arrays["base_pos"]
    for a, axis in enumerate("xyz"):
        ax[0].plot(t, 1e3 * pos[:, a], label=axis)
    ax[0].set_ylabel("thorax position (mm)")
    ax[0].legend()
    ax[1].plot(t, np.degrees(thorax_pitch(run.arrays["base_quat"])))
    ax[1].set_ylabel("thorax pitch, nose up (deg)")
    ax[1].set_xlabel("time (s)")
    fig.suptitle(f"Thorax ({model.base_mode} base)", fontsize=9)
    save(fig, "thorax.png")

    fig, ax = plt.subplots(2, 1, sharex=True, figsize=(9, 6))
    ext = run.arrays["ext_wrench"]
    for a, axis in enumerate("xyz"):
        ax[0].plot(t, 1e3 * ext[:, a], label=f"F{axis}")
    ax[0].axhline(1e3 * md["weight_N"], color="k", lw=0.8, ls=":", label="weight")
    ax[0].set_ylabel("aerodynamic force, world (mN)")
    ax[0].legend(fontsize=7)
    bw = run.arrays["base_wrench"]
    for a, axis in enumerate("xyz"):
        ax[1].plot(t, 1e3 * bw[:, a], label=f"F{axis}")
    ax[1].set_ylabel("tether force on thorax,\nthorax frame (mN)")
    ax[1].set_xlabel("time (s)")
    ax[1].legend(fontsize=7)
    fig.suptitle("Quasi-steady aerodynamic force (lift + drag) and tether wrench", fontsize=9)
    save(fig, "forces.png")

    fig, ax = plt.subplots(1, 1, figsize=(9, 4))
    ax.plot(t, 1e3 * tau[:, sr] * qd[:, sr], label="right")
    ax.plot(t, 1e3 * tau[:, sl] * qd[:, sl], "--", label="left")
    ax.set_ylabel("actuator power tau r_d (mW)")
    ax.set_xlabel("time (s)")
    ax.legend()
    save(fig, "power.png")
    return paths
