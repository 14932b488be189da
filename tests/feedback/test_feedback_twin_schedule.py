"""`mms serve --feedback` in realtime: the model's twin takes the measurement samples while the server waits to
publish a state it has ready (FeedbackLoop.digest), not between a publication and the next state's readiness
(FeedbackLoop.update, which takes only a backlog beyond one telemetry frame): the feedback loop in this process,
its telemetry on a real ZeroMQ socket, the shipped double pendulum and the test rig of tests/feedback/conftest.py."""
from __future__ import annotations

import time

import zmq

from tests.feedback.conftest import LOADS, SAMPLES_PER_FRAME, rig_text
from hil.feedback.loop import FeedbackLoop
from hil.testing import DEADLINE_S, endpoints, wait_for, write_network
from sim.config import load_toml, shipped_config
from sim.messages import TOPIC_HW_TELEMETRY, encode
from sim.server import _build_model, _new_simulation

#: the test's step of the simulation and of the twin, s (the test rig's 1 kHz samples)
DT_S = 1e-3


class Telemetry:
    """Frames of SAMPLES_PER_FRAME samples published on the driver's PUB endpoint when asked: all loads 0."""

    def __init__(self, context: zmq.Context, endpoint: str):
        self.pub = context.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.bind(endpoint)
        self.device_us = 0

    def frame(self) -> None:
        samples = list(range(self.device_us, self.device_us + SAMPLES_PER_FRAME * 1000, 1000))
        self.device_us += SAMPLES_PER_FRAME * 1000
        self.pub.send_multipart(encode(TOPIC_HW_TELEMETRY, {
            "v": 1, "seq": 0, "stamp_ns": time.time_ns(), "host_ns": time.time_ns(), "device_us": samples,
            "servo_names": ["shoulder_servo"], "servo_rad": [[0.0]] * len(samples), "strain_names": ["elbow_gauge"],
            "strain": [[0.0]] * len(samples), "load_names": list(LOADS), "load": [[0.0] * 6] * len(samples)}))


def _received(loop: FeedbackLoop, samples: int) -> None:
    """Wait until ``samples`` samples have arrived in all (none taken through the twin meanwhile)."""
    def arrived():
        loop._drain()
        return loop.samples >= samples
    wait_for(arrived, DEADLINE_S, what=f"{samples} samples received")


def test_the_twin_takes_the_samples_in_the_wait_before_a_due_time_and_the_period_only_a_backlog(tmp_path):
    robot = shipped_config("robot", "pendulum")
    rig = tmp_path / "rig.toml"
    rig.write_text(rig_text())
    network = endpoints(write_network(tmp_path / "network.toml"))
    loop = FeedbackLoop(rig, robot, log=lambda text: None)
    config = load_toml(robot)
    simulation = _new_simulation(loop.install(_build_model(config, robot)), config, robot, None, DT_S)
    loop.start(simulation)
    context = zmq.Context()
    telemetry = Telemetry(context, network.driver_pub)
    loop.open(context, network)
    try:
        wait_for(lambda: (telemetry.frame(), loop._drain(), loop.samples > 0)[-1], DEADLINE_S, 0.05,
                 what="the subscription")       # frames sent before it was live are lost
        while not loop.ready():                  # until tared, every sample is taken at once
            telemetry.frame()
            _received(loop, loop.samples + 1)
        used = loop.used
        telemetry.frame()
        _received(loop, loop.samples + SAMPLES_PER_FRAME)
        assert loop.update(simulation, simulation.t) is None
        assert len(loop.pending) == SAMPLES_PER_FRAME and loop.used == used      # one frame: left to the wait
        loop.digest(time.perf_counter() - 1.0)                                   # a due time already past
        assert len(loop.pending) == SAMPLES_PER_FRAME and loop.used == used
        loop.digest(time.perf_counter() + 60.0)                                  # time to spare: all of them
        assert not loop.pending and loop.used == used + SAMPLES_PER_FRAME
        telemetry.frame()
        telemetry.frame()
        _received(loop, loop.samples + 2 * SAMPLES_PER_FRAME)
        assert loop.update(simulation, simulation.t) is None
        assert len(loop.pending) == SAMPLES_PER_FRAME                            # the backlog beyond one frame
        assert loop.used == used + 2 * SAMPLES_PER_FRAME
    finally:
        loop.close()
        telemetry.pub.close()
        context.term()
