"""ExpressionRows: the regressor's measured outputs of many faces finished at once, one row per stream, by the
arithmetic each stream's ExpressionEstimator.estimate_outputs runs for its own face (result.py's finish_face, row
by row in result.finish_rows: compiled where numba is), with what only a pass of rows needs around it.

Each row keeps its subject's own ExpressionEstimator: its identity (read once a frame, its neutral points kept here
per row until it changes) and its identity refreshes (`observe`: inline, or on the shared refresher).
Only the shipped model's contract with a head-rotation output is taken here (what the batched tracker runs); any
other model goes through the estimator one face at a time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import MODEL_ID, head_matrix, load_model
from bridge.expression.result import EYE_LEFT, EYE_RIGHT, HEAD, mend, region_confidence, result_math, unit_interval
from bridge.expression.stage import MAX_LOST_POINTS

# an unusable row's points where it has no last reprojection: a 26 x 18 grid 10 px apart, which any camera fits (its
# results are dropped; zeros, the stand-in before, made the translation's normal equations singular)
STAND_IN = np.stack(np.meshgrid(np.arange(26.0), np.arange(18.0)), -1).reshape(468, 2) * 10.0 + 100.0


@dataclass
class ExpressionBatch:
    """What estimate_outputs gives for each of n faces, as arrays (ExpressionResult's fields, MorphParams' blocks)."""

    usable: np.ndarray  # (n,) bool: False where too many landmarks were not finite (describe it as lost)
    blendshapes: np.ndarray  # (n, 52) float32 in [0, 1]
    identity: np.ndarray  # (n, 100) float32
    expression: np.ndarray  # (n, 53) float32
    jaw_rotation: np.ndarray  # (n, 3) float32
    head_rotation: np.ndarray  # (n, 3) float32 axis-angle
    head_translation: np.ndarray  # (n, 3) float32 cm
    eye_rotation_left: np.ndarray  # (n, 3) float32
    eye_rotation_right: np.ndarray  # (n, 3) float32
    region_confidence: np.ndarray  # (n, len(region_names)) rounded to 4 decimals
    region_names: tuple[str, ...]  # the columns of region_confidence ("tongue" last, always 0)


def takes(contract) -> bool:
    """Whether ExpressionRows finishes this contract's outputs (the shipped model, head rotation given)."""
    return contract is not None and contract.model_id == MODEL_ID and "head_rotation" in contract.outputs \
        and "blendshapes" in contract.outputs


