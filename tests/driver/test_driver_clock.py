"""The driver's setpoints are computed for a time on a smooth simulated clock (``--state-lead``, hil.drive.core.SimClock).

A real driver object (hil.testing.LiveDriver: its ZeroMQ sockets bound, its serial link on a real emulator's pty)
reads sim/state messages from a real PUB socket (this test, a fake server) at arrival times the test sets: states
every 1 ms of a 5 Hz stroke, each reaching the driver 0.5-3.5 ms after its simulated time (seeded uniform jitter),
read one by one; the driver ticks every 2 ms; its hw/command messages are collected from its real PUB socket. The
simulator then pauses (its time held for 30 ms, under the 50 ms state timeout) and then starts a new run (its time
back to 0).
"""
from __future__ import annotations

import math
import time
from pathlib import Path

import numpy as np
import pytest
import zmq

from hil.drive.core import CLOCK_RESET_ARRIVALS
from hil.testing import Collector, LiveDriver, wait_for
from sim.messages import encode

ROOT = Path(__file__).resolve().parents[2]
FLAPPER = ROOT / "configs" / "rigs" / "flapper_rig.toml"
JOINTS = ["stroke_r", "stroke_l"]
LEAD_S = 0.005                              # s: --state-lead, the closed-loop demo's
PERIOD_S = 0.002                            # s: the flapper rig's 500 Hz command ticks
STATE_PERIOD_S = 0.001                      # s: the simulator's state rate, 1 kHz
AMPLITUDE, OMEGA = 0.1, 2 * math.pi * 5.0   # rad, rad/s: the stroke on both joints
#: s: each stretch of the stroke (the first run, after the pause, the new run) and the part of it left out at its
#: start (the clock's first arrivals and the reset's CLOCK_RESET_ARRIVALS states)
STRETCH_S, SETTLE_S = 0.3, 0.02
PAUSE_S = 0.030
#: s: the most the clock's offset moves in a tick: (1 - exp(-2 ms / 0.2 s)) x the largest arrival offset off the
#: mean (4 ms: 0.5-3.5 ms late, read up to 2 ms later at a tick... the states are read as they arrive here: 3 ms)
STEP_TOL_S = 4e-5


def stroke(t: float) -> tuple[float, float, float]:
    """The joints' angle (rad), rate (rad/s) and acceleration (rad/s^2) at simulated time ``t`` (s)."""
    return AMPLITUDE * math.sin(OMEGA * t), AMPLITUDE * OMEGA * math.cos(OMEGA * t), \
        -AMPLITUDE * OMEGA ** 2 * math.sin(OMEGA * t)


@pytest.fixture
def live(tmp_path, network):
    made = LiveDriver(FLAPPER, network, tmp_path / "applied.jsonl", "--max-state-age", "5",
                      "--state-lead", str(LEAD_S))
    yield made
    made.close()


