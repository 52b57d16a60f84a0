"""OutputGuard: a step around `describe` that lets no physically impossible frame reach the sinks.

The guard judges numbers and physics, never the person: a frame with a NaN or infinite value, a weight outside
[0, 1], a head jump no human can make between two frames, eyes or joints turned beyond what the estimators can give, or
expression coefficients outside the range the weights map to is replaced by the last good frame (with its own
sequence number and capture times, so the stream has no gap and its timecode goes on), counted in `RunStats` and
shown; so is a `describe` that raises. Identity coefficients (who the person is) are never a fault, only a non-
finite one: the expression model holds them near its prior itself (bridge/expression/fit.py, hold_identity). With no
good frame yet, a frame whose values are all finite stands in for itself, each value moved into its range, so a face
is never hidden for want of a frame before it. After a rejected frame the describing stage's temporal state
(filters, pose tracking) is reset, so one bad value cannot poison the frames after it. When the faults of one stage
persist for PERSIST_FRAMES frames in a row, `recreate(stage)` is called: it rebuilds that stage's model session off
the stage thread and swaps it in between two frames, while the stream goes on.

Each check names the stage whose output it reads: blendshapes and morph coefficients come from "expression",
emotion from "emotion", gaze from "iris", landmarks and head jumps from "landmarks", visemes from "lipsync".
Head pose has no model (it is solved from the iris-refined landmarks the frame carries), so a non-finite pose or
refined mesh is blamed on the landmarks when they came in non-finite, else on the iris. A bad value flows
downstream, so only the first stage in ROOT_ORDER that failed is blamed and counts toward recreating its
session. A `describe` that raises is blamed on the stage blamed the frame before (a fault that goes on), else on
"describe" (all of its sessions).
"""
from __future__ import annotations

import dataclasses
import logging
import math

import numpy as np

from bridge.frame import FaceFrame, MorphParams

log = logging.getLogger(__name__)

# Every limit holds what no face can give, with the real corpus's extremes (tools/fetch_real_data.py: every photo
# and clip through `facebridge run`, tests/e2e/test_real_people.py) far inside it.
PERSIST_FRAMES = 5  # faults of one stage in a row before its session is recreated
WEIGHT_SLACK = 1e-3  # weights may stray this far outside [0, 1] (float rounding) before they count as wrong
# The fastest voluntary head turns peak near 500-800 deg/s; the floors keep pose noise at high frame rates from
# counting as a jump. The distance is measured from the face's apparent size and the head size the model learns
# over the face's first second: real heads differ by up to 10% in size (1st to 99th percentile of the model's
# prior; 16% at the identity hold), so while it learns, the distance may step by that share between two frames of
# a still face (on the corpus: up to 7.5 cm at 1.5 m in a group photo, 5%). The corpus's largest steps between two
# frames of its clips: 5 deg and 1.3 cm.
HEAD_MAX_DEG_S, HEAD_MIN_STEP_DEG = 1000.0, 20.0
HEAD_MAX_CM_S, HEAD_MIN_STEP_CM, HEAD_MIN_STEP_SHARE = 300.0, 10.0, 0.2
JUMP_WINDOW_S = 0.5  # frames further apart than this (a lost face, dropped frames) are not compared
# Gaze: the estimator gives at most 35 deg of yaw and 25 of pitch (stages/gaze.py), twice that after a
# calibration's neutral is taken off; the corpus's largest is 35.
EYE_MAX_DEG = 90.0
# The shipped model ("ict-face-light"): expression coefficients are the ARKit weights mapped one to one (each a
# weight times at most 1), so they lie in [0, 1] like the weights (corpus: 0 to 0.92); its joints reach at most
# 0.44 rad (jaw) and 0.68 rad (an eye at 30 deg yaw and 25 pitch), a quarter turn none (corpus: 0.58). Other
# models' coefficients (a user's FLAME encoder) are only held to MORPH_LIMIT_OTHER, far beyond any standardised
# range. Identity is held to nothing here (see the module docstring).
SHIPPED_MODEL_ID = "ict-face-light"
EXPRESSION_RANGE = (-WEIGHT_SLACK, 1 + WEIGHT_SLACK)
JOINT_MAX_RAD = math.pi / 2
MORPH_LIMIT_OTHER = 50.0
ROOT_ORDER = ("landmarks", "iris", "expression", "emotion", "lipsync", "describe")  # the order values flow in


def _finite(a) -> bool:
    return a is None or bool(np.isfinite(np.asarray(a, np.float64)).all())


