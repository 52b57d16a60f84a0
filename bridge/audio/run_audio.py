"""What `facebridge run --audio ...` adds to the video runner.

* `--audio SRC` with a camera: `AudioFusion` wraps the face pipeline and blends the speech mouth into every
  frame (bridge.audio.fusion); the lip-sync stream runs on its own thread and is only polled.
* `--audio-only`: no camera. `AudioFrameClock` stands in for the camera, ticking at 60 Hz until the audio
  ends, and `AudioOnlyPipeline` turns each tick into a neutral face whose mouth the audio drives.
* `--fast` with an audio file (and a video file, or --audio-only): the file is followed in step with the frames
  on their media time (LipSyncStream.result_at) instead of played at real time on a thread, so every frame gets
  the mouth of its own instant, losslessly, however busy the machine.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from bridge.audio.fusion import fuse_mouth
from bridge.audio.lipsync import LipSyncStream
from bridge.audio.sources import FileSource, open_audio
from bridge.errors import FaceBridgeError
from bridge.frame import FaceFrame, Frame, versions_with
from bridge.sources.base import FrameSource

AUDIO_ONLY_FPS = 60.0


def start_lipsync(spec: str, backend: str = "onnxruntime", realtime: bool = True, adapter=None,
                  loop: bool = False, in_step: bool = False) -> LipSyncStream:
    """Open the audio source and start lip-sync on it (raises SourceError / ModelError with the fix).
    The default backend is ONNX Runtime on one CPU thread: a hop costs about 0.2 ms there, less than a GPU
    launch and copy would. in_step: a file is read as the frames' media time asks (a microphone stays live)."""
    source = open_audio(spec, realtime=realtime and not in_step, loop=loop)
    try:
        stream = LipSyncStream(backend=backend, adapter=adapter)
        return stream.follow(source) if in_step and isinstance(source, FileSource) else stream.start(source)
    except BaseException:
        source.close()
        raise


class AudioFusion:
    """`process(frame) -> FaceFrame` (or `describe(tracked)`) of the face pipeline, with the audio mouth fused in.
    A `learn` recorder (facebridge run --learn) sees the camera's own mouth first, before fusion changes it."""

    def __init__(self, process, stream: LipSyncStream, learn=None):
        self._process, self.stream, self.learn = process, stream, learn

    def __call__(self, item) -> FaceFrame:  # a Frame (one stage) or the tracking stage's Tracked (two)
        out = self._process(item)
        if self.learn is not None:
            self.learn.on_camera(out)
        # the lip-sync model in use is named on every frame, fused or not (a late result is not used), so the
        # stream's layout does not flap when audio falls behind
        out.model_versions = versions_with(out.model_versions, "lipsync", self.stream.model_version)
        result, age = _result_for(self.stream, getattr(item, "frame", item))
        fuse_mouth(out, result, mouth_visible=float(out.region_confidence.get("mouth", 1.0)), age_s=age)
        return out


def _result_for(stream: LipSyncStream, frame: Frame):
    """(result, its distance in seconds from the frame's instant): in step by media time, else the newest result
    (age from the capture clocks, fuse_mouth's default)."""
    if not stream.in_step:
        return stream.latest(), None
    result = stream.result_at(frame.t_media)
    return result, None if result is None else abs(frame.t_media - result.t_media)


class AudioFrameClock(FrameSource):
    """A 'camera' for audio-only runs: a tiny blank frame every 1/60 s until the audio stream ends."""

    name = "audio-only"
    fps = AUDIO_ONLY_FPS
    live = True

    def __init__(self, stream: LipSyncStream, fps: float = AUDIO_ONLY_FPS):
        super().__init__()
        self.stream, self.fps = stream, fps
        self.live = not stream.in_step  # in step: a file's ticks, all kept (the runner applies back-pressure)
        self.realtime = self.live
        self.name = f"audio-only ({stream._source.name if stream._source else 'audio'})"
        self._image = np.zeros((2, 2, 3), np.uint8)
        self._next = time.perf_counter()
        self._closed = threading.Event()

    def read(self) -> Frame | None:
        frame = None
        if not self._closed.is_set() and self.stream.in_step:
            frame = self._tick_in_step()
        elif not self._closed.is_set() and self.stream.running:
            frame = self._tick()
        if frame is None and self.stream.error:
            raise FaceBridgeError(f"audio input failed ({self.stream.error})",
                                  "check the microphone or file given to --audio")
        return frame

    def _tick(self) -> Frame:
        self._next += 1.0 / self.fps
        wait = self._next - time.perf_counter()
        if wait > 0:
            self._closed.wait(wait)
        else:
            self._next = time.perf_counter()  # fell behind: do not burst
        return self._stamp(self._image)

    def _tick_in_step(self) -> Frame | None:
        t_media = self._seq / self.fps
        result = self.stream.result_at(t_media)
        if result is None or t_media - result.t_media > 1.0 / self.fps:  # the file has ended
            return None
        frame = self._stamp(self._image)
        frame.t_media, frame.t_capture = t_media, result.t_capture + t_media - result.t_media
        return frame

    def close(self) -> None:
        self._closed.set()


class AudioOnlyPipeline:
    """Neutral face, mouth from audio. The frame is stamped with the instant the mouth shape describes."""

    profile = None

    def __init__(self, stream: LipSyncStream, subject: str = "FaceBridge"):
        self.stream, self.subject = stream, subject

    @property
    def model_versions(self) -> dict[str, str]:
        return versions_with({}, "lipsync", self.stream.model_version)

    def process(self, frame: Frame) -> FaceFrame:
        result, age = _result_for(self.stream, frame)
        out = FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                        subject=self.subject, face_found=False, frame_rate=frame.fps,
                        model_versions=self.model_versions)
        fuse_mouth(out, result, mouth_visible=0.0, age_s=age)  # a stale result (audio dropout): neutral pose
        if out.visemes is not None and age is None:
            out.t_capture, out.t_capture_mono = result.t_capture, result.t_capture_mono
        return out
