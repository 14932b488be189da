"""Start, stop and trouble of a real `mms serve`: signals and shutdown give a last sim/status, a lockstep peer
that stops asking is reported as a stall, a realtime server that falls behind says so, bad input is a one-line
error, and binding beyond loopback is loud."""
from __future__ import annotations

import os
import signal
import sys
import subprocess
import time
from pathlib import Path

import pytest

from sim.messages import TOPIC_SIM_STATE, TOPIC_SIM_STATUS, validate

STATUS_TIMEOUT_S = 20.0
QUIET_S = 0.5


def _status(server, sub, predicate, what):
    received = server.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATUS and predicate(p),
                              timeout_s=STATUS_TIMEOUT_S, what=what)
    status = received[-1][1]
    validate(TOPIC_SIM_STATUS, status)
    return status, received


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_gives_a_final_stopped_status_and_a_clean_exit(serve, pendulum, signum):
    server = serve(pendulum.config, "--rate", "200")
    sub = server.subscriber()
    _status(server, sub, lambda p: p["state"] == "running", "a running status")   # subscription is live
    server.process.send_signal(signum)
    final, received = _status(server, sub, lambda p: p["state"] == "stopped", "the stopped status")
    assert final["reason"] == signum.name
    assert server.wait_exit() == 0
    assert f"stopped ({signum.name})" in server.stderr()
    assert "Traceback" not in server.stderr()


def test_shutdown_command_replies_then_stops_with_a_final_status(serve, pendulum):
    server = serve(pendulum.config, "--mode", "lockstep")
    sub = server.subscriber(b"sim/status")
    _status(server, sub, lambda p: True, "a status")
    reply = server.ok("shutdown")
    assert reply["ok"] is True
    final, _ = _status(server, sub, lambda p: p["state"] == "stopped", "the stopped status")
    assert final["reason"] == "shutdown command"
    assert server.wait_exit() == 0


def test_lockstep_without_step_requests_reports_a_stall_and_recovers(serve, pendulum):
    server = serve(pendulum.config, "--mode", "lockstep", "--stall-timeout", "0.5")
    sub = server.subscriber(b"sim/status")
    stalled, _ = _status(server, sub, lambda p: p["state"] == "stalled", "a stalled status")
    assert "no step request" in stalled["reason"] and stalled["mode"] == "lockstep"
    server.wait_stderr("lockstep stalled: no step request for 0.5 s")
    reply = server.ok("step")
    assert reply["state"] == "running" and reply["steps"] == 1
    _status(server, sub, lambda p: p["state"] == "running", "a running status after the step")
    assert "lockstep resumed after" in server.wait_stderr("lockstep resumed after")


def test_realtime_server_that_cannot_keep_up_counts_and_reports_deadline_misses(serve, pendulum):
    # dt = 10 us: 100 RK4 steps per 1 ms publish period, far more than one core does in real time
    server = serve(pendulum.config, "--mode", "realtime", "--dt", "1e-5")
    sub = server.subscriber(b"sim/status")
    status, _ = _status(server, sub, lambda p: p["deadline_misses"] > 0 and p["rtf"] > 0,
                        "a status with deadline misses")
    assert status["rtf"] < 0.9 and status["state"] == "running"
    # measured so in its warm-up: the real-time class not asked for (the loop would never sleep)
    assert status["rt_priority"] == 0 and status["scheduler_note"].startswith(
        "SCHED_FIFO priority 10 not taken: the model runs at"), status
    assert "not asking for SCHED_FIFO priority 10" in server.stderr()
    assert status["step_us"]["mean"] > 0 and status["step_us"]["max"] >= status["step_us"]["p99"]
    assert "behind real time" in server.wait_stderr("behind real time")
    # behind or not, the control socket is served every period
    assert server.ok("get", what="status")["status"]["deadline_misses"] >= status["deadline_misses"]


#: how long the test freezes a running server (SIGSTOP ... SIGCONT), s: far beyond STALL_GAP_S
FREEZE_S = 0.4


