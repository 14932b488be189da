"""Damaged recordings: every damaged chunk is reported (offset, kind, messages lost), the reader goes on past it,
and every message of every undamaged chunk is read back. The files are written by the project's own writer; what
each chunk holds is taken from the mcap package's own stream reader on the intact file."""
from __future__ import annotations

import struct

import msgpack
import pytest
from mcap.reader import make_reader
from mcap.records import Chunk, Message
from mcap.stream_reader import StreamReader, breakup_chunk
from mcap.writer import CompressionType

from hil.recording.export import EXIT_DATA_LOST
from hil.recording.mcap_io import RecordingWriter, read_recording
from hil.recording.salvage import BAD_RECORD, CRC_MISMATCH, DECOMPRESSION_ERROR, TRUNCATED

#: small chunks so that a recording of a few thousand messages has dozens of them
CHUNK_BYTES = 8 * 1024
ZEROED_BYTES = 4096
FLIPPED_BYTES = 8
#: footer record (opcode, length, summary_start, summary_offset_start, summary_crc) and the closing magic
FOOTER_AND_MAGIC_BYTES = 1 + 8 + 8 + 8 + 4 + 8


def _payload(topic: str, seq: int) -> bytes:
    return msgpack.packb({"v": 1, "seq": seq, "stamp_ns": 1_000_000 + seq, "q": [0.001 * seq, -0.002 * seq],
                          "topic": topic})


