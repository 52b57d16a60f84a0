"""The bridge's threads: capture, inference (one thread per pipeline stage) and sending, joined by latest-wins
queues.

A slow stage never makes the camera lag: each queue holds at most two items and drops the oldest, so the
newest frame is always the next one processed; drops are counted by reason and shown. A lossless run (a file
read as fast as possible, or a file being recorded) blocks instead (back-pressure), so every frame is kept.
`max_frames` counts frames sent, never frames dropped. One bad frame is counted and skipped. The send thread
hands each frame to every sink's own worker (bridge/runtime/sink_worker.py), so a slow or failing sink costs
only its own frames, counted per sink.

Stopping is bounded: after Ctrl-C or SIGTERM the threads get STOP_TIMEOUT_S to finish; a source whose read is
blocked (a FIFO, a stalled network share, a hung camera driver) is left behind with one line saying so, and the
frames already captured still reach the sinks. The runner closes only what it opened (its threads, queues and sink
workers): the source and sinks belong to whoever opened them (the session), which closes them after `run`, all but
those a thread left behind still uses (`left_behind()`), so a take is finalised even then.
"""
from __future__ import annotations

import logging
import signal
import sys
import threading
import time

from bridge.console import was_interrupted
from bridge.errors import RunEnded
from bridge.runtime.ended_thread import EndedThread
from bridge.runtime.queues import Closed, LatestQueue
from bridge.runtime.sink_worker import SinkWorker
from bridge.sinks.base import Sink
from bridge.sources.base import FrameSource, SourceMode
from bridge.stats import RunStats

log = logging.getLogger(__name__)

STOP_TIMEOUT_S = 3.0  # after a stop request, how long a thread may take to notice before it is left behind
DRAIN_TIMEOUT_S = 10.0  # how long the sinks may take to send what is queued for them when the run ends