def test_a_frozen_server_reports_the_stall_at_once_in_its_status(serve, pendulum):
    """A realtime server stopped by the OS (here SIGSTOP, as a swap or a busy machine would) publishes, as soon as
    it runs again, a sim/status naming the stall: its length and where it was, not just a gap between states."""
    import time

    from sim.server import STALL_GAP_S

    server = serve(pendulum.config, "--mode", "realtime")
    sub = server.subscriber(b"sim/")
    first, _ = _status(server, sub, lambda p: p["state"] == "running" and "warmup" in p, "a running status")
    assert first["stalls"] == 0 and first["warmup"]["first_call_s"] > 0 and first["warmup"]["rtf"] > 0
    server.process.send_signal(signal.SIGSTOP)
    time.sleep(FREEZE_S)   # the frozen interval itself is the input: there is no condition to wait on
    server.process.send_signal(signal.SIGCONT)
    status, _ = _status(server, sub, lambda p: p["stalls"] >= 1, "a status with the stall")
    stall = status["recent_stalls"][-1]
    assert FREEZE_S - 0.05 <= stall["length_s"] < FREEZE_S + 2.0, stall
    assert STALL_GAP_S < FREEZE_S and status["stall_s"] >= stall["length_s"]
    assert "stalled" in server.wait_stderr("stalled ")


def test_paused_start_waits_for_start_and_then_publishes_state_0_with_names(serve, pendulum):
    server = serve(pendulum.config, "--idle")
    sub = server.subscriber()
    idle, _ = _status(server, sub, lambda p: p["state"] == "idle", "an idle status")
    assert idle["t"] == 0.0
    assert [p for topic, p in server.collect(sub, QUIET_S) if topic == TOPIC_SIM_STATE] == []
    refused = server.request("resume")
    assert refused["ok"] is False and "start" in refused["error"]
    reply = server.ok("start")
    assert reply["state"] == "running"
    received = server.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATE, what="state 0")
    state = received[-1][1]
    assert state["seq"] == 0 and state["t"] == 0.0 and state["joint_names"] == ["hinge"]


def test_binding_beyond_loopback_without_keys_is_refused(serve, pendulum, harness):
    port = harness.free_port()
    server = serve(pendulum.config, "--pub", f"tcp://0.0.0.0:{port}", check_ready=False)
    assert server.wait_exit() == 2, server.stderr()
    err = server.stderr().strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert f"sim.pub: refusing to bind tcp://0.0.0.0:{port} beyond loopback without authentication" in err
    assert "mms keys" in err


def test_bad_input_is_a_one_line_error_without_traceback(serve, pendulum, tmp_path):
    cases = [
        ((tmp_path / "missing.toml",), "file not found"),
        ((pendulum.config, "--rate", "-5"), "--rate"),
        ((pendulum.config, "--dt", "0"), "--dt"),
        ((pendulum.config, "--integrator", "euler"), "integrator"),
        ((pendulum.config, "--slice", "0.5"), "--slice"),         # beyond the longest slice Linux accepts
    ]
    bad_robot = tmp_path / "bad_robot.toml"
    bad_robot.write_text(pendulum.config.read_text().replace('kind = "urdf"', 'kind = "zeppelin"'))
    cases.append(((bad_robot,), "robot.kind"))
    # the parser refuses the file and the values before the simulator's imports (sim/server_args.py); the robot's kind
    # is read after them (about 1.5 s of CPU: 10-15 s at load 10 on the 2-core machine), within the time a start is
    # given (wait_exit of a server never seen ready)
    for arguments, says in cases:
        server = serve(arguments[0], *arguments[1:], check_ready=False)
        assert server.wait_exit() == 2, server.stderr()
        err = server.stderr().strip()
        assert says in err and "Traceback" not in err and len(err.splitlines()) == 1, err


def test_a_taken_endpoint_is_a_one_line_error(serve, pendulum):
    first = serve(pendulum.config, "--mode", "lockstep")
    second = serve(pendulum.config, "--pub", first.pub, check_ready=False)
    assert second.wait_exit() == 2
    err = second.stderr().strip()
    assert "cannot bind" in err and first.pub in err and len(err.splitlines()) == 1, err
    assert first.ok("get", what="status")["ok"] is True


