"""The flapper with modal wings (``[wing] body = "modal"``, configs/robots/flapper_flexible.toml; docs/flexible.md).

Each wing is one modal body (sim/flexible.py) hung on its actuated stroke joint: a beam along the leading edge
(its floating frame's e1, toward the tip; e2 along the chord from the trailing to the leading edge; e3 = e1 x e2,
the right wing's upper normal, the left wing's lower one) with ``modes.bending`` polynomial modes out of the wing
plane (displacement along e3, rotation about -e2: the rigid-blade wing's bend axis) and ``modes.torsion`` modes
about the leading edge (the twist axis). Everything else is the rigid-blade flapper's (sim/robots/flapper.py):
thorax, stroke law, planform, density, aerodynamics (the same quasi-steady strips and added mass, per section).

Stiffness: the continuum equivalent of the rigid-blade wing's joint springs, each a spring k(X) standing for one
section of length l = S / M (``wing.sections``): ``EI(X) = k_b(X) l``, ``GJ(X) = k_t(X) l`` (k linear from root
to tip as there). Modal damping ``D_e = beta_d K_e`` (``modes.damping_ratio`` beta_d, s).
Signs: the left wing is the mirror image, its frame right-handed, so for mirror-symmetric motion its modal
coordinates are the right wing's with the opposite sign.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from sim.aero import FITS, added_mass_tensor
from sim.flexible import FlexibleParts, ModalBody, beam_modes
from sim.forces import ForceModel
from sim.laws import Sinusoid
from sim.model import Model, ModelBuilder

#: Rotation from the rigid-blade wing's blade frame (x chord TE->LE, y normal, z span) to the modal wing's
#: floating frame (e1 span, e2 chord TE->LE, e3 = e1 x e2): its columns are e1, e2, e3 in blade coordinates.
BLADE_TO_MODAL = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])


class SectionAero(ForceModel):
    """Quasi-steady lift/drag and added mass of sim/aero.py on the sections of modal wings: per unit span, at the
    centre of pressure ``cp_fraction * c`` behind the leading edge, written as section densities
    (``data.f_sec``, ``data.M_sec``; sim/flexible.py). Parameters: ``sections`` per wing the rows (n_s,) of its
    sections in the packed section arrays (sim.flexible.FlexibleParts.section_rows), its ``chord`` (n_s,) m at
    them and ``normal_sign`` (+1: e3 is the upper normal, -1: the lower one).

    The kernel is the rigid blades' (sim.aero's registered "blade_aero"), run on the sections (``on_sections``):
    each section is one strip of unit weight (a density per metre of span), its frame the blade frame with the
    leading edge along e1 instead of z (the centre of pressure and the directions are given in it). ``apply`` (the
    Python form, sim.forces.ForceModel) and the fused stepper call that one kernel."""

    name = "aero"
    fused_kernel = "blade_aero"
    on_sections = True

    def __init__(self, sections, chord, normal_sign, *, rho_air: float, cp_fraction: float, fit: str,
                 added_mass_coefficient: float, with_added_mass: bool):
        rows = [np.asarray(r, dtype=np.int64) for r in sections]
        c = np.concatenate([np.asarray(ci, dtype=float).reshape(r.size) for ci, r in zip(chord, rows)])
        sign = np.concatenate([np.full(r.size, float(si)) for si, r in zip(normal_sign, rows)])
        n = c.size
        cp = np.zeros((n, 1, 3))
        cp[:, 0, 1] = -cp_fraction * c                # behind the leading edge, along -e2
        t_dir = np.tile([0.0, 1.0, 0.0], (n, 1))
        w_dir = np.zeros((n, 3))
        w_dir[:, 2] = sign
        added = np.zeros((n, 6, 6))
        if with_added_mass:
            for s in range(n):
                added[s] = added_mass_tensor(cp[s], c[s:s + 1], np.ones(1), w_dir[s], rho_air, added_mass_coefficient)
        self.pack(cp=cp, chord=c[:, None].copy(), weight=np.ones((n, 1)), t_dir=t_dir, w_dir=w_dir,
                  half_rho=0.5 * float(rho_air), added_mass=added, wrenches=np.zeros((n, 6)),
                  bodies=np.concatenate(rows), fit=FITS[fit])


def wing_body(p: dict, chord, twist_stiffness, bend_stiffness) -> ModalBody:
    """The right wing as a modal body (docstring of the module) from the flapper's parameters ``p`` and its
    chord(X) (m), and joint stiffnesses k_t(X), k_b(X) (N m/rad) along the span X (m) (sim/robots/flapper.py)."""
    e, rho_w = p["e"], p["rho_w"]
    section_length = p["S"] / p["M"]

    def strip(X):
        return rho_w * e * chord(X)

    def rotary(X):
        c = float(chord(X))
        return strip(X) / 12.0 * np.array([c * c + e * e, e * e, c * c])

    return beam_modes(p["S"], rho_A=strip, rho_I=rotary, EI_z=lambda X: bend_stiffness(X) * section_length,
                      GJ=lambda X: twist_stiffness(X) * section_length, bending_z=p["modes"]["bending"],
                      torsion=p["modes"]["torsion"], sections=p["modes"]["sections"],
                      damping_ratio=p["modes"]["damping_ratio"],
                      centroid=lambda X: np.array([0.0, -0.5 * float(chord(X)), 0.0]))


def build(p: dict, path, *, thorax: np.ndarray, roots: dict, wing: ModalBody, chord) -> Model:
    """The flapper Model with modal wings from the flapper's checked parameters (sim/robots/flapper.py, which
    gives the thorax's spatial inertia (6, 6), the stroke joints ``roots`` {"r", "l": {"R", "pos", "axis"}} in
    the blade frame's convention, the wing and its chord(X) (m))."""
    omega = 2.0 * math.pi * p["f"]
    builder = ModelBuilder("thorax", thorax, base_mode=p["base_mode"], gravity=(0.0, 0.0, -p["gravity"]))
    bodies, strokes = [], []
    for side, r in roots.items():
        placement = np.eye(4)
        placement[:3, :3], placement[:3, 3] = r["R"] @ BLADE_TO_MODAL, r["pos"]
        j = builder.add_body(f"wing_{side}", "thorax", joint_name=f"stroke_{side}", joint_type="revolute",
                             axis=BLADE_TO_MODAL.T @ r["axis"], placement=placement, actuated=True,
                             motion_law=Sinusoid(p["A"], omega, phase=-0.5 * math.pi, offset=p["phi0"]))
        bodies.append(j)
        strokes.append(j - 1)
    parts = FlexibleParts({j: wing for j in bodies})
    rows = parts.section_rows()
    builder.add_force_model(SectionAero([rows[j] for j in bodies], [chord(wing.X)] * 2, (1.0, -1.0),
                                        rho_air=p["rho_air"], cp_fraction=p["cp_fraction"], fit=p["fit"],
                                        added_mass_coefficient=p["k_a"], with_added_mass=p["added_mass"]))
    metadata = {
        "kind": "flapper", "wing_body": "modal", "name": p["name"],
        "config_path": None if path is None else str(Path(path)), "sections": p["M"],
        "stroke_amplitude_rad": p["A"], "stroke_offset_rad": p["phi0"], "stroke_omega_rad_s": omega,
        "period_s": 1.0 / p["f"], "stroke_joints": strokes, "twist_joints": {"r": [], "l": []},
        "bend_joints": {"r": [], "l": []}, "blade_bodies": [], "modal_wings": bodies,
        "mode_names": list(wing.mode_names), "parameters": dict(p),
        "frames": ("thorax: x0 forward along the body, y0 left, z0 up; modal wing frames: e1 along the leading edge "
                   "toward the tip, e2 along the chord from trailing to leading edge, e3 = e1 x e2 (the right wing's "
                   "upper normal, the left's lower); tip twist about e1 (nose up > 0 on the right wing), tip bend "
                   "about -e2 (toward the upper side > 0 on the right wing)"),
        "amplitudes": "semi-amplitudes (half peak-to-peak) of the fundamental harmonic",
    }
    model = builder.build(metadata=metadata).replace(flexible=parts)
    model.metadata["weight_N"] = (model.total_mass() + 2.0 * wing.mass()) * p["gravity"]
    return model


