"""RunControl: what the gRPC server and the monitor page may ask of the running bridge: status, subjects,
calibration, recording. It reads the session's one `RunStats` and never touches the threads' state directly."""
from __future__ import annotations

import threading

from bridge.errors import FaceBridgeError

CALIBRATION_FRAMES = 45
CALIBRATION_TIMEOUT_S = 10.0


class RunControl:
    def __init__(self, subject: str, backend_requested: str) -> None:
        self.subject = subject
        self.backend_requested = backend_requested
        self.source = None  # set by the session as each part opens; None while starting
        self.pipeline = None
        self.stats = None
        self.last_versions: dict[str, str] | None = None  # model versions of the last frame sent (after swaps)
        self.recording = None  # the session's RecordSwitch, when the run can record
        self._calibration_frames: list | None = None
        self._calibration_done = threading.Event()
        self._lock = threading.Lock()

    def status(self) -> dict:
        snap = self.stats.snapshot() if self.stats is not None else None
        landmarker = getattr(self.pipeline, "landmarker", None)  # None while starting and in audio-only runs
        backend = landmarker.session.backend_name if landmarker is not None else self.backend_requested
        return {"sources": [self.source.name] if self.source else [], "backends": [backend],
                "model_versions": self.last_versions or getattr(self.pipeline, "model_versions", {}),
                "fps": snap.fps if snap else 0.0,
                "latency_ms_p50": snap.latency_ms_p50 if snap else 0.0,
                "latency_ms_p99": snap.latency_ms_p99 if snap else 0.0,
                "subjects": self.subjects(),
                "recording": self.recording.recording if self.recording is not None else None}

    def record(self, on: bool) -> tuple[bool, str]:
        """Start (a new take directory) or stop recording."""
        if self.recording is None:
            return False, "this run cannot record (no take directory); start it with `facebridge run`"
        return self.recording.start() if on else self.recording.stop()

    def subjects(self) -> list[str]:
        return [self.subject]

    def on_frame(self, frame) -> None:
        """Called by the send thread with every frame sent."""
        self.last_versions = frame.model_versions
        with self._lock:
            if self._calibration_frames is not None:
                self._calibration_frames.append(frame)
                if len(self._calibration_frames) >= CALIBRATION_FRAMES:
                    self._calibration_done.set()

    def calibrate(self, subject: str) -> tuple[bool, str]:
        from bridge.calibration import CalibrationProfile

        if subject not in self.subjects():
            return False, f"unknown subject '{subject}'; known: {', '.join(self.subjects())}"
        if self.pipeline is None:
            return False, "the bridge is still starting; try again in a moment"
        if not hasattr(self.pipeline, "expression"):
            return False, "this run has no camera (--audio-only): there is no face to calibrate"
        with self._lock:
            self._calibration_frames, self._calibration_done = [], threading.Event()
        self.pipeline.profile = None  # measure the raw neutral
        done = self._calibration_done.wait(CALIBRATION_TIMEOUT_S)
        with self._lock:
            frames, self._calibration_frames = self._calibration_frames, None
        if not done:
            return False, f"not enough frames arrived within {CALIBRATION_TIMEOUT_S:.0f} s; is the source running?"
        try:
            profile = CalibrationProfile.from_frames(subject, frames, self.pipeline.expression.identity)
        except FaceBridgeError as e:
            return False, str(e)
        path = profile.save()
        self.pipeline.profile = profile
        return True, f"calibrated from {profile.frames} frames; saved {path}"
