"""Solve time of the periodic-orbit solver (sim/periodic.py, docs/periodic.md) on the flapper.

Two problems: the tethered flapper's orbit (passive joints only) and the free flapper's hover (the state plus the
stroke's offset and amplitude), both with the Rosenbrock integrator at 0.4 ms keeping its Jacobian from rest.
Baseline measured in the same run: one period of the same simulation (a period map), so the printed ratio says
how many period maps a solve costs in wall time (the solver's own arithmetic is negligible beside them). The
kernels are compiled (or loaded from the cache) before any clock starts.

``--guesses``: which starting guesses converge to the free hover's orbit. The stroke is held at the trimmed
values (docs/periodic.md's ROSW column), so the orbit exists; each guess is solved by single shooting and, where
that fails, by multiple shooting (:data:`GUESS_SEGMENTS` parts); the table prints converged or not, iterations,
residual, period maps and the solve's wall time against one period map.

``--raybot``: RayBot's steady swim (its config, the tail beat's soft start off as `mms sim --periodic` sets it,
RK4 at the period / 168), by single shooting and by multiple shooting (:data:`RAYBOT_SEGMENTS` parts): residual,
multipliers, the net velocity, and the swim figures of three periods from the orbit (sim/swimming.py).

    python benchmarks/bench_periodic.py [--guesses] [--raybot]
"""
from __future__ import annotations

import argparse
import copy
import math
import time
from pathlib import Path

import numpy as np

from sim.config import load_toml
from sim.periodic import ShootingCoordinates, first_guess, periodic_orbit, trimmed_orbit
from sim.robots import build_robot
from sim.robots import raybot as raybot_module
from sim.simulation import Simulation

FLAPPER = Path(__file__).resolve().parents[1] / "configs" / "robots" / "flapper.toml"
RAYBOT = FLAPPER.with_name("raybot.toml")
#: RayBot: steps per tail beat (its config's 4 ms, lowered to a whole fraction of the period that four parts
#: share) and the parts of its multiple shooting
RAYBOT_STEPS, RAYBOT_SEGMENTS = 168, 4
INTEGRATOR, DT, JACOBIAN_EVERY = "rosw", 4e-4, 0
#: period maps timed for the baseline
BASELINE_MAPS = 20
#: the free hover's stroke (deg) at this integrator and step: the trimmed values of docs/periodic.md (ROSW column)
HOVER_STROKE = {"offset_deg": -23.36, "amplitude_deg": 53.39}
#: parts of the period for multiple shooting where single shooting fails
GUESS_SEGMENTS = 5
#: starting guesses: changes to the solver's first guess (level, at rest, the wings as after three tethered
#: periods), by reduced coordinate (sim.periodic.ShootingCoordinates.names); "wings at rest" starts the wings from
#: the model's rest state instead (sim.reset()), as a solver without the tethered run would
GUESSES = {
    "first guess": {},
    "pitch +20 deg": {"pitch_rad": math.radians(20.0)},
    "pitch -20 deg": {"pitch_rad": math.radians(-20.0)},
    "pitch +60 deg": {"pitch_rad": math.radians(60.0)},
    "roll 30 deg": {"roll_rad": math.radians(30.0)},
    "forward 0.5 m/s": {"vx_m_s": 0.5},
    "forward 2 m/s": {"vx_m_s": 2.0},
    "sinking 0.5 m/s": {"vz_m_s": -0.5},
    "pitching 5 rad/s": {"wy_rad_s": 5.0},
    "wings at rest": None,
}


def period_map_time(sim: Simulation, period: float) -> float:
    sim.reset()
    sim.advance(period)                      # compile or load outside the clock
    start = time.perf_counter()
    for _ in range(BASELINE_MAPS):
        sim.reset()
        sim.advance(period)
    return (time.perf_counter() - start) / BASELINE_MAPS


def guesses(config: dict) -> None:
    """Which starting guesses reach the hover's orbit (the stroke held at :data:`HOVER_STROKE`)."""
    changed = copy.deepcopy(config)
    changed["stroke"].update(HOVER_STROKE)
    period = 1.0 / config["stroke"]["frequency_hz"]
    sim = Simulation(build_robot(changed, FLAPPER), INTEGRATOR, DT, jacobian_every=JACOBIAN_EVERY)
    one_map = period_map_time(sim, period)
    coordinates = ShootingCoordinates(sim)
    base_guess = first_guess(sim, period, coordinates)
    print(f"{'guess':18s} {'shooting':9s} {'converged':>9s} {'iterations':>10s} {'residual':>9s} "
          f"{'period maps':>11s} {'solve / maps':>12s} {'pitch0 (deg)':>12s} {'|x - hover|':>11s}")
    hover = None
    for name, change in GUESSES.items():
        if change is None:
            sim.reset()
            x0 = coordinates.from_state(sim.y)
        else:
            x0 = base_guess.copy()
            for key, value in change.items():
                x0[coordinates.names.index(key)] += value
        for segments in (1, GUESS_SEGMENTS):
            start = time.perf_counter()
            orbit = periodic_orbit(sim, period, x0, segments=segments)
            wall = time.perf_counter() - start
            shot = orbit.shooting
            print(f"{name:18s} {'single' if segments == 1 else f'{segments} parts':9s} {str(shot.converged):>9s} "
                  f"{shot.iterations:10d} {shot.residual:9.1e} {shot.evaluations:11d} "
                  f"{wall / (shot.evaluations * one_map):12.2f} "
                  f"{math.degrees(orbit.initial_state['pitch_rad']):12.2f} "
                  f"{'' if hover is None else f'{np.max(np.abs(shot.x - hover)):.1e}':>11s}", flush=True)
            if shot.converged:
                hover = shot.x if hover is None else hover
                break


