"""Walking an MCAP file that may be damaged: every damaged part is found, reported, and read past.

What the MCAP format (https://mcap.dev/spec) gives a reader to do this:

- every top-level record is length-prefixed (opcode u8, length u64, body), so a reader steps from record to record
  without understanding them, and a Chunk record's fields (sizes, compression name, records length) must add up
  to its length, which makes a misread or overwritten chunk header detectable;
- a Chunk carries the CRC32 of its uncompressed records: flipped bytes in it are detected;
- the Message Index records written right after each chunk list its messages per channel (so a lost chunk's
  message count is known when they survive);
- the summary section, located by the footer and protected by its own CRC, repeats every Channel, lists every
  chunk's offset and length and where its message indexes are (Chunk Index), and counts each channel's messages
  (Statistics).

:func:`walk` steps through the top-level records. A chunk that fails (CRC mismatch, decompression error,
inconsistent fields) is reported with its message count and skipped by its length when that length is
trustworthy. Where the record structure is lost (an overwritten header, a length that points nowhere), the walk
restarts at the next offset the summary knows (a chunk, its message indexes, a metadata record, the data end) or,
without a summary, at the next position where a self-consistent Chunk record starts.

A damage entry is a dict (the contract of ``hil.recording.mcap_io.RawRecording.damage``): ``offset`` (file offset of the
damaged record or of the first byte that could not be read, bytes), ``kind`` (one of :data:`KINDS`),
``messages_lost`` (int, or None when the file no longer says), ``detail`` (one line).
"""
from __future__ import annotations

import bisect
import io
import os
import struct
import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

from mcap.data_stream import ReadDataStream
from mcap.exceptions import McapError
from mcap.opcode import Opcode
from mcap.records import Channel, ChunkIndex, Statistics

CRC_MISMATCH = "crc mismatch"
DECOMPRESSION_ERROR = "decompression error"
BAD_RECORD = "bad record"
TRUNCATED = "truncated"
KINDS = (CRC_MISMATCH, DECOMPRESSION_ERROR, BAD_RECORD, TRUNCATED)

MAGIC = b"\x89MCAP0\r\n"
_HEADER = struct.Struct("<BQ")                 # opcode, body length (bytes)
_CHUNK_HEAD = struct.Struct("<QQQII")          # start time, end time, uncompressed size, crc, compression name length
_U64 = struct.Struct("<Q")
_MESSAGE_INDEX_HEAD = struct.Struct("<HI")     # channel id, entries length (bytes)
_MESSAGE_INDEX_ENTRY_BYTES = 16                # (log_time u64, offset u64)
_FOOTER = struct.Struct("<BQQQI")              # opcode, length, summary_start, summary_offset_start, summary_crc
_FOOTER_BODY_BYTES = 20
_FOOTER_CRC_SPAN = _FOOTER.size - 4            # the footer bytes the summary CRC covers (all but the CRC itself)
_DATA_END_RECORD_BYTES = _HEADER.size + 4
_VALID_OPCODES = frozenset(int(op) for op in Opcode)
_COMPRESSIONS = ("", "zstd", "lz4")
#: a compression name longer than any registered one marks bytes that are not a chunk header
_MAX_COMPRESSION_NAME = 16
#: refuse to decompress a chunk that claims more than this (a corrupted size must not exhaust memory); the mcap
#: package's own record size limit
MAX_CHUNK_BYTES = 4 * 2**30


class Malformed(Exception):
    """Bytes that do not form the record they should (one-line reason)."""


class Damaged(Exception):
    """A chunk whose records are lost: ``kind`` (one of :data:`KINDS`) and the reason."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind


def damage(offset: int, kind: str, messages_lost: int | None, detail: str) -> dict:
    return {"offset": int(offset), "kind": kind, "messages_lost": messages_lost, "detail": detail}


def _opcode_name(opcode: int) -> str:
    try:
        return Opcode(opcode).name
    except ValueError:
        return f"unknown opcode 0x{opcode:02x}"


@dataclass
class ChunkFields:
    """A Chunk record's fields that a reader needs, its records still compressed in the file."""
    end: int                  #: file offset just past the record
    uncompressed_size: int    #: bytes
    crc: int                  #: CRC32 of the uncompressed records, 0 = not given
    compression: str
    data_start: int           #: file offset of the compressed records
    data_length: int          #: bytes