def tip_angles(model: Model, modal_q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Tip twist and tip bend (rad), (T,) each, of the right wing from the recorded modal coordinates
    (T, n_e): the tip section's rotation about e1 and about -e2."""
    j = model.metadata["modal_wings"][0]
    wing = model.flexible.bodies[j]
    offset = sum(model.flexible.bodies[b].n_e for b in sorted(model.flexible.bodies) if b < j)
    rotation = modal_q[:, offset:offset + wing.n_e] @ wing.field(wing.length)[3:].T
    return rotation[:, 0], -rotation[:, 1]


def stable_dt(model: Model, integrator: str, boundary: float, safety: float) -> float | None:
    """Largest RK4 step (s) advised for the modal wings: ``safety * boundary / |lambda|_max`` of the clamped
    wing's modal dynamics in vacuum (eigenvalues of [[0, 1], [-E*^-1 K_e, -E*^-1 D_e]]; the air's added mass
    only lowers them), rounded down to a whole fraction of the period. None for other integrators."""
    if integrator != "rk4":
        return None
    rate = 0.0
    for wing in model.flexible.bodies.values():
        E = np.einsum("s,sai,sab,sbk->ik", wing.w, wing.Psi, wing.M_s, wing.Psi)
        n = wing.n_e
        A = np.zeros((2 * n, 2 * n))
        A[:n, n:] = np.eye(n)
        A[n:, :n] = -np.linalg.solve(E, wing.K)
        A[n:, n:] = -np.linalg.solve(E, wing.D)
        rate = max(rate, float(np.abs(np.linalg.eigvals(A)).max()))
    limit = safety * boundary / rate
    period = model.metadata["period_s"]
    return period / math.ceil(period / limit)
