"""A recorder held back keeps its memory bounded and says what it dropped (docs/recording.md, "Memory").

A real `mms record` is frozen (SIGSTOP) while real PUB sockets on both of its publishers' endpoints (the
simulator's and the driver's) queue a flood of 2.1 kB states for it, then thawed. Before any bound, ZeroMQ's receive
queue (high-water mark 1 000 000 messages) took the whole flood into the recorder's memory (its peak grew by
104 MiB; as with --max-backlog 100000). With ``--max-backlog`` bounding the recorder's own queue only, ZeroMQ's
receive pipes (one per publisher, each with the high-water mark) held as much again each: 34.9 MiB of growth at an
8 MiB bound with both publishers flooding. Now the bound is shared out between the pipes and the own queue (which
holds copies of the payloads, counted as they cost); beyond
it, what arrives is dropped, counted per topic by reason: every published message is then either in the file (read
back with the mcap package's reader) or counted dropped, the drops are the file's seq gaps, and the recording's
health names them. No clock is asserted on: the recorder is frozen, not raced."""
from __future__ import annotations

import signal
import tracemalloc

import msgpack
import pytest
import zmq
from mcap.reader import make_reader

from hil import testing
from hil.recording.mcap_io import RecordingWriter, read_recording
from hil.recording.recorder import (DROP_BACKLOG_FULL, HELD_MESSAGE_BYTES, HWM_MESSAGE_BYTES, MIB, PIPES_SHARE,
                                    RECEIVE_CLOCK_EVERY, split_backlog)
from hil.validation.health import recorder_drops, recording_warnings

from .conftest import sim_state

#: the recorder's bound in the test, MiB: small, so that the flood is many times it, and its own queue's share
#: (3 MiB) holds less than a write batch (WRITE_BATCH_BYTES): a write waits for the flush, and a flood is dropped
#: in part however fast the machine
MAX_BACKLOG_MIB = 4
#: states each publisher sends while the recorder is frozen: 40 000 of 2.1 kB, 84 MB of payload
FLOOD_MESSAGES = 40_000
#: the flooded topic on each publisher's endpoint (the recorder takes any topic)
FLOOD_TOPICS = {"sim_pub": "sim/state", "driver_pub": "hw/flood"}
#: what writing costs beyond the backlog, MiB: a write batch's records built and compressed and the open chunk
#: (the peak growth of benchmarks/bench_recorder_memory.py --held-back 8 --record-args "--hwm 1" beyond its own
#: queue's peak, ZeroMQ's pipes holding a message each: 8.3-8.4 MiB over two runs with the Frames queued, 6.3 MiB
#: over two with the payloads copied; the larger taken)
WRITING_MIB = 8.4
#: the most the recorder's peak resident set (VmHWM) may grow by over the floods, MiB: the bound and the writing.
#: Measured: 8.14-9.80 MiB over five runs (load 0.6-1.8 on the 2-core machine); with the bound on the own queue only
#: (ZeroMQ's pipes beside it, one per publisher, each at the bound over 4 KiB) and the payloads kept as Frames in
#: ZeroMQ's buffers, 17.6-20.4 MiB over three. The band is 1.6 times the measured spread (1.66 MiB) above the maximum
PEAK_GROWTH_LIMIT_MIB = MAX_BACKLOG_MIB + WRITING_MIB


