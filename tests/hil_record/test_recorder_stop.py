"""A recorder stopped while messages still wait for it writes them all before it closes the file: on a busy
machine (the live loop's processes in the real-time class) it can be seconds behind when the demo stops it, and
the driver's last commands, the ramp to neutral, are the last messages it gets."""
from __future__ import annotations

import signal

import msgpack
import zmq
from mcap.reader import make_reader

#: messages queued while the recorder is frozen: without the drain one receive turn took 3 072 of 50 000 (load 7),
#: and a drain bounded at 2 s of wall time took 48 640 of 50 000 at load 10 (now it ends on the socket's quiet, not a
#: clock: hil/recording/recorder.py STOP_DRAIN_MAX_S). 15 000: 50 000 cost 32 s of the suite's budget at load 15
BACKLOG_MESSAGES = 15_000


def test_a_recorder_stopped_behind_its_stream_writes_the_whole_backlog(tmp_path, network, kit):
    context = zmq.Context()
    pub = kit.burst_publisher(context, network)
    out = tmp_path / "stop.mcap"
    proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--quiet")
    try:
        kit.wait_subscribed(pub, network)
        proc.send_signal(signal.SIGSTOP)            # the recorder falls behind: everything queues for it
        for seq in range(BACKLOG_MESSAGES):
            pub.send_multipart([b"hw/status", msgpack.packb({"v": 1, "seq": seq, "stamp_ns": seq + 1})])
        proc.send_signal(signal.SIGINT)             # the stop is waiting when it wakes up
        proc.send_signal(signal.SIGCONT)
        _, stderr = kit.stop_process(proc, signal.SIGINT)
    finally:
        context.destroy(0)
    assert proc.returncode == 0, stderr
    with open(out, "rb") as handle:
        seqs = [msgpack.unpackb(m.data, raw=False)["seq"]
                for _, _, m in make_reader(handle).iter_messages(topics=["hw/status"])]
    assert seqs == list(range(BACKLOG_MESSAGES))
