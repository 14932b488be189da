"""What the emulated rig's sensors feel: the plant between the servo horns and the strain gauges / load cell.

Two kinds, chosen by the rig file's ``[emulator] plant``:

* :class:`KinematicPlant`: every sensor is a fixed linear function of the servo angles (the rig's
  ``[emulator.kinematic]`` table). Cheap, exact, for protocol and driver tests.
* :class:`SimulatorPlant`: the MMS simulator itself (``sim.simulation.Simulation``, docs/sim-api.md) runs the
  rig's robot with its "truth" overrides (stiffer wings, tethered base, ...). The servo-driven joints follow
  the emulated servo angles through :class:`sim.laws.ExternalMotion`; the sensors read the simulator's
  outputs (passive joint strains, the base (tether) wrench, ...). It runs in its own process (its own core
  and interpreter lock), paced to the wall clock, so the emulator's sampling loop only reads its newest
  outputs from shared memory.

Both give, for the current servo angles ``(n_servo,)`` rad, a dict sensor name -> true physical value in the
sensor channel's unit (before the sensor model adds gain error, offset, drift, noise and quantisation).
"""
from __future__ import annotations

import collections
import math
import os
import multiprocessing as mp
import queue
import signal
import sys
import time

import numpy as np

from sim.config import ConfigError, load_toml
from sim.processes import die_with_parent, set_realtime_priority
from sim.realtime import warm_up

from firmware_interface.rigs.mcu import Rig, deep_merge


class KinematicPlant:
    """``value[sensor] = bias + sum_k coefficient[sensor, k] * servo_angle[k]`` (rig ``[emulator.kinematic]``);
    sensors the table does not name read 0."""

    kind = "kinematic"

    def __init__(self, rig: Rig):
        self.sensor_names = [s.name for s in rig.sensors]
        servo_index = {name: k for k, name in enumerate(rig.servo_names)}
        # (n_sensor, n_servo) sensor unit per rad; (n_sensor,) sensor unit
        self.coefficients = np.zeros((len(self.sensor_names), len(rig.servos)))
        self.bias = np.zeros(len(self.sensor_names))
        for i, name in enumerate(self.sensor_names):
            source = rig.emulator.kinematic.get(name)
            if source is None:
                continue
            self.bias[i] = source.bias
            for servo, c in source.coefficients.items():
                self.coefficients[i, servo_index[servo]] = c

    def start(self) -> None:
        """Nothing runs in the background."""

    def stop(self) -> None:
        """Nothing to stop."""

    def sense(self, servo_rad: np.ndarray, servo_rate: np.ndarray, t: float) -> np.ndarray:
        """True sensor values ``(n_sensor,)`` for the servo angles ``(n_servo,)`` rad (rates and the sample time
        unused)."""
        return self.bias + self.coefficients @ servo_rad

    def status(self) -> dict:
        return {"plant": self.kind}


