"""A swimming fish and a dead fish: an elongated body cut into rigid slices (GEA) with Lighthill's reactive
forces (sim/lighthill.py). Registry kind ``"fish"``; configs ``configs/robots/fish.toml`` (an actuated
curvature wave, free head) and ``configs/robots/dead_fish.toml`` (passive slices in a Karman vortex street).
docs/swimming.md explains the model and the figures.

Body j (0 = head, floating base) is the slice ``X in [j D, (j+1) D]`` of a body of length L cut into N slices of
length ``D = L/N``; its frame has x forward (towards the head), y left, z up, origin at ``X = j D`` (the joint
with its parent). Joints: revolute about z at the slice boundaries.
- ``drive = "wave"``: actuated, ``r_k = h_x(X_k + D/2) - h_x(X_k - D/2)`` (the change of the centreline's slope
  between the slices' centres) for ``h = a(X) sin(2 pi (X / lambda - f t))``, ``a(X)/L = 0.02 - 0.0825 X/L +
  0.1625 (X/L)^2`` scaled so that ``a(L)`` is the tail amplitude, ramped in over ``ramp_cycles`` beats (a
  :class:`sim.laws.RampedSinusoid` per joint: the fused stepper runs it).
- ``drive = "passive"``: visco-elastic joints ``k = E I(X_k) / D``, ``mu = c I(X_k) / D`` (``I = pi b a^3 / 4``; E the
  Young's modulus, c the tissue's viscosity: a Kelvin-Voigt body, the spec's GEA joint law).
"""
from __future__ import annotations

import cmath
import math

import numpy as np

from sim.config import ConfigError, array, number, one_of
from sim.laws import RampedSinusoid, ViscoElastic
from sim.lighthill import FLOW_KINDS, flow_vector, gauss_points, shedding_frequency, slices_model
from sim.model import Model, ModelBuilder
from sim.robots.raybot import BASE_MODES, MAX_FORCE_COEFFICIENT
from sim.robots.schema import (SIMULATION, density, frequency_hz, length, position, robot_table)
from sim.spatial import spatial_inertia
from sim.summary import base_motion, steady_state_warnings
from sim.swimming import (WINDOW_TIME_SLACK, band_power_fraction, batch_mean_error, swim_figures as swimmer_figures,
                          swing_frequency, tail_tip_positions)

DRIVES = ("wave", "passive")
#: The amplitude envelope a(X)/L = c0 + c1 X/L + c2 (X/L)^2 of a carangiform swimmer (Videler's fit, the spec's).
ENVELOPE = (0.02, -0.0825, 0.1625)
#: Most slices a fish may have (the stepper's cost grows with them; 200 is far past convergence).
MAX_SLICES = 200
#: Largest Young's modulus of a passive body, Pa (stiffer than rubber by far; a fish is ~1e5).
MAX_YOUNG_MODULUS_PA = 1e9
#: Largest tissue viscosity of a passive body, Pa s (a Kelvin-Voigt retardation time c / E of 1 s at the largest E).
MAX_VISCOSITY_PA_S = 1e9
#: Longest transient (s) the stream figures may leave out (summary.transient_s).
MAX_TRANSIENT_S = 1e4
#: Fastest ambient stream, m/s.
MAX_STREAM_M_S = 20.0


