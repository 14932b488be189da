"""``mms serve``: run a robot's simulation in real time and publish its state over ZeroMQ (issue 4).

One process, one thread, one loop (no data races): the loop integrates the simulation, publishes
``sim/state`` on a PUB socket at the publish rate (default 1 kHz, decoupled from the integration step ``dt``:
each publish period integrates the ``dt`` steps that fit in it), publishes ``sim/status`` at 1 Hz, and serves a
REP control socket between publications through a :class:`zmq.Poller`. Three clock modes:

- ``realtime``: paced to the wall clock on an absolute schedule: state ``k`` (since the last reset) is due at
  ``anchor + k period``. States are integrated ahead of their due time into a queue of up to ``--lookahead``
  (default 5 ms of states; one state with a closed loop, whose measurements must be fresh), held, and each is
  published at its due time, so that one slow period or a short preemption is absorbed by the queue. A reset or a
  ``set`` discards the queue (the next state published is the new t = 0); a pause keeps it (pausing changes
  nothing in the dynamics: the queued states are the ones that follow), and a resume re-anchors the clock at the
  last state published. A state not ready by its due time (``not_ready``), or ready but published more than half
  a period late (``published_late``: the process was not scheduled in time), is a deadline miss: counted by
  reason, reported in ``sim/status`` and on stderr, never silent. When the lag exceeds ``--max-lag`` the schedule
  is re-anchored (reported on stderr) rather than bursting to catch up.
- ``fast``: as fast as possible (slow subscribers drop messages; their ``seq`` gaps show it).
- ``lockstep``: each ``step`` request advances ``n`` publish periods, publishing every state, and is answered
  after the last one. When no request comes for ``--stall-timeout`` seconds the state becomes ``stalled``:
  a ``sim/status`` goes out at once and a line is printed on stderr, so a dead peer is never a silent hang.

With a closed loop (``mms serve --feedback RIG``, docs/closed-loop.md: hil/feedback/loop.py hands it in, since
``sim`` imports nothing of the rig's packages) the model carries the loop's measured-wrench plug-in, each period
first asks the loop for its measurements (a guard's reason pauses the simulation), simulated time waits at 0 until
the loop is ready, and lockstep advances one period per usable measurement instead of per step request.

The control protocol (pure bytes <-> requests) is in :mod:`sim.server_control` (on :mod:`sim.control`, shared
with the driver and the recorder); docs/messages.md documents
both the topics and the commands.
"""
from __future__ import annotations

import argparse
import gc
import math
import signal
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import zmq

from sim.cli_options import SERVER_RT_PRIORITY
from sim.config import ConfigError, load_toml, require
from sim.messages import SCHEMA_VERSION, SCHEMAS, TOPIC_SIM_STATE, TOPIC_SIM_STATUS, encode, validate
from sim.network import Curve, load_endpoints, open_socket
from sim.processes import (ZMQ_THREAD_PREFIX, fine_timer_slack, leave_realtime_class, realtime_refusal, request_slice,
                           threads_named, zmq_thread_count)
from sim.realtime import warm_up
from sim.control import ControlError, encode_reply, error_reply, one_line
from sim.server_args import DEFAULT_LOOKAHEAD_S, DEFAULT_RATE_HZ
from sim.server_control import COMMANDS, get_what, parse_request, set_arguments, step_count, with_value

IDLE, RUNNING, PAUSED, STALLED, STOPPED = "idle", "running", "paused", "stalled", "stopped"

#: the sim/state arrays taken from Simulation.outputs(), in message order
STATE_ARRAYS = ("q", "qd", "qdd", "tau", "strain", "base_pos", "base_quat", "base_twist", "base_wrench",
                "ext_wrench")

STATUS_PERIOD_S = 1.0               # sim/status every second of wall time, in every state
IDLE_WAIT_S = 0.1                   # longest single wait of the loop when nothing is scheduled
COARSE_WAIT_MARGIN_S = 0.002        # zmq polls in whole ms: wake this early, then sleep the rest finely
MAX_REQUESTS_PER_WAKE = 10          # a burst of requests cannot starve the publisher
STEP_SAMPLES_PER_WINDOW = 200_000   # step-time samples kept per status window (the newest ones)
BEHIND_REPORT_INTERVAL_S = 10.0     # stderr reports of deadline misses at most this often
STALL_REPORT_INTERVAL_S = 60.0      # "still stalled" stderr reminders at most this often
PUB_LINGER_MS = 1000                # bounded wait for the last sim/status to leave at shutdown
PUB_SNDHWM = 10_000                 # 10 s of 1 kHz states queued per subscriber before dropping
#: why a realtime state missed its deadline (the keys of sim/status ``deadline_miss_reasons``)
NOT_READY, PUBLISHED_LATE = "not_ready", "published_late"
#: a wall-clock gap between two consecutive sim/state messages of a running simulation longer than this is a stall:
#: 50 publish periods at 1 kHz, far beyond scheduling jitter (< 1 ms) and long enough to disturb a 5 Hz stroke
STALL_GAP_S = 0.05
#: closed loop: longest wait for a measurement before the loop serves control and status again, s
FEEDBACK_WAIT_S = 0.01
#: stalls listed in each sim/status (the newest ones; the totals count all of them)
RECENT_STALLS = 10


