"""BridgeRunner's threads: a busy stage drops the oldest frame of a live source and counts it, a file read as fast
as possible keeps every frame, a sink that raises costs only its own send, and SIGTERM ends a run cleanly."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np

from bridge.frame import FaceFrame, Frame
from bridge.runtime.runner import BridgeRunner
from bridge.sinks.base import Sink
from bridge.sources.base import FrameSource, SourceMode
from tests.helpers import ROOT, subprocess_env


class CountingSource(FrameSource):
    """`count` tiny frames; live (a camera's pace, nothing waits for the pipeline) or a file read fast."""

    def __init__(self, count: int, mode: SourceMode, interval_s: float = 0.0) -> None:
        super().__init__()
        self.count, self.interval_s = count, interval_s
        self.live = mode is SourceMode.LIVE
        self.realtime = mode is not SourceMode.FAST
        self.closed = False

    def read(self) -> Frame | None:
        if self._seq >= self.count:
            return None
        time.sleep(self.interval_s)
        return self._stamp(np.zeros((2, 2, 3), np.uint8))

    def close(self) -> None:
        self.closed = True


def describe(frame: Frame) -> FaceFrame:
    return FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                     face_found=True, frame_rate=frame.fps)


class ListSink(Sink):
    name = "list"
    queue_depth = 1000  # room for every frame: these tests count what the runner drops, not what a sink thread
    # starved of CPU (other jobs on the machine) would skip on its own queue

    def __init__(self) -> None:
        super().__init__()
        self.seqs: list[int] = []
        self.closed = False

    def send(self, frame: FaceFrame) -> None:
        self.seqs.append(frame.seq)
        self.sent += 1

    def close(self) -> None:
        self.closed = True


class RaisingSink(ListSink):
    name = "raising"

    def send(self, frame: FaceFrame) -> None:
        if frame.seq % 2:
            raise RuntimeError("a bug in this sink")
        super().send(frame)


def test_a_busy_stage_drops_the_oldest_frames_of_a_live_source_and_counts_them():
    release = threading.Event()

    def stuck_until_released(frame: Frame) -> FaceFrame:
        release.wait(5)  # the stage is busy while the camera delivers every other frame
        return describe(frame)

    source, sink = CountingSource(40, SourceMode.LIVE), ListSink()
    runner = BridgeRunner(source, [stuck_until_released], [sink], status=False)
    done = threading.Thread(target=runner.run)
    done.start()
    while runner.stats.captured < 40:  # capture never waits for the pipeline
        time.sleep(0.01)
    release.set()
    done.join(10)
    snap = runner.stats.snapshot()
    assert snap.captured == 40 and snap.dropped["capture"] > 0
    assert snap.sent + snap.dropped_total == 40
    assert sink.seqs == sorted(sink.seqs) and sink.seqs[-1] == 39  # in order, and the newest frame always arrives


def test_a_file_read_fast_keeps_every_frame_through_a_slow_stage():
    def slow(frame: Frame) -> FaceFrame:
        time.sleep(0.002)
        return describe(frame)

    source, sink = CountingSource(60, SourceMode.FAST), ListSink()
    stats = BridgeRunner(source, [lambda f: f, slow], [sink], status=False).run()
    assert sink.seqs == list(range(60)) and stats.snapshot().dropped_total == 0


def test_after_frame_runs_in_the_last_steps_thread_once_each_result_is_handed_on_and_may_fail():
    """The pipeline's deferred work (run_deferred) runs after each frame's step, in the thread that describes the
    frames (no lock needed against the describe step), once a frame; one that raises costs nothing: the run goes
    on, every frame is sent."""
    order, threads = [], set()

    def last(frame: Frame) -> FaceFrame:
        threads.add(threading.current_thread().name)
        order.append(("describe", frame.seq))
        return describe(frame)

    def after_frame() -> None:
        threads.add(threading.current_thread().name)
        order.append(("after", order[-1][1]))
        if order[-1][1] == 2:
            raise RuntimeError("a model that failed after its frame")

    sink = ListSink()
    runner = BridgeRunner(CountingSource(12, SourceMode.FAST), [lambda f: f, last], [sink], status=False,
                          after_frame=after_frame)
    stats = runner.run().snapshot()
    assert sink.seqs == list(range(12)) and stats.bad_frames == 0
    assert order == [(k, s) for s in range(12) for k in ("describe", "after")]
    assert len(threads) == 1


