"""`mms serve --feedback`: the age limit, the stale hold, the instability guard and lockstep on measurements, on
real ZeroMQ sockets: the server a real subprocess, the rig a fake hw/telemetry publisher (conftest.FakeRig) whose
measured moment on the double pendulum's lower rod is ``gain * qd_elbow`` of the server's own newest state."""
from __future__ import annotations

import time

import zmq

from tests.feedback.conftest import (ELBOW_GAUGE_SCALE, LOADS, MAX_AGE_S, RIG_RT_PRIORITY, SAMPLES_PER_FRAME, STALE_S,
                                     rig_text)
from hil.cli import main
from hil.testing import Collector, endpoints, wait_for
from sim.config import shipped_config

#: the server's step and rate for these tests: the double pendulum at 1 ms (RK4 stable: its fastest mode is the
#: elbow's, sqrt(k / I) ~ 3 rad/s) keeps real time on a busy 2-core machine
STEP = ("--dt", "1e-3")
#: ... in real time under SCHED_FIFO, as the fake rig (a server starved to a real-time factor of 0.021 at load 18
#: dropped the rig's frames as too old, then held as stale); lockstep runs under the normal scheduler (`mms serve`
#: refuses --rt-priority there: it never sleeps between states)
SERVE = (*STEP, "--rt-priority", str(RIG_RT_PRIORITY))
#: the pendulum's elbow damping mu (configs/robots/pendulum.toml), N m s/rad: a fed-back moment gain * qd_elbow
#: adds -gain to it, so a gain below mu leaves the loop stable and one above it makes it unstable
ELBOW_DAMPING = 0.05
STABLE_GAIN, UNSTABLE_GAIN = 0.2 * ELBOW_DAMPING, 20 * ELBOW_DAMPING
#: s: how long a stable loop is watched
WATCH_S = 2.0
#: usable samples the lockstep server takes before the rig stops
LOCKSTEP_USED = 200


def _feedback(server) -> dict:
    """The server's feedback status, asked on its control socket."""
    return server.ctl("get", what="status")["status"]["feedback"]


def _status(sim: Collector) -> dict | None:
    return sim.last("sim/status")


def _held(sim: Collector, words: str):
    status = _status(sim)
    return status if status and status["state"] == "paused" and words in status.get("reason", "") else None


def _running_closed(sim: Collector, after_t: float):
    state, status = sim.last("sim/state"), _status(sim)
    return status if state and state["t"] > after_t and status and status["feedback"]["ready"] else None


def test_stale_measurements_hold_the_simulation_and_leave_the_driver_to_its_watchdog(closed_loop):
    server, fake = closed_loop(None, *SERVE)
    sim = Collector(fake.endpoints.sim_pub, topics=("sim/",))
    try:
        wait_for(lambda: _running_closed(sim, 0.3), 120, what="the loop closed", logs=[server.log_path])
        fake.pause()                              # the rig's telemetry stops
        held = wait_for(lambda: _held(sim, "feedback stale"), 10, what="the stale hold", logs=[server.log_path])
        assert held["feedback"]["holds"] >= 1 and held["feedback"]["trips"] == 0
        assert held["feedback"]["age_s"] > STALE_S
        assert "the newest frame received by the driver" in held["reason"]   # the rig stopped: nothing came
        last = sim.last("sim/state")["t"]
        time.sleep(0.3)                                # the window of the claim: held, no state advances
        assert sim.last("sim/state")["t"] == last
        assert fake.requests == []                     # staleness is no e-stop: the driver's watchdog handles it
    finally:
        sim.close()