class SimulatorCore:
    """The rig's robot in the MMS simulator, with the servo inputs and the sensor readers wired (no threads).

    ``set_inputs(servo_rad (n_servo,) rad, servo_rate (n_servo,) rad/s)`` drives the servo-driven joints;
    ``advance_to(t)`` steps; ``read()`` gives the true sensor values ``(n_sensor,)`` in the channels' units.
    """

    def __init__(self, rig: Rig):
        from sim.laws import ExternalMotion
        from sim.robots import build_robot
        from sim.simulation import Simulation

        physics = rig.emulator.physics
        if physics is None:
            raise ConfigError(rig.path, "emulator.physics", "missing, the physics plant needs it")
        config = deep_merge(load_toml(physics.robot), physics.overrides)
        model = build_robot(config, physics.robot)
        joint_index = {name: j for j, name in enumerate(model.joint_names)}
        self.servo_index = {name: k for k, name in enumerate(rig.servo_names)}
        # (servo index, input law, joint angle -> input value factor) for every servo-driven joint
        self.drives = []
        motion_laws = dict(model.motion_laws)
        for m in rig.joints:
            if m.joint not in joint_index:
                raise ConfigError(rig.path, "joints", f"joint {m.joint!r} is not in robot {physics.robot} "
                                  f"(joints: {', '.join(model.joint_names)})")
            j = joint_index[m.joint]
            if not model.actuated[j]:
                raise ConfigError(rig.path, "joints", f"joint {m.joint!r} is passive in robot {physics.robot}; "
                                  "a servo can only drive an actuated joint")
            law, factor = _external_input(motion_laws[j])
            if law is None:
                law, factor = ExternalMotion(), 1.0
                motion_laws[j] = law
            self.drives.append((self.servo_index[m.servo], law, factor, m))
        self.model = model.replace(motion_laws=motion_laws)
        passive_position = {int(j): k for k, j in enumerate(np.flatnonzero(~self.model.actuated))}
        # (sensor index, signal, component index, scale)
        self.readers = []
        for i, sensor in enumerate(rig.sensors):
            source = physics.sensors.get(sensor.name)
            if source is None:
                continue
            if source.joint is not None:
                if source.joint not in joint_index:
                    raise ConfigError(rig.path, f"emulator.physics.sensors.{sensor.name}.joint",
                                      f"no joint {source.joint!r} in robot {physics.robot}")
                j = joint_index[source.joint]
                if source.signal == "strain" and j not in passive_position:
                    raise ConfigError(rig.path, f"emulator.physics.sensors.{sensor.name}.joint",
                                      f"joint {source.joint!r} is actuated: it has no strain (read its q or tau)")
                component = passive_position[j] if source.signal == "strain" else j
            else:
                component = source.index
            self.readers.append((i, source.signal, component, source.scale))
        self.n_sensor = len(rig.sensors)
        self.simulation = Simulation(self.model, integrator=physics.integrator, dt=physics.dt)
        self.simulation.reset()
        self.steps = 0
        neutral = np.array([s.neutral_rad for s in rig.servos])
        self._input_t = self.simulation.t
        self._input_rate = np.zeros(len(self.drives))   # joint rates last set, rad/s
        self.set_inputs(neutral, np.zeros_like(neutral))

    def read(self) -> np.ndarray:
        outputs = self.simulation.outputs()
        values = np.zeros(self.n_sensor)
        for i, key, component, scale in self.readers:
            values[i] = scale * float(np.asarray(outputs[key])[component])
        return values

    def set_inputs(self, servo_rad: np.ndarray, servo_rate: np.ndarray) -> None:
        """Drive the joints from the servos; the joint acceleration is the servo rate's change since the last
        call (backward difference over simulated time): the wings' inertial loads come from it."""
        elapsed = self.simulation.t - self._input_t
        for index, (k, law, factor, joint_map) in enumerate(self.drives):
            rate = factor * servo_rate[k] / (joint_map.direction * joint_map.gain)
            accel = (rate - self._input_rate[index]) / elapsed if elapsed > 0 else 0.0
            law.set(factor * joint_map.joint_angle(servo_rad[k]), rate, accel)
            self._input_rate[index] = rate
        self._input_t = self.simulation.t

    def advance_to(self, t: float) -> None:
        sim = self.simulation
        steps = int(math.floor((t - sim.t) / sim.dt + 0.5))
        if steps > 0:
            self.steps += sim.advance(steps * sim.dt)