def chunk_fields(buf, offset: int, limit: int) -> ChunkFields | None:
    """The fields of the Chunk record at ``offset`` if they are self-consistent and end before ``limit``."""
    if offset + _HEADER.size + _CHUNK_HEAD.size > limit:
        return None
    opcode, length = _HEADER.unpack_from(buf, offset)
    end = offset + _HEADER.size + length
    if opcode != Opcode.CHUNK or end > limit:
        return None
    start_time, end_time, uncompressed_size, crc, name_length = _CHUNK_HEAD.unpack_from(buf, offset + _HEADER.size)
    name_start = offset + _HEADER.size + _CHUNK_HEAD.size
    data_start = name_start + name_length + _U64.size
    if name_length > _MAX_COMPRESSION_NAME or data_start > end or start_time > end_time:
        return None
    (data_length,) = _U64.unpack_from(buf, data_start - _U64.size)
    if data_start + data_length != end:
        return None
    try:
        compression = bytes(buf[name_start:name_start + name_length]).decode()
    except UnicodeDecodeError:
        return None
    return ChunkFields(end, uncompressed_size, crc, compression, data_start, data_length)


def decompress_chunk(buf, fields: ChunkFields) -> bytes:
    """The chunk's uncompressed records, CRC-checked; raises ``Damaged`` with the kind and reason."""
    if fields.compression not in _COMPRESSIONS:
        raise Damaged(BAD_RECORD, f"unknown compression {fields.compression!r}")
    if fields.uncompressed_size > MAX_CHUNK_BYTES:
        raise Damaged(BAD_RECORD, f"claims {fields.uncompressed_size} uncompressed bytes")
    compressed = buf[fields.data_start:fields.data_start + fields.data_length]
    try:
        if fields.compression == "zstd":
            import zstandard
            data = zstandard.ZstdDecompressor().decompress(compressed, max_output_size=fields.uncompressed_size)
        elif fields.compression == "lz4":
            import lz4.frame
            data = lz4.frame.decompress(compressed)
        else:
            data = bytes(compressed)
    except Exception as exc:  # zstandard.ZstdError, lz4's RuntimeError, MemoryError: each a damaged stream
        raise Damaged(DECOMPRESSION_ERROR, f"{type(exc).__name__}: {exc}") from None
    if len(data) != fields.uncompressed_size:
        raise Damaged(DECOMPRESSION_ERROR, f"{len(data)} bytes uncompressed, the chunk says {fields.uncompressed_size}")
    if fields.crc and zlib.crc32(data) != fields.crc:
        raise Damaged(CRC_MISMATCH, f"CRC32 of the records 0x{zlib.crc32(data):08x}, the chunk says 0x{fields.crc:08x}")
    return data


#: chunks decompressed ahead of the walk (about 4 MB each uncompressed: the memory this holds beside the walk)
PREFETCH_CHUNKS = 4


