"""The columnar decode (hil/recording/template_decode.py) gives the tables of the message-by-message decode."""
from __future__ import annotations

import msgpack
import numpy as np
from mcap.reader import make_reader

from hil.recording import series
from hil.recording.mcap_io import RecordingWriter, read_recording
from hil.recording.template_decode import decode_batch, template
from sim.messages import TOPIC_HW_STATUS, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE

N_JOINTS = 5
#: more than one decode batch, with seq crossing the fixint / uint8 / uint16 boundaries (the payload grows)
MESSAGES = 2 * series._BATCH + 300


def _state(k: int, rng) -> dict:
    names = [f"j{i}" for i in range(N_JOINTS)]
    return {"v": 1, "seq": k, "t": k * 1e-3, "stamp_ns": 1_700_000_000_000_000_000 + k * 1_000_000,
            "joint_names": names, "q": rng.standard_normal(N_JOINTS).tolist(),
            "tau": rng.integers(-32, 32, N_JOINTS).tolist(),             # negative and positive fixints
            "strain": [float(x) for x in rng.standard_normal(2)], "mode": "run",
            "flag": bool(k % 997 == 0),                                   # a bool that flips now and then
            "base_wrench": rng.standard_normal(6).tolist()}


def _status(k: int) -> dict:
    return {"v": 1, "seq": k, "stamp_ns": 1_700_000_000_000_000_000 + k * 10_000_000, "state": "active",
            "link": {"frames_ok": k, "crc_errors": 0}}                    # numbers in a nested map


def _telemetry(k: int, rng) -> dict:
    """A frame of FRAME samples of 3 servos and a load cell (matrices, one row per sample)."""
    stamp = 1_700_000_000_000_000_000 + k * 10_000_000
    return {"v": 1, "seq": k, "stamp_ns": stamp + 1000, "host_ns": stamp,
            "device_us": [70_000 + (k * FRAME + i) * 1000 for i in range(FRAME)],
            "servo_names": ["a", "b", "c"], "servo_rad": rng.standard_normal((FRAME, 3)).tolist(),
            "load_names": ["fx", "fy"], "load": rng.standard_normal((FRAME, 2)).tolist()}


FRAME = 10


