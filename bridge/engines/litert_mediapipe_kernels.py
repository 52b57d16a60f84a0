"""MediaPipe's three custom ops as compiled loops (numba, cached on disk): the op definitions' float arithmetic.

Landmarks2TransformMatrix, TransformTensorBilinear and TransformLandmarks (mediapipe/util/tflite/operations, v2)
run between and after the two LiteRT parts of the cut attention mesh (litert_mediapipe_ops.py). On arrays this small
numpy's cost is its per-call overhead, so each op is one loop here: float64 where the op's reference computes in
double (the matrix, the sample positions), float32 for the blend, in the same order, no fused multiply-adds
(fastmath off). The machine code is cached next to this module (__pycache__), else in numba's user cache
(~/.cache/numba, NUMBA_CACHE_DIR); where neither can be written the kernels compile again in each process (about
3 s at the session's load, `warm()`), where numba alone would refuse to import them.
"""
from __future__ import annotations

import math

import numba  # noqa: F401 - imported here so that a missing numba is an ImportError of this module (litert_backend)
import numpy as np

from bridge.compiled import compiled as _compiled


@_compiled
def region_matrix(landmarks, subset, left, right, target_rotation, ow, oh, scale_x, scale_y, out):
    """Landmarks2TransformMatrix: `out` (4, 4) float32, output-crop pixels to feature-map pixels of the region."""
    dy = np.float32(landmarks[right, 1] - landmarks[left, 1])
    dx = np.float32(landmarks[right, 0] - landmarks[left, 0])
    rot = target_rotation - math.atan2(np.float64(dy), np.float64(dx))
    c, s = math.cos(rot), math.sin(rot)
    u_lo = v_lo = math.inf
    u_hi = v_hi = -math.inf
    for i in subset:
        x, y = np.float64(landmarks[i, 0]), np.float64(landmarks[i, 1])
        u, v = x * c - y * s, x * s + y * c
        u_lo, u_hi = min(u_lo, u), max(u_hi, u)
        v_lo, v_hi = min(v_lo, v), max(v_hi, v)
    mu, mv = (u_hi + u_lo) / 2, (v_hi + v_lo) / 2
    cx, cy = mu * c + mv * s, -mu * s + mv * c  # the centre rotated back
    sx, sy = scale_x * (u_hi - u_lo) / ow, scale_y * (v_hi - v_lo) / oh
    # shift(centre) @ rotation(-rot) @ scale @ shift(-output centre), multiplied out (doubles, rounded once)
    out[:] = 0.0
    out[0, 0], out[0, 1], out[0, 3] = c * sx, s * sy, cx - (c * sx * ow + s * sy * oh) / 2
    out[1, 0], out[1, 1], out[1, 3] = -s * sx, c * sy, cy - (-s * sx * ow + c * sy * oh) / 2
    out[2, 2] = out[3, 3] = 1.0


@_compiled
def bilinear_crop(feature, m, out):
    """TransformTensorBilinear: `out` (S, S, C) float32 from `feature` (H, W, C) float32 by the (4, 4) matrix `m`:
    each output pixel's centre mapped, half a pixel back, bilinear, 0 where the sample falls outside the map."""
    h, w, ch = feature.shape
    size = out.shape[0]
    m00, m01, m03 = np.float64(m[0, 0]), np.float64(m[0, 1]), np.float64(m[0, 3])
    m10, m11, m13 = np.float64(m[1, 0]), np.float64(m[1, 1]), np.float64(m[1, 3])
    kx = m03 + m00 * 0.5 + m01 * 0.5 - 0.5
    ky = m13 + m10 * 0.5 + m11 * 0.5 - 0.5
    for yi in range(size):
        for xi in range(size):
            tx = m00 * xi + m01 * yi + kx
            ty = m10 * xi + m11 * yi + ky
            if not (tx >= 0 and ty >= 0 and tx <= w - 1 and ty <= h - 1):
                out[yi, xi, :] = 0.0
                continue
            fx0, fy0 = math.floor(tx), math.floor(ty)
            fx, fy = np.float32(tx - fx0), np.float32(ty - fy0)
            x0, y0 = int(fx0), int(fy0)
            x1, y1 = min(x0 + 1, w - 1), min(y0 + 1, h - 1)
            for k in range(ch):
                c0, c1 = feature[y0, x0, k], feature[y0, x1, k]
                c2, c3 = feature[y1, x0, k], feature[y1, x1, k]
                top = (c1 - c0) * fx + c0
                bottom = (c3 - c2) * fx + c2
                out[yi, xi, k] = (bottom - top) * fy + top


@_compiled
def transform_points(points, m, out):
    """TransformLandmarks, 2-D: `out` (K, 2) float32 = points[:, :2] @ m[:2, :2].T + m[:2, 3]."""
    for i in range(points.shape[0]):
        x, y = points[i, 0], points[i, 1]
        out[i, 0] = x * m[0, 0] + y * m[0, 1] + m[0, 3]
        out[i, 1] = x * m[1, 0] + y * m[1, 1] + m[1, 3]


@_compiled
def region_crops(l0, l1, l2, subsets, starts, params, feature, mats, crops):
    """The three regions' matrices (`mats` (3, 4, 4)) and feature crops (`crops` (3, S, S, C)) in one call: region
    i's landmarks l<i>, its subset indices subsets[starts[i]:starts[i + 1]], params[i] = (left, right, target
    rotation, output width, height, scale x, y)."""
    for i in range(3):
        lm = l0 if i == 0 else (l1 if i == 1 else l2)
        p = params[i]
        region_matrix(lm, subsets[starts[i]:starts[i + 1]], int(p[0]), int(p[1]), p[2], p[3], p[4], p[5], p[6],
                      mats[i])
        bilinear_crop(feature, mats[i], crops[i])


def warm() -> None:
    """Compile (or load from the cache) the session's two kernels for its array types, so no frame pays it."""
    landmarks, m = np.zeros((468, 3), np.float32), np.eye(4, dtype=np.float32)
    transform_points(np.zeros((5, 2), np.float32), m, np.empty((5, 2), np.float32))
    region_crops(landmarks, landmarks, landmarks, np.arange(12, dtype=np.intp), np.array([0, 4, 8, 12], np.intp),
                 np.array([[0, 1, 0.0, 16, 16, 1.5, 1.5]] * 3), np.zeros((48, 48, 32), np.float32),
                 np.empty((3, 4, 4), np.float32), np.empty((3, 16, 16, 32), np.float32))
