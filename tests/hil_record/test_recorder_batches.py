"""The recorder's batched write path: messages are taken off a real SUB socket in turns, validated a run of one shape
at a time, counted per topic at once and packed into MCAP chunks in bulk. Whatever the batch boundaries, the file
must hold every valid message byte for byte in receipt order, the gap and restart counts must be those of counting
message by message, and a bad message inside a batch must be counted and dropped with the rest of its batch kept.
The files are read back with the mcap package's own reader (indexed and streaming)."""
from __future__ import annotations

import time

import msgpack
import numpy as np
import pytest
import zmq
from mcap.reader import make_reader
from mcap.records import Message
from mcap.stream_reader import StreamReader
from mcap.writer import CompressionType, Writer

from hil.recording.mcap_io import MESSAGE_ENCODING, RecordingWriter, read_recording
from hil.recording import recorder as recorder_module
from hil.recording.recorder import SHAPE_GROUP_MIN_MESSAGES, Recorder
from hil.recording.template_decode import matches, structure
from sim.messages import SeqTracker
from sim.network import load_endpoints

from .conftest import DEADLINE_S, hw_status, sim_state, wait_for


@pytest.fixture
def rig(network, tmp_path):
    """A Recorder in this process on real sockets, subscribed (the slow joiner waited out), and a PUB socket on the
    simulator's endpoint; yields (recorder, pub, send) where send(frames) publishes one multipart message."""
    context = zmq.Context()
    pub = context.socket(zmq.PUB)
    pub.setsockopt(zmq.SNDHWM, 0)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind(network["sim_pub"])
    recorder = Recorder(load_endpoints(network["path"]), progress=False, context=context, run_dir=tmp_path)
    deadline = time.monotonic() + DEADLINE_S
    while not recorder.sub.poll(10):
        pub.send_multipart([b"warmup", msgpack.packb({"seq": 0})])
        assert time.monotonic() < deadline, "the recorder never subscribed"
    # the last warm-up message: once it is taken, every earlier one has been (one PUB delivers in order), and
    # nothing of the warm-up is left to arrive inside a test's batch
    pub.send_multipart([b"warmup", msgpack.packb({"seq": 1})])
    wait_for(lambda: recorder.sub.poll(10) and recorder.receive_batch() is not None
             and msgpack.unpackb(recorder.pending_payloads[-1])["seq"] == 1, "the last warm-up message")
    recorder.write_pending()                         # idle: the warm-up messages are not part of any recording
    try:
        yield recorder, pub
    finally:
        recorder.sub.close()
        recorder.control.close()
        pub.close()
        context.term()


def _take(recorder: Recorder, count: int) -> None:
    """Receive until ``count`` messages are queued (all that was published has crossed the loopback)."""
    deadline = time.monotonic() + DEADLINE_S
    while len(recorder.pending_topics) < count:
        recorder.sub.poll(50)
        recorder.receive_batch()
        assert time.monotonic() < deadline, f"{len(recorder.pending_topics)} of {count} messages arrived"
    assert len(recorder.pending_topics) == count     # nothing else was published after the fixture's last warm-up


def _read(path) -> list[tuple[str, bytes, int, int]]:
    """(topic, data, sequence, publish_time) of every message, in file order, by the mcap package's indexed reader."""
    with open(path, "rb") as handle:
        return [(channel.topic, message.data, message.sequence, message.publish_time)
                for _, channel, message in make_reader(handle).iter_messages(log_time_order=False)]


