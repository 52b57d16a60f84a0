"""DescribeRows: the describe step of many streams at once, one row per stream: a whole batched pass described in
one call, as arrays over its rows, each row keeping what that stream's own FaceDescriber keeps, through the same
formulas (each written once over floats or rows: docs/ARCHITECTURE.md), so a stream gets the FaceFrames its
FaceDescriber would give (tests/stages/test_describe_rows.py holds the two together).

Per pass, over all its rows together: head pose (SQPNP on a stream's first frame, then refined from its last pose),
gaze, the expression regressor's outputs finished (ExpressionRows: each stream's estimator's own arithmetic, its
identity and its refreshes), blink against each stream's open eye, the emotion cadence and context, One-Euro
filters, calibration, eye-look shapes, and what a lost face reads as (the last pose held, the expression relaxing).
No calibration tap (RunControl's is FacePipeline's, one stream); `facebridge serve` runs this, `facebridge run` its
single-stream FaceDescriber: one stream's formulas run on plain floats there, where numpy's per-call cost would be
most of the arithmetic.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from bridge.calibration import without_neutral
from bridge.expression.rows import ExpressionRows
from bridge.frame import EMOTION_NAMES, NUM_BLENDSHAPES, FaceFrames, Frame
from bridge.stages.blink import BlinkRows
from bridge.stages.describe import (
    BLINKS,
    EMOTION_EVERY,
    FILTER_SLICES,
    FILTER_WIDTHS,
    FILTERS,
    emotion_due,
    filter_settings,
    relaxed,
    renormalised,
)
from bridge.stages.emotion_context import EmotionContextRows
from bridge.stages.filters import OneEuroRows
from bridge.stages.gaze import eye_angles, eye_look_shapes
from bridge.stages.head_pose import HeadPoseRows

CHUNK = 64  # rows described together: a pass of many streams goes in blocks of this many (its arrays stay in cache)


@dataclass
class MeasuredFaces:
    """MeasuredFace for the n rows of one pass, as arrays; rows where `found` is False have no face."""

    found: np.ndarray  # (n,) bool
    points: np.ndarray  # (n, 468, 3) frame pixels
    presence: np.ndarray  # (n,)
    iris: np.ndarray  # (n, 2, 5, 3)
    emotion: np.ndarray | None  # (n, 7), or None: not run for this pass
    expression_outputs: dict[str, np.ndarray]  # the expression model's outputs by name, (n, ...)


class DescribeRows:
    def __init__(self, rows: int, smoothing: float = 1.0, emotion_every: int = EMOTION_EVERY,
                 model_versions=None) -> None:
        """model_versions: the dict the frames announce, or a function giving it."""
        self.rows = rows
        self.smoothing = smoothing
        self.emotion_every = max(1, int(emotion_every))
        self._versions = model_versions or {}
        self._free = list(range(rows - 1, -1, -1))
        self._subject: list[str] = [""] * rows
        self._engine: list = [None] * rows
        self.head_pose = HeadPoseRows(rows)
        self.blink = BlinkRows(rows)
        self.emotion_context = EmotionContextRows(rows)
        self.expression = ExpressionRows(rows)
        # the five filters side by side as one, each channel with its own filter's min cutoff and beta (as
        # FaceDescriber's: the same arithmetic per channel, one call a pass instead of five)
        min_cutoff, beta, _ = filter_settings(smoothing)
        self._filter = OneEuroRows(rows, sum(FILTER_WIDTHS.values()), min_cutoff, beta)
        self._emotion = np.zeros((rows, len(EMOTION_NAMES)), np.float32)
        # each row's last wanted frame's probabilities, applied on its next tracked frame (FaceDescriber's cadence)
        self._pending_emotion = np.zeros((rows, len(EMOTION_NAMES)), np.float32)
        self._has_pending = np.zeros(rows, bool)
        self._tracked = np.zeros(rows, np.int64)
        self._has_last = np.zeros(rows, bool)
        self._last_bs = np.zeros((rows, NUM_BLENDSHAPES), np.float32)
        self._last_pose = np.zeros((rows, 6), np.float32)  # head rotation, translation
        self._has_profile = np.zeros(rows, bool)
        self._neutral_bs = np.zeros((rows, NUM_BLENDSHAPES), np.float32)
        self._neutral_pose = np.zeros((rows, 7), np.float32)  # head rotation (3), then the eyes' (2, 2)

    # --- streams ---------------------------------------------------------------------------------------------
    def open(self, subject: str, expression, profile=None) -> int:
        """A row for a new stream: its subject, its ExpressionEstimator and calibration profile (or None)."""
        if not self._free:
            raise ValueError(f"all {self.rows} describe rows are in use")
        row = self._free.pop()
        self._subject[row], self._engine[row] = subject, expression
        self._reset(row)
        self._has_profile[row] = profile is not None
        if profile is not None:
            self._neutral_bs[row] = np.asarray(profile.neutral_blendshapes, np.float32)
            self._neutral_pose[row, :3] = np.asarray(profile.neutral_head_rotation, np.float32)
            self._neutral_pose[row, 3:] = np.asarray(profile.neutral_eyes, np.float32).reshape(4)
            if profile.identity:
                expression.set_identity(np.asarray(profile.identity, np.float32))
        return row

    def close(self, row: int) -> None:
        self._engine[row] = None
        self._free.append(row)

    def _reset(self, row: int) -> None:
        self.head_pose.reset(row)
        self.blink.reset(row)
        self.emotion_context.reset(row)
        self.expression.reset(row)
        self._filter.reset(row)
        self._emotion[row] = 0.0
        self._has_pending[row] = False
        self._tracked[row] = 0
        self._has_last[row] = False

    @property
    def model_versions(self) -> dict[str, str]:
        return self._versions() if callable(self._versions) else self._versions

    # --- one pass ----------------------------------------------------------------------------------------------
    def describe(self, rows, frames: list[Frame], faces: MeasuredFaces, sizes: np.ndarray) -> FaceFrames:
        """The FaceFrames of one pass: rows (n,) distinct, frames (their times), what the models measured, sizes
        (n, 2) frame width and height."""
        t0 = time.perf_counter()
        rows = np.asarray(rows, np.int64)
        n = len(rows)
        sizes = np.asarray(sizes).reshape(n, 2)
        t = np.array([f.t_media for f in frames], np.float64)
        out = FaceFrames(
            seq=np.array([f.seq for f in frames], np.int64), t_capture=np.array([f.t_capture for f in frames]),
            t_capture_mono=np.array([f.t_capture_mono for f in frames]), subject=[self._subject[r] for r in rows],
            face_found=np.asarray(faces.found, bool).copy(), image_size=sizes,
            blendshapes=np.zeros((n, NUM_BLENDSHAPES), np.float32), head_rotation=np.zeros((n, 3), np.float32),
            head_translation=np.zeros((n, 3), np.float32), eyes=np.zeros((n, 2, 2), np.float32),
            emotion=np.zeros((n, len(EMOTION_NAMES)), np.float32), confidence=np.zeros(n, np.float32), morph={},
            region_names=self.expression.region_names,
            region_confidence=np.zeros((n, len(self.expression.region_names))),
            frame_rate=np.array([f.fps for f in frames], np.float64), model_versions=self.model_versions,
            landmarks=faces.points)
        found, laps = np.flatnonzero(out.face_found), {}
        out.face_found[:] = False
        for c in range(0, len(found), CHUNK):  # blocks that stay in the CPU's cache
            at = found[c:c + CHUNK]
            chunk_laps, described = self._found(rows[at], at, t[at], faces, sizes[at], out)
            out.face_found[described] = True
            laps = {k: laps.get(k, 0.0) + v for k, v in chunk_laps.items()}
        lost = np.flatnonzero(~out.face_found)
        if len(lost):
            self._lost(rows[lost], lost, out)
        per_frame = 1000.0 / n
        out.latencies_ms = {k: v * per_frame for k, v in laps.items()}
        out.latencies_ms["describe_pass"] = (time.perf_counter() - t0) * 1000.0
        return out

    def _found(self, rows, at, t, faces: MeasuredFaces, sizes, out: FaceFrames) -> tuple[dict, np.ndarray]:
        """Describe the rows with a face (at: their places in the pass) -> (stage seconds, the places described:
        all but those with too few finite landmarks)."""
        laps, t0 = {}, time.perf_counter()
        points, iris = faces.points[at], faces.iris[at]
        expr = self.expression.finish(rows, [self._engine[r] for r in rows], points,
                                      {k: v[at] for k, v in faces.expression_outputs.items()}, sizes)
        if not expr.usable.all():  # too few finite landmarks: those rows read as lost
            keep = expr.usable
            rows, at, t, sizes, points, iris = rows[keep], at[keep], t[keep], sizes[keep], points[keep], iris[keep]
            expr = _rows_of(expr, keep)
        laps["expression"] = time.perf_counter() - t0
        self._tracked[rows] += 1
        ypr, translation = self.head_pose.estimate(rows, points, sizes)
        posed = np.isfinite(ypr).all(1)
        if not posed.all():  # points no pose fits (degenerate, or lost where the expression kept them): lost
            rows, at, t, sizes, points, iris, ypr, translation = (
                v[posed] for v in (rows, at, t, sizes, points, iris, ypr, translation))
            expr = _rows_of(expr, posed)
        found_again = rows[self._tracked[rows] == 1]
        if len(found_again):  # FaceDescriber.describe: a new measurement after a lost frame, nothing to glide from
            self._filter.reset(found_again)
        eyes = eye_angles(points, iris[:, :, 0])
        laps["head_pose"] = time.perf_counter() - t0 - laps["expression"]
        blendshapes = expr.blendshapes.copy()
        blinks = self.blink(rows, points)
        pending = self._has_pending[rows]
        if pending.any():  # the previous tracked frame's, read with this frame's blinks, open mouth and surprise
            w = np.flatnonzero(pending)
            self._emotion[rows[w]] = self.emotion_context(
                rows[w], self._pending_emotion[rows[w]], blendshapes[w],
                np.maximum(blinks[w], blendshapes[w][:, BLINKS]), t[w])
            self._has_pending[rows[w]] = False
        if faces.emotion is not None:
            wants = emotion_due(self._tracked[rows], self.emotion_every)
            if wants.any():
                w = np.flatnonzero(wants)
                self._pending_emotion[rows[w]] = faces.emotion[at[w]]
                self._has_pending[rows[w]] = True
        blendshapes[:, BLINKS] = np.maximum(blendshapes[:, BLINKS], blinks)
        emotion = self._emotion[rows]
        if self.smoothing:
            smoothed = self._filter(rows, np.concatenate([blendshapes, ypr, translation, eyes.reshape(-1, 4),
                                                          emotion], 1), t)
            blendshapes, ypr, translation, eyes, emotion = (smoothed[:, FILTER_SLICES[k]] for k in FILTERS)
            eyes = eyes.reshape(-1, 2, 2)
            emotion = renormalised(emotion)
        calibrated = self._has_profile[rows]
        if calibrated.any():  # CalibrationProfile.apply, row by row
            c = np.flatnonzero(calibrated)
            blendshapes[c], ypr[c], eyes[c] = without_neutral(
                blendshapes[c], ypr[c], eyes[c], self._neutral_bs[rows[c]], self._neutral_pose[rows[c], :3],
                self._neutral_pose[rows[c], 3:].reshape(-1, 2, 2))
        eye_look_shapes(blendshapes, eyes)
        blendshapes = np.clip(blendshapes, 0.0, 1.0)
        out.blendshapes[at], out.head_rotation[at], out.head_translation[at] = blendshapes, ypr, translation
        out.eyes[at], out.emotion[at] = eyes, emotion
        out.confidence[at] = faces.presence[at]
        for name in ("identity", "expression", "jaw_rotation", "head_rotation", "head_translation",
                     "eye_rotation_left", "eye_rotation_right"):
            block = getattr(expr, name)
            if name not in out.morph:
                out.morph[name] = np.zeros((len(out), block.shape[1]), np.float32)
            out.morph[name][at] = block
        out.region_confidence[at] = expr.region_confidence
        self._has_last[rows] = True
        self._last_bs[rows] = blendshapes
        self._last_pose[rows] = np.concatenate([ypr, translation], 1)
        laps["filter"] = time.perf_counter() - t0 - laps["expression"] - laps["head_pose"]
        return laps, at

    def _lost(self, rows, at, out: FaceFrames) -> None:
        """No face: hold the last pose, relax the expression toward neutral, zero confidence."""
        self._tracked[rows] = 0
        self._has_pending[rows] = False
        self.head_pose.reset(rows)
        held = self._has_last[rows]
        h = at[held]
        relaxing = relaxed(self._last_bs[rows[held]])
        out.blendshapes[h] = relaxing
        out.head_rotation[h] = self._last_pose[rows[held], :3]
        out.head_translation[h] = self._last_pose[rows[held], 3:]
        self._last_bs[rows[held]] = relaxing
        out.confidence[at] = 0.0


def _rows_of(batch, keep):
    """An ExpressionBatch's rows where keep is True."""
    import dataclasses

    return dataclasses.replace(batch, **{f.name: getattr(batch, f.name)[keep] for f in dataclasses.fields(batch)
                                         if f.name != "region_names"})
