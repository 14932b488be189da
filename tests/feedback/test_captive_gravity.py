"""What keeps the closed loop's pitch rate from the truth (docs/closed-loop.md, "What keeps the pitch rate from the
truth"): the rig's gravity. The demo's thorax flies weightless (hil.experiment.closed_loop.FREE) while the rig
stands on the Earth; the wings' weight acts on the deflections the flapping gives them, which the truth's stiffer
roots keep smaller than the model's: a stroke-periodic pitching moment in the held error that the weightless free
flight does not have. Checked against an independent
construction of the free flight's error (the model's thorax moved along the truth's free path: the wrench its
support needs is what the loop must add) and through the loop offline on a weightless rig; and what would take it
out: not a slow pass (the gravity's part scales with the stroke speed squared), an upside-down mount's average."""
from __future__ import annotations

import copy

import numpy as np

from hil.experiment.closed_loop import COMPONENTS, captive_loop, gravity_mismatch, held_error, stroke_harmonics, truth_config
from hil.experiment.demo import RIGS, write_demo_robot
from sim.config import load_toml

PERIOD_S, HARMONICS = 0.2, 4
G = 9.81
FX, MY = 0, 4
WY = COMPONENTS["wy"]
#: the held error's harmonics under the rig's gravity against the weightless ones, |E_g - E_0| / |E_0|: my 0.430,
#: fx 0.0004 (fitted over 1-2 s, 1-3 s and 2-8 s of held runs from rest: the same to 3 digits). Bands: my +-0.03,
#: fx below 0.01
MY_MISMATCH, MY_MISMATCH_BAND, FX_MISMATCH_MAX = 0.43, 0.03, 0.01


def test_the_rigs_gravity_changes_the_held_pitching_moment_error_not_the_forward_force(tmp_path):
    robot = write_demo_robot(RIGS["flapper"], tmp_path / "flapper.toml", closed_loop=True)
    config = load_toml(robot)
    truth = truth_config(config, RIGS["flapper"].rig)
    mismatch = gravity_mismatch(config, truth, robot, G, PERIOD_S, HARMONICS)
    assert abs(mismatch[MY] - MY_MISMATCH) < MY_MISMATCH_BAND and mismatch[FX] < FX_MISMATCH_MAX, mismatch
    assert not gravity_mismatch(config, truth, robot, None, PERIOD_S, HARMONICS).any()   # the simulation's own
    assert not gravity_mismatch(config, truth, robot, 0.0, PERIOD_S, HARMONICS).any()


def _free_error(config: dict, truth: dict, robot, duration_s: float) -> tuple[np.ndarray, np.ndarray]:
    """The error the loop must feed back in free flight, exactly: the truth flies free from rest; the model's
    thorax is moved along the truth's path (an imposed base) with the model's own wings; the support's wrench on
    it (n, 6) is what the free model lacks to fly the truth's path (the truth needs none). The truth is recorded at
    half the model's step (the model's RK4 stages), its acceleration by central differences."""
    from sim.model import CallableBaseMotion
    from sim.robots import build_robot
    from sim.simulation import Simulation
    from sim.spatial import quat_to_matrix

    dt = config["simulation"]["dt"]
    free = Simulation(build_robot(truth, robot), integrator="rk4", dt=dt / 2)
    free.reset()
    times, outputs = free.record(round(duration_s / free.dt))
    twist = np.vstack([np.zeros(6), outputs["base_twist"]])      # from rest at t = 0, then every dt / 2
    acceleration = np.gradient(twist, dt / 2, axis=0)
    poses = np.tile(np.eye(4), (twist.shape[0], 1, 1))
    poses[1:, :3, :3] = [quat_to_matrix(q) for q in outputs["base_quat"]]
    poses[1:, :3, 3] = outputs["base_pos"]

    def path(t: float):
        k = round(t / (dt / 2))
        return poses[k], twist[k], acceleration[k]

    model = build_robot(config, robot)
    moved = Simulation(model.replace(base_mode="imposed", base_motion=CallableBaseMotion(path)), integrator="rk4",
                       dt=dt)
    moved.reset()
    at, wrench = moved.record(round(duration_s / dt))
    return at, wrench["base_wrench"]


