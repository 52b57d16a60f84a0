"""LearnRecorder pairs audio frames with the camera's mouth of the same instant, only while the camera is trusted."""
import numpy as np

from bridge.audio.learn_recorder import LearnRecorder
from bridge.audio.learn_store import LearnStore
from bridge.audio.visemes import MOUTH_ARKIT_INDICES
from bridge.frame import NUM_BLENDSHAPES, FaceFrame


def camera(t: float, jaw: float, confidence: float = 0.9, mouth_conf: float = 0.9, found: bool = True) -> FaceFrame:
    frame = FaceFrame(seq=int(t * 100), t_capture=1.7e9 + t, t_capture_mono=t, face_found=found,
                      confidence=confidence, region_confidence={"mouth": mouth_conf})
    frame.blendshapes = np.zeros(NUM_BLENDSHAPES, np.float32)
    frame.blendshapes[MOUTH_ARKIT_INDICES[0]] = jaw  # jawOpen
    return frame


def feed(rec: LearnRecorder, seconds: float, fps: float = 30.0, start: float = 0.0, **camera_kw) -> None:
    """Camera at `fps` with jawOpen = time, audio frames every 10 ms (pushed 10 at a time), interleaved."""
    t_cam, t_audio, frame_index = start, start, int(start * 100)
    end = start + seconds
    while t_cam < end or t_audio < end:
        if t_cam <= t_audio:
            rec.on_camera(camera(t_cam, jaw=t_cam % 1.0, **camera_kw))
            t_cam += 1 / fps
        else:
            times = t_audio + 0.01 * np.arange(10)
            rec.on_audio(np.full((10, 40), -5.0, np.float32), times, frame_index)
            frame_index += 10
            t_audio += 0.1


def test_trusted_speech_becomes_windows_with_interpolated_camera_labels(tmp_path):
    store = LearnStore(tmp_path / "learn")
    rec = LearnRecorder(store, window_frames=100, min_frames=50)
    feed(rec, 3.5)
    rec.close()
    windows = store.windows()
    assert [w.frames for w in windows[:3]] == [100, 100, 100]
    assert sum(w.frames for w in windows) >= 340  # the last part, long enough, is kept when recording stops
    w = windows[0]
    frame_times = (w.t_start - 1.7e9) + 0.01 * np.arange(100)
    assert np.allclose(w.mouth[:, 0], frame_times % 1.0, atol=0.04)  # jawOpen interpolated at each frame's instant
    assert w.source == "camera" and "tongueOut" not in w.channels


def test_nothing_is_kept_while_the_face_or_mouth_is_not_trusted(tmp_path):
    store = LearnStore(tmp_path / "learn")
    rec = LearnRecorder(store, window_frames=100, min_frames=50)
    feed(rec, 2.0, mouth_conf=0.3)
    feed(rec, 2.0, start=2.0, confidence=0.4)
    feed(rec, 2.0, start=4.0, found=False)
    rec.close()
    assert store.paths() == [] and rec.stats()["frames_kept"] == 0


def test_a_break_keeps_a_long_enough_partial_window_and_drops_a_short_one(tmp_path):
    store = LearnStore(tmp_path / "learn")
    rec = LearnRecorder(store, window_frames=300, min_frames=80)
    feed(rec, 1.0)  # 100 trusted frames, then the face is lost
    feed(rec, 0.5, start=1.0, found=False)
    feed(rec, 0.5, start=1.5)  # 50 trusted frames: too short when the recording closes
    rec.close()
    lengths = [w.frames for w in store.windows()]
    assert len(lengths) == 1 and 90 <= lengths[0] <= 100


def test_raw_audio_is_kept_only_when_asked(tmp_path):
    for keep in (False, True):
        store = LearnStore(tmp_path / f"learn-{keep}")
        rec = LearnRecorder(store, window_frames=100, min_frames=50, keep_audio=keep)
        t, index = 0.0, 0
        while t < 1.5:
            rec.on_camera(camera(t, 0.2))
            rec.on_audio(np.full((3, 40), -5.0, np.float32), t + 0.01 * np.arange(3), index,
                         pcm=np.full(480, 0.1, np.float32), first_sample=index * 160)
            t, index = t + 0.03, index + 3
        rec.close()
        windows = store.windows()
        assert windows and all((w.pcm is not None) == keep for w in windows)


def test_the_lipsync_stream_hands_every_log_mel_frame_to_its_listener_with_its_instant():
    from bridge.audio.lipsync import LipSyncStream
    from bridge.audio.sources import open_audio

    got = []
    stream = LipSyncStream(use_vad=False)
    stream.feature_listener = lambda mel, t, first, pcm, first_sample: got.append((mel.shape, t, first, len(pcm)))
    stream.start(open_audio("sample", realtime=False))
    stream._thread.join(60)
    assert stream.error is None and got
    frames = sum(shape[0] for shape, *_ in got)
    assert frames == stream.hops  # every frame the model stepped was offered, in order
    firsts = [first for _, _, first, _ in got]
    assert firsts == sorted(firsts)
    times = np.concatenate([t for _, t, _, _ in got if len(t)])
    assert np.allclose(np.diff(times), 0.01, atol=1e-6)


def test_audio_fusion_shows_the_recorder_the_cameras_own_mouth_before_fusing(tmp_path):
    from bridge.audio.lipsync import LipSyncStream
    from bridge.audio.run_audio import AudioFusion

    recorder = LearnRecorder(LearnStore(tmp_path / "learn"))
    fusion = AudioFusion(lambda frame: camera(0.0, jaw=0.42), LipSyncStream(use_vad=False), learn=recorder)
    fusion(None)
    assert [float(mouth[0]) for _, mouth, _ in recorder._camera] == [np.float32(0.42)]


def test_learning_needs_speech_and_a_camera():
    import pytest

    from bridge.errors import FaceBridgeError
    from bridge.runtime.session import BridgeSession, RunConfig

    with pytest.raises(FaceBridgeError, match="--learn.*needs both"):
        BridgeSession(RunConfig(learn=""))
    with pytest.raises(FaceBridgeError, match="--learn"):
        BridgeSession(RunConfig(learn="", audio="sample", audio_only=True))
