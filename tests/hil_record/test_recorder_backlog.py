"""A recorder held back keeps its memory bounded and says what it dropped (docs/recording.md, "Memory").

A real `mms record` is frozen (SIGSTOP) while a real PUB socket queues a flood of 2.1 kB states for it, then thawed.
Before the bound, ZeroMQ's receive queue (high-water mark 1 000 000 messages) took the whole flood into the
recorder's memory (4.2 kB per queued state). With ``--max-backlog``, the recorder holds at most that much and drops
what arrives beyond it, counted per topic by reason: every published message is then either in the file (read back
with the mcap package's reader) or counted dropped, the drops are the file's seq gaps, and the recording's health
names them."""
from __future__ import annotations

import signal

import msgpack
import zmq
from mcap.reader import make_reader

from hil import testing
from hil.recording.mcap_io import read_recording
from hil.recording.recorder import DROP_BACKLOG_FULL, MIB
from hil.validation.health import recorder_drops, recording_warnings

from .conftest import sim_state

#: the recorder's bound in the test, MiB: small, so that the flood is many times it
MAX_BACKLOG_MIB = 8
#: states published while the recorder is frozen: 40 000 of 2.1 kB, 84 MB of payload (172 MB queued before the bound)
FLOOD_MESSAGES = 40_000
#: the most the recorder's resident set may grow by over the flood, MiB: its queue (the bound and one receive step,
#: 512 states of 4.2 kB), ZeroMQ's queue (the bound over 4 KiB: 2 048 states of 4.2 kB), a write batch's arrays and
#: the open chunk (4 MiB), the zstd context. Measured growth of the peak (VmHWM) over five runs: see PEAK_SPREAD
PEAK_GROWTH_LIMIT_MIB = 3 * MAX_BACKLOG_MIB
PAGE_BYTES = 4096


def _status_kib(pid: int, field: str) -> int:
    """A /proc/PID/status memory field (VmRSS, VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_recorder_held_back_stays_within_its_backlog_and_counts_its_drops_as_gaps(tmp_path, network, kit):
    context = zmq.Context()
    pub = kit.burst_publisher(context, network)
    out = tmp_path / "held.mcap"
    proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--quiet",
                   "--max-backlog", str(MAX_BACKLOG_MIB))
    payloads = [msgpack.packb(sim_state(seq, seq * 1e-3, [0.001 * seq] * 32)) for seq in range(FLOOD_MESSAGES + 1)]
    try:
        kit.wait_subscribed(pub, network)
        proc.send_signal(signal.SIGSTOP)
        testing.wait_for(lambda: testing.read_process(proc.pid).state == "T", what="the recorder stopped")
        resident_kib = _status_kib(proc.pid, "VmRSS")
        for payload in payloads[:FLOOD_MESSAGES]:
            pub.send_multipart([b"sim/state", payload])
        proc.send_signal(signal.SIGCONT)

        def taken(reply: dict) -> int:
            state = reply.get("topics", {}).get("sim/state", {})
            return state.get("messages", 0) + state.get("dropped", {}).get(DROP_BACKLOG_FULL, 0)
        kit.status_when(network["rec"], lambda reply: taken(reply) == FLOOD_MESSAGES, "the flood taken or dropped")
        peak_growth_mib = (_status_kib(proc.pid, "VmHWM") - resident_kib) / 1024
        # one more state once the queue is empty: the drops at the flood's end become a seq gap before it
        pub.send_multipart([b"sim/state", payloads[FLOOD_MESSAGES]])
        kit.status_when(network["rec"], lambda reply: taken(reply) == FLOOD_MESSAGES + 1, "the last state written")
        summary = kit.request(network["rec"], {"cmd": "stop"})
    finally:
        kit.stop_process(proc, signal.SIGINT)
        context.destroy(0)
    assert summary["ok"], summary
    state = summary["topics"]["sim/state"]
    dropped = state["dropped"][DROP_BACKLOG_FULL]
    assert dropped > 0, "the flood is many times the bound: some of it must have been dropped"
    assert peak_growth_mib <= PEAK_GROWTH_LIMIT_MIB, f"the recorder grew by {peak_growth_mib:.1f} MiB"
    assert summary["backlog"]["peak_bytes"] <= summary["backlog"]["max_bytes"] + 512 * (2048 + len(payloads[0]))
    assert summary["backlog"]["max_bytes"] == MAX_BACKLOG_MIB * MIB

    with open(out, "rb") as handle:
        written = [message.data for _, _, message in make_reader(handle).iter_messages(topics=["sim/state"])]
    seqs = [msgpack.unpackb(data, raw=False)["seq"] for data in written]
    assert written == [payloads[seq] for seq in seqs], "what was written, byte for byte, in order"
    assert seqs[-1] == FLOOD_MESSAGES and len(seqs) == state["messages"]
    missing = FLOOD_MESSAGES + 1 - len(seqs)
    assert missing == dropped == state["gaps"] + seqs[0], "every message written or counted dropped, as seq gaps"

    recording = read_recording(out)
    assert recorder_drops(recording.metadata) == {"sim/state": {DROP_BACKLOG_FULL: dropped}}
    assert any("dropped" in warning and DROP_BACKLOG_FULL in warning for warning in recording_warnings(recording))