#: s: the free flight from rest, the harmonics fitted after the first second (the wings' ringing from rest)
FREE_S, SETTLE_S = 2.0, 1.0
#: the weightless held error's harmonics against the free flight's, |E_held - E_free| / |E_free|: measured fx 0.023,
#: my 0.034 (over 2-8 s of runs from the loop's closing at 2 s instead: 0.027, 0.034). Band: 0.05
CAPTIVE_BAND = 0.05


def test_weightless_the_held_error_is_the_free_flights(tmp_path):
    """The captive approximation itself holds for the demo's dense thorax: the error measured held (weightless) has
    the harmonics of the one the free flight asks for, within 2.3-3.4 %; the rig's gravity (above) changes my's by 43 %."""
    robot = write_demo_robot(RIGS["flapper"], tmp_path / "flapper.toml", closed_loop=True)
    config = load_toml(robot)
    truth = truth_config(config, RIGS["flapper"].rig)
    errors = {}
    for name, (times, error) in {"free": _free_error(config, truth, robot, FREE_S),
                                 "held": held_error(config, truth, robot, 0.0, FREE_S)}.items():
        fitted = times > SETTLE_S
        errors[name] = stroke_harmonics(times[fitted], error[fitted], PERIOD_S, HARMONICS)
    for channel in (FX, MY):
        free, held = errors["free"][:, channel], errors["held"][:, channel]
        assert np.linalg.norm(held - free) < CAPTIVE_BAND * np.linalg.norm(free), (channel, free, held)


#: s: the loop offline (the simulation's stroke, exact sensors, a table of 2 strokes to close at 0.92 s)
LOOP_S, LOOP_PERIODS = 3.0, 2
#: the first harmonic of the pitch rate's departure from the open loop, closed over truth (complex: gain and phase).
#: On the rig under the Earth's gravity: 0.500 at -28 deg (here), 0.485 at -31 deg (4 s, 3 strokes), 0.44-0.48 at
#: -27 to -30 deg (8 s, 8 strokes, the simulation's stroke or the rig's servos); as the held error predicts (its my
#: harmonic 1 under gravity is 0.52 at -30 deg of the weightless one). Weightless: 1.016 at +1 deg, 0.985 at 0 deg,
#: 0.92 at +5 deg (the same runs). Bands: gain 0.40-0.60 and phase -40 to -20 deg; 0.85-1.15 and +-10 deg
ON_EARTH = ((0.40, 0.60), (-40.0, -20.0))
WEIGHTLESS = ((0.85, 1.15), (-10.0, 10.0))


def test_on_a_weightless_rig_the_loop_follows_the_pitch_rates_first_harmonic(tmp_path):
    """The flapper rig's loop offline (hil.experiment.closed_loop.captive_loop) as shipped and with its plant and
    twin weightless (the rig's file with gravity 0 in [emulator.physics.overrides.robot] and [feedback]): the pitch
    rate's first harmonic, which the loop feeds back, is followed about half-way and 30 deg late on the Earth, and
    whole weightless."""
    robot = write_demo_robot(RIGS["flapper"], tmp_path / "flapper.toml", closed_loop=True)
    shipped = RIGS["flapper"].rig
    text = shipped.read_text().replace('robot = "../robots/', f'robot = "{shipped.parent.parent}/robots/')
    weightless = text.replace('base = "fixed"           # the tether holds the thorax', 'base = "fixed"\ngravity = 0.0')
    weightless = weightless.replace("gravity = 9.81           # m/s^2", "gravity = 0.0           # m/s^2")
    assert weightless.count("gravity = 0.0") == 2
    (tmp_path / "weightless.toml").write_text(weightless)
    for rig, ((low, high), (earliest, latest)) in ((shipped, ON_EARTH), (tmp_path / "weightless.toml", WEIGHTLESS)):
        run = captive_loop(robot, rig, LOOP_S, seed=None, periods=LOOP_PERIODS)
        moved, departure = (run.closed - run.open_loop)[:, WY], (run.truth - run.open_loop)[:, WY]
        first = stroke_harmonics(run.times, np.column_stack([moved, departure]), PERIOD_S, HARMONICS)[0]
        gain = first[0] / first[1]
        assert low < abs(gain) < high and earliest < np.degrees(np.angle(gain)) < latest, (rig.name, gain)