class ChunkPrefetch:
    """The chunks the summary indexes, decompressed and CRC-checked ahead of the walk in threads (zstd and CRC32 do
    not hold the interpreter: on a multi-core machine the next chunks are opened while the walk parses this one).
    A chunk asked for with other fields than the prefetch read, or not indexed, is decompressed by the caller; a
    prefetched chunk's ``Damaged`` is raised to the caller as if it had decompressed it itself."""

    def __init__(self, buf, size: int, summary: Summary | None, threads: int | None = None):
        self.buf, self.size = buf, size
        self.starts = summary.chunk_starts if summary is not None else []
        threads = threads if threads is not None else min(2, (os.cpu_count() or 1) - 1)
        self.pool = ThreadPoolExecutor(threads) if threads > 0 and len(self.starts) > 1 else None
        self.pending: dict[int, Future] = {}

    def _open(self, offset: int) -> tuple[ChunkFields | None, bytes | None]:
        fields = chunk_fields(self.buf, offset, self.size)
        return fields, (decompress_chunk(self.buf, fields) if fields is not None else None)

    def records(self, offset: int, fields: ChunkFields) -> bytes:
        """The uncompressed records of the chunk at ``offset`` (``fields``: :func:`chunk_fields` there)."""
        if self.pool is None:
            return decompress_chunk(self.buf, fields)
        at = bisect.bisect_right(self.starts, offset)
        for start in self.starts[at:at + PREFETCH_CHUNKS]:
            if start not in self.pending:
                self.pending[start] = self.pool.submit(self._open, start)
        future = self.pending.pop(offset, None)
        if future is None:
            return decompress_chunk(self.buf, fields)
        prefetched, data = future.result()
        return data if prefetched == fields else decompress_chunk(self.buf, fields)

    def close(self) -> None:
        """Stop the threads (before the buffer they read is closed); chunks not asked for are dropped."""
        if self.pool is not None:
            for future in self.pending.values():
                future.cancel()
            self.pool.shutdown(wait=True)
            self.pending.clear()


def read_record_body(cls, buf, start: int, end: int):
    """``cls.read`` (an mcap record class) on the body ``buf[start:end]``; raises ``Malformed``."""
    try:
        return cls.read(ReadDataStream(io.BytesIO(bytes(buf[start:end]))))
    except (McapError, struct.error, ValueError) as exc:   # short body, bad UTF-8...
        raise Malformed(f"{cls.__name__} record does not parse ({type(exc).__name__})") from None


def _message_index_count(buf, offset: int, limit: int) -> tuple[int, int, int] | None:
    """(channel id, entries, record end) of a well-formed Message Index record at ``offset``, else None."""
    if offset + _HEADER.size + _MESSAGE_INDEX_HEAD.size > limit:
        return None
    opcode, length = _HEADER.unpack_from(buf, offset)
    channel_id, entries_bytes = _MESSAGE_INDEX_HEAD.unpack_from(buf, offset + _HEADER.size)
    end = offset + _HEADER.size + length
    if (opcode != Opcode.MESSAGE_INDEX or end > limit or entries_bytes % _MESSAGE_INDEX_ENTRY_BYTES
            or _MESSAGE_INDEX_HEAD.size + entries_bytes != length):
        return None
    return channel_id, entries_bytes // _MESSAGE_INDEX_ENTRY_BYTES, end


@dataclass
class Summary:
    """What the summary section says, when its footer, CRC and records are intact."""
    start: int                                             #: file offset of the summary section
    chunks: dict[int, ChunkIndex]                          #: by chunk start offset
    channels: list[Channel]
    channel_counts: dict[int, int] | None                  #: Statistics: messages per channel id
    metadata_offsets: list[int]
    resync_offsets: list[int] = field(default_factory=list)  #: sorted offsets where a record is known to start

    def __post_init__(self):
        known = set(self.chunks) | set(self.metadata_offsets) | {self.start - _DATA_END_RECORD_BYTES}
        for index in self.chunks.values():
            known.update(index.message_index_offsets.values())
            known.add(index.chunk_start_offset + index.chunk_length)
        self.resync_offsets = sorted(known)
        self.chunk_starts = sorted(self.chunks)


def footer_offset(buf, size: int) -> int | None:
    """Offset of the footer record if the file ends with a well-formed footer and the closing magic."""
    offset = size - _FOOTER.size - len(MAGIC)
    if offset < len(MAGIC) or bytes(buf[size - len(MAGIC):size]) != MAGIC:
        return None
    opcode, length = _HEADER.unpack_from(buf, offset)
    return offset if opcode == Opcode.FOOTER and length == _FOOTER_BODY_BYTES else None


