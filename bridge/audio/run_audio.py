"""What `facebridge run --audio ...` adds to the video runner.

* `--audio SRC` with a camera: `AudioFusion` wraps the face pipeline and blends the speech mouth into every
  frame (bridge.audio.fusion), each with the lip-sync result for its own capture instant; the lip-sync stream
  runs on its own thread and is only polled.
* `--audio-only`: no camera. `AudioFrameClock` stands in for the camera with a frame every 1/60 s of audio, and
  `AudioOnlyPipeline` turns each into a neutral face whose mouth the audio drives.
* An audio file in a run that keeps every frame (`--fast`, or a video file being recorded; `--audio-only --fast`):
  the file is followed in step with the frames on their media time (LipSyncStream.result_at) instead of played
  at real time on a thread, so every frame gets the mouth of its own instant, losslessly, however busy the machine.

Both count every frame's outcome ("fused", "late", "none", and "ended": after the audio ended) in the run's
statistics when given them, so a run whose lip-sync fell behind says so in its status line and summary.
"""
from __future__ import annotations

import threading
import time

import numpy as np

from bridge.audio.fusion import fuse_mouth
from bridge.audio.lipsync import LipSyncStream
from bridge.audio.sources import AudioSource, FileSource, open_audio
from bridge.errors import FaceBridgeError
from bridge.frame import FaceFrame, Frame, versions_with
from bridge.sources.base import FrameSource, SourceMode

AUDIO_ONLY_FPS = 60.0


class LipSync:
    """An opened audio input and its lip-sync stream, not yet playing: the session opens it with the other
    inputs (so a bad file fails at once) and `start()`s it when frames start flowing, so a file's first seconds
    are not spent while the face models load."""

    def __init__(self, source: AudioSource, stream: LipSyncStream, in_step: bool = False) -> None:
        self.source, self.stream, self.in_step = source, stream, in_step

    @property
    def duration_s(self) -> float | None:
        """Length of a file input (None for a microphone)."""
        return self.source.duration if isinstance(self.source, FileSource) else None

    @property
    def live(self) -> bool:
        return not isinstance(self.source, FileSource)

    def start(self) -> LipSync:
        if not self.stream.started:
            if self.in_step:
                self.stream.follow(self.source)
            else:
                self.stream.start(self.source)
        return self

    def stop(self) -> None:
        self.stream.stop()
        self.source.close()


def start_lipsync(spec: str, backend: str = "onnxruntime", realtime: bool = True, adapter=None,
                  loop: bool = False, start: bool = True, in_step: bool = False) -> LipSync:
    """Open the audio source and the lip-sync model (raises SourceError / ModelError with the fix), and start
    playing unless `start` is False. The default backend is ONNX Runtime on one CPU thread: a hop costs about
    0.2 ms there, less than a GPU launch and copy would. in_step: a file is read as the frames' media time asks
    (a microphone stays live)."""
    source = open_audio(spec, realtime=realtime and not in_step, loop=loop)
    try:
        lipsync = LipSync(source, LipSyncStream(backend=backend, adapter=adapter),
                          in_step=in_step and isinstance(source, FileSource))
    except BaseException:
        source.close()
        raise
    return lipsync.start() if start else lipsync