# Layout of the shared array between the emulator and the plant process (float64 slots): sim time, steps, wall clock
# at go, wall at publish, the newest sample's device time (s) and count, the count of the last sample stepped ("samples"
# clock)
_T, _STEPS, _WALL_START, _WALL, _SAMPLE_T, _SAMPLE_SEQ, _DONE_SEQ, _HEADER = 0, 1, 2, 3, 4, 5, 6, 7
#: How long the emulator waits for the plant process to build its robot, s (numba compiles on first use).
PLANT_START_TIMEOUT_S = 300.0
#: Simulated time per slice between input/output exchanges with the emulator, s.
PLANT_SLICE_S = 1e-3
#: "samples" clock: how long the plant waits for a sample before it looks at its stop flag again, s
SAMPLE_WAIT_S = 0.05
#: "samples" clock: how long the emulator waits at most for the plant's step of the previous sample, s (longer: the
#: reading is a sample older, counted in status()["late"])
STEP_WAIT_S = 2e-3
#: s: how long stop() waits for the plant process to end, after the stop signal and again after SIGTERM
PLANT_STOP_TIMEOUT_S = 5.0
#: "samples" clock: the samples kept for the plant, newest last (device time s, servo angles, rates): a plant that
#: fell behind steps through each missed sample's angles. Jumping to the newest instead (each missed step held at the
#: newest angles) struck the wings: a plant 4 samples late read 124 mN on the flapper's tether, 10x the stroke's
#: load, and its wings rang for 0.3 s (docs/closed-loop.md)
SAMPLE_RING = 64


class Signal:
    """A flag shared between the emulator and its plant process, like ``multiprocessing.Event`` except that
    :meth:`set` never waits. An Event's ``set`` waits until every process blocked in its ``wait`` has woken: a plant
    descheduled inside its wait held the emulator's serial loop until it ran again, and a stopped one (SIGSTOP)
    held it for good. Here ``set`` raises the flag and releases a semaphore; ``wait`` takes the semaphore (or sees
    the flag), ``clear`` lowers the flag and takes the releases not yet taken."""

    def __init__(self, ctx):
        self._flag = ctx.RawValue("b", 0)
        self._wake = ctx.Semaphore(0)

    def set(self) -> None:
        self._flag.value = 1
        self._wake.release()

    def is_set(self) -> bool:
        return bool(self._flag.value)

    def clear(self) -> None:
        self._flag.value = 0
        while self._wake.acquire(False):
            pass

    def wait(self, timeout: float | None = None) -> bool:
        """True once the flag is raised; False when ``timeout`` s passed first."""
        if not self._flag.value:
            self._wake.acquire(timeout=timeout)
        return bool(self._flag.value)


