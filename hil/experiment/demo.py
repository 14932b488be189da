"""`mms demo`: a whole tethered HIL experiment on an emulated rig, recorded and validated, in one command.

The pipeline (architecture.md, "The loop"):
``mms serve`` (real time) -> ``mms drive --emulate`` (which starts ``mms emulate`` with the rig's physics plant,
whose truth parameters differ from the model) -> ``mms record`` -> ``mms validate`` on the recording.
One :class:`hil.experiment.supervisor.Supervisor` starts them, watches them, stops all of them if one dies (naming it),
stops them in order at the end (the driver first, so the servos go to neutral while the simulator still
runs), and leaves no process behind.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import zmq

from hil.validation.narrative import Claim, narrate
from hil.experiment.supervisor import ChildDied, Supervisor, mms_argv
from hil.recording.recorder import STOP_DRAIN_MAX_S
from sim import messages
from hil.experiment.demo_args import SETUP_RIGS
from sim.cli_options import below_server_priority
from sim.config import ConfigError, shipped_config
from sim.network import open_socket, write_loopback_network

#: how long a process may take to come up (imports, numba compilation on a fresh machine), s
STARTUP_TIMEOUT_S = 120.0
#: how long the driver gets to ramp the servos to neutral after `deactivate`, s
DEACTIVATE_TIMEOUT_S = 5.0
#: how long the recorder gets to exit after SIGINT (and after SIGTERM), s: its drain of the backlog a busy machine
#: left it (hil/recording/recorder.py, at most STOP_DRAIN_MAX_S) and the file's summary and footer. With the
#: supervisor's 5 s it was killed while draining at load 17, its file left without a footer
RECORDER_STOP_GRACE_S = STOP_DRAIN_MAX_S + 30.0


#: how far the wing-root bending ratio may stray from the quasi-static prediction (truth/model stiffness): the root's
#: dynamic amplification at 5 Hz differs a little between the two stiffnesses (docs/validation.md, "The demo's
#: narrative")
BENDING_RATIO_TOLERANCE = 0.05
#: ... and in the live run, where the servos' measured undershoot multiplies it (its own noise adds)
LIVE_BENDING_RATIO_TOLERANCE = 0.08
#: how far the strains' lag may stray from the servos' (live) or from zero (replay), degrees of the stroke
STRAIN_LAG_TOLERANCE_DEG = 10.0


def flapper_claims(robot: Path, rig: Path) -> tuple[list[Claim], list[Claim]]:
    """What the flapper rig's truth predicts, live and in the replay: its wing roots are stiffer than the model's
    by the ratio of ``[emulator.physics.overrides.stiffness] bend_root`` (rig) to ``[stiffness] bend_root`` (model);
    the root bends less in that ratio, times the servos' own undershoot of the stroke in the live run; the strains
    lag as the servos do live, and not at all once the measured servo motion drives the model."""
    from sim.config import load_toml

    model = load_toml(robot)["stiffness"]["bend_root"]
    truth = load_toml(rig)["emulator"]["physics"]["overrides"]["stiffness"]["bend_root"]
    stiffer = truth / model
    live = [Claim("root_bend_r", "amplitude_ratio",
                  lambda m: m["stroke_right"]["amplitude_ratio"] / stiffer, LIVE_BENDING_RATIO_TOLERANCE,
                  f"the servos' measured stroke undershoot over the truth's {stiffer:.2f}x stiffer roots"),
            Claim("root_bend_r", "phase_lag_deg", lambda m: m["stroke_right"]["phase_lag_deg"],
                  STRAIN_LAG_TOLERANCE_DEG, "the strains lag as the servos that drive them do")]
    replay = [Claim("root_bend_r", "amplitude_ratio", lambda m: 1.0 / stiffer, BENDING_RATIO_TOLERANCE,
                    f"the truth's roots {stiffer:.2f}x stiffer, the servos' undershoot taken out"),
              Claim("root_bend_r", "phase_lag_deg", lambda m: 0.0, STRAIN_LAG_TOLERANCE_DEG,
                    "the servos' lag taken out")]
    return live, replay


#: how far the servo chain's measured lag may stray from the prediction, deg of the wave (the rest of the driver's and
#: the emulator's timing: scheduling, pty transfer, the read-back's time stamp; docs/cosserat.md "Live")
CHAIN_LAG_TOLERANCE_DEG = 2.0
#: ... and its amplitude ratio
CHAIN_AMPLITUDE_TOLERANCE = 0.01


def servo_chain_claims(robot: Path, rig: Path) -> tuple[list[Claim], list[Claim]]:
    """What the emulated servos predict of a snake's chain: each servo's two loops (``[emulator.servo]``: position
    ``tau_p``, velocity ``tau_v``) follow the goal as ``1 / (1 - w^2 tau_p tau_v + j w tau_p)`` at the wave's
    ``w = 2 pi |V_o| / lambda``, and the goal is the model's joint angle held between states (``[live] rate_hz``) and
    between commands (``rates.command_hz``): half of each period of delay more. Claimed of the head and tail servos."""
    import math

    from sim.config import load_toml

    robot_config, rig_config = load_toml(robot), load_toml(rig)
    omega = 2.0 * math.pi * abs(robot_config["snake"]["V_o_m_s"]) / robot_config["snake"]["wavelength_m"]
    servo = rig_config.get("emulator", {}).get("servo", {})
    tau_p, tau_v = servo.get("position_time_constant_s", 0.02), servo.get("velocity_time_constant_s", 0.005)
    held_s = 0.5 / robot_config["live"].get("rate_hz", 100.0) + 0.5 / rig_config["rates"]["command_hz"]
    lag_deg = math.degrees(math.atan2(omega * tau_p, 1.0 - omega ** 2 * tau_p * tau_v) + omega * held_s)
    gain = 1.0 / math.hypot(1.0 - omega ** 2 * tau_p * tau_v, omega * tau_p)
    ends = [rig_config["servos"][0]["name"], rig_config["servos"][-1]["name"]]
    live = []
    for name in ends:
        live += [Claim(name, "phase_lag_deg", lambda m, lag=lag_deg: lag, CHAIN_LAG_TOLERANCE_DEG,
                       f"the servo's loops (tau_p {tau_p:g} s, tau_v {tau_v:g} s) at the {omega / (2 * math.pi):.2g} "
                       f"Hz wave, and the goal held {held_s * 1e3:.1f} ms on average"),
                 Claim(name, "amplitude_ratio", lambda m, g=gain: g, CHAIN_AMPLITUDE_TOLERANCE,
                       "the servo's loops' gain at the wave's frequency")]
    return live, []


@dataclass(frozen=True)
class DemoRig:
    """A robot model, the rig it runs on, and what the demo changes in the model for a live tethered run."""
    robot: Path
    rig: Path
    #: config overrides {table: {key: value}} applied to the robot model for the demo
    overrides: dict = field(default_factory=dict)
    #: how the rig's truth differs from the model (said before the figures: a setting, not a result)
    mismatch: str = ""
    #: `mms drive` options that put the emulated rig's physics plant behind its sensors
    drive_args: tuple[str, ...] = ("--emulator-args", "--plant physics")
    #: (demo robot file, rig file) -> what the truth predicts of the live run and of the replay
    claims: Callable[[Path, Path], tuple[list[Claim], list[Claim]]] | None = None
    #: a servo chain: every joint of the model drives a servo of the rig (checked before anything starts, and by
    #: `mms serve --rig`); the replay (the model re-simulated from the measured servos) does not apply
    chain: bool = False


RIGS = {
    # Tethered, two sections per wing and a 0.5 ms step so the live model keeps up with the wall clock next to
    # the rig's physics plant on a 2-core laptop (RK4, with which the demo's figures were measured; the robot file's
    # default is Rosenbrock-W at 0.4 ms); a 5 Hz stroke because the rig's servos top out at 30 rad/s
    # (41.3 deg at 5 Hz needs 22.6 rad/s). The plant's truth has 20 % stiffer wing roots (the rig file).
    "flapper": DemoRig(shipped_config("robot", "flapper"), shipped_config("rig", SETUP_RIGS["flapper"]),
                       {"robot": {"base": "fixed"}, "wing": {"sections": 2}, "stroke": {"frequency_hz": 5.0},
                        "simulation": {"integrator": "rk4", "dt": 5e-4}},
                       "the rig's truth has stiffer wing roots than the model (its rig file's "
                       "[emulator.physics.overrides.stiffness]), and its servos lag and undershoot",
                       claims=flapper_claims),
    # The same flapper on the two-device rig: Dynamixel stroke servos (4 rad/s, hence a 0.8 Hz stroke: 41.3 deg
    # needs 3.6 rad/s) and the sensor microcontroller, whose physics plant follows the stroke the driver mirrors to
    # its servo channels (docs/dynamixel.md), one `mms drive` owning both devices.
    "flapper-dynamixel": DemoRig(
        shipped_config("robot", "flapper"), shipped_config("rig", SETUP_RIGS["flapper-dynamixel"]),
        {"robot": {"base": "fixed"}, "wing": {"sections": 2}, "stroke": {"frequency_hz": 0.8},
         "simulation": {"integrator": "rk4", "dt": 5e-4}},
        "the servo channels are the Dynamixel servos tracking the stroke; at this slow stroke the strain the stroke "
        "drives is small against the wing vibration in the emulated gauges (docs/dynamixel.md, Demo)",
        ("--sensor-emulator-args", "--plant physics")),
    "raybot": DemoRig(shipped_config("robot", "raybot"), shipped_config("rig", SETUP_RIGS["raybot"]),
                      {"robot": {"base": "fixed"}},
                      "the rig's truth and sensors follow configs/rigs/raybot_rig.toml's [emulator] section"),
    # The 2-D snake (a Cosserat rod, docs/cosserat.md "Live") on a chain of ten Dynamixel servos: the integrated
    # curvature of each tenth of the body is one servo's angle. Its head speed halved (0.25 m/s: a 0.5 Hz wave of
    # 0.94 rad per joint peaks at 2.9 rad/s, inside the servos' 4 rad/s rate limit); no sensors, so the comparison is
    # the servos' measured angles against the joint angles the model commands.
    "snake": DemoRig(shipped_config("robot", "snake2d"), shipped_config("rig", SETUP_RIGS["snake"]),
                     {"snake": {"V_o_m_s": -0.25}},
                     "the servos (emulated XM430-W350 mechanics and position loop) track the model's joint angles with "
                     "their lag; the rig has no sensor of the body's shape or contact forces",
                     drive_args=(), claims=servo_chain_claims, chain=True),
}


def write_demo_robot(rig: DemoRig, path: Path, closed_loop: bool = False) -> Path:
    """The robot config the demo's simulator runs: the robot's file with the demo's overrides applied (in free
    flight for the closed loop)."""
    import tomli_w

    from hil.experiment.closed_loop import free_robot_config
    from sim.config import load_toml

    config = load_toml(rig.robot)
    for table, values in rig.overrides.items():
        config.setdefault(table, {}).update(values)
    if closed_loop:
        config = free_robot_config(config)
    path.write_text(f"# {rig.robot.name} with the overrides of `mms demo` ({__name__}.RIGS)\n" + tomli_w.dumps(config))
    return path


def check_chain(rig: DemoRig, robot: Path) -> None:
    """A servo chain's rig drives every joint of the robot and no other (one-line ConfigError naming the rig's key)."""
    from sim.config import load_toml
    from sim.cosserat.live import check_rig_joints
    from sim.robots import check_robot
    from sim.robots.cosserat import build_live

    config = load_toml(robot)
    check_robot(config, robot)
    check_rig_joints(build_live(config, robot).joint_names, rig.rig, robot.stem, every_joint=True)


def demo_rig(rig: Path) -> DemoRig:
    """The demo set-up of a rig given by name or path (one of :data:`RIGS`)."""
    for demo in RIGS.values():
        if demo.rig.resolve() == Path(rig).resolve():
            return demo
    raise ConfigError(rig, None, f"mms demo runs the shipped rigs only ({', '.join(RIGS)}): it knows what each "
                                 "rig's truth predicts")


class Watcher:
    """Subscribes to sim/status and hw/status: the demo's own view of the experiment's health."""

    def __init__(self, context: zmq.Context, endpoints: dict[str, str]):
        self.socket = open_socket(context, zmq.SUB, endpoints["sim_pub"], bind=False, curve=None, what="sim.pub",
                                  options={zmq.LINGER: 0})
        for topic in (messages.TOPIC_SIM_STATUS, messages.TOPIC_HW_STATUS, messages.TOPIC_SIM_STATE):
            self.socket.setsockopt(zmq.SUBSCRIBE, topic.encode())
        self.socket.connect(endpoints["driver_pub"])
        self.latest: dict[str, dict] = {}

    def poll(self) -> None:
        self.latest.update(messages.drain_latest(self.socket))

    def driver_state(self) -> str | None:
        self.poll()
        status = self.latest.get(messages.TOPIC_HW_STATUS)
        return None if status is None else status.get("lifecycle")

    def sim_time(self) -> float | None:
        state = self.latest.get(messages.TOPIC_SIM_STATE)
        return None if state is None else float(state["t"])

    def sim_health(self) -> str:
        """The simulator's health as its last sim/status says: real-time factor, deadline misses, stalls."""
        status = self.latest.get(messages.TOPIC_SIM_STATUS)
        if status is None:
            return "no sim/status yet"
        states = max(int(status.get("states", 0)), 1)
        return (f"real-time factor {status.get('rtf', 0.0):.2f}, deadline misses "
                f"{status.get('deadline_misses', 0) / states:.1%}, stalls {status.get('stalls', 0)}")

    def close(self) -> None:
        self.socket.close()