class AudioFusion:
    """`process(frame) -> FaceFrame` (or `describe(tracked)`) of the face pipeline, with the audio mouth of the
    frame's instant fused in.

    Live (a camera, a microphone, or files streamed at their rate): the frame's instant is its capture time,
    and a frame never waits. In step (an audio file fused into a video file whose frames are all kept: --fast or
    --record): the frame's instant is its media time in the video and the audio is read up to it
    (LipSyncStream.result_at), so every frame that falls inside the audio gets its mouth however busy the
    machine is. A `learn` recorder (facebridge run --learn) sees the camera's own mouth first, before fusion
    changes it."""

    def __init__(self, process, stream: LipSyncStream, stats=None, learn=None):
        self._process, self.stream, self.stats, self.learn = process, stream, stats, learn

    def __call__(self, item) -> FaceFrame:  # a Frame (one stage) or the tracking stage's Tracked (two)
        out = self._process(item)
        if self.learn is not None:
            self.learn.on_camera(out)
        frame = getattr(item, "frame", item)
        result, age = _result_for(self.stream, frame, out.t_capture_mono)
        # every frame, fused or not, names the lip-sync model of the result at its instant (the model in use when
        # there is none yet): frames come in order and results by instant, so the named version only moves forward
        # through a live swap and the stream's layout never flaps
        version = (result.model_version if result is not None else None) or self.stream.model_version
        out.model_versions = versions_with(out.model_versions, "lipsync", version)
        outcome = fuse_mouth(out, result, mouth_visible=float(out.region_confidence.get("mouth", 1.0)), age_s=age)
        if outcome == "late" and _ended_before(self.stream, frame, out.t_capture_mono):
            outcome = "ended"  # a file that is over, or a stopped microphone: nothing was late
        if self.stats is not None:
            self.stats.lipsync_outcome(outcome)
        return out


def _result_for(stream: LipSyncStream, frame: Frame, t_mono: float):
    """(result, its distance in seconds from the frame's instant): in step by media time, else the recent result
    nearest the frame's capture instant `t_mono` (None: fuse_mouth measures it on the capture clocks)."""
    if not stream.in_step:
        return stream.at(t_mono), None
    result = stream.result_at(frame.t_media)
    return result, None if result is None else abs(frame.t_media - result.t_media)


def _ended_before(stream: LipSyncStream, frame: Frame, t_mono: float) -> bool:
    """The audio ended before this frame's instant (in step: its media time)."""
    return stream.ended_before(t_media=frame.t_media) if stream.in_step else stream.ended_before(t_mono)


class AudioFrameClock(FrameSource):
    """A 'camera' for audio-only runs: a tiny blank frame for every 1/60 s of audio.

    From a microphone (live) it ticks at wall time, like a camera, and when it falls behind it skips the missed
    ticks (counted in `skipped`) rather than bursting. From a file it ticks in the file's own time: tick k stands
    for the instant k/60 s into the file and is released once lip-sync has described that instant, so however
    busy the machine is the frames cover the whole file, and the run ends when the audio's last result is
    covered. In step (--fast) a file's ticks come as fast as they are taken, each read up to its media time.
    """

    name = "audio-only"
    fps = AUDIO_ONLY_FPS

    def __init__(self, lipsync: LipSync, fps: float = AUDIO_ONLY_FPS):
        super().__init__()
        self.lipsync, self.stream, self.fps = lipsync, lipsync.stream, fps
        self.live = lipsync.live  # a microphone: ticks at wall time
        self.in_step = lipsync.in_step  # a file's ticks as fast as they are taken, all kept (back-pressure)
        self.name = f"audio-only ({lipsync.source.name})"
        self.skipped = 0
        self._image = np.zeros((2, 2, 3), np.uint8)
        self._next: float | None = None
        self._closed = threading.Event()

    @property
    def mode(self) -> SourceMode:
        if self.in_step:
            return SourceMode.FAST
        return SourceMode.LIVE if self.live else SourceMode.PACED

    def _failed(self) -> None:
        if self.stream.error:
            raise FaceBridgeError(f"audio input failed ({self.stream.error})",
                                  "check the microphone or file given to --audio")

    def read(self) -> Frame | None:
        self.lipsync.start()
        if self._closed.is_set():
            return None
        if self.in_step:
            return self._read_in_step()
        return self._read_live() if self.live else self._read_file()

    def _read_live(self) -> Frame | None:
        if not self.stream.running:
            self._failed()
            return None
        now = time.perf_counter()
        self._next = now if self._next is None else self._next + 1.0 / self.fps
        wait = self._next - now
        if wait > 0:
            self._closed.wait(wait)
        elif wait < -1.0 / self.fps:  # fell behind: skip the missed ticks, do not burst
            missed = int(-wait * self.fps)
            self.skipped += missed
            self._next += missed / self.fps
        return self._stamp(self._image)

    def _read_in_step(self) -> Frame | None:
        t_media = self._seq / self.fps
        result = self.stream.result_at(t_media)
        if result is None or t_media - result.t_media > 1.0 / self.fps:  # the file has ended
            self._failed()
            return None
        frame = self._stamp(self._image)
        frame.t_media, frame.t_capture = t_media, result.t_capture + t_media - result.t_media
        return frame

    def _read_file(self) -> Frame | None:
        while not self._closed.is_set():
            start, newest = self.stream.t_start_mono, self.stream.latest()
            due = None if start is None else start + self._seq / self.fps
            if due is not None and newest is not None and newest.t_capture_mono >= due:
                frame = Frame(image=self._image, seq=self._seq, t_capture=newest.t_capture - newest.t_capture_mono
                              + due, t_capture_mono=due, t_media=self._seq / self.fps, fps=self.fps)
                self._seq += 1
                return frame
            if not self.stream.running:  # the audio ended: every instant it described has had its frame
                self._failed()
                return None
            self._closed.wait(0.005)
        return None

    def close(self) -> None:
        self._closed.set()