def test_help_lists_the_options(harness):
    result = subprocess.run([*harness.mms, "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    for option in ("--network", "--mode", "lockstep", "--rate", "--dt", "--idle", "--stall-timeout"):
        assert option in result.stdout


def test_fast_mode_reports_consistent_statistics_and_no_deadlines(serve, pendulum):
    server = serve(pendulum.config, "--mode", "fast")
    sub = server.subscriber(b"sim/status")
    # two full windows after the first status: rtf = states per second x simulated seconds per state
    statuses = [p for _, p in server.receive(sub, lambda topic, p: p["seq"] >= 3, what="4 statuses")]
    window = statuses[-1]
    assert window["mode"] == "fast" and window["state"] == "running" and window["deadline_misses"] == 0
    assert window["rt_priority"] == 0 and "scheduler_note" not in window    # the default is realtime mode's only
    assert window["state_rate_hz"] > 0
    assert window["rtf"] == pytest.approx(window["state_rate_hz"] * pendulum.dt, rel=0.02)
    assert 0 < window["step_us"]["p50"] <= window["step_us"]["p99"] <= window["step_us"]["max"]


def _policy_or_refusal(pid: int, stderr: str, priority: int) -> None:
    """The process runs under SCHED_FIFO at ``priority``, or (no permission on this machine) it said so in one
    line and runs under the normal scheduler: never a silent fallback."""
    if os.sched_getscheduler(pid) == os.SCHED_FIFO:
        assert os.sched_getparam(pid).sched_priority == priority
    else:
        assert os.sched_getscheduler(pid) == os.SCHED_OTHER
        assert f"cannot use SCHED_FIFO priority {priority}" in stderr, stderr


def _loop_threads(pid: int) -> list[int]:
    """The loop's thread and ZeroMQ's I/O thread, which sends what the loop publishes (the threads a library started
    at import, before the scheduler was chosen, idle and keep the normal scheduler)."""
    names = {int(tid): Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip() for tid in os.listdir(f"/proc/{pid}/task")}
    loop = [pid] + [tid for tid, name in names.items() if name.startswith("ZMQbg/IO")]
    assert len(loop) >= 2, names
    return loop


def test_rt_priority_runs_the_realtime_loop_under_sched_fifo_and_is_refused_elsewhere(serve, pendulum):
    server = serve(pendulum.config, "--rt-priority", "7", "--idle")
    server.ok("start")
    for tid in _loop_threads(server.process.pid):
        _policy_or_refusal(tid, server.stderr(), 7)
    refused = serve(pendulum.config, "--mode", "fast", "--rt-priority", "7", check_ready=False)
    assert refused.process.wait(30) == 2
    assert "--rt-priority: applies to --mode realtime only" in refused.stderr()


def test_the_realtime_loop_asks_for_sched_fifo_10_by_default_and_leaves_it_for_a_model_slower_than_real_time(
        serve, pendulum):
    """As ros2_control's controller manager: the class by default (docs/headroom.md: the idle soak's misses 2.6 %
    without it, 0.1-1 % with it). A `set` that makes the model slower than real time (dt 10 us: 100 RK4 steps per
    1 ms period) puts every thread back under the normal scheduler, with one line and a note in sim/status: a loop
    that never sleeps gains nothing from the class and would hold a core."""
    server = serve(pendulum.config, "--idle")
    server.ok("start")
    pid = server.process.pid
    for tid in _loop_threads(pid):
        _policy_or_refusal(tid, server.stderr(), 10)
    status = server.ok("get", what="status")["status"]
    if os.sched_getscheduler(pid) != os.SCHED_FIFO:       # no permission here: said once, nothing to leave
        assert status["rt_priority"] == 0 and status["scheduler_note"].startswith("SCHED_FIFO priority 10 not taken")
        return
    assert status["rt_priority"] == 10 and "scheduler_note" not in status
    server.ok("set", key="simulation.dt", value=1e-5)
    assert "leaving SCHED_FIFO: the new model runs at" in server.wait_stderr("leaving SCHED_FIFO")
    for tid in os.listdir(f"/proc/{pid}/task"):
        assert os.sched_getscheduler(int(tid)) == os.SCHED_OTHER, tid
    status = server.ok("get", what="status")["status"]
    assert status["rt_priority"] == 0 and status["scheduler_note"].startswith("left SCHED_FIFO: the new model runs at")


#: how long the fall-behind test holds the server stopped (SIGSTOP), s, and the --max-lag it runs with: the first
#: state after the resume is due that far in the past, twice the allowed lag
_STOPPED_S, _MAX_LAG_S = 0.6, 0.3


def test_a_realtime_server_that_falls_max_lag_behind_leaves_sched_fifo_says_so_once_and_in_sim_status(
        serve, pendulum):
    """The other way out of the class (docs/headroom.md): a server under SCHED_FIFO held stopped (SIGSTOP, as a
    machine that does not schedule it) for twice --max-lag publishes its next state that late, re-anchors its
    schedule and puts every thread (the loop's, ZeroMQ's) back under the normal scheduler, with one line on stderr
    and a note in the sim/status it publishes. A second fall behind says nothing more (there is nothing to leave),
    and the server keeps running."""
    server = serve(pendulum.config, "--max-lag", str(_MAX_LAG_S))
    pid = server.process.pid
    loop = _loop_threads(pid)
    for tid in loop:
        _policy_or_refusal(tid, server.stderr(), 10)
    if os.sched_getscheduler(pid) != os.SCHED_FIFO:       # no permission here: said once, nothing to leave
        status = server.ok("get", what="status")["status"]
        assert status["rt_priority"] == 0 and status["scheduler_note"].startswith("SCHED_FIFO priority 10 not taken")
        return
    sub = server.subscriber(b"sim/status")
    running, _ = _status(server, sub, lambda p: p["state"] == "running", "a running status")
    assert running["rt_priority"] == 10 and "scheduler_note" not in running, running
    after = running["seq"]
    for fall in ("first", "second"):
        server.process.send_signal(signal.SIGSTOP)
        time.sleep(_STOPPED_S)
        server.process.send_signal(signal.SIGCONT)
        left, _ = _status(server, sub, lambda p: p["seq"] > after and p["late_max_s"] > _MAX_LAG_S,
                          f"the status of the {fall} fall behind")
        after = left["seq"]
        assert left["rt_priority"] == 0, left
    assert left["state"] == "running" and left["scheduler_note"].startswith("left SCHED_FIFO: fell "), left
    lag = float(left["scheduler_note"].split("fell ")[1].split(" s behind")[0])
    assert _MAX_LAG_S < lag < 10 * _STOPPED_S, left["scheduler_note"]
    stderr = server.stderr()
    assert stderr.count("leaving SCHED_FIFO") == 1, stderr
    assert "leaving SCHED_FIFO: fell " in stderr and "behind real time" in stderr, stderr
    for tid in os.listdir(f"/proc/{pid}/task"):
        assert os.sched_getscheduler(int(tid)) == os.SCHED_OTHER, (tid, Path(f"/proc/{pid}/task/{tid}/comm").read_text())
    assert server.ok("get", what="status")["status"]["rt_priority"] == 0


#: linux/capability.h and linux/prctl.h: the capability that allows the real-time class, and the request that
#: removes it from the bounding set (a root process then starts its program without it)
_CAP_SYS_NICE, _PR_CAPBSET_DROP = 23, 24


def _without_realtime_permission() -> None:
    """In the child before exec: no CAP_SYS_NICE (a root test run has it) and an rtprio limit of 0, as an ordinary
    user's login has."""
    import ctypes
    import resource

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_CAPBSET_DROP, _CAP_SYS_NICE, 0, 0, 0) != 0 and os.geteuid() == 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_SYS_NICE)")
    resource.setrlimit(resource.RLIMIT_RTPRIO, (0, 0))