def request(context: zmq.Context, endpoint: str, payload: dict, timeout_ms: int = 3000) -> dict | None:
    """One REQ/REP exchange with a bounded wait; None when nobody answered."""
    import msgpack

    sock = open_socket(context, zmq.REQ, endpoint, bind=False, curve=None, what=endpoint, options={zmq.LINGER: 0})
    try:
        sock.send(msgpack.packb(payload))
        if sock.poll(timeout_ms):
            return msgpack.unpackb(sock.recv(), raw=False)
        return None
    finally:
        sock.close()


def run(args: argparse.Namespace) -> int:
    rig = demo_rig(args.rig)
    run_dir = args.out or Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    network = run_dir / "network.toml"
    endpoints = write_loopback_network(network)
    robot = write_demo_robot(rig, run_dir / rig.robot.name, args.closed_loop)
    if rig.chain:
        check_chain(rig, robot)
    from hil.experiment.closed_loop import emulator_args

    feedback = ("--feedback", str(rig.rig)) if args.closed_loop else ()
    recording = run_dir / "run.mcap"
    report_dir = run_dir / "report"
    say = lambda text: print(f"[demo] {text}", flush=True)  # noqa: E731 - one-line local printer
    say(f"run directory: {run_dir}")
    context = zmq.Context()
    watcher = Watcher(context, endpoints)
    supervisor = Supervisor(run_dir / "logs", say=say)
    try:
        realtime = ("--rt-priority", str(args.rt_priority))
        below_server = ("--rt-priority", str(below_server_priority(args.rt_priority)))
        supervisor.start("serve", mms_argv("serve", str(robot), "--network", str(network), "--mode", "realtime",
                                           *realtime, *(("--rig", str(rig.rig)) if rig.chain else ()),
                                           *feedback))
        supervisor.start("record", mms_argv("record", "--out", str(recording), "--network", str(network),
                                            "--robot", str(robot), "--rig", str(rig.rig), "--quiet"),
                         stop_grace_s=RECORDER_STOP_GRACE_S, session_nice=args.background_nice)
        supervisor.start("drive", mms_argv("drive", "--rig", str(rig.rig), "--emulate", "--network", str(network),
                                           "--autostart", *below_server,      # its emulators take the same
                                           *(emulator_args(rig.drive_args) if args.closed_loop else rig.drive_args)),
                         session_nice=args.background_nice)
        if args.gui:
            from hil.qt_preflight import dashboard_problem

            problem = dashboard_problem()
            if problem is None:
                supervisor.start("dash", mms_argv("dash", "--network", str(network), "--rig", str(rig.rig)),
                                 optional=True, session_nice=args.background_nice)
            else:
                say(f"no dashboard: {problem}")
                say("going on without it (headless); `mms dash --replay` plays the recording afterwards")
        say("waiting for the driver to activate and the simulation to run (first start compiles the numba kernels)")
        if not supervisor.wait(STARTUP_TIMEOUT_S, until=lambda: watcher.driver_state() == "active"):
            raise TimeoutError(f"the driver did not become active within {STARTUP_TIMEOUT_S:.0f} s "
                               f"(its log: {supervisor.children['drive'].log_path})")
        # the simulator publishes its first state before its first step, which compiles its kernels on a cold cache
        if not supervisor.wait(STARTUP_TIMEOUT_S, until=lambda: (watcher.poll() or (watcher.sim_time() or 0.0)) > 0.0):
            raise TimeoutError(f"the simulation did not start within {STARTUP_TIMEOUT_S:.0f} s "
                               f"(its log: {supervisor.children['serve'].log_path})")
        say(f"driver active; running the experiment for {args.duration:g} s")
        started = time.monotonic()
        while time.monotonic() - started < args.duration:
            supervisor.wait(1.0)
            watcher.poll()
            sim_t = watcher.sim_time()
            print(f"\r[demo] wall {time.monotonic() - started:5.1f} s / {args.duration:g} s, "
                  f"sim t = {sim_t if sim_t is not None else float('nan'):7.3f} s; {watcher.sim_health()}   ",
                  end="", flush=True)
        print(flush=True)
        say("stopping: driver to neutral first, then the simulator, then the recorder")
        request(context, endpoints["driver_control"], {"cmd": "deactivate"})
        if not supervisor.wait(DEACTIVATE_TIMEOUT_S, until=lambda: watcher.driver_state() == "inactive"):
            say(f"the driver did not report inactive within {DEACTIVATE_TIMEOUT_S:g} s; stopping it by signal")
        supervisor.stop_all(["drive", "dash", "serve", "record"])
    except ChildDied as died:
        print(f"\n[demo] ERROR: {died}", file=sys.stderr, flush=True)
        supervisor.stop_all(["drive", "dash", "serve", "record"])
        print(f"[demo] stopped every other process; recording so far: {recording}", file=sys.stderr)
        return 1
    except (TimeoutError, KeyboardInterrupt) as exc:
        print(f"\n[demo] ERROR: {exc}" if str(exc) else "\n[demo] interrupted", file=sys.stderr, flush=True)
        supervisor.stop_all(["drive", "dash", "serve", "record"])
        return 1
    finally:
        watcher.close()
        context.term()

    say(f"recording: {recording}")
    if args.closed_loop:
        return _closed_loop_report(recording, robot, rig.rig, report_dir, say)
    metrics = _validate(recording, robot, rig.rig, report_dir, say)
    if metrics is None:
        return 1
    # failing channels are the experiment's result (the rig's truth differs from the model on purpose), not an
    # error of the demo: it succeeded when it ran, recorded, validated and its run was healthy
    say(f"the setting: {rig.mismatch}")
    live_claims, replay_claims = rig.claims(robot, rig.rig) if rig.claims else ([], [])
    story = narrate(metrics, live_claims, "live run")
    if not args.no_replay and rig.chain:
        say("no replay: the model of a servo chain is a Cosserat rod, which is not re-simulated from measured servo "
            "angles (docs/cosserat.md, Live)")
    elif not args.no_replay:
        say("the same run against the model driven by the measured servo motion (mms validate --sim recorded): the "
            "servos' lag and undershoot taken out, what remains is the structure's and the fluid's mismatch")
        replay = _validate(recording, robot, rig.rig, report_dir / "replay", say, replay=True)
        if replay is None:
            return 1
        story += narrate(replay, replay_claims, "replay")
    for line in story:
        say(line)
    (report_dir / "narrative.md").write_text("# What this run shows\n\n" + "".join(f"- {line}\n" for line in story))
    from hil.validation.validate import EXIT_INVALID

    return EXIT_INVALID if metrics["health"]["valid"] is False else 0


