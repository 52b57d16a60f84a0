"""FacePipeline: one camera frame in, one FaceFrame out, in two stages.

track:    detect (only when tracking is lost) -> 468 landmarks -> next frame's region
describe: iris (both eyes, one batch) -> head pose (PnP) -> gaze -> expression (ARKit-52 + morphable-model
          parameters) -> blink -> emotion (in the context of blinks and shapes) -> One-Euro filter -> calibration

`process(frame)` runs both. Only `track` depends on the previous frame, so on two cores the runner overlaps
`describe` of frame N with `track` of frame N+1 (each stage a thread of bridge/runtime/runner.py).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

import numpy as np

from bridge.calibration import CalibrationProfile
from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES, FaceFrame, Frame, MorphParams, versions_with
from bridge.stages.blink import BlinkEstimator
from bridge.stages.detection import FaceDetector
from bridge.stages.emotion import EmotionClassifier
from bridge.stages.emotion_context import EmotionContext
from bridge.stages.filters import OneEuroFilter
from bridge.stages.gaze import eye_angles, eye_look_shapes
from bridge.stages.geometry import Roi
from bridge.stages.head_pose import HeadPoseEstimator
from bridge.stages.landmarks import (
    FaceLandmarker,
    IrisLandmarker,
    LandmarkResult,
    roi_from_detection,
    roi_from_landmarks,
)

log = logging.getLogger(__name__)
EYE_LOOK = np.array([i for n, i in ARKIT_INDEX.items() if n.startswith("eyeLook")])
PRESENCE_THRESHOLD = 0.5
BLINKS = np.array([ARKIT_INDEX["eyeBlinkLeft"], ARKIT_INDEX["eyeBlinkRight"]])
# Where a replacement session is taken (the stage thread that runs the model): registry name -> component.
# The detector's registry name depends on --detector; both are listed, only the one in use is ever requested.
SWAP_POINTS = {
    "track": (("face_detection_short_range", "detector"), ("face_detection_full_range", "detector"),
              ("face_landmark", "landmarker")),
    "describe": (("iris_landmark", "iris"), ("emotion", "emotion"), ("regressor", "expression")),
}


@dataclass
class PipelineOptions:
    backend: str = "onnxruntime"
    threads: int = 1  # inference threads per model
    cpu_precision: str = "f32"  # CPU backends: "f32", or "bf16" where the CPU has it natively (engines/precision.py)
    detector: str = "face_detection_short_range"
    expression: str = "regressor"  # or "fit"
    expression_model: str | None = None  # folder with a user ONNX model + manifest (docs: model contract)
    # emotion on every Nth tracked frame, held between: every 3rd changes the 7 probabilities by 0.0027 on average
    # on the sample and keeps the top class on 99.3% of frames (docs/PERFORMANCE.md), for a third of the cost
    emotion_every: int = 3
    smoothing: bool = True
    subject: str = "FaceBridge"


@dataclass
class Tracked:
    """What stage 1 (tracking) hands to stage 2 (description) for one frame."""

    frame: Frame
    found: LandmarkResult | None
    tracked_count: int  # consecutive tracked frames including this one (0 when the face is lost)
    stage_ms: dict[str, float]


class _Timer:
    """Collects per-stage milliseconds into a dict."""

    def __init__(self) -> None:
        self.ms: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.ms[stage] = self.ms.get(stage, 0.0) + (now - self._t) * 1000.0
        self._t = now


class FacePipeline:
    def __init__(self, options: PipelineOptions | None = None, profile: CalibrationProfile | None = None,
                 shared: FacePipeline | None = None) -> None:
        """`shared`: another pipeline whose model sessions this one uses (another face of the same run,
        bridge/multiface.py); the temporal state (tracking, pose, blinks, identity, filters) is this pipeline's."""
        from bridge.expression.stage import ExpressionEstimator

        self.options = options = options or PipelineOptions()
        engine = {"backend": options.backend, "threads": options.threads, "cpu_precision": options.cpu_precision}
        self.detector = shared.detector if shared else FaceDetector(options.detector, **engine)
        self.landmarker = shared.landmarker if shared else FaceLandmarker(**engine)
        self.iris = shared.iris if shared else IrisLandmarker(**engine)
        self.head_pose = HeadPoseEstimator()
        self.blink = BlinkEstimator()
        self.expression = ExpressionEstimator(method=options.expression, backend=options.backend,
                                              model_dir=options.expression_model,
                                              cpu_precision=options.cpu_precision)
        if shared is not None and self.expression.session is not None:
            self.expression.session = shared.expression.session
        self.emotion = shared.emotion if shared else EmotionClassifier(**engine)
        self.emotion_context = EmotionContext()  # blinks, open mouth, surprise (stages/emotion_context.py)
        self.profile = profile
        # calibration_tap(frame), when set (bridge/runtime/control.py), gets every frame as it would be without
        # the profile, so a calibration measures the raw neutral while the stream keeps the profile in use
        self.calibration_tap = None
        self._model_versions: dict[str, str] | None = None
        if shared is None:  # shared sessions are warm already
            self._warm_up()
        if profile is not None and profile.identity:
            self.expression.set_identity(np.asarray(profile.identity, np.float32))
        self._roi = None
        self._tracked = 0
        self._last: FaceFrame | None = None
        self._emotion = np.zeros(7, np.float32)
        self._filters = {k: OneEuroFilter(*p) for k, p in {
            "blendshapes": (2.0, 1.5), "head_rotation": (0.8, 0.05), "head_translation": (0.8, 0.05),
            "eyes": (1.5, 0.05), "emotion": (1.0, 0.5)}.items()}
        self.detector_runs = 0
        self.swapper = None  # a runtime.swap.ModelSwapper: new model sessions are taken between two frames

    @property
    def model_versions(self) -> dict[str, str]:
        """Active model versions (sha256 prefixes, or a release), announced by sinks such as the gRPC header. The
        dict is never modified: a swap replaces it, so frames already handed on keep the versions they were made
        with."""
        if self._model_versions is None:
            from bridge.models import manifest

            versions = {name: entry["sha256"][:12] for name, entry in manifest()["models"].items()}
            versions.update(getattr(self.expression, "model_versions", {}) or {})
            self._model_versions = versions
        return self._model_versions

    def _take_swaps(self, stage: str) -> None:
        """At the start of `stage` (the thread that runs these models), take replacement sessions that the swap
        builder has ready; a dictionary pop when there are none."""
        for model, component in SWAP_POINTS[stage]:
            ready = self.swapper.take(model)
            if ready is None:
                continue
            getattr(self, component).session = ready.replacement
            key = "expression" if component == "expression" else model
            self._model_versions = versions_with(self.model_versions, key, ready.request.version)

    def swappable_models(self) -> list[str]:
        """Registry names of the models this pipeline runs and can swap live."""
        names = [m for stage in SWAP_POINTS.values() for m, c in stage if c != "detector"]
        names.append(self.options.detector)
        if getattr(self.expression, "session", None) is None:  # the reference fit has no model to swap
            names.remove("regressor")
        return names

    def _warm_up(self) -> None:
        """Run every model once so the first real frame is not slowed by lazy allocation and kernel choice
        (a live source would otherwise drop the frames that arrive meanwhile)."""
        blank = np.zeros((256, 256, 3), np.uint8)
        self.detector.detect(blank)
        points = self.landmarker.run(blank, Roi(cx=128, cy=128, size=200)).points
        iris = self.iris.run(blank, points)
        try:  # garbage landmarks may be refused by the expression stage; warming it is a bonus
            self.expression.estimate(points, (256, 256), iris=iris.iris[:, :, :2], image=blank)
        except Exception:
            pass
        self.emotion.run(blank, points)
        self.expression.reset()

    def reset(self) -> None:
        self._roi = None
        self._tracked = 0
        self.reset_description()

    def reset_description(self) -> None:
        """Forget describe's temporal state (pose tracking, blink baseline, filters): called by the output guard
        after a bad frame, so that one bad value does not carry into the frames after it."""
        self.head_pose.reset()
        self.blink.reset()
        self.emotion_context.reset()
        for f in self._filters.values():
            f.reset()

    def build_session(self, component: str):
        """A new session for a component's model ("detector", "landmarker", "iris", "emotion", "expression": the
        names of SWAP_POINTS), opened as at the start: same model file, backend and options (the output guard's
        recreation of a session whose model came with the pipeline)."""
        from bridge.expression.stage import ExpressionEstimator

        o = self.options
        engine = {"backend": o.backend, "threads": o.threads, "cpu_precision": o.cpu_precision}
        build = {"detector": lambda: FaceDetector(o.detector, **engine), "landmarker": lambda: FaceLandmarker(**engine),
                 "iris": lambda: IrisLandmarker(**engine), "emotion": lambda: EmotionClassifier(**engine),
                 "expression": lambda: ExpressionEstimator(method=o.expression, backend=o.backend,
                                                           model_dir=o.expression_model,
                                                           cpu_precision=o.cpu_precision)}[component]
        return build().session

    def _find_face(self, image: np.ndarray, timer: _Timer):
        """Landmarks from the tracked ROI; on loss, detect and try again once."""
        if self._roi is not None:
            result = self.landmarker.run(image, self._roi)
            timer.lap("landmarks")
            if result.presence >= PRESENCE_THRESHOLD:
                return result
        detections = self.detector.detect(image)
        self.detector_runs += 1
        timer.lap("detect")
        if not detections:
            return None
        result = self.landmarker.run(image, roi_from_detection(detections[0]))
        timer.lap("landmarks")
        return result if result.presence >= PRESENCE_THRESHOLD else None

    def process(self, frame: Frame) -> FaceFrame:
        return self.describe(self.track(frame))

    def track(self, frame: Frame) -> Tracked:
        """Stage 1: find the face's 468 points and set the next frame's region. Only this stage carries state
        from one frame to the next, so stage 2 of frame N can run while stage 1 works on frame N+1."""
        if self.swapper is not None:
            self._take_swaps("track")
        timer = _Timer()
        found = self._find_face(frame.image, timer)
        if found is None:
            self._roi = None
            self._tracked = 0
        else:
            self._roi = roi_from_landmarks(found.points)
            self._tracked += 1
        return Tracked(frame=frame, found=found, tracked_count=self._tracked, stage_ms=timer.ms)

    def describe(self, tracked: Tracked) -> FaceFrame:
        """Stage 2: iris, head pose, gaze, expression, emotion, filtering and calibration, in frame order."""
        if self.swapper is not None:
            self._take_swaps("describe")
        frame, found = tracked.frame, tracked.found
        timer = _Timer()
        image = frame.image
        h, w = image.shape[:2]
        out = FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                        subject=self.options.subject, image_size=(w, h), frame_rate=frame.fps,
                        model_versions=self.model_versions)  # sinks (gRPC header) announce them
        if found is None:
            self._lost(out)
            out.latencies_ms = {**tracked.stage_ms, **timer.ms}
            if self.calibration_tap is not None:
                self.calibration_tap(dataclasses.replace(out, blendshapes=out.blendshapes.copy()))
            return out
        points = found.points

        iris = self.iris.run(image, points)
        points = iris.refine(points)  # the iris model's lids: blinks the face mesh alone misses
        timer.lap("iris")
        ypr, translation, _ = self.head_pose.estimate(points, w, h)
        timer.lap("head_pose")
        eyes = eye_angles(points, iris.iris[:, 0])
        expr = self.expression.estimate(points, (w, h), iris=iris.iris[:, :, :2], image=image)
        timer.lap("expression")
        blendshapes = np.asarray(expr.blendshapes, np.float32).copy()
        blinks = self.blink(points)  # lid opening against this subject's open eye
        every = max(1, self.options.emotion_every)
        if every == 1 or tracked.tracked_count % every == 1:
            raw = self.emotion.run(image, points)
            self._emotion = self.emotion_context(raw, blendshapes, np.maximum(blinks, blendshapes[BLINKS]),
                                                 frame.t_media)
            timer.lap("emotion")
        for eye, name in ((0, "eyeBlinkLeft"), (1, "eyeBlinkRight")):
            blendshapes[ARKIT_INDEX[name]] = max(blendshapes[ARKIT_INDEX[name]], blinks[eye])
        t = frame.t_media
        if self.options.smoothing:
            blendshapes = self._filters["blendshapes"](blendshapes, t)
            ypr = self._filters["head_rotation"](ypr, t)
            translation = self._filters["head_translation"](translation, t)
            eyes = self._filters["eyes"](eyes, t).reshape(2, 2)
        out.face_found = True
        out.blendshapes = blendshapes
        out.head_rotation = ypr
        out.head_translation = translation
        out.eye_left, out.eye_right = eyes[0].copy(), eyes[1].copy()
        out.morph = expr.morph if isinstance(expr.morph, MorphParams) else MorphParams()
        # Emotion is classified every Nth frame and held between; the filter smooths both the steps and the
        # classifier's own frame-to-frame jumps (up to 0.4 on a still face), renormalised to sum to one.
        out.emotion = self._emotion
        if self.options.smoothing:
            smoothed = np.clip(self._filters["emotion"](self._emotion, t), 0.0, None)
            out.emotion = (smoothed / max(float(smoothed.sum()), 1e-6)).astype(np.float32)
        out.confidence = float(found.presence)
        out.region_confidence = dict(expr.region_confidence)
        out.landmarks = points
        tap = self.calibration_tap
        if tap is not None:
            raw = dataclasses.replace(out, blendshapes=out.blendshapes.copy())
            eye_look_shapes(raw.blendshapes, np.stack([raw.eye_left, raw.eye_right]))
            raw.blendshapes = np.clip(raw.blendshapes, 0.0, 1.0)
            tap(raw)
        if self.profile is not None:
            self.profile.apply(out)
        # eye-look shapes follow the (calibrated) gaze angles
        eye_look_shapes(out.blendshapes, np.stack([out.eye_left, out.eye_right]))
        out.blendshapes = np.clip(out.blendshapes, 0.0, 1.0)
        timer.lap("filter")
        out.latencies_ms = {**tracked.stage_ms, **timer.ms}
        self._last = out
        return out

    def _lost(self, out: FaceFrame) -> None:
        """No face: hold the last pose, relax the expression toward neutral, report zero confidence."""
        self.head_pose.reset()
        last = self._last
        if last is not None:
            out.head_rotation = last.head_rotation.copy()
            out.head_translation = last.head_translation.copy()
            out.blendshapes = (last.blendshapes * 0.8).astype(np.float32)
            self._last = out  # the next lost frame relaxes further (never touch a frame already handed on)
        else:
            out.blendshapes = np.zeros(NUM_BLENDSHAPES, np.float32)
        out.face_found = False
        out.confidence = 0.0
