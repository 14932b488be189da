"""MCAP recordings: the crash-tolerant writer, the damage-tolerant reader and recovery.

The file format (docs/recording.md) is the contract with the dashboard's replay and with any MCAP tool:

- one channel per ZeroMQ topic, its ``topic`` the topic string, ``message_encoding`` ``"msgpack"``;
- each channel's schema is the topic's JSON schema from :data:`sim.messages.SCHEMAS` (name = topic,
  encoding ``"jsonschema"``); a topic without a schema gets schema id 0;
- message data = the MessagePack payload frame exactly as it came over the wire;
  ``log_time`` = recorder wall clock when received (ns since the Unix epoch), ``publish_time`` = the
  payload's ``stamp_ns`` (publisher wall clock), ``sequence`` = the payload's ``seq``;
- metadata records ``robot_config`` / ``rig_config`` / ``sensor_rig_config`` (file path and text; the last for
  a two-device rig's microcontroller), ``software`` (versions),
  ``recording`` (endpoints, start time) and, when the recording is finished cleanly, ``recorder_stats``.

Crash tolerance: the writer closes the open chunk (:meth:`RecordingWriter.sync`) and ``fsync``s the file
at least every ``flush_interval_s`` (0.5 s by default). A ``kill -9`` therefore leaves a file whose every
top-level record up to the last flush is complete, and :func:`iter_complete_records` reads it up to the last
complete record with the mcap package's non-seeking :class:`mcap.stream_reader.StreamReader`;
:func:`recover` rewrites those records into a valid, indexed file. :func:`read_recording` reads past damage
anywhere in a file and reports it (:mod:`hil.recording.salvage`).
"""
from __future__ import annotations

import gc
import io
import json
import mmap
import os
import platform
import struct
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import zstandard
from mcap.exceptions import EndOfFile, McapError, UnsupportedCompressionError
from mcap.opcode import Opcode
from mcap.data_stream import ReadDataStream, RecordBuilder
from mcap.records import (Attachment, Channel, ChunkIndex, DataEnd, Footer, Header, Message, Metadata,
                          MetadataIndex, Schema, Statistics, SummaryOffset)
from mcap.stream_reader import CRCValidationError, StreamReader
from mcap.writer import CompressionType, Writer

from hil.recording import salvage as salvage
from sim.cli_options import DEFAULT_FLUSH_INTERVAL_S
from sim.messages import SCHEMAS

MESSAGE_ENCODING = "msgpack"
SCHEMA_ENCODING = "jsonschema"
PROFILE = ""  # no ROS profile: msgpack payloads with JSON schemas
MAGIC = salvage.MAGIC
#: chunks are also closed when they reach this many uncompressed bytes
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
#: zstd level of the chunks (1: the fastest of zstd's standard levels)
ZSTD_LEVEL = 1
_RECORD_HEADER = struct.Struct("<BQ")  # opcode, record length (bytes)
#: a Message record up to its data: opcode, record length, channel id, sequence, log_time, publish_time
_MESSAGE_RECORD_HEAD = struct.Struct("<BQHIQQ")
_MESSAGE_RECORD_DTYPE = np.dtype([("opcode", "u1"), ("length", "<u8"), ("channel", "<u2"), ("sequence", "<u4"),
                                  ("log_time", "<u8"), ("publish_time", "<u8")])
_MESSAGE_BODY_HEAD_BYTES = _MESSAGE_RECORD_HEAD.size - _RECORD_HEADER.size   # channel id .. publish_time
#: a Message Index record up to its entries: opcode, record length, channel id, entries' length in bytes
_MESSAGE_INDEX_HEAD = struct.Struct("<BQHI")
#: a Chunk record up to its compression name: opcode, record length, message start and end time, uncompressed size
#: and CRC32
_CHUNK_HEAD = struct.Struct("<BQQQQI")
#: the footer's fields its CRC covers: opcode, record length, summary start, summary offset start
_FOOTER_HEAD = struct.Struct("<BQQQ")
_FOOTER_BODY_BYTES = 8 + 8 + 4
_VALID_OPCODES = frozenset(int(op) for op in Opcode)
_PROGRESS_STEP_BYTES = 1 << 20
#: a batch's records are checksummed and compressed this many bytes at a time (the slice stays in the processor's
#: cache between the two passes)
_ABSORB_SLICE_BYTES = 256 * 1024


class RecordingError(ValueError):
    """A file that is not an MCAP recording (one-line message)."""