def test_batches_keep_receipt_order_and_count_gaps_and_restarts_across_their_boundaries(rig, tmp_path):
    recorder, pub = rig
    session = recorder.start(tmp_path / "batches.mcap")
    # per batch: (topic, seq) in publishing order; gaps and restarts fall on and inside batch boundaries, two topics
    # interleave, and runs are long enough to be read by shape
    run = SHAPE_GROUP_MIN_MESSAGES + 8
    batches = [
        [("sim/state", k) for k in range(run)] + [("hw/status", k) for k in range(5)],
        [("sim/state", run + 3 + k) for k in range(run)] + [("hw/status", 9)],           # 3 missed at the boundary
        [("hw/status", 10)] + [("sim/state", 2 * run + 3 + k) for k in range(run // 2)]
        + [("sim/state", 7 + k) for k in range(run // 2)],                               # a restart inside a batch
        [("sim/state", 7 + run // 2 + 2 * k) for k in range(run)],                       # every other seq missed
    ]
    sent, reference = [], SeqTracker()
    for batch in batches:
        for topic, seq in batch:
            payload = msgpack.packb(sim_state(seq, seq * 1e-3, [0.1 * seq, -0.2]) if topic == "sim/state"
                                    else hw_status(seq))
            pub.send_multipart([topic.encode(), payload])
            sent.append((topic, payload, seq, msgpack.unpackb(payload)["stamp_ns"]))
            reference.update(topic, seq)
        _take(recorder, len(batch))
        recorder.write_pending()
    status = session.summary()
    recorder.stop()
    assert _read(tmp_path / "batches.mcap") == sent
    for topic in ("sim/state", "hw/status"):
        assert status["topics"][topic]["gaps"] == reference.gaps.get(topic, 0)
        assert status["topics"][topic]["restarts"] == reference.restarts.get(topic, 0)
        assert status["topics"][topic]["messages"] == reference.received[topic]
    # the counts worked out by hand: sim/state 3 missed at a boundary and run - 1 inside the last batch; hw/status 5..8
    assert status["topics"]["sim/state"]["gaps"] == 3 + (run - 1)
    assert status["topics"]["hw/status"]["gaps"] == 4
    assert status["topics"]["sim/state"]["restarts"] == 1
    assert status["malformed"] == 0


def test_a_write_takes_one_batch_off_the_queue_and_every_message_is_written_in_order(rig, tmp_path, monkeypatch):
    """A receive turn takes all that has arrived (the backlog is held by the recorder, not by ZeroMQ); a write in the
    loop takes the first WRITE_BATCH_BYTES of payloads (here 64 KiB: up to and with the message that reaches it) off
    the queue and leaves the rest queued in order; the messages of all the batches are in the file in order."""
    recorder, pub = rig
    monkeypatch.setattr(recorder_module, "WRITE_BATCH_BYTES", 64 * 1024)
    recorder.start(tmp_path / "turns.mcap")
    payloads = [msgpack.packb(sim_state(k, k * 1e-3, [0.1 * k] * 32)) for k in range(200)]
    for payload in payloads:
        pub.send_multipart([b"sim/state", payload])
    _take(recorder, len(payloads))
    assert recorder.batch_full()
    written = recorder.write_pending(one_batch=True)
    reaching = int(np.argmax(np.cumsum(list(map(len, payloads))) >= 64 * 1024))
    assert written == reaching + 1, "the first batch: up to and with the message reaching 64 KiB"
    assert recorder.pending_payloads == payloads[written:]
    assert sum(recorder.pending_lengths) == sum(map(len, payloads[written:]))
    batches = 1
    while recorder.pending_payloads:
        batches += recorder.write_pending(one_batch=True) > 0
    recorder.stop()
    assert batches >= -(-len(payloads) // written)
    assert [data for _, data, _, _ in _read(tmp_path / "turns.mcap")] == payloads


def test_a_queue_at_its_bound_drops_what_arrives_and_counts_it_per_topic_and_as_gaps(rig, tmp_path, monkeypatch):
    """The queue holds at most ``queue_max_bytes`` (payloads plus HELD_MESSAGE_BYTES each), looked at every
    RECEIVE_CLOCK_EVERY messages (here 8): of 200 states received with no write, those beyond are dropped, counted
    per topic by reason; every state is then written or counted dropped, and the drops are the file's seq gaps."""
    recorder, pub = rig
    monkeypatch.setattr(recorder_module, "RECEIVE_CLOCK_EVERY", 8)
    payloads = [msgpack.packb(sim_state(k, k * 1e-3, [0.1 * k] * 32)) for k in range(201)]
    held = len(payloads[0]) + recorder_module.HELD_MESSAGE_BYTES
    recorder.queue_max_bytes = 50 * held
    recorder.start(tmp_path / "bound.mcap")
    for payload in payloads[:200]:
        pub.send_multipart([b"sim/state", payload])
    deadline = time.monotonic() + DEADLINE_S
    while len(recorder.pending_topics) + recorder.session.dropped.get(b"sim/state", 0) < 200:
        assert time.monotonic() < deadline, "the 200 states never all arrived"
        recorder.sub.poll(50)
        recorder.receive_batch()
    queued, dropped = len(recorder.pending_topics), recorder.session.dropped[b"sim/state"]
    assert 50 <= queued < 50 + 8 and queued + dropped == 200
    assert recorder.backlog()["held_bytes"] == sum(map(len, payloads[:queued])) + queued * \
        recorder_module.HELD_MESSAGE_BYTES
    recorder.write_pending()
    pub.send_multipart([b"sim/state", payloads[200]])                # after the drops: they become a seq gap
    _take(recorder, 1)
    status = recorder.stop()
    assert [data for _, data, _, _ in _read(tmp_path / "bound.mcap")] == payloads[:queued] + payloads[200:]
    assert status["topics"]["sim/state"]["dropped"] == {recorder_module.DROP_BACKLOG_FULL: dropped}
    assert status["topics"]["sim/state"]["gaps"] == dropped
    assert status["backlog"]["dropped"] == {recorder_module.DROP_BACKLOG_FULL: dropped}


def test_a_bad_message_inside_a_batch_is_counted_and_dropped_and_the_rest_recorded(rig, tmp_path, monkeypatch):
    recorder, pub = rig
    session = recorder.start(tmp_path / "bad.mcap")
    good = [msgpack.packb(hw_status(128 + k)) for k in range(3 * SHAPE_GROUP_MIN_MESSAGES)]
    length = len(good[0])
    assert all(len(p) == length for p in good)
    # blocks of 8 messages: the blocks with a bad message are decoded one by one, the others read by shape
    monkeypatch.setattr(recorder_module, "SHAPE_BLOCK_BYTES", 8 * length)
    template = good[0]
    v_at = template.index(b"\xa1v") + 2                   # the fixint of "v": 1
    seq_at = template.index(b"\xa3seq") + 4               # seq's type byte (uint8: 128..223)
    assert template[v_at] == 1 and template[seq_at] == 0xcc
    nested_at = template.index(b"\xaacrc_errors") + 11    # a fixint inside the nested map "link"
    bad = {
        3: template[:v_at] + b"\xc1" + template[v_at + 1:],           # a never-used type byte: not MessagePack
        12: template[:nested_at] + b"\xc1" + template[nested_at + 1:],  # the same, inside the nested map
        21: template[:seq_at] + b"\xd0\xf6" + template[seq_at + 2:],    # seq = int8 -10: negative
        30: msgpack.packb([1, 2, 3]),                                   # not a map
    }
    unusual_but_valid = {
        45: template[:v_at] + b"\x02" + template[v_at + 1:],            # another fixint: a valid map, kept
        50: msgpack.packb({**hw_status(178), "estop": True}),          # a bool flipped: same length, kept
    }
    sent, malformed_frames = [], 0
    for k, payload in enumerate(good):
        payload = bad.get(k, unusual_but_valid.get(k, payload))
        pub.send_multipart([b"hw/status", payload])
        if k not in bad:
            sent.append(("hw/status", payload))
        if k == 60:
            pub.send(b"hw/status")                                      # one frame
            pub.send_multipart([b"hw/status", payload, b"extra"])       # three frames
            pub.send_multipart([b"hw/\xff", payload])                   # a topic that is not ascii
            malformed_frames = 3
    _take(recorder, len(good) + malformed_frames)
    recorder.write_pending()
    status = session.summary()
    recorder.stop()
    assert [(topic, data) for topic, data, _, _ in _read(tmp_path / "bad.mcap")] == sent
    assert status["malformed"] == len(bad) + malformed_frames
    assert status["topics"]["hw/status"]["messages"] == len(sent)


def test_structure_finds_nested_numbers_and_checks_every_fixint():
    payload = hw_status(7)
    data = msgpack.packb(payload)
    shape = structure(data, payload, frozenset(("seq", "stamp_ns")))
    assert shape is not None and set(shape.fields) == {"seq", "stamp_ns"}
    rows = np.frombuffer(data, dtype=np.uint8)[None, :]
    assert matches(shape, rows)
    for fixint in shape.fixints.tolist():
        broken = rows.copy()
        broken[0, fixint] = 0xc1
        assert not matches(shape, broken)
        with pytest.raises(msgpack.FormatError):              # and indeed not MessagePack
            msgpack.unpackb(broken.tobytes())
    renamed = data.replace(b"lifecycle", b"lifecyclf")
    assert not matches(shape, np.frombuffer(renamed, dtype=np.uint8)[None, :])
    repeated = b"\x82\xa3seq\x01\xa3seq\x02"                            # a repeated key: the map keeps the last
    assert structure(repeated, msgpack.unpackb(repeated), frozenset(("seq",))) is None


def test_update_many_counts_as_update_one_by_one():
    rng = np.random.default_rng(3)
    for trial in range(20):
        seqs = np.cumsum(rng.choice([1, 1, 1, 2, 5, -30], size=int(rng.integers(1, 60))))
        seqs = (seqs - min(seqs.min(), 0)).astype(np.int64)
        if trial == 19:
            seqs = seqs.astype(np.uint64) + np.uint64(1 << 63)              # past int64
        one_by_one, many = SeqTracker(), SeqTracker()
        cut = int(rng.integers(0, len(seqs) + 1))
        for seq in seqs.tolist():
            one_by_one.update("t", seq)
        many.update_many("t", seqs[:cut])
        many.update_many("t", seqs[cut:])
        assert (many.received, many.gaps, many.restarts, many.last_seq) == (
            one_by_one.received, one_by_one.gaps, one_by_one.restarts, one_by_one.last_seq)


@pytest.mark.parametrize("compression", [CompressionType.ZSTD, CompressionType.LZ4, CompressionType.NONE])
def test_a_bulk_written_file_reads_back_as_the_mcap_writers_own(tmp_path, compression):
    """add_batch (chunks closed inside a batch: small chunks) and add give the messages, statistics and indexes the
    mcap package's Writer gives for the same messages."""
    rng = np.random.default_rng(11)
    messages = []
    for k in range(900):
        topic = ("sim/state", "hw/status", "x/unknown")[int(rng.integers(0, 3))]
        payload = msgpack.packb({"seq": k, "stamp_ns": 10 * k, "pad": "p" * int(rng.integers(0, 300))})
        messages.append((topic, payload, 1_000 + k, 10 * k, k))
    ours = tmp_path / "ours.mcap"
    writer = RecordingWriter(ours, chunk_bytes=16 * 1024, compression=compression)
    writer.add_metadata("recording", {"note": "x"})
    topics = sorted({m[0] for m in messages})
    channels = {topic: writer.channel_id(topic) for topic in topics}
    writer.add(*messages[0])
    rest = messages[1:]
    for begin in range(0, len(rest), 300):
        part = rest[begin:begin + 300]
        writer.add_batch(np.array([channels[m[0]] for m in part], dtype=np.uint16), [m[1] for m in part],
                         np.array([m[2] for m in part], dtype=np.uint64), np.array([m[3] for m in part], np.uint64),
                         np.array([m[4] for m in part], dtype=np.uint64))
    writer.close()
    theirs = tmp_path / "theirs.mcap"
    with open(theirs, "wb") as handle:
        reference = Writer(handle, chunk_size=16 * 1024, compression=compression)
        reference.start()
        ids = {topic: reference.register_channel(topic, MESSAGE_ENCODING, 0) for topic in topics}
        for topic, payload, log_time, publish_time, seq in messages:
            reference.add_message(ids[topic], log_time, payload, publish_time, seq)
        reference.finish()

    def contents(path):
        with open(path, "rb") as handle:
            reader = make_reader(handle)
            summary = reader.get_summary()
            read = [(c.topic, m.data, m.log_time, m.publish_time, m.sequence)
                    for _, c, m in reader.iter_messages(log_time_order=True)]
            counts = {summary.channels[c].topic: n for c, n in summary.statistics.channel_message_counts.items()}
            spans = [(i.message_start_time, i.message_end_time) for i in summary.chunk_indexes]
            return read, summary.statistics.message_count, counts, spans

    read, count, counts, spans = contents(ours)
    assert (read, count, counts) == contents(theirs)[:3]
    assert read == messages
    assert len(spans) > 3 and spans[0][0] == messages[0][2] and spans[-1][1] == messages[-1][2]
    with open(ours, "rb") as handle:
        streamed = sum(isinstance(r, Message) for r in StreamReader(handle, validate_crcs=True).records)
    assert streamed == len(messages)
    recording = read_recording(ours)
    assert recording.damage == [] and recording.metadata["recording"] == {"note": "x"}
    assert [bytes(p) for _, _, p in recording.messages["hw/status"]] == [m[1] for m in messages if m[0] == "hw/status"]
