"""RunStats: the one statistics object: cumulative histograms for the metrics, the sinks' counters, the output
guard's and the swaps' counts, all read through one snapshot; every degradation the status line and the summary
report (lip-sync outcomes by kind)."""
from __future__ import annotations

import time

from bridge.runtime.swap import SwapEvent
from bridge.sinks.base import Sink
from bridge.stats import BUCKETS_MS, CAPTURE_TO_SEND, RunStats


class CountingSink(Sink):
    name = "counting"
    destination = "nowhere"

    def send(self, frame) -> None:
        self.sent += 1


def test_histograms_are_cumulative_with_a_last_infinite_bucket():
    stats = RunStats()
    now = time.perf_counter()
    for ms in (0.1, 4.0, 4.0, 9000.0):
        stats.frame_processed(True, {"landmarks": ms}, now)
    stats.frame_sent(33.0, now)
    counts, total = stats.histograms()["landmarks"]
    assert len(counts) == len(BUCKETS_MS) + 1 and counts[-1] == 4
    assert counts[0] == 1 and counts[BUCKETS_MS.index(5.0)] == 3 and counts[-2] == 3
    assert total == 9008.1
    assert stats.histograms()[CAPTURE_TO_SEND][0][-1] == 1


def test_a_snapshot_carries_the_sinks_the_guard_the_swaps_and_readiness():
    stats, sink = RunStats(), CountingSink()
    sink.sent, sink.errors = 7, 2
    stats.attach_sinks([sink])
    now = time.perf_counter()
    stats.frame_processed(False, {}, now)
    stats.frame_processed(True, {}, now)
    stats.frame_guarded("nonfinite", "iris", "frame 3: non-finite gaze")
    stats.session_recreated("iris")
    stats.swap_event(SwapEvent("iris_landmark", "r3-abc", 3, True, "", 0.0))
    stats.swap_event(SwapEvent("emotion", "r4-def", 4, False, "outputs differ from the reference", 0.0))
    stats.set_release("lipsync", 7)
    stats.set_update_status("installed")
    snap = stats.snapshot()
    assert snap.sinks == {"counting": {"destination": "nowhere", "sent": 7, "errors": 2}}
    assert snap.face_lost_ratio == 0.5 and snap.guarded == {"nonfinite/iris": 1} and snap.guarded_total == 1
    assert snap.recreated == {"iris": 1} and snap.engine_swaps == {"iris_landmark": 1}
    assert snap.engine_builds == {"iris_landmark": 1} and snap.swaps_refused == {"emotion": 1}
    assert snap.releases == {"lipsync": 7} and snap.update_status == "installed"
    assert not snap.models_loaded and snap.since_last_sent_s is None
    stats.set_models_loaded()
    stats.frame_sent(20.0, time.perf_counter())
    snap = stats.snapshot()
    assert snap.models_loaded and 0 <= snap.since_last_sent_s < 5
    assert "guarded 1" in stats.status_line() and "release lipsync r7" in stats.status_line()


def test_lip_sync_outcomes_are_counted_and_frames_after_the_audio_are_not_misses():
    stats = RunStats()
    for outcome in ["fused"] * 6 + ["late"] * 2 + ["none"] + ["ended"] * 5:
        stats.lipsync_outcome(outcome)
    snap = stats.snapshot()
    assert snap.lipsync == {"fused": 6, "late": 2, "none": 1, "ended": 5}
    assert snap.lipsync_frames == 9 and abs(snap.fused_ratio - 6 / 9) < 1e-9
    assert "lip-sync  67%" in stats.status_line()


def test_a_run_without_audio_shows_no_lip_sync_in_its_status_line():
    stats = RunStats()
    snap = stats.snapshot()
    assert snap.lipsync == {} and snap.fused_ratio == 0.0 and "lip-sync" not in stats.status_line()
