"""``mms record``: every topic of the simulator and the driver into one MCAP file per run (docs/recording.md).

One SUB socket connects to the sim and driver PUB endpoints, subscribed to everything; ``seq`` gaps are counted per
topic (:class:`sim.messages.SeqTracker`) so a drop is never silent. What is received and not yet written (the
backlog of a recorder behind its stream) is bounded in bytes as a whole (``--max-backlog``): ZeroMQ's receive
pipes in front of the recorder, one per publisher, get a share of it as their high-water marks, and the recorder's
own queue the rest; beyond it, arriving messages are dropped and counted per topic by reason, in the status and the
file's ``recorder_stats``, so that the memory of a recorder held back stays within its base and the bound
(docs/recording.md, "Memory"). Payload bytes are written exactly as received
(:class:`hil.recording.mcap_io.RecordingWriter`), with ``log_time`` = receive wall clock and ``publish_time`` = the
payload's ``stamp_ns``. The writer closes a chunk and fsyncs at least every 0.5 s: a ``kill -9`` loses at most
the last flush interval plus one loop turn, and ``mms record --recover BROKEN.mcap`` rebuilds a valid file.

A REQ/REP control socket (``Endpoints.recorder_control``) takes msgpack maps ``{"cmd": "start", "path": ...}``,
``{"cmd": "stop"}`` and ``{"cmd": "status"}`` and replies ``{"ok": true, ...}`` or ``{"ok": false, "error": ...}``.
A requested path is taken inside the run directory given on the command line (``--run-dir``) and must stay there
(:func:`path_in_run_dir`); an existing file is never replaced on request.
SIGINT and SIGTERM finish the open file cleanly.
"""
from __future__ import annotations

import json
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import zmq

from hil.recording.mcap_io import RecordingError, RecordingWriter, recover, software_versions
from hil.recording.recorder_args import HWM_MESSAGE_BYTES, PIPES_SHARE
from hil.recording.template_decode import Structure, integers, matches, structure
from firmware_interface.rigs.host import sensor_rig_path
from hil.foxglove.scene import PoseStream, pose_stream, schema
from sim.cli_options import DEFAULT_FLUSH_INTERVAL_S, DEFAULT_MAX_BACKLOG_MIB, DEFAULT_POSES_RATE_HZ
from sim.config import ConfigError, load_toml, resolve_config
from sim.control import ControlError, encode_reply, error_reply, parse_request
from sim.messages import TOPIC_SIM_STATE, SeqTracker
from sim.network import Endpoints, load_endpoints, open_socket
from sim.processes import freeze_startup_heap

#: control commands -> what they do (the reply of "help"; docs/recording.md lists their arguments and replies)
COMMANDS = {
    "start": "start recording (optional path, robot, rig)",
    "stop": "finish the file; the recorder stays up, idle",
    "status": "whether it records, and the counters of the file being written",
    "help": "list the commands",
}
MIB = 1024 * 1024
#: what a received message costs in the queue beyond its payload, bytes, counted against ``--max-backlog``: the
#: payload is copied out of ZeroMQ's receive buffer (:meth:`Recorder.receive_batch`), so that it costs the same
#: whether the messages arrived one at a time or in a burst; its bytes object's header, the topic's bytes object, the
#: receipt time, its measured length and four list slots. Measured (benchmarks/bench_recorder_memory.py
#: --queued-cost, the resident set queued beyond that in ZeroMQ's pipe before): 115-178 B for payloads of 136 B to
#: 6 kB, a burst or at 1-2 kHz; rounded up to 256 B
HELD_MESSAGE_BYTES = 256
#: the reason counted for a message dropped because the held backlog is at ``--max-backlog``
DROP_BACKLOG_FULL = "backlog_full"
#: how often the progress line is redrawn, s
PROGRESS_INTERVAL_S = 0.5
#: poll timeout of the main loop, s: bounds the reaction time to signals, control requests and flushes
LOOP_TIMEOUT_S = 0.05
#: the receive path only takes messages off the SUB socket and stamps them (``log_time``); validating, gap counting
#: and MCAP writing wait until the queue holds this many payload bytes (4 MB: about 2 000 states of 2.1 kB; a batch
#: that size costs a tenth of a small one per message in fixed costs, and its memory is reused from batch to batch
#: instead of being returned to the system and faulted in again) ...
WRITE_BATCH_BYTES = 4 * 1024 * 1024
#: ... or this many messages (small ones: the queue's Python objects) ...
WRITE_BATCH_MESSAGES = 16_384
#: ... or until the file's flush is due (every message received before a flush is in it: the crash-loss bound
#: is unchanged; at low rates the messages are written at each flush). A receive turn also ends after this long, s
#: (the control socket and the flush get a look)
RECEIVE_TURN_S = LOOP_TIMEOUT_S
#: At a stop, the recorder takes messages until its socket has been quiet this long, s (the peers stopped first
#: in an orderly shutdown; a message in flight crosses the loopback in well under a ms), or until every topic still
#: arriving has delivered a message stamped after the stop (a peer that goes on publishing, a Ctrl-C while `mms serve`
#: runs: its backlog from before the stop, delivered in order, is then taken) ...
DRAIN_QUIET_S = 0.05
#: ... for at most this long, s: only a peer whose clock runs behind this host's (its stamps never after the stop)
#: and that never stops publishing meets it. Not a bound on the backlog: a recorder on a busy machine can be seconds
#: behind, and its backlog takes what the machine gives it (a 2 s bound took 48 640 of 50 000 queued messages at
#: load 10 and cut the driver's last commands, the ramp to neutral, off the demo's file)
STOP_DRAIN_MAX_S = 60.0
#: messages received between two looks at the clock within a receive turn
RECEIVE_CLOCK_EVERY = 512
#: queued messages of one topic and payload length read together by shape (fewer: decoded one by one, the
#: batch set-up would cost more than it saves)
SHAPE_GROUP_MIN_MESSAGES = 32
#: a run of one shape is checked this many bytes of payloads at a time (they stay in the CPU's cache); a block with
#: a message of another shape is decoded one by one
SHAPE_BLOCK_BYTES = 256 * 1024
#: shapes kept from one write to the next (one per payload length), at most
SHAPES_KEPT = 64
#: stands for a message of one frame or of more than two, in the receive queue: an empty payload, which no decode
#: takes for a map, so it is counted malformed like any other
MALFORMED_FRAMES = (b"", b"")
DEFAULT_RUN_DIR = Path("runs")
RECORDING_SUFFIX = ".mcap"


