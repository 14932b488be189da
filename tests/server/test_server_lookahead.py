"""The realtime lookahead queue of a real `mms serve` (sim/server.py): states integrated ahead of their due time are
never published after a request that changes the simulation (reset, set), a pause keeps them (they are the states
that follow), and deadline misses are counted by reason. Behaviour only: no assert depends on the machine's speed."""
from __future__ import annotations

import ctypes
import os
import signal
import threading
import tomllib
from pathlib import Path

import numpy as np
import pytest

from hil.testing import wait_for
from sim.messages import TOPIC_SIM_STATE, TOPIC_SIM_STATUS, validate
from tests.server.test_server_control import FLAPPER, LAW_ATOL_RAD, _states, _stroke
from sim.processes import SHORT_SLICE_S, current_slice_ns, request_slice, threads_named

RATE_HZ = 200.0
PERIOD_S = 1.0 / RATE_HZ
LOOKAHEAD_S = 0.05                  # ten periods integrated ahead: a stale state would carry a t up to 50 ms on
LOOKAHEAD_STATES = 10
#: how long the server is stopped (SIGSTOP) to make it miss deadlines of both kinds: 60 periods, six times its
#: lookahead, far beyond any scheduling delay
STOPPED_S = 0.3
QUIET_S = 0.5
FLAPPER_PERIOD_S = 1e-3             # the default 1 kHz
FLAPPER_LOOKAHEAD_S = 0.02          # 20 states ahead
FOLLOWING = 30                      # states checked after a request
#: longest wait for a status made while the server is ahead of real time, s (REPLY_TIMEOUT_S of tests/server/conftest.py)
AHEAD_TIMEOUT_S = 20.0


def _states_from(server, sub, seq: int, count: int) -> list[dict]:
    """The states with seq ``seq`` .. ``seq + count - 1``, in order, as one subscriber received them."""
    received = server.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATE and p["seq"] >= seq + count - 1,
                              what=f"sim/state seq {seq + count - 1}")
    states = [p for p in _states(received) if p["seq"] >= seq]
    assert [p["seq"] for p in states] == list(range(seq, seq + count))
    return states


@pytest.fixture(scope="module")
def ahead(serve_shared, pendulum):
    # no re-anchoring however late the stopped server gets: every state due while stopped is counted; the normal
    # scheduler (the fair scheduler's slice is its own: under the default SCHED_FIFO it is not asked for)
    return serve_shared(pendulum.config, "--rate", str(RATE_HZ), "--lookahead", str(LOOKAHEAD_S), "--max-lag", "10",
                        "--rt-priority", "0")


def _running(server, sub) -> tuple[dict, list[dict]]:
    """The latest status once the queue has filled (the server integrates ahead at once, then one per period), and
    the states received until then."""
    received = server.receive(sub, lambda topic, p: topic == TOPIC_SIM_STATE and p["t"] > 2 * LOOKAHEAD_S,
                              what="a state after twice the lookahead")
    return server.ok("get", what="status"), _states(received)


def test_the_status_says_how_far_ahead_the_server_integrates(ahead):
    status = ahead.ok("get", what="status")["status"]
    validate(TOPIC_SIM_STATUS, status)
    assert status["lookahead_states"] == LOOKAHEAD_STATES
    assert set(status["deadline_miss_reasons"]) == {"not_ready", "published_late"}


def _slices_ns(pid: int) -> dict[str, int]:
    """The fair scheduler's slice of the main thread and of ZeroMQ's threads (``ZMQbg/...``) of ``pid``, ns, by
    thread name (/proc/PID/task/TID/sched ``se.slice``); the threads numpy's BLAS starts at import come before
    the request and keep the default."""
    slices = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        name = (task / "comm").read_text().strip()
        if task.name == str(pid) or name.startswith("ZMQbg"):
            for line in (task / "sched").read_text().splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "se.slice":
                    slices[f"{name} {task.name}"] = int(float(value))
    return slices


