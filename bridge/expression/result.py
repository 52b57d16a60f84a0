"""One face's expression result from few whole-array steps: the translation from one product of moments, the
reprojection and region confidence on contiguous coordinate rows, the parameter block from one product.

ExpressionEstimator._result runs this every frame. The quantities are model.py's (solve_translation, project,
cv2.Rodrigues of head_matrix for the eyes, ict_expression, jaw_rotation), computed in fewer numpy calls (each call
costs microseconds of overhead on arrays of 468 points): to rounding, not bit for bit (docs/PERFORMANCE.md,
"Face pipeline on one CPU core").
"""
from __future__ import annotations

import math
from functools import lru_cache

import cv2
import numpy as np

from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import FLIP, MorphableModel, head_matrix, rotvec_from_matrix


def eye_rotvec(yaw_deg: float, pitch_deg: float) -> tuple[float, float, float]:
    """cv2.Rodrigues(head_matrix(yaw, pitch, 0)), the axis-angle of an eyeball, in closed form: with no roll the
    matrix is [[cy, -sy sp, sy cp], [0, cp, sp], [-sy, -cy sp, cy cp]] (model.head_matrix), and Rodrigues' vector is
    its skew part scaled to the angle."""
    y, p = math.radians(yaw_deg), math.radians(pitch_deg)
    cy, sy, cp, sp = math.cos(y), math.sin(y), math.cos(p), math.sin(p)
    rx, ry, rz = -sp * (1.0 + cy), sy * (1.0 + cp), sy * sp  # m21 - m12, m02 - m20, m10 - m01
    s = math.sqrt((rx * rx + ry * ry + rz * rz) * 0.25)
    c = min(max((cy + cp + cy * cp - 1.0) * 0.5, -1.0), 1.0)  # (trace - 1) / 2
    if s < 1e-5:  # no rotation; or a half turn, where the formula turns: cv2's own branch
        return (0.0, 0.0, 0.0) if c > 0 else tuple(rotvec_from_matrix(head_matrix(yaw_deg, pitch_deg, 0.0)).tolist())
    k = math.acos(c) / (2.0 * s)
    return rx * k, ry * k, rz * k


def rotvec(m: np.ndarray) -> np.ndarray:
    """model.rotvec_from_matrix (cv2.Rodrigues) of a rotation matrix, in plain floats as cv2 computes it, without
    its SVD re-orthonormalisation (the matrices here are head_matrix's, orthonormal to rounding); a rotation of
    about pi, where the formula turns, goes to cv2. (3,) float64."""
    (m00, m01, m02), (m10, m11, m12), (m20, m21, m22) = m.tolist()
    rx, ry, rz = m21 - m12, m02 - m20, m10 - m01
    s = math.sqrt((rx * rx + ry * ry + rz * rz) * 0.25)
    c = min(max((m00 + m11 + m22 - 1.0) * 0.5, -1.0), 1.0)
    if s < 1e-5:
        return np.zeros(3) if c > 0 else rotvec_from_matrix(m)
    k = math.acos(c) / (2.0 * s)
    return np.array([rx * k, ry * k, rz * k])


class ResultMath:
    """The per-model constants of the result: the parameter block's matrices side by side, the region averages."""

    def __init__(self, model: MorphableModel) -> None:
        self.model = model
        n_exp = model.ict_to_arkit.shape[1]
        # weights (52,) @ params -> the 53 ICT expression coefficients, the jaw's axis-angle, both eyes' (yaw, pitch)
        self.params = np.ascontiguousarray(np.concatenate([model.ict_to_arkit, model.jaw_rotvec,
                                                           model.eye_yaw_pitch_deg.reshape(52, 4)], 1))
        self.slices = (slice(0, n_exp), slice(n_exp, n_exp + 3), slice(n_exp + 3, n_exp + 7))
        self.region_average = np.ascontiguousarray(model.region_average)

    def pose_fit(self, points: np.ndarray, rot: np.ndarray, xy: np.ndarray, focal: float,
                 centre: tuple[float, float], t: np.ndarray | None = None):
        """(translation (3,), reprojection residual u (468,), v (468,), sigma) of the model points (468, 3)
        rotated by `rot` (model space) onto the landmarks xy (468, 2): t by solve_translation's normal equations
        when not given, the residual = project(points) - xy, sigma the assumed landmark noise (NOISE_FRACTION of
        the face's width)."""
        f = float(focal)
        cam = (FLIP @ rot) @ points.T  # (3, 468) camera axes, before translation: every coordinate a row
        e = np.empty((4, len(xy)))  # rows: 1, du, dv, du^2 + dv^2
        e[0] = 1.0
        np.subtract(xy.T, np.array(centre, np.float64)[:, None], out=e[1:3])  # du, dv
        du, dv = e[1], e[2]
        np.multiply(du, du, out=e[3])
        e[3] += dv * dv
        if t is None:
            t = _translation(e @ cam.T, e.sum(axis=1), f)
        tx, ty, tz = (float(v) for v in t)
        fiz = f / (cam[2] + tz)
        pu = (cam[0] + tx) * fiz
        pu -= du
        pv = (cam[1] + ty) * fiz
        pv -= dv
        lo, hi = cv2.minMaxLoc(du)[:2]  # du = x - cx: the extent of x (one pass, not two reductions)
        sigma = NOISE_FRACTION * (hi - lo + 1e-6)
        return np.asarray(t, np.float64), pu, pv, sigma

    def region_rms(self, pu: np.ndarray, pv: np.ndarray, sigma: float) -> np.ndarray:
        """Per region, the RMS reprojection error in units of sigma."""
        q = pu * pu
        q += pv * pv
        return np.sqrt(self.region_average @ q) / sigma

    def parameters(self, weights: np.ndarray):
        """(ICT expression (53,), jaw axis-angle (3,), left eye, right eye axis-angle (3,)) float32 of the weights."""
        block = np.asarray(weights, np.float64) @ self.params
        exp, jaw, eyes = self.slices
        ly, lp, ry, rp = block[eyes].tolist()
        f32 = np.float32
        return (block[exp].astype(f32), block[jaw].astype(f32), np.array(eye_rotvec(ly, lp), f32),
                np.array(eye_rotvec(ry, rp), f32))


def _translation(s: np.ndarray, e: np.ndarray, f: float) -> tuple[float, float, float]:
    """solve_translation's 3 x 3 normal equations from the moments s[i, j] = sum of row i of (1, du, dv, |d|^2)
    times coordinate j of the rotated points, and e = the rows' sums (n, sum du, sum dv, sum |d|^2); solved by
    elimination (the matrix is [[a, 0, b1], [0, a, b2], [b1, b2, c]])."""
    (sx, sy, _), (sux, _, suz), (_, svy, svz), (_, _, sdz) = s.tolist()
    n, su, sv, sd = e.tolist()
    a, b1, b2 = n * f * f, -f * su, -f * sv
    r0, r1, r2 = f * (suz - f * sx), f * (svz - f * sy), -(sdz - f * (sux + svy))
    tz = (r2 - (b1 * r0 + b2 * r1) / a) / (sd - (b1 * b1 + b2 * b2) / a)
    return (r0 - b1 * tz) / a, (r1 - b2 * tz) / a, tz


@lru_cache(maxsize=4)
def result_math(model: MorphableModel) -> ResultMath:
    """The ResultMath of a model (constants only: shared by every estimator of that model, on any thread)."""
    return ResultMath(model)