#: the slow pass of issue 21: the stroke at 1 / SLOWDOWN of its frequency, held under the rig's gravity, one slow
#: period after a quarter of one (the wings' start from rest). Measured on my's harmonic 1, the slow pass over the
#: gravity's part of the held error at full speed: 0.0096 at +3 deg (N = 10; through the loop's own path, the
#: servo-driven plant and twin on the 1 ms samples: 0.0094 at +6 deg), and times N^2: 0.951, 0.962, 0.973, 0.976 at
#: +4, +3, +2, +2 deg for N = 5, 10, 20, 40. Bands: below 0.02 (what a slow pass subtracted as measured would take
#: away), and times N^2 0.90-1.02 within 10 deg
SLOWDOWN, SLOW_SETTLE = 10, 0.25
SLOW_CAPTURED_MAX, SPEED_SQUARED, SPEED_SQUARED_PHASE_DEG = 0.02, (0.90, 1.02), 10.0
#: rad: the passive joints of the model held at rest under the rig's gravity, measured 2e-19 at the stroke's middle
#: (here) and 4.9e-16 at its start (rounding): the wing hangs in the vertical stroke plane, its chord below its
#: leading edge, where its weight neither bends nor twists it
AT_REST_SAG_MAX = 1e-12
#: Hz: the wing's first mode, a root joint (bend1_r or twist2_r: the same mode) displaced by 0.01 rad on the held
#: wing at rest, in air, from its zero crossings over 0.5 s: measured 46.3 (model) and 50.2 (truth) at the demo's
#: 0.5 ms step and at 0.2 ms. Band +-1 Hz: well above the stroke's harmonics (5-20 Hz), so a pose-locked load would
#: be followed quasi-statically; the slow pass fails for another reason
FIRST_MODE_HZ, FIRST_MODE_BAND_HZ = {"model": 46.3, "truth": 50.2}, 1.0


def _gravity_part(config: dict, truth: dict, robot) -> np.ndarray:
    """The held error's stroke harmonics (H, 6) under the rig's gravity less those weightless (fitted as
    gravity_mismatch fits them)."""
    harmonics = []
    for gravity in (G, 0.0):
        times, error = held_error(config, truth, robot, gravity, 2.0)
        fitted = times > 1.0
        harmonics.append(stroke_harmonics(times[fitted], error[fitted], PERIOD_S, HARMONICS))
    return harmonics[0] - harmonics[1]


def test_a_slow_pass_sees_the_rigs_gravity_part_only_at_the_speed_squared(tmp_path):
    """Issue 21's remedy, a slow pass measuring the static, pose-locked part of the error to take it out in flight,
    has nothing to measure on the flapper: its wings hang in the stroke plane at every stroke angle, and the weight
    acts only on the deflections the flapping gives them (proportional to the stroke speed squared). The slow pass
    holds the gravity's part at 1 / N^2 of its size; the wing's first mode, far above the stroke's harmonics, is not
    why."""
    from sim.robots import build_robot
    from sim.simulation import Simulation

    robot = write_demo_robot(RIGS["flapper"], tmp_path / "flapper.toml", closed_loop=True)
    config = load_toml(robot)
    truth = truth_config(config, RIGS["flapper"].rig)
    part = _gravity_part(config, truth, robot)
    slow = []
    for robot_config in (config, truth):
        slow.append(copy.deepcopy(robot_config))
        slow[-1]["stroke"]["frequency_hz"] /= SLOWDOWN
    slow_period_s = SLOWDOWN * PERIOD_S
    times, error = held_error(*slow, robot, G, (1.0 + SLOW_SETTLE) * slow_period_s)
    swept = times > SLOW_SETTLE * slow_period_s
    captured = stroke_harmonics(times[swept] / SLOWDOWN, error[swept], PERIOD_S, HARMONICS)[0, MY] / part[0, MY]
    scaled = captured * SLOWDOWN ** 2
    assert abs(captured) < SLOW_CAPTURED_MAX, captured
    assert SPEED_SQUARED[0] < abs(scaled) < SPEED_SQUARED[1], scaled
    assert abs(np.degrees(np.angle(scaled))) < SPEED_SQUARED_PHASE_DEG, scaled
    for name, robot_config in (("model", config), ("truth", truth)):
        at_rest = copy.deepcopy(robot_config)
        at_rest["robot"] |= {"base": "fixed", "gravity": G}
        at_rest["stroke"]["amplitude_deg"] = 0.0
        model = build_robot(at_rest, robot)
        for displaced in (None, "bend1_r"):
            simulation = Simulation(model, integrator="rk4", dt=at_rest["simulation"]["dt"])
            q = np.zeros(len(model.joint_names))
            if displaced is not None:
                q[model.joint_names.index(displaced)] = 0.01
            simulation.reset(q=q)
            times, outputs = simulation.record(round(0.5 / simulation.dt))
            if displaced is None:
                assert np.abs(outputs["q"]).max() < AT_REST_SAG_MAX, name
                continue
            angle = outputs["q"][:, model.joint_names.index(displaced)]
            crossings = times[np.flatnonzero(np.sign(angle[1:]) != np.sign(angle[:-1]))]
            frequency = (crossings.size - 1) / 2.0 / (crossings[-1] - crossings[0])
            assert abs(frequency - FIRST_MODE_HZ[name]) < FIRST_MODE_BAND_HZ, (name, frequency)


