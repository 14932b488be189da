"""Replay of a recording (MCAP, as written by ``mms record``) through the dashboard's live path.

A recording has one channel per topic, named as the topic, ``message_encoding = "msgpack"``, and each
message's bytes are the payload exactly as it went over the wire. :class:`ReplayWorker` reads it on its own
QThread, paces the messages by their ``log_time`` (the recorder's receive time) at ``speed`` times real
time, feeds the same :class:`gui.signals.MessageProcessor` as the live subscriber and emits the same batches.
Latency shown in replay is therefore the recorded one (``log_time - stamp_ns``).

The messages before the first data message (``sim/state``, ``hw/telemetry``, ``hw/command``: a recorder started
before the simulator had compiled records only status for its first seconds) are fed at once, so the replay opens
on data. :meth:`ReplayWorker.seek` jumps to any time of the recording (also after its end): the worker says
``reset`` (the window empties its buffers), feeds everything before that time at once and plays on from there.
The rig stored in the recording gives the measured channels' maps (:func:`firmware_interface.rigs.host.channel_maps`) unless the
caller passes its own.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import msgpack
from mcap.reader import make_reader
from PyQt5.QtCore import QObject, pyqtSignal, pyqtSlot

from gui.signals import MessageProcessor
from sim.messages import TOPIC_HW_COMMAND, TOPIC_HW_TELEMETRY, TOPIC_SIM_STATE, TOPICS

#: the replay thread never sleeps longer than this at once, so that stop() and seek() are honoured promptly, s
REPLAY_MAX_SLEEP_S = 0.02
#: topics whose messages are plotted (the others only update the status lines)
DATA_TOPICS = (TOPIC_SIM_STATE, TOPIC_HW_TELEMETRY, TOPIC_HW_COMMAND)


def recording_metadata(path: Path) -> dict[str, dict[str, str]]:
    """The metadata records of the recording at ``path`` by name (the configs used: ``robot_config``, ...)."""
    with path.open("rb") as handle:
        return {record.name: dict(record.metadata) for record in make_reader(handle).iter_metadata()}


def recording_maps(path: Path) -> list:
    """The channel maps of the rig stored in the recording at ``path`` (empty when it stores none)."""
    from firmware_interface.rigs.host import channel_maps, stored_rig

    rig = stored_rig(recording_metadata(path))
    return [] if rig is None else channel_maps(rig)


class ReplayWorker(QObject):
    batch_ready = pyqtSignal(object)   # gui.signals.Batch
    failed = pyqtSignal(str)
    progress = pyqtSignal(float, float)   # replayed, total duration of the recording, s
    reset = pyqtSignal()                  # a seek: what was emitted before is to be forgotten
    ended = pyqtSignal()                  # the last message was played (the worker waits for a seek or stop)
    finished = pyqtSignal()

    def __init__(self, path: str | Path, speed: float = 1.0, batch_period_s: float = 0.02, maps: list | None = None):
        super().__init__()
        self.path = Path(path)
        self.speed = speed
        self.batch_period_s = batch_period_s
        self.maps = maps
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seek_to: float | None = None

    def stop(self) -> None:
        self._stop.set()

    def seek(self, offset_s: float) -> None:
        """Thread-safe: play from ``offset_s`` seconds after the recording's first message."""
        with self._lock:
            self._seek_to = max(0.0, float(offset_s))

    def _take_seek(self) -> float | None:
        with self._lock:
            target, self._seek_to = self._seek_to, None
        return target

    @pyqtSlot()
    def run(self) -> None:
        try:
            maps = self.maps if self.maps is not None else recording_maps(self.path)
            target = None
            while not self._stop.is_set():
                target = self._play(maps, target)
                if target is None:
                    break
                self.reset.emit()
        except Exception as exc:  # the mcap reader raises many types on a corrupt or truncated file
            self.failed.emit(f"cannot replay {self.path}: {type(exc).__name__}: {exc}")
        finally:
            self.finished.emit()

    def _play(self, maps: list, target_s: float | None) -> float | None:
        """Feed the recording from its start, at once up to ``target_s`` (None: up to the first data message), paced
        from there; then wait. Returns the time of a seek asked meanwhile, or None when stopped."""
        processor = MessageProcessor(origin_ns=None, maps=maps)
        with self.path.open("rb") as handle:
            reader = make_reader(handle)
            summary = reader.get_summary()
            stats = summary.statistics if summary is not None else None
            first_ns = stats.message_start_time if stats else None
            total_s = ((stats.message_end_time - stats.message_start_time) * 1e-9) if stats else float("nan")
            paced_from_ns = None
            start_wall = next_batch = time.monotonic()
            for _schema, channel, message in reader.iter_messages(log_time_order=True):
                if self._stop.is_set():
                    return None
                seek = self._take_seek()
                if seek is not None:
                    return seek
                first_ns = message.log_time if first_ns is None else first_ns
                offset_s = (message.log_time - first_ns) * 1e-9
                reached = channel.topic in DATA_TOPICS if target_s is None else offset_s >= target_s
                if paced_from_ns is None and reached:
                    paced_from_ns, start_wall = message.log_time, time.monotonic()
                    self._emit(processor, offset_s, total_s)
                if paced_from_ns is not None:
                    due = start_wall + (message.log_time - paced_from_ns) * 1e-9 / self.speed
                    while not self._stop.is_set():
                        now = time.monotonic()
                        if now >= next_batch:
                            self._emit(processor, offset_s, total_s)
                            next_batch = now + self.batch_period_s
                        if now >= due:
                            break
                        with self._lock:
                            if self._seek_to is not None:
                                break
                        time.sleep(min(due - now, next_batch - now, REPLAY_MAX_SLEEP_S))
                self._feed(processor, channel.topic, message)
            self._emit(processor, total_s, total_s)
        self.ended.emit()
        while not self._stop.is_set():
            seek = self._take_seek()
            if seek is not None:
                return seek
            time.sleep(REPLAY_MAX_SLEEP_S)
        return None

    @staticmethod
    def _feed(processor: MessageProcessor, topic: str, message) -> None:
        if topic not in TOPICS:
            return
        try:
            payload = msgpack.unpackb(message.data, raw=False, strict_map_key=False)
        except Exception:  # msgpack raises several unrelated types on bad bytes
            processor.malformed += 1
            return
        if not isinstance(payload, dict):
            processor.malformed += 1
            return
        processor.feed(topic, payload, receive_ns=message.log_time)

    def _emit(self, processor: MessageProcessor, replayed_s: float, total_s: float) -> None:
        self.batch_ready.emit(processor.take_batch())
        self.progress.emit(replayed_s, total_s)