def read_summary(buf, size: int) -> tuple[Summary | None, dict | None]:
    """The summary located by the footer, or None; with a damage entry when a footer exists but its summary
    cannot be trusted (the data section is then read without it)."""
    footer = footer_offset(buf, size)
    if footer is None:
        return None, None
    _, _, start, _, crc = _FOOTER.unpack_from(buf, footer)
    if start == 0:
        return None, None
    if not len(MAGIC) < start <= footer:
        return None, damage(footer, BAD_RECORD, 0, f"footer points its summary to byte {start}, outside the file's "
                                                   f"records (8..{footer}): the indexes are not used")
    if crc and zlib.crc32(buf[start:footer + _FOOTER_CRC_SPAN]) != crc:
        return None, damage(start, CRC_MISMATCH, 0, f"summary section {start}..{footer} or footer: CRC32 mismatch; "
                                                    "its chunk indexes and statistics are not used")
    chunks: dict[int, ChunkIndex] = {}
    channels: list[Channel] = []
    counts = None
    metadata_offsets: list[int] = []
    position = start
    try:
        while position < footer:
            if position + _HEADER.size > footer:
                raise Malformed("record header runs into the footer")
            opcode, length = _HEADER.unpack_from(buf, position)
            body, end = position + _HEADER.size, position + _HEADER.size + length
            if end > footer:
                raise Malformed(f"{_opcode_name(opcode)} record runs into the footer")
            if opcode == Opcode.CHUNK_INDEX:
                index = read_record_body(ChunkIndex, buf, body, end)
                chunks[index.chunk_start_offset] = index
            elif opcode == Opcode.CHANNEL:
                channels.append(read_record_body(Channel, buf, body, end))
            elif opcode == Opcode.STATISTICS:
                counts = dict(read_record_body(Statistics, buf, body, end).channel_message_counts)
            elif opcode == Opcode.METADATA_INDEX:
                (metadata_offset,) = _U64.unpack_from(buf, body)
                metadata_offsets.append(metadata_offset)
            position = end
    except (Malformed, struct.error) as exc:
        return None, damage(position, BAD_RECORD, 0, f"summary section record at {position}: {exc}; "
                                                     "the indexes are not used")
    return Summary(start, chunks, channels, counts, metadata_offsets), None


def chunk_message_counts(buf, start: int, end: int | None, limit: int,
                         summary: Summary | None) -> dict[int, int] | None:
    """Messages per channel id of the chunk at ``start`` (record end ``end`` if its length is trusted), from its
    Message Index records: those the chunk index points to, else those that follow the chunk. None when neither
    survives (or the chunk was written without indexes)."""
    index = summary.chunks.get(start) if summary else None
    if index is not None and index.message_index_offsets:
        counts = {}
        for channel_id, offset in index.message_index_offsets.items():
            found = _message_index_count(buf, offset, limit)
            if found is None or found[0] != channel_id:
                break
            counts[channel_id] = found[1]
        else:
            return counts
        end = index.chunk_start_offset + index.chunk_length
    if end is None:
        return None
    counts, position = {}, end
    while (found := _message_index_count(buf, position, limit)) is not None:
        counts[found[0]] = counts.get(found[0], 0) + found[1]
        position = found[2]
    follows_cleanly = position == limit or _header_ok(buf, position, limit)
    return counts if counts and follows_cleanly else None


def _header_ok(buf, position: int, limit: int) -> bool:
    if position + _HEADER.size > limit:
        return False
    opcode, length = _HEADER.unpack_from(buf, position)
    return opcode in _VALID_OPCODES and position + _HEADER.size + length <= limit


def next_chunk_start(buf, position: int, limit: int) -> int | None:
    """The first offset after ``position`` where a self-consistent Chunk record starts (a search, for files
    without a usable summary)."""
    chunk_opcode = bytes([int(Opcode.CHUNK)])
    candidate = buf.find(chunk_opcode, position + 1, limit)
    while candidate != -1:
        if chunk_fields(buf, candidate, limit) is not None:
            return candidate
        candidate = buf.find(chunk_opcode, candidate + 1, limit)
    return None


