"""The simulator's side of the closed loop (docs/closed-loop.md): the rig's measured wrench replaces the model's.

``mms serve --feedback RIG`` subscribes to ``hw/telemetry`` (the driver's PUB socket) and, per the rig file's
``[feedback]`` table, puts on one body of the simulation (the thorax) the wrench the model gets wrong, as the
rig's force/torque sensor measures it:

    w_fb = (m - m_hat) / scale        (6,) N, N m; body frame, about O_body

- ``m`` (6,): the sensor's channels ``[feedback.wrench] channels`` (fx, fy, fz, mx, my, mz in the body frame at
  O_body: the rig's sensor reads what the body pushes on its mount, times ``scale``);
- ``m_hat`` (6,): what the model predicts that sensor reads: the served robot, tethered at its base (the rig's
  mount), its servo-driven joints following the *measured* servo angles (:class:`ModelTwin`), so the
  difference is the model's error alone, with no servo lag in it, sample by sample;
- the mean of ``m - m_hat`` over the first ``tare_s`` is taken away (sensor zero offsets).

Why not the measured wrench itself in place of the modelled aerodynamic wrench: the tether sensor reads the wings'
inertial and elastic loads too (for the flapper they are most of it); put in place of the aerodynamic wrench alone,
they would be counted twice. Putting the model's error in instead replaces the model's wing load on the body by
the measured one (``model + (measured - model)``) and leaves the coupling the model has (the body moving under the
wings) to the model.

Each measurement is ``age`` old when it is used (its sample time, from the device clock and the host's receipt,
to the server's wall clock) and the rig itself lags the simulation by ``latency_s`` (the servos' lag: the measured
wing is where the simulated one was that long ago). ``compensation = "extrapolate"`` carries it over that lead
with its recent rate (the least-squares slope over ``rate_window_s``), and the force plug-in
(sim/measured_wrench.py) keeps extrapolating inside the period: error at most ``(lead^2 / 2) max|w''|``, for a
sinusoid of angular frequency omega ``(omega lead)^2 / 2`` of its amplitude. Guards: a sample older than
``max_age_s`` on arrival is dropped (counted); no usable sample for ``stale_s`` holds the simulation (the driver's
watchdog then holds the servos: its states stop); a fed-back wrench beyond ``[feedback.guard]``'s bounds, or whose
RMS grows by more than ``max_growth`` over three consecutive windows, is an unstable loop: the simulation holds
and the driver's e-stop is latched through its control socket (the dashboard's E-STOP request).
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections import Counter, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zmq

from sim.config import ConfigError, load_toml, require
from sim.messages import TOPIC_HW_TELEMETRY, MalformedMessage, decode
from sim.network import Endpoints, open_socket
from sim.realtime import warm_up

from firmware_interface.rigs.mcu import PhysicsPlant, PhysicsSource, Rig, load_rig

#: defaults of the [feedback] keys (docs/rigs.md)
DEFAULT_MAX_AGE_S = 0.05
DEFAULT_STALE_S = 0.2
DEFAULT_RATE_WINDOW_S = 0.01
DEFAULT_TARE_S = 0.5
DEFAULT_MAX_FORCE_N = 1.0
DEFAULT_MAX_MOMENT_NM = 0.1
DEFAULT_MAX_GROWTH = 2.0
DEFAULT_GROWTH_WINDOW_S = 0.1
DEFAULT_PERIODS = 8
DEFAULT_HARMONICS = 4
DEFAULT_AVERAGE = "median"
#: consecutive windows whose RMS grows by more than max_growth each: an unstable loop (one window could be a
#: transient: a stroke starting)
GROWTH_WINDOWS = 3
#: the growth watch ignores windows whose RMS is below this fraction of the force bound (sensor noise grows too)
GROWTH_FLOOR = 0.1
#: how long the guard waits for the driver to answer its e-stop request, ms
ESTOP_REPLY_MS = 500
#: realtime: the twin's last steps whose median wall time (s) :meth:`FeedbackLoop.digest` expects the next to take
TWIN_STEPS_TIMED = 8
#: samples kept for the rate estimate, at most (a 20 kHz device over a 0.05 s window; the window's own length
#: trims it first)
MAX_RATE_SAMPLES = 1000


@dataclass(frozen=True)
class FeedbackSpec:
    """A rig's ``[feedback]`` table, read (docs/rigs.md)."""
    channels: tuple[str, ...]      # six [[load]] channels: fx fy fz (N), mx my mz (N m), body frame
    body: int                      # the body the wrench acts on (0: the base)
    scale: float                   # sensor reading per unit of the wrench the body puts on its mount
    max_age_s: float
    stale_s: float
    latency_s: float
    compensation: str              # "extrapolate", "periodic" or "none"
    rate_window_s: float
    period_s: float                # periodic: the drive's period (0: none given)
    periods: int                   # periodic: periods averaged
    harmonics: int                 # periodic: harmonics of the drive kept
    tare_s: float
    max_force_n: float
    max_moment_nm: float
    max_growth: float
    growth_window_s: float
    #: measured joints: (joint name, channel ([[strain]] or [[servos]]), joint rad per channel unit)
    joints: tuple[tuple[str, str, float], ...] = ()
    #: m/s^2: the gravity the rig's sensor is under, which the twin is tethered under (None: the served robot's)
    gravity: float | None = None
    #: telemetry samples by which the sensor's reading is older than the servo angles sampled with it (the twin is
    #: driven that many samples late)
    sensor_delay_samples: int = 0
    #: channels measured but not fed back (their model error is below their noise), in ``channels``' names
    left_out: tuple[str, ...] = ()
    #: periodic: the moving average's window each sample passes before the phase table, s (0: none)
    smoothing_s: float = 0.0
    #: periodic: the table's mean over a period (the drive's zeroth harmonic) fed back with its harmonics
    mean: bool = True
    #: the frame the wrench is applied in: "body" (the body's own, as it moves) or "averaged" (the body's attitude
    #: averaged over the last period_s: :class:`AveragedAttitude`)
    frame: str = "body"
    #: periodic: how each bin's samples over the last ``periods`` periods are averaged (:data:`AVERAGES`)
    average: str = DEFAULT_AVERAGE


