"""The expression result's arithmetic, written once: what the regressor's weights and head rotation make of one
face's landmarks (the translation, the reprojection and its error per region, the head's and eyes' rotation vectors),
for one face (`finish_face`: ExpressionEstimator, `facebridge run`) and for the rows of a batched pass
(`finish_rows`, the same `finish_face` row by row: ExpressionRows, `facebridge serve`).

The functions are plain numpy and math over one face, in the subset of Python numba compiles: where numba is
installed, result_compiled.py compiles these same functions and both paths run the compiled ones; without it they
run as written. The quantities are model.py's (solve_translation, project, cv2.Rodrigues of the head and eye
rotations, ict_expression, jaw_rotation) in fewer steps: to rounding, not bit for bit
(tests/expression/test_result.py).
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from bridge import compiled
from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import FLIP, MorphableModel, head_matrix, rotvec_from_matrix

HEAD, EYE_LEFT, EYE_RIGHT = 0, 1, 2  # the rows of finish_face's rotation vectors


def unit_interval(values: np.ndarray) -> np.ndarray:
    """np.clip(np.nan_to_num(values), 0, 1), equal to it value for value, at a third of its numpy overhead."""
    out = np.minimum(np.maximum(values, 0.0), 1.0)
    if math.isnan(float(out.sum())):  # NaN survives the clip, and only NaN makes the sum of values in [0, 1] NaN
        out[np.isnan(out)] = 0.0
    return out


def region_confidence(rms):
    """A region's confidence from its rms reprojection error in noise units (a float or an array of them)."""
    return 1.0 / (1.0 + (rms / 4.0) ** 2)


def axis_angle(rx: float, ry: float, rz: float, trace: float):
    """cv2.Rodrigues of a rotation matrix from its skew part (m21 - m12, m02 - m20, m10 - m01) and trace, as cv2
    computes it without its SVD re-orthonormalisation (the matrices here are orthonormal to rounding) -> (x, y, z,
    turned): turned where the rotation is about pi, where the formula turns (the caller asks cv2: `mend`)."""
    s = math.sqrt((rx * rx + ry * ry + rz * rz) * 0.25)
    c = min(max((trace - 1.0) * 0.5, -1.0), 1.0)
    if s < 1e-5:  # no rotation; or a half turn
        return 0.0, 0.0, 0.0, c <= 0.0
    k = math.acos(c) / (2.0 * s)
    return rx * k, ry * k, rz * k, False


def eye_axis_angle(yaw_deg: float, pitch_deg: float):
    """axis_angle of head_matrix(yaw, pitch, 0), an eyeball's rotation, in closed form: with no roll the matrix is
    [[cy, -sy sp, sy cp], [0, cp, sp], [-sy, -cy sp, cy cp]] (model.head_matrix)."""
    y, p = math.radians(yaw_deg), math.radians(pitch_deg)
    cy, sy, cp, sp = math.cos(y), math.sin(y), math.cos(p), math.sin(p)
    return axis_angle(-sp * (1.0 + cy), sy * (1.0 + cp), sy * sp, cy + cp + cy * cp)


def finish_face(rot, points, xy, focal, cx, cy, t, solve, eyes, region_average, noise_fraction):
    """One face: rot (3, 3) its head rotation (model space); points (P, 3) its model points; xy (P, 2) its landmarks
    (pixels); the camera's focal length and centre; t (3,) its translation, solved from the landmarks where `solve`
    (solve_translation's normal equations, summed in closed form); eyes (4,) each eye's (yaw, pitch) in degrees,
    [left, right]; region_average (R, P) -> (translation (3,), reprojection residual u (P,), v (P,), rms reprojection
    error per region in noise units (R,), rotation vectors (3, 3): head, left eye, right eye, turned (3,): the rows
    that are rotations about pi, left to `mend`)."""
    cam = (FLIP @ rot) @ points.T  # (3, P) camera axes, before translation: every coordinate a row
    count = xy.shape[0]
    e = np.empty((4, count))  # rows: 1, du, dv, du^2 + dv^2
    e[0] = 1.0
    e[1] = xy[:, 0] - cx
    e[2] = xy[:, 1] - cy
    du, dv = e[1], e[2]
    e[3] = du * du + dv * dv
    if solve:
        t = _translation(e @ cam.T, e @ e[0], focal)  # e[0] is ones: e @ e[0] sums the rows (numba's sum over
        # an axis costs six times as much)
    fiz = focal / (cam[2] + t[2])
    pu = (cam[0] + t[0]) * fiz - du
    pv = (cam[1] + t[1]) * fiz - dv
    sigma = noise_fraction * (du.max() - du.min() + 1e-6)  # the assumed landmark noise: a share of the face's width
    rms = np.sqrt(region_average @ (pu * pu + pv * pv)) / sigma
    rotations = np.empty((3, 3))
    turned = np.zeros(3, np.bool_)
    m = rot
    rotations[HEAD, 0], rotations[HEAD, 1], rotations[HEAD, 2], turned[HEAD] = axis_angle(
        m[2, 1] - m[1, 2], m[0, 2] - m[2, 0], m[1, 0] - m[0, 1], m[0, 0] + m[1, 1] + m[2, 2])
    for row, at in ((EYE_LEFT, 0), (EYE_RIGHT, 2)):
        rotations[row, 0], rotations[row, 1], rotations[row, 2], turned[row] = eye_axis_angle(eyes[at], eyes[at + 1])
    return t, pu, pv, rms, rotations, turned


