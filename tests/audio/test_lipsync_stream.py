"""LipSyncStream on real audio files, source failures and stalls, and audio/video mouth fusion."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import soundfile as sf

from bridge.audio.fusion import AUDIO_SHARE_WHEN_VISIBLE, fuse_mouth
from bridge.audio.lipsync import MOUTH_MASK, LipSyncResult, LipSyncStream
from bridge.audio.sources import AudioChunk, AudioSource, FileSource
from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES, FaceFrame
from tests.helpers import espeak_or_skip

JAW = ARKIT_INDEX["jawOpen"]


@pytest.fixture(scope="module")
def speech_wav(tmp_path_factory):
    gen, espeak = espeak_or_skip()
    ex = gen.example(espeak, gen.UtteranceSpec("Hello there, how are you today?", "en-us", "f5", 170, 50, 50, 0),
                     rng=None, pad_s=(0.6, 0.6))
    path = tmp_path_factory.mktemp("audio") / "speech.wav"
    sf.write(path, ex["pcm"], 16000)
    return path, ex


def test_stream_over_a_file_follows_the_words(speech_wav):
    path, ex = speech_wav
    stream = LipSyncStream(history=10000)
    assert stream.latest() is None
    stream.start(FileSource(path, realtime=False))
    stream._thread.join(20)
    stream.stop()
    assert stream.error is None
    results = list(stream.history)
    assert len(results) == len(ex["mouth"]) - stream.model.lookahead  # every frame whose lookahead arrived
    jaw = np.array([r.blendshapes[JAW] for r in results])
    target = ex["mouth"][: len(jaw), 0]
    assert np.corrcoef(jaw, target)[0, 1] > 0.7
    first = results[0]
    assert first.blendshapes.shape == (NUM_BLENDSHAPES,) and first.visemes.shape == (15,)
    assert not first.blendshapes[~MOUTH_MASK].any()
    assert jaw[:40].max() < 0.05  # leading silence: closed mouth (VAD-gated)
    # stamps: consecutive results are 10 ms apart on both clocks, at the described instant
    assert np.allclose(np.diff([r.t_capture_mono for r in results[:50]]), 0.01, atol=1e-6)
    assert np.allclose(np.diff([r.t_capture for r in results[:50]]), 0.01, atol=1e-5)


def test_a_file_followed_in_step_gives_each_instant_the_result_the_thread_computed(speech_wav):
    """`--fast`: result_at(t) reads the file only as far as t needs and returns the first result at or after t,
    the same one the background thread publishes for that instant, however the two are scheduled."""
    path, _ = speech_wav
    threaded = LipSyncStream(history=10000).start(FileSource(path, realtime=False))
    threaded._thread.join(20)
    by_instant = {round(r.t_media, 4): r for r in threaded.history}
    stepped = LipSyncStream().follow(FileSource(path, realtime=False))
    assert stepped.in_step and stepped.running and stepped.latest() is None
    first, last = min(by_instant), max(by_instant)
    assert stepped.result_at(0.0).t_media == first  # the first instant with a result (half a window in)
    for t in np.arange(first, last, 1 / 60):
        result = stepped.result_at(t)
        assert 0 <= result.t_media - t < 0.01 + 1e-9
        same = by_instant[round(result.t_media, 4)]
        assert np.array_equal(result.blendshapes, same.blendshapes) and result.voice_activity == same.voice_activity
        assert stepped.latest().t_media - t < 0.02  # read no further than needed
    assert stepped.result_at(1.0).t_media == pytest.approx(1.0, abs=0.01)  # an earlier instant: still answered
    assert stepped.result_at(last + 5).t_media == last and not stepped.running and stepped.error is None


def test_results_are_never_published_before_their_lookahead_audio_arrived(speech_wav):
    """At real time, a result can only exist once the audio 52.5 ms past its instant has been 'captured'
    (speed itself is measured by `facebridge bench lipsync`, not here)."""
    path, _ = speech_wav
    stream = LipSyncStream(history=10000)
    stream.start(FileSource(path, realtime=True))
    stream._thread.join(20)
    stream.stop()
    latency = np.array([r.latency_ms for r in stream.history])
    assert len(latency) > 100
    assert latency.min() >= stream.model.manifest["lookahead_ms"] - 0.5


class _UnpluggedMic(AudioSource):
    """Real audio for a while, then the device disappears (what PortAudio reports on unplug)."""

    name = "unplugged"

    def __init__(self, pcm):
        self.pcm = pcm

    def __iter__(self):
        t0 = time.perf_counter()
        for i in range(0, 8000, 160):
            yield AudioChunk(self.pcm[i:i + 160], time.time(), t0 + i / 16000)
        raise OSError("Input overflowed / device unavailable")


class _StalledMic(AudioSource):
    """Delivers 0.2 s of audio, then nothing until closed (a hung driver)."""

    name = "stalled"

    def __init__(self, pcm):
        self.pcm, self.closed = pcm, threading.Event()

    def __iter__(self):
        t0 = time.perf_counter()
        for i in range(0, 3200, 160):
            yield AudioChunk(self.pcm[i:i + 160], time.time(), t0 + i / 16000)
        self.closed.wait(30)

    def close(self):
        self.closed.set()


def test_source_failure_never_stalls_the_caller(speech_wav):
    _, ex = speech_wav
    stream = LipSyncStream().start(_UnpluggedMic(ex["pcm"]))
    stream._thread.join(10)
    assert "device unavailable" in stream.error
    assert stream.latest() is not None  # last good result stays readable
    stream.stop()


def test_stalled_source_leaves_latest_non_blocking_and_fusion_ignores_stale(speech_wav):
    _, ex = speech_wav
    source = _StalledMic(ex["pcm"])
    stream = LipSyncStream().start(source)
    deadline = time.time() + 5
    while stream.latest() is None and time.time() < deadline:
        time.sleep(0.01)
    time.sleep(0.4)
    result = stream.latest()
    assert result is stream.latest() is not None
    assert stream.running and not source.closed.is_set()  # answered while the worker still waits in the source
    frame = FaceFrame(seq=1, t_capture=time.time(), t_capture_mono=time.perf_counter(), face_found=False)
    frame.blendshapes[JAW] = 0.33
    fuse_mouth(frame, result, mouth_visible=0.0)
    assert frame.blendshapes[JAW] == pytest.approx(0.33) and frame.visemes is None  # stale: ignored
    stream.stop()
    assert not stream.running


def _result(jaw: float, tongue: float, activity: float, mono: float) -> LipSyncResult:
    shapes = np.zeros(NUM_BLENDSHAPES, np.float32)
    shapes[JAW], shapes[ARKIT_INDEX["tongueOut"]] = jaw, tongue
    visemes = np.zeros(15, np.float32)
    visemes[10] = 1.0
    return LipSyncResult(visemes, shapes, MOUTH_MASK, activity, time.time(), mono, 60.0)


@pytest.mark.parametrize("face_found,confidence,visible,activity,expected_jaw", [
    (False, 0.0, 1.0, 1.0, 0.8),  # face lost: audio drives
    (True, 0.1, 1.0, 1.0, 0.8),  # low confidence: audio drives
    (True, 0.95, 0.0, 1.0, 0.8),  # face visible but mouth hidden (hand, mask): audio drives
    (True, 0.95, 1.0, 0.0, 0.2),  # visible and silent: camera wins
    (True, 0.95, 1.0, 1.0, 0.2 + AUDIO_SHARE_WHEN_VISIBLE * 0.6),  # visible and speaking: blend
])
def test_fusion_weighting(face_found, confidence, visible, activity, expected_jaw):
    now = time.perf_counter()
    frame = FaceFrame(seq=1, t_capture=time.time(), t_capture_mono=now, face_found=face_found,
                      confidence=confidence)
    frame.blendshapes[JAW] = 0.2
    frame.blendshapes[ARKIT_INDEX["eyeBlinkLeft"]] = 0.7
    fuse_mouth(frame, _result(0.8, 0.4, activity, now - 0.06), mouth_visible=visible)
    assert frame.blendshapes[JAW] == pytest.approx(expected_jaw, abs=1e-5)
    assert frame.blendshapes[ARKIT_INDEX["eyeBlinkLeft"]] == pytest.approx(0.7)  # not a mouth channel
    assert frame.blendshapes[ARKIT_INDEX["tongueOut"]] == pytest.approx(0.4)  # always from audio
    assert frame.visemes is not None and frame.visemes.argmax() == 10
    assert "lipsync" in frame.latencies_ms


def test_fusion_without_audio_leaves_frame_alone():
    frame = FaceFrame(seq=1, t_capture=time.time(), t_capture_mono=time.perf_counter(), face_found=True,
                      confidence=0.9)
    frame.blendshapes[JAW] = 0.25
    fuse_mouth(frame, None, mouth_visible=1.0)
    assert frame.blendshapes[JAW] == pytest.approx(0.25) and frame.visemes is None
