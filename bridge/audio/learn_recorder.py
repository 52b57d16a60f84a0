"""`facebridge run --learn`: pair each 10 ms log-mel frame of the lip-sync stream with the camera's mouth weights
at the same instant, and store windows of them as the adapter's teacher labels (bridge/audio/learn_store.py).

Policy: a frame is kept only while the face is clearly visible (face confidence >= min_face_confidence) and the
mouth confidence is high (region confidence "mouth" >= min_mouth_confidence) on both camera frames around it,
no more than `max_gap_s` apart; the label is the linear interpolation of those two frames' mouth weights. Any
frame that fails breaks the current window, which is then dropped unless it already holds `min_frames`. The
recorder must see the camera's own mouth, before audio fusion blends the speech mouth in (otherwise the model
would learn from itself). Memory is bounded: at most `window_frames` pending frames plus two seconds of camera
history.

Threads: `on_audio` is called from the lip-sync thread, `on_camera` from the video pipeline; one lock guards
the pairing, and the store write (a few ms) happens outside it.
"""
from __future__ import annotations

import collections
import logging
import threading
import time

import numpy as np

from bridge.audio.learn_store import CAMERA_CHANNELS, LearnStore, LearnWindow
from bridge.audio.visemes import MOUTH_ARKIT_INDICES
from bridge.frame import FaceFrame

log = logging.getLogger(__name__)

CAMERA_HISTORY_S = 2.0


