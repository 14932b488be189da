"""The servo driver with the Dynamixel backend, end to end: ``python -m hil.driver_dynamixel --emulate`` (the
driver of hil/driver.py with a DynamixelLink, the Dynamixel emulator as its child) tracks a sim/state sinusoid
published on a real ZeroMQ socket, publishes schema-valid hw/* messages, and ramps to neutral on SIGINT."""
from __future__ import annotations

import math
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import zmq

from sim.messages import decode, encode, validate

ROOT = Path(__file__).resolve().parents[2]
RIG = ROOT / "configs" / "rigs" / "flapper_dynamixel_rig.toml"
DEADLINE_S = 30.0
AMPLITUDE_RAD, FREQUENCY_HZ = 0.4, 0.5
#: Tracking, lag-tolerant (the servo lags its goal by its position loop's time constant plus the pipeline, and
#: a loaded machine stretches the pipeline): each measured position must be within TRACK_TOL_RAD of a setpoint
#: sent during the TRACK_WINDOW_S before it.
TRACK_TOL_RAD = 0.03
TRACK_WINDOW_S = 0.5
NEUTRAL_TOL_RAD = 0.02          # the driver's own "arrived at neutral"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_driver_tracks_the_simulator_through_the_dynamixel_bus(tmp_path):
    ports = [_free_port() for _ in range(5)]
    network = tmp_path / "network.toml"
    network.write_text(f'[sim]\npub = "tcp://127.0.0.1:{ports[0]}"\ncontrol = "tcp://127.0.0.1:{ports[1]}"\n'
                       f'[driver]\npub = "tcp://127.0.0.1:{ports[2]}"\ncontrol = "tcp://127.0.0.1:{ports[3]}"\n'
                       f'[recorder]\ncontrol = "tcp://127.0.0.1:{ports[4]}"\n')
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.bind(f"tcp://127.0.0.1:{ports[0]}")
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"hw/")
    sub.connect(f"tcp://127.0.0.1:{ports[2]}")
    stop = threading.Event()

    def publish():
        seq, t0 = 0, time.monotonic()
        while not stop.wait(0.002):
            t = time.monotonic() - t0
            q = AMPLITUDE_RAD * math.sin(2 * math.pi * FREQUENCY_HZ * t)
            pub.send_multipart(encode("sim/state", {
                "v": 1, "seq": seq, "t": t, "stamp_ns": time.time_ns(), "joint_names": ["stroke_r", "stroke_l"],
                "q": [q, q], "qd": [0.0, 0.0], "qdd": [0.0, 0.0], "tau": [0.0, 0.0], "strain": [0.0, 0.0],
                "base_pos": [0.0] * 3, "base_quat": [1.0, 0.0, 0.0, 0.0], "base_twist": [0.0] * 6,
                "base_wrench": [0.0] * 6, "ext_wrench": [0.0] * 6}))
            seq += 1
    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    log = (tmp_path / "drive.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "hil.driver_dynamixel", "--rig", str(RIG), "--emulate",
                             "--config", str(network), "--autoactivate"], cwd=ROOT, stdout=log,
                            stderr=subprocess.STDOUT)
    received: dict[str, list[dict]] = {}

    def drain(until, what):
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if sub.poll(100):
                topic, payload = decode(sub.recv_multipart())
                validate(topic, payload)
                received.setdefault(topic, []).append(payload)
                if until(topic, payload):
                    return payload
        raise AssertionError(f"timed out waiting for {what}: {(tmp_path / 'drive.log').read_text()[-2000:]}")
    try:
        drain(lambda topic, m: topic == "hw/status" and m["lifecycle"] == "active", "active")
        # a second of tracking: compare each telemetry sample with the last command sent before it
        t_end = time.monotonic() + 1.0
        drain(lambda topic, m: time.monotonic() > t_end, "a second of traffic")
        telemetry = [m for m in received["hw/telemetry"] if m["stamp_ns"] > received["hw/command"][0]["stamp_ns"]]
        commands = received["hw/command"]
        assert len(telemetry) > 20
        errors = []
        for m in telemetry[len(telemetry) // 2:]:
            recent = [c for c in commands if 0 <= m["host_ns"] - c["stamp_ns"] <= TRACK_WINDOW_S * 1e9]
            errors.append(min(max(abs(a - b) for a, b in zip(m["servo_rad"][-1], c["setpoint_rad"]))
                              for c in recent))
        assert max(errors) < TRACK_TOL_RAD
        assert max(abs(x) for m in telemetry for x in m["servo_rad"][-1]) > AMPLITUDE_RAD / 4    # it moved
        status = received["hw/status"][-1]
        assert status["link"]["bus"] == "dynamixel" and status["link"]["hardware_error_status"] == {"1": 0, "2": 0}
        proc.send_signal(signal.SIGINT)
        final = drain(lambda topic, m: topic == "hw/status" and m["lifecycle"] == "finalized", "finalized")
        assert proc.wait(DEADLINE_S) == 0
        last = received["hw/telemetry"][-1]["servo_rad"][-1]
        assert all(abs(x) <= NEUTRAL_TOL_RAD + 0.01 for x in last), last
        assert final["estop"] is False
    finally:
        stop.set()
        publisher.join(2)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
        for s in (pub, sub):
            s.close(0)
        ctx.term()