def load_feedback(path: Path) -> tuple[Rig, FeedbackSpec]:
    """The rig (checked by its schema, [feedback] included) and its [feedback] table; a one-line ConfigError when
    the rig has none."""
    rig = load_rig(path)
    doc = load_toml(path)
    if "feedback" not in doc:
        raise ConfigError(path, "feedback", "missing: `mms serve --feedback` needs a [feedback] table naming the "
                                            "measured wrench's channels (docs/rigs.md)")
    table, wrench = doc["feedback"], doc["feedback"]["wrench"]
    guard = table.get("guard", {})
    if table.get("compensation") == "periodic" and "period_s" not in table:
        raise ConfigError(path, "feedback.period_s", 'missing: compensation = "periodic" needs the drive\'s period')
    if table.get("frame") == "averaged" and "period_s" not in table:
        raise ConfigError(path, "feedback.period_s", 'missing: frame = "averaged" needs the drive\'s period')
    if table.get("frame") == "averaged" and int(wrench.get("body", 0)) != 0:
        raise ConfigError(path, "feedback.frame", 'got "averaged" with wrench.body '
                                                  f'{wrench["body"]}, expected the base\'s wrench (body 0)')
    get = lambda where, key, default: float(require(where, key, (int, float), path=path, prefix="feedback",  # noqa: E731
                                                    default=default))
    return rig, FeedbackSpec(
        channels=tuple(wrench["channels"]), body=int(wrench.get("body", 0)), scale=float(wrench.get("scale", 1.0)),
        max_age_s=get(table, "max_age_s", DEFAULT_MAX_AGE_S), stale_s=get(table, "stale_s", DEFAULT_STALE_S),
        latency_s=get(table, "latency_s", 0.0), compensation=table.get("compensation", "extrapolate"),
        rate_window_s=get(table, "rate_window_s", DEFAULT_RATE_WINDOW_S),
        period_s=get(table, "period_s", 0.0), periods=int(table.get("periods", DEFAULT_PERIODS)),
        harmonics=int(table.get("harmonics", DEFAULT_HARMONICS)), tare_s=get(table, "tare_s", DEFAULT_TARE_S),
        max_force_n=get(guard, "max_force_n", DEFAULT_MAX_FORCE_N),
        max_moment_nm=get(guard, "max_moment_nm", DEFAULT_MAX_MOMENT_NM),
        max_growth=get(guard, "max_growth", DEFAULT_MAX_GROWTH),
        growth_window_s=get(guard, "growth_window_s", DEFAULT_GROWTH_WINDOW_S),
        joints=tuple((joint, entry["channel"], float(entry.get("scale", 1.0)))
                     for joint, entry in table.get("joints", {}).items()),
        gravity=float(table["gravity"]) if "gravity" in table else None,
        sensor_delay_samples=int(table.get("sensor_delay_samples", 0)), left_out=tuple(wrench.get("left_out", ())),
        smoothing_s=float(table.get("smoothing_s", 0.0)), mean=bool(table.get("mean", True)),
        frame=table.get("frame", "body"), average=table.get("average", DEFAULT_AVERAGE))


def fed_channels(spec: FeedbackSpec) -> np.ndarray:
    """(6,) 1 for a channel of ``spec.channels`` fed back, 0 for one ``spec.left_out``."""
    return np.array([0.0 if name in spec.left_out else 1.0 for name in spec.channels])


