"""A recorder held back keeps its memory bounded and says what it dropped (docs/recording.md, "Memory").

A real `mms record` is frozen (SIGSTOP) while a real PUB socket queues a flood of 2.1 kB states for it, then thawed.
Before the bound, ZeroMQ's receive queue (high-water mark 1 000 000 messages) took the whole flood into the
recorder's memory (its peak grew by 104 MiB; as with --max-backlog 100000). With ``--max-backlog``, the recorder
holds at most that much and drops what arrives beyond it, counted per topic by reason: every published message is
then either in the file (read back with the mcap package's reader) or counted dropped, the drops are the file's seq
gaps, and the recording's health names them. No clock is asserted on: the recorder is frozen, not raced."""
from __future__ import annotations

import signal
import tracemalloc

import msgpack
import zmq
from mcap.reader import make_reader

from hil import testing
from hil.recording.mcap_io import RecordingWriter, read_recording
from hil.recording.recorder import DROP_BACKLOG_FULL, HELD_MESSAGE_BYTES, MIB, RECEIVE_CLOCK_EVERY
from hil.validation.health import recorder_drops, recording_warnings

from .conftest import sim_state

#: the recorder's bound in the test, MiB: small, so that the flood is many times it
MAX_BACKLOG_MIB = 8
#: states published while the recorder is frozen: 40 000 of 2.1 kB, 84 MB of payload
FLOOD_MESSAGES = 40_000
#: the most the recorder's peak resident set (VmHWM) may grow by over the flood, MiB: its queue (the bound and one
#: receive step, 512 states), ZeroMQ's queue (the bound over 4 KiB: 2 048 states of 4.2 kB), a write batch and the
#: open chunk (4 MiB each). Measured: 15.0-28.1 MiB over five runs (load 5 on the 2-core machine), against 104 MiB
#: unbounded; the band is the measured maximum and a third of the spread
PEAK_GROWTH_LIMIT_MIB = 4 * MAX_BACKLOG_MIB


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
        resident_kib = _status_kib(proc.pid, "VmRSS")     # the growth is the peak's (VmHWM) above this
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
    one_step = RECEIVE_CLOCK_EVERY * (HELD_MESSAGE_BYTES + len(payloads[0]))
    assert summary["backlog"]["peak_bytes"] <= summary["backlog"]["max_bytes"] + one_step
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


#: the Python heap a closed chunk leaves in the writer (its chunk index, for the summary), bytes: 200.1-200.5
#: measured (tracemalloc, 2 000 chunks of five messages, three runs; the bytearray's growth amortized), against 715
#: when each was kept as an mcap ChunkIndex object with its dict of offsets; the band is a bytearray's growth step
#: (1/8) above the measured
CHUNK_INDEX_HEAP_LIMIT_BYTES = 225
#: a chunk closes past this many bytes of records: five of the test's messages (51 B each) make one
CHUNK_BYTES = 250


def test_a_closed_chunk_leaves_its_index_serialized_and_the_file_reads_back(tmp_path):
    """Two chunks a second (the flush interval) for the length of a recording: what each leaves on the heap is the
    recorder's only growth at a steady stream. The file's summary still indexes every chunk (the mcap reader's
    indexed read finds every message). Five topics, a message of each per chunk (CHUNK_BYTES)."""
    topics = ["sim/state", "sim/status", "hw/status", "hw/command", "hw/telemetry"]
    writer = RecordingWriter(tmp_path / "chunks.mcap", chunk_bytes=CHUNK_BYTES)
    payload = msgpack.packb({"seq": 1, "stamp_ns": 2, "x": "padding"})

    def chunks(begin: int, end: int) -> None:
        for k in range(begin, end):
            for i, topic in enumerate(topics):
                writer.add(topic, payload, 1_000 * k + i, k, k)

    chunks(0, 100)                      # the channels registered, the buffers of a chunk allocated once
    closed = writer._statistics.chunk_count
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        chunks(100, 2_100)
        per_chunk = (tracemalloc.get_traced_memory()[0] - before) / (writer._statistics.chunk_count - closed)
    finally:
        tracemalloc.stop()
    writer.close()
    assert per_chunk <= CHUNK_INDEX_HEAP_LIMIT_BYTES
    with open(tmp_path / "chunks.mcap", "rb") as handle:
        reader = make_reader(handle)
        assert reader.get_summary().statistics.chunk_count >= 2_000
        assert sum(1 for _ in reader.iter_messages()) == 5 * 2_100