def test_measurements_older_than_the_age_limit_are_dropped_and_the_loop_never_closes_on_them(closed_loop):
    server, fake = closed_loop(None, *SERVE, age_s=4 * MAX_AGE_S)
    sim = Collector(fake.endpoints.sim_pub, topics=("sim/",))
    try:
        status = wait_for(lambda: (s := _status(sim)) and s["feedback"]["refused"].get("telemetry:too_old", 0) > 100
                          and s, 120, what="old samples refused", logs=[server.log_path])
        assert status["feedback"]["ready"] is False and status["feedback"]["used"] == 0
        # simulated time waits for a usable measurement
        assert server.ctl("get", what="status")["t"] == 0.0 and all(s["t"] == 0.0 for s in sim.get("sim/state"))
        fake.age_s = 0.2 * MAX_AGE_S                   # fresh enough now
        wait_for(lambda: _running_closed(sim, 0.1), 20, what="the loop closed on fresh samples",
                 logs=[server.log_path])
        fake.age_s = 4 * MAX_AGE_S                     # old again: frames keep coming, and are refused
        held = wait_for(lambda: _held(sim, "feedback stale"), 20, what="the stale hold", logs=[server.log_path])
        assert "samples refused since (in all: telemetry:too_old" in held["reason"], held["reason"]
    finally:
        sim.close()


def test_a_loop_gain_below_the_damping_runs_and_one_above_it_trips_the_guard_and_the_drivers_estop(closed_loop):
    stable, stable_rig = closed_loop(None, *SERVE, gain=STABLE_GAIN)
    sim = Collector(stable_rig.endpoints.sim_pub, topics=("sim/",))
    try:
        wait_for(lambda: _running_closed(sim, WATCH_S), 120, what="the stable loop running", logs=[stable.log_path])
        status = _status(sim)
        assert status["state"] == "running" and status["feedback"]["trips"] == 0, status
        assert status["lookahead_states"] == 1, status       # measurements fresh: no state integrated further ahead
        assert stable_rig.requests == [] and status["feedback"]["wrench"][LOADS.index("my")] != 0.0, status
    finally:
        sim.close()
        stable.stop()
        stable_rig.close()
    unstable, unstable_rig = closed_loop(None, *SERVE, gain=UNSTABLE_GAIN)
    sim = Collector(unstable_rig.endpoints.sim_pub, topics=("sim/",))
    try:
        tripped = wait_for(lambda: _held(sim, "feedback unstable"), 120, what="the instability guard",
                           logs=[unstable.log_path])
        assert "driver e-stop: latched" in tripped["reason"] and tripped["feedback"]["trips"] == 1
        assert {"cmd": "estop"} in unstable_rig.requests
    finally:
        sim.close()


def test_lockstep_advances_one_period_per_usable_measurement(closed_loop):
    server, fake = closed_loop(None, *STEP, "--mode", "lockstep")
    sim = Collector(fake.endpoints.sim_pub, topics=("sim/",))
    try:
        # the rig stops once the server has used LOCKSTEP_USED samples, wherever the simulation is then: under the
        # normal scheduler the server steps behind a rig that keeps real time on a busy machine, and its work after
        # the stop is then bounded by what arrived until the stop (waiting for the simulation to reach 0.2 s let the
        # rig send 6000 samples ahead of it at load 13-17, more than the 30 s below could step)
        wait_for(lambda: _running_closed(sim, 0.0), 120, what="the loop closed", logs=[server.log_path])
        wait_for(lambda: _feedback(server)["used"] > LOCKSTEP_USED, 30, what=f"{LOCKSTEP_USED} samples used",
                 logs=[server.log_path])
        fake.pause()

        def caught_up():
            feedback, state = _feedback(server), sim.last("sim/state")
            received = feedback["samples"] == fake.frames * SAMPLES_PER_FRAME
            return (state, feedback["used"]) if received and state["seq"] == feedback["used"] else None

        # state 0 at start, then one per usable sample: the simulation advanced exactly with the measurements (on a
        # busy machine the server steps behind the telemetry, and catches up once it stops). Caught up once every
        # sample the rig sent was received too: a frame still on its way would step the simulation inside the
        # window below
        state, used = wait_for(caught_up, 30, what="one state per usable measurement", logs=[server.log_path])
        assert used > LOCKSTEP_USED and abs(state["t"] - used * 1e-3) < 1e-9
        time.sleep(0.3)                                          # the window of the claim
        assert sim.last("sim/state")["seq"] == state["seq"]      # no measurement, no step
    finally:
        sim.close()