class SimulatorPlant:
    """The MMS simulator as the rig's physics, in its own process (its own core and GIL), paced to the wall clock.

    Servo angles go in and sensor values come out through a shared array; the emulator's serial loop never
    waits for the physics. ``status()["rtf"]`` is the achieved real-time factor (simulated over wall time at
    the last update) and ``lag_s`` how far the simulation was then behind the wall clock: when the simulator
    cannot keep up on this machine the sensors lag (reported; the link is unaffected). A problem building the
    robot (e.g. a joint name of the rig missing in the robot) is raised here as a one-line ConfigError.
    """

    kind = "physics"

    def __init__(self, rig: Rig, rt_priority: int = 0, step_wait_s: float = STEP_WAIT_S):
        ctx = mp.get_context("fork")       # the child inherits the parsed rig; nothing is pickled
        self.n_servo, self.n_sensor = len(rig.servos), len(rig.sensors)
        self._shared = ctx.Array("d", _HEADER + 2 * self.n_servo + self.n_sensor
                                 + SAMPLE_RING * (1 + 2 * self.n_servo))
        self._go, self._stop, self._sampled, self._stepped = (Signal(ctx) for _ in range(4))
        self.clock = rig.emulator.physics.clock if rig.emulator.physics is not None else "wall"
        #: "samples" clock: readings older than one sample (the plant had not stepped in time); any clock: readings
        #: not refreshed because the plant held the shared lock past STEP_WAIT_S
        self.late = 0
        self.step_wait_s = step_wait_s
        #: samples (device time s, angles rad, rates rad/s) not yet in the shared ring: the lock was held
        self._unwritten: collections.deque[np.ndarray] = collections.deque(maxlen=SAMPLE_RING)
        self._messages = ctx.Queue()
        self._process = ctx.Process(target=_plant_process, name="mms-emulate-plant", daemon=True,
                                    args=(rig, self._shared, self._go, self._stop, self._sampled, self._stepped,
                                          self._messages, os.getpid(), rt_priority))
        self._process.start()
        try:
            message = self._messages.get(timeout=PLANT_START_TIMEOUT_S)
        except queue.Empty:
            self.stop()
            raise RuntimeError("the physics plant did not start") from None
        if message[0] == "config":
            self.stop()
            raise ConfigError(*message[1:])
        if message[0] == "error":
            self.stop()
            raise RuntimeError(f"physics plant: {message[1]}")
        self.joint_names = message[1]
        self.error: str | None = None
        #: (n_sensor,) the last reading handed out, sensor units; first the plant's at rest (written before "ready")
        self._newest = self._slots()[2].copy()

    def start(self) -> None:
        self._go.set()

    def stop(self) -> None:
        self._stop.set()
        self._go.set()
        self._sampled.set()
        self._process.join(timeout=PLANT_STOP_TIMEOUT_S)
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(timeout=PLANT_STOP_TIMEOUT_S)
        if self._process.is_alive():    # a stopped process (SIGSTOP) never acts on SIGTERM; at exit it would be
            self._process.kill()        # joined for ever
            self._process.join()

    def _slots(self):
        a = self._shared.get_obj()
        n, m = self.n_servo, self.n_sensor
        return (np.frombuffer(a, dtype=np.float64, count=n, offset=8 * _HEADER),
                np.frombuffer(a, dtype=np.float64, count=n, offset=8 * (_HEADER + n)),
                np.frombuffer(a, dtype=np.float64, count=m, offset=8 * (_HEADER + 2 * n)))

    def sense(self, servo_rad: np.ndarray, servo_rate: np.ndarray, t: float) -> np.ndarray:
        """Hand the servo angles ``(n_servo,)`` rad and rates rad/s of the sample at device time ``t`` (s) to the
        simulator; return its newest sensor values ``(n_sensor,)`` (with the "samples" clock: the previous
        sample's, when the plant kept up). Never waits longer than ``step_wait_s`` for the plant, twice: for its
        step ("samples" clock) and for the shared lock (a plant descheduled or stopped while holding it): the
        sample is then kept here and written with the next one, and the reading is the last one (counted late)."""
        late = self.clock == "samples" and self._go.is_set() and not self._wait_for_step()
        self._unwritten.append(np.concatenate(([t], servo_rad, servo_rate)))
        lock = self._shared.get_lock()
        if lock.acquire(timeout=self.step_wait_s):
            try:
                self._write_unwritten(servo_rad, servo_rate)
            finally:
                lock.release()
        else:
            late = True
        self.late += late
        if self.clock == "samples":
            self._sampled.set()
        return self._newest.copy()

    def _write_unwritten(self, servo_rad: np.ndarray, servo_rate: np.ndarray) -> None:
        """Under the shared lock: the newest angles and rates, every unwritten sample into the ring, the newest
        sensor values out."""
        angle, speed, values = self._slots()
        angle[:] = servo_rad
        speed[:] = servo_rate
        header = self._shared.get_obj()     # the raw array: the lock is held
        ring = _sample_ring(self._shared, self.n_servo, self.n_sensor)
        while self._unwritten:
            row = self._unwritten.popleft()
            header[_SAMPLE_T] = row[0]
            header[_SAMPLE_SEQ] += 1
            ring[int(header[_SAMPLE_SEQ]) % SAMPLE_RING] = row
        self._newest = values.copy()

    def _wait_for_step(self) -> bool:
        """"samples" clock: wait up to ``step_wait_s`` until the plant has stepped through every sample written;
        False when it has not (the reading is late). The step counts are read without the lock (aligned doubles, one
        writer each: the emulator's sample count, the plant's done count) and the flag is lowered before each
        check, so a flag left raised by an earlier, late step never passes for this one."""
        header = self._shared.get_obj()
        deadline = time.monotonic() + self.step_wait_s
        while True:
            self._stepped.clear()
            if header[_DONE_SEQ] >= header[_SAMPLE_SEQ]:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._stepped.wait(remaining)

    def status(self) -> dict:
        header = self._shared.get_obj()     # without the lock, which a stopped plant may hold: three aligned doubles
        t, steps, wall = header[_T], header[_STEPS], header[_WALL]
        while self.error is None:
            try:
                message = self._messages.get_nowait()
            except queue.Empty:
                break
            if message[0] == "error":
                self.error = message[1]
        return {"plant": self.kind, "sim_t": t, "rtf": t / wall if wall > 0 else 0.0, "lag_s": wall - t,
                "steps": int(steps), "error": self.error, "alive": self._process.is_alive(), "clock": self.clock,
                "late": self.late}


