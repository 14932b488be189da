"""The emulator's physics plant: `mms emulate --plant physics` runs the MMS simulator behind the serial link.

A double pendulum (configs/robots/pendulum.toml, URDF) on a rig: a servo drives the shoulder, a "strain gauge"
reads the passive elbow, a load cell the support wrench. Held at a servo angle, the readings must match the
closed-form static equilibrium (elbow spring against gravity; the support carrying the weight and its moment).
The plant tests run behind the Python device logic and behind the rig's C firmware (`mms emulate --firmware`).
"""
from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import numpy as np
from scipy.optimize import brentq

from firmware_interface import protocol as p
from firmware_interface.link import DeviceLink
from firmware_interface.rigs.mcu import load_rig
from hil.testing import process_alive, wait_for

ROOT = Path(__file__).resolve().parents[2]
PENDULUM = ROOT / "configs" / "robots" / "pendulum.toml"
G = 9.81                          # m/s^2, pendulum.toml's gravity
ROD_MASS, ROD_LENGTH = 1.0, 0.5   # kg, m (pendulum.urdf: two uniform rods)
SUPPORT_MASS = 5.0                # kg (pendulum.urdf: the fixed support link)
ELBOW_K = 2.0                     # N m/rad (pendulum.toml)
SETTLED_RAD = 1e-3                # elbow within this of its equilibrium, rad
STILL_RAD = 2e-5                  # and moving less than this over STILL_FRAMES telemetry frames, rad
#: frames (15 ms each) the elbow must be still over: one frame can catch a slow residual swing at its turning point,
#: where its dynamic loads (about 1 % of the static moment, seen under load) are largest
STILL_FRAMES = 3
#: SCHED_FIFO priority of the emulator and its plant (`mms emulate --rt-priority`)
PLANT_RT_PRIORITY = 1

RIG = f"""
[rig]
name = "pendulum-rig"
protocol_version = 1
[serial]
port = "/dev/null"
baud = 460800
[rates]
command_hz = 200
telemetry_hz = 200
samples_per_frame = 4
[watchdog]
timeout_s = 1.0
[[servos]]
name = "shoulder_servo"
unit = "us"
center = 1500.0
gain = 636.62
direction = -1
min_raw = 500.0
max_raw = 2500.0
min_rad = -1.2
max_rad = 1.2
max_rate_rad_s = 10.0
[[joints]]
joint = "shoulder"
servo = "shoulder_servo"
direction = 1
gain = 1.0
[[strain]]
name = "elbow"
unit = "rad"
gain = 1e-6
[[load]]
name = "fz"
unit = "N"
gain = 1e-5
[[load]]
name = "my"
unit = "N m"
gain = 1e-5
[emulator]
plant = "physics"
[emulator.servo]
max_rate_rad_s = 6.0
time_constant_s = 0.01
[emulator.physics]
robot = "{PENDULUM}"
dt = 1e-3
# a well-damped elbow so the test settles quickly (the rig's "truth" differs from the robot file)
[emulator.physics.overrides.joints.elbow]
law = {{ type = "viscoelastic", k = {ELBOW_K}, mu = 1.0, r0 = 0.0 }}
[emulator.physics.sensors.elbow]
signal = "strain"
joint = "elbow"
[emulator.physics.sensors.fz]
signal = "base_wrench"
index = 2
[emulator.physics.sensors.my]
signal = "base_wrench"
index = 4
"""


def equilibrium(theta1: float) -> tuple[float, float, float]:
    """Closed form: elbow angle theta2 with k theta2 = -m g (l/2) sin(theta1 + theta2) (joints about +y, rods
    hanging along -z); the support's vertical force (total weight) and its moment about y (minus the weights'
    moment about the support origin: a weight m g at x gives m g x about +y)."""
    c = ROD_LENGTH / 2
    theta2 = brentq(lambda t2: ELBOW_K * t2 + ROD_MASS * G * c * math.sin(theta1 + t2), -math.pi / 2, math.pi / 2)
    x_upper = -c * math.sin(theta1)
    x_lower = -ROD_LENGTH * math.sin(theta1) - c * math.sin(theta1 + theta2)
    fz = (SUPPORT_MASS + 2 * ROD_MASS) * G
    my = -ROD_MASS * G * (x_upper + x_lower)
    return theta2, fz, my


