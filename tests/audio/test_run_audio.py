"""Lip-sync meets each frame at its own instant: `at(t)`, the outcomes fusion reports, an audio file followed in
step with a video file in lossless runs, the audio-only clock covering its whole file, and a file reader that
fell behind catching up in one chunk. Real audio files, the real lip-sync model; no timing assertions (only
bounds that hold at any speed)."""
from __future__ import annotations

import time

import numpy as np
import pytest
import soundfile as sf

from bridge.audio.fusion import STALE_S, fuse_mouth
from bridge.audio.lipsync import LipSyncStream
from bridge.audio.run_audio import AudioFrameClock, AudioFusion, LipSync
from bridge.audio.sources import FileSource
from bridge.frame import FaceFrame, Frame
from bridge.pipeline import Tracked
from bridge.stats import RunStats


def _wav(tmp_path, seconds: float):
    t = np.arange(int(seconds * 16000)) / 16000
    pcm = (0.3 * np.sin(2 * np.pi * 220 * t) * (np.sin(2 * np.pi * 2 * t) > 0)).astype(np.float32)
    path = tmp_path / f"tone{seconds:g}.wav"
    sf.write(path, pcm, 16000)
    return path


def _frame(seq: int, mono: float, t_media: float = 0.0) -> Frame:
    return Frame(image=np.zeros((2, 2, 3), np.uint8), seq=seq, t_capture=time.time(), t_capture_mono=mono,
                 t_media=t_media, fps=30.0)


def _describe(tracked) -> FaceFrame:
    frame = tracked.frame if isinstance(tracked, Tracked) else tracked
    return FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                     face_found=False)


def test_at_answers_with_the_result_nearest_an_instant(tmp_path):
    stream = LipSyncStream().start(FileSource(_wav(tmp_path, 1.5), realtime=False))
    stream._thread.join(30)
    start = stream.t_start_mono
    for media in (0.2, 0.7, 1.3):
        assert abs(stream.at(start + media).t_capture_mono - (start + media)) <= 0.005 + 1e-9
    assert stream.at(start - 5).t_capture_mono == min(r.t_capture_mono for r in stream._recent)
    assert stream.ended_before(start + 1.6) and not stream.ended_before(start + 0.5)


def test_fusion_says_whether_a_frame_got_its_mouth(tmp_path):
    stream = LipSyncStream().start(FileSource(_wav(tmp_path, 0.5), realtime=False))
    stream._thread.join(30)
    result = stream.at(stream.t_start_mono + 0.2)
    frame = FaceFrame(seq=0, t_capture=0.0, t_capture_mono=result.t_capture_mono + 0.01)
    assert fuse_mouth(frame, None) == "none" and frame.visemes is None
    assert fuse_mouth(frame, result, at=result.t_capture_mono + STALE_S + 0.01) == "late" and frame.visemes is None
    assert fuse_mouth(frame, result) == "fused" and frame.visemes is not None


def test_in_step_fusion_gives_every_frame_inside_the_audio_its_mouth(tmp_path):
    """A video file and an audio file in a lossless run (--fast, or --record): the frame's media time picks its
    mouth, whatever the frames' capture times (here deliberately nonsense) and however slow the machine; frames
    after the audio count as "ended", never "late"."""
    stats = RunStats()
    lipsync = LipSync(FileSource(_wav(tmp_path, 2.0), realtime=False), LipSyncStream(), in_step=True).start()
    fusion = AudioFusion(_describe, lipsync.stream, stats)
    try:
        for seq in range(75):  # 2.5 s of video at 30 fps: the last 0.5 s are after the audio
            tracked = Tracked(frame=_frame(seq, mono=1e6 + seq, t_media=seq / 30), found=None, tracked_count=0,
                              stage_ms={})
            out = fusion(tracked)
            if seq / 30 < 1.9:  # inside the audio (its last 52.5 ms wait for lookahead that never comes)
                assert out.visemes is not None, seq
            elif seq / 30 > 2.0 + STALE_S:  # past the audio and the stale margin
                assert out.visemes is None, seq
    finally:
        lipsync.stop()
    snap = stats.snapshot()
    assert lipsync.stream.in_step and lipsync.stream._thread is None
    assert 57 <= snap.lipsync["fused"] <= 68 and snap.lipsync.get("late", 0) == 0 and snap.fused_ratio == 1.0
    assert snap.lipsync["fused"] + snap.lipsync["ended"] == 75


def test_the_audio_only_clock_covers_the_whole_file(tmp_path):
    path = _wav(tmp_path, 1.0)
    source = FileSource(path, realtime=True)
    clock = AudioFrameClock(LipSync(source, LipSyncStream()))
    try:
        frames = []
        while (frame := clock.read()) is not None:
            frames.append(frame)
    finally:
        clock.lipsync.stop()
    assert not clock.live and clock.skipped == 0
    assert 0.9 * 60 <= len(frames) <= 60  # every 1/60 s the lip-sync described (the last 52.5 ms need lookahead)
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert np.allclose(np.diff([f.t_capture_mono for f in frames]), 1 / 60)


def test_a_file_reader_that_fell_behind_gets_what_is_due_in_one_chunk(tmp_path):
    chunks = iter(FileSource(_wav(tmp_path, 2.0), realtime=True))
    assert len(next(chunks).pcm) == 160  # on time: 10 ms
    time.sleep(0.3)
    assert len(next(chunks).pcm) >= int(0.29 * 16000)  # at least the 300 ms that passed, at once


def test_lipsync_is_opened_first_and_played_later(tmp_path):
    lipsync = LipSync(FileSource(_wav(tmp_path, 0.6), realtime=False), LipSyncStream())
    assert not lipsync.stream.started and lipsync.duration_s == pytest.approx(0.6) and not lipsync.live
    lipsync.start().stream._thread.join(30)
    assert lipsync.stream.latest() is not None
    lipsync.stop()
