"""The load generator's schedule (`bench serve --phases`): when each stream's frames fall due. Independent cameras
run on their own clocks, so 1,000 streams at 30 fps bring about 30 frames a millisecond, not 1,000 at once every
33 ms; `aligned` keeps the all-at-once load of genlocked cameras."""
from __future__ import annotations

import numpy as np

from bridge.bench.serve import FrameSchedule, stream_phase


def _due_times(stream_ids, fps, phases, seconds):
    schedule, out = FrameSchedule(stream_ids, fps, phases, 0.0, seconds), []
    while (due := schedule.next_due()) is not None:
        (frame,) = schedule.take(due)
        out.append((due, *frame))
    return out


def test_spread_phases_bring_the_frames_evenly_over_each_period_for_every_client_process_share():
    fps = 30.0
    for ids in (range(1000), range(3, 1000, 8)):  # every stream, and one of 8 client processes' streams
        frames = _due_times(ids, fps, "spread", 1.0)
        assert len(frames) == 30 * len(ids)
        for s in ids:  # each stream's 30 frames in order, a frame period apart at its own phase
            mine = [(t, k) for t, sid, k, _ in frames if sid == s]
            assert [k for _, k in mine] == list(range(30)) and np.allclose(np.diff([t for t, _ in mine]), 1 / fps)
        times = np.array([t for t, *_ in frames])
        assert np.all(np.diff(times) >= 0) and not any(late for *_, late in frames)
        per_ms = np.bincount((times * 1000).astype(int), minlength=1000)
        expected = len(ids) * fps / 1000.0
        assert per_ms.max() <= 2 * expected + 1, (per_ms.max(), expected)  # no burst: at most twice the mean
        assert 0.0 <= min(stream_phase(s, fps, "spread") for s in ids) < max(stream_phase(s, fps, "spread")
                                                                             for s in ids) < 1 / fps


def test_aligned_phases_bring_every_streams_frame_at_once():
    schedule = FrameSchedule(range(8), 2.0, "aligned", 10.0, 12.0)
    assert schedule.next_due() == 10.0
    assert [(s, k) for s, k, _ in schedule.take(10.0)] == [(s, 0) for s in range(8)]
    assert schedule.next_due() == 10.5 and schedule.take(10.49) == []
    # at 11.6: frames 1 (10.5) and 2 (11.0) more than a period old, so late, and frame 3 (11.5)
    assert [(k, late) for _, k, late in schedule.take(11.6)] == [(1, True)] * 8 + [(2, True)] * 8 + [(3, False)] * 8
    assert schedule.next_due() is None  # 12.0 is the end
    assert FrameSchedule([], 2.0, "aligned", 0.0, 1.0).next_due() is None  # no streams: nothing ever due


def test_a_sender_a_whole_period_behind_gets_its_missed_frames_marked_late():
    schedule = FrameSchedule([0, 1], 10.0, "spread", 0.0, 1.0)
    assert stream_phase(0, 10.0, "spread") == 0.0 and 0.06 < stream_phase(1, 10.0, "spread") < 0.07
    # at 0.25 s: stream 0's frames at 0, 0.1, 0.2 and stream 1's at 0.062, 0.162 are due; those before 0.15 are late
    assert schedule.take(0.25) == [(0, 0, True), (1, 0, True), (0, 1, True), (1, 1, False), (0, 2, False)]
    assert 0.26 < schedule.next_due() < 0.27