def test_physics_plant_matches_static_equilibrium(tmp_path, emulate_device):
    rig_path = tmp_path / "pendulum_rig.toml"
    rig_path.write_text(RIG)
    rig = load_rig(rig_path)
    servo = rig.servos[0]
    # the plant under SCHED_FIFO, as on a rig's host (docs/headroom.md): starved by a busy machine, a plant under the
    # normal scheduler froze for 55 ms and more while the emulator went on sampling it, and its readings of a moving
    # state passed for a still one (12 samples bit for bit equal, the moment 2.6 % off, load 15)
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(rig_path), *emulate_device,
                             "--rt-priority", str(PLANT_RT_PRIORITY)],
                            cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/"), proc.stderr.read()
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=30) is not None
        # at neutral: hanging straight, the support carries the weight and no moment
        rest = link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry), timeout_s=10).message.samples[-1]
        _, fz0, _ = equilibrium(0.0)
        assert abs(rig.load[0].to_value(rest.load[0]) - fz0) < 1e-3 * fz0
        for theta1 in (0.5, -0.3):
            deadline = time.monotonic() + 20
            theta2, fz, my = equilibrium(theta1)
            settled = None
            recent: deque = deque(maxlen=STILL_FRAMES)       # the last frames' samples
            while time.monotonic() < deadline:
                link.send(p.Setpoints((servo.to_raw(theta1),)))
                packet = link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry), timeout_s=1.0)
                if packet is None:
                    continue
                recent.append(packet.message.samples)
                samples = [s for frame in recent for s in frame]
                elbow = np.array([rig.strain[0].to_value(s.strain[0]) for s in samples])
                at_target = all(abs(servo.to_rad(s.servo[0]) - theta1) < 1e-4 for s in samples)
                if len(recent) == STILL_FRAMES and at_target and np.all(np.abs(elbow - theta2) < SETTLED_RAD) \
                        and np.ptp(elbow) < STILL_RAD:
                    settled = samples[-1]
                    break
            assert settled is not None, f"elbow never settled at {theta2:.4f} rad for shoulder {theta1} rad"
            assert abs(rig.load[0].to_value(settled.load[0]) - fz) < 1e-3 * fz
            assert abs(rig.load[1].to_value(settled.load[1]) - my) < 1e-2 * abs(my)
        link.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    stderr = proc.stderr.read()
    assert '"plant": "physics"' in stderr and '"error": null' in stderr