def software_versions() -> dict[str, str]:
    """Versions of this package and of the libraries that shape the recorded bytes."""
    from importlib.metadata import PackageNotFoundError, version

    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for dist in ("mms-hil", "mcap", "pyzmq", "msgpack", "numpy"):
        try:
            versions[dist] = version(dist)
        except PackageNotFoundError:
            versions[dist] = "not installed"
    return versions


def stored_robot_config(metadata: dict[str, dict[str, str]], key: str) -> tuple[dict, Path]:
    """The robot config a recording holds (its ``robot_config`` metadata record), parsed, and the path it was read
    from; a one-line ConfigError naming ``key`` (the option that asked for it) when there is none or it is not
    TOML."""
    import tomllib

    from sim.config import ConfigError

    stored = metadata.get("robot_config")
    if not stored or not stored.get("text"):
        raise ConfigError(None, key, "recorded: the recording holds no robot config (mms record --robot)")
    try:
        return tomllib.loads(stored["text"]), Path(stored.get("path", "robot.toml"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(stored.get("path"), None, f"the recorded robot config is not TOML: {exc}") from None


class _OpenChunk:
    """The chunk being filled: its records not yet compressed, what is compressed so far, the running CRC32 and size
    of its uncompressed records, its message indexes and log-time span.

    Records are compressed and checksummed a batch at a time while the batch is still in the processor's cache
    (:meth:`RecordingWriter._absorb`), by a streaming compressor that makes one frame per chunk, rather than all at
    once from a joined copy of the whole chunk when it closes: the copy of a 4 MB chunk into fresh memory, and
    reading it back from RAM twice, cost more than compressing (docs/recording.md, "Figures")."""

    def __init__(self, compressor) -> None:
        self.parts: list[bytes] = []        # records not yet compressed, in file order
        self.compressor = compressor        # one frame per chunk (None: stored as they are)
        self.compressed: list[bytes] = []   # the chunk's data so far, in file order
        self.crc = 0                        # CRC32 of the uncompressed records absorbed so far
        self.absorbed = 0                   # bytes of the uncompressed records absorbed so far
        self.size = 0                       # bytes of the records so far (the offset of the next one)
        self.messages = 0
        self.start_time = 0                 # ns, the earliest log_time (valid when messages > 0)
        self.end_time = 0
        self.index: dict[int, list[int]] = {}   # channel id -> [log_time, offset, log_time, offset, ...]


class _SerializedRecords:
    """Records kept as their bytes (the summary's chunk indexes: :class:`RecordingWriter`), written into the summary
    like the record objects beside them."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, builder: RecordBuilder) -> None:
        builder.write(bytes(self.data))


class RecordingWriter:
    """Appends ZeroMQ messages to an MCAP file, one channel per topic, crash-tolerant.

    ``add`` and ``add_batch`` never decode the payload: the caller passes the bytes as received and the times.
    The file is what :class:`mcap.writer.Writer` writes (chunks holding the schemas, channels and messages, message
    indexes after each chunk, metadata between chunks, the summary at the end); the non-message records are the mcap
    package's own record classes. Message records are packed here, in bulk for ``add_batch``, because the mcap
    writer's per-message Python path costs more than receiving a message (docs/recording.md, "Figures").
    """

    def __init__(self, path: str | Path, *, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, compression: CompressionType = CompressionType.ZSTD,
                 overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists (choose another name or allow overwriting)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._compression_name, self._new_compressor = _compressor(compression)
        self._chunk_bytes = chunk_bytes
        self._file = open(self.path, "wb")
        self._channels: dict[str, int] = {}
        self._schema_records: list[Schema] = []
        self._channel_records: list[Channel] = []
        self._chunk = _OpenChunk(self._new_compressor())
        # the summary's chunk index records, serialized as each chunk closes: a file grows by two chunks a second
        # (the flush interval), and a ChunkIndex object with its dict of offsets holds ~970 B of Python objects
        # against ~150 B of record (0.11 MiB/min of the recorder's resident set, all of the growth of an idle
        # recorder; docs/recording.md, "Memory")
        self._chunk_index_records = _SerializedRecords()
        self._metadata_indexes: list[MetadataIndex] = []
        self._statistics = Statistics(attachment_count=0, channel_count=0, channel_message_counts={}, chunk_count=0,
                                      message_count=0, metadata_count=0, message_start_time=0, message_end_time=0,
                                      schema_count=0)
        self._file.write(MAGIC)
        self._write_record(Header(PROFILE, "mms-hil recorder"))
        self._flush_interval_ns = int(flush_interval_s * 1e9)
        self._last_flush_ns = time.monotonic_ns()
        self.closed = False
        self.sync()

    def _write_record(self, record) -> int:
        """Write one top-level record at the end of the file; its length in bytes."""
        builder = RecordBuilder()
        record.write(builder)
        data = builder.end()
        self._file.write(data)
        return len(data)

    def _chunk_record(self, record) -> None:
        """Put a schema or channel record into the open chunk (where the mcap writer puts them)."""
        builder = RecordBuilder()
        record.write(builder)
        data = builder.end()
        self._chunk.parts.append(data)
        self._chunk.size += len(data)

    def _register(self, topic: str, message_encoding: str, schema_name: str | None, schema_data: bytes) -> int:
        schema_id = 0
        if schema_name is not None:
            schema_id = len(self._schema_records) + 1
            schema = Schema(id=schema_id, name=schema_name, encoding=SCHEMA_ENCODING, data=schema_data)
            self._schema_records.append(schema)
            self._chunk_record(schema)
        channel = Channel(id=len(self._channel_records) + 1, topic=topic, message_encoding=message_encoding,
                          schema_id=schema_id, metadata={})
        self._channel_records.append(channel)
        self._chunk_record(channel)
        self._channels[topic] = channel.id
        self._statistics.schema_count = len(self._schema_records)
        self._statistics.channel_count = len(self._channel_records)
        return channel.id

    def channel_id(self, topic: str) -> int:
        """The channel of ``topic``, registered (with its schema) on first use."""
        channel = self._channels.get(topic)
        if channel is None:
            schema = SCHEMAS.get(topic)
            channel = self._register(topic, MESSAGE_ENCODING, None if schema is None else topic,
                                     json.dumps(schema, sort_keys=True).encode())
        return channel

    def add_json(self, topic: str, schema_name: str, schema: dict, data: bytes, log_time_ns: int,
                 publish_time_ns: int) -> None:
        """Append one JSON-encoded message (Foxglove's JSON encoding) on ``topic``, whose channel is registered on
        first use with the JSON schema ``schema`` named ``schema_name`` (hil/foxglove/scene.py)."""
        channel = self._channels.get(topic)
        if channel is None:
            channel = self._register(topic, "json", schema_name, json.dumps(schema).encode())
        self._add(channel, data, log_time_ns, publish_time_ns, 0)

    def add(self, topic: str, payload: bytes, log_time_ns: int, publish_time_ns: int, seq: int = 0) -> None:
        """Append one message; ``publish_time_ns`` is the payload's ``stamp_ns`` (0 if it had none)."""
        self._add(self._channels.get(topic) or self.channel_id(topic), payload, log_time_ns, publish_time_ns,
                  seq & 0xFFFFFFFF)

    def _add(self, channel: int, payload: bytes, log_time_ns: int, publish_time_ns: int, sequence: int) -> None:
        chunk = self._chunk
        chunk.parts.append(_MESSAGE_RECORD_HEAD.pack(Opcode.MESSAGE, _MESSAGE_BODY_HEAD_BYTES + len(payload), channel,
                                                     sequence, log_time_ns, publish_time_ns))
        chunk.parts.append(payload)
        index = chunk.index.get(channel)
        if index is None:
            index = chunk.index[channel] = []
        index += (log_time_ns, chunk.size)
        chunk.size += _MESSAGE_RECORD_HEAD.size + len(payload)
        if chunk.messages == 0 or log_time_ns < chunk.start_time:
            chunk.start_time = log_time_ns
        chunk.end_time = max(chunk.end_time, log_time_ns)
        chunk.messages += 1
        counts = self._statistics.channel_message_counts
        counts[channel] = counts.get(channel, 0) + 1
        if chunk.size > self._chunk_bytes:
            self._finish_chunk()

    def add_batch(self, channels: np.ndarray, payloads: list[bytes], log_times_ns: np.ndarray,
                  publish_times_ns: np.ndarray, sequences: np.ndarray, lengths: np.ndarray | None = None) -> None:
        """Append k messages in this order: ``channels`` (k,) channel ids (:meth:`channel_id`), ``payloads`` k
        bytes, ``log_times_ns`` and ``publish_times_ns`` (k,) ns, ``sequences`` (k,) the MCAP sequence (u32). Chunks
        close where :meth:`add` would close them (past ``chunk_bytes``). ``lengths``: (k,) the payloads' lengths,
        bytes, when the caller knows them."""
        if lengths is None:
            lengths = np.fromiter(map(len, payloads), dtype=np.uint64, count=len(payloads))
        lengths = lengths.astype(np.uint64, copy=False)
        done = 0
        while done < len(payloads):
            chunk = self._chunk
            ends = chunk.size + np.cumsum(lengths[done:] + _MESSAGE_RECORD_HEAD.size)
            take = min(int(np.searchsorted(ends, self._chunk_bytes, side="right")) + 1, len(ends))
            part = slice(done, done + take)
            self._add_to_chunk(channels[part], payloads[part], lengths[part], log_times_ns[part],
                               publish_times_ns[part], sequences[part])
            done += take
            if chunk.size > self._chunk_bytes:
                self._finish_chunk()
        self._absorb()

    def _absorb(self) -> None:
        """Checksum and compress the open chunk's records not yet compressed (they are in the processor's cache),
        a cache-sized slice at a time."""
        chunk = self._chunk
        if not chunk.parts:
            return
        records = b"".join(chunk.parts)
        chunk.parts.clear()
        view = memoryview(records)
        for begin in range(0, len(records), _ABSORB_SLICE_BYTES):
            piece = view[begin:begin + _ABSORB_SLICE_BYTES]
            chunk.crc = zlib.crc32(piece, chunk.crc)
            if chunk.compressor is None:
                chunk.compressed.append(bytes(piece))
                continue
            compressed = chunk.compressor.compress(piece)
            if compressed:
                chunk.compressed.append(compressed)
        chunk.absorbed += len(records)

    def _add_to_chunk(self, channels, payloads, lengths, log_times_ns, publish_times_ns, sequences) -> None:
        chunk, count = self._chunk, len(payloads)
        heads = np.empty(count, dtype=_MESSAGE_RECORD_DTYPE)
        heads["opcode"] = Opcode.MESSAGE
        heads["length"] = lengths + _MESSAGE_BODY_HEAD_BYTES
        heads["channel"] = channels
        heads["sequence"] = sequences
        heads["log_time"] = log_times_ns
        heads["publish_time"] = publish_times_ns
        packed, width = heads.tobytes(), _MESSAGE_RECORD_HEAD.size
        records: list[bytes] = [b""] * (2 * count)
        records[0::2] = [packed[i:i + width] for i in range(0, count * width, width)]
        records[1::2] = payloads
        chunk.parts += records
        sizes = lengths + width
        offsets = chunk.size + np.cumsum(sizes) - sizes
        for channel in np.unique(channels).tolist():
            mine = channels == channel
            pairs = np.column_stack((log_times_ns[mine].astype(np.uint64), offsets[mine]))
            chunk.index.setdefault(channel, []).extend(pairs.ravel().tolist())
            counts = self._statistics.channel_message_counts
            counts[channel] = counts.get(channel, 0) + int(mine.sum())
        chunk.size += int(sizes.sum())
        first, last = int(log_times_ns.min()), int(log_times_ns.max())
        chunk.start_time = first if chunk.messages == 0 else min(chunk.start_time, first)
        chunk.end_time = max(chunk.end_time, last)
        chunk.messages += count

    def _finish_chunk(self) -> None:
        """Write the open chunk (compressed, CRC of its records) and its message indexes; a chunk without messages
        stays open (its schema and channel records go with the next messages, as in the mcap writer)."""
        chunk = self._chunk
        if chunk.messages == 0:
            return
        self._absorb()
        if chunk.compressor is not None:
            chunk.compressed.append(chunk.compressor.flush())
        data_length = sum(map(len, chunk.compressed))
        start = self._file.tell()
        name = self._compression_name.encode()
        head_length = _CHUNK_HEAD.size - _RECORD_HEADER.size + 4 + len(name) + 8
        self._file.write(_CHUNK_HEAD.pack(Opcode.CHUNK, head_length + data_length, chunk.start_time, chunk.end_time,
                                          chunk.absorbed, chunk.crc))
        self._file.write(struct.pack("<I", len(name)) + name + struct.pack("<Q", data_length))
        self._file.write(b"".join(chunk.compressed))
        index_start = self._file.tell()
        offsets: dict[int, int] = {}
        for channel, entries in chunk.index.items():
            offsets[channel] = self._file.tell()
            self._file.write(_MESSAGE_INDEX_HEAD.pack(Opcode.MESSAGE_INDEX, 6 + 8 * len(entries), channel,
                                                      8 * len(entries)))
            self._file.write(np.asarray(entries, dtype="<u8").tobytes())
        record = RecordBuilder()
        ChunkIndex(message_start_time=chunk.start_time, message_end_time=chunk.end_time, chunk_start_offset=start,
                   chunk_length=index_start - start, message_index_offsets=offsets,
                   message_index_length=self._file.tell() - index_start, compression=self._compression_name,
                   compressed_size=data_length, uncompressed_size=chunk.absorbed).write(record)
        self._chunk_index_records.data += record.end()
        statistics = self._statistics
        statistics.message_start_time = (chunk.start_time if statistics.message_count == 0
                                         else min(statistics.message_start_time, chunk.start_time))
        statistics.message_end_time = max(statistics.message_end_time, chunk.end_time)
        statistics.message_count += chunk.messages
        statistics.chunk_count += 1
        self._chunk = _OpenChunk(self._new_compressor())

    def add_metadata(self, name: str, data: dict[str, str]) -> None:
        offset = self._file.tell()
        length = self._write_record(Metadata(name=name, metadata={str(k): str(v) for k, v in data.items()}))
        self._metadata_indexes.append(MetadataIndex(offset=offset, length=length, name=name))
        self._statistics.metadata_count += 1

    def maybe_sync(self) -> bool:
        """Close the open chunk and fsync if ``flush_interval_s`` has passed since the last time."""
        now = time.monotonic_ns()
        if now - self._last_flush_ns < self._flush_interval_ns:
            return False
        self.sync()
        return True

    def sync(self) -> None:
        """Close the open chunk, write everything buffered, fsync: all messages so far survive a crash."""
        self._finish_chunk()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._last_flush_ns = time.monotonic_ns()

    def close(self) -> None:
        """Write the summary (indexes, statistics) and footer; the file is then complete."""
        if self.closed:
            return
        self._finish_chunk()
        self._write_record(DataEnd(0))
        self._file.write(self._summary(self._file.tell()))
        self._file.write(MAGIC)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self.closed = True

    def _summary(self, start: int) -> bytes:
        """The summary section at file offset ``start`` and the footer, as the mcap writer makes them: the schemas,
        channels, statistics, chunk indexes, (no) attachment indexes and metadata indexes, each group located by a
        summary offset record; the footer's CRC covers the summary and the footer's own first fields."""
        builder = RecordBuilder()
        offsets = []
        for opcode, records in ((Opcode.SCHEMA, self._schema_records), (Opcode.CHANNEL, self._channel_records),
                                (Opcode.STATISTICS, [self._statistics]), (Opcode.CHUNK_INDEX, [self._chunk_index_records]),
                                (Opcode.ATTACHMENT_INDEX, []), (Opcode.METADATA_INDEX, self._metadata_indexes)):
            group_start = builder.count
            for record in records:
                record.write(builder)
            offsets.append(SummaryOffset(group_opcode=opcode, group_start=start + group_start,
                                         group_length=builder.count - group_start))
        offset_start = start + builder.count
        for offset in offsets:
            offset.write(builder)
        summary = builder.end()
        crc = zlib.crc32(_FOOTER_HEAD.pack(Opcode.FOOTER, _FOOTER_BODY_BYTES, start, offset_start),
                         zlib.crc32(summary))
        footer = RecordBuilder()
        Footer(summary_start=start, summary_offset_start=offset_start, summary_crc=crc).write(footer)
        return summary + footer.end()


def _compressor(compression: CompressionType):
    """The MCAP compression name and a function that makes the streaming compressor of one chunk (``compress(data)``
    and ``flush()``, one frame; it makes None: stored as they are). zstd at level 1: on the recorder's payloads it
    compresses as well as the default level 3 at about half the CPU (docs/recording.md, "Figures"). The zstd frame
    does not state its content size (a stream's size is not known when it begins); MCAP readers decompress a chunk
    into its stated uncompressed size."""
    if compression == CompressionType.ZSTD:
        zstd = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        return "zstd", zstd.compressobj
    if compression == CompressionType.LZ4:
        import lz4.frame
        return "lz4", lambda: _Lz4Stream(lz4.frame.LZ4FrameCompressor())
    return "", lambda: None


class _Lz4Stream:
    """lz4.frame's compressor with the ``compress``/``flush`` of zstd's streaming one: one frame per chunk."""

    def __init__(self, compressor) -> None:
        self._compressor = compressor
        self._header = compressor.begin()

    def compress(self, data) -> bytes:
        header, self._header = self._header, b""
        return header + self._compressor.compress(data)

    def flush(self) -> bytes:
        header, self._header = self._header, b""
        return header + self._compressor.flush()


class _BoundedReader(io.RawIOBase):
    """A read-only view of the first ``limit`` bytes of a file: past it, reads return b"" (end of file)."""

    def __init__(self, handle, limit: int):
        self._handle = handle
        self._remaining = limit

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = min(len(buffer), self._remaining)
        if n <= 0:
            return 0
        data = self._handle.read(n)
        buffer[:len(data)] = data
        self._remaining -= len(data)
        return len(data)


@dataclass
class FileLayout:
    """Where the complete top-level records of an MCAP file end."""
    size: int             #: file size, bytes
    complete_bytes: int   #: length of the prefix made of whole records (the magic included), bytes
    has_footer: bool      #: True when the file ends with a footer (it was closed cleanly)

    @property
    def truncated(self) -> bool:
        return not self.has_footer


def scan_layout(path: str | Path) -> FileLayout:
    """Walk the top-level record headers (opcode, length) without reading the bodies.

    A record counts only if its whole body is inside the file and its opcode is a known one (a crash can leave
    a zero-filled tail on some file systems).
    """
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if handle.read(len(MAGIC)) != MAGIC:
            raise RecordingError(f"{path}: not an MCAP file (bad magic)")
        offset = len(MAGIC)
        while offset + _RECORD_HEADER.size <= size:
            handle.seek(offset)
            opcode, length = _RECORD_HEADER.unpack(handle.read(_RECORD_HEADER.size))
            end = offset + _RECORD_HEADER.size + length
            if opcode not in _VALID_OPCODES or end > size:
                break
            offset = end
            if opcode == Opcode.FOOTER:
                return FileLayout(size, offset, True)
    return FileLayout(size, offset, False)


def iter_complete_records(path: str | Path, layout: FileLayout | None = None,
                          progress: str | None = None) -> Iterator:
    """Records of an MCAP file in file order (chunks opened), up to its last complete top-level record.

    Works on complete files and on files cut short by a crash. A chunk whose CRC does not match (a torn
    write) ends the iteration: everything after it is suspect. ``progress`` names a tqdm bar (bytes read).
    """
    layout = layout or scan_layout(path)
    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=layout.complete_bytes, unit="B", unit_scale=True, desc=progress, leave=False)
    reported = 0
    with open(path, "rb") as handle:
        reader = StreamReader(io.BufferedReader(_BoundedReader(handle, layout.complete_bytes)),
                              validate_crcs=True)
        records = reader.records
        try:
            while True:
                try:
                    record = next(records)
                except (StopIteration, EndOfFile):
                    return
                except UnsupportedCompressionError as exc:
                    raise RecordingError(f"{path}: {exc}") from None
                except (CRCValidationError, McapError, struct.error, ValueError):
                    return
                yield record
                if isinstance(record, Footer):
                    return
                if bar is not None and handle.tell() - reported > _PROGRESS_STEP_BYTES:
                    bar.update(handle.tell() - reported)
                    reported = handle.tell()
        finally:
            if bar is not None:
                bar.close()


@dataclass
class RawRecording:
    """Everything in a recording, payloads still encoded. Message tuples: (log_time_ns, publish_time_ns,
    payload), the payload a bytes-like object (a memoryview into its decompressed chunk).

    ``damage``: every damaged part of the file, in file order, as dicts ``{"offset": int (bytes), "kind": str
    (``hil.recording.salvage.KINDS``), "messages_lost": int or None (unknown), "detail": one-line str}``; empty for an
    intact file. ``expected_messages``: per topic read, the messages the file held before the damage (the
    summary's statistics, else those read plus the losses the damage entries count; None when a loss is unknown).
    """
    path: Path
    layout: FileLayout
    messages: dict[str, list[tuple[int, int, bytes]]] = field(default_factory=dict)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    encodings: dict[str, str] = field(default_factory=dict)
    damage: list[dict] = field(default_factory=list)
    expected_messages: dict[str, int | None] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.layout.truncated

    @property
    def messages_lost(self) -> bool:
        """True when any damage lost messages (or may have: a loss the file cannot count)."""
        return any(entry["messages_lost"] != 0 for entry in self.damage)


_MESSAGE_HEAD = struct.Struct("<HIQQ")   # channel id, sequence, log_time, publish_time (MCAP Message record)
_LENGTH = struct.Struct("<Q")


@contextmanager
def gc_paused():
    """Pause the cyclic garbage collector while millions of acyclic objects (decoded payloads) are made: its
    generation scans would otherwise grow with everything already kept and dominate the time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def read_recording(path: str | Path, topics: set[str] | None = None, progress: bool = False) -> RawRecording:
    """Read a recording (complete, truncated by a crash, or damaged) into memory, grouped by topic, in file order.

    Damaged parts are reported in ``damage`` and read past (:mod:`hil.recording.salvage`); damaged data never raises.
    Chunks are parsed here rather than through the mcap package's record objects (about ten times faster on
    large files); the record layout is the MCAP specification's (opcode u8, length u64, then for a Message:
    channel id u16, sequence u32, log_time u64, publish_time u64, data). Payloads are memoryviews into the
    decompressed chunk.
    """
    path = Path(path)
    if not path.is_file():
        raise RecordingError(f"{path}: no such file")
    layout = scan_layout(path)
    recording = RawRecording(path=path, layout=layout)
    channels: dict[int, list] = {}       # wanted channel id -> its topic's message list
    topic_of: dict[int, str] = {}        # every channel id seen -> topic
    orphans: dict[int, list] = {}        # channel id without a Channel record -> [messages, offset of the first]

    def add_channel(channel: Channel) -> None:
        topic_of.setdefault(channel.id, channel.topic)
        if (topics is None or channel.topic in topics) and channel.id not in channels:
            channels[channel.id] = recording.messages.setdefault(channel.topic, [])
            recording.encodings[channel.topic] = channel.message_encoding

    read = [0]                           # messages read on every channel, wanted or not

    def on_chunk(offset: int, data: bytes) -> None:
        before = {id(messages): len(messages) for messages in channels.values()}
        try:
            read[0] += _parse_chunk(data, channels, topic_of, orphans, offset, add_channel)
        except (salvage.Malformed, struct.error, McapError, ValueError) as exc:
            for messages in channels.values():   # a chunk is kept whole or not at all
                del messages[before.get(id(messages), 0):]
            raise salvage.Damaged(salvage.BAD_RECORD, f"records inside do not parse ({exc})") from None

    def on_record(opcode: int, start: int, end: int) -> None:
        if opcode == Opcode.CHANNEL:
            add_channel(salvage.read_record_body(Channel, buf, start, end))
        elif opcode == Opcode.METADATA:
            record = salvage.read_record_body(Metadata, buf, start, end)
            recording.metadata[record.name] = dict(record.metadata)
        elif opcode == Opcode.MESSAGE:
            record = salvage.read_record_body(Message, buf, start, end)
            read[0] += 1
            if record.channel_id in channels:
                channels[record.channel_id].append((record.log_time, record.publish_time, record.data))
            elif record.channel_id not in topic_of:
                orphans.setdefault(record.channel_id, [0, start])[0] += 1

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=layout.size, unit="B", unit_scale=True, desc=f"read {path.name}", leave=False)
    reported = [0]

    def show(position: int) -> None:
        if position - reported[0] > _PROGRESS_STEP_BYTES:
            bar.update(position - reported[0])
            reported[0] = position

    with gc_paused(), open(path, "rb") as handle, _mapped(handle, layout.size) as buf:
        summary, summary_damage = salvage.read_summary(buf, layout.size)
        for channel in summary.channels if summary else ():
            add_channel(channel)
        result = salvage.walk(buf, layout.size, summary, on_chunk, on_record, show if bar is not None else None,
                              stop_at_data_end=summary is not None or summary_damage is not None)
    if bar is not None:
        bar.close()
    recording.damage = sorted(([summary_damage] if summary_damage else []) + result.damage,
                              key=lambda entry: entry["offset"])
    for channel_id, (count, offset) in orphans.items():
        recording.damage.append(salvage.damage(
            offset, salvage.BAD_RECORD, count, f"{count} messages on channel {channel_id}, whose Channel record "
                                               "was in a damaged part: their topic is unknown"))
    _count_the_one_unknown_loss(recording.damage, summary, read[0])
    recording.expected_messages = _expected_messages(recording, summary, result.lost_per_channel, channels,
                                                     topic_of)
    return recording


@contextmanager
def _mapped(handle, size: int):
    """The file as a read-only buffer (a memory map; the caller has checked the magic, so it is not empty)."""
    mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        yield mapped
    finally:
        mapped.close()


def _count_the_one_unknown_loss(damage: list[dict], summary, read: int) -> None:
    """When one damage entry's loss is unknown and the summary's statistics count the file's messages, that loss is
    what the statistics count beyond the messages read and the other, known, losses."""
    unknown = [entry for entry in damage if entry["messages_lost"] is None]
    if len(unknown) != 1 or summary is None or summary.channel_counts is None:
        return
    known = sum(entry["messages_lost"] for entry in damage if entry["messages_lost"] is not None)
    lost = sum(summary.channel_counts.values()) - read - known
    if lost >= 0:
        unknown[0]["messages_lost"] = lost
        unknown[0]["detail"] += f" ({lost} messages: the summary's statistics less those read and other losses)"


def _expected_messages(recording: RawRecording, summary, lost_per_channel: dict[int, int],
                       channels: dict[int, list], topic_of: dict[int, str]) -> dict[str, int | None]:
    if summary is not None and summary.channel_counts is not None:
        expected = {topic: 0 for topic in recording.messages}
        for channel_id, count in summary.channel_counts.items():
            topic = topic_of.get(channel_id)
            if topic in expected:
                expected[topic] += count
        return expected
    if any(entry["messages_lost"] is None for entry in recording.damage):
        return {topic: None for topic in recording.messages}
    expected = {topic: len(messages) for topic, messages in recording.messages.items()}
    for channel_id, count in lost_per_channel.items():
        if channel_id in channels:
            expected[topic_of[channel_id]] += count
    return expected


def _parse_chunk(data: bytes, channels: dict[int, list], topic_of: dict[int, str], orphans: dict[int, list],
                 chunk_offset: int, add_channel) -> int:
    """Append the chunk's messages on wanted channels to their lists; returns the number of Message records."""
    view = memoryview(data)
    found = 0
    position, end_of_data = 0, len(data)
    message_opcode, channel_opcode = int(Opcode.MESSAGE), int(Opcode.CHANNEL)
    unpack_head, unpack_length = _MESSAGE_HEAD.unpack_from, _LENGTH.unpack_from
    while position < end_of_data:
        opcode = data[position]
        (length,) = unpack_length(data, position + 1)
        body = position + 9
        position = body + length
        if position > end_of_data:
            raise salvage.Malformed(f"a record at {body - 9} runs past the chunk's end")
        if opcode == message_opcode:
            found += 1
            channel_id, _sequence, log_time, publish_time = unpack_head(data, body)
            messages = channels.get(channel_id)
            if messages is not None:
                messages.append((log_time, publish_time, view[body + _MESSAGE_HEAD.size:position]))
            elif channel_id not in topic_of:
                orphans.setdefault(channel_id, [0, chunk_offset])[0] += 1
        elif opcode == channel_opcode:
            add_channel(Channel.read(ReadDataStream(io.BytesIO(data[body:position]))))
    return found