def config_schema(config: dict, path) -> dict:
    """The JSON Schema of a fish file (configs/robots/fish.toml, dead_fish.toml; sim/robots/schema.py)."""
    from sim.config import table
    coefficient = number(0.0, MAX_FORCE_COEFFICIENT, expected=f"a coefficient in [0, {MAX_FORCE_COEFFICIENT:g}]")
    fraction = number(0.0, 1.0, expected="a fraction of the length in [0, 1]")
    span = array(position(), 2, 2, expected="[min, max] in m")
    return table({
        "robot": robot_table("fish", {"base": one_of(*BASE_MODES)}),
        "water": table({"density_kg_m3": density()}, ["density_kg_m3"]),
        "simulation": SIMULATION | {"required": ["dt"]},
        "body": table({"length_m": length(), "slices": {"type": "integer", "minimum": 2, "maximum": MAX_SLICES},
                       "height_m": length(), "width_m": length(), "head_fraction": fraction,
                       "tail_start_fraction": fraction, "tail_height_m": length(0.0), "tail_width_m": length(0.0),
                       "skin_friction": coefficient, "cross_drag": coefficient},
                      ["length_m", "slices", "height_m", "width_m", "head_fraction", "tail_start_fraction",
                       "tail_height_m", "tail_width_m", "skin_friction", "cross_drag"]),
        "muscle": table({"drive": one_of(*DRIVES), "frequency_Hz": frequency_hz(0.0),
                         "tail_amplitude_m": length(0.0), "wavelength_m": length(), "ramp_cycles": number(0.0, 1e3),
                         "young_modulus_Pa": number(0.0, MAX_YOUNG_MODULUS_PA),
                         "viscosity_Pa_s": number(0.0, MAX_VISCOSITY_PA_S,
                                                  expected=f"a viscosity in [0, {MAX_VISCOSITY_PA_S:g}] Pa s")},
                      ["drive"]),
        "flow": table({"kind": one_of(*FLOW_KINDS), "stream_m_s": number(-MAX_STREAM_M_S, MAX_STREAM_M_S),
                       "cylinder_diameter_m": length(), "street_x0_m": position(), "street_y0_m": position(),
                       "domain_x_m": span, "domain_y_m": span}, ["kind"]),
        "start": table({"head_x_m": position(), "head_y_m": position()}),
        "summary": table({"transient_s": number(0.0, MAX_TRANSIENT_S, expected=f"a time in [0, {MAX_TRANSIENT_S:g}] s")}),
    }, ["robot", "water", "simulation", "body", "muscle"])


def read_parameters(config: dict, path=None) -> dict:
    """SI parameters of a checked fish table (the schema has checked types and ranges)."""
    body, muscle = config["body"], config["muscle"]
    flow = config.get("flow", {"kind": "none"})
    start = config.get("start", {})
    p = {"name": config["robot"].get("name", "fish"), "config_path": None if path is None else str(path),
         "base_mode": BASE_MODES[config["robot"].get("base", "floating")], "rho": float(config["water"]["density_kg_m3"]),
         "dt": float(config["simulation"]["dt"]), "integrator": config["simulation"].get("integrator", "rk4"),
         "length": float(body["length_m"]), "slices": int(body["slices"]), "b": 0.5 * float(body["height_m"]),
         "a": 0.5 * float(body["width_m"]), "head_fraction": float(body["head_fraction"]),
         "tail_start_fraction": float(body["tail_start_fraction"]), "b_tail": 0.5 * float(body["tail_height_m"]),
         "a_tail": 0.5 * float(body["tail_width_m"]), "skin_friction": float(body["skin_friction"]),
         "cross_drag": float(body["cross_drag"]), "drive": muscle["drive"],
         "frequency": float(muscle.get("frequency_Hz", 0.0)), "tail_amplitude": float(muscle.get("tail_amplitude_m", 0.0)),
         "wavelength": float(muscle.get("wavelength_m", body["length_m"])),
         "ramp_cycles": float(muscle.get("ramp_cycles", 2.0)), "young_modulus": float(muscle.get("young_modulus_Pa", 0.0)),
         "viscosity": float(muscle.get("viscosity_Pa_s", 0.0)), "flow_kind": flow["kind"],
         "stream": float(flow.get("stream_m_s", 0.0)), "diameter": float(flow.get("cylinder_diameter_m", 0.0)),
         "street": (float(flow.get("street_x0_m", 0.0)), float(flow.get("street_y0_m", 0.0))),
         "domain": tuple(flow.get("domain_x_m", (-math.inf, math.inf))) + tuple(flow.get("domain_y_m", (-math.inf, math.inf))),
         "head": (float(start.get("head_x_m", 0.0)), float(start.get("head_y_m", 0.0))),
         "transient": float(config.get("summary", {}).get("transient_s", STREAM_TRANSIENT_S))}
    if p["tail_start_fraction"] < p["head_fraction"]:
        raise ConfigError(path, "body.tail_start_fraction", f"got {p['tail_start_fraction']:g}, expected at least "
                          f"body.head_fraction = {p['head_fraction']:g}")
    if p["flow_kind"] == "karman" and not (p["diameter"] > 0.0 and p["stream"] != 0.0):
        raise ConfigError(path, "flow.cylinder_diameter_m", "a Karman street needs flow.cylinder_diameter_m > 0 and "
                          "flow.stream_m_s != 0")
    x_min, x_max, y_min, y_max = p["domain"]
    hx, hy = p["head"]
    for label, x in (("head", hx), ("trailing edge", hx - p["length"])):
        if not (x_min <= x <= x_max):
            raise ConfigError(path, "flow.domain_x_m", f"the fish's {label} starts at x = {x:g} m, outside the flow's "
                              f"domain [{x_min:g}, {x_max:g}] m")
    if not (y_min <= hy <= y_max):
        raise ConfigError(path, "flow.domain_y_m", f"the fish starts at y = {hy:g} m, outside the flow's domain "
                          f"[{y_min:g}, {y_max:g}] m")
    return p