class ModelTwin:
    """What the model predicts the rig's sensor reads: the served robot tethered at its base under the rig's
    gravity (``[feedback] gravity``; the served robot's when not given: a weightless simulation of a rig on the
    Earth needs it, or its twin would miss the wings' weight, which moves with the stroke), its servo-driven
    joints following the measured servo angles ``[feedback] sensor_delay_samples`` samples before (the sensor's
    reading is that much older than the servo angles sampled with it) (firmware_interface.plant.SimulatorCore, the
    emulator's physics plant with the model's own parameters instead of the rig's truth)."""

    def __init__(self, rig: Rig, spec: FeedbackSpec, robot: Path, dt: float, integrator: str):
        from firmware_interface.plant import SimulatorCore

        sensors = {name: PhysicsSource("base_wrench", None, k, -spec.scale) for k, name in enumerate(spec.channels)}
        tether = {"base": "fixed"} if spec.gravity is None else {"base": "fixed", "gravity": spec.gravity}
        physics = PhysicsPlant(robot=robot, overrides={"robot": tether}, dt=dt, integrator=integrator,
                               sensors=sensors)
        self.core = SimulatorCore(dataclasses.replace(rig, emulator=dataclasses.replace(rig.emulator,
                                                                                        physics=physics)))
        names = [s.name for s in rig.sensors]
        self.columns = [names.index(name) for name in spec.channels]
        #: the servo inputs (angles, rates) of the last samples, the oldest first: it drives the twin
        self.inputs: deque[tuple[np.ndarray, np.ndarray]] = deque(maxlen=spec.sensor_delay_samples + 1)

    def predict(self, t: float, servo_rad: np.ndarray, servo_rate: np.ndarray) -> np.ndarray:
        """The sensor's predicted channels (6,) at the twin's time ``t`` (s) for the servo angles (n_servo,) rad
        and rates rad/s sampled with it, in the rig's servo order."""
        self.inputs.append((servo_rad, servo_rate))
        self.core.set_inputs(*self.inputs[0])
        self.core.advance_to(t)
        return self.core.read()[self.columns]


