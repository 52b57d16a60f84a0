"""FacePipeline: one camera frame in, one FaceFrame out, in two stages.

track:    detect (only when tracking is lost; which detector: stages/search.py) -> 468 landmarks (+ both eyes
          and irises with the attention mesh)
          -> next frame's region
describe: iris (both eyes, one batch; not with the attention mesh), then the shared describe step
          (bridge/stages/describe.py, the same one `facebridge serve` runs per stream): head pose (PnP) -> gaze
          -> expression (ARKit-52 + morphable-model parameters) -> emotion (every Nth frame) -> blink -> emotion
          in the context of blinks and shapes -> One-Euro filters -> calibration

`process(frame)` runs both. Only `track` depends on the previous frame, so on two cores the runner overlaps
`describe` of frame N with `track` of frame N+1 (each stage a thread of bridge/runtime/runner.py). FacePipeline is
one of the kinds of bridge/runtime/pipeline_protocol.py's `Pipeline`, the members the session, control and the
guard's recreation use.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from dataclasses import dataclass

import numpy as np

from bridge.blas_threads import single_threaded_blas
from bridge.calibration import CalibrationProfile
from bridge.engines import check_available
from bridge.errors import FaceBridgeError
from bridge.expression.contract import load_contract
from bridge.expression.stage import ExpressionEstimator
from bridge.frame import FaceFrame, Frame, versions_with
from bridge.models import manifest
from bridge.models.registry import default_registry
from bridge.stages.attention import AttentionLandmarker
from bridge.stages.describe import EMOTION_EVERY, FaceDescriber, MeasuredFace, StageTimer
from bridge.stages.detection import FaceDetector
from bridge.stages.emotion import EmotionClassifier
from bridge.stages.geometry import Roi
from bridge.stages.landmarks import (
    FaceLandmarker,
    IrisLandmarker,
    IrisResult,
    LandmarkResult,
    roi_from_detection,
    roi_from_landmarks,
)
from bridge.stages.search import FAR, FAR_AFTER, NEAR, FaceSearch, check_choice

log = logging.getLogger(__name__)
PRESENCE_THRESHOLD = 0.5
# Where a replacement session is taken (the stage thread that runs the model): registry name -> component.
# faces a lost face's search tries, best first: the detector's best box may be one the landmark model refuses (a face
# in sunglasses in a group photo) while the next is a face it tracks
CANDIDATES = 2
# --detector decides which of the two detectors run (stages/search.py); only those in use are ever requested.
SWAP_POINTS = {
    "track": (("face_detection_short_range", "detector"), ("face_detection_full_range", "far_detector"),
              ("face_landmark", "landmarker"), ("face_landmark_with_attention", "landmarker")),
    "describe": (("iris_landmark", "iris"), ("emotion", "emotion"), ("regressor", "expression")),
}
LANDMARK_PATHS = ("auto", "attention", "mesh+iris")
MAX_SMOOTHING = 10.0  # --smoothing strength at most (stages/describe.py divides the One-Euro parameters by it)


@dataclass
class PipelineOptions:
    backend: str = "onnxruntime"
    threads: int = 1  # inference threads per model
    cpu_precision: str = "f32"  # CPU backends: "f32", or "bf16" where the CPU has it natively (engines/precision.py)
    # "auto": BlazeFace short range, and full range too where small faces are looked for; "short"/"full": that one
    # (bridge/stages/search.py)
    detector: str = "auto"
    # "attention": MediaPipe's attention mesh, mesh + eyes + irises from one model (LiteRT only); "mesh+iris":
    # face_landmark then iris_landmark; "auto": the attention mesh where the models run on the CPU and LiteRT is
    # installed (4x closer to MediaPipe refine's points, a quarter less CPU a frame: docs/PERFORMANCE.md), else
    # mesh+iris
    landmarks: str = "auto"
    expression: str = "regressor"  # or "fit"
    expression_model: str | None = None  # folder with a user ONNX model + manifest (docs: model contract)
    # emotion on every Nth tracked frame, held between (stages/describe.py EMOTION_EVERY: every 4th keeps the top
    # class on 100% of the sample's frames, for a quarter of the cost; docs/PERFORMANCE.md)
    emotion_every: int = EMOTION_EVERY
    smoothing: float = 1.0  # One-Euro strength: 0 off, 1 the tuned default, 2 twice as smooth (FILTERS / 2)
    subject: str = "FaceBridge"
    # One-Euro strength per region (head, eyes, brows, mouth: bridge/mapping.py REGIONS) instead of `smoothing`
    region_smoothing: dict[str, float] = dataclasses.field(default_factory=dict)

    def check(self) -> PipelineOptions:
        """Raise FaceBridgeError for an option no pipeline can run with (before any model loads)."""
        if not (math.isfinite(float(self.smoothing)) and 0.0 <= float(self.smoothing) <= MAX_SMOOTHING):
            raise FaceBridgeError(f"--smoothing {self.smoothing:g} is out of range",
                                  f"give 0 (off) to {MAX_SMOOTHING:g}; 1 is the default")
        check_choice(self.detector)
        for region, strength in self.region_smoothing.items():
            if not (math.isfinite(float(strength)) and 0.0 <= float(strength) <= MAX_SMOOTHING):
                raise FaceBridgeError(f"--smoothing-{region} {strength:g} is out of range",
                                      f"give 0 (off) to {MAX_SMOOTHING:g}; 1 is the default")
        if self.landmarks not in LANDMARK_PATHS:
            raise FaceBridgeError(f"--landmarks {self.landmarks} is not a landmark path",
                                  f"choose one of: {', '.join(LANDMARK_PATHS)}")
        if self.emotion_every < 1:
            raise FaceBridgeError(f"--emotion-every {self.emotion_every} is not a positive number",
                                  "give 1 (every frame) or more")
        if self.expression_model:  # its manifest and hash, before the other models load

            load_contract(self.expression_model)
        return self


@dataclass(frozen=True)
class FaceModels:
    """What runs a pipeline's face models on this machine (the start line, gRPC GetStatus): the landmark model's
    backend and precision (None where its backend states none), the landmark path and why it was chosen."""

    backend: str
    precision: str | None
    landmark_path: str
    landmark_reason: str


@dataclass
class Tracked:
    """What stage 1 (tracking) hands to stage 2 (description) for one frame."""

    frame: Frame
    found: LandmarkResult | None
    tracked_count: int  # consecutive tracked frames including this one (0 when the face is lost)
    stage_ms: dict[str, float]
    stage_cpu_ms: dict[str, float] = dataclasses.field(default_factory=dict)  # only with FacePipeline.stage_cpu


def landmark_path(options: PipelineOptions) -> tuple[str, str]:
    """("attention" or "mesh+iris", why) for these options."""
    if options.landmarks != "auto":
        return options.landmarks, "asked for (--landmarks)"
    if options.backend not in ("auto", "litert"):
        return "mesh+iris", f"--backend {options.backend}: the attention mesh runs on LiteRT only"
    if not check_available("litert").ok:
        return "mesh+iris", "LiteRT is not installed (the attention mesh runs on it only)"
    try:
        registry = default_registry()
        installed = next((m for m in ("face_landmark", "iris_landmark") if registry.installed(m) is not None), None)
    except Exception:  # noqa: BLE001 - an unreadable update store is reported where releases are followed
        installed = None
    if installed is not None:
        return "mesh+iris", f"a signed release of {installed} is installed (it runs on the two-model path)"
    if options.backend == "auto":
        gpu = next((b for b in ("tensorrt", "tensorrt-rtx", "onnxruntime-cuda") if check_available(b).ok), None)
        if gpu is not None:
            return "mesh+iris", f"the models run on {gpu} (the attention mesh runs on LiteRT only)"
    return "attention", ("one model for mesh, eyes and irises on LiteRT: closer to MediaPipe refine's points and "
                         "about a quarter less CPU a frame than face_landmark + iris_landmark (docs/PERFORMANCE.md)")


class FacePipeline:
    def __init__(self, options: PipelineOptions | None = None, profile: CalibrationProfile | None = None,
                 shared: FacePipeline | None = None) -> None:
        """`shared`: another pipeline whose model sessions this one uses (another face of the same run,
        bridge/multiface.py); the temporal state (tracking, pose, blinks, identity, filters) is this pipeline's."""
        self.options = options = (options or PipelineOptions()).check()
        engine = {"backend": options.backend, "threads": options.threads, "cpu_precision": options.cpu_precision}
        self.landmark_path, self.landmark_reason = (
            (shared.landmark_path, shared.landmark_reason) if shared else landmark_path(options))
        self.search = shared.search if shared else FaceSearch(options.detector, **engine)
        self.landmarker = shared.landmarker if shared else self._landmarker(engine)
        self.iris = shared.iris if shared else (None if self.landmark_path == "attention" else IrisLandmarker(**engine))
        self.expression = ExpressionEstimator(method=options.expression, backend=options.backend,
                                              model_dir=options.expression_model,
                                              cpu_precision=options.cpu_precision, spread_identity=True)
        if shared is not None and self.expression.session is not None:
            self.expression.session = shared.expression.session
        self.emotion = shared.emotion if shared else EmotionClassifier(**engine)
        self._model_versions: dict[str, str] | None = None
        single_threaded_blas()  # its small products lose to OpenBLAS's spin-waiting workers (blas_threads.py)
        if shared is None:  # shared sessions are warm already
            self._warm_up()
        self.describer = FaceDescriber(self.expression, subject=options.subject, smoothing=options.smoothing,
                                       profile=profile, emotion_every=options.emotion_every,
                                       model_versions=lambda: self.model_versions,
                                       region_smoothing=options.region_smoothing)  # a swap replaces them
        self._roi = None
        self._tracked = 0
        self._missed = 0  # frames in a row without a face
        self.detector_runs = 0
        self.swapper = None  # a runtime.swap.ModelSwapper: new model sessions are taken between two frames
        # benchmarks: per-stage CPU time of the stage threads (time.thread_time), last frame's in last_stage_cpu_ms
        self.stage_cpu = False
        self.last_stage_cpu_ms: dict[str, float] = {}

    # the search's two detectors, by the component names of SWAP_POINTS (None where --detector leaves one out)
    detector = property(lambda self: self.search.near)
    far_detector = property(lambda self: self.search.far)

    def detector_summary(self, verbose: bool = True) -> str:
        """Which face detector runs, and when (`verbose`: why)."""
        return self.search.summary(faces=1) if verbose else self.search.label(faces=1)

    def face_models(self) -> FaceModels:
        """The landmark model's backend and precision, the landmark path and why."""
        session = self.landmarker.session
        return FaceModels(session.backend_name, getattr(session, "precision", None), self.landmark_path,
                          self.landmark_reason)

    def face(self, subject: str) -> FacePipeline:
        """The pipeline describing `subject`: this one (the run's one face)."""
        return self

    def overlaps(self) -> bool:
        """Only `track` carries state from one frame to the next: `describe` of frame N may run beside it."""
        return True

    def wrap_faces(self, wrap) -> bool:
        """One face: nothing to wrap apart (the session wraps the last step whole)."""
        return False

    def guarded(self) -> bool:
        """The output guard checks every frame (its models run here)."""
        return True

    def use_swapper(self, swapper) -> None:
        """New sessions are taken from `swapper` at the start of the stage that runs them (`_take_swaps`)."""
        self.swapper = swapper

    def close(self) -> None:
        """Nothing to close: the model sessions go with the pipeline."""

    def _landmarker(self, engine: dict):
        if self.landmark_path == "attention":
            return AttentionLandmarker(**engine)
        return FaceLandmarker(**engine)

    @property
    def profile(self) -> CalibrationProfile | None:
        """The calibration applied to every frame (set by RunControl while calibrating)."""
        return self.describer.profile

    @profile.setter
    def profile(self, profile: CalibrationProfile | None) -> None:
        self.describer.profile = profile

    @property
    def calibration_tap(self):
        """calibration_tap(frame), when set (bridge/runtime/control.py), gets every frame as it would be without
        the profile, so a calibration measures the raw neutral while the stream keeps the profile in use."""
        return self.describer.calibration_tap

    @calibration_tap.setter
    def calibration_tap(self, tap) -> None:
        self.describer.calibration_tap = tap

    @property
    def model_versions(self) -> dict[str, str]:
        """Active model versions (sha256 prefixes, or a release), announced by sinks such as the gRPC header. The
        dict is never modified: a swap replaces it, so frames already handed on keep the versions they were made
        with."""
        if self._model_versions is None:
            versions = {name: entry["sha256"][:12] for name, entry in manifest()["models"].items()}
            versions.update(self.expression.model_versions)
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
        names = [m for stage in SWAP_POINTS.values() for m, c in stage if c not in ("detector", "far_detector")]
        names += list(self.search.detectors())
        unused = ("face_landmark", "iris_landmark") if self.landmark_path == "attention" else (
            "face_landmark_with_attention",)
        names = [n for n in names if n not in unused]
        if self.expression.session is None:  # the reference fit has no model to swap
            names.remove("regressor")
        return names

    def _warm_up(self) -> None:
        """Run every model once so the first real frame is not slowed by lazy allocation and kernel choice
        (a live source would otherwise drop the frames that arrive meanwhile)."""
        blank = np.zeros((256, 256, 3), np.uint8)
        for detector in self.search.detectors().values():
            detector.detect(blank)
        found = self.landmarker.run(blank, Roi(cx=128, cy=128, size=200))
        points = found.points
        iris = found.eyes if found.eyes is not None else self.iris.run(blank, points)
        try:  # garbage landmarks may be refused by the expression stage; warming it is a bonus
            self.expression.estimate(points, (256, 256), iris=iris.iris[:, :, :2], image=blank)
        except Exception:
            pass
        self.emotion.run(blank, points)
        self.expression.reset()

    def reset(self) -> None:
        self._roi = None
        self._tracked = 0
        self._missed = 0
        self.describer.reset()

    def run_deferred(self) -> None:
        """The work a frame left for after it was handed on (its emotion model, applied on the next tracked frame, and
        the identity refresh's spread step): the runner calls this in the describe thread right after each frame
        goes to the sinks, so that a webcam's frame gap absorbs it instead of the frames themselves
        (docs/PERFORMANCE.md, "Face pipeline on one CPU core")."""
        self.describer.run_deferred()

    def reset_description(self) -> None:
        """Forget describe's temporal state (pose tracking, blink baseline, filters): called by the output guard
        after a bad frame, so that one bad value does not carry into the frames after it."""
        self.describer.reset_description()

    def build_session(self, component: str):
        """A new session for a component's model ("detector", "landmarker", "iris", "emotion", "expression": the
        names of SWAP_POINTS), opened as at the start: same model file, backend and options (the output guard's
        recreation of a session whose model came with the pipeline)."""
        o = self.options
        engine = {"backend": o.backend, "threads": o.threads, "cpu_precision": o.cpu_precision}
        build = {"detector": lambda: FaceDetector(NEAR, **engine), "far_detector": lambda: FaceDetector(FAR, **engine),
                 "landmarker": lambda: self._landmarker(engine),
                 "iris": lambda: IrisLandmarker(**engine), "emotion": lambda: EmotionClassifier(**engine),
                 "expression": lambda: ExpressionEstimator(method=o.expression, backend=o.backend,
                                                           model_dir=o.expression_model,
                                                           cpu_precision=o.cpu_precision)}[component]
        return build().session

    def _find_face(self, image: np.ndarray, timer: StageTimer):
        """Landmarks from the tracked ROI; on loss, detect (wide once no face was found for FAR_AFTER frames) and
        try again once."""
        if self._roi is not None:
            result = self.landmarker.run(image, self._roi)
            timer.lap("landmarks")
            if result.presence >= PRESENCE_THRESHOLD:
                return result
        detections = self.search.find(image, CANDIDATES, wide=self._missed >= FAR_AFTER)
        self.detector_runs += 1
        timer.lap("detect")
        for detection in detections:  # best first: one the landmark model refuses gives way to the next
            result = self.landmarker.run(image, roi_from_detection(detection))
            timer.lap("landmarks")
            if result.presence >= PRESENCE_THRESHOLD:
                return result
        return None

    def process(self, frame: Frame) -> FaceFrame:
        return self.describe(self.track(frame))

    def track(self, frame: Frame) -> Tracked:
        """Stage 1: find the face's 468 points and set the next frame's region. Only this stage carries state
        from one frame to the next, so stage 2 of frame N can run while stage 1 works on frame N+1."""
        if self.swapper is not None:
            self._take_swaps("track")
        timer = StageTimer(cpu=self.stage_cpu)
        found = self._find_face(frame.image, timer)
        if found is None:
            self._roi = None
            self._tracked = 0
            self._missed += 1
        else:
            self._roi = roi_from_landmarks(found.points)
            self._tracked += 1
            self._missed = 0
        return Tracked(frame=frame, found=found, tracked_count=self._tracked, stage_ms=timer.ms,
                       stage_cpu_ms=timer.cpu_ms)

    def describe(self, tracked: Tracked) -> FaceFrame:
        """Stage 2: iris, then the shared describe step (head pose, gaze, expression, emotion, blink, filters,
        calibration), in frame order."""
        if self.swapper is not None:
            self._take_swaps("describe")
        frame, found = tracked.frame, tracked.found
        timer = StageTimer(cpu=self.stage_cpu)
        if found is None:
            out = self.describer.describe(frame, None, timer)
            out.latencies_ms = {**tracked.stage_ms, **timer.ms}
            self.last_stage_cpu_ms = {**tracked.stage_cpu_ms, **timer.cpu_ms}
            return out
        image = frame.image
        iris: IrisResult = found.eyes
        if iris is None:  # the two-model path
            iris = self.iris.run(image, found.points)
        points = iris.refine(found.points)  # the eye model's lids: blinks the face mesh alone misses
        if found.eyes is None:
            timer.lap("iris")
        emotion = None
        # classified every Nth frame, held between; counted by the describer (the frames it describes), never by the
        # tracker: a frame dropped between the two stages would put the two counts out of step for good
        if self.describer.wants_emotion(self.describer.tracked_count + 1):
            emotion = functools.partial(self.emotion.run, image, points)  # run by the describer
        out = self.describer.describe(frame, MeasuredFace(points=points, presence=float(found.presence),
                                                          iris=iris.iris, emotion=emotion), timer)
        out.latencies_ms = {**tracked.stage_ms, **timer.ms}
        self.last_stage_cpu_ms = {**tracked.stage_cpu_ms, **timer.cpu_ms}
        return out