def _within(a, lo: float, hi: float) -> bool:
    a = np.asarray(a, np.float64)
    return a.size == 0 or bool(((a >= lo) & (a <= hi)).all())


def _in(a: np.ndarray, lo: float, hi: float) -> bool:
    """All of `a` within [lo, hi]: False for NaN too (it fails every comparison). Two reductions, no copies."""
    return a.size == 0 or bool(a.min() >= lo and a.max() <= hi)


def _finite_sum(*arrays) -> bool:
    """All finite: the sum of an array with a NaN or an infinity is not finite (one reduction per array)."""
    return all(a is None or math.isfinite(float(np.sum(a))) for a in arrays)


def _plausible(out: FaceFrame) -> bool:
    """The fast path every frame takes: True when nothing is out of range; only then is `frame_faults` spared
    its detailed, slower look."""
    ok = (_in(out.blendshapes, -WEIGHT_SLACK, 1 + WEIGHT_SLACK) and _in(out.emotion, 0.0, 1.0)
          and _in(out.eye_left, -EYE_MAX_DEG, EYE_MAX_DEG) and _in(out.eye_right, -EYE_MAX_DEG, EYE_MAX_DEG)
          and (out.visemes is None or _in(out.visemes, 0.0, 1.0))
          and _finite_sum(out.head_rotation, out.head_translation) and math.isfinite(out.confidence))
    if not ok or not out.face_found:
        return ok
    m = out.morph
    if not _finite_sum(out.landmarks, m.identity, m.head_rotation, m.head_translation):
        return False
    if m.model_id != SHIPPED_MODEL_ID:
        return all(_in(np.asarray(v), -MORPH_LIMIT_OTHER, MORPH_LIMIT_OTHER) for v in
                   (m.expression, m.jaw_rotation, m.eye_rotation_left, m.eye_rotation_right))
    joints = (m.jaw_rotation, m.eye_rotation_left, m.eye_rotation_right)
    return _in(m.expression, *EXPRESSION_RANGE) and all(float(np.dot(j, j)) <= JOINT_MAX_RAD ** 2 for j in joints)


def morph_faults(m: MorphParams) -> str | None:
    """What is wrong with a frame's morphable-model parameters, or None. Identity only when not finite."""
    blocks = {k: getattr(m, k) for k in ("identity", "expression", "jaw_rotation", "head_rotation",
                                         "head_translation", "eye_rotation_left", "eye_rotation_right")}
    if not all(_finite(v) for v in blocks.values()):
        return "non-finite morph parameters"
    if m.model_id != SHIPPED_MODEL_ID:
        worst = max((float(np.abs(v).max()) for k, v in blocks.items()
                     if np.size(v) and k not in ("identity", "head_translation")), default=0.0)
        return f"morph coefficient {worst:.3g} beyond +-{MORPH_LIMIT_OTHER:g}" if worst > MORPH_LIMIT_OTHER else None
    if not _within(m.expression, *EXPRESSION_RANGE):
        return "expression coefficients outside [0, 1]"
    for k in ("jaw_rotation", "eye_rotation_left", "eye_rotation_right"):
        if np.size(blocks[k]) and float(np.linalg.norm(blocks[k])) > JOINT_MAX_RAD:
            return f"{k} beyond a quarter turn"
    return None


def frame_faults(out: FaceFrame) -> list[tuple[str, str, str]]:
    """(reason, stage, detail) for each value of `out` outside its physical range (empty for a good frame)."""
    if _plausible(out):
        return []
    faults = []

    def check(ok: bool, reason: str, stage: str, detail: str) -> None:
        if not ok:
            faults.append((reason, stage, detail))

    shapes = out.blendshapes
    check(_finite(shapes), "nonfinite", "expression", "non-finite blendshape weights")
    check(not _finite(shapes) or _within(shapes, -WEIGHT_SLACK, 1 + WEIGHT_SLACK), "weight_range", "expression",
          "blendshape weights outside [0, 1]")
    check(_finite(out.emotion) and _within(np.nan_to_num(out.emotion), 0.0, 1.0), "nonfinite"
          if not _finite(out.emotion) else "weight_range", "emotion", "emotion probabilities not in [0, 1]")
    if out.visemes is not None:
        check(_finite(out.visemes) and _within(np.nan_to_num(out.visemes), 0.0, 1.0), "nonfinite"
              if not _finite(out.visemes) else "weight_range", "lipsync", "viseme weights not in [0, 1]")
    eyes_ok = _finite(out.eye_left) and _finite(out.eye_right)
    check(eyes_ok, "nonfinite", "iris", "non-finite gaze")
    check(not eyes_ok or _within(np.concatenate([out.eye_left, out.eye_right]), -EYE_MAX_DEG, EYE_MAX_DEG),
          "gaze_range", "iris", f"gaze beyond {EYE_MAX_DEG:g} degrees")
    check(_finite(out.head_rotation) and _finite(out.head_translation) and math.isfinite(out.confidence),
          "nonfinite", "head_pose", "non-finite head pose")
    if out.face_found:
        check(_finite(out.landmarks), "nonfinite", "mesh", "non-finite landmarks")
        problem = morph_faults(out.morph)
        if problem:
            faults.append(("nonfinite" if "non-finite" in problem else "morph_range", "expression", problem))
    return faults


