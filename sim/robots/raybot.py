"""Parametric builder of RayBot, the electric-ray-inspired swimming robot, and its ``mms sim`` hooks.

Source: the RayBot paper (Krishnamurthy et al., IEEE CCA 2009, Sections II.C, IV, V), read in
``docs/theory/raybot.md``; parameters and every assumed value in ``configs/robots/raybot.toml``; the choices
are explained in ``docs/raybot.md``. ``build(config, path) -> Model`` (registry kind ``"raybot"``).

Tree (10 bodies, 9 hinges: the paper's "9 bodies and 9 hinge joints" needs one more body to hold the tail-pitch
hinge ahead of the first tail yaw hinge):
    0 disc (root) -- seg_front_l, seg_front_r, seg_rear_l, seg_rear_r (4 rim segments)
                  -- pelvic_l, pelvic_r (2 pelvic fins)
                  -- peduncle (tail_pitch) -- tail_front (tail_yaw) -- tail_caudal (caudal)
Frames: world z up; body frames x forward (head), y left, z up when the joints are at rest.

Tail actuation (the rack-and-pinion shear mechanism, Section IV): the servo angle ``theta`` moves the rack by
``s = r_pinion theta``; the rack shears one fin-ray plate past the other, and two plates a gap ``d`` apart joined at
the distal end bend into an arc of total angle ``phi = s / d``. The fin-ray spans ``tail_front``: its bend is
imposed (actuated joint ``tail_yaw`` with ``q = phi / 2``, the chord of the arc), the soft caudal fin beyond the
joined end is passive (``caudal``: spring-damper about the fin-ray's end tangent, rest ``phi / 2``).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.config import ConfigError, array, number, one_of, require, string, table
from sim.fused import TrackingSpring
from sim.hydro import HydroBody, build_hydro_models, plate_added_inertia_diagonal
from sim.lighthill import slices_model
from sim.laws import Constant, ExternalMotion, JointLaw, MotionLaw, RampedSinusoid, ScaledMotion, ViscoElastic
from sim.model import Model, ModelBuilder
from sim.robots.schema import (MAX_GRAVITY_M_S2, SIMULATION, damping, degrees, density, frequency_hz, length, mass,
                               position, robot_table, stiffness)
from sim.spatial import spatial_inertia
from sim.summary import base_motion, steady_state_warnings
from sim.swimming import steady_window, swim_figures as swimmer_figures, tail_tip_positions

BASE_MODES = {"floating": "floating", "free": "floating", "fixed": "fixed", "tethered": "fixed"}
DRIVES = ("held", "passive")
SOURCES = ("sinusoid", "external")
#: The tail's fluid model: Lighthill's elongated-body theory (sim/lighthill.py) or the paper's quasi-steady
#: added mass and lift per plate (sim/hydro.py).
HYDRO_MODELS = ("lighthill", "quasi_steady")
#: Chord fraction of the centre of pressure behind the leading edge (spec: "about 25% chord").
CENTRE_OF_PRESSURE_CHORD_FRACTION = 0.25
#: Skin-friction coefficient of the thin appendages along their chord (ASSUMED, turbulent-ish flat plate).
APPENDAGE_SKIN_FRICTION = 0.01
#: Form-drag coefficient of an appendage's leading-edge cross-section (ASSUMED, rounded edge).
APPENDAGE_EDGE_DRAG = 0.5
#: Flat-plate normal drag coefficient used in strip-theory rotational drag (ASSUMED).
PLATE_NORMAL_DRAG = 1.2
#: Small linear drag per axis on appendages, N s/m and N m s/rad (ASSUMED; keeps still water well-posed).
APPENDAGE_LINEAR_DRAG = 0.01
APPENDAGE_LINEAR_ROT_DRAG = 1e-4
_Y_TO_Z = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])  # columns: x, z, -y (lateral plates)


def _positive(v) -> bool:
    return v > 0.0


def _non_negative(v) -> bool:
    return v >= 0.0


#: Largest hydrodynamic force coefficient (drag, normal, chordwise): bluff bodies stay near 2; 10 is a slip.
MAX_FORCE_COEFFICIENT = 10.0
#: Fastest servo, deg/s: ten times the fastest hobby servos (~700 deg/s).
MAX_SERVO_SPEED_DEG_S = 7200.0
#: Longest soft start, tail beats.
MAX_RAMP_CYCLES = 1000.0
#: Largest net buoyancy, as a fraction of the weight (a body ten times lighter than water).
MAX_NET_BUOYANCY_FRACTION = 10.0


# ----------------------------------------------------------------------------------------- schema
def config_schema(config: dict, path) -> dict:
    """The JSON Schema of a RayBot robot file (configs/robots/raybot.toml; sim/robots/schema.py)."""
    coefficient = number(0.0, MAX_FORCE_COEFFICIENT, expected=f"a coefficient in [0, {MAX_FORCE_COEFFICIENT:g}]")
    signed = number(-MAX_FORCE_COEFFICIENT, MAX_FORCE_COEFFICIENT,
                    expected=f"a coefficient in [-{MAX_FORCE_COEFFICIENT:g}, {MAX_FORCE_COEFFICIENT:g}]")
    stall = number(above=0.0, maximum=90.0, expected="a stall angle in (0, 90] deg")
    lift = {"cn0": coefficient, "ct0": signed, "stall_deg": stall}
    drive = {"drive": one_of(*DRIVES), "rest_deg": degrees(), "stiffness_N_m_rad": stiffness(),
             "damping_N_m_s_rad": damping()}

    def sized(keys, other, required_other=()):
        props = {key: (mass() if key.endswith("mass_kg") else length()) for key in keys}
        return table({**props, **other}, [*keys, *required_other])

    return table({
        "robot": robot_table("raybot", {"base": one_of(*BASE_MODES)}),
        "water": table({"density_kg_m3": density(),
                        "gravity_m_s2": number(0.0, MAX_GRAVITY_M_S2,
                                               expected=f"a gravity in [0, {MAX_GRAVITY_M_S2:g}] m/s^2"),
                        "surface_z_m": position(), "initial_depth_m": position()},
                       ["density_kg_m3", "gravity_m_s2", "surface_z_m", "initial_depth_m"]),
        "simulation": SIMULATION | {"required": ["dt"]},
        "disc": sized(("length_m", "width_m", "height_m", "central_length_m", "central_width_m", "mass_kg"), {
            "centre_of_mass_z_m": position(),
            "net_buoyancy_fraction": number(above=-1.0, maximum=MAX_NET_BUOYANCY_FRACTION,
                                            expected=f"a fraction in (-1, {MAX_NET_BUOYANCY_FRACTION:g}]"),
            "drag_cd_forward": coefficient, "drag_cd_side": coefficient, "drag_cd_rotation": coefficient,
            "drag_linear_N_s_m": damping(), "drag_linear_rot_N_m_s": damping(), **lift}, [
            "centre_of_mass_z_m", "net_buoyancy_fraction", "drag_cd_forward", "drag_cd_side", "drag_cd_rotation",
            "drag_linear_N_s_m", "drag_linear_rot_N_m_s", *lift]),
        "segments": sized(("mass_kg",), {
            "azimuths_deg": array(degrees(), 4, 4, expected="4 angles in [-360, 360] deg"),
            "names": array(string(), 4, 4, expected="4 distinct names") | {"uniqueItems": True}, **lift, **drive},
            ["azimuths_deg", "names", *lift]),
        "pelvic_fins": sized(("span_m", "chord_m", "thickness_m", "mass_kg", "hinge_y_m"),
                             {"hinge_x_m": position(), **lift, **drive}, ["hinge_x_m", *lift]),
        "tail": sized(("peduncle_length_m", "peduncle_mass_kg", "front_length_m", "front_height_m",
                       "front_thickness_m", "front_mass_kg", "caudal_length_m", "caudal_height_m",
                       "caudal_thickness_m", "caudal_mass_kg"),
                      {"root_x_m": position(), "pitch_deg": degrees(), "hydro_model": one_of(*HYDRO_MODELS), **lift},
                      ["root_x_m", "pitch_deg", *lift]),
        "tail_drive": sized(("pinion_radius_m", "plate_gap_m"), {
            "servo_limit_deg": number(above=0.0, maximum=180.0, expected="a travel in (0, 180] deg"),
            "servo_speed_deg_s": number(above=0.0, maximum=MAX_SERVO_SPEED_DEG_S,
                                        expected=f"a speed in (0, {MAX_SERVO_SPEED_DEG_S:g}] deg/s"),
            "caudal_stiffness_N_m_rad": stiffness(), "caudal_damping_N_m_s_rad": damping(),
            "frequency_Hz": frequency_hz(0.0), "servo_amplitude_deg": degrees(0.0, 180.0),
            "phase_deg": degrees(), "ramp_cycles": number(0.0, MAX_RAMP_CYCLES), "source": one_of(*SOURCES)}, [
            "servo_limit_deg", "servo_speed_deg_s", "caudal_stiffness_N_m_rad", "caudal_damping_N_m_s_rad",
            "frequency_Hz", "servo_amplitude_deg"]),
    }, ["robot", "water", "simulation", "disc", "segments", "pelvic_fins", "tail", "tail_drive"])


# ----------------------------------------------------------------------------------------- parameters
def read_parameters(config: dict, path=None) -> dict:
    """Check the RayBot table and return a flat dict of SI parameters (angles in rad)."""
    def section(name):
        value = require(config, name, dict, path=path)
        return value

    def num(tab, prefix, key, check=None, expected=None, default=None):
        kwargs = {} if default is None else {"default": default}
        return require(tab, key, float, path=path, prefix=prefix, check=check, expected=expected, **kwargs)

    pos = dict(check=_positive, expected="a positive number")
    nonneg = dict(check=_non_negative, expected="a number >= 0")
    p: dict = {}
    robot = section("robot")
    base = require(robot, "base", str, path=path, prefix="robot", default="floating",
                   check=lambda v: v in BASE_MODES, expected=f"one of {sorted(BASE_MODES)}")
    p["base_mode"] = BASE_MODES[base]
    p["name"] = require(robot, "name", str, path=path, prefix="robot", default="RayBot")

    w = section("water")
    p["rho"] = num(w, "water", "density_kg_m3", **pos)
    p["g"] = num(w, "water", "gravity_m_s2", **nonneg)
    p["surface_z"] = num(w, "water", "surface_z_m")
    p["initial_depth"] = num(w, "water", "initial_depth_m")

    s = section("simulation")
    p["integrator"] = require(s, "integrator", str, path=path, prefix="simulation", default="rk4",
                              check=lambda v: v in ("rk4", "rk45"), expected='"rk4" or "rk45"')
    p["dt"] = num(s, "simulation", "dt", **pos)

    d = section("disc")
    for key in ("length_m", "width_m", "height_m", "central_length_m", "central_width_m", "mass_kg"):
        p["disc_" + key] = num(d, "disc", key, **pos)
    p["disc_com_z"] = num(d, "disc", "centre_of_mass_z_m")
    p["net_buoyancy_fraction"] = num(d, "disc", "net_buoyancy_fraction", check=lambda v: v > -1.0,
                                     expected="a number > -1")
    for key in ("drag_cd_forward", "drag_cd_side", "drag_cd_rotation", "drag_linear_N_s_m",
                "drag_linear_rot_N_m_s", "cn0", "ct0"):
        p["disc_" + key] = num(d, "disc", key, **nonneg) if key != "ct0" else num(d, "disc", key)
    p["disc_stall"] = math.radians(num(d, "disc", "stall_deg", **pos))
    if p["disc_central_length_m"] >= p["disc_length_m"] or p["disc_central_width_m"] >= p["disc_width_m"]:
        raise ConfigError(path, "disc.central_length_m", "the central part must be smaller than the disc")

    seg = section("segments")
    az = require(seg, "azimuths_deg", list, path=path, prefix="segments",
                 check=lambda v: len(v) == 4 and all(isinstance(a, (int, float)) for a in v),
                 expected="a list of 4 angles in deg")
    names = require(seg, "names", list, path=path, prefix="segments",
                    check=lambda v: len(v) == 4 and all(isinstance(a, str) for a in v) and len(set(v)) == 4,
                    expected="a list of 4 distinct names")
    p["seg_azimuths"] = [math.radians(a) for a in az]
    p["seg_names"] = list(names)
    p.update(_appendage_drive(seg, "segments", path, "seg_"))
    p["seg_mass"] = num(seg, "segments", "mass_kg", **pos)
    p["seg_cn0"] = num(seg, "segments", "cn0", **nonneg)
    p["seg_ct0"] = num(seg, "segments", "ct0")
    p["seg_stall"] = math.radians(num(seg, "segments", "stall_deg", **pos))

    pf = section("pelvic_fins")
    for key in ("span_m", "chord_m", "thickness_m", "mass_kg"):
        p["pelvic_" + key] = num(pf, "pelvic_fins", key, **pos)
    p["pelvic_hinge_x"] = num(pf, "pelvic_fins", "hinge_x_m")
    p["pelvic_hinge_y"] = num(pf, "pelvic_fins", "hinge_y_m", **pos)
    p["pelvic_cn0"] = num(pf, "pelvic_fins", "cn0", **nonneg)
    p["pelvic_ct0"] = num(pf, "pelvic_fins", "ct0")
    p["pelvic_stall"] = math.radians(num(pf, "pelvic_fins", "stall_deg", **pos))
    p.update(_appendage_drive(pf, "pelvic_fins", path, "pelvic_"))

    t = section("tail")
    p["tail_root_x"] = num(t, "tail", "root_x_m")
    for key in ("peduncle_length_m", "peduncle_mass_kg", "front_length_m", "front_height_m",
                "front_thickness_m", "front_mass_kg", "caudal_length_m", "caudal_height_m",
                "caudal_thickness_m", "caudal_mass_kg"):
        p["tail_" + key] = num(t, "tail", key, **pos)
    p["tail_pitch"] = math.radians(num(t, "tail", "pitch_deg"))
    p["tail_cn0"] = num(t, "tail", "cn0", **nonneg)
    p["tail_ct0"] = num(t, "tail", "ct0")
    p["tail_stall"] = math.radians(num(t, "tail", "stall_deg", **pos))
    p["tail_hydro_model"] = t.get("hydro_model", "lighthill")

    td = section("tail_drive")
    for key in ("pinion_radius_m", "plate_gap_m", "servo_limit_deg", "servo_speed_deg_s"):
        p["drive_" + key] = num(td, "tail_drive", key, **pos)
    p["drive_caudal_k"] = num(td, "tail_drive", "caudal_stiffness_N_m_rad", **nonneg)
    p["drive_caudal_mu"] = num(td, "tail_drive", "caudal_damping_N_m_s_rad", **nonneg)
    p["frequency"] = num(td, "tail_drive", "frequency_Hz", **nonneg)
    p["servo_amplitude"] = math.radians(num(td, "tail_drive", "servo_amplitude_deg", **nonneg))
    p["phase"] = math.radians(num(td, "tail_drive", "phase_deg", default=0.0))
    p["ramp_cycles"] = num(td, "tail_drive", "ramp_cycles", default=0.0, **nonneg)
    p["source"] = require(td, "source", str, path=path, prefix="tail_drive", default="sinusoid",
                          check=lambda v: v in SOURCES, expected=f"one of {SOURCES}")
    if p["servo_amplitude"] > math.radians(p["drive_servo_limit_deg"]):
        raise ConfigError(path, "tail_drive.servo_amplitude_deg",
                          f"got {math.degrees(p['servo_amplitude']):g}, expected at most the servo travel "
                          f"tail_drive.servo_limit_deg = {p['drive_servo_limit_deg']:g}")
    p["config_path"] = None if path is None else str(path)
    return p


def _appendage_drive(tab: dict, prefix: str, path, key_prefix: str) -> dict:
    out = {}
    out[key_prefix + "drive"] = require(tab, "drive", str, path=path, prefix=prefix, default="held",
                                        check=lambda v: v in DRIVES, expected=f"one of {DRIVES}")
    out[key_prefix + "rest"] = math.radians(require(tab, "rest_deg", float, path=path, prefix=prefix, default=0.0))
    out[key_prefix + "k"] = require(tab, "stiffness_N_m_rad", float, path=path, prefix=prefix, default=0.0,
                                    check=_non_negative, expected="a number >= 0")
    out[key_prefix + "mu"] = require(tab, "damping_N_m_s_rad", float, path=path, prefix=prefix, default=0.0,
                                     check=_non_negative, expected="a number >= 0")
    return out


# ----------------------------------------------------------------------------------------- tail mechanism
def fin_ray_bend_for_servo(p: dict, servo_angle: float) -> float:
    """Total bend phi (rad) of the fin-ray for a servo angle (rad): rack travel ``s = r_pinion theta``, and two
    plates a gap d apart joined at their ends bend into an arc of angle ``phi = s / d`` (equal arc lengths
    ``L`` and ``L + d phi`` would otherwise differ by the shear s)."""
    return p["drive_pinion_radius_m"] * servo_angle / p["drive_plate_gap_m"]


def tail_joint_ratio(p: dict) -> float:
    """d q_tail_yaw / d theta_servo (rad/rad): the chord of a constant-curvature arc of bend phi turns by phi/2,
    so ``q = fin_ray_bend_for_servo(theta) / 2``."""
    return 0.5 * fin_ray_bend_for_servo(p, 1.0)


class ServoBeat(RampedSinusoid):
    """Servo angle of the tail beat (rad): ``theta(t) = Theta ramp(t) sin(omega t + phase)``
    (:class:`sim.laws.RampedSinusoid`, whose ``evaluate`` it uses).

    ``Theta`` is the commanded amplitude limited by the servo's travel and by its slew rate (the largest
    sinusoid a servo of speed ``speed`` rad/s follows at omega is ``speed / omega``); ``ramp`` rises from 0 to 1
    over ``ramp_time`` s as ``(1 - cos(pi t / ramp_time)) / 2`` (soft start, no velocity jump)."""

    def __init__(self, amplitude: float, frequency: float, phase: float = 0.0, ramp_time: float = 0.0,
                 speed_limit: float = math.inf, travel_limit: float = math.inf):
        omega = 2.0 * math.pi * float(frequency)
        limit = min(float(travel_limit), float(speed_limit) / omega if omega > 0.0 else math.inf)
        self.commanded_amplitude = float(amplitude)
        super().__init__(min(float(amplitude), limit) if omega > 0.0 else 0.0, omega, phase, ramp_time)

    def fused_form(self) -> RampedSinusoid:
        """The same law as a kernel-form :class:`RampedSinusoid` (the fused path, sim/fused.py)."""
        return RampedSinusoid(self.amplitude, self.omega, self.phase, self.ramp_time)


class CaudalSpring(TrackingSpring):
    """Passive caudal fin: spring-damper about the fin-ray's end tangent, which turns by ``ratio * theta``
    relative to the fin-ray's chord: ``tau = -k (r - ratio theta) - mu (r_d - ratio theta_d)`` (N m), theta
    (rad) from the servo law ``source``; k N m/rad, mu N m s/rad, ratio rad/rad. The torque is
    :class:`sim.fused.TrackingSpring`'s (same code), which the fused kernel evaluates."""

    def fused_form(self) -> TrackingSpring:
        """The same law as a plain :class:`TrackingSpring` (the kernel's joint-law form, sim/fused.py)."""
        return TrackingSpring(self.source, self.ratio, self.k, self.mu)