@dataclass(frozen=True)
class GuardHold:
    """The closed loop's guard pausing the simulation (docs/closed-loop.md, "Guards"), as the recording's sim/status
    says it."""
    t: float                # simulated time held at, s
    reason: str             # sim/status ``reason``: "feedback stale: ..." or "feedback unstable: ..."
    #: the driver was still active (the run was cut short), not deactivated by the demo's stop, after which its
    #: telemetry ends and the stale hold is the right answer that no one needs
    mid_run: bool


def guard_hold(raw) -> GuardHold | None:
    """The first hold of the closed loop's guard in ``raw`` (:class:`hil.recording.mcap_io.RawRecording` with
    sim/status, hw/status and hw/command), or None. Mid-run when no hw/status stamped before it had the driver no longer
    active after having been active (the stamps: the host's clock, both publishers on the same machine)."""
    import msgpack

    from hil.experiment.closed_loop import driver_stopped_ns

    def decoded(topic: str) -> list[dict]:
        return [msgpack.unpackb(data, raw=False) for _log_ns, _publish_ns, data in raw.messages.get(topic, [])]

    hold = next((status for status in decoded(messages.TOPIC_SIM_STATUS) if status.get("state") == "paused"
                 and str(status.get("reason", "")).startswith("feedback ")), None)
    if hold is None:
        return None
    stopped = driver_stopped_ns(raw)
    return GuardHold(float(hold["t"]), str(hold["reason"]), stopped is None or hold["stamp_ns"] < stopped)