def publisher_endpoints(endpoints: Endpoints) -> tuple[str, ...]:
    """The PUB endpoints the recorder's SUB socket connects to: one ZeroMQ receive pipe each."""
    return endpoints.sim_pub, endpoints.driver_pub


def split_backlog(max_backlog_bytes: int, publishers: int, hwm: int | None = None) -> tuple[int, int]:
    """``--max-backlog`` shared out: (each receive pipe's high-water mark, messages; the recorder's own queue's
    bound, bytes), so that ``publishers`` full pipes (HWM_MESSAGE_BYTES a message) and a full own queue together
    hold at most ``max_backlog_bytes``. ``hwm``: the pipes' high-water mark as given (``--hwm``), else PIPES_SHARE
    of the bound among the publishers. A ValueError when the pipes would leave the own queue nothing."""
    if hwm is None:
        hwm = max(1, int(max_backlog_bytes * PIPES_SHARE) // (publishers * HWM_MESSAGE_BYTES))
    queue_max_bytes = max_backlog_bytes - publishers * hwm * HWM_MESSAGE_BYTES
    if queue_max_bytes <= 0:
        raise ValueError(f"a high-water mark of {hwm} messages on each of {publishers} publishers' pipes "
                         f"({HWM_MESSAGE_BYTES} B a message) takes all of the backlog's bound of "
                         f"{max_backlog_bytes / MIB:g} MiB")
    return hwm, queue_max_bytes


def default_run_path(run_dir: Path = DEFAULT_RUN_DIR) -> Path:
    return run_dir / time.strftime("%Y%m%d-%H%M%S.mcap")


def path_in_run_dir(requested: str, run_dir: Path) -> Path:
    """The file a control request names, checked to lie inside ``run_dir`` (resolved, symlinks followed).

    A relative path is taken from ``run_dir``; no ``..`` component, no absolute path outside it, no symlink (of a
    folder or of the file itself) that leads out of it, a ``.mcap`` name, no existing file: each is a
    RecordingError naming the reason. Missing folders inside ``run_dir`` are created by the writer.
    """
    if not requested or "\0" in requested:
        raise RecordingError('"path" must be a non-empty file name')
    path = Path(requested)
    if ".." in path.parts:
        raise RecordingError(f"{requested}: '..' is not allowed in a recording path")
    if path.suffix != RECORDING_SUFFIX:
        raise RecordingError(f"{requested}: a recording is a {RECORDING_SUFFIX} file")
    root = run_dir.resolve()
    candidate = path if path.is_absolute() else root / path
    resolved = candidate.resolve()
    if not resolved.is_relative_to(root):
        raise RecordingError(f"{requested}: outside the run directory {root}")
    if candidate.is_symlink() or resolved.exists():
        raise RecordingError(f"{requested}: exists (the recorder never replaces a file on request)")
    return resolved


@dataclass
class TopicStats:
    messages: int = 0
    bytes: int = 0


@dataclass
class Session:
    """One open recording: its file, counters and gap tracker."""
    writer: RecordingWriter
    started_ns: int
    stats: dict[str, TopicStats] = field(default_factory=dict)
    seq: SeqTracker = field(default_factory=SeqTracker)
    malformed: int = 0
    poses: PoseStream | None = None     # the Foxglove channels (hil/foxglove), when the robot is known and builds
    poses_note: str = "off: no robot config (--robot)"
    #: topic (as received, bytes) -> the newest stamp_ns written (the publisher's clock, ns): what a stop waits for
    newest_stamp_ns: dict[bytes, int] = field(default_factory=dict)
    #: topic (as received, bytes) -> messages dropped with the backlog at its bound (DROP_BACKLOG_FULL)
    dropped: dict[bytes, int] = field(default_factory=dict)

    @property
    def messages(self) -> int:
        return sum(s.messages for s in self.stats.values())

    @property
    def bytes(self) -> int:
        return sum(s.bytes for s in self.stats.values())

    def foxglove(self) -> dict[str, Any]:
        """The Foxglove channels' state: ``poses`` (the note), ``posed`` states, ``refused`` states by reason."""
        if self.poses is None:
            return {"poses": self.poses_note, "posed": 0, "refused": {}}
        return {"poses": self.poses_note, "posed": self.poses.posed, "refused": dict(self.poses.refused)}

    def summary(self) -> dict[str, Any]:
        """The counters: per topic messages and bytes written, seq gaps (every message missing, dropped here or
        before), restarts, and ``dropped`` by reason (of the gaps, those the recorder dropped itself)."""
        dropped = {topic.decode("ascii", "replace"): count for topic, count in self.dropped.items()}
        topics = {}
        for topic in sorted(set(self.stats) | set(dropped)):
            written = self.stats.get(topic, TopicStats())
            topics[topic] = {"messages": written.messages, "bytes": written.bytes,
                             "gaps": self.seq.gaps.get(topic, 0), "restarts": self.seq.restarts.get(topic, 0),
                             "dropped": {DROP_BACKLOG_FULL: dropped[topic]} if topic in dropped else {}}
        return {"path": str(self.writer.path), "elapsed_s": (time.time_ns() - self.started_ns) / 1e9,
                "messages": self.messages, "bytes": self.bytes, "malformed": self.malformed,
                "foxglove": self.foxglove(), "topics": topics}


def _seq_and_stamp(payload: bytes) -> tuple[int, int]:
    """A payload's ``seq`` and ``stamp_ns`` (0 when absent); raises on a payload that is not a map with both
    non-negative integers."""
    return _checked_clocks(msgpack.unpackb(payload, raw=False, strict_map_key=False))


_CLOCK_KEYS = frozenset(("seq", "stamp_ns"))


def _topic_codes(topics: list[bytes]) -> tuple[list[bytes], np.ndarray]:
    """The distinct topics of a batch and, per message, the index of its topic among them: (k,) int64."""
    distinct = list(set(topics))
    code = {topic: i for i, topic in enumerate(distinct)}
    return distinct, np.fromiter(map(code.__getitem__, topics), dtype=np.int64, count=len(topics))


def _shape_groups(codes: np.ndarray, lengths: np.ndarray) -> list[np.ndarray]:
    """Indices of the messages of each (topic, payload length), in receipt order within a group."""
    keys = codes * (int(lengths.max()) + 1) + lengths
    if (keys == keys[0]).all():
        return [np.arange(len(keys))]
    order = np.argsort(keys, kind="stable")
    return np.split(order, np.flatnonzero(np.diff(keys[order])) + 1)


def _shape_of(payload: bytes) -> Structure | None:
    """The shape of a valid payload (a map with non-negative integer seq and stamp_ns), else None."""
    try:
        decoded = msgpack.unpackb(payload, raw=False, strict_map_key=False)
        _checked_clocks(decoded)
    except Exception:   # a malformed message gives no shape: its run is decoded one by one
        return None
    return structure(payload, decoded, _CLOCK_KEYS)


def _clocks_by_shape(codes: np.ndarray, payloads: list[bytes], shapes: dict[int, Structure] | None = None,
                     lengths: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``seq`` and ``stamp_ns`` of the queued messages that arrive in runs of one topic and shape, validated and read
    from all of them at once (:func:`hil.recording.template_decode.structure`: a message with the bytes of its run's
    first one but for the numbers' values decodes to a map of the same keys and types, so it is as valid as that
    one): (shaped (k,) bool, seqs (k,) uint64, stamps (k,) uint64), the numbers valid where ``shaped``. ``codes``:
    each message's topic (:func:`_topic_codes`). ``shapes``: payload length -> the last shape seen of that length,
    kept from batch to batch (a run that still has it is not decoded at all), updated here. A block of a run
    (SHAPE_BLOCK_BYTES) in which any message differs, and runs shorter than SHAPE_GROUP_MIN_MESSAGES, are left to the
    one-by-one decode (:func:`_seq_and_stamp`). ``lengths``: (k,) int64 the payloads' lengths, bytes, when known.
    """
    count = len(payloads)
    shaped = np.zeros(count, dtype=bool)
    seqs, stamps = np.zeros(count, dtype=np.uint64), np.zeros(count, dtype=np.uint64)
    if count < SHAPE_GROUP_MIN_MESSAGES:
        return shaped, seqs, stamps
    if lengths is None:
        lengths = np.fromiter(map(len, payloads), dtype=np.int64, count=count)
    for indices in _shape_groups(codes, lengths):
        if len(indices) < SHAPE_GROUP_MIN_MESSAGES or lengths[indices[0]] == 0:
            continue
        members = payloads if len(indices) == count else [payloads[i] for i in indices.tolist()]
        length = int(lengths[indices[0]])
        shape = shapes.get(length) if shapes is not None else None
        if shape is None or not matches(shape, np.frombuffer(members[0], dtype=np.uint8)[None, :]):
            shape = _shape_of(members[0])
            if shape is None:
                continue
            if shapes is not None:
                if len(shapes) >= SHAPES_KEPT:
                    shapes.clear()
                shapes[length] = shape
        block = max(1, SHAPE_BLOCK_BYTES // length)
        for begin in range(0, len(indices), block):
            rows = np.frombuffer(b"".join(members[begin:begin + block]), dtype=np.uint8).reshape(-1, length)
            if not matches(shape, rows):
                continue
            seq = integers(shape, rows, "seq")
            stamp = integers(shape, rows, "stamp_ns") if "stamp_ns" in shape.fields else np.zeros(len(rows), int)
            if seq is None or stamp is None or (seq < 0).any() or (stamp < 0).any():
                continue
            where = indices[begin:begin + block]
            shaped[where], seqs[where], stamps[where] = True, seq, stamp
    return shaped, seqs, stamps


def _checked_clocks(decoded: Any) -> tuple[int, int]:
    """``seq`` and ``stamp_ns`` (0 when absent) of a decoded payload; raises unless it is a map with both
    non-negative integers."""
    seq = decoded["seq"]
    stamp = decoded.get("stamp_ns", 0)
    if not (isinstance(seq, int) and isinstance(stamp, int) and seq >= 0 and stamp >= 0):
        raise ValueError("seq and stamp_ns must be non-negative integers")
    return seq, stamp


class Recorder:
    """The recorder process: SUB to the publishers, REP for control, at most one open file at a time."""

    def __init__(self, endpoints: Endpoints, *, robot: Path | None = None, rig: Path | None = None,
                 max_backlog_bytes: int = int(DEFAULT_MAX_BACKLOG_MIB * MIB), hwm: int | None = None,
                 flush_interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
                 progress: bool = True, context: zmq.Context | None = None, run_dir: Path = DEFAULT_RUN_DIR,
                 poses_rate_hz: float = DEFAULT_POSES_RATE_HZ):
        self.endpoints = endpoints
        self.poses_rate_hz = poses_rate_hz
        self.run_dir = run_dir
        self.robot, self.rig = robot, rig
        self.flush_interval_s = flush_interval_s
        self.progress = progress
        self.context = context or zmq.Context.instance()
        self.max_backlog_bytes = max_backlog_bytes
        publishers = publisher_endpoints(endpoints)
        self.hwm, self.queue_max_bytes = split_backlog(max_backlog_bytes, len(publishers), hwm)
        self.sub = open_socket(self.context, zmq.SUB, publishers[0], bind=False, curve=endpoints.curve,
                               what="sim.pub", options={zmq.RCVHWM: self.hwm, zmq.SNDHWM: self.hwm,
                                                        zmq.LINGER: 0, zmq.SUBSCRIBE: b""})
        for endpoint in publishers[1:]:
            self.sub.connect(endpoint)      # a pipe of its own, with the same high-water mark
        try:
            self.control = open_socket(self.context, zmq.REP, endpoints.recorder_control, bind=True,
                                       curve=endpoints.curve, what="recorder.control", options={zmq.LINGER: 0})
        except ConfigError:
            self.sub.close()
            raise
        self.session: Session | None = None
        # received, not yet written, in receipt order: topic, payload (copied out of ZeroMQ's buffer), receipt time
        # (ns)
        self.pending_topics: list[bytes] = []
        self.pending_payloads: list[bytes] = []
        self.pending_log_times: list[int] = []
        self.pending_lengths: list[int] = []    # bytes of the first queued payloads (each measured once)
        self._pending_bytes = 0                 # their sum
        self.peak_held_bytes = 0                # the most held at once (:meth:`held_bytes`), since started
        self.shapes: dict[int, Structure] = {}       # the shapes of recent payloads (:func:`_clocks_by_shape`)
        self.stop_requested = False
        self.dropped_while_idle = 0
        self._last_progress = 0.0
        self._last_sync = 0.0           # monotonic s of the open file's last flush

    # --- recording sessions -------------------------------------------------------------------------------
    def start(self, path: str | Path | None = None, overwrite: bool = False, robot: Path | None = None,
              rig: Path | None = None) -> Session:
        if self.session is not None:
            raise RecordingError(f"already recording to {self.session.writer.path}")
        self.write_pending()        # what came while idle is not part of this recording
        path = Path(path) if path else default_run_path(self.run_dir)
        robot = robot or self.robot
        rig = rig or self.rig
        # a two-device rig (a Dynamixel bus and its sensor microcontroller) is two files: both are kept
        try:
            sensor_rig = sensor_rig_path(rig) if rig else None
        except ConfigError as exc:
            raise RecordingError(str(exc)) from None
        configs = {name: (p, p.read_text()) for name, p in (("robot_config", robot), ("rig_config", rig),
                                                            ("sensor_rig_config", sensor_rig)) if p}
        writer = RecordingWriter(path, flush_interval_s=self.flush_interval_s, overwrite=overwrite)
        started = time.time_ns()
        writer.add_metadata("software", software_versions())
        writer.add_metadata("recording", {
            "started_ns": str(started), "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "sim_pub": self.endpoints.sim_pub, "driver_pub": self.endpoints.driver_pub,
            "flush_interval_s": str(self.flush_interval_s), "log_time": "recorder wall clock at receipt, ns",
            "publish_time": "payload stamp_ns (publisher wall clock), ns"})
        for name, (config_path, text) in configs.items():
            writer.add_metadata(name, {"path": str(config_path), "text": text})
        session = Session(writer=writer, started_ns=started)
        if robot:
            self._attach_poses(session, robot)
        writer.add_metadata("foxglove", {"poses": session.poses_note})
        writer.sync()
        self._last_sync = time.monotonic()
        self.session = session
        return session

    def _attach_poses(self, session: Session, robot: Path) -> None:
        """Write the robot's poses as Foxglove messages (hil/foxglove) if its file builds a rigid tree; else record
        without them and say why (the note goes into the file's metadata and onto stderr)."""
        try:
            session.poses = pose_stream(load_toml(robot), robot, self.poses_rate_hz)
            session.poses_note = f"on: {robot}, at most {self.poses_rate_hz:g} per s (0: every state)"
        except ConfigError as exc:
            session.poses_note = f"off: {str(exc).splitlines()[0]}"
            print(f"mms record: no Foxglove poses: {session.poses_note}", file=sys.stderr, flush=True)

    def stop(self) -> dict[str, Any]:
        if self.session is None:
            raise RecordingError("not recording")
        self.write_pending()
        backlog = self.backlog()
        session, self.session = self.session, None
        summary = {**session.summary(), "backlog": backlog}
        session.writer.add_metadata("recorder_stats", {
            "stopped_ns": str(time.time_ns()), "messages": str(summary["messages"]),
            "bytes": str(summary["bytes"]), "malformed": str(summary["malformed"]),
            "foxglove": json.dumps(summary["foxglove"], sort_keys=True),
            "topics": json.dumps(summary["topics"], sort_keys=True),
            "backlog": json.dumps(backlog, sort_keys=True)})
        session.writer.close()
        if self.progress:
            self._draw_progress(session, final=True)
        return summary

    # --- the loop -----------------------------------------------------------------------------------------
    def receive_batch(self) -> bool:
        """Take the queued messages off the SUB socket with their receipt time, for at most one receive turn; True
        when the socket was drained. The messages are written by :meth:`write_pending`. Once the queue holds
        ``queue_max_bytes`` (:meth:`held_bytes`, looked at every RECEIVE_CLOCK_EVERY messages), what arrives is
        dropped and counted instead (:meth:`_drop_arriving`): the backlog of a recorder behind its stream stays in
        its own bounded queue, not in ZeroMQ's.

        Frame by frame as zmq.Frame objects rather than with ``recv_multipart`` (which asks the socket whether more
        frames follow, an option lookup per frame; a Frame knows it): half the CPU per message. The payload is
        queued as a copy (bytes), not as its Frame: a Frame keeps ZeroMQ's receive buffer it points into, 8 KiB and
        its reference counters, until it is written, and in the live loop (messages arriving one at a time) each
        message has a buffer of its own: 10.1-10.5 kB of resident set for a 2.1 kB state, 8.3 kB for a 116 B
        message, instead of the payload and 115-178 B as a copy (HELD_MESSAGE_BYTES). A message's frames arrive
        together (ZeroMQ delivers a multipart message whole), so after a topic frame with more to come the payload
        frame is there; a message of one frame, or of more than two, is queued as MALFORMED_FRAMES."""
        recv, clock = self.sub.recv, time.time_ns
        topics, payloads, log_times = self.pending_topics, self.pending_payloads, self.pending_log_times
        turn_end = time.monotonic() + RECEIVE_TURN_S
        if self.held_bytes() >= self.queue_max_bytes:
            return self._drop_arriving(turn_end)
        while True:
            for _ in range(RECEIVE_CLOCK_EVERY):
                try:
                    topic = recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    self.held_bytes()           # the peak, as drained
                    return True
                log_times.append(clock())
                payload = recv(zmq.NOBLOCK, copy=False) if topic.more else None
                if payload is not None and not payload.more:
                    topics.append(topic.bytes)
                    payloads.append(payload.bytes)
                    continue
                while payload is not None and payload.more:
                    payload = recv(zmq.NOBLOCK, copy=False)
                topics.append(MALFORMED_FRAMES[0])
                payloads.append(MALFORMED_FRAMES[1])
            if time.monotonic() > turn_end:
                return False
            if self.held_bytes() >= self.queue_max_bytes:
                return self._drop_arriving(turn_end)

    def _drop_arriving(self, turn_end: float) -> bool:
        """With the queue at its bound: take the messages off the socket and count them dropped per topic
        (DROP_BACKLOG_FULL; while idle, with the messages dropped while idle) until the socket is drained (True) or
        the receive turn ends (False). Taking them costs a fraction of writing them, and keeps the count exact,
        which ZeroMQ's queue at its high-water mark would not."""
        recv, counts, drained = self.sub.recv, {}, False
        while not drained and time.monotonic() <= turn_end:
            for _ in range(RECEIVE_CLOCK_EVERY):
                try:
                    frame = topic = recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    drained = True
                    break
                while frame.more:
                    frame = recv(zmq.NOBLOCK, copy=False)
                counts[topic.bytes] = counts.get(topic.bytes, 0) + 1
        session = self.session
        if session is None:
            self.dropped_while_idle += sum(counts.values())
        else:
            for name, count in counts.items():
                session.dropped[name] = session.dropped.get(name, 0) + count
        return drained

    def held_bytes(self) -> int:
        """What the queue holds, bytes: its payloads plus HELD_MESSAGE_BYTES per message (kept as the peak too)."""
        self._measure_pending()
        held = self._pending_bytes + HELD_MESSAGE_BYTES * len(self.pending_payloads)
        self.peak_held_bytes = max(self.peak_held_bytes, held)
        return held

    def batch_full(self) -> bool:
        """Whether the queue holds a write batch (WRITE_BATCH_BYTES of payloads or WRITE_BATCH_MESSAGES)."""
        if len(self.pending_payloads) >= WRITE_BATCH_MESSAGES:
            return True
        self._measure_pending()
        return self._pending_bytes >= WRITE_BATCH_BYTES

    def _measure_pending(self) -> None:
        """The lengths of the queued payloads not measured yet, into ``pending_lengths`` and their running sum (the
        batch's size; the writer's record lengths)."""
        lengths = self.pending_lengths
        new = list(map(len, self.pending_payloads[len(lengths):]))
        lengths += new
        self._pending_bytes += sum(new)

    def drain(self) -> None:
        """At a stop: receive and write what the peers published before it, so that it is in the file. A recorder
        behind a busy machine's real-time processes may hold seconds of messages, some still on their way through
        ZeroMQ's I/O thread; one receive turn used to take only the first of them, and the driver's last commands
        (the ramp to neutral) were lost. Messages are taken until the socket has been quiet for DRAIN_QUIET_S, or
        until each topic received in the last DRAIN_QUIET_S has a message stamped after the stop (its peer goes on
        publishing and cannot hold the stop), at most STOP_DRAIN_MAX_S."""
        session, stop_ns = self.session, time.time_ns()
        deadline = time.monotonic() + STOP_DRAIN_MAX_S
        arrived: dict[bytes, float] = {}            # topic -> when it last arrived (monotonic s)
        while time.monotonic() < deadline:
            drained = self.receive_batch()
            now = time.monotonic()
            arrived.update(dict.fromkeys(self.pending_topics, now))
            self.write_pending()
            if drained and not self.sub.poll(int(DRAIN_QUIET_S * 1000)):
                break
            recent = [topic for topic, at in arrived.items() if now - at <= DRAIN_QUIET_S]
            if session is not None and all(session.newest_stamp_ns.get(topic, 0) > stop_ns for topic in recent):
                break

    def _take_pending(self, one_batch: bool) -> tuple[list[bytes], list[bytes], list[int], list[int]]:
        """The first queued messages, taken out of the queue: (topics, payloads, receipt times, payload lengths);
        all of them, or with ``one_batch`` the first write batch (WRITE_BATCH_MESSAGES, or up to and with the one
        that makes WRITE_BATCH_BYTES of payloads)."""
        self._measure_pending()
        count = len(self.pending_topics)
        if one_batch and count:
            ends = np.cumsum(self.pending_lengths)
            count = min(count, WRITE_BATCH_MESSAGES, int(np.searchsorted(ends, WRITE_BATCH_BYTES)) + 1)
        queues = (self.pending_topics, self.pending_payloads, self.pending_log_times, self.pending_lengths)
        taken = tuple(queue[:count] for queue in queues)
        for queue in queues:
            del queue[:count]
        self._pending_bytes -= sum(taken[3])
        return taken

    def write_pending(self, one_batch: bool = False) -> int:
        """Validate, count and write (if recording) the messages received so far, in receipt order (with
        ``one_batch``, the first write batch of them only: a recorder behind its stream goes on receiving between
        batches); their number. A message that is not [ascii topic, msgpack map with non-negative integer seq (and
        stamp_ns)] is counted malformed and not written."""
        topics, payloads, log_times, measured = self._take_pending(one_batch)
        count, session = len(topics), self.session
        if session is None or count == 0:
            self.dropped_while_idle += count
            return count
        lengths = np.array(measured, dtype=np.int64)
        names, codes = _topic_codes(topics)
        valid, seqs, stamps = _clocks_by_shape(codes, payloads, self.shapes, lengths)
        for index in np.flatnonzero(~valid).tolist():
            try:
                seqs[index], stamps[index] = _seq_and_stamp(payloads[index])
            except Exception:  # anything undecodable is one malformed message, never a crash
                continue
            valid[index] = True
        for code, name in enumerate(names):
            if not name.isascii():
                valid[codes == code] = False
        kept = np.flatnonzero(valid)
        session.malformed += count - len(kept)
        if len(kept) < count:
            codes, seqs, stamps, lengths = codes[kept], seqs[kept], stamps[kept], lengths[kept]
            payloads = [payloads[i] for i in kept.tolist()]
            log_times = [log_times[i] for i in kept.tolist()]
        channels = np.zeros(len(names), dtype=np.uint16)
        for code in np.unique(codes).tolist():
            topic = names[code].decode("ascii")
            channels[code] = session.writer.channel_id(topic)
            mine = codes == code
            topic_stats = session.stats.get(topic)
            if topic_stats is None:
                topic_stats = session.stats[topic] = TopicStats()
            topic_stats.messages += int(np.count_nonzero(mine))
            topic_stats.bytes += int(lengths[mine].sum())
            session.seq.update_many(topic, seqs[mine])
            newest = int(stamps[mine].max())
            if newest > session.newest_stamp_ns.get(names[code], 0):
                session.newest_stamp_ns[names[code]] = newest
        self._write(session, codes, channels[codes], payloads, lengths, np.array(log_times, dtype=np.uint64), stamps,
                    seqs, names)
        return count

    @staticmethod
    def _write(session: Session, codes: np.ndarray, channels: np.ndarray, payloads: list[bytes], lengths: np.ndarray,
               log_times: np.ndarray, stamps: np.ndarray, seqs: np.ndarray, names: list[bytes]) -> None:
        """Write valid messages in receipt order, each state that is due for a Foxglove pose followed by its pose
        messages (hil/foxglove)."""
        writer, sequences, begin = session.writer, seqs & np.uint64(0xFFFFFFFF), 0
        state = TOPIC_SIM_STATE.encode()
        if session.poses is not None and state in names:
            for index in np.flatnonzero(codes == names.index(state)).tolist():
                stamp = int(stamps[index])
                if not session.poses.due(stamp):
                    continue
                end = index + 1
                writer.add_batch(channels[begin:end], payloads[begin:end], log_times[begin:end], stamps[begin:end],
                                 sequences[begin:end], lengths[begin:end])
                begin = end
                for message in session.poses.messages(msgpack.unpackb(payloads[index], raw=False,
                                                                      strict_map_key=False)):
                    writer.add_json(message.topic, message.schema_name, schema(message.schema_name), message.data,
                                    int(log_times[index]), message.stamp_ns)
        if begin < len(payloads):
            writer.add_batch(channels[begin:], payloads[begin:], log_times[begin:], stamps[begin:], sequences[begin:],
                             lengths[begin:])

    def handle_control(self) -> None:
        try:
            frames = self.control.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        try:
            reply = self._dispatch(parse_request(frames, COMMANDS))
        except ControlError as exc:
            reply = error_reply(str(exc))
        except (RecordingError, ConfigError, FileExistsError, OSError) as exc:
            reply = error_reply(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        self.control.send(encode_reply(reply))

    def _dispatch(self, request: dict[str, Any]) -> dict[str, Any]:
        cmd = request["cmd"]
        if cmd == "start":
            path = request.get("path")
            if path is not None and not isinstance(path, str):
                raise RecordingError('"path" must be a string')
            if request.get("overwrite"):
                raise RecordingError("overwriting is refused on request (only `mms record --overwrite --out` may)")
            path = path_in_run_dir(path, self.run_dir) if path is not None else None
            robot = resolve_config("robot", request["robot"]) if request.get("robot") else None
            rig = resolve_config("rig", request["rig"]) if request.get("rig") else None
            session = self.start(path, robot=robot, rig=rig)
            return {"ok": True, "recording": True, "path": str(session.writer.path)}
        if cmd == "stop":
            return {"ok": True, "recording": False, **self.stop()}
        if cmd == "status":
            if self.session is None:
                return {"ok": True, "recording": False}
            return {"ok": True, "recording": True, **self.session.summary(), "backlog": self.backlog()}
        return {"ok": True, "commands": COMMANDS}                      # help

    def run(self, duration_s: float | None = None) -> None:
        """Loop until a signal or ``duration_s`` after the recording started; the open file is finished."""
        freeze_startup_heap()       # the collector's passes over the queue's lists skip the imports
        poller = zmq.Poller()
        poller.register(self.sub, zmq.POLLIN)
        poller.register(self.control, zmq.POLLIN)
        timeout_ms = int(LOOP_TIMEOUT_S * 1000)
        try:
            while not self.stop_requested:
                events = dict(poller.poll(timeout_ms))
                if self.sub in events:
                    self.receive_batch()
                if self.pending_topics and (self.batch_full() or self._sync_due()):
                    self.write_pending(one_batch=True)
                if self.control in events:
                    self.handle_control()
                session = self.session
                if session is not None and session.writer.maybe_sync():
                    self._last_sync = time.monotonic()
                    if self.progress and time.monotonic() - self._last_progress > PROGRESS_INTERVAL_S:
                        self._draw_progress(session)
                    if duration_s is not None and time.time_ns() - session.started_ns >= duration_s * 1e9:
                        break
        finally:
            if self.session is not None:
                self.drain()
                self.stop()
            self.sub.close()
            self.control.close()

    def backlog(self) -> dict[str, Any]:
        """The queue of received messages not yet written: ``held_bytes`` and ``held_messages`` now, ``peak_bytes``
        since the recorder started, ``max_bytes`` (the bound of the whole backlog, ``--max-backlog``) and its shares:
        ``queue_max_bytes`` (this queue's) and ``hwm`` (each of the ``pipes`` receive pipes' high-water mark,
        messages), and ``dropped`` by reason in the open recording
        (``dropped_while_idle``: received with no recording open, never written). In the status while recording,
        and in the file's ``recorder_stats``."""
        session = self.session
        return {"held_bytes": self.held_bytes(), "held_messages": len(self.pending_topics),
                "peak_bytes": self.peak_held_bytes, "max_bytes": self.max_backlog_bytes,
                "queue_max_bytes": self.queue_max_bytes, "hwm": self.hwm,
                "pipes": len(publisher_endpoints(self.endpoints)),
                "dropped": {DROP_BACKLOG_FULL: sum(session.dropped.values())} if session is not None else {},
                "dropped_while_idle": self.dropped_while_idle}

    def _sync_due(self) -> bool:
        """True when the open file's next flush is due: what was received must be in it (the crash-loss bound)."""
        return self.session is not None and time.monotonic() - self._last_sync >= self.flush_interval_s

    def _draw_progress(self, session: Session, final: bool = False) -> None:
        self._last_progress = time.monotonic()
        summary = session.summary()
        parts = [f"{topic} {s['messages']} msg {s['bytes'] / 1e6:.2f} MB"
                 + (f" GAPS {s['gaps']}" if s["gaps"] else "") for topic, s in summary["topics"].items()]
        dropped = sum(session.dropped.values())
        line = (f"rec {summary['path']} {summary['elapsed_s']:.1f} s | " + " | ".join(parts or ["waiting"])
                + (f" | malformed {summary['malformed']}" if summary["malformed"] else "")
                + (f" | DROPPED {dropped} (backlog at {self.queue_max_bytes / MIB:.3g} of "
                   f"{self.max_backlog_bytes / MIB:g} MiB)" if dropped else ""))
        sys.stderr.write("\r" + line + "\x1b[K" + ("\n" if final else ""))
        sys.stderr.flush()


def _run_recover(args) -> int:
    source = Path(args.recover)
    destination = Path(args.out) if args.out else source.with_suffix(".recovered.mcap")
    try:
        report = recover(source, destination, overwrite=args.overwrite)
    except (RecordingError, OSError) as exc:
        print(f"mms record: error: {exc}", file=sys.stderr)
        return 2
    state = "complete (had a footer)" if report.had_footer else (
        f"truncated: kept {report.complete_bytes} of {report.source_bytes} bytes")
    topics = ", ".join(f"{t} {n}" for t, n in sorted(report.per_topic.items())) or "none"
    print(f"recovered {report.messages} messages ({topics}) from {source} [{state}] into {destination}")
    return 0


def run(args) -> int:
    if args.recover:
        return _run_recover(args)
    if args.flush_interval <= 0 or (args.hwm is not None and args.hwm <= 0):
        print("mms record: error: --flush-interval and --hwm must be positive", file=sys.stderr)
        return 2
    endpoints = load_endpoints(args.network)
    run_dir = args.run_dir or (Path(args.out).parent if args.out else DEFAULT_RUN_DIR)
    robot, rig = args.robot, args.rig
    if rig is not None:
        sensor_rig_path(rig)        # a bad rig file: one line now, not when the recording starts
    try:
        recorder = Recorder(endpoints, robot=robot, rig=rig, max_backlog_bytes=int(args.max_backlog * MIB),
                            hwm=args.hwm, flush_interval_s=args.flush_interval,
                            progress=not args.quiet, run_dir=run_dir, poses_rate_hz=args.poses_rate)
    except zmq.ZMQError as exc:
        print(f"mms record: error: control socket {endpoints.recorder_control}: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:       # --hwm too large for --max-backlog (split_backlog)
        print(f"mms record: error: {exc}", file=sys.stderr)
        return 2

    def request_stop(signum, frame):
        recorder.stop_requested = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    if args.autostart:
        try:
            recorder.start(args.out, overwrite=args.overwrite)
        except (RecordingError, FileExistsError, OSError) as exc:
            recorder.sub.close()
            recorder.control.close()
            print(f"mms record: error: {exc}", file=sys.stderr)
            return 2
    print(f"mms record: subscribed to {endpoints.sim_pub} and {endpoints.driver_pub}, control on "
          f"{endpoints.recorder_control}" + ("" if not args.autostart else f", writing {recorder.session.writer.path}"),
          file=sys.stderr, flush=True)
    recorder.run(duration_s=args.duration)
    return 0
