"""RunControl: what the gRPC server and the monitor page may ask of the running bridge: status, subjects,
calibration, recording. It reads the session's one `RunStats` and never touches the threads' state directly.

Calibration is one at a time and never disturbs the stream: the pipeline's calibration tap hands over frames as
they would be without a profile, while the profile in use stays in use; the new profile is built from them,
stored, and only then switched to. A failure, a timeout or a second request changes nothing. A run from the
bundled sample calibrates for that run only: the sample is not the user's face, so their stored profile is kept.
"""
from __future__ import annotations

import threading

from bridge.calibration import CalibrationProfile
from bridge.errors import FaceBridgeError
from bridge.runtime.pipeline_protocol import Pipeline

CALIBRATION_FRAMES = 45  # frames measured when they come in time
CALIBRATION_MIN_FRAMES = 15  # enough for a median when a busy machine delivers fewer within the timeout
CALIBRATION_TIMEOUT_S = 10.0


class RunControl:
    def __init__(self, subject: str, backend_requested: str) -> None:
        self.subject = subject
        self.all_subjects: list[str] | None = None  # every face's subject with --faces N (the first is `subject`)
        self.backend_requested = backend_requested
        self.source = None  # set by the session as each part opens; None while starting
        self.pipeline: Pipeline | None = None
        self.stats = None
        self.last_versions: dict[str, str] | None = None  # model versions of the last frame sent (after swaps)
        self.runner = None  # set when the threads start; its `stopping` says the run is ending
        self.calibration_timeout_s = CALIBRATION_TIMEOUT_S
        self.calibration_frames = CALIBRATION_FRAMES
        self._calibrating = threading.Lock()  # held for the whole of one calibration
        self._frames_lock = threading.Lock()
        self.recording = None  # the session's RecordSwitch, when the run can record
        self.tuning = None  # the session's Tuning (runtime/tuning.py): each subject's mapping, live
        self._calibration_frames: list | None = None
        self._calibration_done = threading.Event()

    @property
    def state(self) -> str:
        """'starting' (models loading, no frame yet), 'running' or 'stopping'."""
        if self.runner is not None and self.runner.stopping:
            return "stopping"
        if self.pipeline is None or self.stats is None or self.stats.sent == 0:
            return "starting"
        return "running"

    def status(self) -> dict:
        snap = self.stats.snapshot() if self.stats is not None else None
        pipeline = self.pipeline  # None while starting
        models = pipeline.face_models() if pipeline is not None else None  # None too without face models here
        backend = models.backend if models is not None else self.backend_requested
        versions = pipeline.model_versions if pipeline is not None else {}
        return {"sources": [self.source.name] if self.source else [], "backends": [backend],
                "model_versions": self.last_versions or versions,
                "fps": snap.fps if snap else 0.0,
                "latency_ms_p50": snap.latency_ms_p50 if snap else 0.0,
                "latency_ms_p99": snap.latency_ms_p99 if snap else 0.0,
                "subjects": self.subjects(), "state": self.state,
                "recording": self.recording.recording if self.recording is not None else None}

    def record(self, on: bool) -> tuple[bool, str]:
        """Start (a new take directory) or stop recording."""
        if self.recording is None:
            return False, "this run cannot record (no take directory); start it with `facebridge run`"
        return self.recording.start() if on else self.recording.stop()

    def subjects(self) -> list[str]:
        return list(self.all_subjects or [self.subject])

    def on_frame(self, frame) -> None:
        """Called by the send thread with every frame sent (calibration uses the pipeline's tap instead)."""
        self.last_versions = frame.model_versions

    def _collect(self, frame) -> None:
        """The pipeline's calibration tap: a frame without the profile applied."""
        with self._frames_lock:
            if self._calibration_frames is not None:
                self._calibration_frames.append(frame)
                if len(self._calibration_frames) >= self.calibration_frames:
                    self._calibration_done.set()

    def calibrate(self, subject: str) -> tuple[bool, str]:
        if subject not in self.subjects():
            return False, f"unknown subject '{subject}'; known: {', '.join(self.subjects())}"
        if self.pipeline is None:
            return False, "the bridge is still starting; try again in a moment"
        if self.pipeline.face(subject) is None:  # --audio-only; --remote: the server calibrates with its profiles
            return False, "this run describes no face here (--audio-only, or --remote): there is no face to calibrate"
        if not self._calibrating.acquire(blocking=False):
            return False, f"a calibration of '{subject}' is already running; wait for its answer"
        try:
            return self._calibrate(subject)
        finally:
            self._calibrating.release()

    def _calibrate(self, subject: str) -> tuple[bool, str]:
        pipeline = self.pipeline.face(subject)  # that face's (--faces N: its slot)
        with self._frames_lock:
            self._calibration_frames, self._calibration_done = [], threading.Event()
        pipeline.calibration_tap = self._collect
        try:
            done = self._calibration_done.wait(self.calibration_timeout_s)
        finally:
            pipeline.calibration_tap = None
            with self._frames_lock:
                frames, self._calibration_frames = self._calibration_frames, None
        if not done and len(frames) < min(CALIBRATION_MIN_FRAMES, self.calibration_frames):
            return False, (f"only {len(frames)} of {self.calibration_frames} frames arrived within "
                           f"{self.calibration_timeout_s:.0f} s; is the source running? The calibration in use is kept")
        try:
            profile = CalibrationProfile.from_frames(subject, frames, pipeline.expression.identity)
        except FaceBridgeError as e:
            return False, f"{e} The calibration in use is kept."
        if self.source is not None and self.source.name == "sample":
            pipeline.profile = profile
            return True, (f"calibrated from {profile.frames} frames of the bundled sample, for this run only "
                          "(the sample is not your face: the stored profile is kept)")
        try:
            path = profile.save()
        except (OSError, ValueError) as e:
            return False, f"cannot store the profile ({e}); the calibration in use is kept"
        pipeline.profile = profile
        return True, f"calibrated from {profile.frames} frames; saved {path}"