class ExpressionRows:
    def __init__(self, rows: int, compiled_loops: bool | None = None) -> None:
        """compiled_loops: None runs result.py's arithmetic compiled where numba is installed; False as numpy."""
        self.model = load_model()
        self.math = result_math(self.model, compiled_loops)
        self._last_points = np.zeros((rows, 468, 2))  # the last reprojection (fills a few lost landmarks)
        self._has_last = np.zeros(rows, bool)
        self._base = np.zeros((rows, 468 * 3))  # each row's model.identity_points
        self._identity: list = [None] * rows  # the identity array each base was made from
        self.region_names = (*self.model.region_names, "tongue")

    def reset(self, rows) -> None:
        self._has_last[rows] = False
        for row in np.atleast_1d(rows):
            self._identity[int(row)] = None

    def finish(self, rows: np.ndarray, engines: list, landmarks: np.ndarray, outputs: dict[str, np.ndarray],
               sizes: np.ndarray) -> ExpressionBatch:
        """rows (n,) distinct; engines: each row's ExpressionEstimator; landmarks (n, 468, >=2) frame pixels;
        outputs: the model's outputs by name, (n, ...); sizes (n, 2) width, height."""
        model, contract, math_ = self.model, engines[0].contract, self.math
        n = len(rows)
        xy = np.array(landmarks[..., :2], dtype=np.float64)
        usable = self._fill_lost(rows, xy)
        weights = unit_interval(contract.pick_rows("blendshapes", outputs))
        rot = head_matrix(*contract.pick_rows("head_rotation", outputs)[:, :3].T.astype(np.float64))
        focal = sizes[:, 0].astype(np.float64)
        centre = sizes.astype(np.float64) / 2.0
        for k in range(n):  # the frame's identity refresh (inline) comes before its identity is read, as there
            if usable[k]:
                engines[k].observe(weights[k], rot[k], xy[k], float(focal[k]), (float(centre[k, 0]),
                                                                                float(centre[k, 1])))
        identities = [engine.identity for engine in engines]  # read once: a refresher may replace them meanwhile
        points = model.points_from(self._bases(rows, identities), weights)
        block = weights.astype(np.float64) @ math_.params
        eyes = np.ascontiguousarray(block[:, math_.eyes])
        t, rms = np.empty((n, 3)), np.empty((n, len(model.region_names)))
        rotations, turned = np.empty((n, 3, 3)), np.zeros((n, 3), bool)
        reprojected = np.empty((n, 468, 2))
        math_.finish_rows(rot, points, xy, focal, centre, eyes, math_.region_average, NOISE_FRACTION, t, reprojected,
                          rms, rotations, turned)
        for k in np.flatnonzero(turned.any(1)):
            mend(rotations[k], turned[k], rot[k], eyes[k])
        self._last_points[rows] = reprojected
        self._has_last[rows] = True
        f32 = np.float32
        return ExpressionBatch(
            usable=usable, blendshapes=weights.astype(f32),
            identity=np.stack([v[:model.num_ict_identity] for v in identities]).astype(f32),
            expression=block[:, math_.expression].astype(f32), jaw_rotation=block[:, math_.jaw].astype(f32),
            head_rotation=rotations[:, HEAD].astype(f32), head_translation=t.astype(f32),
            eye_rotation_left=rotations[:, EYE_LEFT].astype(f32),
            eye_rotation_right=rotations[:, EYE_RIGHT].astype(f32),
            region_confidence=np.concatenate([np.round(region_confidence(rms), 4), np.zeros((n, 1))], 1),
            region_names=self.region_names)

    def _bases(self, rows, identities) -> np.ndarray:
        """Each row's model.identity_points, those of the rows whose identity changed made in one product (in a
        stream's first second, and on every refresh, a row's identity changes: one product reads the identity basis
        once for all of them, where one a row would read it once a row)."""
        stale = [k for k, row in enumerate(rows) if self._identity[row] is not identities[k]]
        if stale:
            self._base[rows[stale]] = self.model.identity_points(np.stack([identities[k] for k in stale]))
            for k in stale:
                self._identity[rows[k]] = identities[k]
        return self._base[rows]

    def _fill_lost(self, rows, xy) -> np.ndarray:
        """A few non-finite landmarks taken from the row's last reprojection; (n,) False where that cannot be: too
        many lost, or all the points within a pixel (no camera fits them: cv2's SQPNP and the translation's normal
        equations fail on them). Such a row reads as lost; its points are replaced by its last reprojection, or by
        STAND_IN, so that the rest of the pass's arithmetic runs as for any row."""
        usable = np.ones(len(rows), bool)
        if not np.isfinite(xy.sum()):
            bad = ~np.isfinite(xy).all(-1)
            for k in np.flatnonzero(bad.any(1)):
                if not self._has_last[rows[k]] or bad[k].mean() > MAX_LOST_POINTS:
                    usable[k] = False
                else:
                    xy[k, bad[k]] = self._last_points[rows[k], bad[k]]
        kept = np.flatnonzero(usable)  # finite from here
        # x and y each along a contiguous axis: numpy reduces a (n, 468, 2) array over its middle axis one output
        # value at a time (0.45 ms for 16 rows here, against 0.02 ms this way)
        spread = np.ascontiguousarray(xy[kept].transpose(0, 2, 1))
        usable[kept] = ((spread.max(-1) - spread.min(-1)) >= 1.0).all(-1)
        for k in np.flatnonzero(~usable):
            xy[k] = self._last_points[rows[k]] if self._has_last[rows[k]] else STAND_IN
        return usable

