"""hil.testing.Collector, the hw/* and sim/* subscriber of the process tests, on a real PUB socket: it receives while
its schema checks wait (on a busy machine checking each message on arrival let its lag grow without bound:
docs/testing.md), and ``invalid`` still names every checked message that breaks its schema."""
from __future__ import annotations

import time

import zmq

from hil.testing import Collector, wait_for
from sim.messages import SCHEMA_VERSION, TOPIC_HW_COMMAND, encode

#: messages published while the checks are held: more than the thread could check in the wait if it checked them
BURST = 200


def _command(seq: int, mode: str = "track") -> dict:
    """A hw/command with the schema's required keys; ``mode`` outside its enum breaks it."""
    return {"v": SCHEMA_VERSION, "seq": seq, "stamp_ns": time.time_ns(), "t": 0.0, "sim_seq": seq,
            "channels": ["stroke_r"], "setpoint_rad": [0.0], "setpoint_raw": [1500.0], "limited": [False],
            "mode": mode}


def test_messages_are_received_while_the_schema_checks_wait_and_every_violation_is_named():
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.bind("tcp://127.0.0.1:*")
    collector = Collector(pub.getsockopt(zmq.LAST_ENDPOINT).decode(), ("hw/",), validate_every=1)
    try:
        seq = 0

        def joined() -> bool:        # a subscription takes effect some time after the connect
            nonlocal seq
            pub.send_multipart(encode(TOPIC_HW_COMMAND, _command(seq)))
            seq += 1
            return bool(collector.get(TOPIC_HW_COMMAND))

        wait_for(joined, what="the collector subscribed")
        with collector.check_lock:                                  # no schema check can run meanwhile
            first = seq
            for seq in range(first, first + BURST):
                pub.send_multipart(encode(TOPIC_HW_COMMAND, _command(seq, "fly" if seq == first + 1 else "track")))
            wait_for(lambda: collector.get(TOPIC_HW_COMMAND)[-1]["seq"] == first + BURST - 1,
                     what="the burst received with the checks held")
            assert len(collector.unchecked) >= BURST
        invalid = collector.invalid
        assert len(invalid) == 1 and invalid[0].startswith(TOPIC_HW_COMMAND) and "'fly'" in invalid[0], invalid
        assert not collector.unchecked
    finally:
        collector.close()
        pub.close(0)
