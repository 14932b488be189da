"""FeedbackLoop's queue of samples for the model's twin: the age limit ([feedback] max_age_s) holds where a sample is
used, not only where it arrives (docs/closed-loop.md, "Guards"). The loop's own clock is set by the test; the twin
is the shipped double pendulum's, tethered, as `mms serve --feedback` builds it."""
from __future__ import annotations

import time

from hil.feedback.loop import FeedbackLoop, ModelTwin
from sim.config import shipped_config
from tests.feedback.conftest import LOADS, MAX_AGE_S, SAMPLE_HZ, SAMPLES_PER_FRAME, rig_text

#: s: the sample period of the test rig
SAMPLE_S = 1.0 / SAMPLE_HZ


def test_a_sample_that_outgrew_the_age_limit_in_the_queue_never_reaches_the_twin(tmp_path):
    rig = tmp_path / "rig.toml"
    rig.write_text(rig_text())
    robot = shipped_config("robot", "pendulum")
    now = [0.0]
    loop = FeedbackLoop(rig, robot, log=lambda text: None, clock=lambda: now[0])
    loop.twin = ModelTwin(loop.rig, loop.spec, robot, SAMPLE_S, "rk4")
    # one frame, received now: its samples 0..7 ms old, every one young enough on arrival
    loop._take({"v": 1, "seq": 0, "stamp_ns": time.time_ns(), "host_ns": time.time_ns(),
                "device_us": [round(k * SAMPLE_S * 1e6) for k in range(SAMPLES_PER_FRAME)],
                "servo_names": ["shoulder_servo"], "servo_rad": [[0.0]] * SAMPLES_PER_FRAME,
                "strain_names": ["elbow_gauge"], "strain": [[0.0]] * SAMPLES_PER_FRAME, "load_names": list(LOADS),
                "load": [[0.0] * 6] * SAMPLES_PER_FRAME})
    assert len(loop.pending) == SAMPLES_PER_FRAME and not loop.refused
    # they wait in the queue until the limit less 4.5 sample periods: the three oldest (7, 6, 5 ms old on
    # arrival) are then 0.5-2.5 ms past it, the others 0.5 ms or more inside it (the frame's microseconds in
    # transit, on the wall clock, are far inside those margins)
    now[0] = MAX_AGE_S - 4.5 * SAMPLE_S
    loop.ready()                                      # before the tare: every queued sample is taken
    assert loop.refused["telemetry:too_old"] == 3
    assert loop.tare_count == SAMPLES_PER_FRAME - 3 and not loop.pending
    assert loop.previous[0] == (SAMPLES_PER_FRAME - 1) * 1000 * 1e-6     # the newest reached the twin (its t, s)