def test_a_sink_that_raises_costs_only_its_own_sends_and_a_bad_frame_is_skipped():
    def fails_on_seven(frame: Frame) -> FaceFrame:
        if frame.seq == 7:
            raise ValueError("a bad frame")
        return describe(frame)

    good, bad = ListSink(), RaisingSink()
    source = CountingSource(20, SourceMode.FAST)
    runner = BridgeRunner(source, [fails_on_seven], [bad, good], status=False)
    stats = runner.run().snapshot()
    assert good.seqs == [s for s in range(20) if s != 7]
    assert bad.errors == len([s for s in good.seqs if s % 2])
    assert stats.bad_frames == 1 and stats.sent == 19


def test_the_runner_closes_only_what_it_opened():
    """Its threads, queues and sink workers are the runner's; the source and the sinks belong to whoever opened
    them (the session), which closes them after the run, all but what a thread left behind still uses."""
    source, sink = CountingSource(5, SourceMode.FAST), ListSink()
    runner = BridgeRunner(source, [describe], [sink], status=False)
    runner.run()
    assert sink.seqs == list(range(5)) and not sink.closed and not source.closed
    assert runner.left_behind() == []


def test_ctrl_c_while_the_send_thread_still_works_waits_for_it_and_every_frame_counted_reaches_the_sinks():
    """Ctrl-C lands in the main thread while it waits on the threads, and the send thread is still handing on a
    frame: the run waits for it. (A join interrupted there marked it ended on CPython 3.11; the run closed the sinks
    and the send thread then counted one more frame that no sink got: a take one frame short of "N frames sent".)"""
    sink = ListSink()

    def on_frame(face: FaceFrame) -> None:  # in the send thread, after the frame was handed on and counted
        if face.seq == 3:
            os.kill(os.getpid(), signal.SIGINT)  # raised in the main thread, in its wait on the threads
            time.sleep(0.5)  # capture and the stage stop meanwhile; this thread has a frame still queued for it

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as on a terminal
    try:
        runner = BridgeRunner(CountingSource(1000, SourceMode.LIVE, 0.01), [describe], [sink], status=False,
                              on_frame=on_frame)
        stats = runner.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    time.sleep(1.0)  # a send thread still running would have counted its last frames by now
    assert runner.interrupted and stats.sent >= 4
    assert len(sink.seqs) == runner.stats.sent == stats.sent, (sink.seqs, runner.stats.sent, stats.sent)


def test_sigterm_ends_a_run_like_ctrl_c_and_the_take_is_finalised(tmp_path):
    take = tmp_path / "take"
    script = f"""
import sys, time
sys.path.insert(0, {str(ROOT)!r})
from tests.runtime.test_runner import CountingSource, describe
from bridge.runtime.runner import BridgeRunner
from bridge.sinks.recorder import TakeRecorder
from bridge.sources.base import SourceMode
recorder = TakeRecorder({str(take)!r})
runner = BridgeRunner(CountingSource(10**6, SourceMode.LIVE, 0.005), [describe], [recorder], status=False)
print("running", flush=True)
stats = runner.run()
recorder.close()  # as the session does after the run
print("stopped", stats.sent, flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=subprocess_env())
    assert proc.stdout.readline().strip() == "running"
    deadline = time.monotonic() + 30
    while not _recorded(take) and time.monotonic() < deadline:  # the first frame was recorded
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.startswith("stopped")
    import json

    meta = json.loads((take / "take.json").read_text())
    lines = (take / "frames.jsonl").read_text().splitlines()
    assert meta["complete"] is True and meta["frames"] == len(lines) == int(out.split()[1])


def _recorded(take) -> bool:
    """Whether the take holds a frame (its take.json exists from the start)."""
    try:
        return (take / "frames.jsonl").stat().st_size > 0
    except OSError:
        return False


class BlockingSource(CountingSource):
    """`count` frames, then a read that blocks for good: it opens a FIFO nobody writes to (a stalled share)."""

    def __init__(self, count: int, fifo: str) -> None:
        super().__init__(count, SourceMode.LIVE, 0.005)
        self.fifo = fifo

    def read(self) -> Frame | None:
        if self._seq >= self.count:
            open(self.fifo + ".reached", "w").close()
            with open(self.fifo, "rb") as f:  # blocks in open(2) until a writer appears: never
                f.read()
        return super().read()


def test_sigterm_stops_a_run_whose_source_read_is_blocked_and_finalises_the_take(tmp_path):
    import json
    import os

    take, fifo = tmp_path / "take", tmp_path / "stalled.png"
    os.mkfifo(fifo)
    script = f"""
