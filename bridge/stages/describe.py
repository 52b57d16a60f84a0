"""FaceDescriber: one stream's describe step, measured face in, FaceFrame out. The single-face pipeline and
`facebridge serve` both run it, so one face gives one answer on either path.

The models run elsewhere (FacePipeline on one frame, the batched tracker on many streams at once); what they
measured arrives as a `MeasuredFace` in frame pixels and ARKit's eye order. The describer adds everything that
carries state per stream: head pose (PnP, refined from the last frame), gaze, the lid-based blink against this
subject's own open eye, the expression engine's identity and morphable-model parameters, the emotion cadence,
One-Euro filters, calibration, and what a lost face reads as (the last pose held, the expression relaxing).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from bridge.calibration import CalibrationProfile
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES, NUM_BLENDSHAPES, FaceFrame, Frame, MorphParams
from bridge.mapping import region_of
from bridge.stages.blink import BlinkEstimator
from bridge.stages.emotion_context import EmotionContext
from bridge.stages.filters import OneEuroFilter
from bridge.stages.gaze import eye_angles, eye_look_shapes
from bridge.stages.head_pose import HeadPoseEstimator

# Emotion runs on every EMOTION_EVERY-th tracked frame and is held between (the filter smooths its steps): on the
# sample against every frame, every 4th changes the 7 probabilities by 0.0026 on average (every 3rd: 0.0020) and
# keeps the top class on 100% of frames, for a quarter of the model's cost (docs/PERFORMANCE.md, "Face pipeline on
# one CPU core"). `facebridge run --emotion-every` and serve's DescribeRows share it. A frame's emotion is applied on
# the
# next tracked frame (one frame late), so that its model can run after the frame is handed on, in the time before
# the next one arrives, instead of inside one frame in four (FaceDescriber.run_deferred).
EMOTION_EVERY = 4
# One-Euro (min cutoff Hz, beta) per channel group at smoothing strength 1; strength S divides both by S, so a
# still face jitters less (lower cutoff) and fast motion lags more (smaller speed boost)
BLINKS = np.array([ARKIT_INDEX["eyeBlinkLeft"], ARKIT_INDEX["eyeBlinkRight"]])
FILTERS = {"blendshapes": (2.0, 1.5), "head_rotation": (0.8, 0.05), "head_translation": (0.8, 0.05),
           "eyes": (1.5, 0.05), "emotion": (1.0, 0.5)}
FILTER_WIDTHS = {"blendshapes": NUM_BLENDSHAPES, "head_rotation": 3, "head_translation": 3, "eyes": 4, "emotion": 7}
# the five filters run as one OneEuroFilter over their channels side by side, each channel with its own filter's
# min cutoff and beta: the same arithmetic per channel (bit-equal), one call a frame instead of five
FILTER_SLICES: dict[str, slice] = {}
_at = 0
for _name, _width in FILTER_WIDTHS.items():
    FILTER_SLICES[_name] = slice(_at, _at + _width)
    _at += _width

PASS_THROUGH_HZ = 1e9  # a channel with smoothing 0 in a filter that runs: its cutoff so high it passes through


def channel_strengths(smoothing: float, regions: dict[str, float]) -> np.ndarray:
    """One-Euro strength per filter channel (FILTER_SLICES order): `smoothing`, or the region's own strength."""
    out = np.full(sum(FILTER_WIDTHS.values()), smoothing, np.float64)
    for i, name in enumerate(ARKIT_NAMES):
        out[FILTER_SLICES["blendshapes"].start + i] = regions.get(region_of(name), smoothing)
    for key in ("head_rotation", "head_translation"):
        out[FILTER_SLICES[key]] = regions.get("head", smoothing)
    out[FILTER_SLICES["eyes"]] = regions.get("eyes", smoothing)
    return out