def test_the_loop_and_zeromqs_threads_have_the_short_slice_where_the_kernel_takes_one(ahead):
    default_ns = current_slice_ns()
    taken = []
    probe = threading.Thread(target=lambda: taken.append(request_slice(SHORT_SLICE_S)))     # this thread only
    probe.start()
    probe.join()
    slices = _slices_ns(ahead.process.pid)
    assert len(slices) >= 2 and any(name.startswith("ZMQbg") for name in slices), slices
    # the I/O thread, which sends the states, inherits the loop's slice. Failed in a CI run at load 6-9 and in 1 of 7
    # runs of this module at load 8-10 (the ZeroMQ threads at the default 1.4 ms, the loop's at 0.1 ms): a ZeroMQ
    # thread names itself when it first runs, which under load came after the server had looked for its threads by
    # name; the server now waits for all of them (test_threads_named_waits_for_a_thread_that_names_itself_late)
    assert set(slices.values()) == ({round(SHORT_SLICE_S * 1e9)} if taken[0] else {default_ns}), \
        (slices, ahead.stderr_path.read_text()[-2000:])


#: prctl option: set the calling thread's name (linux/prctl.h)
_PR_SET_NAME = 15


def test_threads_named_waits_for_a_thread_that_names_itself_late():
    """A thread started before the look that names itself afterwards, as a ZeroMQ thread does when the machine is
    busy: found when the count is given, missed by a single look."""
    named, release, finish = threading.Event(), threading.Event(), threading.Event()

    def late():
        release.wait()
        ctypes.CDLL(None).prctl(_PR_SET_NAME, b"late-namer", 0, 0, 0)
        named.set()
        finish.wait()

    thread = threading.Thread(target=late, daemon=True)
    thread.start()
    try:
        assert threads_named("late-namer") == []
        threading.Timer(0.05, release.set).start()
        found = threads_named("late-namer", count=1)
        assert named.is_set() and found == [thread.native_id]
    finally:
        release.set()
        finish.set()
        thread.join()


def test_a_reset_discards_the_states_integrated_ahead(ahead):
    sub = ahead.subscriber(b"sim/state")
    _running(ahead, sub)
    reply = ahead.ok("reset")
    assert reply["t"] == 0.0
    states = _states_from(ahead, sub, reply["seq"], FOLLOWING)
    np.testing.assert_allclose([p["t"] for p in states], PERIOD_S * np.arange(FOLLOWING), atol=1e-12)
    assert states[0]["joint_names"] == ["hinge"]


def test_a_pause_keeps_the_queue_and_the_stream_goes_on_where_it_stopped(ahead):
    sub = ahead.subscriber(b"sim/state")
    _, received = _running(ahead, sub)
    paused = ahead.ok("pause")
    received += _states(ahead.collect(sub, QUIET_S))
    assert received[-1]["seq"] == paused["seq"] and received[-1]["t"] == pytest.approx(paused["t"], abs=1e-12)
    assert ahead.ok("get", what="status")["status"]["t"] == paused["t"]     # the last state published, not the queue's
    stepped = ahead.ok("step", n=3)
    assert stepped["t"] == pytest.approx(paused["t"] + 3 * PERIOD_S, abs=1e-12)
    ahead.ok("resume")
    states = _states_from(ahead, sub, paused["seq"] + 1, FOLLOWING)
    np.testing.assert_allclose([p["t"] for p in states], paused["t"] + PERIOD_S * np.arange(1, FOLLOWING + 1),
                               atol=1e-9)


def _ahead_of_real_time(server) -> dict:
    """The first status made with more than one state queued: all but the oldest were integrated ahead, while the
    oldest was due more than half a period later, so they are ready before their due time. A server behind real time
    holds one state at most (integrated once due: requests are served while it waits for one)."""
    return wait_for(lambda: (status := server.ok("get", what="status")["status"])["queued_states"] >= 2 and status,
                    AHEAD_TIMEOUT_S, PERIOD_S, "a status with two states queued", logs=[server.stderr_path])


