"""PyElastica's side of tests/cosserat/test_passive_rod_vs_pyelastica.py: the rod, its two load cases and their tip
paths (docs/cosserat.md "PyElastica as the reference"). Apart from the test so that
tests/cosserat/warm_pyelastica.py can compile PyElastica's kernels without importing the simulator (whose own
warm-up runs beside it)."""
from __future__ import annotations

import functools

import elastica as ea
import numpy as np

LENGTH, RADIUS, RHO, E = 1.0, 0.02, 1000.0, 1e8        # m, m, kg/m^3, Pa: the paper's rod (docs/cosserat.md)
G, SHEAR_FACTOR = E / 3.0, 27.0 / 28.0                 # PyElastica's shear correction for a round section
GRAVITY = np.array([0.0, -9.81, 0.0])                  # m/s^2: case (a) bends about e_z (K_Z, kappa2)
TIP_LOAD = np.array([0.0, 0.0, -10.0])                 # N: case (b) bends about e_y (K_Y, kappa1)
DURATION = 0.8          # s: 1.4 periods of the first mode (0.56 s), enough for three level crossings
RECORD = 4e-3           # s between compared samples
#: PyElastica: elements and time step (its position Verlet is stable to ~5e-5 s at 50 elements).
ELEMENTS, ELEMENTS_DT = 50, 4e-5
#: Case (b) is released from PyElastica's own equilibrium: the load held for SETTLE seconds with a uniform damping
#: of 2 omega_1 (mode 1 critically damped, the others decaying at omega_1), then load and damping removed.
SETTLE, SETTLE_DAMPING = 1.0, 22.0
#: the load cases
CASES = ("gravity", "tip_load")


class Simulator(ea.BaseSystemCollection, ea.Constraints, ea.Forcing, ea.Damping):
    pass


class TipLoadUntil(ea.NoForces):
    """A dead force (3,) N on the last node while ``time < release`` (s)."""

    def __init__(self, force, release):
        super().__init__()
        self.force, self.release = np.asarray(force, dtype=float), float(release)

    def apply_forces(self, system, time=0.0):
        if time < self.release:
            system.external_forces[:, -1] += self.force


class DampUntil(ea.AnalyticalLinearDamper):
    """PyElastica's uniform exponential damper, switched off at ``release`` (s)."""

    def __init__(self, release, **kwargs):
        super().__init__(**kwargs)
        self.release = float(release)

    def dampen_rates(self, system, time):
        if time < self.release:
            super().dampen_rates(system, time)


@functools.cache
def pyelastica_tip(case: str, elements: int, dt: float) -> tuple[np.ndarray, float]:
    """PyElastica's tip path (T, 3) m every RECORD s over DURATION from the release, and the largest node speed
    (m/s) at the release."""
    return pyelastica_run(case, elements, dt, SETTLE, DURATION)


def pyelastica_run(case: str, elements: int, dt: float, settle_s: float, duration_s: float):
    """:func:`pyelastica_tip` with the tip load held ``settle_s`` (s) and a run of ``duration_s`` (s) after it
    (tests/cosserat/warm_pyelastica.py: a few steps of each case compile PyElastica's kernels)."""
    half_element = LENGTH / (2 * elements - 1)         # the clamped element's half length on the longer rod
    sim = Simulator()
    rod = ea.CosseratRod.straight_rod(elements, np.array([-half_element, 0.0, 0.0]), np.array([1.0, 0.0, 0.0]),
                                      np.array([0.0, 1.0, 0.0]), LENGTH + half_element, RADIUS, RHO,
                                      youngs_modulus=E, shear_modulus=G)
    sim.append(rod)
    sim.constrain(rod).using(ea.OneEndFixedBC, constrained_position_idx=(0,), constrained_director_idx=(0,))
    settle = 0.0
    if case == "gravity":
        sim.add_forcing_to(rod).using(ea.GravityForces, acc_gravity=GRAVITY)
    else:
        settle = settle_s
        sim.add_forcing_to(rod).using(TipLoadUntil, force=TIP_LOAD, release=settle)
        sim.dampen(rod).using(DampUntil, release=settle, uniform_damping_constant=SETTLE_DAMPING, time_step=dt)
    sim.finalize()
    stepper, time = ea.PositionVerlet(), np.float64(0.0)
    for _ in range(int(round(settle / dt))):
        time = stepper.step(sim, time, dt)
    speed = float(np.max(np.linalg.norm(rod.velocity_collection, axis=0)))
    every = int(round(RECORD / dt))
    tips = [rod.position_collection[:, -1].copy()]
    for k in range(int(round(duration_s / dt))):
        time = stepper.step(sim, time, dt)
        if (k + 1) % every == 0:
            tips.append(rod.position_collection[:, -1].copy())
    return np.array(tips), speed