def head_jump(a: FaceFrame, b: FaceFrame) -> str | None:
    """Why the head could not have moved from `a` to `b` (both with a face, b later), or None."""
    dt = (b.seq - a.seq) / (b.frame_rate or 30.0)
    if not (0 < dt <= JUMP_WINDOW_S):
        return None
    # three numbers each: plain floats are several times faster than numpy on arrays this small
    turn = max(abs((y - x + 180.0) % 360.0 - 180.0) for x, y in zip(a.head_rotation.tolist(), b.head_rotation.tolist()))
    ta, tb = a.head_translation.tolist(), b.head_translation.tolist()
    move = math.dist(ta, tb)
    if turn > max(HEAD_MIN_STEP_DEG, HEAD_MAX_DEG_S * dt):
        return f"head turned {turn:.0f} deg in {dt * 1000:.0f} ms"
    if move > max(HEAD_MIN_STEP_CM, HEAD_MIN_STEP_SHARE * 0.5 * abs(ta[2] + tb[2]), HEAD_MAX_CM_S * dt):
        return f"head moved {move:.0f} cm in {dt * 1000:.0f} ms"
    return None


def _into_range(out: FaceFrame) -> FaceFrame | None:
    """A copy of `out` with each value outside its range moved to the nearest one inside, or None when a value is
    not finite (nothing near it is known) or the copy would still be faulty."""
    m = out.morph
    values = (out.blendshapes, out.emotion, out.visemes, out.eye_left, out.eye_right, out.head_rotation,
              out.head_translation, out.landmarks if out.face_found else None, m.identity, m.expression,
              m.jaw_rotation, m.head_rotation, m.head_translation, m.eye_rotation_left, m.eye_rotation_right)
    if not (all(_finite(v) for v in values) and math.isfinite(out.confidence)):
        return None
    unit = (-WEIGHT_SLACK, 1 + WEIGHT_SLACK) if m.model_id == SHIPPED_MODEL_ID else (-MORPH_LIMIT_OTHER,
                                                                                      MORPH_LIMIT_OTHER)
    turn = JOINT_MAX_RAD if m.model_id == SHIPPED_MODEL_ID else MORPH_LIMIT_OTHER

    def joint(v):
        v = np.asarray(v)
        norm = float(np.linalg.norm(v)) if v.size else 0.0
        return (v * (turn / norm)).astype(v.dtype) if norm > turn else v.copy()

    morph = dataclasses.replace(m, expression=np.clip(m.expression, *unit), jaw_rotation=joint(m.jaw_rotation),
                                eye_rotation_left=joint(m.eye_rotation_left),
                                eye_rotation_right=joint(m.eye_rotation_right))
    fixed = dataclasses.replace(
        out, morph=morph, blendshapes=np.clip(out.blendshapes, 0.0, 1.0), emotion=np.clip(out.emotion, 0.0, 1.0),
        visemes=None if out.visemes is None else np.clip(out.visemes, 0.0, 1.0),
        eye_left=np.clip(out.eye_left, -EYE_MAX_DEG, EYE_MAX_DEG), eye_right=np.clip(out.eye_right, -EYE_MAX_DEG,
                                                                                     EYE_MAX_DEG))
    return None if frame_faults(fixed) else fixed


def _stand_in(last: FaceFrame | None, item, out: FaceFrame | None) -> FaceFrame:
    """The last good frame under this frame's sequence number and capture times. When none was good yet: this
    frame moved into range where all of its values are finite (a face is never hidden for want of a frame before
    it), else a neutral frame without a face."""
    frame = getattr(item, "frame", item)  # describe takes a Tracked, process a Frame
    stamps = dict(seq=frame.seq, t_capture=frame.t_capture, t_capture_mono=frame.t_capture_mono,
                  frame_rate=frame.fps)
    fixed = _into_range(out) if last is None and out is not None else None
    if fixed is not None:
        base = dataclasses.replace(fixed, **stamps)
    elif last is None:
        base = FaceFrame(**stamps, subject=out.subject if out else "FaceBridge", face_found=False)
    else:
        copies = {f.name: getattr(last, f.name).copy() for f in dataclasses.fields(last)
                  if isinstance(getattr(last, f.name), np.ndarray)}
        base = dataclasses.replace(last, **copies, **stamps, morph=dataclasses.replace(last.morph))
    latencies = dict(out.latencies_ms) if out is not None else dict(getattr(item, "stage_ms", {}) or {})
    base.latencies_ms = latencies
    return base