def slope(times: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Least-squares slope (6,) of values (n, 6) over times (n,) s; zero below two samples."""
    if times.size < 2:
        return np.zeros(values.shape[1])
    centred = times - times.mean()
    denominator = float(centred @ centred)
    return np.zeros(values.shape[1]) if denominator == 0.0 else centred @ (values - values.mean(0)) / denominator


#: the averages of a phase table's bins over its periods, by name ([feedback] average): the median leaves out a
#: disturbance in fewer than half of the periods; the mean does not, and on the flapper rig's live error (the wings'
#: ringing, the samples' timing) it keeps the harmonics' phase where the median advanced the first by 15-37 deg
#: (docs/closed-loop.md, "The table's median")
AVERAGES = {"median": np.median, "mean": np.mean}


class PhaseTable:
    """The model's error as a function of a periodic drive's phase: ``n`` bins of one drive period, each the
    ``average`` (:data:`AVERAGES`) of the samples that fell in it over the last ``periods`` periods, read through its
    first ``harmonics`` harmonics of the drive frequency (recomputed once per period of samples). A synchronous
    average: what is not locked to the drive (sensor noise) averages out, what is locked but above the harmonics
    kept (the structure's free vibration rung by the servos' steps, which the simulation's smooth drive does not
    have) is cut, and a bin is read one period after it was measured, whatever the loop's latency. The median (the
    default) leaves a disturbance of the rig in fewer than half of the periods out, not spread over the table for
    ``periods`` periods (live, the emulated plant's late steps rang its wings at 100 mN, 10x the stroke's load, for
    0.3 s: 270-370 uN in the harmonics kept, 10x the model's error the loop feeds back; docs/closed-loop.md); the
    mean keeps the harmonics' phase where a noise that is not symmetric in every bin moves the median's."""

    def __init__(self, period_s: float, bin_s: float, periods: int, harmonics: int, smoothing: int = 1,
                 mean: bool = True, average: str = DEFAULT_AVERAGE):
        self.n = max(2, round(period_s / bin_s))
        #: the causal moving average of ``smoothing`` samples each sample passes first (the structure's free
        #: vibration, not locked to the drive, would leave its noise in every bin), and its response (harmonics + 1,)
        #: at the drive's harmonics, divided out of the table's: its gain and delay undone exactly there
        self.window: deque[np.ndarray] = deque(maxlen=max(1, smoothing))
        k = np.arange(harmonics + 1)[:, None]
        self.response = np.exp(-2j * np.pi * k * np.arange(self.window.maxlen)[None, :] / self.n).mean(axis=1)
        self.period_s, self.bin_s, self.periods, self.harmonics = period_s, period_s / self.n, periods, harmonics
        #: the mean over a period kept (else only harmonics 1..harmonics): a free body integrates the mean of what is
        #: fed back, so its noise walks the body's speed away where the harmonics' only shake it
        self.mean = mean
        self.average = AVERAGES[average]     # (periods, n, 6) -> (n, 6): each bin over its periods
        self.history = np.zeros((periods, self.n, 6))   # (periods, n, 6) N, N m: each bin's last samples
        self.values = np.zeros((self.n, 6))          # (n, 6) N, N m: their medians (refreshed with smooth)
        self.smooth = np.zeros((self.n, 6))          # (n, 6) N, N m: the medians' first harmonics
        self.written = np.zeros(self.n, dtype=np.int64)  # samples each bin took: the next one's slot, modulo periods
        self.added = 0

    def add(self, t: float, value: np.ndarray) -> None:
        """One sample (6,) at drive time ``t`` (s), into the bin nearest it (a bin's value is read as at its start)."""
        b = round((t % self.period_s) / self.bin_s) % self.n
        self.window.append(value)
        if len(self.window) < self.window.maxlen:     # the average of a part of the window is not its response
            return
        self.history[self.written[b] % self.periods, b] = np.mean(self.window, axis=0)
        self.written[b] += 1
        self.added += 1
        if self.added % self.n == 0 and self.full():
            self.values = self.average(self.history, axis=0)
            spectrum = np.fft.rfft(self.values, axis=0)
            spectrum[self.harmonics + 1:] = 0.0
            if not self.mean:
                spectrum[0] = 0.0
            spectrum[:self.harmonics + 1] /= self.response[:, None]
            self.smooth = np.fft.irfft(spectrum, self.n, axis=0)

    @property
    def counts(self) -> np.ndarray:
        """Samples each bin holds (n,), up to ``periods``."""
        return np.minimum(self.written, self.periods)

    def full(self) -> bool:
        """Every bin holds its ``periods`` samples: until then the table reads zero (a bin of one or two samples is
        mostly the free vibration and noise the average is there to remove)."""
        return bool(self.written.min() >= self.periods)

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The error (6,) at drive time ``t`` (s), linear between bins, and its rate (6,) per s (zero until the
        table is full)."""
        x = (t % self.period_s) / self.bin_s
        b = int(x) % self.n
        after = (b + 1) % self.n
        rate = (self.smooth[after] - self.smooth[b]) / self.bin_s
        return self.smooth[b] + (x - int(x)) * self.bin_s * rate, rate


def phase_table(spec: FeedbackSpec, sample_s: float) -> PhaseTable:
    """The phase table of a ``[feedback]`` table, for samples every ``sample_s`` (s)."""
    return PhaseTable(spec.period_s, sample_s, spec.periods, spec.harmonics, max(1, round(spec.smoothing_s / sample_s)),
                      spec.mean, spec.average)


class AveragedAttitude:
    """The frame of a held body for a wrench measured on it: the free body's attitude averaged over the last drive
    period. The rig's sensor measures the model's error on a body held still, where its harmonics (mostly the
    wings' inertial and elastic loads, internal to the robot) carry no momentum over a period. Applied in the free
    body's own frame, they turn with its oscillation within the period (the flapper's thorax pitches +-0.6 deg a
    stroke), and the part of them in phase with it becomes a mean force in the world that no reaction on the wings
    balances: the free thorax integrates it (docs/closed-loop.md, "The vertical drift"). Applied in the averaged
    frame, a wrench w (6,) (force N, moment N m, about O_body) is ``C w`` in the body's frame with
    ``C = R^T R_mean`` (3, 3): in the world ``R_mean w`` whatever the oscillation, and its mean over a period is the
    measured mean's alone. ``R_mean``: the mean of the body's world rotations (3, 3) over the last ``period_s``,
    projected onto the rotations (the nearest in the Frobenius norm: the polar factor, from its SVD), refreshed once a
    period: constant within a period, it puts nothing of its own into a period's mean, and the server's 1 ms period
    pays a 3x3 product, not an SVD (~50 us on a busy machine)."""

    def __init__(self, period_s: float):
        self.period_s = period_s
        self.recent: deque[tuple[float, np.ndarray]] = deque()   # (simulated s, world rotation (3, 3))
        self.total = np.zeros((3, 3))
        self.reference: tuple[float, np.ndarray] | None = None   # (simulated s, R_mean (3, 3)) of the last refresh

    def add(self, t: float, rotation: np.ndarray) -> None:
        """The body's world rotation (3, 3) at simulated time ``t`` (s); those a period older are dropped."""
        self.recent.append((t, rotation))
        self.total += rotation
        while t - self.recent[0][0] >= self.period_s:
            self.total -= self.recent.popleft()[1]
        if self.reference is None or t - self.reference[0] >= self.period_s:
            self.reference = (t, self.mean())

    def mean(self) -> np.ndarray:
        """R_mean (3, 3): the rotation nearest the mean of those kept."""
        u, _, vt = np.linalg.svd(self.total / len(self.recent))
        return u @ np.diag([1.0, 1.0, np.linalg.det(u @ vt)]) @ vt

    def held(self, *wrenches: np.ndarray) -> tuple[np.ndarray, ...]:
        """Each wrench (6,) in the averaged frame (the last refresh's R_mean) turned into the newest rotation's body
        frame, ``C w`` (per update of a 1 ms server period: plain 2D products, no stacking)."""
        turn_t = np.dot(self.reference[1].T, self.recent[-1][1])      # C^T (3, 3): rows of three times it
        return tuple(np.dot(w.reshape(2, 3), turn_t).reshape(6) for w in wrenches)


def attitude(spec: FeedbackSpec) -> AveragedAttitude | None:
    """The averaged attitude of a ``[feedback]`` table with ``frame = "averaged"``, else None."""
    return AveragedAttitude(spec.period_s) if spec.frame == "averaged" else None


class GrowthWatch:
    """Flags an unstable loop: the RMS of the fed-back force over consecutive windows of ``window_s`` grows by
    more than ``factor`` GROWTH_WINDOWS times in a row, above ``floor`` N."""

    def __init__(self, window_s: float, factor: float, floor: float):
        self.window_s, self.factor, self.floor = window_s, factor, floor
        self.start: float | None = None
        self.sum_sq, self.count, self.previous, self.rising = 0.0, 0, math.inf, 0

    def add(self, now: float, force: np.ndarray) -> float | None:
        """Add one fed-back force (3,) N at wall time ``now`` (s); the growth factor that tripped, or None."""
        if self.start is None:
            self.start = now
        self.sum_sq += float(force @ force)
        self.count += 1
        if now - self.start < self.window_s:
            return None
        rms = math.sqrt(self.sum_sq / self.count)
        growth = rms / self.previous if self.previous > 0 else math.inf
        self.rising = self.rising + 1 if growth > self.factor and rms > self.floor else 0
        self.previous, self.start, self.sum_sq, self.count = rms, now, 0.0, 0
        return growth if self.rising >= GROWTH_WINDOWS else None


class FeedbackLoop:
    """The feedback of one ``mms serve``: its hw/telemetry subscriber, the model's twin, the compensation and the
    guards. The server calls :meth:`install` on every model it builds, :meth:`start` on every simulation,
    :meth:`open` once its context exists, :meth:`ready` and :meth:`update` before each period (a hold reason or
    None), :meth:`digest` while it waits to publish in realtime, :meth:`wait_fresh` in lockstep, :meth:`status` for
    sim/status, and :meth:`close`."""

    def __init__(self, rig_path: Path, robot_path: Path, log: Callable[[str], None], lockstep: bool = False,
                 clock=time.perf_counter):
        self.rig, self.spec = load_feedback(rig_path)
        self.fed = fed_channels(self.spec)      # (6,) 1 for a channel fed back, 0 for one left out
        #: lockstep: simulated time follows the measurements, not the wall clock: no stale hold (no measurement, no
        #: step; the server's lockstep stall watch reports the silence) and no age to carry the wrench over
        self.lockstep = lockstep
        self.rig_path, self.robot_path, self.log, self.clock = rig_path, robot_path, log, clock
        self.wrench = None                     # the MeasuredWrench of the current model
        self.joint_laws: list = []             # the ExternalMotion of each measured joint ([feedback.joints] order)
        self.recent_joints: deque[tuple[float, np.ndarray]] = deque(maxlen=MAX_RATE_SAMPLES)   # (wall s, rad)
        self.joint_angles = np.zeros(len(self.spec.joints))
        self.twin: ModelTwin | None = None
        self.socket: zmq.Socket | None = None
        self.driver_control: str | None = None
        self.curve = None
        self.context: zmq.Context | None = None
        self.refused: Counter[str] = Counter()
        self.samples = self.used = self.trips = self.holds = 0
        #: usable samples received and not yet through the twin, oldest first: (wall s sampled, device us, servo
        #: rad (n_servo,), load (6,), joint angles (n_joints,))
        self.pending: deque[tuple[float, int, np.ndarray, np.ndarray, np.ndarray]] = deque()
        self.t_device0: int | None = None      # device clock of the twin's t = 0, us
        self.previous: tuple[float, np.ndarray] | None = None   # (twin t s, servo rad) of the last sample
        self.tare_sum, self.tare_count, self.tare_from = np.zeros(6), 0, None
        self.tare: np.ndarray | None = None     # (6,) mean model error while taring; None until done
        self.recent: deque[tuple[float, np.ndarray]] = deque(maxlen=MAX_RATE_SAMPLES)   # (wall s, w (6,))
        self.last_used_at: float | None = None  # wall s (self.clock) of the newest usable sample
        #: wall s (self.clock) at which the driver received the newest hw/telemetry frame, usable or not: a stale hold
        #: says whether the rig's telemetry stopped coming or came and was refused
        self.last_frame_at: float | None = None
        self.refused_at_used = 0                # samples refused in all when the newest usable one was taken
        self.fresh = 0                          # usable samples since the last wait_fresh
        self.applied = np.zeros(6)
        self.closed_at: float | None = None     # simulated time of the first wrench fed back, s
        self.phases = None if self.spec.compensation != "periodic" else \
            phase_table(self.spec, 1.0 / self.rig.telemetry_hz)
        self.sim_clock = (0.0, 0.0)             # (wall s on self.clock, simulated time s) at the last update
        self.attitude = attitude(self.spec)     # frame = "averaged": the base's attitude over the last period
        self.growth = GrowthWatch(self.spec.growth_window_s, self.spec.max_growth,
                                  GROWTH_FLOOR * self.spec.max_force_n)
        self.twin_step_s: deque[float] = deque([0.0], maxlen=TWIN_STEPS_TIMED)   # wall s of the last twin steps

    # ---------------------------------------------------------------- the server's hooks
    def install(self, model):
        """``model`` with the measured-wrench plug-in on the [feedback.wrench] body (a body it does not have is a
        one-line ConfigError)."""
        from sim.laws import ExternalMotion
        from sim.measured_wrench import MeasuredWrench

        bodies = len(model.body_names)
        if not self.spec.body < bodies:
            raise ConfigError(self.rig_path, "feedback.wrench.body",
                              f"got {self.spec.body}, expected a body of the robot, 0..{bodies - 1}")
        self.wrench = MeasuredWrench(self.spec.body)
        actuated, motion_laws = np.array(model.actuated, dtype=bool), dict(model.motion_laws)
        self.joint_laws = []
        for joint, _, _ in self.spec.joints:
            key = f"feedback.joints.{joint}"
            if joint not in model.joint_names:
                raise ConfigError(self.rig_path, key, f"no joint {joint!r} in the robot (joints: "
                                                      f"{', '.join(model.joint_names)})")
            j = model.joint_names.index(joint)
            if actuated[j]:
                raise ConfigError(self.rig_path, key, "the joint is actuated: its motion is the simulation's own "
                                                      "(a measured angle replaces a passive joint's state)")
            actuated[j] = True
            motion_laws[j] = ExternalMotion(float(model.q_rest[j]))
            self.joint_laws.append(motion_laws[j])
        return model.replace(force_models=[*model.force_models, self.wrench], actuated=actuated,
                             motion_laws=motion_laws)

    def start(self, simulation) -> None:
        """The model's twin, with the simulation's integrator at one step per measurement sample (the sample
        period: the emulator's physics plant's own step; the simulation's step if longer), built once; a rig joint
        the robot lacks, or a passive one, is a one-line ConfigError."""
        if self.twin is None:
            dt = max(simulation.dt, 1.0 / self.rig.telemetry_hz)
            self.twin = ModelTwin(self.rig, self.spec, self.robot_path, dt, simulation.integrator)
            # its kernels compiled (or loaded) now, not at the first measurement: that would stall the loop
            warm_up(self.twin.core.simulation, dt, lambda text: self.log(f"feedback model twin {text}"))

    def open(self, context: zmq.Context, endpoints: Endpoints) -> None:
        self.context, self.driver_control, self.curve = context, endpoints.driver_control, endpoints.curve
        self.socket = open_socket(context, zmq.SUB, endpoints.driver_pub, bind=False, curve=endpoints.curve,
                                  what="driver.pub", options={zmq.LINGER: 0})
        self.socket.setsockopt(zmq.SUBSCRIBE, TOPIC_HW_TELEMETRY.encode())

    def close(self) -> None:
        if self.socket is not None and not self.socket.closed:
            self.socket.close()

    def ready(self) -> bool:
        """The first measurements are in and tared: the loop can close (until then simulated time waits, and every
        sample received is taken at once; after, :meth:`update` takes them a few per period)."""
        self._drain()
        if self.tare is None:
            self._step_twin(len(self.pending))
        return self.tare is not None

    def wait_fresh(self, timeout_s: float, most: int) -> int:
        """Lockstep: wait up to ``timeout_s`` for measurements; how many usable samples arrived that were not yet
        counted (at most ``most``: the others are counted by the next calls)."""
        if self.fresh == 0 and self.socket is not None:
            self.socket.poll(max(0, int(timeout_s * 1000)))
        self._drain()
        self._step_twin(len(self.pending))
        taken = min(self.fresh, most)
        self.fresh -= taken
        return taken

    def digest(self, deadline: float) -> None:
        """Realtime, while the server waits to publish a state it has ready: queued samples through the twin until
        ``deadline`` (s on this loop's clock: that state's due time) less one step (the median of the last
        TWIN_STEPS_TIMED). A frame's samples arrive together (8 on the flapper rig, each a twin step of ~0.2 ms live);
        stepped between a publication and the next state's readiness, with the loop's one-state lookahead, they
        made that state late: 2-10 % of the deadlines idle (docs/closed-loop.md)."""
        self._drain()
        while self.pending and self.clock() + float(np.median(self.twin_step_s)) < deadline:
            started = self.clock()
            self._step_twin(1)
            self.twin_step_s.append(self.clock() - started)

    def update(self, simulation, t: float) -> str | None:
        """Take the queued measurements (realtime: those beyond one telemetry frame, a backlog :meth:`digest` did
        not take), set the plug-in's wrench from simulated time ``t`` (s) on; a reason to hold the simulation, or
        None."""
        now = self.clock()
        self.sim_clock = (now, t)
        self._drain()
        self._step_twin(len(self.pending) if self.lockstep else len(self.pending) - self.rig.samples_per_frame)
        if self.tare is None or self.last_used_at is None:
            return None
        age = 0.0 if self.lockstep else now - self.last_used_at
        if age > self.spec.stale_s:
            return self._hold(f"feedback stale: no usable hw/telemetry for {age:.3f} s (stale_s "
                              f"{self.spec.stale_s:g} s; {self._since_used(now)}); the driver's watchdog holds the "
                              "servos", simulation)
        if self.phases is not None:
            value, rate = self.phases.at(t)
        else:
            rate = np.zeros(6)
            if self.spec.compensation == "extrapolate":
                rate = slope(np.array([w for w, _ in self.recent]), np.array([v for _, v in self.recent]))
            value = self.recent[-1][1] + (age + self.spec.latency_s) * rate
        force, moment = float(np.linalg.norm(value[:3])), float(np.linalg.norm(value[3:]))
        if force > self.spec.max_force_n or moment > self.spec.max_moment_nm:
            return self._trip(f"feedback unstable: fed-back wrench |F| {force:.4g} N, |M| {moment:.4g} N m beyond "
                              f"[feedback.guard] max_force_n {self.spec.max_force_n:g} N / max_moment_nm "
                              f"{self.spec.max_moment_nm:g} N m", simulation)
        growth = self.growth.add(now, value[:3])
        if growth is not None:
            return self._trip(f"feedback unstable: the fed-back force's RMS grew {growth:.3g}x per "
                              f"{self.spec.growth_window_s:g} s window {GROWTH_WINDOWS} times in a row "
                              f"([feedback.guard] max_growth {self.spec.max_growth:g})", simulation)
        if self.closed_at is None and (self.phases is None or self.phases.full()):
            self.closed_at = t
        if self.attitude is not None:
            self.attitude.add(t, simulation.base_pose[:3, :3])
            value, rate = self.attitude.held(value, rate)
        self._apply(simulation, t, value, rate)
        self._set_joints(age)
        return None

    def _since_used(self, now: float) -> str:
        """What came from the rig since the newest usable sample: whether its telemetry stopped (the rig, its link or
        the driver stalled) or arrived and was refused, and why."""
        refused = sum(self.refused.values()) - self.refused_at_used
        frame_age = now - self.last_frame_at
        came = f"the newest frame received by the driver {frame_age:.3f} s ago"
        if refused == 0:
            return came
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self.refused.items()))
        return f"{came}, {refused} samples refused since (in all: {reasons})"

    def _set_joints(self, age: float) -> None:
        """The measured joints' angles (rad), carried over the age and latency with their rate (as "extrapolate";
        "none": as measured), into their motion laws (held over the next integration call)."""
        if not self.joint_laws:
            return
        angles = self.recent_joints[-1][1]
        rates = np.zeros(angles.size)
        if self.spec.compensation != "none":
            rates = slope(np.array([w for w, _ in self.recent_joints]), np.array([a for _, a in self.recent_joints]))
        self.joint_angles = angles + (age + self.spec.latency_s) * rates
        for law, angle, rate in zip(self.joint_laws, self.joint_angles, rates):
            law.set(angle, rate)

    def status(self) -> dict[str, Any]:
        age = None if self.last_used_at is None else self.clock() - self.last_used_at
        return {"rig": str(self.rig_path), "ready": self.tare is not None, "samples": self.samples,
                "used": self.used, "refused": dict(self.refused), "age_s": -1.0 if age is None else age,
                "wrench": self.applied.tolist(), "trips": self.trips, "holds": self.holds,
                "tare": [] if self.tare is None else self.tare.tolist(), "joints": self.joint_angles.tolist(),
                "frame_age_s": -1.0 if self.last_frame_at is None else self.clock() - self.last_frame_at,
                "closed_at_s": -1.0 if self.closed_at is None else self.closed_at}

    # ---------------------------------------------------------------- inside
    def _apply(self, simulation, t: float, value: np.ndarray, rate: np.ndarray) -> None:
        self.wrench.set(t, value, rate)
        simulation.inputs_changed()
        self.applied = value

    def _hold(self, reason: str, simulation) -> str:
        self.holds += 1
        self._apply(simulation, simulation.t, np.zeros(6), np.zeros(6))
        return reason

    def _trip(self, reason: str, simulation) -> str:
        self.trips += 1
        reply = self._estop_driver()
        return self._hold(f"{reason}; driver e-stop: {reply}", simulation)

    def _estop_driver(self) -> str:
        """Latch the driver's e-stop through its control socket, as the dashboard's E-STOP does; what it said."""
        import msgpack

        sock = open_socket(self.context, zmq.REQ, self.driver_control, bind=False, curve=self.curve,
                           what="driver.control", options={zmq.LINGER: 0})
        try:
            sock.send(msgpack.packb({"cmd": "estop"}))
            if not sock.poll(ESTOP_REPLY_MS):
                return f"no answer from {self.driver_control} within {ESTOP_REPLY_MS} ms"
            reply = msgpack.unpackb(sock.recv(), raw=False)
            return "latched" if isinstance(reply, dict) and reply.get("ok") else f"refused ({reply!r})"
        finally:
            sock.close()

    def _drain(self) -> None:
        while self.socket is not None:
            try:
                frames = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                topic, payload = decode(frames)
                self._take(payload)
            except MalformedMessage:
                self.refused["telemetry:malformed"] += 1
            except _Refused as exc:
                self.refused[f"telemetry:{exc}"] += 1

    def _take(self, payload: dict[str, Any]) -> None:
        """One hw/telemetry frame: its samples young enough onto the queue of the twin (bad frames refused)."""
        servo, load, angles, device_us = _frame_arrays(payload, self.rig, self.spec)
        received = self.clock() - (time.time_ns() - payload["host_ns"]) * 1e-9   # host receipt on self.clock
        self.last_frame_at = max(received, self.last_frame_at or -math.inf)
        if self.t_device0 is None:
            self.t_device0 = int(device_us[0])
        for k in range(device_us.size):
            self.samples += 1
            sampled = received - (device_us[-1] - device_us[k]) * 1e-6
            if self.clock() - sampled > self.spec.max_age_s:
                self.refused["telemetry:too_old"] += 1
                continue
            self.pending.append((sampled, int(device_us[k]), servo[k], load[k], angles[k]))

    def _step_twin(self, most: int) -> None:
        """The oldest ``most`` queued samples through the twin into the residual track. A sample that grew older than
        ``max_age_s`` while queued is dropped first, as on arrival: the queue holds a frame's backlog (realtime), so a
        sample young enough on arrival could otherwise reach the twin up to a frame's period past the limit."""
        while self.pending and self.clock() - self.pending[0][0] > self.spec.max_age_s:
            self.pending.popleft()                    # the oldest first: the queue is in sampling order
            self.refused["telemetry:too_old"] += 1
            most -= 1                                 # counted in the call's share: the backlog left is the caller's
        for _ in range(min(most, len(self.pending))):
            sampled, device_us, servo, load, angles = self.pending.popleft()
            t_twin = (device_us - self.t_device0) * 1e-6
            if self.previous is not None and t_twin <= self.previous[0]:
                self.refused["telemetry:time_not_increasing"] += 1
                continue
            rate = np.zeros(servo.size) if self.previous is None else \
                (servo - self.previous[1]) / (t_twin - self.previous[0])
            self.previous = (t_twin, servo)
            error = (load - self.twin.predict(t_twin, servo, rate)) / self.spec.scale
            self._track(sampled, t_twin, error, angles)

    def _track(self, sampled: float, t_twin: float, error: np.ndarray, angles: np.ndarray) -> None:
        if self.tare is None:
            self.tare_sum += error
            self.tare_count += 1
            self.tare_from = t_twin if self.tare_from is None else self.tare_from
            if t_twin - self.tare_from >= self.spec.tare_s:
                self.tare = self.tare_sum / self.tare_count
                self.log(f"feedback: tared over {self.tare_count} samples ({t_twin:.3f} s): the model's error at "
                         f"rest {np.round(self.tare, 6).tolist()} (N, N m) taken away; the loop closes")
            return
        self.used += 1
        self.fresh += 1
        fed = self.fed * (error - self.tare)
        self.recent.append((sampled, fed))
        if self.phases is not None:      # the simulated time whose drive the rig's wing followed at this sample
            wall, t = self.sim_clock
            self.phases.add(t + (sampled - wall) - self.spec.latency_s, fed)
        self.recent_joints.append((sampled, angles))
        for recent in (self.recent, self.recent_joints):
            while sampled - recent[0][0] > self.spec.rate_window_s:       # only the rate's window is kept
                recent.popleft()
        self.last_used_at = max(sampled, self.last_used_at or -math.inf)
        self.refused_at_used = sum(self.refused.values())