def raybot() -> None:
    """RayBot's steady swim by single and multiple shooting, with its swim figures."""
    from sim.swimming import swim_figures

    config = load_toml(RAYBOT)
    for (table, key), value in raybot_module.PERIODIC_CONFIG.items():
        config[table][key] = value
    model = build_robot(config, RAYBOT)
    period = model.metadata["period_s"]
    sim = Simulation(model, "rk4", period / RAYBOT_STEPS)
    one_map = period_map_time(sim, period)
    print(f"one period map: {1e3 * one_map:.1f} ms")
    print(f"{'shooting':9s} {'iterations':>10s} {'residual':>9s} {'period maps':>11s} {'solve (s)':>9s} "
          f"{'solve / maps':>12s} {'|multiplier| max':>16s} {'mean velocity (mm/s)':>24s} {'speed (m/s)':>11s} {'Strouhal':>8s}")
    for segments in (1, RAYBOT_SEGMENTS):
        start = time.perf_counter()
        orbit = periodic_orbit(sim, period, segments=segments)
        wall = time.perf_counter() - start
        shot = orbit.shooting
        ShootingCoordinates(sim).start(shot.x)
        first = sim.outputs()
        t, out = sim.record(3 * RAYBOT_STEPS, 1)
        arrays = {k: np.concatenate([np.asarray(first[k])[None], v]) for k, v in out.items()}
        swim = swim_figures(model, np.concatenate([[0.0], t]), arrays, 1.0 / period)
        velocity = ", ".join(f"{1e3 * v:.1f}" for v in orbit.mean_velocity_m_s)
        print(f"{'single' if segments == 1 else f'{segments} parts':9s} {shot.iterations:10d} {shot.residual:9.1e} "
              f"{shot.evaluations:11d} {wall:9.2f} {wall / (shot.evaluations * one_map):12.2f} "
              f"{np.abs(shot.multipliers).max():16.4f} {velocity:>24s} {swim['steady_speed_m_s']:11.4f} "
              f"{swim['strouhal']:8.3f}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--guesses", action="store_true", help="the starting-guess study of the free hover")
    parser.add_argument("--raybot", action="store_true", help="RayBot's steady swim, single and multiple shooting")
    args = parser.parse_args(argv)
    config = load_toml(FLAPPER)
    if args.guesses:
        guesses(config)
    if args.raybot:
        raybot()
    if args.guesses or args.raybot:
        return 0
    period = 1.0 / config["stroke"]["frequency_hz"]
    tethered = Simulation(build_robot(config, FLAPPER).replace(base_mode="fixed"), INTEGRATOR, DT,
                          jacobian_every=JACOBIAN_EVERY)
    free = Simulation(build_robot(config, FLAPPER), INTEGRATOR, DT, jacobian_every=JACOBIAN_EVERY)
    rows = []
    baseline = period_map_time(tethered, period)
    start = time.perf_counter()
    orbit = periodic_orbit(tethered, period)
    rows.append(("tethered orbit", time.perf_counter() - start, orbit.shooting.evaluations, baseline,
                 orbit.shooting.residual))

    def simulation_for(values):
        changed = copy.deepcopy(config)
        changed["stroke"]["offset_deg"], changed["stroke"]["amplitude_deg"] = map(float, values)
        return Simulation(build_robot(changed, FLAPPER), INTEGRATOR, DT, jacobian_every=JACOBIAN_EVERY)

    baseline = period_map_time(free, period)
    start = time.perf_counter()
    hover = trimmed_orbit(simulation_for, ["offset_deg", "amplitude_deg"], np.array([-20.0, 41.3]), period)
    rows.append(("free hover (trimmed)", time.perf_counter() - start, hover.solve.evaluations, baseline,
                 hover.solve.residual))
    print(f"{'problem':22s} {'solve (s)':>10s} {'period maps':>12s} {'one map (ms)':>13s} "
          f"{'solve / maps':>13s} {'residual':>10s}")
    for name, wall, maps, one, residual in rows:
        print(f"{name:22s} {wall:10.2f} {maps:12d} {1e3 * one:13.2f} {wall / (maps * one):13.2f} {residual:10.1e}")
    print(f"hover: {', '.join(f'{k} = {v:.3f} deg' for k, v in hover.parameters.items())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