class BridgeRunner:
    def __init__(self, source: FrameSource, stages: list, sinks: list[Sink], max_frames: int | None = None,
                 status: bool = True, on_frame=None, stats: RunStats | None = None,
                 lossless: bool | None = None, after_frame=None) -> None:
        """`stages` are the pipeline's steps, each in its own thread: the first takes a Frame, each step's output is
        the next one's input, the last returns a FaceFrame (or a list of FaceFrames, one per face); with two, on
        several cores frame N+1 is tracked while frame N is described. `on_frame(face_frame)` runs in the send
        thread (with the first face). `stats` is the run's one
        RunStats (the session makes it early, so the monitor can serve it while models load); a new one by
        default. `lossless` keeps every frame with back-pressure (None: only for a source in SourceMode.FAST).
        `after_frame()` runs in the last step's thread right after each result is handed on: work a frame leaves for
        the time before the next one (the pipeline's run_deferred); if it raises, the next step meets the error."""
        self.source = source
        self.stages = list(stages)
        self.sinks = sinks
        self.max_frames = max_frames
        self.show_status = status
        self.on_frame = on_frame
        self.after_frame = after_frame
        self.stats = stats if stats is not None else RunStats()
        # A file read as fast as possible keeps every frame (back-pressure); live and paced sources drop the oldest,
        # unless the caller asks for lossless (a file being recorded).
        self.lossless = source.mode is SourceMode.FAST if lossless is None else lossless
        self._queues: list[LatestQueue] = [LatestQueue(2) for _ in range(len(self.stages) + 1)]
        self._frames, self._results = self._queues[0], self._queues[-1]
        self._stop = threading.Event()
        self._stop_requested_at: float | None = None
        self.error: BaseException | None = None
        self.interrupted = False  # ended by Ctrl-C
        # a file read as fast as it goes waits for every sink; a file recorded at its rate only for the recorder
        fast = source.mode is SourceMode.FAST
        self.workers = [SinkWorker(sink, self.lossless and (fast or sink.keeps_every_frame), label)
                        for sink, label in zip(sinks, sink_labels(sinks))]
        self.abandoned: list[str] = []  # threads that did not stop in time (their names)
        self._busy: list[Sink] = []  # sinks whose worker was still sending when the run ended

    def stop(self) -> None:
        if self._stop_requested_at is None:
            self._stop_requested_at = time.perf_counter()
        self._stop.set()

    @property
    def stopping(self) -> bool:
        """True once a stop was asked for or the source ended."""
        return self._stop.is_set()

    def sink_dropped(self) -> dict[str, int]:
        """Per sink: frames it never got because it was slower than the stream."""
        return {w.label: w.dropped for w in self.workers}

    def _dropped(self) -> int:
        return sum(q.dropped for q in self._queues)

    def _capture(self) -> None:
        try:
            while not self._stop.is_set():
                # lossless: every frame read is sent, so read no more than asked; else read on until the send
                # thread has sent max_frames (dropped frames do not count)
                if self.lossless and self.max_frames is not None and self.stats.captured >= self.max_frames:
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
                except RunEnded as e:  # the stream itself cannot go on: end the run with its one line
                    self.error = e
                    self.stop()
                    break
                except Exception as e:  # one bad frame never takes the stream down
                    self.stats.frame_bad()
                    log.warning("a frame could not be processed (%s); skipped", e)
                    continue
                if last:
                    faces = faces_of(result)
                    self.stats.frame_processed(any(f.face_found for f in faces), faces[0].latencies_ms,
                                               time.perf_counter())
                outbox.put(result, block=self.lossless)
                if last and self.after_frame is not None:
                    try:
                        self.after_frame()
                    except Exception as e:  # noqa: BLE001 - left pending: the next frame's step meets it, guarded
                        log.debug("deferred work failed (%s); the next frame runs it", e)
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
            if self.max_frames is not None and self.stats.sent >= self.max_frames:
                self._stop.set()  # enough sent: the frames still in flight are let through unsent
                continue
            # stamped before the hand-off: once a sink's thread holds the frame, its dict is that thread's to read
            # (a key added later raced the recorder's serialisation; a take sometimes lacked it)
            now = time.perf_counter()
            faces = faces_of(result)
            for face in faces:
                face.latencies_ms["capture_to_send"] = (now - face.t_capture_mono) * 1000.0
            for worker in self.workers:  # each sink sends from its own thread: none waits for another
                worker.put(result)
            self.stats.set_dropped("capture", sum(q.dropped for q in self._queues[:-1]))
            self.stats.set_dropped("source", self.source.skipped)
            self.stats.frame_sent(faces[0].latencies_ms["capture_to_send"], now)
            self.stats.set_sink_dropped(self.sink_dropped())
            if self.on_frame is not None:
                self.on_frame(faces[0])
            if self.max_frames is not None and self.stats.sent >= self.max_frames:
                self._stop.set()
        self.stats.set_dropped("send", self._results.dropped)
        self.stats.set_dropped("source", self.source.skipped)

    def run(self) -> RunStats:
        threads = [EndedThread(self._capture, "facebridge-capture")]
        threads += [EndedThread(self._stage, f"facebridge-stage{i}", (i,)) for i in range(len(self.stages))]
        threads.append(EndedThread(self._send, "facebridge-send"))
        for w in self.workers:
            w.start()
        for t in threads:
            t.start()
        # SIGTERM (a service manager, `kill`) ends the run like Ctrl-C: sinks close and recordings are flushed.
        previous = None
        if threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGTERM, lambda *_: self.stop())
        try:
            try:
                self._watch(threads)
            except KeyboardInterrupt:
                self.interrupted = True  # Ctrl-C: the run ends like --max-frames, and the command exits 130
                self.stop()
                self._watch(threads)  # bounded now: STOP_TIMEOUT_S, then blocked threads are left behind
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            self.stop()
            self._shutdown(threads)
        if self.show_status:
            print(("\r" if sys.stderr.isatty() else "") + self.stats.status_line(), file=sys.stderr, flush=True)
        if self.error is not None:
            raise self.error
        return self.stats

    def _watch(self, threads: list[EndedThread]) -> None:
        """Wait for the threads, printing the status line; after a stop request, wait at most STOP_TIMEOUT_S.
        Their ends are waited on, never joined: Ctrl-C lands here (ended_thread.py says why that matters)."""
        tty = sys.stderr.isatty()
        last_print = 0.0
        while running := [t for t in threads if t.running and t.name not in self.abandoned]:
            running[-1].wait(0.25)  # the send thread while it runs: it ends last
            if was_interrupted() and not self.interrupted:  # a Ctrl-C that start-up code swallowed still stops
                raise KeyboardInterrupt
            now = time.perf_counter()
            if self.show_status and (tty or now - last_print > 5.0):
                print(("\r" if tty else "") + self.stats.status_line() + ("" if tty else "\n"),
                      end="", file=sys.stderr, flush=True)
                last_print = now
            if self._stop_requested_at is not None and now - self._stop_requested_at > STOP_TIMEOUT_S:
                self._leave_behind(threads)

    def _leave_behind(self, threads: list[EndedThread]) -> None:
        """Threads still running long after the stop request are blocked (a read that never returns): close the
        queues so the others drain and finish, and say which one was left."""
        stuck = [t.name for t in threads if t.running and t.name not in self.abandoned]
        if not stuck:
            return
        for q in self._queues:
            q.close()
        if "facebridge-capture" in stuck and "facebridge-capture" not in self.abandoned:
            print(f"facebridge: the source ({self.source.name}) did not return a frame within "
                  f"{STOP_TIMEOUT_S:.0f} s of the stop request (a blocked camera, pipe or network share); "
                  "stopping without it, everything captured so far is kept", file=sys.stderr, flush=True)
        if self._stop_requested_at is not None and time.perf_counter() - self._stop_requested_at > 2 * STOP_TIMEOUT_S:
            self.abandoned.extend(n for n in stuck if n not in self.abandoned)  # a stage stuck in inference too
        elif "facebridge-capture" in stuck:
            self.abandoned.append("facebridge-capture")

    def _shutdown(self, threads: list[EndedThread]) -> None:
        """Let every sink send what it has queued (its owner closes it then: a take is finalised)."""
        deadline = time.perf_counter() + DRAIN_TIMEOUT_S
        for worker in self.workers:
            if not worker.finish(max(0.1, deadline - time.perf_counter())):
                self._busy.append(worker.sink)
                print(f"facebridge: {worker.label} did not finish within {DRAIN_TIMEOUT_S:.0f} s; "
                      f"{worker.pending} frames queued for it were not sent", file=sys.stderr, flush=True)
        self.stats.set_sink_dropped(self.sink_dropped())

    def left_behind(self) -> list:
        """The source and sinks that a thread of this run still uses after `run` (a read still blocked, a sink
        still sending): their owner must not close them under that thread (a driver could crash)."""
        source = [self.source] if "facebridge-capture" in self.abandoned else []
        return source + list(self._busy)


def faces_of(result) -> list:
    """The FaceFrames of one frame's result: a FaceFrame, or a list of them (one per face, `--faces N`, slot 0
    first), sent to the sinks together."""
    return result if isinstance(result, list) else [result]


def sink_labels(sinks: list[Sink]) -> list[str]:
    """Each sink's name; where several share one, with its address ('livelinkface 127.0.0.1:11111', several
    Live Link Face targets) or else numbered ('list#2')."""
    names = [s.name for s in sinks]
    labels = []
    for i, (sink, name) in enumerate(zip(sinks, names)):
        address = getattr(sink, "address", None)
        if names.count(name) == 1:
            labels.append(name)
        elif isinstance(address, tuple) and len(address) == 2:
            labels.append(f"{name} {address[0]}:{address[1]}")
        else:
            labels.append(f"{name}#{names[:i + 1].count(name)}")
    return labels