import sys
sys.path.insert(0, {str(ROOT)!r})
from tests.runtime.test_runner import BlockingSource, describe
from bridge.runtime.runner import BridgeRunner
from bridge.sinks.recorder import TakeRecorder
source, recorder = BlockingSource(30, {str(fifo)!r}), TakeRecorder({str(take)!r})
runner = BridgeRunner(source, [describe], [recorder], status=False)
print("running", flush=True)
stats = runner.run()
assert runner.left_behind() == [source]  # its read is still blocked: not to be closed under it
recorder.close()  # as the session does after the run
print("stopped", stats.sent, flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env())
    assert proc.stdout.readline().strip() == "running"
    lines = take / "frames.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the capture thread reached the FIFO and sits in open(2)
        if (tmp_path / "stalled.png.reached").exists() and _recorded(take):
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)  # bounded: it no longer waits for the blocked read
    assert proc.returncode == 0 and out.startswith("stopped"), err
    assert "did not return a frame within" in err and "Traceback" not in err
    meta = json.loads((take / "take.json").read_text())
    recorded = lines.read_text().splitlines()
    assert meta["complete"] is True and meta["frames"] == len(recorded) == int(out.split()[1]) > 0
def test_max_frames_counts_frames_sent_not_frames_dropped():
    """A live source whose stage is busy drops frames; --max-frames N still sends N."""
    release = threading.Event()

    def slow_until_released(frame: Frame) -> FaceFrame:
        release.wait(5)
        return describe(frame)

    source, sink = CountingSource(10**6, SourceMode.LIVE, 0.001), ListSink()
    runner = BridgeRunner(source, [slow_until_released], [sink], max_frames=15, status=False)
    done = threading.Thread(target=runner.run)
    done.start()
    while runner.stats.captured < 40:  # the stage holds one frame, its queue two: the rest are dropped
        time.sleep(0.01)
    release.set()
    done.join(20)
    snap = runner.stats.snapshot()
    assert len(sink.seqs) == snap.sent == 15 and snap.dropped["capture"] >= 20
    assert sink.seqs == sorted(sink.seqs)


def test_lossless_keeps_every_frame_of_a_paced_source_and_stops_at_max_frames():
    """A file being recorded runs paced but lossless: a slow stage makes the file wait instead of dropping."""
    def slow(frame: Frame) -> FaceFrame:
        time.sleep(0.003)
        return describe(frame)

    source, sink = CountingSource(100, SourceMode.PACED), ListSink()
    assert source.mode is SourceMode.PACED
    stats = BridgeRunner(source, [slow], [sink], status=False, lossless=True, max_frames=40).run()
    assert sink.seqs == list(range(40)) and stats.snapshot().dropped_total == 0 and stats.captured == 40


def test_frames_a_source_skipped_are_counted_as_dropped_by_the_source():
    class SkippingSource(CountingSource):
        def read(self):
            frame = super().read()
            if frame is not None and frame.seq % 5 == 4:
                self.skipped += 1  # e.g. an unreadable image in a folder
            return frame

    stats = BridgeRunner(SkippingSource(20, SourceMode.FAST), [describe], [ListSink()], status=False).run()
    assert stats.snapshot().dropped["source"] == 4


def test_the_caller_shares_its_stats_with_the_runner():
    from bridge.stats import RunStats

    shared = RunStats()
    runner = BridgeRunner(CountingSource(5, SourceMode.FAST), [describe], [ListSink()], status=False, stats=shared)
    assert runner.run() is shared and shared.sent == 5