def _plant_process(rig: Rig, shared, go, stop, sampled, stepped, messages, emulator_pid: int,
                   rt_priority: int) -> None:
    """The plant process: build the robot, report, then keep the simulation level with the wall clock (under
    SCHED_FIFO at ``rt_priority`` after the warm-up when it is not 0: the plant stands in for the rig's physics,
    which a busy host never delays)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)          # the emulator decides when we stop
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # an emulator killed outright (SIGKILL, e.g. by a driver restarting it) cannot stop us: the kernel does
    die_with_parent(emulator_pid)
    set_realtime_priority(0, "mms emulate (physics plant)")   # the warm-up's compile never at the emulator's class
    try:
        core = SimulatorCore(rig)
    except ConfigError as exc:
        messages.put(("config", exc.path, exc.key, exc.message))
        return
    except Exception as exc:
        messages.put(("error", f"{type(exc).__name__}: {exc}"))
        return
    # compile (or load) the kernels now, not in the first slice: a compile there is a lag of the rig's truth
    warmed = warm_up(core.simulation, PLANT_SLICE_S,
                     lambda text: print(f"mms emulate: physics plant {text}", file=sys.stderr, flush=True))
    if rt_priority:     # not for a plant slower than real time: it would never sleep
        set_realtime_priority(rt_priority, "mms emulate (physics plant)", warmed["rtf_cpu"])
    n, m = len(rig.servos), len(rig.sensors)
    a = shared.get_obj()
    angle = np.frombuffer(a, dtype=np.float64, count=n, offset=8 * _HEADER)
    speed = np.frombuffer(a, dtype=np.float64, count=n, offset=8 * (_HEADER + n))
    values = np.frombuffer(a, dtype=np.float64, count=m, offset=8 * (_HEADER + 2 * n))
    with shared.get_lock():
        angle[:] = [s.neutral_rad for s in rig.servos]
        values[:] = core.read()
    messages.put(("ready", list(core.model.joint_names)))
    go.wait()
    wall_start = time.monotonic()
    with shared.get_lock():
        shared[_WALL_START] = wall_start
    sim = core.simulation
    if rig.emulator.physics.clock == "samples":
        _follow_samples(core, shared, stop, sampled, stepped, wall_start, _sample_ring(shared, n, m), values,
                        messages)
        return
    try:
        while not stop.is_set():
            wall = time.monotonic() - wall_start
            if wall < sim.t + sim.dt:
                stop.wait(min(sim.t + sim.dt - wall, 2e-3))
                continue
            with shared.get_lock():
                servo_rad, servo_rate = angle.copy(), speed.copy()
            core.set_inputs(servo_rad, servo_rate)
            core.advance_to(min(wall, sim.t + max(PLANT_SLICE_S, sim.dt)))
            out = core.read()
            with shared.get_lock():
                values[:] = out
                shared[_T] = sim.t
                shared[_STEPS] = core.steps
                shared[_WALL] = time.monotonic() - wall_start
    except Exception as exc:  # a diverging simulation must not take the serial link down: report it
        messages.put(("error", f"{type(exc).__name__}: {exc}"))


def _sample_ring(shared, n_servo: int, n_sensor: int) -> np.ndarray:
    """The shared array's sample ring (SAMPLE_RING, 1 + 2 n_servo): per sample its device time s, servo angles rad,
    rates rad/s; sample ``seq`` in row ``seq % SAMPLE_RING``."""
    return np.frombuffer(shared.get_obj(), dtype=np.float64, count=SAMPLE_RING * (1 + 2 * n_servo),
                         offset=8 * (_HEADER + 2 * n_servo + n_sensor)).reshape(SAMPLE_RING, 1 + 2 * n_servo)


def _follow_samples(core: SimulatorCore, shared, stop, sampled, stepped, wall_start: float, ring: np.ndarray,
                    values, messages) -> None:
    """The "samples" clock: for each telemetry sample, the servo angles and rates it carries drive one advance to its
    device time (from the first sample's), and the sensors are read there. The emulator reads them at its next
    sample, having waited up to STEP_WAIT_S for this step: one sample late, which a model's twin stepped on the same
    samples reproduces exactly (docs/closed-loop.md); a plant that fell behind steps through each sample it missed,
    from the ring (``ring`` (SAMPLE_RING, 1 + 2 n_servo), :func:`_sample_ring`), and reads after the newest."""
    sim, done, t_first = core.simulation, 0, None
    n_servo = (ring.shape[1] - 1) // 2
    try:
        while not stop.is_set():
            if not sampled.wait(SAMPLE_WAIT_S):
                continue
            sampled.clear()
            with shared.get_lock():
                seq = int(shared[_SAMPLE_SEQ])
                rows = ring[[k % SAMPLE_RING for k in range(max(done + 1, seq - SAMPLE_RING + 1), seq + 1)]]
            if seq == done:
                continue
            for t_sample, servo_rad, servo_rate in zip(rows[:, 0], rows[:, 1:1 + n_servo], rows[:, 1 + n_servo:]):
                t_first = t_sample if t_first is None else t_first
                core.set_inputs(servo_rad, servo_rate)
                core.advance_to(t_sample - t_first)
            out = core.read()
            done = seq
            with shared.get_lock():
                values[:] = out
                shared[_DONE_SEQ] = seq
                shared[_T] = sim.t
                shared[_STEPS] = core.steps
                shared[_WALL] = time.monotonic() - wall_start
            stepped.set()
    except Exception as exc:  # a diverging simulation must not take the serial link down: report it
        messages.put(("error", f"{type(exc).__name__}: {exc}"))


def _external_input(law):
    """The ExternalMotion that sets an actuated joint's motion, and the factor from the joint angle to its value:
    the law itself (factor 1), or the ``source`` of a linear mechanism ``r = ratio * source`` (factor 1/ratio;
    e.g. RayBot's tail built with ``tail_drive.source = "external"``, whose caudal spring reads the same
    source). (None, None) when the law is not driven from outside (the plant then replaces it)."""
    from sim.laws import ExternalMotion

    if isinstance(law, ExternalMotion):
        return law, 1.0
    source, ratio = getattr(law, "source", None), getattr(law, "ratio", None)
    if isinstance(source, ExternalMotion) and isinstance(ratio, (int, float)) and ratio != 0:
        return source, 1.0 / ratio
    return None, None


def make_plant(rig: Rig, kind: str | None = None, rt_priority: int = 0):
    """The plant the rig file (or ``kind``) asks for; a physics plant's process runs under SCHED_FIFO at
    ``rt_priority`` (0: the normal scheduler)."""
    kind = kind or rig.emulator.plant
    if kind == "physics":
        return SimulatorPlant(rig, rt_priority)
    return KinematicPlant(rig)