def test_a_measured_joint_angle_replaces_the_passive_joints_state(closed_loop):
    """[feedback.joints]: the elbow (passive in the model) follows the rig's elbow gauge; with compensation "none"
    it is the gauge's reading over its scale, exactly."""
    text = rig_text(joints=f'[feedback.joints]\nelbow = {{channel = "elbow_gauge", scale = {1 / ELBOW_GAUGE_SCALE}}}\n')
    server, fake = closed_loop(text, *SERVE)
    sim = Collector(fake.endpoints.sim_pub, topics=("sim/",))
    try:
        for angle in (0.3, -0.1):
            fake.elbow_strain = angle * ELBOW_GAUGE_SCALE
            state = wait_for(lambda: (s := sim.last("sim/state")) and abs(s["q"][1] - angle) < 1e-12 and s, 120,
                             what=f"the elbow at {angle} rad", logs=[server.log_path])
            assert state["qd"][1] == 0.0           # a constant reading: no rate
        names = server.ctl("get", what="joint_names")
        assert names["joint_names"] == ["shoulder", "elbow"] and names["actuated"] == [True, True]
        assert state["strain"] == []                # no passive joint left
    finally:
        sim.close()


def test_bad_feedback_tables_are_one_line_each_and_nothing_starts(tmp_path, capsys):
    from hil.testing import write_network

    network = write_network(tmp_path / "network.toml")
    base = rig_text()

    def refused(text: str) -> str:
        assert text != base                                     # the case changes the valid rig
        rig = tmp_path / "rig.toml"
        rig.write_text(text)
        code = main(["serve", str(shipped_config("robot", "pendulum")), "--feedback", str(rig), "--network",
                     str(network)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        return err[0]

    line = refused(base.replace('"mz"]', '"tz"]'))              # a channel the rig does not measure
    assert "feedback.wrench.channels" in line and "a [[load]] channel of this rig (fx, fy, fz, mx, my, mz)" in line
    line = refused(base.replace("[feedback]\n", "[feedback]\ngravity = -9.81\n"))   # the rig's gravity: a size
    assert "feedback.gravity" in line and "a gravity in [0, 100] m/s^2" in line
    line = refused(base.replace("max_age_s", "max_agee_s"))     # a misspelt key
    assert "feedback.max_agee_s" in line and "max_age_s" in line
    line = refused(base.split("[feedback]")[0])                 # no [feedback] table
    assert "feedback: missing" in line
    line = refused(base.replace("body = 2", "body = 7"))       # the pendulum has bodies 0..2
    assert "feedback.wrench.body: got 7, expected a body of the robot, 0..2" in line
    line = refused(base.replace("channels = [", 'channels = ["fx", '))   # seven channels
    assert "feedback.wrench.channels" in line and "six [[load]] channels" in line
    line = refused(rig_text(joints='[feedback.joints]\nelbow = {channel = "knee_gauge"}\n'))
    assert "feedback.joints.elbow.channel" in line and "(elbow_gauge, shoulder_servo)" in line
    line = refused(rig_text(joints='[feedback.joints]\nshoulder = {channel = "elbow_gauge"}\n'))
    assert "feedback.joints.shoulder: the joint is actuated" in line
    line = refused(rig_text(joints='[feedback.joints]\nwrist = {channel = "elbow_gauge"}\n'))
    assert "feedback.joints.wrist: no joint 'wrist' in the robot (joints: shoulder, elbow)" in line
    # nothing was served: the server's endpoints are free (a bound socket left behind would refuse these binds)
    for endpoint in (endpoints(network).sim_pub, endpoints(network).sim_control):
        probe = zmq.Context.instance().socket(zmq.PUB)
        probe.setsockopt(zmq.LINGER, 0)
        probe.bind(endpoint)
        probe.close()
