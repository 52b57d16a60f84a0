"""SinkWorker: every sink sends from its own thread through its own bounded queue, so a slow sink (a recorder
on a slow disk, a receiver's full buffer) never stalls another.

When a sink's queue is full the oldest frame waiting for that sink is dropped and counted for that sink alone:
live outputs keep two frames (the newest pose is what matters), the recorder keeps `Sink.queue_depth` frames
(seconds of a slow disk) and is told how many it missed (`Sink.skipped`), so a take says exactly what it lacks.
A lossless run waits for room instead: a file read as fast as it goes waits for every sink; a file being recorded
at its own rate waits only for the sinks that keep every frame (the recorder), so a slow disk never holds back
the live outputs while the recorder's queue has room. One item is one frame: a FaceFrame, or the list of a
frame's faces (`--faces N`), of which a sink with `only_subject` set sends only that subject's. A sink that
raises is counted and warned about; its worker goes on with the next frame. The worker never closes its sink: the
sink's owner (the session) does, once `finish` returned True (a sink is never closed under its own send).
"""
from __future__ import annotations

import logging
import time

from bridge.frame import FaceFrame
from bridge.runtime.ended_thread import EndedThread
from bridge.runtime.queues import Closed, LatestQueue
from bridge.sinks.base import Sink

log = logging.getLogger(__name__)


class SinkWorker:
    """One sink, its thread and its queue. `put` never waits unless the run is lossless."""

    def __init__(self, sink: Sink, lossless: bool = False, label: str | None = None) -> None:
        self.sink = sink
        self.label = label or sink.name
        self.lossless = lossless
        self.queue: LatestQueue[FaceFrame] = LatestQueue(max(1, int(getattr(sink, "queue_depth", 2))))
        self._thread = EndedThread(self._run, f"facebridge-sink-{self.label}")
        self._last_warning = -1e9

    @property
    def dropped(self) -> int:
        """Frames this sink never got because it was busy with older ones."""
        return self.queue.dropped

    @property
    def pending(self) -> int:
        return len(self.queue)

    def start(self) -> None:
        self._thread.start()

    def put(self, frame: FaceFrame) -> None:
        before = self.queue.dropped
        self.queue.put(frame, block=self.lossless)
        if self.queue.dropped != before:
            self.sink.skipped(self.queue.dropped - before)

    def _run(self) -> None:
        while True:
            try:
                frame = self.queue.get(timeout=0.5)
            except Closed:
                return
            if frame is None:
                continue
            for face in frame if isinstance(frame, list) else (frame,):
                self._send(face)

    def _send(self, frame: FaceFrame) -> None:
        only = self.sink.only_subject
        if only is not None and frame.subject != only:
            return
        try:
            self.sink.send(frame)
        except Exception as e:  # sinks count their own transient failures; this is a bug guard
            self.sink.errors += 1
            now = time.monotonic()
            if now - self._last_warning > 10.0:
                self._last_warning = now
                log.warning("%s failed on frame %d: %s", self.label, frame.seq, e)

    def finish(self, timeout: float) -> bool:
        """Let the sink send what is queued (at most `timeout` seconds); True when its thread is done."""
        self.queue.close()
        return not self._thread.running or self._thread.wait(timeout)  # never joined: ended_thread.py says why