def filter_settings(smoothing: float, regions: dict[str, float] | None = None) -> tuple[np.ndarray, np.ndarray, bool]:
    """(min cutoff, beta, whether any channel is smoothed) per filter channel (FILTER_SLICES order) at strength
    `smoothing`, or a region's own: a strength S divides the channel's min cutoff and beta by S; 0 passes the
    channel through."""
    strengths = channel_strengths(float(smoothing), regions or {})
    on = strengths > 0
    safe = np.where(on, strengths, 1.0)
    lows = np.concatenate([np.full(FILTER_WIDTHS[k], lo) for k, (lo, _) in FILTERS.items()])
    betas = np.concatenate([np.full(FILTER_WIDTHS[k], beta) for k, (_, beta) in FILTERS.items()])
    return np.where(on, lows / safe, PASS_THROUGH_HZ), np.where(on, betas / safe, 0.0), bool(on.any())


def renormalised(emotion: np.ndarray) -> np.ndarray:
    """Filtered emotion probabilities (..., 7) made a distribution again: negatives to 0, summing to one."""
    emotion = np.maximum(emotion, 0.0)
    return (emotion / np.maximum(emotion.sum(-1, keepdims=True), 1e-6)).astype(np.float32)


def emotion_due(tracked_count, every: int):
    """Whether the emotion model runs on the `tracked_count`th consecutive tracked frame (an int, or an array of
    counts, one per stream): every `every`th, starting with the first."""
    return (every == 1) | (tracked_count % every == 1)


def relaxed(blendshapes: np.ndarray) -> np.ndarray:
    """A lost face's expression, one frame further toward neutral."""
    return (blendshapes * 0.8).astype(np.float32)


@dataclass
class MeasuredFace:
    """What the models found in one frame, as it crosses from inference (one frame or a batch) to describe."""

    points: np.ndarray  # (468, 3) frame pixels; both lid contours taken from the iris model (IrisResult.refine)
    presence: float  # face-presence probability in [0, 1]
    iris: np.ndarray  # (2, 5, 3) frame pixels, [subject's left eye, right eye], centre first
    emotion: np.ndarray | Callable[[], np.ndarray] | None = None  # (7,) probabilities, EMOTION_NAMES order, or
    # what classifies them (called after the expression step: see FaceDescriber.describe); None: not run for this frame
    expression_outputs: dict[str, np.ndarray] | None = None  # the expression model's outputs (name -> (1, ...));
    # None: the describer runs the expression engine itself (FacePipeline, and the analysis-by-synthesis fit)


class StageTimer:
    """Collects per-stage milliseconds into a dict (FaceFrame.latencies_ms), and with cpu=True the calling
    thread's CPU milliseconds (time.thread_time) into cpu_ms (benchmarks)."""

    def __init__(self, cpu: bool = False) -> None:
        self.ms: dict[str, float] = {}
        self.cpu_ms: dict[str, float] = {}
        self._cpu = cpu
        self._t = time.perf_counter()
        self._c = time.thread_time() if cpu else 0.0

    def lap(self, stage: str) -> None:
        now = time.perf_counter()
        self.ms[stage] = self.ms.get(stage, 0.0) + (now - self._t) * 1000.0
        self._t = now
        if self._cpu:
            c = time.thread_time()
            self.cpu_ms[stage] = self.cpu_ms.get(stage, 0.0) + (c - self._c) * 1000.0
            self._c = c