def _write(path):
    rng = np.random.default_rng(3)
    writer = RecordingWriter(path, overwrite=True)
    for k in range(MESSAGES):
        payload = _state(k, rng)
        writer.add(TOPIC_SIM_STATE, msgpack.packb(payload), payload["stamp_ns"] + 5, payload["stamp_ns"], k)
        if k % 10 == 0:
            frame = _telemetry(k // 10, rng)
            writer.add(TOPIC_HW_TELEMETRY, msgpack.packb(frame), frame["stamp_ns"] + 5, frame["stamp_ns"], k // 10)
            status = _status(k // 10)
            writer.add(TOPIC_HW_STATUS, msgpack.packb(status), status["stamp_ns"] + 5, status["stamp_ns"], k // 10)
    writer.close()


def test_the_columnar_decode_gives_the_per_message_tables(tmp_path, monkeypatch):
    path = tmp_path / "run.mcap"
    _write(path)
    recording = read_recording(path)
    states = recording.messages[TOPIC_SIM_STATE]
    # the fast path is taken: a batch of one shape decodes at once, one that changes shape does not
    first = msgpack.unpackb(states[300][2])
    shape = template(states[300][2], first)
    assert decode_batch(shape, [m[2] for m in states[300:900]]) is not None
    assert decode_batch(shape, [m[2] for m in states[0:200]]) is None            # seq 0-127 is one byte shorter
    frames = recording.messages[TOPIC_HW_TELEMETRY]
    frame_shape = template(frames[300][2], msgpack.unpackb(frames[300][2]), matrices=True)
    assert decode_batch(frame_shape, [m[2] for m in frames[300:600]])["servo_rad"].shape == (300, FRAME, 3)
    fast = series.build_tables(recording)
    monkeypatch.setattr(series, "SHAPES_PER_BATCH", 0)  # the message-by-message path
    reference = series.build_tables(recording)
    for topic, table in reference.tables.items():
        mine = fast.tables[topic]
        assert list(mine.columns) == list(table.columns) and mine.groups == table.groups
        assert mine.element_names == table.element_names and mine.text == table.text
        for name, values in table.columns.items():
            assert mine.columns[name].dtype == values.dtype, name
            np.testing.assert_array_equal(mine.columns[name], values, err_msg=name)
    # and both are what a straightforward decode of each message read back by the mcap reader gives
    with open(path, "rb") as handle:
        decoded = [msgpack.unpackb(message.data) for _schema, _channel, message
                   in make_reader(handle).iter_messages(topics=[TOPIC_SIM_STATE])]
    table = fast.tables[TOPIC_SIM_STATE]
    np.testing.assert_allclose(table.group("q"), np.array([d["q"] for d in decoded]), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(table.group("tau"), np.array([d["tau"] for d in decoded]))
    np.testing.assert_array_equal(table.columns["seq"], np.arange(MESSAGES))
    np.testing.assert_array_equal(table.columns["flag"], [float(d["flag"]) for d in decoded])
    assert table.columns["seq"].dtype == np.int64 and table.text["mode"] == ["run"] * MESSAGES
    samples = fast.tables[TOPIC_HW_TELEMETRY]
    assert samples.rows == len(frames) * FRAME and samples.element_names["servo_rad"] == ["a", "b", "c"]


def test_shapes_the_columnar_decode_leaves_to_the_reference_path():
    """Numbers in nested maps, mixed number types in a list, and lists of lists: no template (decoded one by one)."""
    for payload in (_status(3), {"seq": 1, "x": [1, 2.5]}, {"seq": 1, "m": [[1.0, 2.0], [3.0, 4.0]]}):
        data = msgpack.packb(payload)
        assert template(data, msgpack.unpackb(data)) is None, payload
    data = msgpack.packb({"seq": 1, "x": [0.5, 1.5]})
    shape = template(data, msgpack.unpackb(data))
    other = msgpack.packb({"seq": 1, "y": [0.5, 1.5]})                      # same length, another key
    assert decode_batch(shape, [data, other]) is None
    columns = decode_batch(shape, [data, msgpack.packb({"seq": 2, "x": [-3.0, 1e300]})])
    np.testing.assert_array_equal(columns["x"], [[0.5, 1.5], [-3.0, 1e300]])
    np.testing.assert_array_equal(columns["seq"], [1, 2])


def test_the_recorder_reads_seq_and_stamp_by_shape_as_one_by_one():
    """The recorder's write path: runs of one shape give the seq and stamp_ns a whole decode gives; other messages
    (a short run, a run whose shape changes, a malformed payload) are left to the one-by-one decode."""
    from hil.recording.recorder import (MALFORMED_FRAMES, SHAPE_GROUP_MIN_MESSAGES, _clocks_by_shape,
                                        _seq_and_stamp, _topic_codes)

    rng = np.random.default_rng(5)
    states = [_state(1000 + k, rng) for k in range(3 * SHAPE_GROUP_MIN_MESSAGES)]
    pending = [([TOPIC_SIM_STATE.encode(), msgpack.packb(p)], 0) for p in states]
    flipped = [dict(_state(2000 + k, rng), flag=k == 3) for k in range(SHAPE_GROUP_MIN_MESSAGES)]
    pending += [([b"other", msgpack.packb(p)], 0) for p in flipped]                   # the shape changes
    pending += [([b"short", msgpack.packb(_state(5, rng))], 0), ([b"bad", b"\xc1"], 0), ([b"one frame"], 0)]
    queued = [frames if len(frames) == 2 else MALFORMED_FRAMES for frames, _ in pending]    # the receive queue
    shaped, seqs, stamps = _clocks_by_shape(_topic_codes([t for t, _ in queued])[1], [p for _, p in queued])
    known = {i: (int(seqs[i]), int(stamps[i])) for i in np.flatnonzero(shaped).tolist()}
    assert sorted(known) == list(range(len(states)))
    assert known == {i: _seq_and_stamp(pending[i][0][1]) for i in known}
    assert known[0] == (1000, states[0]["stamp_ns"])


def test_a_run_start_of_shapeless_frames_and_seq_widths_leaves_only_those_frames_one_by_one(tmp_path, monkeypatch):
    """The start of a real run: the device clock crosses 2^16 us inside a frame (two integer widths in one list:
    no shape) while seq outgrows a fixint and a byte (three shapes) in the same first batch. Only the shapeless
    frames go the message-by-message way (a single budget for shapes and misses sent the rest of the batch), and
    the table is the reference path's."""
    rng = np.random.default_rng(5)
    path = tmp_path / "start.mcap"
    writer = RecordingWriter(path, overwrite=True)
    frames = 600                                   # seq 0..599: fixint, uint8 and uint16 in one batch
    for k in range(frames):
        frame = _telemetry(k, rng)
        frame["device_us"] = [60_000 + (k * FRAME + i) * 100 for i in range(FRAME)]   # crosses 65 535 at k = 5
        writer.add(TOPIC_HW_TELEMETRY, msgpack.packb(frame), frame["stamp_ns"] + 5, frame["stamp_ns"], k)
    writer.close()
    recording = read_recording(path)
    shapeless = [k for k, (_, _, data) in enumerate(recording.messages[TOPIC_HW_TELEMETRY])
                 if template(data, msgpack.unpackb(data), matrices=True) is None]
    assert shapeless == [5], "the frame whose device clock crosses 2^16 us has no shape"
    one_by_one = []
    decode_one_by_one = series._fill_one_by_one
    monkeypatch.setattr(series, "_fill_one_by_one",
                        lambda builder, messages: one_by_one.extend(messages) or decode_one_by_one(builder, messages))
    fast = series.build_tables(recording).tables[TOPIC_HW_TELEMETRY]
    assert len(one_by_one) == len(shapeless)
    monkeypatch.setattr(series, "SHAPES_PER_BATCH", 0)  # the message-by-message path
    reference = series.build_tables(recording).tables[TOPIC_HW_TELEMETRY]
    assert list(fast.columns) == list(reference.columns)
    for name, values in reference.columns.items():
        np.testing.assert_array_equal(fast.columns[name], values, err_msg=name)


def _columns_in_place(monkeypatch) -> list[bool]:
    """Per table column matrix made from here on of a key with float numbers decoded by shape (the keys with a
    target array): whether it is that array itself (filled in place)."""
    in_place = []
    matrix = series._Column.matrix

    def watched(column, total_rows):
        result = matrix(column, total_rows)
        if column.target is not None:
            in_place.append(np.shares_memory(result, column.target))
        return result

    monkeypatch.setattr(series._Column, "matrix", watched)
    return in_place


def _assert_same_tables(mine: series.Tables, reference: series.Tables) -> None:
    assert list(mine.tables) == list(reference.tables) and mine.malformed == reference.malformed
    for topic, table in reference.tables.items():
        other = mine.tables[topic]
        assert list(other.columns) == list(table.columns) and other.groups == table.groups, topic
        assert other.element_names == table.element_names and other.text == table.text, topic
        for name, values in table.columns.items():
            assert other.columns[name].dtype == values.dtype, f"{topic}:{name}"
            np.testing.assert_array_equal(other.columns[name], values, err_msg=f"{topic}:{name}")


def test_ranges_decoded_in_threads_write_in_place_or_fall_back_and_give_the_reference_tables(tmp_path, monkeypatch):
    """A large recording is decoded in ranges of messages in threads, each range writing its float numbers straight
    into the topic's final columns at the rows its messages are expected to fill (one per message, or per sample of
    the first frame's length). All messages well formed: every float column is filled in place. A malformed message
    in the first range (one row fewer) moves the later ranges' rows, and a longer telemetry frame (more rows) makes
    more rows than there are places: those columns are put together from the blocks instead. Either way the tables are the message-by-message path's."""
    monkeypatch.setattr(series, "PARALLEL_MIN_MESSAGES", 1000)
    monkeypatch.setattr(series.os, "cpu_count", lambda: 2)           # threads on any machine
    intact, damaged = tmp_path / "intact.mcap", tmp_path / "damaged.mcap"
    _write(intact)
    rng = np.random.default_rng(4)
    writer = RecordingWriter(damaged, overwrite=True)
    for k in range(MESSAGES):
        payload = _state(k, rng)
        writer.add(TOPIC_SIM_STATE, b"\xc1" if k == 700 else msgpack.packb(payload), payload["stamp_ns"] + 5,
                   payload["stamp_ns"], k)
        if k % 10 == 0:
            frame = _telemetry(k // 10, rng)
            if k == 100:                                             # two samples more than the others
                frame["device_us"] += [frame["device_us"][-1] + 1000, frame["device_us"][-1] + 2000]
                frame["servo_rad"] += [[0.5, 0.25, 0.125]] * 2
                frame["load"] += [[1.5, -1.5]] * 2
            writer.add(TOPIC_HW_TELEMETRY, msgpack.packb(frame), frame["stamp_ns"] + 5, frame["stamp_ns"], k // 10)
    writer.close()
    for path, placed in ((intact, True), (damaged, False)):
        recording = read_recording(path)
        in_place = _columns_in_place(monkeypatch)
        threaded = series.build_tables(recording)
        # q, strain, base_wrench, t of sim/state; servo_rad, load of hw/telemetry
        assert len(in_place) == 6 and in_place == [placed] * 6, (path.name, in_place)
        monkeypatch.setattr(series, "SHAPES_PER_BATCH", 0)          # the message-by-message path
        reference = series.build_tables(recording)
        monkeypatch.undo()
        monkeypatch.setattr(series, "PARALLEL_MIN_MESSAGES", 1000)
        monkeypatch.setattr(series.os, "cpu_count", lambda: 2)
        _assert_same_tables(threaded, reference)