@dataclass
class WalkResult:
    damage: list[dict] = field(default_factory=list)
    #: messages lost per channel id, where the damage says (for the expected counts)
    lost_per_channel: dict[int, int] = field(default_factory=dict)
    data_end_seen: bool = False
    #: the last "bytes skipped" entry, where its skipped bytes end (a failure right there extends it) and why
    open_region: tuple[dict, int | None, str] | None = None


def walk(buf, size: int, summary: Summary | None, on_chunk: Callable[[int, bytes], None],
         on_record: Callable[[int, int, int], None], progress: Callable[[int], None] | None = None,
         stop_at_data_end: bool = False) -> WalkResult:
    """Step through the top-level records of ``buf[:size]`` (an MCAP file), reading past damage.

    ``stop_at_data_end``: the summary section and footer were checked already (:func:`read_summary`), so the walk
    ends with the data section.

    ``on_chunk(offset, records)`` gets each intact chunk's uncompressed records; ``on_record(opcode, body_start,
    body_end)`` every other record (it raises ``Malformed`` for a body that does not parse). ``progress(offset)``
    is called now and then with the position reached.
    """
    prefetch = ChunkPrefetch(buf, size, summary)
    try:
        return _walk(buf, size, summary, on_chunk, on_record, progress, stop_at_data_end, prefetch)
    finally:
        prefetch.close()


def _walk(buf, size: int, summary: Summary | None, on_chunk, on_record, progress, stop_at_data_end: bool,
          prefetch: ChunkPrefetch) -> WalkResult:
    """:func:`walk`, its chunks opened by ``prefetch``."""
    result = WalkResult()
    closed = footer_offset(buf, size) is not None   # a footer says the file was not cut short
    position = len(MAGIC)
    visited_chunks: set[int] = set()
    failed: int | None = None           # where the record structure was lost
    failure_reason = ""

    def lose_chunk(offset: int, end: int | None, kind: str, reason: str) -> None:
        counts = chunk_message_counts(buf, offset, end, size, summary)
        lost = None if counts is None else sum(counts.values())
        for channel_id, count in (counts or {}).items():
            result.lost_per_channel[channel_id] = result.lost_per_channel.get(channel_id, 0) + count
        extent = f"{offset}..{end}" if end is not None else f"at {offset}"
        result.damage.append(damage(offset, kind, lost, f"chunk {extent}: {reason}"))
        visited_chunks.add(offset)

    while position < size:
        if progress is not None:
            progress(position)
        if position + _HEADER.size > size:
            failed, failure_reason = position, f"{size - position} bytes left, less than a record header"
        else:
            opcode, length = _HEADER.unpack_from(buf, position)
            body, end = position + _HEADER.size, position + _HEADER.size + length
            if opcode not in _VALID_OPCODES:
                failed, failure_reason = position, f"no record here ({_opcode_name(opcode)})"
            elif end > size:
                failed, failure_reason = position, (f"{_opcode_name(opcode)} record of {length} bytes runs "
                                                    f"{end - size} bytes past the end of the file")
            elif summary is not None and _swallows_a_known_record(summary, position, end):
                failed, failure_reason = position, (f"{_opcode_name(opcode)} record of {length} bytes would swallow "
                                                    "a record the summary knows: its length is wrong")
            elif opcode == Opcode.CHUNK:
                chunk_end = _read_chunk(buf, position, size, summary, on_chunk, lose_chunk, visited_chunks,
                                        prefetch)
                if chunk_end is not None:
                    position = chunk_end
                    continue
                failed, failure_reason = position, "chunk fields inconsistent with its length"
            else:
                try:
                    if opcode == Opcode.MESSAGE_INDEX and _message_index_count(buf, position, size) is None:
                        raise Malformed("MessageIndex record does not parse")
                    on_record(opcode, body, end)
                except Malformed as exc:
                    failed, failure_reason = position, str(exc)
                else:
                    if opcode == Opcode.DATA_END:
                        result.data_end_seen = True
                        if stop_at_data_end:
                            break
                    if opcode == Opcode.FOOTER:
                        if not (end + len(MAGIC) == size and bytes(buf[end:size]) == MAGIC):
                            result.damage.append(damage(position, BAD_RECORD, 0,
                                                        "footer not followed by the closing magic"))
                        break
                    position = end
                    continue
        resume = _resume_offset(buf, failed, size, summary)
        _report_lost_structure(failed, resume, size, summary, closed, result, failure_reason, lose_chunk)
        if resume is None:
            break
        position = resume
    else:
        if not result.data_end_seen:
            result.damage.append(damage(size, TRUNCATED, None, f"the file ends at byte {size} after its last "
                                                               "complete record, without the data end, summary "
                                                               "and footer: the recording was not closed"))
        else:
            result.damage.append(damage(size, BAD_RECORD, 0, "the file ends without a footer"))
    if summary is not None:
        for start in summary.chunk_starts:
            if start not in visited_chunks:
                index = summary.chunks[start]
                lose_chunk(start, start + index.chunk_length, BAD_RECORD,
                           "never reached: the records before it were damaged")
    return result