class FaceDescriber:
    """One subject's describe state. `expression` is that subject's ExpressionEstimator (its identity is per
    subject; it may hold no inference session when the outputs come measured)."""

    def __init__(self, expression, subject: str = "FaceBridge", smoothing: float = 1.0,
                 profile: CalibrationProfile | None = None, emotion_every: int = EMOTION_EVERY,
                 model_versions=None, region_smoothing: dict[str, float] | None = None) -> None:
        """model_versions: the dict the frames announce, or a function giving it (a live swap replaces it);
        region_smoothing: strengths for head, eyes, brows, mouth (bridge/mapping.py REGIONS) instead of `smoothing`."""
        self.expression = expression
        self.subject = subject
        self.smoothing = smoothing
        self.profile = profile
        self.emotion_every = max(1, int(emotion_every))
        self._versions = model_versions or {}
        self.head_pose = HeadPoseEstimator()
        self.blink = BlinkEstimator()
        self.emotion_context = EmotionContext()  # blinks, open mouth, surprise (stages/emotion_context.py)
        self._filter = OneEuroFilter()
        self.set_smoothing(smoothing, region_smoothing)
        self._emotion = np.zeros(7, np.float32)
        # the last wanted frame's emotion (probabilities, or what classifies them), applied on the next tracked frame
        self._pending_emotion: np.ndarray | Callable[[], np.ndarray] | None = None
        self._last: FaceFrame | None = None
        self.tracked_count = 0  # consecutive frames with a face, this one included
        # calibration_tap(frame), when set (RunControl through FacePipeline.calibration_tap), gets every frame as it
        # would be without the profile, so a calibration measures the raw neutral while the stream keeps its profile
        self.calibration_tap = None
        if profile is not None and profile.identity:
            expression.set_identity(np.asarray(profile.identity, np.float32))

    def set_smoothing(self, smoothing: float, regions: dict[str, float] | None = None) -> None:
        """The One-Euro strength of every channel: `smoothing`, or a region's own (head: rotation and translation;
        eyes, brows, mouth: their blendshapes, eyes also the gaze angles; emotion keeps `smoothing`). A strength S
        divides the channel's min cutoff and beta by S; 0 passes the channel through. Taken on the next frame
        (the monitor page changes it while the stream runs)."""
        self._filter.min_cutoff, self._filter.beta, on = filter_settings(smoothing, regions)
        self.smoothing = float(smoothing) if not regions else float(on)

    def reset(self) -> None:
        """Forget the tracking history (a new subject on this stream): pose guess, lid reference, filters."""
        self.reset_description()
        self.tracked_count = 0
        self._pending_emotion = None

    def reset_description(self) -> None:
        """Forget the temporal state (pose tracking, blink baseline, filters) but keep the emotion cadence: the
        output guard calls it after a bad frame, so that one bad value does not carry into the frames after it."""
        self.head_pose.reset()
        self.blink.reset()
        self.emotion_context.reset()
        self._filter.reset()

    @property
    def model_versions(self) -> dict[str, str]:
        return self._versions() if callable(self._versions) else self._versions

    def wants_emotion(self, tracked_count: int) -> bool:
        """Whether the emotion model should run on the `tracked_count`th consecutive tracked frame."""
        return bool(emotion_due(tracked_count, self.emotion_every))

    def run_deferred(self) -> None:
        """The work the last frame left: its emotion classified and the identity refresh's step, run after that
        frame was handed on (the runner calls this in the time before the next frame); otherwise the next tracked
        frame's describe runs them. The answer is the same either way; a classification that raises stays
        pending, so that the describe step meets the error as its own."""
        if callable(self._pending_emotion):
            self._pending_emotion = self._pending_emotion()
        self.expression.run_deferred()

    def describe(self, frame: Frame, face: MeasuredFace | None, timer: StageTimer | None = None,
                 image_size: tuple[int, int] | None = None) -> FaceFrame:
        """The FaceFrame of `frame` (its image is read only by expression models that take the image).
        image_size: (width, height) when frame.image is not the frame (decoded elsewhere)."""
        timer = timer or StageTimer()
        w, h = image_size or (frame.image.shape[1], frame.image.shape[0])
        if face is None:
            out = FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                            subject=self.subject, image_size=(w, h), frame_rate=frame.fps,
                            model_versions=self.model_versions)  # sinks (gRPC header) announce them
            self.tracked_count = 0
            self._pending_emotion = None
            self._lost(out)
            tap = self.calibration_tap
            if tap is not None:
                tap(dataclasses.replace(out, blendshapes=out.blendshapes.copy()))
            return out
        self.tracked_count += 1
        if self.tracked_count == 1:  # found again after a lost frame: a new measurement, nothing to glide from (the
            self._filter.reset()  # filters would slide from the held pose, 10 cm a frame where the face is far)
        points, iris = face.points, face.iris
        ypr, translation, _ = self.head_pose.estimate(points, w, h)
        timer.lap("head_pose")
        eyes = eye_angles(points, iris[:, 0])
        # the frame after a wanted one (it runs the emotion model unless run_deferred did): an identity step waits a
        # frame; the same in both cases, so that the frames stream the same whether run_deferred is called or not
        busy = self._pending_emotion is not None
        if face.expression_outputs is None:
            expr = self.expression.estimate(points, (w, h), iris=iris[:, :, :2], image=frame.image, busy=busy)
        else:
            expr = self.expression.estimate_outputs(points, (w, h), face.expression_outputs, iris=iris[:, :, :2],
                                                    busy=busy)
        timer.lap("expression")
        # the previous tracked frame's, taken even if its classification raises (one bad frame stays one)
        pending, self._pending_emotion = self._pending_emotion, None
        if callable(pending):  # not run after its frame: classified here, right after the expression model's run,
            pending = pending()  # while the runtime's code is in the core's caches (0.79 ms against 0.89-0.92)
            timer.lap("emotion")
        self._pending_emotion = face.emotion if face.emotion is not None and self.wants_emotion(
            self.tracked_count) else None
        blendshapes = np.array(expr.blendshapes, np.float32)  # a copy: the lids and filters write into it
        blinks = self.blink(points)  # lid opening against this subject's open eye
        lids = np.maximum(blinks, blendshapes[BLINKS])
        if pending is not None:  # held between
            raw = np.asarray(pending, np.float32).reshape(-1)  # read with blinks, open mouth and surprise
            self._emotion = self.emotion_context(raw, blendshapes, lids, frame.t_media)
        blendshapes[BLINKS] = lids
        t = frame.t_media
        emotion = self._emotion
        if self.smoothing:
            smoothed = self._filter(np.concatenate([blendshapes, ypr, translation, np.ravel(eyes), emotion]), t)
            blendshapes, ypr, translation, eyes, emotion = (smoothed[FILTER_SLICES[k]].copy() for k in FILTERS)
            eyes = eyes.reshape(2, 2)
            emotion = renormalised(emotion)
        else:
            emotion = self._emotion
        # Emotion is classified every Nth frame and held between; the filter smooths both the steps and the
        # classifier's own frame-to-frame jumps (up to 0.4 on a still face), renormalised to sum to one.
        # Every field given: the defaults' arrays would be made only to be replaced.
        out = FaceFrame(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                        subject=self.subject, face_found=True, image_size=(w, h), blendshapes=blendshapes,
                        head_rotation=ypr, head_translation=translation, eye_left=eyes[0].copy(),
                        eye_right=eyes[1].copy(),
                        morph=expr.morph if isinstance(expr.morph, MorphParams) else MorphParams(),
                        emotion=emotion, confidence=float(face.presence),
                        region_confidence=dict(expr.region_confidence), landmarks=points,
                        model_versions=self.model_versions, frame_rate=frame.fps)
        tap = self.calibration_tap
        if tap is not None:
            raw = dataclasses.replace(out, blendshapes=out.blendshapes.copy())
            eye_look_shapes(raw.blendshapes, np.stack([raw.eye_left, raw.eye_right]))
            raw.blendshapes = np.clip(raw.blendshapes, 0.0, 1.0)
            tap(raw)
        if self.profile is not None:
            self.profile.apply(out)
        # eye-look shapes follow the (calibrated) gaze angles
        eye_look_shapes(out.blendshapes, [out.eye_left.tolist(), out.eye_right.tolist()])
        out.blendshapes = np.minimum(np.maximum(out.blendshapes, 0.0), 1.0)  # np.clip, a third of its overhead
        timer.lap("filter")
        self._last = out
        return out

    def _lost(self, out: FaceFrame) -> None:
        """No face: hold the last pose, relax the expression toward neutral, report zero confidence."""
        self.head_pose.reset()
        last = self._last
        if last is not None:
            out.head_rotation = last.head_rotation.copy()
            out.head_translation = last.head_translation.copy()
            out.blendshapes = relaxed(last.blendshapes)
            self._last = out  # the next lost frame relaxes further (never touch a frame already handed on)
        else:
            out.blendshapes = np.zeros(NUM_BLENDSHAPES, np.float32)
        out.face_found = False
        out.confidence = 0.0