def test_without_the_permission_the_server_says_so_in_one_line_and_runs_under_the_normal_scheduler(serve, pendulum):
    server = serve(pendulum.config, "--idle", preexec_fn=_without_realtime_permission)
    server.ok("start")
    stderr = server.stderr()
    assert stderr.count("cannot use SCHED_FIFO priority 10") == 1, stderr
    for tid in os.listdir(f"/proc/{server.process.pid}/task"):
        assert os.sched_getscheduler(int(tid)) == os.SCHED_OTHER, tid
    status = server.ok("get", what="status")["status"]
    validate(TOPIC_SIM_STATUS, status)
    assert status["rt_priority"] == 0
    assert status["scheduler_note"].startswith("SCHED_FIFO priority 10 not taken: no permission"), status
    assert status["state"] == "running"




def _under_sched_fifo() -> None:
    """In the child before exec: SCHED_FIFO 1, as a process started by a thread under the class inherits it (where
    the test may set it: a root run, as CI's)."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except PermissionError:
        pass


@pytest.mark.parametrize("permission", [True, False], ids=["priority 0 asked", "FIFO refused"])
def test_an_inherited_real_time_class_is_dropped_when_the_normal_scheduler_is_asked_or_the_class_refused(permission):
    """A process started under SCHED_FIFO (its parent's class) that asks for the normal scheduler (`--rt-priority 0`)
    or is refused the class runs every thread under the normal scheduler, as its one line says (a QEMU test that
    had reset its thread with priority 0 left the test process under the class: every later child inherited it)."""
    priority = 0 if permission else 10

    def start() -> None:
        _under_sched_fifo()
        if not permission:
            _without_realtime_permission()

    script = ("import os, threading, time; from sim.processes import set_realtime_priority; "
              "threading.Thread(target=time.sleep, args=(2,), daemon=True).start(); "
              f"taken = set_realtime_priority({priority}, 'test'); "
              "print(taken, sorted({os.sched_getscheduler(int(t)) for t in os.listdir('/proc/self/task')}))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         preexec_fn=start, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", f"[{os.SCHED_OTHER}]"], (out.stdout, out.stderr)