class _Refused(ValueError):
    """A telemetry frame the loop cannot use; its message is the reason counted."""


def _frame_arrays(payload: dict[str, Any], rig: Rig,
                  spec: FeedbackSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(servo (s, n_servo) rad in the rig's order, load (s, 6) in the feedback channels' order, the measured joints'
    angles (s, n_joints) rad, device_us (s,)) of a hw/telemetry payload; _Refused naming the reason otherwise."""
    try:
        servo_names, load_names = list(payload["servo_names"]), list(payload["load_names"])
        strain_names = list(payload["strain_names"])
        servo = np.asarray(payload["servo_rad"], dtype=float)
        load = np.asarray(payload["load"], dtype=float)
        strain = np.asarray(payload["strain"], dtype=float)
        device_us = np.asarray(payload["device_us"], dtype=np.int64)
        int(payload["host_ns"])
    except (KeyError, TypeError, ValueError):
        raise _Refused("malformed") from None
    try:
        columns = [strain[:, strain_names.index(channel)] if channel in strain_names else
                   servo[:, servo_names.index(channel)] for _, channel, _ in spec.joints]
        angles = np.column_stack(columns) * np.array([scale for _, _, scale in spec.joints]) if columns else \
            np.zeros((len(servo), 0))
        servo = servo[:, [servo_names.index(s.name) for s in rig.servos]]
        load = load[:, [load_names.index(name) for name in spec.channels]]
    except (ValueError, IndexError):
        raise _Refused("channels") from None
    if device_us.ndim != 1 or device_us.size == 0 or servo.shape[0] != device_us.size or \
            load.shape[0] != device_us.size:
        raise _Refused("shape")
    if not (np.isfinite(servo).all() and np.isfinite(load).all() and np.isfinite(angles).all()):
        raise _Refused("non_finite")
    return servo, load, angles, device_us
