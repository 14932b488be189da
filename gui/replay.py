"""Replay of a recording (MCAP, as written by ``mms record``) through the dashboard's live path.

A recording has one channel per topic, named as the topic, ``message_encoding = "msgpack"``, and each
message's bytes are the payload exactly as it went over the wire. :class:`ReplayWorker` reads it on its own
QThread, paces the messages by their ``log_time`` (the recorder's receive time) at ``speed`` times real
time, feeds the same :class:`gui.signals.MessageProcessor` as the live subscriber and emits the same batches.
Latency shown in replay is therefore the recorded one (``log_time - stamp_ns``).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

import msgpack
from mcap.reader import make_reader
from PyQt5.QtCore import QObject, pyqtSignal, pyqtSlot

from gui.signals import MessageProcessor
from sim.messages import TOPICS

#: the replay thread never sleeps longer than this at once, so that stop() is honoured promptly, s
REPLAY_MAX_SLEEP_S = 0.02


class ReplayWorker(QObject):
    batch_ready = pyqtSignal(object)   # gui.signals.Batch
    failed = pyqtSignal(str)
    progress = pyqtSignal(float, float)   # replayed, total duration of the recording, s
    finished = pyqtSignal()

    def __init__(self, path: str | Path, speed: float = 1.0, batch_period_s: float = 0.02):
        super().__init__()
        self.path = Path(path)
        self.speed = speed
        self.batch_period_s = batch_period_s
        self._stop = threading.Event()

    def stop(self) -> None:
        self._stop.set()

    @pyqtSlot()
    def run(self) -> None:
        processor = MessageProcessor(origin_ns=None)
        try:
            with self.path.open("rb") as handle:
                reader = make_reader(handle)
                summary = reader.get_summary()
                stats = summary.statistics if summary is not None else None
                total_s = ((stats.message_end_time - stats.message_start_time) * 1e-9) if stats else float("nan")
                start_log_ns = None
                start_wall = time.monotonic()
                next_batch = start_wall + self.batch_period_s
                for _schema, channel, message in reader.iter_messages(log_time_order=True):
                    if self._stop.is_set():
                        break
                    if start_log_ns is None:
                        start_log_ns = message.log_time
                    due = start_wall + (message.log_time - start_log_ns) * 1e-9 / self.speed
                    while not self._stop.is_set():
                        now = time.monotonic()
                        if now >= next_batch:
                            self._emit(processor, (message.log_time - start_log_ns) * 1e-9, total_s)
                            next_batch = now + self.batch_period_s
                        if now >= due:
                            break
                        time.sleep(min(due - now, next_batch - now, REPLAY_MAX_SLEEP_S))
                    if channel.topic not in TOPICS:
                        continue
                    try:
                        payload = msgpack.unpackb(message.data, raw=False, strict_map_key=False)
                    except Exception:  # msgpack raises several unrelated types on bad bytes
                        processor.malformed += 1
                        continue
                    if not isinstance(payload, dict):
                        processor.malformed += 1
                        continue
                    processor.feed(channel.topic, payload, receive_ns=message.log_time)
                self._emit(processor, total_s, total_s)
        except Exception as exc:  # the mcap reader raises many types on a corrupt or truncated file
            self.failed.emit(f"cannot replay {self.path}: {type(exc).__name__}: {exc}")
        finally:
            self.finished.emit()

    def _emit(self, processor: MessageProcessor, replayed_s: float, total_s: float) -> None:
        self.batch_ready.emit(processor.take_batch())
        self.progress.emit(replayed_s, total_s)