def _closed_loop_report(recording: Path, robot: Path, rig: Path, out: Path, say) -> int:
    """The closed loop against the open loop and the truth (hil.experiment.closed_loop.compare), or, when the loop
    never closed, why not with the run's health; a guard's hold while the driver was active is said, goes into
    closed_loop.json (``hold``) and makes the run INVALID: the figures then cover the run up to it only. The
    free-flying model has no tether to pair with the rig's channels: the thorax's motion is the result."""
    import msgpack

    from hil.experiment.closed_loop import compare, health_summary, run_health
    from hil.feedback.loop import load_feedback
    from hil.recording.mcap_io import read_recording
    from hil.validation.validate import EXIT_INVALID

    statuses = read_recording(recording, topics={messages.TOPIC_SIM_STATUS, messages.TOPIC_HW_STATUS,
                                                 messages.TOPIC_HW_COMMAND})
    hold = guard_hold(statuses)
    if hold is not None and not hold.mid_run:
        say(f"the loop's guard held at the stop (t = {hold.t:.3f} s): the driver, deactivated, sent no more "
            "telemetry")
        hold = None
    if hold is not None:
        say(f"HELD at t = {hold.t:.3f} s simulated, the rig still active: {hold.reason}")
    closed = any(msgpack.unpackb(data, raw=False).get("feedback", {}).get("closed_at_s", -1.0) >= 0.0
                 for _log_ns, _publish_ns, data in statuses.messages.get(messages.TOPIC_SIM_STATUS, []))
    if not closed:
        say("verdict: no figures: the loop never closed (its phase table was not full)"
            + ("" if hold is None else f"; held at t = {hold.t:.3f} s before it closed"))
        raw = read_recording(recording, topics={messages.TOPIC_SIM_STATE, messages.TOPIC_HW_TELEMETRY,
                                                messages.TOPIC_SIM_STATUS, messages.TOPIC_HW_STATUS,
                                                messages.TOPIC_HW_COMMAND})
        states = raw.messages.get(messages.TOPIC_SIM_STATE, [])
        last_t = msgpack.unpackb(states[-1][2], raw=False)["t"] if states else 0.0
        health = run_health(raw, load_feedback(rig)[1].period_s, (0.0, last_t))
        for line in health_summary({**health, "compared_disturbances": []}, compared=False):     # no stretch was compared
            say(line)
        return EXIT_INVALID
    figures = compare(recording, robot, rig, out, say)
    if hold is None:
        return 0
    figures["hold"] = asdict(hold)
    (out / "closed_loop.json").write_text(json.dumps(figures, indent=2))
    say(f"verdict (held): the figures above cover {figures['closed_at_s']:.3f}-{hold.t:.3f} s simulated, cut short "
        "by the hold, not the run asked for")
    return EXIT_INVALID


def _validate(recording: Path, robot: Path, rig: Path, out: Path, say, replay: bool = False) -> dict | None:
    """One validation of the demo's run (``replay``: against the model driven by the measured servo motion); its
    metrics.json, its summary said; None (and an error printed) when it wrote none."""
    from hil.validation import validate

    code = validate.main_for_demo(recording, robot, rig, out, resim=validate.Resim("recorded") if replay else None)
    metrics_path = out / "metrics.json"
    if not metrics_path.exists():
        print(f"[demo] ERROR: the {'replay ' if replay else ''}validation wrote no metrics (exit code {code})",
              file=sys.stderr)
        return None
    metrics = json.loads(metrics_path.read_text())
    say(f"report: {out / 'report.md'}")
    say(f"metrics: {metrics_path}")
    for line in validate.summary_lines(metrics):
        say(f"  {line}")
    return metrics