def _is_rod(config: dict[str, Any]) -> bool:
    robot = config.get("robot")
    return isinstance(robot, dict) and robot.get("kind") == "cosserat"


def _build_model(config: dict[str, Any], path: Path):
    """The model served: a rigid tree (sim.robots), or a Cosserat rod sampled as a chain of segment joints
    (sim/cosserat/live.py)."""
    from sim.robots import build_robot, check_robot

    if _is_rod(config):
        from sim.robots.cosserat import build_live

        check_robot(config, path)
        return build_live(config, path)
    return build_robot(config, path)


def _simulation_defaults(config: dict[str, Any], path: Path) -> tuple[str | None, float | None]:
    """The ``[simulation]`` integrator and dt of a robot config (None where it names none)."""
    table = config.get("simulation", {})
    if not isinstance(table, dict):
        raise ConfigError(path, "simulation", "expected a table")
    integrator = require(table, "integrator", str, path=path, prefix="simulation", default=None)
    dt = require(table, "dt", float, path=path, prefix="simulation", default=None,
                 check=lambda value: value > 0, expected="a positive step in s")
    return integrator, dt


def _new_simulation(model, config: dict[str, Any], path: Path, integrator: str | None, dt: float | None):
    """The simulation of ``model``: the server's options first, then the config's [simulation], then defaults.
    Any step works with any publish period: states are interpolated at the publish times (dense output,
    Simulation.advance_to)."""
    from sim.simulation import Simulation

    if hasattr(model, "live_simulation"):            # a rod: its own step ([live] dt) and its own integrator (RK4)
        return model.live_simulation(dt, integrator)
    config_integrator, config_dt = _simulation_defaults(config, path)
    integrator = integrator if integrator is not None else config_integrator
    dt = dt if dt is not None else config_dt
    kwargs: dict[str, Any] = {}
    if integrator is not None:
        kwargs["integrator"] = integrator
    if dt is not None:
        kwargs["dt"] = dt
    try:
        return Simulation(model, **kwargs)
    except ValueError as exc:
        raise ConfigError(path, "simulation", str(exc)) from None


class StepTimes:
    """Wall time of each integration step over one status window (microseconds on output)."""

    def __init__(self) -> None:
        self.samples_ns: deque[int] = deque(maxlen=STEP_SAMPLES_PER_WINDOW)
        self.last: dict[str, float] = {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}

    def close_window(self) -> dict[str, float]:
        """Statistics of the window that ends now; the next window starts empty."""
        if self.samples_ns:
            us = np.fromiter(self.samples_ns, dtype=np.float64, count=len(self.samples_ns)) * 1e-3
            self.last = {"mean": float(us.mean()), "p50": float(np.percentile(us, 50)),
                         "p99": float(np.percentile(us, 99)), "max": float(us.max())}
            self.samples_ns.clear()
        else:
            self.last = {"mean": 0.0, "p50": 0.0, "p99": 0.0, "max": 0.0}
        return self.last


@dataclass
class Prepared:
    """A state integrated ahead of its due time and not yet published."""
    tick: int                  # publish periods since the last reset: the state is due at anchor + tick period
    payload: dict[str, Any]    # the sim/state message, without seq, names and stamp
    ready_at: float            # perf_counter s when it was ready