class LearnRecorder:
    """Consumer of camera FaceFrames and audio features that writes LearnWindows to a LearnStore."""

    def __init__(self, store: LearnStore, window_frames: int = 300, min_frames: int = 150,
                 min_face_confidence: float = 0.7, min_mouth_confidence: float = 0.6, max_gap_s: float = 0.1,
                 keep_audio: bool = False):
        self.store = store
        self.window_frames, self.min_frames = int(window_frames), int(min_frames)
        self.min_face_confidence, self.min_mouth_confidence = min_face_confidence, min_mouth_confidence
        self.max_gap_s, self.keep_audio = max_gap_s, keep_audio
        self._lock = threading.Lock()
        self._camera: collections.deque = collections.deque()  # (t_mono, mouth (19,), ok)
        self._pending: collections.deque = collections.deque()  # (t_mono, frame index, mel (40,)) not yet paired
        self._mel: list[np.ndarray] = []
        self._mouth: list[np.ndarray] = []
        self._first: tuple[float, int] | None = None  # (t_mono, frame index) of the current window's frame 0
        self._pcm: collections.deque = collections.deque()  # (first sample index, int16 samples), bounded
        self._pcm_samples = 0
        self._deferred: list[LearnWindow] = []  # windows cut by a break, written after the lock is released
        self.windows_written = 0
        self.frames_kept = 0
        self.frames_rejected = 0
        self.write_errors = 0
        self._mono_to_wall = time.time() - time.perf_counter()  # refined from each camera frame's two clocks

    # -- video side -----------------------------------------------------------------------------------------
    def on_camera(self, frame: FaceFrame) -> None:
        """The camera's FaceFrame before audio fusion (the mouth is copied here, so fusion may change it)."""
        ok = (frame.face_found and frame.confidence >= self.min_face_confidence
              and float(frame.region_confidence.get("mouth", 0.0)) >= self.min_mouth_confidence)
        mouth = np.asarray(frame.blendshapes, np.float32)[MOUTH_ARKIT_INDICES].copy()
        with self._lock:
            self._mono_to_wall = float(frame.t_capture) - float(frame.t_capture_mono)
            self._camera.append((float(frame.t_capture_mono), mouth, bool(ok)))
            while self._camera and self._camera[-1][0] - self._camera[0][0] > CAMERA_HISTORY_S:
                self._camera.popleft()
            ready = self._pair()
        self._write(ready)

    # -- audio side -----------------------------------------------------------------------------------------
    def on_audio(self, mel: np.ndarray, t_mono: np.ndarray, first_frame: int,
                 pcm: np.ndarray | None = None, first_sample: int = 0) -> None:
        """New log-mel frames (T, 40) of the lip-sync stream, the instant each describes (perf_counter s) and the
        stream index of the first one; `pcm` (float 16 kHz, first sample index) only matters with keep_audio."""
        with self._lock:
            for k in range(len(mel)):
                self._pending.append((float(t_mono[k]), first_frame + k, np.asarray(mel[k], np.float32)))
            while len(self._pending) > self.window_frames:  # camera far behind or gone: bound the backlog
                self._pending.popleft()
                self._break()
                self.frames_rejected += 1
            if self.keep_audio and pcm is not None and len(pcm):
                self._pcm.append((first_sample, (np.clip(pcm, -1, 1) * 32767).astype(np.int16)))
                self._pcm_samples += len(pcm)
                while self._pcm_samples > 2 * (self.window_frames + 10) * 160:
                    self._pcm_samples -= len(self._pcm.popleft()[1])
            ready = self._pair()
        self._write(ready)

    # -- pairing (under the lock) ---------------------------------------------------------------------------
    def _label(self, t: float) -> np.ndarray | None:
        """Interpolated camera mouth at t, or None when the camera frames around t are missing or not trusted."""
        before = after = None
        for sample in self._camera:
            if sample[0] <= t:
                before = sample
            else:
                after = sample
                break
        if before is None or after is None or after[0] - before[0] > self.max_gap_s:
            return None
        if not (before[2] and after[2]):
            return None
        a = (t - before[0]) / max(after[0] - before[0], 1e-6)
        return (1 - a) * before[1] + a * after[1]

    def _pair(self) -> list[LearnWindow]:
        ready = []
        latest_camera = self._camera[-1][0] if self._camera else -np.inf
        while self._pending and self._pending[0][0] < latest_camera:
            t, index, mel = self._pending.popleft()
            label = self._label(t)
            if label is None:
                self._break()
                self.frames_rejected += 1
                continue
            if self._first is None:
                self._first = (t, index)
            self._mel.append(mel)
            self._mouth.append(label)
            if len(self._mel) >= self.window_frames:
                ready.append(self._cut())
        return ready

    def _break(self) -> None:
        """A frame failed: keep the window so far if it is long enough, otherwise drop it."""
        if len(self._mel) >= self.min_frames:
            self._deferred.append(self._cut())
        self._mel, self._mouth, self._first = [], [], None

    def _cut(self) -> LearnWindow:
        t0, index0 = self._first
        mel, mouth = np.stack(self._mel), np.stack(self._mouth)
        pcm = self._window_audio(index0, len(mel)) if self.keep_audio else None
        self._mel, self._mouth, self._first = [], [], None
        self.frames_kept += len(mel)
        return LearnWindow(mel=mel, mouth=mouth, trust=np.ones(len(mel), np.float32),
                           t_start=t0 + self._mono_to_wall, source="camera", channels=CAMERA_CHANNELS, pcm=pcm)

    def _window_audio(self, first_frame: int, frames: int) -> np.ndarray | None:
        start, stop = first_frame * 160, (first_frame + frames - 1) * 160 + 400
        parts = [(s, x) for s, x in self._pcm if s < stop and s + len(x) > start]
        if not parts:
            return None
        joined = np.concatenate([x for _, x in parts])
        return joined[max(0, start - parts[0][0]):stop - parts[0][0]]

    # -- writing (outside the lock) -------------------------------------------------------------------------
    def _write(self, ready: list[LearnWindow]) -> None:
        with self._lock:
            ready, self._deferred = self._deferred + ready, []
        for window in ready:
            try:
                self.store.add(window)
                self.windows_written += 1
            except Exception as e:  # a full disk must not stop the bridge
                self.write_errors += 1
                log.warning("learning store: window not written (%s)", e)

    def close(self) -> None:
        """Store what is long enough of the current window."""
        with self._lock:
            self._break()
        self._write([])

    def stats(self) -> dict:
        return {"windows_written": self.windows_written, "frames_kept": self.frames_kept,
                "frames_rejected": self.frames_rejected, "write_errors": self.write_errors}
