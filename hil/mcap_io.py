"""MCAP recordings: the crash-tolerant writer, the truncation-tolerant reader and recovery.

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

Crash tolerance: the writer closes the open chunk (:meth:`mcap.writer.Writer.flush`) and ``fsync``s the file
at least every ``flush_interval_s`` (0.5 s by default). A ``kill -9`` therefore leaves a file whose every
top-level record up to the last flush is complete, and :func:`iter_complete_records` reads it up to the last
complete record with the mcap package's non-seeking :class:`mcap.stream_reader.StreamReader`;
:func:`recover` rewrites those records into a valid, indexed file.
"""
from __future__ import annotations

import gc
import io
import json
import os
import platform
import struct
import time
import zlib
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from mcap.exceptions import EndOfFile, McapError, UnsupportedCompressionError
from mcap.opcode import Opcode
from mcap.data_stream import ReadDataStream
from mcap.records import Attachment, Channel, Chunk, Footer, Message, Metadata, Schema
from mcap.stream_reader import CRCValidationError, StreamReader
from mcap.writer import CompressionType, Writer

from sim.messages import SCHEMAS

MESSAGE_ENCODING = "msgpack"
SCHEMA_ENCODING = "jsonschema"
PROFILE = ""  # no ROS profile: msgpack payloads with JSON schemas
MAGIC = b"\x89MCAP0\r\n"
#: longest time between two chunk closes + fsync, s (the crash-loss bound is this plus one loop turn)
DEFAULT_FLUSH_INTERVAL_S = 0.5
#: chunks are also closed when they reach this many uncompressed bytes
DEFAULT_CHUNK_BYTES = 4 * 1024 * 1024
_RECORD_HEADER = struct.Struct("<BQ")  # opcode, record length (bytes)
_VALID_OPCODES = frozenset(int(op) for op in Opcode)
_PROGRESS_STEP_BYTES = 1 << 20


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