def test_physics_rig_naming_a_missing_joint_is_one_line(tmp_path):
    rig_path = tmp_path / "bad_pendulum_rig.toml"
    rig_path.write_text(RIG.replace('joint = "shoulder"', 'joint = "hip"'))
    result = subprocess.run([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(rig_path)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"mms emulate: error: {rig_path}: joints: joint 'hip' is not")


FLAPPER_RIG = ROOT / "configs" / "rigs" / "flapper_rig.toml"
THORAX_HALF_AXES = (28e-3, 8.5e-3, 8.5e-3)   # m (configs/robots/flapper.toml)
THORAX_DENSITY, WING_DENSITY = 800.0, 1400.0  # kg/m^3
WING_SPAN, WING_ROOT_CHORD, WING_THICKNESS = 70e-3, 31.5e-3, 0.1e-3   # m, quarter-ellipse planform
FLAPPER_G = 9.81


def test_flapper_rig_physics_plant(emulate_device):
    """The shipped flapper rig with the simulator behind it: at neutral the tether carries the robot's weight
    (ellipsoid thorax + two quarter-elliptic wing plates, closed form); flapping the two strokes mirror-
    symmetrically gives equal true root strains, so the left gauge reads its 2 % gain error against the right."""
    rig = load_rig(FLAPPER_RIG)
    a, b, c = THORAX_HALF_AXES
    mass = (THORAX_DENSITY * 4.0 / 3.0 * math.pi * a * b * c
            + 2 * WING_DENSITY * WING_THICKNESS * math.pi * WING_SPAN * WING_ROOT_CHORD / 4.0)
    fz_truth = rig.emulator.sensors["fz"]
    expected_fz = fz_truth.gain * (-mass * FLAPPER_G) + fz_truth.offset     # the tether pulled down
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(FLAPPER_RIG),
                             "--plant", "physics", *emulate_device], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        path = proc.stdout.readline().strip()
        assert path.startswith("/dev/"), proc.stderr.read()
        link = DeviceLink(path, rig.baud)
        assert link.request(p.Hello(), p.DeviceInfo, timeout_s=30) is not None
        fz = rig.load[[s.name for s in rig.load].index("fz")]
        readings = []
        deadline = time.monotonic() + 30
        while len(readings) < 400 and time.monotonic() < deadline:
            for packet in link.poll():
                if isinstance(packet.message, p.Telemetry):
                    readings += [fz.to_value(s.load[2]) for s in packet.message.samples]
        assert len(readings) >= 400
        # the wings sag and ring after release; their mean support force is still the weight
        assert abs(np.mean(readings) - expected_fz) < 0.02 * mass * FLAPPER_G

        start = time.monotonic()
        samples = []
        while time.monotonic() - start < 3.0:
            angle = 0.6 * math.sin(2 * math.pi * 4.0 * (time.monotonic() - start))   # peak 15 rad/s
            link.send(p.Setpoints(tuple(s.to_raw(angle) for s in rig.servos)))
            packet = link.wait_for(lambda pk: isinstance(pk.message, p.Telemetry), timeout_s=1.0)
            if packet is not None:
                samples += packet.message.samples
        right = np.array([rig.strain[0].to_value(s.strain[0]) for s in samples])
        left = np.array([rig.strain[2].to_value(s.strain[2]) for s in samples])
        noise_r = rig.emulator.sensors["root_bend_r"].noise_std
        assert np.std(right) > 10 * noise_r                                           # the wings do bend
        # left = gain_l * truth + noise, right = truth + noise: regress with the errors-in-variables correction
        # (the right gauge's known noise variance taken out of its variance)
        slope = np.cov(right, left)[0, 1] / (np.var(right, ddof=1) - noise_r ** 2)
        assert abs(slope - rig.emulator.sensors["root_bend_l"].gain) < 0.01
        link.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def test_an_emulator_killed_during_its_start_leaves_no_plant_running():
    """SIGKILL cannot be passed on: the forked physics plant asks the kernel to end it with its emulator (it used
    to keep computing, one leaked plant per emulator a driver restarted under load)."""
    proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(FLAPPER_RIG), "--plant",
                             "physics"], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        plant = wait_for(lambda: _children(proc.pid), timeout_s=60.0, what="the plant process")[0]
    finally:
        proc.kill()
        proc.wait(10)
    wait_for(lambda: not process_alive(plant), timeout_s=10.0, what=f"plant {plant} to end with its emulator")


def test_rt_priority_puts_the_firmware_loop_and_its_plant_under_sched_fifo(tmp_path):
    """`mms emulate --rt-priority N`: the emulated firmware's loop and, after its warm-up, the physics plant run
    under SCHED_FIFO at N (they stand in for hardware and physics, which a busy host never delays); without the
    permission each says so in one line and runs normally."""
    log = tmp_path / "emulate.stderr"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "hil.cli", "emulate", "--rig", str(FLAPPER_RIG), "--plant",
                                 "physics", "--rt-priority", "7"], cwd=ROOT, stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout.readline().decode().startswith("/dev/")          # the port is up: the plant is ready
        plant = wait_for(lambda: _children(proc.pid), timeout_s=60.0, what="the plant process")[0]

        def fifo_or_refused(pid: int, who: str):
            if os.sched_getscheduler(pid) == os.SCHED_FIFO:
                return os.sched_getparam(pid).sched_priority == 7
            return f"{who}: cannot use SCHED_FIFO priority 7" in log.read_text()
        wait_for(lambda: fifo_or_refused(proc.pid, "mms emulate"), timeout_s=30.0, what="the firmware loop's class")
        wait_for(lambda: fifo_or_refused(plant, "mms emulate (physics plant)"), timeout_s=60.0,
                 what="the plant's class after its warm-up", logs=(log,))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