def half_axes(p: dict):
    """(a(X), b(X)) m: the section's lateral and dorsal semi-axes (ellipse) along the body. Constant in the middle,
    ``~ sqrt(X / X_head)`` over the head, linear from ``tail_start_fraction L`` to the tail's values at L."""
    L, head, tail = p["length"], p["head_fraction"] * p["length"], p["tail_start_fraction"] * p["length"]

    def axes(X: float) -> tuple[float, float]:
        if X < head:
            s = math.sqrt(X / head)
            return p["a"] * s, p["b"] * s
        if X > tail and L > tail:
            u = (X - tail) / (L - tail)
            return p["a"] + u * (p["a_tail"] - p["a"]), p["b"] + u * (p["b_tail"] - p["b"])
        return p["a"], p["b"]
    return axes


def slice_inertia(rho: float, axes, x_start: float, x_end: float) -> np.ndarray:
    """Spatial inertia (6, 6) about the slice frame's origin (at X = x_start, x forward) of a neutrally buoyant
    slice of elliptic sections (density rho), by Gauss quadrature: each point a lamina of mass rho pi a b w."""
    M = np.zeros((6, 6))
    for X, w in zip(*gauss_points(x_start, x_end)):
        a, b = axes(X)
        dm = rho * math.pi * a * b * w
        M += spatial_inertia(dm, [-(X - x_start), 0.0, 0.0],
                             np.diag([dm * (a * a + b * b) / 4.0, dm * b * b / 4.0, dm * a * a / 4.0]))
    return M


def wave_joint_laws(p: dict) -> list[RampedSinusoid]:
    """The actuated joints' laws: ``r_k(t) = h_x(X_k + D/2) - h_x(X_k - D/2)`` as ``A_k sin(omega t + phase_k)``.

    With ``k = 2 pi / lambda``, ``h_x = Im[(a' + i k a) e^{i(k X - omega t)}]``; the difference of the two phasors
    Z gives ``Im[Z e^{-i omega t}] = |Z| sin(omega t + pi - arg Z)``."""
    L, n, f = p["length"], p["slices"], p["frequency"]
    c0, c1, c2 = ENVELOPE
    scale = p["tail_amplitude"] / (L * (c0 + c1 + c2))
    wave = 2.0 * math.pi / p["wavelength"]

    def phasor(X):
        a = scale * L * (c0 + c1 * X / L + c2 * (X / L) ** 2)
        a_x = scale * (c1 + 2.0 * c2 * X / L)
        return (a_x + 1j * wave * a) * cmath.exp(1j * wave * X)

    delta = L / n
    omega = 2.0 * math.pi * f
    ramp = p["ramp_cycles"] / f if f > 0.0 else 0.0
    laws = []
    for k in range(1, n):
        Z = phasor(k * delta + 0.5 * delta) - phasor(k * delta - 0.5 * delta)
        laws.append(RampedSinusoid(abs(Z) if f > 0.0 else 0.0, omega, math.pi - cmath.phase(Z), ramp))
    return laws