@dataclass
class RecoveryReport:
    source: Path
    destination: Path
    source_bytes: int
    complete_bytes: int
    had_footer: bool
    messages: int
    per_topic: dict[str, int]
    last_log_time_ns: int


def recover(source: str | Path, destination: str | Path, overwrite: bool = False) -> RecoveryReport:
    """Rebuild a valid, indexed MCAP file from the complete records of a (possibly truncated) one.

    Schemas, channels, metadata, attachments and messages are copied as they are (ids renumbered in
    order of appearance); the lost tail is what followed the last complete record.
    """
    source, destination = Path(source), Path(destination)
    if source.resolve() == destination.resolve():
        raise RecordingError(f"{destination}: recovery must write a new file, not the broken one")
    if destination.exists() and not overwrite:
        raise RecordingError(f"{destination}: exists (choose another --out)")
    layout = scan_layout(source)
    schema_ids: dict[int, int] = {0: 0}
    channel_ids: dict[int, int] = {}
    channel_topics: dict[int, str] = {}
    per_topic: dict[str, int] = {}
    messages = 0
    last_log_time = 0
    destination.parent.mkdir(parents=True, exist_ok=True)
    with open(destination, "wb") as out:
        writer = Writer(out, compression=CompressionType.ZSTD)
        writer.start(profile=PROFILE, library="mms-hil recorder (recovered)")
        for record in iter_complete_records(source, layout):
            if isinstance(record, Schema):
                if record.id not in schema_ids:
                    schema_ids[record.id] = writer.register_schema(record.name, record.encoding, record.data)
            elif isinstance(record, Channel):
                if record.id not in channel_ids:
                    channel_ids[record.id] = writer.register_channel(
                        record.topic, record.message_encoding, schema_ids.get(record.schema_id, 0),
                        dict(record.metadata))
                    channel_topics[record.id] = record.topic
            elif isinstance(record, Message):
                channel = channel_ids.get(record.channel_id)
                if channel is None:
                    continue
                writer.add_message(channel, record.log_time, record.data, record.publish_time, record.sequence)
                messages += 1
                topic = channel_topics[record.channel_id]
                per_topic[topic] = per_topic.get(topic, 0) + 1
                last_log_time = max(last_log_time, record.log_time)
            elif isinstance(record, Metadata):
                writer.add_metadata(record.name, dict(record.metadata))
            elif isinstance(record, Attachment):
                writer.add_attachment(record.create_time, record.log_time, record.name, record.media_type,
                                      record.data)
        writer.add_metadata("recovery", {"source": str(source), "source_bytes": str(layout.size),
                                         "complete_bytes": str(layout.complete_bytes),
                                         "had_footer": str(layout.has_footer).lower(),
                                         "recovered_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
        writer.finish()
        out.flush()
        os.fsync(out.fileno())
    return RecoveryReport(source, destination, layout.size, layout.complete_bytes, layout.has_footer, messages,
                          per_topic, last_log_time)