class RecordingWriter:
    """Appends ZeroMQ messages to an MCAP file, one channel per topic, crash-tolerant.

    ``add`` never decodes the payload: the caller passes the bytes as received and the two times.
    """

    def __init__(self, path: str | Path, *, flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
                 chunk_bytes: int = DEFAULT_CHUNK_BYTES, compression: CompressionType = CompressionType.ZSTD,
                 overwrite: bool = False):
        self.path = Path(path)
        if self.path.exists() and not overwrite:
            raise FileExistsError(f"{self.path} exists (choose another name or allow overwriting)")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "wb")
        self._writer = Writer(self._file, chunk_size=chunk_bytes, compression=compression)
        self._writer.start(profile=PROFILE, library="mms-hil recorder")
        self._channels: dict[str, int] = {}
        self._flush_interval_ns = int(flush_interval_s * 1e9)
        self._last_flush_ns = time.monotonic_ns()
        self.closed = False
        self.sync()

    def channel_id(self, topic: str) -> int:
        """The channel of ``topic``, registered (with its schema) on first use."""
        channel = self._channels.get(topic)
        if channel is None:
            schema = SCHEMAS.get(topic)
            schema_id = 0
            if schema is not None:
                schema_id = self._writer.register_schema(
                    name=topic, encoding=SCHEMA_ENCODING, data=json.dumps(schema, sort_keys=True).encode())
            channel = self._writer.register_channel(topic=topic, message_encoding=MESSAGE_ENCODING,
                                                    schema_id=schema_id)
            self._channels[topic] = channel
        return channel

    def add(self, topic: str, payload: bytes, log_time_ns: int, publish_time_ns: int, seq: int = 0) -> None:
        """Append one message; ``publish_time_ns`` is the payload's ``stamp_ns`` (0 if it had none)."""
        self._writer.add_message(channel_id=self.channel_id(topic), log_time=log_time_ns, data=payload,
                                 publish_time=publish_time_ns, sequence=seq & 0xFFFFFFFF)

    def add_metadata(self, name: str, data: dict[str, str]) -> None:
        self._writer.add_metadata(name, {str(k): str(v) for k, v in data.items()})

    def maybe_sync(self) -> bool:
        """Close the open chunk and fsync if ``flush_interval_s`` has passed since the last time."""
        now = time.monotonic_ns()
        if now - self._last_flush_ns < self._flush_interval_ns:
            return False
        self.sync()
        return True

    def sync(self) -> None:
        """Close the open chunk, write everything buffered, fsync: all messages so far survive a crash."""
        self._writer.flush()
        os.fsync(self._file.fileno())
        self._last_flush_ns = time.monotonic_ns()

    def close(self) -> None:
        """Write the summary (indexes, statistics) and footer; the file is then complete."""
        if self.closed:
            return
        self._writer.finish()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self.closed = True


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
    payload), the payload a bytes-like object (a memoryview into its decompressed chunk)."""
    path: Path
    layout: FileLayout
    messages: dict[str, list[tuple[int, int, bytes]]] = field(default_factory=dict)
    metadata: dict[str, dict[str, str]] = field(default_factory=dict)
    encodings: dict[str, str] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.layout.truncated


_MESSAGE_HEAD = struct.Struct("<HIQQ")   # channel id, sequence, log_time, publish_time (MCAP Message record)
_LENGTH = struct.Struct("<Q")


def _chunk_data(chunk: Chunk) -> bytes | None:
    """The decompressed records of a chunk, or None if its CRC does not match (a torn write)."""
    if chunk.compression == "zstd":
        import zstandard
        data = zstandard.ZstdDecompressor().decompress(chunk.data, max_output_size=chunk.uncompressed_size)
    elif chunk.compression == "lz4":
        import lz4.frame
        data = lz4.frame.decompress(chunk.data)
    elif chunk.compression == "":
        data = chunk.data
    else:
        raise RecordingError(f"unsupported chunk compression {chunk.compression!r}")
    if chunk.uncompressed_crc and zlib.crc32(data) != chunk.uncompressed_crc:
        return None
    return data


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
    """Read a recording (complete or truncated by a crash) into memory, grouped by topic, in file order.

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
    channels: dict[int, list] = {}

    def add_channel(channel: Channel) -> None:
        if (topics is None or channel.topic in topics) and channel.id not in channels:
            channels[channel.id] = recording.messages.setdefault(channel.topic, [])
            recording.encodings[channel.topic] = channel.message_encoding

    bar = None
    if progress:
        from tqdm import tqdm
        bar = tqdm(total=layout.complete_bytes, unit="B", unit_scale=True, desc=f"read {path.name}", leave=False)
    with gc_paused(), open(path, "rb") as handle:
        reader = StreamReader(io.BufferedReader(_BoundedReader(handle, layout.complete_bytes)), emit_chunks=True)
        records = reader.records
        reported = 0
        while True:
            try:
                record = next(records)
            except (StopIteration, EndOfFile, McapError, struct.error, ValueError):
                break
            if isinstance(record, Chunk):
                data = _chunk_data(record)
                if data is None:
                    break
                _parse_chunk(data, channels, add_channel)
            elif isinstance(record, Message):
                messages = channels.get(record.channel_id)
                if messages is not None:
                    messages.append((record.log_time, record.publish_time, record.data))
            elif isinstance(record, Channel):
                add_channel(record)
            elif isinstance(record, Metadata):
                recording.metadata[record.name] = dict(record.metadata)
            elif isinstance(record, Footer):
                break
            if bar is not None and handle.tell() - reported > _PROGRESS_STEP_BYTES:
                bar.update(handle.tell() - reported)
                reported = handle.tell()
    if bar is not None:
        bar.close()
    return recording


def _parse_chunk(data: bytes, channels: dict[int, list], add_channel) -> None:
    view = memoryview(data)
    position, end_of_data = 0, len(data)
    message_opcode, channel_opcode = int(Opcode.MESSAGE), int(Opcode.CHANNEL)
    unpack_head, unpack_length = _MESSAGE_HEAD.unpack_from, _LENGTH.unpack_from
    while position + 9 <= end_of_data:
        opcode = data[position]
        (length,) = unpack_length(data, position + 1)
        body = position + 9
        position = body + length
        if opcode == message_opcode:
            channel_id, _sequence, log_time, publish_time = unpack_head(data, body)
            messages = channels.get(channel_id)
            if messages is not None:
                messages.append((log_time, publish_time, view[body + _MESSAGE_HEAD.size:position]))
        elif opcode == channel_opcode:
            add_channel(Channel.read(ReadDataStream(io.BytesIO(data[body:position]))))


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