def finish_rows(rot, points, xy, focal, centre, eyes, region_average, noise_fraction, translation, reprojected, rms,
                rotations, turned):
    """finish_face of n faces, each solving its translation: rot (n, 3, 3), points (n, P, 3), xy (n, P, 2), focal
    (n,), centre (n, 2), eyes (n, 4); into translation (n, 3), reprojected (n, P, 2) (the landmarks plus the
    residual), rms (n, R), rotations (n, 3, 3) and turned (n, 3)."""
    for i in range(rot.shape[0]):
        t, pu, pv, r, v, b = finish_face(rot[i], points[i], xy[i], focal[i], centre[i, 0], centre[i, 1],
                                         translation[i], True, eyes[i], region_average, noise_fraction)
        translation[i] = t
        reprojected[i, :, 0] = xy[i, :, 0] + pu
        reprojected[i, :, 1] = xy[i, :, 1] + pv
        rms[i] = r
        rotations[i] = v
        turned[i] = b


def _translation(s, e, f):
    """solve_translation's 3 x 3 normal equations from the moments s[i, j] = sum of row i of (1, du, dv, |d|^2)
    times coordinate j of the rotated points, and e = the rows' sums (n, sum du, sum dv, sum |d|^2); solved by
    elimination (the matrix is [[a, 0, b1], [0, a, b2], [b1, b2, c]])."""
    sx, sy, sux, suz, svy, svz, sdz = s[0, 0], s[0, 1], s[1, 0], s[1, 2], s[2, 1], s[2, 2], s[3, 2]
    n, su, sv, sd = e[0], e[1], e[2], e[3]
    a, b1, b2 = n * f * f, -f * su, -f * sv
    r0, r1, r2 = f * (suz - f * sx), f * (svz - f * sy), -(sdz - f * (sux + svy))
    tz = (r2 - (b1 * r0 + b2 * r1) / a) / (sd - (b1 * b1 + b2 * b2) / a)
    return np.array([(r0 - b1 * tz) / a, (r1 - b2 * tz) / a, tz])


def mend(rotations: np.ndarray, turned: np.ndarray, rot: np.ndarray, eyes: np.ndarray) -> None:
    """finish_face's rotation vectors of rotations about pi (turned), from cv2 (rare: a head or eye turned round)."""
    for row in np.flatnonzero(turned):
        if row == HEAD:
            rotations[row] = rotvec_from_matrix(rot)
        else:
            at = 0 if row == EYE_LEFT else 2
            rotations[row] = rotvec_from_matrix(head_matrix(float(eyes[at]), float(eyes[at + 1]), 0.0))


class ResultMath:
    """The per-model constants of the result: the parameter block's matrices side by side, the region averages; and
    finish_face / finish_rows, compiled where numba is (result_compiled.py)."""

    def __init__(self, model: MorphableModel, compiled_loops: bool | None = None) -> None:
        self.model = model
        n_exp = model.ict_to_arkit.shape[1]
        # weights (52,) @ params -> the 53 ICT expression coefficients, the jaw's axis-angle, both eyes' (yaw, pitch)
        self.params = np.ascontiguousarray(np.concatenate([model.ict_to_arkit, model.jaw_rotvec,
                                                           model.eye_yaw_pitch_deg.reshape(52, 4)], 1))
        self.expression, self.jaw, self.eyes = slice(0, n_exp), slice(n_exp, n_exp + 3), slice(n_exp + 3, n_exp + 7)
        self.region_average = np.ascontiguousarray(model.region_average, dtype=np.float64)
        kernels = compiled.warm_kernels("bridge.expression.result_compiled", compiled_loops,
                                        "numpy computes the expression result instead")
        self.compiled = kernels is not None
        self.finish_face = kernels.finish_face if kernels else finish_face
        self.finish_rows = kernels.finish_rows if kernels else finish_rows

    def face(self, rot: np.ndarray, points: np.ndarray, xy: np.ndarray, focal: float, centre, t, eyes: np.ndarray):
        """finish_face with this model's regions and the assumed noise, the turned rotations mended; t None: solved."""
        solve = t is None
        out = self.finish_face(rot, points, xy, float(focal), float(centre[0]), float(centre[1]),
                               np.zeros(3) if solve else np.asarray(t, np.float64), solve, eyes,
                               self.region_average, NOISE_FRACTION)
        if out[5].any():
            mend(out[4], out[5], rot, eyes)
        return out[:5]


@lru_cache(maxsize=8)
def result_math(model: MorphableModel, compiled_loops: bool | None = None) -> ResultMath:
    """The ResultMath of a model (constants only: shared by every estimator of that model, on any thread)."""
    return ResultMath(model, compiled_loops)
