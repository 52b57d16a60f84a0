"""MultiFacePipeline (`facebridge run --faces N`): up to N faces, each in a slot whose subject name never changes
while its face is tracked.

Every slot is a FacePipeline of its own (region of interest, pose tracking, blink baseline, identity, filters,
calibration profile) that shares the models of slot 0, so N faces load the models once. Tracking runs the
landmark model on each tracked slot's region; a slot whose face is lost is free. While a slot is free the
detector runs (every frame while no face is tracked, every SCAN_EVERY frames otherwise; a wide search, so that two
people side by side on one 16:9 webcam, each a tenth of the frame wide, are found: bridge/stages/search.py) and
each new face, one not already tracked, takes the free slot whose face was last seen nearest to it (a face that
leaves and comes back keeps its subject), else the lowest free slot. Two slots that come to track the same face
are merged into the one tracked longer. Slot 0 is always sent, as with one face; another slot is sent from the
first frame its face is seen on, and while its face is away it is sent as lost (confidence 0, relaxing to
neutral) like slot 0.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.frame import FaceFrame, Frame
from bridge.pipeline import PRESENCE_THRESHOLD, FaceModels, FacePipeline, PipelineOptions, Tracked
from bridge.stages.describe import StageTimer
from bridge.stages.landmarks import LandmarkResult, roi_from_detection, roi_from_landmarks

SCAN_EVERY = 10  # frames between detector runs while some faces are tracked and a slot is free
SAME_FACE_IOU = 0.4  # landmark boxes overlapping this much are one face
# detections asked for per slot: some are faces already tracked, some the landmark model refuses (dark glasses)
CANDIDATES_PER_SLOT = 2


@dataclass
class MultiTracked:
    """What multi-face tracking hands to description for one frame: one Tracked per slot (found None when the
    slot's face is not in this frame), in slot order."""

    frame: Frame
    slots: list[Tracked]
    sent: list[bool]  # per slot: described and sent for this frame (its face was seen on this frame or before)


def _box(points: np.ndarray) -> np.ndarray:
    xy = points[:, :2]
    return np.concatenate([xy.min(0), xy.max(0)])


def box_iou(a: np.ndarray, b: np.ndarray) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def pick_slot(free: list[int], last_centre: dict[int, np.ndarray], centre: np.ndarray) -> int:
    """The free slot whose face was last seen nearest to `centre`; a never-used slot only when none was seen."""
    seen = [k for k in free if k in last_centre]
    if seen:
        return min(seen, key=lambda k: float(np.linalg.norm(last_centre[k] - centre)))
    return min(free)


class MultiFacePipeline:
    """Up to len(subjects) faces, one FacePipeline (slot) each; `describe` returns one FaceFrame per sent slot.

    `steps[k](tracked) -> FaceFrame` describes slot k (its FacePipeline.describe by default; the session wraps
    each in its own output guard, and slot 0 in the audio fusion, through `wrap_faces`). One of the kinds of
    bridge/runtime/pipeline_protocol.py's `Pipeline`."""

    def __init__(self, options: PipelineOptions, subjects: list[str], profiles: list | None = None) -> None:
        profiles = profiles or [None] * len(subjects)
        first = FacePipeline(dataclasses.replace(options, subject=subjects[0]), profile=profiles[0])
        self.slots = [first] + [FacePipeline(dataclasses.replace(options, subject=s), profile=p, shared=first)
                                for s, p in zip(subjects[1:], profiles[1:])]
        self.subjects = list(subjects)
        self.options = first.options
        self.steps = [slot.describe for slot in self.slots]
        self._sent = [True] + [False] * (len(self.slots) - 1)  # slots sent on every frame (seen at least once)
        self._last_centre: dict[int, np.ndarray] = {}
        self._since_scan = SCAN_EVERY
        self.detector_runs = 0

    # the members of runtime/pipeline_protocol.py's Pipeline: the models are slot 0's, which the others share
    landmarker = property(lambda self: self.slots[0].landmarker)

    @property
    def model_versions(self) -> dict[str, str]:
        """Slot 0's: the faces share its models."""
        return self.slots[0].model_versions

    def face_models(self) -> FaceModels:
        return self.slots[0].face_models()

    def detector_summary(self, verbose: bool = True) -> str:
        """Which face detector runs, and when (`verbose`: why), for len(slots) faces."""
        search = self.slots[0].search
        return search.summary(faces=len(self.slots)) if verbose else search.label(faces=len(self.slots))

    def face(self, subject: str) -> FacePipeline:
        """The slot that describes `subject` (its calibration tap, identity and profile)."""
        return self.slots[self.subjects.index(subject)]

    def swappable_models(self) -> list[str]:
        return self.slots[0].swappable_models()

    def use_swapper(self, swapper) -> None:
        """Slot 0 takes swapped sessions; the others share them (`_share_sessions`)."""
        self.slots[0].use_swapper(swapper)

    def build_session(self, component: str):
        return self.slots[0].build_session(component)

    def overlaps(self) -> bool:
        """Only `track` carries state from one frame to the next."""
        return True

    def wrap_faces(self, wrap) -> bool:
        """Each face's describe step becomes `wrap(k, step, reset)` for slot k (its own output guard)."""
        self.steps = [wrap(k, slot.describe, slot.reset_description) for k, slot in enumerate(self.slots)]
        return True

    def guarded(self) -> bool:
        """Each face's step is guarded on its own (`wrap_faces`)."""
        return True

    def reset_description(self) -> None:
        """Every face's describe state (each face's own guard resets only its own, through `wrap_faces`)."""
        for slot in self.slots:
            slot.reset_description()

    def close(self) -> None:
        """Nothing to close: the model sessions go with the pipeline."""

    def reset(self) -> None:
        for slot in self.slots:
            slot.reset()

    def run_deferred(self) -> None:
        for slot in self.slots:
            slot.run_deferred()

    def _share_sessions(self) -> None:
        expression = self.slots[0].expression.session
        for slot in self.slots[1:]:
            if slot.expression.session is not None:
                slot.expression.session = expression

    def process(self, frame: Frame) -> list[FaceFrame]:
        return self.describe(self.track(frame))

    def _landmarks(self, image, roi) -> LandmarkResult | None:
        result = self.landmarker.run(image, roi)
        return result if result.presence >= PRESENCE_THRESHOLD else None

    def track(self, frame: Frame) -> MultiTracked:
        """Landmarks for every tracked slot, then (when a slot is free and it is time) new faces into free slots."""
        first = self.slots[0]
        if first.swapper is not None:
            first._take_swaps("track")
        timer = StageTimer()
        image = frame.image
        found: dict[int, LandmarkResult] = {}
        for k, slot in enumerate(self.slots):
            if slot._roi is not None:
                result = self._landmarks(image, slot._roi)
                if result is not None:
                    found[k] = result
        timer.lap("landmarks")
        self._merge_duplicates(found)
        free = [k for k in range(len(self.slots)) if k not in found]
        self._since_scan += 1
        if free and (not found or self._since_scan >= SCAN_EVERY):
            self._since_scan = 0
            self._detect_into(image, found, free, timer)
        for k, slot in enumerate(self.slots):
            result = found.get(k)
            if result is None:
                slot._roi, slot._tracked = None, 0
            else:
                slot._roi, slot._tracked = roi_from_landmarks(result.points), slot._tracked + 1
                self._last_centre[k] = (_box(result.points)[:2] + _box(result.points)[2:]) / 2
                self._sent[k] = True
        slots = [Tracked(frame=frame, found=found.get(k), tracked_count=slot._tracked, stage_ms=timer.ms)
                 for k, slot in enumerate(self.slots)]
        return MultiTracked(frame=frame, slots=slots, sent=list(self._sent))  # describe may run frames behind

    def _merge_duplicates(self, found: dict[int, LandmarkResult]) -> None:
        """Two slots on one face (their regions drifted together): the slot tracked longer keeps it."""
        keys = sorted(found, key=lambda k: -self.slots[k]._tracked)
        for i, a in enumerate(keys):
            for b in keys[i + 1:]:
                if a in found and b in found and box_iou(_box(found[a].points), _box(found[b].points)) > SAME_FACE_IOU:
                    del found[b]

    def _detect_into(self, image, found: dict[int, LandmarkResult], free: list[int], timer: StageTimer) -> None:
        detections = self.slots[0].search.find(image, max_faces=CANDIDATES_PER_SLOT * len(self.slots), wide=True)
        self.detector_runs += 1
        timer.lap("detect")
        boxes = [_box(r.points) for r in found.values()]
        for det in detections:
            box = np.asarray(det.box, np.float64)
            if any(box_iou(box, b) > SAME_FACE_IOU * 0.5 for b in boxes):
                continue  # a face already tracked
            result = self._landmarks(image, roi_from_detection(det))
            if result is None:
                continue
            k = pick_slot(free, self._last_centre, (box[:2] + box[2:]) / 2)
            found[k] = result
            free.remove(k)
            boxes.append(_box(result.points))
            if not free:
                break
        timer.lap("landmarks")

    def describe(self, tracked: MultiTracked) -> list[FaceFrame]:
        """One FaceFrame per sent slot, in slot order (slot 0 first)."""
        first = self.slots[0]
        if first.swapper is not None:
            first._take_swaps("describe")
            self._share_sessions()
        return [self.steps[k](t) for k, t in enumerate(tracked.slots) if tracked.sent[k]]


def subject_names(spec: str, faces: int) -> list[str]:
    """Subject names for `faces` faces from --subject: comma-separated names, one per face; faces without a name
    get the first name followed by their number (FaceBridge, FaceBridge2, ...). One face keeps `spec` as given."""
    if faces < 1:
        raise FaceBridgeError(f"--faces must be at least 1, not {faces}", "pass --faces 1 (default) or more")
    if faces == 1:
        return [spec]
    names = [n.strip() for n in spec.split(",")]
    if not all(names):
        raise FaceBridgeError(f"--subject {spec!r} has an empty name", "give names separated by commas: Alice,Bob")
    if len(names) > faces:
        raise FaceBridgeError(f"--subject names {len(names)} subjects for --faces {faces}",
                              f"give at most {faces} names, or raise --faces")
    names += [f"{names[0]}{k + 1}" for k in range(len(names), faces)]
    if len(set(names)) != len(names):
        raise FaceBridgeError(f"--subject gives two faces the same name ({', '.join(names)})",
                              "give every face its own name")
    return names