def _status_kib(pid: int, field: str) -> int:
    """A /proc/PID/status memory field (VmRSS, VmHWM), KiB."""
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def test_a_recorder_held_back_stays_within_its_backlog_and_counts_its_drops_as_gaps(tmp_path, network, kit):
    context = zmq.Context()
    pubs = {endpoint: kit.burst_publisher(context, network, endpoint) for endpoint in FLOOD_TOPICS}
    out = tmp_path / "held.mcap"
    proc = kit.mms("record", "--network", network["path"], "--out", str(out), "--quiet",
                   "--max-backlog", str(MAX_BACKLOG_MIB))
    payloads = [msgpack.packb(sim_state(seq, seq * 1e-3, [0.001 * seq] * 32)) for seq in range(FLOOD_MESSAGES + 1)]
    topics = list(FLOOD_TOPICS.values())

    def taken(reply: dict) -> int:
        """The fewest messages of a flooded topic written or dropped."""
        counts = [reply.get("topics", {}).get(topic, {}) for topic in topics]
        return min(state.get("messages", 0) + state.get("dropped", {}).get(DROP_BACKLOG_FULL, 0) for state in counts)
    try:
        for endpoint, pub in pubs.items():
            kit.wait_subscribed(pub, network, f"bench/warmup/{endpoint}")
        proc.send_signal(signal.SIGSTOP)
        testing.wait_for(lambda: testing.read_process(proc.pid).state == "T", what="the recorder stopped")
        resident_kib = _status_kib(proc.pid, "VmRSS")     # the growth is the peak's (VmHWM) above this
        for payload in payloads[:FLOOD_MESSAGES]:
            for endpoint, pub in pubs.items():
                pub.send_multipart([FLOOD_TOPICS[endpoint].encode(), payload])
        proc.send_signal(signal.SIGCONT)
        kit.status_when(network["rec"], lambda reply: taken(reply) == FLOOD_MESSAGES, "the floods taken or dropped")
        peak_growth_mib = (_status_kib(proc.pid, "VmHWM") - resident_kib) / 1024
        # one more state once the queue is empty: the drops at the flood's end become a seq gap before it
        for endpoint, pub in pubs.items():
            pub.send_multipart([FLOOD_TOPICS[endpoint].encode(), payloads[FLOOD_MESSAGES]])
        kit.status_when(network["rec"], lambda reply: taken(reply) == FLOOD_MESSAGES + 1, "the last states written")
        summary = kit.request(network["rec"], {"cmd": "stop"})
    finally:
        kit.stop_process(proc, signal.SIGINT)
        context.destroy(0)
    assert summary["ok"], summary
    assert peak_growth_mib <= PEAK_GROWTH_LIMIT_MIB, f"the recorder grew by {peak_growth_mib:.1f} MiB"
    backlog = summary["backlog"]
    assert backlog["max_bytes"] == MAX_BACKLOG_MIB * MIB and backlog["pipes"] == len(FLOOD_TOPICS)
    assert backlog["queue_max_bytes"] + backlog["pipes"] * backlog["hwm"] * HWM_MESSAGE_BYTES <= backlog["max_bytes"]
    one_step = RECEIVE_CLOCK_EVERY * (HELD_MESSAGE_BYTES + len(payloads[0]))
    assert backlog["peak_bytes"] <= backlog["queue_max_bytes"] + one_step

    recording = read_recording(out)
    drops = {}
    for topic in topics:
        state = summary["topics"][topic]
        dropped = state["dropped"].get(DROP_BACKLOG_FULL, 0)
        if dropped:
            drops[topic] = dropped
        with open(out, "rb") as handle:
            written = [message.data for _, _, message in make_reader(handle).iter_messages(topics=[topic])]
        seqs = [msgpack.unpackb(data, raw=False)["seq"] for data in written]
        assert written == [payloads[seq] for seq in seqs], "what was written, byte for byte, in order"
        assert seqs[-1] == FLOOD_MESSAGES and len(seqs) == state["messages"]
        missing = FLOOD_MESSAGES + 1 - len(seqs)
        assert missing == dropped == state["gaps"] + seqs[0], "every message written or counted dropped, as gaps"
    assert drops, "the floods are many times the bound: some of them must have been dropped"
    assert recorder_drops(recording.metadata) == {topic: {DROP_BACKLOG_FULL: count} for topic, count in drops.items()}
    assert any("dropped" in warning and DROP_BACKLOG_FULL in warning for warning in recording_warnings(recording))


@pytest.mark.parametrize("publishers", [1, 2, 5])
def test_the_pipes_and_the_own_queue_share_the_bound_for_any_number_of_publishers(publishers):
    bound = MAX_BACKLOG_MIB * MIB
    hwm, queue_max = split_backlog(bound, publishers)
    pipes = publishers * hwm * HWM_MESSAGE_BYTES
    assert queue_max + pipes <= bound
    assert pipes <= PIPES_SHARE * bound < pipes + publishers * HWM_MESSAGE_BYTES, "the pipes get their share"
    hwm_given, queue_given = split_backlog(bound, publishers, hwm=7)
    assert hwm_given == 7 and queue_given == bound - publishers * 7 * HWM_MESSAGE_BYTES
    with pytest.raises(ValueError, match="takes all of the backlog"):
        split_backlog(bound, publishers, hwm=-(-bound // (publishers * HWM_MESSAGE_BYTES)))


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