def _swallows_a_known_record(summary: Summary, start: int, end: int) -> bool:
    """True if a record at ``start`` ending at ``end`` contains the start of a record the summary knows (then
    its length field is wrong)."""
    first = bisect.bisect_right(summary.resync_offsets, start)
    return first < len(summary.resync_offsets) and summary.resync_offsets[first] < end


def _read_chunk(buf, position: int, size: int, summary: Summary | None, on_chunk, lose_chunk,
                visited: set[int], prefetch: ChunkPrefetch) -> int | None:
    """Read one Chunk record; returns its end, where the walk goes on, or None when its fields cannot be trusted
    (then neither can its length)."""
    fields = chunk_fields(buf, position, size)
    index = summary.chunks.get(position) if summary else None
    if fields is None or (index is not None and index.chunk_length != fields.end - position):
        return None
    try:
        on_chunk(position, prefetch.records(position, fields))
    except Damaged as exc:
        lose_chunk(position, fields.end, exc.kind, str(exc))
        return fields.end
    visited.add(position)
    return fields.end


def _resume_offset(buf, failed: int, size: int, summary: Summary | None) -> int | None:
    if summary is not None:
        at = bisect.bisect_right(summary.resync_offsets, failed)
        return summary.resync_offsets[at] if at < len(summary.resync_offsets) else None
    return next_chunk_start(buf, failed, size)


def _report_lost_structure(failed: int, resume: int | None, size: int, summary: Summary | None, closed: bool,
                           result: WalkResult, reason: str, lose_chunk) -> None:
    """One damage entry for the bytes ``failed..resume`` (to the end of the file when ``resume`` is None)."""
    if summary is not None and failed in summary.chunks:
        index = summary.chunks[failed]
        lose_chunk(failed, failed + index.chunk_length, BAD_RECORD, reason)
        return
    extent = f"bytes {failed}..{resume if resume is not None else size}"
    if result.data_end_seen:
        result.damage.append(damage(failed, BAD_RECORD, 0, f"{extent} after the data end (summary or footer): "
                                                           f"{reason}"))
    elif resume is None and not closed:
        result.damage.append(damage(failed, TRUNCATED, None, f"{extent}: {reason}; nothing readable follows (the "
                                                             "file was cut or its tail overwritten)"))
    else:
        # with a summary every chunk is known (one lost here gets its own entry); without one, nothing says
        # what the skipped bytes held
        lost = 0 if summary is not None else None
        if result.open_region is not None and result.open_region[1] == failed:
            entry, _, reason = result.open_region
            extent = f"bytes {entry['offset']}..{resume if resume is not None else size}"
        else:
            entry = damage(failed, BAD_RECORD, lost, "")
            result.damage.append(entry)
        entry["detail"] = f"{extent} skipped: {reason}"
        result.open_region = (entry, resume, reason)