# ----------------------------------------------------------------------------------------- geometry
def _ellipse_radius(a: float, b: float, azimuth: float) -> float:
    """Distance (m) from the centre to an ellipse of semi-axes a (x), b (y) in the direction ``azimuth``."""
    return 1.0 / math.sqrt((math.cos(azimuth) / a) ** 2 + (math.sin(azimuth) / b) ** 2)


def _plate_inertia(mass: float, length: float, width: float, thickness: float) -> np.ndarray:
    """Rotational inertia (3, 3) kg m^2 of a uniform box length (x) x width (y) x thickness (z) at its centre."""
    return mass / 12.0 * np.diag([width ** 2 + thickness ** 2, length ** 2 + thickness ** 2,
                                  length ** 2 + width ** 2])


def _pose(R, p) -> np.ndarray:
    out = np.eye(4)
    out[:3, :3] = R
    out[:3, 3] = p
    return out


def _rot_z(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot_x(angle: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def _appendage_laws(p: dict, prefix: str):
    """(actuated, motion law, joint law) of a rim segment or pelvic fin from its drive."""
    if p[prefix + "drive"] == "held":
        return True, Constant(p[prefix + "rest"]), None
    return False, None, ViscoElastic(p[prefix + "k"], p[prefix + "mu"], p[prefix + "rest"])


@dataclass
class _Body:
    name: str
    parent: str
    joint: str
    axis: tuple
    placement: np.ndarray
    inertia: np.ndarray
    hydro: HydroBody
    actuated: bool = False
    motion_law: MotionLaw | None = None
    joint_law: JointLaw | None = None
    q_rest: float = 0.0
    extra: dict = field(default_factory=dict)


def _thin_body_hydro(rho, *, length, width, thickness, rotation, centre, chord, normal, cp, area, cn0, ct0,
                     stall, volume, height) -> HydroBody:
    """Hydro description of a thin plate: added mass from its projected areas, skin friction along its
    chord and edge drag (ASSUMED coefficients above), strip-theory rotational drag, lift at the CP.
    rotation (3, 3): plate axes (length, width, thickness) in the body frame; centre (3,) its centroid, m."""
    diag = plate_added_inertia_diagonal(rho, length, width, thickness)
    quad = np.zeros(6)
    quad[0] = 0.5 * rho * (APPENDAGE_SKIN_FRICTION * 2.0 * length * width + APPENDAGE_EDGE_DRAG * width * thickness)
    quad[1] = 0.5 * rho * (APPENDAGE_SKIN_FRICTION * 2.0 * length * width + APPENDAGE_EDGE_DRAG * length * thickness)
    # strip theory, rotation about an in-plane axis through the centre: 0.25 rho Cd w l^4 (l the semi-extent)
    quad[3] = 0.25 * rho * PLATE_NORMAL_DRAG * length * (0.5 * width) ** 4
    quad[4] = 0.25 * rho * PLATE_NORMAL_DRAG * width * (0.5 * length) ** 4
    lin = np.array([APPENDAGE_LINEAR_DRAG] * 3 + [APPENDAGE_LINEAR_ROT_DRAG] * 3)
    return HydroBody(body=-1, volume=volume, centre_of_buoyancy=np.asarray(centre, float), height=height,
                     frame_rotation=np.asarray(rotation, float), frame_centre=np.asarray(centre, float),
                     added_mass_diagonal=diag, drag_linear=lin, drag_quadratic=quad,
                     surface=dict(chord=np.asarray(chord, float), normal=np.asarray(normal, float),
                                  cp=np.asarray(cp, float), area=area, cn0=cn0, ct0=ct0, delta_stall=stall))


def _bodies(p: dict, servo: MotionLaw) -> tuple[HydroBody, np.ndarray, list[_Body]]:
    """The disc's hydro and inertia, and the 9 hinged bodies (parents first)."""
    rho = p["rho"]
    total_mass = (p["disc_mass_kg"] + 4 * p["seg_mass"] + 2 * p["pelvic_mass_kg"] + p["tail_peduncle_mass_kg"]
                  + p["tail_front_mass_kg"] + p["tail_caudal_mass_kg"])
    a_out, b_out = 0.5 * p["disc_length_m"], 0.5 * p["disc_width_m"]
    a_in, b_in = 0.5 * p["disc_central_length_m"], 0.5 * p["disc_central_width_m"]
    h = p["disc_height_m"]
    bodies: list[_Body] = []
    appendage_volume = 0.0

    # -- rim segments: hinge on the inner ellipse, plate out to the outer one (ASSUMED radial plates)
    quarter_area = math.pi * (a_out * b_out - a_in * b_in) / 4.0
    seg_thickness = 0.5 * h   # ASSUMED: the rim is about half the disc's height (tapered edge)
    seg_actuated, seg_motion, seg_joint = _appendage_laws(p, "seg_")
    for name, az in zip(p["seg_names"], p["seg_azimuths"]):
        r_in, r_out = _ellipse_radius(a_in, b_in, az), _ellipse_radius(a_out, b_out, az)
        length = r_out - r_in
        width = quarter_area / length
        R = _rot_z(az)                                   # x radial outwards, y tangent (hinge axis), z up
        placement = _pose(R, [r_in * math.cos(az), r_in * math.sin(az), 0.0])
        centre = np.array([0.5 * length, 0.0, 0.0])
        chord = R.T @ np.array([1.0, 0.0, 0.0])          # the disc's forward axis in the segment frame
        chord_extent = length * abs(math.cos(az)) + width * abs(math.sin(az))
        cp = centre + (0.5 - CENTRE_OF_PRESSURE_CHORD_FRACTION) * chord_extent * chord
        volume = p["seg_mass"] / rho                     # ASSUMED neutrally buoyant appendage
        appendage_volume += volume
        hydro = _thin_body_hydro(rho, length=length, width=width, thickness=seg_thickness, rotation=np.eye(3),
                                 centre=centre, chord=chord, normal=[0, 0, 1], cp=cp, area=length * width,
                                 cn0=p["seg_cn0"], ct0=p["seg_ct0"], stall=p["seg_stall"], volume=volume,
                                 height=seg_thickness)
        inertia = spatial_inertia(p["seg_mass"], centre, _plate_inertia(p["seg_mass"], length, width, seg_thickness))
        bodies.append(_Body(name, "disc", name, (0.0, 1.0, 0.0), placement, inertia, hydro, seg_actuated,
                            seg_motion, seg_joint, p["seg_rest"]))

    # -- pelvic fins: hinge along the body axis at (x, +-y); the right fin is the left one turned by pi about x
    span, chord_len, thick = p["pelvic_span_m"], p["pelvic_chord_m"], p["pelvic_thickness_m"]
    pel_actuated, pel_motion, pel_joint = _appendage_laws(p, "pelvic_")
    for side, sign in (("l", 1.0), ("r", -1.0)):
        R = np.eye(3) if sign > 0 else _rot_x(math.pi)   # y outwards; z up (left) / down (right)
        placement = _pose(R, [p["pelvic_hinge_x"], sign * p["pelvic_hinge_y"], 0.0])
        centre = np.array([0.0, 0.5 * span, 0.0])
        cp = np.array([(0.5 - CENTRE_OF_PRESSURE_CHORD_FRACTION) * chord_len, 0.5 * span, 0.0])
        volume = p["pelvic_mass_kg"] / rho               # ASSUMED neutrally buoyant appendage
        appendage_volume += volume
        hydro = _thin_body_hydro(rho, length=chord_len, width=span, thickness=thick, rotation=np.eye(3),
                                 centre=centre, chord=[1, 0, 0], normal=[0, 0, 1], cp=cp,
                                 area=math.pi / 4.0 * chord_len * span,   # ASSUMED elliptic planform
                                 cn0=p["pelvic_cn0"], ct0=p["pelvic_ct0"], stall=p["pelvic_stall"],
                                 volume=volume, height=thick)
        inertia = spatial_inertia(p["pelvic_mass_kg"], centre,
                                  _plate_inertia(p["pelvic_mass_kg"], chord_len, span, thick))
        bodies.append(_Body(f"pelvic_{side}", "disc", f"pelvic_{side}", (1.0, 0.0, 0.0), placement, inertia, hydro,
                            pel_actuated, pel_motion, pel_joint, p["pelvic_rest"]))

    # -- tail: peduncle (pitch hinge), fin-ray tail_front (actuated yaw), caudal fin (passive yaw)
    lp, mp = p["tail_peduncle_length_m"], p["tail_peduncle_mass_kg"]
    appendage_volume += mp / rho
    ped_hydro = HydroBody(body=-1, volume=mp / rho, centre_of_buoyancy=np.array([-0.5 * lp, 0.0, 0.0]),
                          height=p["tail_front_height_m"])
    bodies.append(_Body("peduncle", "disc", "tail_pitch", (0.0, 1.0, 0.0), _pose(np.eye(3), [p["tail_root_x"], 0, 0]),
                        spatial_inertia(mp, [-0.5 * lp, 0, 0], _plate_inertia(mp, lp, p["tail_front_thickness_m"],
                                                                              p["tail_front_height_m"])),
                        ped_hydro, True, Constant(p["tail_pitch"]), None, p["tail_pitch"]))
    ratio = tail_joint_ratio(p)
    for name, joint, key, parent_len, actuated, motion, law in (
            ("tail_front", "tail_yaw", "front", lp, True, ScaledMotion(servo, ratio), None),
            ("tail_caudal", "caudal", "caudal", p["tail_front_length_m"], False, None,
             CaudalSpring(servo, ratio, p["drive_caudal_k"], p["drive_caudal_mu"]))):
        length, height, thick = (p[f"tail_{key}_length_m"], p[f"tail_{key}_height_m"], p[f"tail_{key}_thickness_m"])
        mass = p[f"tail_{key}_mass_kg"]
        centre = np.array([-0.5 * length, 0.0, 0.0])
        cp = np.array([-CENTRE_OF_PRESSURE_CHORD_FRACTION * length, 0.0, 0.0])
        area = length * height if key == "front" else math.pi / 4.0 * length * height  # ASSUMED planforms
        volume = mass / rho                              # ASSUMED neutrally buoyant appendage
        appendage_volume += volume
        hydro = _thin_body_hydro(rho, length=length, width=height, thickness=thick, rotation=_Y_TO_Z,
                                 centre=centre, chord=[1, 0, 0], normal=[0, 1, 0], cp=cp, area=area,
                                 cn0=p["tail_cn0"], ct0=p["tail_ct0"], stall=p["tail_stall"], volume=volume,
                                 height=height)
        if p["tail_hydro_model"] == "lighthill":      # the reactive forces replace added mass and lift here
            hydro.added_mass_diagonal = np.zeros(6)
            hydro.surface = None
        inertia = spatial_inertia(mass, centre, _plate_inertia(mass, length, thick, height))
        parent = "peduncle" if key == "front" else "tail_front"
        bodies.append(_Body(name, parent, joint, (0.0, 0.0, 1.0), _pose(np.eye(3), [-parent_len, 0.0, 0.0]),
                            inertia, hydro, actuated, motion, law, 0.0))

    # -- the disc: the rest of the volume makes the whole robot net_buoyancy_fraction buoyant
    disc_volume = (1.0 + p["net_buoyancy_fraction"]) * total_mass / rho - appendage_volume
    if disc_volume <= 0.0:
        raise ConfigError(p["config_path"], "disc.net_buoyancy_fraction", "leaves the disc no displaced volume")
    m = p["disc_mass_kg"]
    disc_inertia = spatial_inertia(m, [0.0, 0.0, p["disc_com_z"]],
                                   m * np.diag([b_out ** 2 / 4 + h ** 2 / 12, a_out ** 2 / 4 + h ** 2 / 12,
                                                (a_out ** 2 + b_out ** 2) / 4]))  # ASSUMED uniform elliptic slab
    quad = np.zeros(6)
    quad[0] = 0.5 * rho * p["disc_drag_cd_forward"] * (math.pi / 4.0) * p["disc_width_m"] * h
    quad[1] = 0.5 * rho * p["disc_drag_cd_side"] * (math.pi / 4.0) * p["disc_length_m"] * h
    quad[3] = 0.25 * rho * p["disc_drag_cd_rotation"] * p["disc_central_length_m"] * b_in ** 4
    quad[4] = 0.25 * rho * p["disc_drag_cd_rotation"] * p["disc_central_width_m"] * a_in ** 4
    quad[5] = 0.25 * rho * PLATE_NORMAL_DRAG * h * a_out ** 4
    lin = np.array([p["disc_drag_linear_N_s_m"]] * 3 + [p["disc_drag_linear_rot_N_m_s"]] * 3)
    disc_hydro = HydroBody(
        body=0, volume=disc_volume, centre_of_buoyancy=np.zeros(3), height=h,
        frame_rotation=np.eye(3), frame_centre=np.zeros(3),
        added_mass_diagonal=plate_added_inertia_diagonal(rho, 2 * a_in, 2 * b_in, h),
        drag_linear=lin, drag_quadratic=quad,
        surface=dict(chord=np.array([1.0, 0, 0]), normal=np.array([0, 0, 1.0]),
                     cp=np.array([(0.5 - CENTRE_OF_PRESSURE_CHORD_FRACTION) * 2 * a_in, 0.0, 0.0]),
                     area=math.pi * a_in * b_in, cn0=p["disc_cn0"], ct0=p["disc_ct0"], delta_stall=p["disc_stall"]))
    return disc_hydro, disc_inertia, bodies


def tail_half_axes(p: dict):
    """(a(X), b(X)) m, the lateral and dorsal semi-axes of the tail's elliptic sections at arc length X from the
    tail root: the fin-ray's (thickness / 2, height / 2) over the peduncle and tail_front, then over the caudal fin
    a linear taper to the caudal fin's values at the trailing edge (b = 0.075 m, the MEASURED 15 cm height)."""
    a_front, b_front = 0.5 * p["tail_front_thickness_m"], 0.5 * p["tail_front_height_m"]
    a_tip, b_tip = 0.5 * p["tail_caudal_thickness_m"], 0.5 * p["tail_caudal_height_m"]
    caudal_start = p["tail_peduncle_length_m"] + p["tail_front_length_m"]

    def axes(X: float) -> tuple[float, float]:
        if X <= caudal_start:
            return a_front, b_front
        u = (X - caudal_start) / p["tail_caudal_length_m"]
        return a_front + u * (a_tip - a_front), b_front + u * (b_tip - b_front)
    return axes


def tail_lighthill_model(p: dict, bodies: list[int]):
    """Lighthill's elongated-body model (sim/lighthill.py) of the tail: peduncle, tail_front and tail_caudal
    (body indices ``bodies``, in that order) as three rigid slices of one elongated body along -x of the disc,
    trailing edge at the caudal fin's end. No drag here: the tail's skin friction and edge drag stay in
    :class:`sim.hydro.Drag` (C_f = C_D = 0 in the plug-in, so nothing is counted twice)."""
    lengths = (p["tail_peduncle_length_m"], p["tail_front_length_m"], p["tail_caudal_length_m"])
    starts = np.concatenate([[0.0], np.cumsum(lengths)])
    return slices_model(p["rho"], [(j, starts[i], starts[i + 1]) for i, j in enumerate(bodies)], tail_half_axes(p),
                        skin_friction=0.0, cross_drag=0.0, config_path=p["config_path"], key="tail")


# ----------------------------------------------------------------------------------------- build
def build(config: dict, path=None) -> Model:
    """RayBot Model from its TOML table (configs/robots/raybot.toml): 10 bodies, 9 hinges, hydrodynamics."""
    p = read_parameters(config, path)
    if p["source"] == "external":
        servo: MotionLaw = ExternalMotion()
    else:
        servo = ServoBeat(p["servo_amplitude"], p["frequency"], p["phase"],
                          ramp_time=p["ramp_cycles"] / p["frequency"] if p["frequency"] > 0 else 0.0,
                          speed_limit=math.radians(p["drive_servo_speed_deg_s"]),
                          travel_limit=math.radians(p["drive_servo_limit_deg"]))
    disc_hydro, disc_inertia, bodies = _bodies(p, servo)
    base_pose = np.eye(4)
    base_pose[2, 3] = p["surface_z"] - p["initial_depth"]
    gravity = (0.0, 0.0, -p["g"])
    builder = ModelBuilder("disc", disc_inertia, base_mode=p["base_mode"], gravity=gravity, base_pose=base_pose)
    hydro = [disc_hydro]
    for b in bodies:
        j = builder.add_body(b.name, b.parent, joint_name=b.joint, joint_type="revolute", axis=b.axis,
                             placement=b.placement, inertia=b.inertia, actuated=b.actuated, q_rest=b.q_rest,
                             motion_law=b.motion_law, joint_law=b.joint_law)
        b.hydro.body = j
        hydro.append(b.hydro)
    for force_model in build_hydro_models(hydro, p["rho"], gravity, p["surface_z"]):
        builder.add_force_model(force_model)
    if p["tail_hydro_model"] == "lighthill":
        builder.add_force_model(tail_lighthill_model(p, [b.hydro.body for b in bodies
                                                         if b.name in ("peduncle", "tail_front", "tail_caudal")]))
    tip = np.eye(4)
    tip[0, 3] = -p["tail_caudal_length_m"]
    metadata = {
        "name": p["name"], "kind": "raybot", "config_path": p["config_path"], "parameters": p,
        "servo_law": servo, "tail_joint_ratio": tail_joint_ratio(p),
        "period_s": 1.0 / p["frequency"] if p["frequency"] > 0.0 and p["source"] == "sinusoid" else None,
        "frames": "world z up; body x forward (head), y left, z up at rest; free surface z = surface_z_m",
        "tail_tip": ("tail_caudal", tip),
        "body_length_m": 0.5 * p["disc_length_m"] - p["tail_root_x"] + p["tail_peduncle_length_m"]
        + p["tail_front_length_m"] + p["tail_caudal_length_m"],
    }
    model = builder.build(metadata)
    return model


def servo_input(model: Model) -> ExternalMotion:
    """The servo-angle input of a model built with ``tail_drive.source = "external"``: call
    ``.set(angle_rad, rate_rad_s, acceleration_rad_s2)`` before each step (rig / emulator)."""
    servo = model.metadata.get("servo_law")
    if not isinstance(servo, ExternalMotion):
        raise ValueError('this RayBot model is not driven from outside (set tail_drive.source = "external")')
    return servo


def servo_torque(model: Model, tau: np.ndarray) -> float:
    """Torque (N m) the servo delivers, by virtual work through the mechanism, from the joint torques ``tau``
    (n,) (actuated computed, passive applied): the servo drives ``q_tail_yaw = ratio theta`` and the caudal
    spring's anchor ``ratio theta``, so ``tau_servo = ratio (tau_tail_yaw + tau_caudal)``."""
    ratio = model.metadata["tail_joint_ratio"]
    return ratio * float(tau[model.joint_index("tail_yaw")] + tau[model.joint_index("caudal")])


# ----------------------------------------------------------------------------------------- mms sim hooks
def apply_cli_overrides(config: dict, args) -> dict:
    """``mms sim`` options: ``--tailbeat-frequency`` (Hz) and ``--tailbeat-amplitude`` (servo amplitude, deg)
    overwrite ``tail_drive.frequency_Hz`` and ``tail_drive.servo_amplitude_deg``; the sinusoidal source is
    selected (an externally driven config has no beat of its own)."""
    drive = config.setdefault("tail_drive", {})
    if not isinstance(drive, dict):
        raise ConfigError(None, "tail_drive", "expected a table")
    frequency = getattr(args, "tailbeat_frequency", None)
    amplitude = getattr(args, "tailbeat_amplitude", None)
    if frequency is not None:
        if not (math.isfinite(frequency) and frequency >= 0.0):
            raise ConfigError(None, "--tailbeat-frequency", f"got {frequency!r}, expected a frequency >= 0 (Hz)")
        drive["frequency_Hz"] = float(frequency)
    if amplitude is not None:
        if not (math.isfinite(amplitude) and amplitude >= 0.0):
            raise ConfigError(None, "--tailbeat-amplitude", f"got {amplitude!r}, expected a servo amplitude >= 0 (deg)")
        drive["servo_amplitude_deg"] = float(amplitude)
    if frequency is not None or amplitude is not None:
        drive["source"] = "sinusoid"
    return config


def beat_frequency(model: Model) -> float:
    """The tail-beat frequency (Hz) of a model driven by its own beat; 0 when the servo is driven from outside."""
    p = model.metadata["parameters"]
    return p["frequency"] if p["source"] == "sinusoid" else 0.0


def swim_figures(model: Model, t: np.ndarray, arrays: dict) -> dict:
    """Steady swimming figures of a recorded run (:func:`sim.swimming.swim_figures`: signed speed, trailing-edge
    amplitude peak to peak, Strouhal number, Lighthill's thrust, cost of transport over the last three beats),
    ``forward_speed_m_s`` (the same as ``steady_speed_m_s``: the disc centre's horizontal displacement along its
    mean heading over the window, m/s) and ``mean_depth_change_m`` (mean depth of the disc centre over the window
    minus its initial depth, m, positive = deeper)."""
    p = model.metadata["parameters"]
    figures = swimmer_figures(model, t, arrays, beat_frequency(model))
    window = steady_window(t, figures["tailbeat_frequency_Hz"])
    pos = arrays["base_pos"]
    depth0 = p["surface_z"] - float(pos[0, 2])
    figures["forward_speed_m_s"] = figures["steady_speed_m_s"]
    figures["mean_depth_change_m"] = float(np.mean(p["surface_z"] - pos[window, 2]) - depth0)
    return figures


#: `mms sim --periodic`: config values set for the solve and for the run from its orbit (sim/cli_sim.py:
#: periodic_config): the tail beat's soft start makes the first beats differ from the later ones, and a periodic
#: orbit needs a drive that repeats from t = 0.
PERIODIC_CONFIG = {("tail_drive", "ramp_cycles"): 0.0}

#: steady level swimming: the disc's path climbs or sinks at most this steeply (deg from the horizontal) ...
MAX_CLIMB_DEG = 30.0
#: ... or its depth changes by at most this many body lengths over the steady window (a beat's heave is far less)
LEVEL_DRIFT_BODY_LENGTHS = 0.05


def swim_warnings(model: Model, figures: dict) -> list[str]:
    """Why a free run is not the steady forward, level swim its figures describe (empty when it is)."""
    warnings = steady_state_warnings(figures, "steady swim", math.inf)
    forward, vertical = figures["steady_speed_m_s"], figures["vertical_speed_m_s"]
    if forward < 0.0:
        warnings.append(f"it drifts backwards: forward speed {forward:.4f} m/s over the steady window")
    window_s = figures["steady_window_s"]
    rise = vertical * window_s
    climb = math.degrees(math.atan2(abs(vertical), abs(forward)))
    if climb > MAX_CLIMB_DEG and abs(rise) > LEVEL_DRIFT_BODY_LENGTHS * model.metadata["body_length_m"]:
        warnings.append(f"it {'rises' if rise > 0 else 'sinks'} {1e3 * abs(rise):.0f} mm over the {window_s:.2f} s "
                        f"steady window ({vertical:+.4f} m/s, {climb:.0f} deg from the horizontal): not a level swim")
    return warnings


def summarize(run) -> dict:
    """``mms sim --summary``: the swimming figures of :func:`swim_figures`, the base's drift and tumbling over the
    run (:mod:`sim.summary`), ``warnings`` (:func:`swim_warnings`, free runs) and the timing figures. A tethered
    run (fixed base) also gives the mean load-cell force on the disc (``tether_mean_force_N``, disc frame)."""
    figures = swim_figures(run.model, run.t, run.arrays)
    sim_time = float(run.t[-1] - run.t[0])
    figures.update({"sim_time_s": sim_time, "wall_time_s": float(run.wall_time_s),
                    "real_time_factor": sim_time / run.wall_time_s if run.wall_time_s > 0 else float("inf")})
    figures.update(base_motion(run.t, run.arrays))
    window = steady_window(run.t, figures["tailbeat_frequency_Hz"])
    if run.model.base_mode == "fixed":
        figures["tether_mean_force_N"] = run.arrays["base_wrench"][window, :3].mean(axis=0).tolist()
        figures["warnings"] = []
    else:
        figures["warnings"] = swim_warnings(run.model, figures)
    return figures


def make_plots(run, out_dir) -> list:
    """Trajectory, speed, tail angles and forces of a run (PNG files in out_dir)."""
    import matplotlib.pyplot as plt

    out_dir = Path(out_dir)
    model, t, a = run.model, run.t, run.arrays
    p = model.metadata["parameters"]
    paths = []
    pos = a["base_pos"]
    tip = tail_tip_positions(model, pos, a["base_quat"], a["q"])
    fig, (top, side) = plt.subplots(2, 1, figsize=(8, 7))
    top.plot(pos[:, 0], pos[:, 1], label="disc centre")
    top.plot(tip[:, 0], tip[:, 1], lw=0.6, label="tail tip")
    top.set_xlabel("x (m)")
    top.set_ylabel("y (m)")
    top.set_title("trajectory, top view (world)")
    top.axis("equal")
    top.legend()
    side.plot(pos[:, 0], pos[:, 2] - p["surface_z"])
    side.set_xlabel("x (m)")
    side.set_ylabel("z - surface (m)")
    side.set_title("trajectory, side view")
    fig.tight_layout()
    paths.append(out_dir / "trajectory.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    if t.size > 1:
        velocity = np.gradient(pos, t, axis=0)
        ax.plot(t, np.linalg.norm(velocity[:, :2], axis=1), label="horizontal speed")
        ax.plot(t, velocity[:, 2], label="vertical speed")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("speed (m/s)")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "speed.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4))
    ratio = model.metadata["tail_joint_ratio"]
    k_yaw, k_caudal = model.joint_index("tail_yaw"), model.joint_index("caudal")
    ax.plot(t, np.degrees(a["q"][:, k_yaw] / ratio), label="servo angle")
    ax.plot(t, np.degrees(a["q"][:, k_yaw]), label="tail_yaw (fin-ray chord)")
    ax.plot(t, np.degrees(a["q"][:, k_caudal]), label="caudal (passive)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("angle (deg)")
    ax.legend()
    fig.tight_layout()
    paths.append(out_dir / "tail_angles.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    fig, axes = plt.subplots(2, 1, sharex=True, figsize=(8, 6))
    for i, axis in enumerate("xyz"):
        axes[0].plot(t, a["ext_wrench"][:, i], label=f"F{axis}")
    axes[0].set_ylabel("hydrodynamic force (N)\nworld, buoyancy incl.")
    axes[0].legend()
    if model.base_mode == "fixed":
        for i, axis in enumerate("xyz"):
            axes[1].plot(t, a["base_wrench"][:, i], label=f"F{axis}")
        axes[1].set_ylabel("tether (load cell) force\non the disc, disc frame (N)")
    else:
        servo = [servo_torque(model, row) for row in a["tau"]]
        axes[1].plot(t, servo, label="servo torque")
        axes[1].set_ylabel("servo torque (N m)")
    axes[1].legend()
    axes[1].set_xlabel("time (s)")
    fig.tight_layout()
    paths.append(out_dir / "forces.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)
    return paths


def swim(model: Model, duration: float, dt: float | None = None, integrator: str | None = None, *,
         record_every: int = 5, progress=None) -> tuple[np.ndarray, dict, float]:
    """Simulate ``duration`` s and record ``t`` (T,) and the arrays base_pos (T, 3), base_quat (T, 4), base_twist
    (T, 6), q, qd, tau (T, n), base_wrench (T, 6), ext_wrench (T, 6) every ``record_every`` steps (first and last state included).
    Returns (t, arrays, wall time of the stepping loop in s). ``progress``: a tqdm bar to update, or None."""
    from sim.simulation import Simulation

    p = model.metadata["parameters"]
    dt = p["dt"] if dt is None else dt
    sim = Simulation(model, integrator=integrator or p["integrator"], dt=dt)
    n_steps = max(1, int(round(duration / dt)))
    names = ("base_pos", "base_quat", "base_twist", "q", "qd", "tau", "base_wrench", "ext_wrench")
    times, rows = [], {name: [] for name in names}

    def record():
        out = sim.outputs()
        times.append(sim.t)
        for name in names:
            rows[name].append(out[name])

    record()
    start = time.perf_counter()
    for i in range(1, n_steps + 1):
        sim.step()
        if i % record_every == 0 or i == n_steps:
            record()
        if progress is not None and i % 100 == 0:
            progress.update(100)
    wall = time.perf_counter() - start
    if progress is not None:
        progress.update(n_steps % 100)
    return np.asarray(times), {name: np.asarray(v) for name, v in rows.items()}, wall