def build(config: dict, path=None) -> Model:
    """The fish Model: N slices (head floating), the wave or passive joints, the Lighthill plug-in."""
    p = read_parameters(config, path)
    axes = half_axes(p)
    n, L, rho = p["slices"], p["length"], p["rho"]
    delta = L / n
    base_pose = np.eye(4)
    base_pose[:2, 3] = p["head"]
    builder = ModelBuilder("slice_0", slice_inertia(rho, axes, 0.0, delta), base_mode=p["base_mode"],
                           gravity=(0.0, 0.0, 0.0), base_pose=base_pose)
    laws = wave_joint_laws(p) if p["drive"] == "wave" else None
    for k in range(1, n):
        placement = np.eye(4)
        placement[0, 3] = -delta
        a, b = axes(k * delta)
        area_moment = math.pi * b * a ** 3 / 4.0            # m^4, about the dorsal axis
        builder.add_body(f"slice_{k}", f"slice_{k - 1}", joint_name=f"joint_{k}", axis=(0.0, 0.0, 1.0),
                         placement=placement, inertia=slice_inertia(rho, axes, k * delta, (k + 1) * delta),
                         actuated=laws is not None, motion_law=laws[k - 1] if laws is not None else None,
                         joint_law=None if laws is not None else ViscoElastic(
                             p["young_modulus"] * area_moment / delta, p["viscosity"] * area_moment / delta, 0.0))
    flow = flow_vector(p["flow_kind"], stream=p["stream"], diameter=p["diameter"], x0=p["street"][0],
                       y0=p["street"][1], domain=p["domain"])
    builder.add_force_model(slices_model(rho, [(k, k * delta, (k + 1) * delta) for k in range(n)], axes,
                                         skin_friction=p["skin_friction"], cross_drag=p["cross_drag"],
                                         flow_kind=p["flow_kind"], flow=flow, config_path=path, key="body"))
    tip = np.eye(4)
    tip[0, 3] = -delta
    beat = p["frequency"] if p["drive"] == "wave" else 0.0
    metadata = {"name": p["name"], "kind": "fish", "config_path": p["config_path"], "parameters": p,
                "period_s": 1.0 / beat if beat > 0.0 else None, "tail_tip": (f"slice_{n - 1}", tip),
                "body_length_m": L, "flow": flow,
                "frames": "world z up; body x forward (head), y left, z up; slices along -x"}
    return builder.build(metadata)


# ----------------------------------------------------------------------------------------- mms sim hooks
def apply_cli_overrides(config: dict, args) -> dict:
    """``--tailbeat-frequency`` (Hz) and ``--tailbeat-amplitude`` (the wave's amplitude at the tail, m: its
    lateral excursion is about twice that) overwrite ``muscle.frequency_Hz`` and ``muscle.tail_amplitude_m``."""
    muscle = config.setdefault("muscle", {})
    for option, key in (("tailbeat_frequency", "frequency_Hz"), ("tailbeat_amplitude", "tail_amplitude_m")):
        value = getattr(args, option, None)
        if value is None:
            continue
        if not (math.isfinite(value) and value >= 0.0):
            raise ConfigError(None, "--" + option.replace("_", "-"), f"got {value!r}, expected a number >= 0")
        muscle[key] = float(value)
    return config


def beat_frequency(model: Model) -> float:
    """The imposed wave's frequency (Hz); 0 for a passive (dead) fish."""
    p = model.metadata["parameters"]
    return p["frequency"] if p["drive"] == "wave" else 0.0


def swim_figures(model: Model, t: np.ndarray, arrays: dict) -> dict:
    """The steady figures of :func:`sim.swimming.swim_figures` at the fish's own beat (the last three beats)."""
    return swimmer_figures(model, t, arrays, beat_frequency(model))


#: Time (s) the stream figures leave out at the start when ``summary.transient_s`` is not given: the slowest mode of
#: the held dead fish in the stream decays at 0.63 1/s (benchmarks/study_dead_fish_lock_in.py), so 5 s is three
#: of its time constants; its chaotic response forgets the start within about 3 s (docs/swimming.md).
STREAM_TRANSIENT_S = 5.0
#: Length (s) of the batches whose means give the upstream force's standard error (ten shedding periods of the
#: shipped street; the force's correlation time is below 1 s).
FORCE_BATCH_S = 5.0
#: A swing of the trailing edge counts when it goes from below -h to above +h, h = this fraction of its RMS.
SWING_HYSTERESIS = 0.5
#: Half-width of the band about the shedding frequency, as a fraction of it, of ``shedding_power_fraction``.
SHEDDING_BAND = 0.15
#: Welch segments of the trailing edge's spectrum, in shedding periods (a resolution of 5 % of f_s).
SPECTRUM_SEGMENT_PERIODS = 20.0