def test_the_status_says_how_many_states_are_queued(ahead):
    sub = ahead.subscriber(b"sim/state")
    _running(ahead, sub)
    validate(TOPIC_SIM_STATUS, _ahead_of_real_time(ahead))
    # a request is served while the loop waits for the oldest queued state to fall due: a pause keeps at least it
    ahead.ok("pause")
    queued = ahead.ok("get", what="status")["status"]["queued_states"]
    assert 1 <= queued <= LOOKAHEAD_STATES
    ahead.ok("step", n=queued)          # publishes the queued states, integrates none
    assert ahead.ok("get", what="status")["status"]["queued_states"] == 0
    ahead.ok("step", n=1)               # integrated and published at once
    assert ahead.ok("get", what="status")["status"]["queued_states"] == 0
    ahead.ok("resume")


def test_a_stopped_server_counts_its_misses_by_reason(ahead):
    sub = ahead.subscriber(b"sim/state")
    _running(ahead, sub)
    # stopped only once it is ahead: its queue then holds states ready before their due time. A server behind real
    # time has none, and a stop then adds no published_late (failed once so at load 11: 118 before and after; 3 of 6
    # runs of a server given 5 ms of CPU per 100 ms). After this status the states ready ahead leave either late
    # (counted after `before`) or on time, and a server on time integrates the next ones ahead
    before = _ahead_of_real_time(ahead)
    os.kill(ahead.process.pid, signal.SIGSTOP)
    try:                # stopped: its queued states fall due, the next ones are not integrated
        sent = _states(ahead.collect(sub, STOPPED_S))
    finally:
        os.kill(ahead.process.pid, signal.SIGCONT)
    # every state due while it was stopped is out (and counted) once a state due after the stop arrives
    last_t = max([before["t"]] + [p["t"] for p in sent])
    ahead.receive(sub, lambda topic, p: p["t"] > last_t + STOPPED_S + LOOKAHEAD_S, what="the states after the stop")
    after = ahead.ok("get", what="status")["status"]
    reasons, earlier = after["deadline_miss_reasons"], before["deadline_miss_reasons"]
    assert sum(reasons.values()) == after["deadline_misses"]
    # the queued states were ready before their due time and left late; the states due after them were not ready
    assert reasons["published_late"] > earlier["published_late"]
    assert reasons["not_ready"] > earlier["not_ready"]
    assert after["deadline_misses"] - before["deadline_misses"] >= STOPPED_S * RATE_HZ / 2


def test_a_parameter_set_in_realtime_reaches_the_very_next_state(serve):
    config = tomllib.loads(FLAPPER.read_text())
    amplitude, frequency = config["stroke"]["amplitude_deg"], config["stroke"]["frequency_hz"]
    server = serve(FLAPPER, "--lookahead", str(FLAPPER_LOOKAHEAD_S))
    assert server.ok("get", what="status")["status"]["lookahead_states"] == round(FLAPPER_LOOKAHEAD_S /
                                                                                  FLAPPER_PERIOD_S)
    stroke = server.ok("get", what="joint_names")["joint_names"].index("stroke_r")
    sub = server.subscriber(b"sim/state")
    server.receive(sub, lambda topic, p: p["t"] > 2 * FLAPPER_LOOKAHEAD_S, what="a state after twice the lookahead")
    reply = server.ok("set", key="stroke.frequency_hz", value=2 * frequency)
    assert reply["t"] == 0.0
    states = _states_from(server, sub, reply["seq"], FOLLOWING)
    t = np.array([p["t"] for p in states])
    np.testing.assert_allclose(t, FLAPPER_PERIOD_S * np.arange(FOLLOWING), atol=1e-12)
    np.testing.assert_allclose([p["q"][stroke] for p in states], _stroke(t, amplitude, 2 * frequency),
                               atol=LAW_ATOL_RAD)
