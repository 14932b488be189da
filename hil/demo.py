"""`mms demo`: a whole tethered HIL experiment on an emulated rig, recorded and validated, in one command.

The pipeline (architecture.md, "The loop"):
``mms serve`` (real time) -> ``mms drive --emulate`` (which starts ``mms emulate`` with the rig's physics plant,
whose truth parameters differ from the model) -> ``mms record`` -> ``mms validate`` on the recording.
One :class:`hil.supervisor.Supervisor` starts them, watches them, stops all of them if one dies (naming it),
stops them in order at the end (the driver first, so the servos go to neutral while the simulator still
runs), and leaves no process behind.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import zmq

from hil.supervisor import ChildDied, Supervisor, mms_argv
from sim import messages
from sim.network import open_socket, write_loopback_network

REPO_ROOT = Path(__file__).resolve().parent.parent
#: how long a process may take to come up (imports, numba compilation on a fresh machine), s
STARTUP_TIMEOUT_S = 120.0
#: how long the driver gets to ramp the servos to neutral after `deactivate`, s
DEACTIVATE_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class DemoRig:
    """A robot model, the rig it runs on, and what the demo changes in the model for a live tethered run."""
    robot: Path
    rig: Path
    #: config overrides {table: {key: value}} applied to the robot model for the demo
    overrides: dict = field(default_factory=dict)
    #: how the rig's truth differs from the model, said next to the metrics
    mismatch: str = ""
    #: `mms drive` options that put the emulated rig's physics plant behind its sensors
    drive_args: tuple[str, ...] = ("--emulator-args", "--plant physics")
    #: what the replay (the model driven by the measured servo motion) shows, said after its metrics
    replay_note: str = ""


RIGS = {
    # Tethered, two sections per wing and a 0.5 ms step so the live model keeps up with the wall clock next to
    # the rig's physics plant on a 2-core laptop; a 5 Hz stroke because the rig's servos top out at 30 rad/s
    # (41.3 deg at 5 Hz needs 22.6 rad/s). The plant's truth has 20 % stiffer wing roots (the rig file).
    "flapper": DemoRig(REPO_ROOT / "configs/robots/flapper.toml", REPO_ROOT / "configs/rigs/flapper_rig.toml",
                       {"robot": {"base": "fixed"}, "wing": {"sections": 2}, "stroke": {"frequency_hz": 5.0},
                        "simulation": {"dt": 5e-4}},
                       "the rig's truth has 20 % stiffer wing roots than the model, and its servos lag: the strain "
                       "amplitude ratios below 1 and the phase lags above show that mismatch",
                       replay_note="with the servos' lag and undershoot taken out, the wing-root bending ratio is the "
                                   "stiffer roots' alone (1/1.2 = 0.83) and the lags are near zero"),
    # The same flapper on the two-device rig: Dynamixel stroke servos (4 rad/s, hence a 0.8 Hz stroke: 41.3 deg
    # needs 3.6 rad/s) and the sensor microcontroller, whose physics plant follows the stroke the driver mirrors to
    # its servo channels (docs/dynamixel.md), one `mms drive` owning both devices.
    "flapper-dynamixel": DemoRig(
        REPO_ROOT / "configs/robots/flapper.toml", REPO_ROOT / "configs/rigs/flapper_dynamixel_rig.toml",
        {"robot": {"base": "fixed"}, "wing": {"sections": 2}, "stroke": {"frequency_hz": 0.8},
         "simulation": {"dt": 5e-4}},
        "the servo channels show the Dynamixel servos tracking the stroke; at this slow stroke the strain the stroke "
        "drives is small against the wing vibration in the emulated gauges (docs/dynamixel.md, Demo), so their "
        "metrics say little about the rig's 20 % stiffer wing roots",
        ("--sensor-emulator-args", "--plant physics")),
    "raybot": DemoRig(REPO_ROOT / "configs/robots/raybot.toml", REPO_ROOT / "configs/rigs/raybot_rig.toml",
                      {"robot": {"base": "fixed"}},
                      "the rig's truth and sensors follow configs/rigs/raybot_rig.toml: compare its [emulator] "
                      "section with the model to read the metrics"),
}


def write_demo_robot(rig: DemoRig, path: Path) -> Path:
    """The robot config the demo's simulator runs: the robot's file with the demo's overrides applied."""
    import tomli_w

    from sim.config import load_toml

    config = load_toml(rig.robot)
    for table, values in rig.overrides.items():
        config.setdefault(table, {}).update(values)
    path.write_text(f"# {rig.robot.name} with the overrides of `mms demo` ({__name__}.RIGS)\n" + tomli_w.dumps(config))
    return path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rig", choices=sorted(RIGS), default="flapper", help="which robot and rig (default: flapper)")
    parser.add_argument("--duration", type=float, default=20.0, help="length of the live run, s (default: 20)")
    parser.add_argument("--out", type=Path, default=None, help="run directory (default: runs/demo-<time>)")
    parser.add_argument("--gui", action="store_true", help="also open the live dashboard")
    parser.add_argument("--no-replay", action="store_true",
                        help="skip the second validation against the model driven by the measured servo motion "
                             "(mms validate --sim recorded)")


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
    rig = RIGS[args.rig]
    run_dir = args.out or REPO_ROOT / "runs" / time.strftime("demo-%Y%m%d-%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=True)
    network = run_dir / "network.toml"
    endpoints = write_loopback_network(network)
    robot = write_demo_robot(rig, run_dir / rig.robot.name)
    recording = run_dir / "run.mcap"
    report_dir = run_dir / "report"
    say = lambda text: print(f"[demo] {text}", flush=True)  # noqa: E731 - one-line local printer
    say(f"run directory: {run_dir}")
    context = zmq.Context()
    watcher = Watcher(context, endpoints)
    supervisor = Supervisor(run_dir / "logs", say=say)
    try:
        supervisor.start("serve", mms_argv("serve", str(robot), "--network", str(network), "--mode", "realtime"))
        supervisor.start("record", mms_argv("record", "--out", str(recording), "--config", str(network),
                                            "--robot", str(robot), "--rig", str(rig.rig), "--quiet"))
        supervisor.start("drive", mms_argv("drive", "--rig", str(rig.rig), "--emulate", "--config", str(network),
                                           "--autoactivate", *rig.drive_args))
        if args.gui:
            supervisor.start("dash", mms_argv("dash", "--config", str(network)))
        say("waiting for the driver to activate and the simulation to run (first start compiles the numba kernels)")
        if not supervisor.wait(STARTUP_TIMEOUT_S, until=lambda: watcher.driver_state() == "active"):
            raise TimeoutError(f"the driver did not become active within {STARTUP_TIMEOUT_S:.0f} s "
                               f"(its log: {supervisor.children['drive'].log_path})")
        # the simulator publishes its first state before its first step, which compiles its kernels on a cold cache
        if not supervisor.wait(STARTUP_TIMEOUT_S, until=lambda: (watcher.poll() or (watcher.sim_time() or 0.0)) > 0.0):
            raise TimeoutError(f"the simulation did not start within {STARTUP_TIMEOUT_S:.0f} s "
                               f"(its log: {supervisor.children['serve'].log_path})")
        say(f"driver active; running the tethered experiment for {args.duration:g} s")
        started = time.monotonic()
        while time.monotonic() - started < args.duration:
            supervisor.wait(1.0)
            watcher.poll()
            sim_t = watcher.sim_time()
            print(f"\r[demo] wall {time.monotonic() - started:5.1f} s / {args.duration:g} s, "
                  f"sim t = {sim_t if sim_t is not None else float('nan'):7.3f} s", end="", flush=True)
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
    from hil import validate

    code = validate.main_for_demo(recording, robot, rig.rig, report_dir)
    metrics_path = report_dir / "metrics.json"
    if not metrics_path.exists():
        print(f"[demo] ERROR: validation wrote no metrics (exit code {code})", file=sys.stderr)
        return 1
    metrics = json.loads(metrics_path.read_text())
    say(f"report: {report_dir / 'report.md'}")
    say(f"metrics: {metrics_path}")
    for line in validate.summary_lines(metrics):
        say(f"  {line}")
    # failing channels are the experiment's result (the rig's truth differs from the model on purpose), not an
    # error of the demo: it succeeded when it ran, recorded and validated
    say(rig.mismatch)
    if args.no_replay:
        return 0
    say("the same run against the model driven by the measured servo motion (mms validate --sim recorded): the "
        "servos' lag and undershoot taken out, what remains is the structure's and the fluid's mismatch")
    replay_dir = report_dir / "replay"
    code = validate.main_for_demo(recording, robot, rig.rig, replay_dir, resim=validate.Resim("recorded"))
    if not (replay_dir / "metrics.json").exists():
        print(f"[demo] ERROR: the replay validation wrote no metrics (exit code {code})", file=sys.stderr)
        return 1
    say(f"report: {replay_dir / 'report.md'}")
    for line in validate.summary_lines(json.loads((replay_dir / "metrics.json").read_text())):
        say(f"  {line}")
    if rig.replay_note:
        say(rig.replay_note)
    return 0