class AudioOnlyPipeline:
    """Neutral face, mouth from audio. A live frame takes the newest result and is stamped with the instant the
    mouth shape describes; a file's frame takes the result for its own instant.

    One of the kinds of bridge/runtime/pipeline_protocol.py's `Pipeline`: one step (`process`), no face model here
    (the lip-sync model is the audio's own and swaps on the audio's thread), no face to calibrate."""

    profile = None

    def __init__(self, stream: LipSyncStream, subject: str = "FaceBridge", live: bool = True, stats=None):
        self.stream, self.subject, self.live, self.stats = stream, subject, live, stats

    @property
    def model_versions(self) -> dict[str, str]:
        """The lip-sync model's version (the frames' only model)."""
        return versions_with({}, "lipsync", self.stream.model_version)

    def track(self, frame: Frame) -> Frame:
        """Nothing is tracked: the frame is handed on (`overlaps()` is False: the runner runs `process`)."""
        return frame

    def describe(self, frame: Frame) -> FaceFrame:
        """`process` of the frame."""
        return self.process(frame)

    def overlaps(self) -> bool:
        """One step: nothing carries from one frame to the next but the audio stream itself."""
        return False

    def wrap_faces(self, wrap) -> bool:
        """One face: nothing to wrap apart."""
        return False

    def guarded(self) -> bool:
        """The output guard checks every frame (a neutral face with the audio's mouth)."""
        return True

    def reset_description(self) -> None:
        """Nothing to forget: each frame is the neutral face with its instant's mouth."""

    def run_deferred(self) -> None:
        """Nothing is deferred."""

    def swappable_models(self) -> list[str]:
        """None here: the lip-sync model swaps on the audio's own thread (LipSyncStream)."""
        return []

    def use_swapper(self, swapper) -> None:
        """Nothing to take: no face model runs here."""

    def build_session(self, component: str) -> None:
        """Never asked (no swappable models): None."""
        return None

    def face_models(self) -> None:
        """None: no face model runs."""
        return None

    def detector_summary(self, verbose: bool = True) -> str:
        """'': no face is detected."""
        return ""

    def face(self, subject: str) -> None:
        """None: there is no face to calibrate (no camera)."""
        return None

    def close(self) -> None:
        """Nothing to close: the session stops the audio itself."""

    def process(self, frame: Frame) -> FaceFrame:
        if self.stream.in_step:
            result, age = _result_for(self.stream, frame, frame.t_capture_mono)
        else:
            result, age = (self.stream.latest() if self.live else self.stream.at(frame.t_capture_mono)), None
        out = FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                        subject=self.subject, face_found=False, frame_rate=frame.fps,
                        model_versions=self.model_versions)
        outcome = fuse_mouth(out, result, mouth_visible=0.0, age_s=age)  # a stale result (audio dropout): neutral
        if self.live and age is None and outcome == "fused":  # the frame describes the instant of its mouth
            out.t_capture, out.t_capture_mono = result.t_capture, result.t_capture_mono
        if self.stats is not None:
            self.stats.lipsync_outcome(outcome)
        return out