def stream_window(t: np.ndarray, transient: float) -> np.ndarray:
    """Boolean mask (T,) of the stream figures' window: after ``transient`` s, or the last half of a run shorter
    than twice that."""
    start = t[0] + transient if t[-1] - t[0] >= 2.0 * transient else 0.5 * (t[0] + t[-1])
    return t >= start - WINDOW_TIME_SLACK


def stream_figures(model: Model, t: np.ndarray, arrays: dict) -> dict:
    """A fish in a stream, over the run after its transient (``summary.transient_s``; docs/swimming.md): the drift
    against the stream (``drift_upstream_m_s``, the head's speed, + upstream; a held head instead gives
    ``upstream_force_N``, the mean force it pulls its support upstream with, and its batch-means standard error),
    the trailing edge's lateral motion: ``measured_tailbeat_frequency_Hz`` (full swings per second),
    ``tail_lateral_rms_m``, ``shedding_power_fraction`` (the share of its variance within +-15 % of the shedding
    frequency: near 1 when it locks in), the street's ``shedding_frequency_Hz`` (per row) and the ratio."""
    p = model.metadata["parameters"]
    shedding = shedding_frequency(model.metadata["flow"]) if p["flow_kind"] == "karman" else 0.0
    window = stream_window(t, p["transient"])
    tw = t[window]
    upstream = -math.copysign(1.0, p["stream"])
    out: dict = {"stream_window_s": float(tw[-1] - tw[0])}
    if model.base_mode == "fixed":       # the support's wrench on the head, head frame = world axes
        pull = -upstream * arrays["base_wrench"][window, 0]
        out["upstream_force_N"] = float(np.mean(pull))
        error = batch_mean_error(pull, int(out["stream_window_s"] // FORCE_BATCH_S))
        out["upstream_force_standard_error_N"] = error if math.isfinite(error) else None     # None: under 2 batches
    else:
        travel = arrays["base_pos"][window][-1, 0] - arrays["base_pos"][window][0, 0]
        out["drift_upstream_m_s"] = float(upstream * travel / (tw[-1] - tw[0]))
    tip = tail_tip_positions(model, arrays["base_pos"][window], arrays["base_quat"][window], arrays["q"][window])
    lateral = tip[:, 1]
    measured = swing_frequency(tw, lateral, SWING_HYSTERESIS)
    out["measured_tailbeat_frequency_Hz"] = measured
    out["tail_lateral_rms_m"] = float(np.std(lateral))
    out["shedding_frequency_Hz"] = float(shedding)
    out["tailbeat_to_shedding_ratio"] = measured / shedding if shedding > 0.0 else None
    out["shedding_power_fraction"] = (band_power_fraction(tw, lateral, (1.0 - SHEDDING_BAND) * shedding,
                                                          (1.0 + SHEDDING_BAND) * shedding,
                                                          SPECTRUM_SEGMENT_PERIODS / shedding)
                                      if shedding > 0.0 else None)
    return out


def summarize(run) -> dict:
    """``mms sim --summary``: :func:`sim.swimming.swim_figures`, the base's drift (:mod:`sim.summary`), timing;
    for a fish in a stream also ``drift_upstream_m_s`` (the head's speed against the stream, + upstream),
    ``measured_tailbeat_frequency_Hz``, ``shedding_frequency_Hz`` and their ratio (:func:`stream_figures`)."""
    model, t, arrays = run.model, run.t, run.arrays
    p = model.metadata["parameters"]
    figures = swim_figures(model, t, arrays)
    if p["flow_kind"] != "none" and p["stream"] != 0.0:
        figures.update(stream_figures(model, t, arrays))
    sim_time = float(t[-1] - t[0])
    figures.update({"sim_time_s": sim_time, "wall_time_s": float(run.wall_time_s),
                    "real_time_factor": sim_time / run.wall_time_s if run.wall_time_s > 0 else float("inf")})
    figures.update(base_motion(t, arrays))
    warnings = steady_state_warnings(figures, "steady swim", math.inf) if model.base_mode != "fixed" else []
    if figures["flow_domain_exits"]:
        warnings.append(f"{figures['flow_domain_exits']} section evaluations fell outside the flow's domain "
                        "(flow.domain_x_m / flow.domain_y_m) in the steady window")
    figures["warnings"] = warnings
    return figures