class SimulationServer:
    """The state machine, the clock and the sockets of ``mms serve``.

    ``tick`` counts publish periods since the last reset: state ``tick`` is the simulation at
    ``t = tick * period`` (s), the newest state integrated; ``published_tick`` is the newest one published
    (realtime: up to ``lookahead_states`` behind). ``anchor`` (s, ``time.perf_counter``) is the wall time at which
    state 0 was due.
    """

    def __init__(self, config_path: Path, config: dict[str, Any], *, mode: str, rate_hz: float,
                 dt: float | None, integrator: str | None, stall_timeout_s: float, max_lag_s: float,
                 log: Callable[[str], None], feedback=None, lookahead_s: float = DEFAULT_LOOKAHEAD_S) -> None:
        self.config_path = config_path
        self.config = config
        self.mode = mode
        self.period = 1.0 / rate_hz
        self.rate_hz = rate_hz
        self.dt_option = dt
        self.integrator = integrator
        self.stall_timeout_s = stall_timeout_s
        self.max_lag_s = max_lag_s
        self.log = log
        #: the closed loop (hil/feedback/loop.py: FeedbackLoop, duck-typed here: sim imports nothing of hil), or None
        self.feedback = feedback
        #: realtime: states integrated ahead of their due time, at most (the closed loop integrates only the next
        #: one: a state integrated further ahead would use a measurement older by that much)
        self.lookahead_states = 1 if feedback is not None else max(1, round(lookahead_s * rate_hz))
        self.model = self._build(config)
        self.simulation = _new_simulation(self.model, config, config_path, integrator, dt)
        if feedback is not None:
            feedback.start(self.simulation)
        self.simulation.reset()
        self.warmup: dict[str, float] | None = None     # set by warm_up() before anything is published
        #: the SCHED_FIFO priority the loop runs at (0: the normal scheduler), and why not at the one asked for
        self.rt_priority = 0
        self.scheduler_note: str | None = None
        self.slice_s = 0.0                              # the fair scheduler's slice asked for outside the class, s
        self.robot_name = self._robot_name()
        self.state = IDLE
        self.reason: str | None = None
        self.stop_reason: str | None = None
        self.clock = time.perf_counter
        self.pub: zmq.Socket | None = None
        self.control: zmq.Socket | None = None
        self.poller = zmq.Poller()
        self.zmq_threads = 0         # ZeroMQ's threads, once open() has made its sockets
        # publication counters
        self.state_seq = 0
        self.status_seq = 0
        self.names_every = max(1, round(rate_hz))       # joint names once per second of states
        self.states_since_names = 0
        self.names_due = True
        # schedule
        self.tick = 0
        self.anchor = self.clock()
        self.last_step_request = self.clock()
        self.miss_reasons = {NOT_READY: 0, PUBLISHED_LATE: 0}
        self.resyncs = 0
        # status window
        self.step_times = StepTimes()
        self.next_status_at = self.clock()
        self.window_start = self.clock()
        self.window_sim_time = 0.0
        self.window_states = 0
        self.last_window = {"rtf": 0.0, "state_rate_hz": 0.0, "misses": 0, "late_max_s": 0.0}
        self.unreported_misses = 0
        self.last_behind_report = -math.inf
        self.last_stall_report = -math.inf
        self.stalled_since = 0.0
        #: states prepared and not yet published, oldest first (realtime: up to lookahead_states, integrated ahead
        #: of their due time; the other modes publish each state as soon as it is prepared)
        self.queue: deque[Prepared] = deque()
        self.published_tick = 0
        # stalls: wall-clock gaps between consecutive states of a running simulation (perf_counter s)
        self.last_sent_at: float | None = None
        self.last_sent_stamp_ns = 0
        self.last_sent_t = 0.0
        self.stalls = 0
        self.stall_s = 0.0
        self.recent_stalls: deque[dict[str, Any]] = deque(maxlen=RECENT_STALLS)
        self.window_misses = 0
        self.window_late_max_s = 0.0
        self._check_contract()

    # ---------------------------------------------------------------- model and messages
    @property
    def dt(self) -> float:
        return float(self.simulation.dt)

    @property
    def t(self) -> float:
        """Simulated time (s) of the newest state prepared: ``tick`` periods (the simulation itself may be up to
        one step ahead: its states are interpolated at the publish times)."""
        return self.tick * self.period

    @property
    def published_t(self) -> float:
        """Simulated time (s) of the newest state published: what subscribers have seen, and what replies and
        sim/status report."""
        return self.published_tick * self.period

    @property
    def deadline_misses(self) -> int:
        """Realtime states that missed their deadline, for any reason (the sum of ``miss_reasons``)."""
        return sum(self.miss_reasons.values())

    def _robot_name(self) -> str:
        robot = self.config.get("robot")
        if isinstance(robot, dict) and isinstance(robot.get("name"), str):
            return robot["name"]
        metadata = getattr(self.model, "metadata", None) or {}
        if isinstance(metadata.get("name"), str):
            return metadata["name"]
        return self.config_path.stem

    def _joint_names(self) -> list[str]:
        return [str(name) for name in self.model.joint_names]

    def _actuated(self) -> list[bool]:
        return [bool(flag) for flag in np.asarray(self.model.actuated).ravel()]

    def _state_payload(self, t: float | None = None, outputs: dict[str, np.ndarray] | None = None) -> dict[str, Any]:
        """The sim/state message at ``t`` (s) from ``outputs`` (default: the simulation's current time and outputs)."""
        if outputs is None:
            t, outputs = self.simulation.t, self.simulation.outputs()
        payload: dict[str, Any] = {"v": SCHEMA_VERSION, "seq": self.state_seq, "t": float(t)}
        for key in STATE_ARRAYS + getattr(self.simulation, "extra_state_keys", ()):
            payload[key] = np.asarray(outputs[key], dtype=np.float64).ravel().tolist()
        return payload

    def _names(self) -> dict[str, list]:
        """The name lists that ride along with the joint vectors: ``joint_names``, ``actuated`` and, for a rod,
        ``contact_names``."""
        names: dict[str, list] = {"joint_names": self._joint_names(), "actuated": self._actuated()}
        if hasattr(self.model, "contact_names"):
            names["contact_names"] = list(self.model.contact_names)
        return names

    def _check_contract(self) -> None:
        """Refuse to serve a model whose outputs do not fit the sim/state schema: fail at start, loudly."""
        try:
            payload = self._state_payload()
        except KeyError as exc:
            raise ConfigError(self.config_path, None, f"the simulation's outputs lack {exc} for sim/state") from None
        payload.update(stamp_ns=time.time_ns(), **self._names())
        try:
            validate(TOPIC_SIM_STATE, payload)
        except Exception as exc:
            raise ConfigError(self.config_path, None,
                              f"the simulation's outputs break the sim/state schema: {one_line(str(exc))}") from None

    def _build(self, config: dict[str, Any]):
        """The model of ``config``, with the feedback's measured-wrench plug-in when the loop is closed."""
        model = _build_model(config, self.config_path)
        return model if self.feedback is None else self.feedback.install(model)

    def _replace_model(self, config: dict[str, Any]) -> None:
        """Rebuild the model and the simulation from ``config``; on any error the old ones are kept."""
        model = self._build(config)
        simulation = _new_simulation(model, config, self.config_path, self.integrator, self.dt_option)
        rtf = warm_up(simulation, self.period, self.log)["rtf_cpu"]
        if rtf < 1.0:
            self._leave_realtime_class(f"the new model runs at {rtf:.2f}x real time per CPU second")
        previous = (self.config, self.model, self.simulation)
        self.config, self.model, self.simulation = config, model, simulation
        try:
            self._check_contract()
        except ConfigError:
            self.config, self.model, self.simulation = previous
            raise

    # ---------------------------------------------------------------- sockets
    def open(self, pub_endpoint: str, control_endpoint: str, context: zmq.Context, curve: Curve | None = None) -> None:
        try:
            self.pub = open_socket(context, zmq.PUB, pub_endpoint, bind=True, curve=curve, what="sim.pub",
                                   options={zmq.LINGER: PUB_LINGER_MS, zmq.SNDHWM: PUB_SNDHWM})
            self.control = open_socket(context, zmq.REP, control_endpoint, bind=True, curve=curve,
                                       what="sim.control", options={zmq.LINGER: 0})
        except ConfigError:
            self.close()
            raise
        self.poller.register(self.control, zmq.POLLIN)
        # started with the first socket; each names itself when it first runs, which take_scheduler waits for
        self.zmq_threads = zmq_thread_count(context.get(zmq.IO_THREADS))

    def close(self) -> None:
        for socket in (self.control, self.pub):
            if socket is not None and not socket.closed:
                socket.close()

    # ---------------------------------------------------------------- publishing
    def _prepare_state(self, t: float | None = None, outputs: dict[str, np.ndarray] | None = None) -> bool:
        """Build the payload of the state at ``t`` (default: the current one, state ``tick``) onto the queue (not
        sent, not stamped); False (and paused) if the state is not finite: a diverged simulation is never
        published."""
        payload = self._state_payload(t, outputs)
        if not (np.isfinite(payload["q"]).all() and np.isfinite(payload["qd"]).all()):
            self._fault(f"simulation diverged at t = {payload['t']:.6g} s (non-finite q or qd); "
                        f"reset or set a parameter")
            return False
        self.queue.append(Prepared(self.tick, payload, self.clock()))
        return True

    def _publish_state(self) -> bool:
        """Publish the current state at once (the queue is empty: after a reset or before the start); False (and
        paused) if it is not finite."""
        return self._prepare_state() and self._send_next()

    def _send_next(self) -> bool:
        """Stamp and send the oldest prepared state."""
        prepared = self.queue.popleft()
        payload = prepared.payload
        self.published_tick = prepared.tick
        payload["seq"] = self.state_seq
        if self.names_due or self.states_since_names >= self.names_every:
            payload.update(self._names())
            self.names_due = False
            self.states_since_names = 0
        self.states_since_names += 1
        payload["stamp_ns"] = time.time_ns()
        self.pub.send_multipart(encode(TOPIC_SIM_STATE, payload))
        self.state_seq += 1
        self.window_states += 1
        self._watch_stall(payload["stamp_ns"], payload["t"])
        return True

    def _watch_stall(self, stamp_ns: int, t: float) -> None:
        """Count a stall when this state left more than STALL_GAP_S of wall time after the previous one of the same
        running stretch (a pause, reset or resume starts a new stretch), and say so at once in sim/status."""
        now = self.clock()
        previous = self.last_sent_at
        self.last_sent_at, previous_stamp_ns, previous_t = now, self.last_sent_stamp_ns, self.last_sent_t
        self.last_sent_stamp_ns, self.last_sent_t = stamp_ns, t
        if previous is None or now - previous <= STALL_GAP_S or self.mode == "lockstep":
            return
        length = now - previous
        self.stalls += 1
        self.stall_s += length
        self.recent_stalls.append({"t": previous_t, "stamp_ns": previous_stamp_ns, "length_s": length})
        self.log(f"stalled {length:.3f} s after the state at t = {previous_t:.6g} s (stall {self.stalls})")
        self._publish_status(now)

    def _status_payload(self, seq: int) -> dict[str, Any]:
        payload = {"v": SCHEMA_VERSION, "seq": seq, "t": self.published_t, "stamp_ns": time.time_ns(),
                   "mode": self.mode, "state": self.state, "rtf": self.last_window["rtf"],
                   "step_us": dict(self.step_times.last), "deadline_misses": self.deadline_misses,
                   "deadline_miss_reasons": dict(self.miss_reasons), "lookahead_states": self.lookahead_states,
                   "queued_states": len(self.queue), "state_rate_hz": self.last_window["state_rate_hz"],
                   "robot": self.robot_name,
                   "joint_names": self._joint_names(), "actuated": self._actuated(),
                   "states": self.state_seq, "window_misses": self.last_window["misses"],
                   "late_max_s": self.last_window["late_max_s"], "stalls": self.stalls, "stall_s": self.stall_s,
                   "recent_stalls": list(self.recent_stalls)}
        if self.warmup is not None:
            payload["warmup"] = dict(self.warmup)
        payload["rt_priority"] = self.rt_priority
        if self.scheduler_note is not None:
            payload["scheduler_note"] = self.scheduler_note
        if self.feedback is not None:
            payload["feedback"] = self.feedback.status()
        if self.reason:
            payload["reason"] = self.reason
        return payload

    def _publish_status(self, now: float) -> None:
        window = now - self.window_start
        if window > 0:
            self.last_window = {"rtf": self.window_sim_time / window, "state_rate_hz": self.window_states / window,
                                "misses": self.window_misses, "late_max_s": self.window_late_max_s}
        self.step_times.close_window()
        self.window_start, self.window_sim_time, self.window_states = now, 0.0, 0
        self.window_misses, self.window_late_max_s = 0, 0.0
        payload = self._status_payload(self.status_seq)
        self.pub.send_multipart(encode(TOPIC_SIM_STATUS, payload))
        self.status_seq += 1
        self.next_status_at = max(self.next_status_at + STATUS_PERIOD_S, now + STATUS_PERIOD_S / 2)
        self._report_behind(now)

    def _report_behind(self, now: float) -> None:
        if self.unreported_misses and now - self.last_behind_report >= BEHIND_REPORT_INTERVAL_S:
            reasons = ", ".join(f"{count} {reason.replace('_', ' ')}" for reason, count in self.miss_reasons.items())
            self.log(f"behind real time: {self.unreported_misses} sim/state deadline misses since the last "
                     f"report ({self.deadline_misses} in all: {reasons}; schedule re-anchored {self.resyncs} times), "
                     f"real-time factor {self.last_window['rtf']:.3f}")
            self.unreported_misses = 0
            self.last_behind_report = now

    # ---------------------------------------------------------------- simulation
    def _advance_one_period(self) -> dict[str, np.ndarray]:
        """Integrate past ``t = (tick + 1) period`` in whole steps of dt, timing them; the outputs at that t
        (interpolated between the two step ends around it: Simulation.advance_to)."""
        self.tick += 1
        simulation, t_publish = self.simulation, self.tick * self.period
        t_before = simulation.t
        # one call for the whole period: the fused kernel pays its argument overhead once, not per step
        start = time.perf_counter_ns()
        outputs = simulation.advance_to(t_publish)
        elapsed_ns = time.perf_counter_ns() - start
        taken = round((simulation.t - t_before) / simulation.dt)
        self.step_times.samples_ns.extend([elapsed_ns // max(taken, 1)] * taken)
        self.window_sim_time += self.period
        return outputs

    def _tick(self) -> bool:
        """One publish period: publish the next state (integrated now, unless the realtime queue holds it). False
        when the simulation failed (then it is paused)."""
        if not self.queue and not self._prepare_tick():
            return False
        return self._send_next()

    def _prepare_tick(self) -> bool:
        """Integrate one publish period and prepare its state. False when the simulation failed (then paused), or
        when the closed loop's guard holds it."""
        if self.feedback is not None:
            reason = self.feedback.update(self.simulation, self.t)
            if reason is not None:
                self._fault(reason)
                return False
        try:
            outputs = self._advance_one_period()
            return self._prepare_state(self.t, outputs)
        except Exception as exc:  # a diverging or broken model must not kill the server: pause and say why
            self._fault(f"simulation failed at t = {self.t:.6g} s: {type(exc).__name__}: {exc}")
            return False

    def _fault(self, reason: str) -> None:
        self.state = PAUSED
        self.reason = one_line(reason)
        self.log(f"paused: {self.reason}")
        self._publish_status(self.clock())

    def _restart_clock(self) -> None:
        """Re-anchor real time at the last state published: the next one is due one period from now (and a new
        running stretch begins: the gap since the last state is not a stall)."""
        now = self.clock()
        self.last_sent_at = None
        self.anchor = now - self.published_tick * self.period
        self.last_step_request = now

    def _reset(self) -> None:
        self.queue.clear()                   # states integrated before the reset are never published
        self.simulation.reset()
        self.tick = self.published_tick = 0
        self.names_due = True
        self._restart_clock()
        if self.state != IDLE:
            self._publish_state()

    # ---------------------------------------------------------------- state machine (control commands)
    def _set_state(self, state: str, reason: str | None = None) -> None:
        changed = state != self.state
        self.state, self.reason = state, reason
        if changed:
            self._publish_status(self.clock())

    def cmd_start(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.state == IDLE:
            self._restart_clock()
            self.reason = None
            self.state = RUNNING
            self._publish_state()            # state 0, with the joint names
            self._publish_status(self.clock())
        elif self.state == PAUSED:
            return self.cmd_resume(request)
        return {}

    def cmd_pause(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.state in (RUNNING, STALLED):
            self.last_sent_at = None
            self._set_state(PAUSED, "pause command")
        return {}

    def cmd_resume(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.state == IDLE:
            raise ControlError("the simulation has not started: send start")
        if self.state == PAUSED:
            self._restart_clock()
            self._set_state(RUNNING)
        return {}

    def cmd_reset(self, request: dict[str, Any]) -> dict[str, Any]:
        self._reset()
        return {}

    def cmd_step(self, request: dict[str, Any]) -> dict[str, Any]:
        n = step_count(request)
        if self.mode != "lockstep" and self.state not in (IDLE, PAUSED):
            raise ControlError(f"step needs lockstep mode or an idle or paused simulation "
                               f"(mode {self.mode}, state {self.state}): send pause first")
        if self.state == IDLE:
            self.names_due = True
            self._publish_state()            # state 0, with the joint names
            self._set_state(RUNNING if self.mode == "lockstep" else PAUSED)
        if self.state == STALLED:
            self.log(f"lockstep resumed after {self.clock() - self.stalled_since:.1f} s stalled")
            self._set_state(RUNNING)
        done = 0
        for _ in range(n):
            if self.stop_reason is not None or not self._tick():
                break
            done += 1
            now = self.clock()
            if now >= self.next_status_at:
                self._publish_status(now)
        self.last_step_request = self.clock()
        if done < n:
            raise ControlError(f"stopped after {done} of {n} periods: {self.reason or self.stop_reason}")
        return {"steps": done}

    def cmd_set(self, request: dict[str, Any]) -> dict[str, Any]:
        key, value = set_arguments(request)
        config, previous = with_value(self.config, key, value)
        try:
            self._replace_model(config)
        except Exception as exc:  # the builder's ConfigError, or anything a bad value provokes in it
            raise ControlError(f"{key} = {value!r} refused, model unchanged: {exc}") from None
        self.robot_name = self._robot_name()
        self._reset()
        self.log(f"set {key} = {value!r} (was {previous!r}); model rebuilt, simulation reset")
        return {"key": key, "value": value, "previous": previous}

    def cmd_get(self, request: dict[str, Any]) -> dict[str, Any]:
        what = get_what(request)
        if what == "schema":
            return {"schema_version": SCHEMA_VERSION,
                    "schemas": {topic: SCHEMAS[topic] for topic in (TOPIC_SIM_STATE, TOPIC_SIM_STATUS)}}
        if what == "joint_names":
            return {"joint_names": self._joint_names(), "actuated": self._actuated()}
        if what == "config":
            return {"config": self.config, "path": str(self.config_path)}
        return {"status": self._status_payload(max(0, self.status_seq - 1))}

    def cmd_help(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"commands": {name: {"args": args, "does": does} for name, (args, does) in COMMANDS.items()}}

    def cmd_shutdown(self, request: dict[str, Any]) -> dict[str, Any]:
        self.stop_reason = "shutdown command"
        return {}

    def handle(self, frames: list[bytes]) -> dict[str, Any]:
        """The reply to one request: never raises."""
        try:
            request = parse_request(frames)
            reply = getattr(self, f"cmd_{request['cmd']}")(request)
        except ControlError as exc:
            return error_reply(str(exc))
        except Exception as exc:  # a bug must cost one error reply, not the server
            self.log(f"internal error on a control request: {type(exc).__name__}: {exc}")
            return error_reply(f"internal error: {type(exc).__name__}: {exc}")
        return {"ok": True, **reply, "state": self.state, "t": self.published_t,
                "seq": self.state_seq - 1}

    def _serve_control(self, timeout_ms: int) -> bool:
        """Answer the requests waiting (up to a few), waiting at most ``timeout_ms`` for the first one."""
        served = 0
        while served < MAX_REQUESTS_PER_WAKE and self.stop_reason is None:
            if not self.poller.poll(timeout_ms if served == 0 else 0):
                break
            try:
                frames = self.control.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self.control.send(encode_reply(self.handle(frames)))
            served += 1
        return served > 0

    # ---------------------------------------------------------------- the loop
    def _housekeeping(self, now: float) -> None:
        """The 1 Hz status and the lockstep stall watch."""
        if now >= self.next_status_at:
            self._publish_status(now)
        if self.mode == "lockstep":
            if self.state == RUNNING and now - self.last_step_request > self.stall_timeout_s:
                self.stalled_since = self.last_step_request
                self.last_stall_report = now
                self.log(f"lockstep stalled: no step request for {self.stall_timeout_s:g} s "
                         f"(t = {self.t:.6g} s); waiting for a step on the control socket")
                self._set_state(STALLED, f"no step request for {self.stall_timeout_s:g} s")
            elif self.state == STALLED and now - self.last_stall_report >= STALL_REPORT_INTERVAL_S:
                self.last_stall_report = now
                self.log(f"lockstep still stalled: no step request for {now - self.stalled_since:.0f} s")

    def _wait_until(self, deadline: float) -> bool:
        """Serve control and status until ``deadline`` (perf_counter s). False if a request or a stop came first
        (once the deadline has passed, waiting requests are answered and the deadline is still reported)."""
        while self.stop_reason is None:
            now = self.clock()
            self._housekeeping(now)
            left = deadline - now
            if left <= 0:
                self._serve_control(0)      # even when late, requests are answered every period
                return self.stop_reason is None
            wake_at = min(deadline, self.next_status_at)
            if self.mode == "lockstep" and self.state == RUNNING:
                wake_at = min(wake_at, self.last_step_request + self.stall_timeout_s)
            wake = wake_at - now
            if wake > COARSE_WAIT_MARGIN_S:
                if self._serve_control(max(1, int((wake - COARSE_WAIT_MARGIN_S) * 1000))):
                    return False
            else:
                if self._serve_control(0):
                    return False
                time.sleep(max(0.0, wake_at - self.clock()))
        return False

    def _realtime_period(self) -> None:
        """Integrate ahead while the queue has room and its oldest state is not about to be due; else sleep until
        that state is due (serving requests) and publish it.

        Sleeping right after each publication lets ZeroMQ's I/O thread send at once, and the states leave at
        regular times. Another state is integrated only while the oldest one is due more than half a period from
        now (the publication's tolerance), so that integrating ahead never makes a ready state late; with the
        queue full, one state is integrated per period, right after each publication. A deadline miss is a state
        ready only after its due time (``not_ready``: the integration fell behind) or published more than half a
        period late (``published_late``: the process was not scheduled in time).
        """
        queue = self.queue
        if not queue or (len(queue) < self.lookahead_states
                         and self._due(queue[0]) - self.clock() > self.period / 2):
            self._prepare_tick()
            return                           # look again: the state may have changed, the head may be due
        head = queue[0]
        due = self._due(head)
        if self.feedback is not None:
            self.feedback.digest(due)        # the measurements' twin in the wait, off the path to the next state
        if not self._wait_until(due) or not queue or queue[0] is not head or self.state != RUNNING:
            return                           # a request came first (it may have changed the state): look again
        self._send_next()
        now = self.clock()
        lateness = now - due
        self.window_late_max_s = max(self.window_late_max_s, lateness)
        reason = NOT_READY if head.ready_at > due else PUBLISHED_LATE if lateness > self.period / 2 else None
        if reason is not None:
            self.miss_reasons[reason] += 1
            self.unreported_misses += 1
            self.window_misses += 1
            if lateness > self.max_lag_s:
                self.resyncs += 1
                self.anchor = now - self.published_tick * self.period
                self._leave_realtime_class(f"fell {lateness:.3f} s behind real time at t = {self.published_t:.6g} s")
                if self.resyncs == 1:
                    self.log(f"fell {lateness:.3f} s behind real time at t = {self.published_t:.6g} s: schedule "
                             f"re-anchored (each time it happens again is counted in the next report)")

    def _leave_realtime_class(self, why: str) -> None:
        """Under SCHED_FIFO, a loop that cannot keep real time never sleeps and gains nothing from the class: back to
        the normal scheduler (with the fair scheduler's short slice), said on stderr and in sim/status."""
        if self.rt_priority == 0:
            return
        leave_realtime_class("mms serve", why)
        if self.slice_s > 0:
            request_slice(self.slice_s, threads_named(ZMQ_THREAD_PREFIX, self.zmq_threads))
        self.rt_priority, self.scheduler_note = 0, f"left SCHED_FIFO: {why}"

    def take_scheduler(self, priority: int, slice_s: float) -> None:
        """After :meth:`warm_up`, for the loop's thread and ZeroMQ's threads (the I/O thread sends what the loop
        publishes): SCHED_FIFO at ``priority`` unless the model is slower than real time or the permission is
        missing (then the fair scheduler's slice ``slice_s``, 0: the kernel's); the outcome goes into sim/status
        (``rt_priority``, ``scheduler_note``)."""
        zmq_threads = threads_named(ZMQ_THREAD_PREFIX, self.zmq_threads)
        refusal = realtime_refusal(priority, "mms serve", self.warmup["rtf_cpu"], zmq_threads)
        self.rt_priority = priority if priority and refusal is None else 0
        self.scheduler_note = None if refusal is None else f"SCHED_FIFO priority {priority} not taken: {refusal}"
        self.slice_s = slice_s
        if self.rt_priority == 0 and slice_s > 0:
            request_slice(slice_s, zmq_threads)

    def warm_up(self) -> None:
        """Compile (or load) the kernels and measure the model's speed: before the scheduler is chosen and before
        anything is published (sim/realtime.py)."""
        self.warmup = warm_up(self.simulation, self.period, self.log)

    def _due(self, prepared: Prepared) -> float:
        """The wall time (perf_counter s) at which a prepared state is due."""
        return self.anchor + prepared.tick * self.period

    def _fast_period(self) -> None:
        self._tick()
        self._housekeeping(self.clock())
        self._serve_control(0)

    def serve(self, autostart: bool) -> str:
        """Run until a shutdown command or a signal; return the reason."""
        if self.warmup is None:
            self.warm_up()
        gc.collect()
        gc.freeze()     # the long-lived objects of numba, numpy and the model stay out of the collector's passes
        if autostart:
            self.cmd_start({})
        else:
            self._publish_status(self.clock())
        while self.stop_reason is None:
            if self.feedback is not None and self.state in (RUNNING, STALLED) and self._feedback_period():
                continue
            if self.state == RUNNING and self.mode == "realtime":
                self._realtime_period()
            elif self.state == RUNNING and self.mode == "fast":
                self._fast_period()
            else:
                self._wait_until(self.clock() + IDLE_WAIT_S)
        self.queue.clear()                   # states integrated ahead of their due time: the run ended before it
        self.state, self.reason = STOPPED, self.stop_reason
        self._publish_status(self.clock())
        return self.stop_reason

    def _feedback_period(self) -> bool:
        """The closed loop's part of the loop (docs/closed-loop.md); True when it took the period. Until the first
        measurements are in, simulated time stands still (the clock re-anchors when they come); in lockstep, each
        usable measurement sample advances one publish period."""
        if not self.feedback.ready():
            self._wait_until(self.clock() + FEEDBACK_WAIT_S)
            self._restart_clock()
            return True
        if self.mode != "lockstep":
            return False
        for _ in range(self.feedback.wait_fresh(FEEDBACK_WAIT_S, MAX_REQUESTS_PER_WAKE)):
            if self.state == STALLED:
                self.log(f"lockstep resumed by a measurement after {self.clock() - self.stalled_since:.1f} s")
                self._set_state(RUNNING)
            if self.state != RUNNING or not self._tick():
                break
            self.last_step_request = self.clock()
        self._housekeeping(self.clock())
        self._serve_control(0)
        return True

    def request_stop(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason


# -------------------------------------------------------------------- the command
def _positive(value: float, option: str) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(None, option, f"got {value!r}, expected a positive number")
    return value


def _log(message: str) -> None:
    print(f"mms serve: {message}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, feedback_factory: Callable[..., Any] | None = None) -> int:
    """``mms serve``; ``feedback_factory(log)``, when given, builds the closed loop (hil/feedback/serve.py)."""
    from sim.cosserat.live import check_rig_joints, serve_rate_hz

    config = load_toml(args.config)
    rate = _positive(args.rate if args.rate is not None else serve_rate_hz(config) or DEFAULT_RATE_HZ, "--rate")
    endpoints = load_endpoints(args.network)
    pub_endpoint = args.pub or endpoints.sim_pub
    control_endpoint = args.control or endpoints.sim_control
    if args.rt_priority is None:
        args.rt_priority = SERVER_RT_PRIORITY if args.mode == "realtime" else 0
    elif args.rt_priority and args.mode != "realtime":
        raise ConfigError(None, "--rt-priority", f"applies to --mode realtime only (a {args.mode} run does not sleep "
                                                 "between states: under SCHED_FIFO it would hold a core)")
    feedback = None if feedback_factory is None else feedback_factory(_log)
    server = SimulationServer(args.config, config, mode=args.mode, rate_hz=rate, dt=args.dt,
                              integrator=args.integrator, stall_timeout_s=args.stall_timeout, max_lag_s=args.max_lag,
                              log=_log, feedback=feedback, lookahead_s=args.lookahead)
    if args.rig is not None:
        check_rig_joints(list(server.model.joint_names), args.rig, server.robot_name, every_joint=_is_rod(config))
    context = zmq.Context()
    previous_handlers = {}
    try:
        server.open(pub_endpoint, control_endpoint, context, endpoints.curve)     # a bad endpoint: its line alone
        if feedback is not None:
            feedback.open(context, endpoints)
        server.warm_up()    # the compile never under SCHED_FIFO, and the model's speed known before it is asked
        server.take_scheduler(args.rt_priority, args.slice)
        fine_timer_slack()
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[signum] = signal.signal(
                signum, lambda number, frame: server.request_stop(signal.Signals(number).name))
        model = server.model
        _log(f"{server.robot_name}: {len(model.joint_names)} joints ({int(np.sum(model.actuated))} actuated), "
             f"{args.mode} at {rate:g} Hz, dt {server.dt:g} s; PUB {pub_endpoint}, control {control_endpoint}")
        reason = server.serve(args.autostart)
        _log(f"stopped ({reason}) at t = {server.t:.6g} s after {server.state_seq} states, "
             f"{server.deadline_misses} deadline misses")
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)
        server.close()
        if feedback is not None:
            feedback.close()
        context.term()
    return 0