def test_setpoints_advance_on_a_smooth_clock_through_jittered_arrivals_and_the_clock_resets_on_a_pause_and_a_new_run(
        live):
    d = live.driver
    commands = Collector(d.endpoints.driver_pub, ("hw/command",))
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(d.endpoints.sim_pub)
    seq = 0

    def publish(sim_t: float) -> dict:
        nonlocal seq
        seq += 1
        q, qd, qdd = stroke(sim_t)
        payload = {"v": 1, "seq": seq, "t": sim_t, "stamp_ns": time.time_ns(), "joint_names": JOINTS,
                   "q": [q, q], "qd": [qd, qd], "qdd": [qdd, qdd]}
        pub.send_multipart(encode("sim/state", payload))
        return payload

    def joined():
        publish(0.0)
        live.step()
        return d.states_received > 0
    wait_for(joined, what="the driver subscribed")
    wait_for(lambda: live.step() or d.sim_seq.last_seq.get("sim/state") == seq, what="the joining states read")

    # the schedule (monotonic s from t0): arrivals of (simulated time) and ticks; three stretches
    rng = np.random.default_rng(7)
    t0 = time.monotonic() + 1.0
    events, stretches = [], []
    wall = 0.0                                          # s: where each stretch starts on the wall clock, from t0
    for sim_start, gap in ((0.0, 0.0), (STRETCH_S, PAUSE_S), (0.0, 0.0)):   # the first run, the pause, a new run
        wall += gap
        ks = np.arange(round(STRETCH_S / STATE_PERIOD_S))
        late = 0.5e-3 + rng.uniform(0.0, 3e-3, ks.size)
        events += [(wall + k * STATE_PERIOD_S + dt, "state", sim_start + k * STATE_PERIOD_S) for k, dt in zip(ks, late)]
        stretches.append((wall, wall + STRETCH_S))
        wall += STRETCH_S
    events += [(tick, "tick", 0.0) for tick in np.arange(PERIOD_S, wall, PERIOD_S)]
    d.core.activate(t0)
    ticks, resets = 0, []
    for at, kind, sim_t in sorted(events):
        if kind == "state":
            publish(sim_t)
            assert d.sub.poll(5000), "the state reached the driver's socket"
            d.read_sim(t0 + at)
            assert d.sim_seq.last_seq["sim/state"] == seq
        else:
            d.command_tick(t0 + at)
            ticks += 1
            resets.append((at, d.core.clock.resets))
    wait_for(lambda: len(commands.get("hw/command")) >= ticks, what=f"{ticks} hw/command messages")
    commands.close()
    pub.close(0)
    sent = commands.get("hw/command")[-ticks:]
    at = np.arange(1, ticks + 1) * PERIOD_S
    setpoint_t = np.array([c["setpoint_t"] for c in sent])
    state_t = np.array([c["t"] for c in sent])
    # tracking from the first state on (the first tick may come before it: a hold)
    assert all(c["mode"] == "track" for c, a in zip(sent, at) if a > SETTLE_S), \
        [(a, c["mode"]) for c, a in zip(sent, at) if c["mode"] != "track"][:5]

    # the clock reset once at the pause and once at the new run, each within CLOCK_RESET_ARRIVALS states
    assert resets[-1][1] == 2
    for (start, _), n in zip(stretches[1:], (1, 2)):
        reset_at = next(a for a, r in resets if r == n)
        assert start < reset_at <= start + (CLOCK_RESET_ARRIVALS + 4) * STATE_PERIOD_S + PERIOD_S, (start, reset_at)
    gain = np.abs(d.map.joints_to_angles(np.ones(2), np.arange(2)) - d.map.joints_to_angles(np.zeros(2), np.arange(2)))
    for start, end in stretches:
        keep = (at > start + SETTLE_S) & (at < end)
        steps = np.diff(setpoint_t[keep])
        # smooth: the setpoints' simulated times advance by the tick's 2 ms, while the states' step 0-4 ms
        assert np.all(np.abs(steps - PERIOD_S) < STEP_TOL_S), (start, steps.min(), steps.max())
        state_steps = np.diff(state_t[keep])
        assert state_steps.min() < PERIOD_S / 2 and state_steps.max() > 1.4 * PERIOD_S, \
            (state_steps.min(), state_steps.max())
        # on the clock, near the states (not held at the lead's bound, which the clock before a jump would be)
        lead = setpoint_t[keep] - state_t[keep]
        assert np.all(np.abs(lead) < LEAD_S - 5e-4), (start, lead.min(), lead.max())
        # each setpoint is the stroke at its setpoint_t through the rig's map, to the Taylor step's third-order
        # error AMPLITUDE (OMEGA LEAD_S)^3 / 6 = 6.5e-5 rad of the joint (2e-4 rad allowed), times the map's gain
        expected = np.array([d.map.joints_to_angles(np.full(2, stroke(t)[0]), np.arange(2)) for t in setpoint_t[keep]])
        angles = np.array([c["setpoint_rad"] for c in sent])[keep]
        assert np.all(np.abs(angles - expected) < 2e-4 * gain), np.abs(angles - expected).max(axis=0)