class OutputGuard:
    """`step(item) -> FaceFrame` with every output checked; see the module docstring for the policy.

    `recreate(stage)` rebuilds a stage's session (the session rebuilder, later the live swap); `reset()` clears the
    describing stage's temporal state; `stats` (a RunStats) counts every replaced frame by reason and stage."""

    def __init__(self, step, stats=None, recreate=None, reset=None, persist_frames: int = PERSIST_FRAMES) -> None:
        self._step, self.stats, self.recreate, self.reset = step, stats, recreate, reset
        self.persist_frames = persist_frames
        self._good: FaceFrame | None = None  # the last frame let through
        self._jumped: FaceFrame | None = None  # the last frame held back for a head jump
        self._steady = 0  # frames in a row at a new, steady pose
        self._streak: dict[str, int] = {}  # stage -> faults in a row that count toward recreating its session
        self.replaced = 0

    def __call__(self, item) -> FaceFrame:
        out = None
        try:
            out = self._step(item)
        except Exception as e:  # noqa: BLE001 - one bad frame is replaced, never a gap in the stream
            found = getattr(item, "found", None)
            blame = next(iter(self._streak), "describe") if found is None or _finite(found.points) else "landmarks"
            faults = [("error", blame, f"{type(e).__name__}: {e}".splitlines()[0])]
        else:
            faults = frame_faults(out) or self._jump(out)
        if not faults:
            self._streak.clear()
            self._good, self._jumped, self._steady = out, None, 0
            return out
        return self._reject(item, out, faults)

    def _jump(self, out: FaceFrame) -> list[tuple[str, str, str]]:
        """A head jump against the last good frame. A new pose that holds steady (each frame close to the one
        before) for PERSIST_FRAMES frames is the truth (the tracker found the face again elsewhere) and is let
        through; an unsteady one counts toward recreating the landmark session."""
        last = self._good
        why = head_jump(last, out) if out.face_found and last is not None and last.face_found else None
        if why is None:
            return []
        steady = self._jumped is not None and head_jump(self._jumped, out) is None
        self._jumped = out
        self._steady = self._steady + 1 if steady else 0
        if self._steady >= self.persist_frames - 1:
            return []
        return [("head_jump", "pose" if steady else "landmarks", why)]

    @staticmethod
    def _root(item, faults) -> tuple[str, str, str | None]:
        """(reason, detail, stage to blame) of the fault first in ROOT_ORDER; no stage for a steady new pose."""
        found = getattr(item, "found", None)
        landmarks_bad = found is not None and not _finite(found.points)
        derived = ("head_pose", "mesh")  # solved from, or are, the iris-refined landmarks
        mapped = [(r, d, ("landmarks" if landmarks_bad else "iris") if s in derived else s) for r, s, d in faults]
        blamed = [f for f in mapped if f[2] in ROOT_ORDER]
        if not blamed:
            return mapped[0][0], mapped[0][1], None
        return min(blamed, key=lambda f: ROOT_ORDER.index(f[2]))

    def _reject(self, item, out, faults) -> FaceFrame:
        self.replaced += 1
        stand_in = _stand_in(self._good, item, out)
        reason, detail, root = self._root(item, faults)
        self._streak = {root: self._streak.get(root, 0) + 1} if root else {}
        text = f"frame {stand_in.seq}: {detail} ({root or 'pose'}); replaced by the last good frame"
        if self.stats is not None:
            self.stats.frame_guarded(reason, root or "landmarks", text)  # one frame, counted once
        if self.replaced == 1 or self.replaced % 100 == 0:
            log.warning("output guard: %s (%d so far)", text, self.replaced)
        if self.reset is not None and reason != "head_jump":
            self.reset()  # filters and pose tracking must not carry the bad value into the next frames
        for s, n in self._streak.items():
            if n >= self.persist_frames:
                self._streak[s] = 0
                if self.recreate is not None:
                    log.warning("output guard: %s gave bad output %d frames in a row; recreating its session", s, n)
                    self.recreate(s)
        return stand_in