class Recording:
    """The bytes of a recording and, per chunk, its extent in the file and its messages as (topic, seq)."""

    def __init__(self, data: bytes, chunks: list[tuple[int, int, list]], summary_start: int):
        self.data, self.chunks, self.summary_start = data, chunks, summary_start

    def __repr__(self) -> str:
        return f"Recording({len(self.data)} bytes, {len(self.chunks)} chunks)"

    def kept(self, damaged_from: int, damaged_to: int) -> list[tuple[str, int]]:
        """The messages of every chunk that does not overlap the damaged bytes, in file order."""
        return [m for start, end, messages in self.chunks if end <= damaged_from or start >= damaged_to
                for m in messages]

    def overlapping(self, damaged_from: int, damaged_to: int) -> list[tuple[int, int, list]]:
        return [c for c in self.chunks if c[0] < damaged_to and c[1] > damaged_from]

    def middle_chunk(self) -> tuple[int, int, list]:
        return self.chunks[len(self.chunks) // 2]


def _write(path, compression: CompressionType, close: bool = True) -> Recording:
    writer = RecordingWriter(path, chunk_bytes=CHUNK_BYTES, compression=compression, flush_interval_s=3600)
    writer.add_metadata("rig_config", {"path": "rig.toml", "text": "[rig]\nname = 'x'\n"})
    for seq in range(3000):
        writer.add("sim/state", _payload("sim/state", seq), 2_000 + seq, 1_000 + seq, seq)
        if seq % 10 == 0:
            writer.add("hw/status", _payload("hw/status", seq // 10), 2_000 + seq, 1_000 + seq, seq // 10)
    writer.sync()
    unclosed = path.read_bytes()
    writer.close()
    data = path.read_bytes()
    with open(path, "rb") as handle:
        summary = make_reader(handle).get_summary()
        topics = {channel.id: channel.topic for channel in summary.channels.values()}
        chunk_ends = {index.chunk_start_offset: index.chunk_start_offset + index.chunk_length
                      for index in summary.chunk_indexes}
        handle.seek(0)
        in_file_order = [record for record in StreamReader(handle, emit_chunks=True).records
                         if isinstance(record, Chunk)]
    chunks = [(start, chunk_ends[start], [(topics[m.channel_id], msgpack.unpackb(m.data)["seq"])
                                          for m in breakup_chunk(record) if isinstance(m, Message)])
              for start, record in zip(sorted(chunk_ends), in_file_order)]
    assert len(chunks) > 10, "the recording must have many chunks for a 'middle' one"
    if not close:
        path.write_bytes(unclosed)
        return Recording(unclosed, [c for c in chunks if c[1] <= len(unclosed)], len(unclosed))
    (summary_start,) = struct.unpack_from("<Q", data, len(data) - FOOTER_AND_MAGIC_BYTES + 9)
    return Recording(data, chunks, summary_start)


@pytest.fixture(scope="module")
def zstd_recording(tmp_path_factory) -> Recording:
    return _write(tmp_path_factory.mktemp("damage") / "zstd.mcap", CompressionType.ZSTD)


@pytest.fixture(scope="module")
def plain_recording(tmp_path_factory) -> Recording:
    return _write(tmp_path_factory.mktemp("damage") / "plain.mcap", CompressionType.NONE)


@pytest.fixture(scope="module")
def unclosed_recording(tmp_path_factory) -> Recording:
    """A recording as a killed recorder leaves it: synced chunks, no summary, no footer."""
    return _write(tmp_path_factory.mktemp("damage") / "unclosed.mcap", CompressionType.ZSTD, close=False)


def _damaged(tmp_path, recording: Recording, edit) -> object:
    data = bytearray(recording.data)
    edit(data)
    path = tmp_path / "damaged.mcap"
    path.write_bytes(bytes(data))
    return read_recording(path)


def _middle_chunk_flipped(tmp_path, recording: Recording):
    """The recording read with FLIPPED_BYTES inverted in the middle of its middle chunk; that chunk (start, end,
    messages) and where the flipped bytes start."""
    chunk = recording.middle_chunk()
    flip_at = (chunk[0] + chunk[1]) // 2

    def flip(data):
        for i in range(FLIPPED_BYTES):
            data[flip_at + i] ^= 0xFF
    return _damaged(tmp_path, recording, flip), chunk, flip_at


def _read(raw) -> list[tuple[str, int]]:
    """Every message read, as (topic, seq), sorted (a comparison of these lists counts every message)."""
    return sorted((topic, msgpack.unpackb(bytes(payload))["seq"])
                  for topic, messages in raw.messages.items() for _, _, payload in messages)


def test_an_intact_recording_has_no_damage(zstd_recording, tmp_path):
    raw = _damaged(tmp_path, zstd_recording, lambda data: None)
    assert raw.damage == [] and not raw.truncated
    assert raw.expected_messages == {"sim/state": 3000, "hw/status": 300}
    assert _read(raw) == sorted(m for c in zstd_recording.chunks for m in c[2])


@pytest.mark.parametrize("which", ["plain", "zstd"])
def test_flipped_bytes_in_a_middle_chunk_lose_that_chunk_only(which, plain_recording, zstd_recording, tmp_path):
    recording = plain_recording if which == "plain" else zstd_recording
    raw, (start, _, lost), flip_at = _middle_chunk_flipped(tmp_path, recording)
    # uncompressed records fail their CRC; a zstd stream fails to decompress or decompresses to other bytes
    kinds = {CRC_MISMATCH} if which == "plain" else {CRC_MISMATCH, DECOMPRESSION_ERROR}
    assert len(raw.damage) == 1, raw.damage
    entry = raw.damage[0]
    assert entry["offset"] == start and entry["kind"] in kinds and entry["messages_lost"] == len(lost)
    assert set(entry) == {"offset", "kind", "messages_lost", "detail"} and "\n" not in entry["detail"]
    assert _read(raw) == sorted(recording.kept(flip_at, flip_at + FLIPPED_BYTES))
    assert raw.expected_messages == {"sim/state": 3000, "hw/status": 300}
    assert not raw.truncated


@pytest.mark.parametrize("where", ["inside a chunk", "on a chunk's header"])
def test_four_kib_zeroed_are_reported_and_read_past(where, zstd_recording, tmp_path):
    start, end, _ = zstd_recording.middle_chunk()
    zero_at = (start + end) // 2 if where == "inside a chunk" else start
    zero_to = zero_at + ZEROED_BYTES

    def zero(data):
        data[zero_at:zero_to] = bytes(ZEROED_BYTES)
    raw = _damaged(tmp_path, zstd_recording, zero)
    hit = zstd_recording.overlapping(zero_at, zero_to)
    reported_chunks = {entry["offset"]: entry for entry in raw.damage if entry["offset"] in {c[0] for c in hit}}
    assert set(reported_chunks) == {c[0] for c in hit}, "every chunk the zeroed bytes touch is reported"
    for chunk_start, _, messages in hit:
        entry = reported_chunks[chunk_start]
        assert entry["kind"] in {DECOMPRESSION_ERROR, CRC_MISMATCH, BAD_RECORD}
        assert entry["messages_lost"] == len(messages), entry
    for entry in raw.damage:
        assert hit[0][0] <= entry["offset"] < zero_to, f"{entry} outside the damaged chunks"
    assert _read(raw) == sorted(zstd_recording.kept(zero_at, zero_to))
    assert sum(entry["messages_lost"] for entry in raw.damage) == 3300 - len(_read(raw))


def test_zeroed_bytes_in_an_unclosed_recording_are_read_past_without_a_summary(unclosed_recording, tmp_path):
    start, end, _ = unclosed_recording.middle_chunk()
    zero_at, zero_to = (start + end) // 2, (start + end) // 2 + ZEROED_BYTES

    def zero(data):
        data[zero_at:zero_to] = bytes(ZEROED_BYTES)
    raw = _damaged(tmp_path, unclosed_recording, zero)
    assert _read(raw) == sorted(unclosed_recording.kept(zero_at, zero_to)), \
        "the chunks after the zeroed bytes are found again"
    assert raw.damage[0]["offset"] == start and raw.damage[0]["kind"] in {DECOMPRESSION_ERROR, CRC_MISMATCH}
    assert all(start <= entry["offset"] < zero_to for entry in raw.damage[:-1])
    assert raw.damage[-1]["kind"] == TRUNCATED and raw.damage[-1]["offset"] == len(unclosed_recording.data)
    assert raw.truncated and raw.messages_lost


def test_a_truncated_tail_keeps_every_complete_chunk(zstd_recording, tmp_path):
    start, end, _ = zstd_recording.middle_chunk()
    cut = (start + end) // 2
    path = tmp_path / "cut.mcap"
    path.write_bytes(zstd_recording.data[:cut])
    raw = read_recording(path)
    assert [(e["offset"], e["kind"], e["messages_lost"]) for e in raw.damage] == [(start, TRUNCATED, None)]
    assert _read(raw) == sorted(zstd_recording.kept(cut, len(zstd_recording.data)))
    assert raw.truncated and raw.expected_messages == {"sim/state": None, "hw/status": None}


@pytest.mark.parametrize("part", ["summary", "footer"])
def test_a_damaged_summary_or_footer_loses_no_message(part, zstd_recording, tmp_path):
    size = len(zstd_recording.data)
    region = (zstd_recording.summary_start, zstd_recording.summary_start + 64) if part == "summary" else (size - FOOTER_AND_MAGIC_BYTES, size)

    def zero(data):
        data[region[0]:region[1]] = bytes(region[1] - region[0])
    raw = _damaged(tmp_path, zstd_recording, zero)
    assert len(raw.damage) == 1, raw.damage
    entry = raw.damage[0]
    assert entry["messages_lost"] == 0 and not raw.messages_lost
    assert entry["kind"] == (CRC_MISMATCH if part == "summary" else BAD_RECORD)
    assert region[0] <= entry["offset"] < region[1]
    assert _read(raw) == sorted(m for c in zstd_recording.chunks for m in c[2])


def test_export_of_a_damaged_recording_says_what_was_lost_and_exits_3(zstd_recording, tmp_path, kit):
    start, end, lost = zstd_recording.middle_chunk()
    data = bytearray(zstd_recording.data)
    data[(start + end) // 2:(start + end) // 2 + ZEROED_BYTES // 4] = bytes(ZEROED_BYTES // 4)
    path = tmp_path / "damaged.mcap"
    path.write_bytes(bytes(data))
    result = kit.mms_run("export", str(path), "--to", "csv", "--out", str(tmp_path / "csv"), "--quiet")
    assert result.returncode == EXIT_DATA_LOST, result.stderr
    assert "Traceback" not in result.stderr
    assert f"damage at byte {start}: " in result.stderr and f", {len(lost)} messages lost" in result.stderr
    kept = zstd_recording.kept(start, end)
    for topic, expected in (("sim/state", 3000), ("hw/status", 300)):
        rows = sum(1 for t, _ in kept if t == topic)
        assert f"{topic}: {rows} rows written from {rows} messages of {expected} in the file" in result.stderr
        with open(tmp_path / "csv" / f"{topic.replace('/', '_')}.csv") as handle:
            assert sum(1 for _ in handle) == rows + 1, "header + one row per message kept"


@pytest.mark.parametrize("threads", [0, 2])
def test_chunks_opened_ahead_read_as_chunks_opened_in_turn(threads, zstd_recording, tmp_path, monkeypatch):
    """The chunks decompressed ahead of the walk in threads (salvage.ChunkPrefetch) give what the walk gets opening
    each chunk itself, a damaged one included (its loss raised from the thread, reported at its turn); forced on
    and off here, whatever the number of cores."""
    from hil.recording import salvage

    opened = salvage.ChunkPrefetch.__init__
    monkeypatch.setattr(salvage.ChunkPrefetch, "__init__",
                        lambda self, buf, size, summary: opened(self, buf, size, summary, threads=threads))
    raw, (start, _, lost), flip_at = _middle_chunk_flipped(tmp_path, zstd_recording)
    assert [(entry["offset"], entry["messages_lost"]) for entry in raw.damage] == [(start, len(lost))]
    assert _read(raw) == sorted(zstd_recording.kept(flip_at, flip_at + FLIPPED_BYTES))