#: the held error with the rig's gravity reversed in the thorax's frame (the rig mounted upside down) and upright,
#: averaged, against the weightless one, relative over harmonics 1-4: measured my 1.5e-4, fx 1.1e-6; with half the
#: gravity the gravity's part is 0.500-0.501 of the whole at 0 deg on every my harmonic (linear in g). Band: 1e-3
UPSIDE_DOWN_MAX = 1e-3
#: the gravity's part with half the gravity over the whole, per my harmonic (complex): measured 0.500-0.501 at 0 deg.
#: Band: 0.005
LINEAR_BAND = 0.005


def test_the_gravity_part_is_odd_in_the_gravity_an_upside_down_mount_averages_it_out(tmp_path):
    """What would take the rig's gravity out instead: a second measurement with the rig mounted upside down. The
    gravity's part of the held error is linear in g (half the gravity, half the part), so the two measurements'
    average is the weightless error."""
    from sim.robots import build_robot
    from sim.simulation import Simulation

    robot = write_demo_robot(RIGS["flapper"], tmp_path / "flapper.toml", closed_loop=True)
    config = load_toml(robot)
    truth = truth_config(config, RIGS["flapper"].rig)

    def held(gravity_z: float) -> np.ndarray:
        """The held error's stroke harmonics (H, 6) with the thorax-frame gravity (0, 0, gravity_z) m/s^2."""
        wrenches = []
        for robot_config in (config, truth):
            held_config = copy.deepcopy(robot_config)
            held_config["robot"] |= {"base": "fixed"}
            model = build_robot(held_config, robot).replace(gravity=(0.0, 0.0, gravity_z))
            simulation = Simulation(model, integrator="rk4", dt=held_config["simulation"]["dt"])
            simulation.reset()
            times, outputs = simulation.record(round(2.0 / simulation.dt))
            wrenches.append(outputs["base_wrench"])
        fitted = times > 1.0
        return stroke_harmonics(times[fitted], (wrenches[0] - wrenches[1])[fitted], PERIOD_S, HARMONICS)

    upright, upside_down, weightless, half = held(-G), held(G), held(0.0), held(-G / 2.0)
    linear = (half[:, MY] - weightless[:, MY]) / (upright[:, MY] - weightless[:, MY])
    assert np.allclose(linear, 0.5, atol=LINEAR_BAND), linear
    for channel in (FX, MY):
        average = (upright[:, channel] + upside_down[:, channel]) / 2.0
        off = np.linalg.norm(average - weightless[:, channel]) / np.linalg.norm(weightless[:, channel])
        assert off < UPSIDE_DOWN_MAX, (channel, off)
    assert np.linalg.norm(upright[:, MY] - weightless[:, MY]) > 0.3 * np.linalg.norm(weightless[:, MY])