#: s: a shared lock that the running plant holds for microseconds a sample is not free after this long only when the
#: plant was stopped holding it
PLANT_LOCK_TAKEN_S = 1.0


def test_a_samples_clock_plant_held_back_steps_through_every_sample_it_missed():
    """The "samples" clock's plant process stopped (SIGSTOP) for 10 of 200 samples of a 5 Hz stroke, its shared lock
    held all that time (as by a plant stopped inside it): the emulator's sense() never blocks (each call returns
    within its step waits), reads stale values meanwhile (counted late), and once resumed the plant steps through
    each missed sample's own servo angles (the sample ring), not the newest one held over them: every later reading
    not counted late equals that of the same plant stepped in-process on every sample, to rounding, and a late one
    equals an earlier sample's (jumping to the newest angles had struck the wings, 124 mN on the tether,
    docs/closed-loop.md). Before: a plant stopped holding the lock held the emulator for good (a CI run hung), and a
    step flag left raised by a late step passed a reading one sample old as on time (1 run in 3-6 failed here)."""
    import dataclasses
    import threading

    from firmware_interface.plant import SimulatorCore, SimulatorPlant

    rig = load_rig(FLAPPER_RIG)
    rig = dataclasses.replace(rig, emulator=dataclasses.replace(
        rig.emulator, physics=dataclasses.replace(rig.emulator.physics, clock="samples")))
    # waits of 50 ms, not the emulator's 2 ms: a plant descheduled on a busy CI machine is then rarely late, so most
    # readings after the resume are compared exactly (late ones are checked too, against the earlier samples)
    reference, plant = SimulatorCore(rig), SimulatorPlant(rig, step_wait_s=0.05)
    angle = lambda t: np.full(len(rig.servos), 0.3 * math.sin(2 * math.pi * 5.0 * t))  # noqa: E731
    rate = lambda t: np.full(len(rig.servos), 0.3 * 2 * math.pi * 5.0 * math.cos(2 * math.pi * 5.0 * t))  # noqa: E731
    expected, read, late = [], [], []
    held, release = threading.Event(), threading.Event()

    def hold_the_lock():            # the lock as a stopped plant would hold it: from another thread than sense()'s
        lock = plant._shared.get_lock()
        # the plant takes it for microseconds a sample; when SIGSTOP caught it inside (once in CI, under load), the
        # stopped plant holds it itself, which is the case this test makes: held either way
        taken = lock.acquire(timeout=PLANT_LOCK_TAKEN_S)
        held.set()
        release.wait()
        if taken:
            lock.release()

    holder = threading.Thread(target=hold_the_lock, daemon=True)
    try:
        plant.start()
        for k in range(200):
            t = 1e-3 * k
            if k == 80:
                os.kill(plant._process.pid, signal.SIGSTOP)
                holder.start()
                assert held.wait(5.0)
            late_before = plant.late
            read.append(plant.sense(angle(t), rate(t), t))
            late.append(plant.late > late_before)
            if k == 90:
                release.set()
                holder.join()
                os.kill(plant._process.pid, signal.SIGCONT)
            expected.append(reference.read())           # the reading one sample late: before this sample's step
            reference.set_inputs(angle(t), rate(t))
            reference.advance_to(t)
    finally:
        release.set()
        plant.stop()
    assert all(late[80:91])
    for k in range(100, 200):       # the plant caught up within a few samples (it steps 15x faster than real time)
        if late[k]:
            assert any(np.allclose(read[k], expected[j], rtol=1e-9, atol=1e-12) for j in range(k)), k
        else:
            assert np.allclose(read[k], expected[k], rtol=1e-9, atol=1e-12), k
    assert sum(late[100:]) < 50, sum(late[100:])    # the evidence: most readings compared exactly
