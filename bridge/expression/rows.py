"""ExpressionRows: the regressor's measured outputs of many faces finished at once, one row per stream, as each
stream's ExpressionEstimator.estimate_outputs finishes its own (weights, head rotation, morphable-model parameters,
region confidence), the per-face arithmetic done as arrays over the rows.

Each row keeps its subject's own ExpressionEstimator: its identity (read once a frame, its neutral points cached
here per row until it changes) and its identity refreshes (`observe`: inline, or on the shared refresher). Only the
shipped model's contract with a head-rotation output is taken here (what the batched tracker runs); any other
model goes through the estimator one face at a time.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from bridge import compiled
from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import (
    FLIP,
    MODEL_ID,
    batch_head_matrices,
    load_model,
    rotvec_from_matrix,
    rotvecs_from_matrices,
)

MAX_LOST_POINTS = 0.25  # as ExpressionEstimator._check: more non-finite landmarks than this and the face is unusable
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
        """compiled_loops: None runs the reprojection and rotations as compiled loops where numba is installed
        (rows_compiled.py); False keeps numpy's arithmetic."""
        self.model = load_model()
        self._base = np.zeros((rows, 1404))  # each row's identity_points, planar (3 x 468)
        self._identity: list = [None] * rows  # the identity array each base was made from
        self._last_points = np.zeros((rows, 468, 2))  # the last reprojection (fills a few lost landmarks)
        self._has_last = np.zeros(rows, bool)
        self.region_names = (*self.model.region_names, "tongue")
        planar = lambda flat: np.ascontiguousarray(  # noqa: E731 (k, 468 * 3) point-major -> (k, 3 * 468)
            flat.reshape(-1, 468, 3).transpose(0, 2, 1).reshape(len(flat), -1))
        m = self.model
        self._neutral_planar = planar(m._neutral468[None])[0]
        self._id_planar, self._exp_planar = planar(m._id468), planar(m._exp468)
        self._eye_angles = m.eye_yaw_pitch_deg.reshape(len(m.eye_yaw_pitch_deg), 4)
        self._region_average = np.ascontiguousarray(m.region_average, dtype=np.float64)
        self._compiled = compiled.warm_kernels("bridge.expression.rows_compiled", compiled_loops,
                                               "numpy computes the rows instead")

    def reset(self, rows) -> None:
        self._has_last[rows] = False
        for row in np.atleast_1d(rows):
            self._identity[int(row)] = None

    def finish(self, rows: np.ndarray, engines: list, landmarks: np.ndarray, outputs: dict[str, np.ndarray],
               sizes: np.ndarray) -> ExpressionBatch:
        """rows (n,) distinct; engines: each row's ExpressionEstimator; landmarks (n, 468, >=2) frame pixels;
        outputs: the model's outputs by name, (n, ...); sizes (n, 2) width, height."""
        model, contract = self.model, engines[0].contract
        n = len(rows)
        xy = np.array(landmarks[..., :2], dtype=np.float64)
        usable = self._fill_lost(rows, xy)
        weights = np.clip(np.nan_to_num(_pick(contract, "blendshapes", outputs, n)), 0.0, 1.0)
        rot = self._head_matrices(_pick(contract, "head_rotation", outputs, n)[:, :3])
        focal = sizes[:, 0].astype(np.float64)
        centre = sizes.astype(np.float64) / 2.0
        for k in range(n):  # the frame's identity refresh (inline) comes before its identity is read, as there
            if usable[k]:
                engines[k].observe(weights[k], rot[k], xy[k], float(focal[k]), (float(centre[k, 0]),
                                                                                float(centre[k, 1])))
        identities = [engine.identity for engine in engines]  # read once: a refresher may replace them meanwhile
        self._refresh_bases(rows, identities)
        # the points planar, (n, 3, 468): every coordinate a contiguous row
        shape = (self._base[rows] + weights @ self._exp_planar).reshape(n, 3, 468)
        t, self._last_points[rows], rms = self._reproject(FLIP @ rot, shape, xy, focal, centre)
        self._has_last[rows] = True
        confidence = np.round(1.0 / (1.0 + (rms / 4.0) ** 2), 4)
        w64 = weights.astype(np.float64)
        eyes = (w64 @ self._eye_angles).reshape(n, 2, 2)  # (n, 2 eyes, yaw/pitch) degrees
        eye_rot = self._rotvecs(self._head_matrices(
            np.concatenate([eyes.reshape(2 * n, 2), np.zeros((2 * n, 1))], 1))).reshape(n, 2, 3)
        f32 = np.float32
        return ExpressionBatch(
            usable=usable, blendshapes=weights.astype(f32),
            identity=np.stack([v[:model.num_ict_identity] for v in identities]).astype(f32),
            expression=(w64 @ model.ict_to_arkit).astype(f32), jaw_rotation=(w64 @ model.jaw_rotvec).astype(f32),
            head_rotation=self._rotvecs(rot).astype(f32), head_translation=t.astype(f32),
            eye_rotation_left=eye_rot[:, 0].astype(f32), eye_rotation_right=eye_rot[:, 1].astype(f32),
            region_confidence=np.concatenate([confidence, np.zeros((n, 1))], 1), region_names=self.region_names)

    def _head_matrices(self, angles: np.ndarray) -> np.ndarray:
        """model.batch_head_matrices: (n, 3) degrees -> (n, 3, 3); compiled where numba is."""
        if self._compiled is None:
            return batch_head_matrices(angles)
        return self._compiled.head_matrices(np.ascontiguousarray(angles, dtype=np.float64))

    def _rotvecs(self, m: np.ndarray) -> np.ndarray:
        """model.rotvecs_from_matrices: (n, 3, 3) -> (n, 3); compiled where numba is (rotations about pi by cv2)."""
        if self._compiled is None:
            return rotvecs_from_matrices(m)
        out, turned = self._compiled.rotvecs(np.ascontiguousarray(m, dtype=np.float64))
        for i in np.flatnonzero(turned):
            out[i] = rotvec_from_matrix(m[i])
        return out

    def _reproject(self, rot, shape, xy, focal, centre) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each face's model points (shape, planar (n, 3, 468)) under its rotation (FLIP applied), its translation
        solved from its landmarks xy (n, 468, 2) -> (translation (n, 3), the points reprojected (n, 468, 2), rms
        reprojection error per region in noise units (n, R)); compiled where numba is (rows_compiled.py)."""
        u, v = np.ascontiguousarray(xy[..., 0]), np.ascontiguousarray(xy[..., 1])
        if self._compiled is not None:
            return self._compiled.reproject(np.ascontiguousarray(rot), shape, u, v, focal, centre,
                                            self._region_average, NOISE_FRACTION)
        cam = rot @ shape
        t = _solve_translations(cam, u, v, focal, centre)
        cam += t[:, :, None]
        inv_z = focal[:, None] / cam[:, 2]
        du = cam[:, 0] * inv_z + centre[:, :1] - u
        dv = cam[:, 1] * inv_z + centre[:, 1:] - v
        sigma = NOISE_FRACTION * (u.max(1) - u.min(1) + 1e-6)
        error2 = (du * du + dv * dv) / (sigma * sigma)[:, None]
        return t, np.stack([u + du, v + dv], -1), np.sqrt(error2 @ self._region_average.T)

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

    def _refresh_bases(self, rows, identities) -> None:
        stale = [k for k, row in enumerate(rows) if self._identity[row] is not identities[k]]
        if stale:
            ids = np.stack([identities[k] for k in stale]).astype(np.float64)
            self._base[rows[stale]] = self._neutral_planar + ids @ self._id_planar
            for k in stale:
                self._identity[rows[k]] = identities[k]


def _pick(contract, role: str, outputs: dict[str, np.ndarray], n: int) -> np.ndarray:
    """ModelContract.pick over n rows: (n, width) float32."""
    name, sl = contract.outputs[role]
    v = np.asarray(outputs[name], dtype=np.float32).reshape(n, -1)
    return v[:, sl[0]:sl[1]] if sl else v


def _solve_translations(p: np.ndarray, u: np.ndarray, v: np.ndarray, focal: np.ndarray,
                        centre: np.ndarray) -> np.ndarray:
    """model.solve_translation over n faces, points planar (n, 3, P) and pixels u, v (n, P): the normal equations
    of its 2P x 3 system, summed in closed form."""
    du, dv = u - centre[:, :1], v - centre[:, 1:]
    f = focal[:, None]
    bu, bv = du * p[:, 2] - f * p[:, 0], dv * p[:, 2] - f * p[:, 1]
    count = p.shape[2]
    ata = np.zeros((len(p), 3, 3))
    ata[:, 0, 0] = ata[:, 1, 1] = count * focal ** 2
    ata[:, 0, 2] = ata[:, 2, 0] = -focal * du.sum(1)
    ata[:, 1, 2] = ata[:, 2, 1] = -focal * dv.sum(1)
    ata[:, 2, 2] = (du * du).sum(1) + (dv * dv).sum(1)
    atb = np.stack([focal * bu.sum(1), focal * bv.sum(1), -(du * bu).sum(1) - (dv * bv).sum(1)], 1)
    return np.linalg.solve(ata, atb[..., None])[..., 0]
