"""The bridge's threads: capture, inference (one thread per pipeline stage) and sending, joined by latest-wins
queues.

A slow stage never makes the camera lag: each queue holds at most two items and drops the oldest, so the
newest frame is always the next one processed; drops are counted and shown. A file read as fast as possible
blocks instead (back-pressure), so every frame is kept. One bad frame is counted and skipped; a sink that raises
is counted and the others still get the frame.
"""
from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from bridge.runtime.queues import Closed, LatestQueue
from bridge.runtime.stats import RunStats
from bridge.sinks.base import Sink
from bridge.sources.base import FrameSource, SourceMode

log = logging.getLogger(__name__)


class BridgeRunner:
    def __init__(self, source: FrameSource, process, sinks: list[Sink], max_frames: int | None = None,
                 status: bool = True, on_frame=None, stages: list | None = None, stats: RunStats | None = None) -> None:
        """`process(frame) -> FaceFrame` is the pipeline; `stages`, when given instead, splits it into steps that
        run in their own threads (each step's output is the next one's input, the last returns a FaceFrame), so
        on several cores frame N+1 is tracked while frame N is described. `on_frame(face_frame)` runs in the
        send thread. `stats` is the run's one RunStats (the session makes it early, so the monitor can serve it
        while models load); a new one by default."""
        self.source = source
        self.stages = list(stages) if stages else [process]
        self.sinks = sinks
        self.max_frames = max_frames
        self.show_status = status
        self.on_frame = on_frame
        self.stats = stats if stats is not None else RunStats()
        # A file read as fast as possible keeps every frame (back-pressure); live and paced sources drop the oldest.
        self.lossless = source.mode is SourceMode.FAST
        self._queues: list[LatestQueue] = [LatestQueue(2) for _ in range(len(self.stages) + 1)]
        self._frames, self._results = self._queues[0], self._queues[-1]
        self._stop = threading.Event()
        self.error: BaseException | None = None

    def stop(self) -> None:
        self._stop.set()

    def _dropped(self) -> int:
        return sum(q.dropped for q in self._queues)

    def _capture(self) -> None:
        try:
            while not self._stop.is_set():
                if self.max_frames is not None and self.stats.captured >= self.max_frames:
                    break
                frame = self.source.read()
                if frame is None:
                    break
                self.stats.frame_captured()
                self._frames.put(frame, block=self.lossless)
        except BaseException as e:  # a dead camera ends the run with its own message
            self.error = e
        finally:
            self._frames.close()

    def _stage(self, index: int) -> None:
        step, inbox, outbox = self.stages[index], self._queues[index], self._queues[index + 1]
        last = index == len(self.stages) - 1
        try:
            while True:
                try:
                    item = inbox.get(timeout=0.5)
                except Closed:
                    break
                if item is None:
                    continue
                try:
                    result = step(item)
                except Exception as e:  # one bad frame never takes the stream down
                    self.stats.frame_bad()
                    log.warning("a frame could not be processed (%s); skipped", e)
                    continue
                if last:
                    self.stats.frame_processed(result.face_found, result.latencies_ms, time.perf_counter())
                outbox.put(result, block=self.lossless)
        finally:
            self.stats.set_dropped("capture", sum(q.dropped for q in self._queues[:-1]))
            outbox.close()

    def _send(self) -> None:
        while True:
            try:
                result = self._results.get(timeout=0.5)
            except Closed:
                break
            if result is None:
                continue
            for sink in self.sinks:
                try:
                    sink.send(result)
                except Exception as e:  # sinks count their own transient failures; this is a bug guard
                    sink.errors += 1
                    log.warning("%s failed on frame %d: %s", sink.name, result.seq, e)
            now = time.perf_counter()
            self.stats.set_dropped("capture", sum(q.dropped for q in self._queues[:-1]))
            result.latencies_ms["capture_to_send"] = (now - result.t_capture_mono) * 1000.0
            self.stats.frame_sent(result.latencies_ms["capture_to_send"], now)
            if self.on_frame is not None:
                self.on_frame(result)
        self.stats.set_dropped("send", self._results.dropped)

    def run(self) -> RunStats:
        threads = [threading.Thread(target=self._capture, name="facebridge-capture", daemon=True)]
        threads += [threading.Thread(target=self._stage, args=(i,), name=f"facebridge-stage{i}", daemon=True)
                    for i in range(len(self.stages))]
        threads.append(threading.Thread(target=self._send, name="facebridge-send", daemon=True))
        for t in threads:
            t.start()
        tty = sys.stderr.isatty()
        last_print = 0.0
        # SIGTERM (a service manager, `kill`) ends the run like Ctrl-C: sinks close and recordings are flushed.
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda *_: self.stop())
        try:
            while any(t.is_alive() for t in threads):
                threads[-1].join(0.25)
                now = time.perf_counter()
                if self.show_status and (tty or now - last_print > 5.0):
                    print(("\r" if tty else "") + self.stats.status_line() + ("" if tty else "\n"),
                          end="", file=sys.stderr, flush=True)
                    last_print = now
        except KeyboardInterrupt:
            self.stop()
            for t in threads:
                t.join(2.0)
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self.stop()
            for sink in self.sinks:
                try:
                    sink.close()
                except Exception as e:
                    log.warning("%s did not close cleanly: %s", sink.name, e)
            self.source.close()
        if self.show_status:
            print(("\r" if tty else "") + self.stats.status_line(), file=sys.stderr, flush=True)
        if self.error is not None:
            raise self.error
        return self.stats
