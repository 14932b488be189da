"""Crash tolerance: `kill -9` of a recording `mms record` loses at most the last second; recovery rebuilds a
valid file from the complete records, and a file cut at any byte keeps everything flushed before the cut."""
from __future__ import annotations

import os
import signal
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcap.reader import make_reader

from hil.recording.mcap_io import MAGIC, RecordingError, RecordingWriter, read_recording, recover, scan_layout

#: the bound the issue sets: a kill -9 loses at most the last second of messages
MAX_LOSS_S = 1.0


def test_kill_9_loses_at_most_the_last_second_and_recover_rebuilds_a_valid_file(tmp_path, network, kit):
    broken, fixed = tmp_path / "broken.mcap", tmp_path / "fixed.mcap"
    with kit.Publisher(network, rate_hz=500):
        proc = kit.mms("record", "--network", network["path"], "--out", str(broken), "--quiet")
        try:
            kit.status_when(network["rec"], lambda r: r.get("topics", {}).get("sim/state", {}).get("messages", 0)
                            >= 1500, "3 s of sim/state recorded")
            kill_ns = time.time_ns()
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            kit.stop_process(proc, signal.SIGKILL)
    assert proc.returncode == -signal.SIGKILL
    layout = scan_layout(broken)
    assert not layout.has_footer, "a killed recorder cannot have written the footer"

    result = kit.mms_run("record", "--recover", str(broken), "--out", str(fixed))
    assert result.returncode == 0, result.stderr
    assert "truncated" in result.stdout

    with open(fixed, "rb") as handle:
        reader = make_reader(handle)
        assert reader.get_summary() is not None
        state = [(m.publish_time, msgpack.unpackb(m.data)["seq"])
                 for _, c, m in reader.iter_messages(topics=["sim/state"], log_time_order=False)]
        metadata = {m.name for m in reader.iter_metadata()}
    assert {"software", "recording", "recovery"} <= metadata
    seqs = [seq for _, seq in state]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "recovered messages are contiguous"
    last_stamp_ns = state[-1][0]
    assert kill_ns - last_stamp_ns <= MAX_LOSS_S * 1e9, (
        f"lost {(kill_ns - last_stamp_ns) / 1e9:.3f} s before the kill")
    # the broken file is readable in place too (read up to its last complete record), with the same messages
    in_place = read_recording(broken, topics={"sim/state"})
    assert in_place.truncated
    assert [msgpack.unpackb(d)["seq"] for _, _, d in in_place.messages["sim/state"]] == seqs


def _payload(seq: int) -> bytes:
    return msgpack.packb({"v": 1, "seq": seq, "stamp_ns": 1_000 + seq, "x": seq * 0.25})


class Synced:
    """The bytes of a recording and (file size, messages so far) at each of its syncs."""

    def __init__(self, data: bytes, marks: list[tuple[int, int]]):
        self.data, self.marks = data, marks

    def __repr__(self) -> str:   # hypothesis prints its arguments; keep the bytes out of it
        return f"Synced({len(self.data)} bytes, {len(self.marks)} syncs)"


@pytest.fixture(scope="module")
def synced_recording(tmp_path_factory) -> Synced:
    """A recording synced after each batch of 25 messages: its bytes, and (file size, messages so far) at each
    sync."""
    path = tmp_path_factory.mktemp("synced") / "whole.mcap"
    writer = RecordingWriter(path, flush_interval_s=3600)
    writer.add_metadata("software", {"test": "1"})
    marks = []
    seq = 0
    for _ in range(12):
        for _ in range(25):
            writer.add("sim/state" if seq % 3 else "hw/status", _payload(seq), 2_000 + seq, 1_000 + seq, seq)
            seq += 1
        writer.sync()
        marks.append((os.path.getsize(path), seq))
    writer.close()
    return Synced(path.read_bytes(), marks)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut_fraction=st.floats(min_value=0.0, max_value=1.0))
def test_a_file_cut_anywhere_keeps_everything_synced_before_the_cut(tmp_path, synced_recording, cut_fraction):
    data, marks = synced_recording.data, synced_recording.marks
    cut = max(8, int(cut_fraction * len(data)))   # at least the magic
    broken, fixed = tmp_path / "cut.mcap", tmp_path / "fixed.mcap"
    broken.write_bytes(data[:cut])
    report = recover(broken, fixed, overwrite=True)
    with open(fixed, "rb") as handle:
        reader = make_reader(handle)
        recovered = [m.data for _, _, m in reader.iter_messages(log_time_order=False)]
        assert reader.get_summary().statistics.message_count == len(recovered) == report.messages
    synced = max([count for size, count in marks if size <= cut], default=0)
    assert len(recovered) >= synced, f"cut at {cut} of {len(data)} bytes lost synced messages"
    assert recovered == [_payload(s) for s in range(len(recovered))], "a prefix of what was written, unchanged"
    assert report.had_footer == (cut >= len(data) - len(MAGIC)), "the footer is whole once its bytes are there"


def test_recover_refuses_non_mcap_and_overwriting(tmp_path, kit):
    junk = tmp_path / "junk.mcap"
    junk.write_bytes(b"definitely not an mcap file")
    result = kit.mms_run("record", "--recover", str(junk), "--out", str(tmp_path / "out.mcap"))
    assert result.returncode == 2 and "not an MCAP file" in result.stderr
    assert not (tmp_path / "out.mcap").exists()
    existing = tmp_path / "existing.mcap"
    existing.write_bytes(b"keep")
    with pytest.raises(RecordingError, match="exists"):
        recover(junk, existing)
    with pytest.raises(RecordingError, match="new file"):
        recover(junk, junk, overwrite=True)
    assert existing.read_bytes() == b"keep" and junk.read_bytes() == b"definitely not an mcap file"
