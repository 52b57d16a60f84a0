"""ExpressionRows' per-row arithmetic as compiled loops (numba), where numpy's cost is its calls' own overhead:

- `reproject`: each row's model points put in the camera, the face's translation solved from its landmarks, the
  points reprojected, and the reprojection error averaged per region. In numpy (`ExpressionRows._reproject`) some
  forty array calls a pass, about 0.35 ms a pass of 16 faces and 1.1 ms of 64 on one EPYC core; here the same
  normal equations of the translation, summed point by point rather than pairwise.
- `head_matrices` and `rotvecs`: model.batch_head_matrices and model.rotvecs_from_matrices (about 25 and 22 us a
  call in numpy at 8-16 rows, two calls of each a pass), the same formulas row by row.

Results agree with numpy's to rounding (tests/expression/test_rows.py). Imported only where numba is
(bridge/compiled.py).
"""
from __future__ import annotations

import math

import numpy as np

from bridge.compiled import compiled


@compiled
def _solve3(a, b):
    """a (3, 3) x = b (3,) by Gaussian elimination with partial pivoting (as LAPACK's dgesv); a and b are
    overwritten. NaN where a is singular."""
    for col in range(3):
        pivot = col
        for r in range(col + 1, 3):
            if abs(a[r, col]) > abs(a[pivot, col]):
                pivot = r
        if a[pivot, col] == 0.0:
            return np.full(3, np.nan)
        if pivot != col:
            for c in range(3):
                a[col, c], a[pivot, c] = a[pivot, c], a[col, c]
            b[col], b[pivot] = b[pivot], b[col]
        for r in range(col + 1, 3):
            f = a[r, col] / a[col, col]
            for c in range(col, 3):
                a[r, c] -= f * a[col, c]
            b[r] -= f * b[col]
    x = np.empty(3)
    for r in range(2, -1, -1):
        s = b[r]
        for c in range(r + 1, 3):
            s -= a[r, c] * x[c]
        x[r] = s / a[r, r]
    return x


@compiled
def reproject(rot, shape, u, v, focal, centre, region_average, noise_fraction):
    """rot (n, 3, 3) model-to-camera rotations (FLIP applied); shape (n, 3, P) each face's model points, planar;
    u, v (n, P) its landmarks in pixels; focal (n,); centre (n, 2); region_average (R, P) -> (translation (n, 3),
    reprojected points (n, P, 2), rms reprojection error per region in units of the noise (n, R))."""
    n, _, count = shape.shape
    regions = region_average.shape[0]
    translation = np.empty((n, 3))
    points = np.empty((n, count, 2))
    rms = np.empty((n, regions))
    error2 = np.empty(count)
    for i in range(n):
        m = rot[i]
        f, cx, cy = focal[i], centre[i, 0], centre[i, 1]
        sdu = sdv = sdd = sbu = sbv = sdb = 0.0
        u_lo, u_hi = u[i, 0], u[i, 0]
        for p in range(count):
            s0, s1, s2 = shape[i, 0, p], shape[i, 1, p], shape[i, 2, p]
            c0 = m[0, 0] * s0 + m[0, 1] * s1 + m[0, 2] * s2
            c1 = m[1, 0] * s0 + m[1, 1] * s1 + m[1, 2] * s2
            c2 = m[2, 0] * s0 + m[2, 1] * s1 + m[2, 2] * s2
            du, dv = u[i, p] - cx, v[i, p] - cy
            bu, bv = du * c2 - f * c0, dv * c2 - f * c1
            sdu += du
            sdv += dv
            sdd += du * du + dv * dv
            sbu += bu
            sbv += bv
            sdb += du * bu + dv * bv
            u_lo, u_hi = min(u_lo, u[i, p]), max(u_hi, u[i, p])
        a = np.zeros((3, 3))
        a[0, 0] = a[1, 1] = count * f * f
        a[0, 2] = a[2, 0] = -f * sdu
        a[1, 2] = a[2, 1] = -f * sdv
        a[2, 2] = sdd
        t = _solve3(a, np.array([f * sbu, f * sbv, -sdb]))
        translation[i] = t
        sigma = noise_fraction * (u_hi - u_lo + 1e-6)
        inv_sigma2 = 1.0 / (sigma * sigma)
        for p in range(count):
            s0, s1, s2 = shape[i, 0, p], shape[i, 1, p], shape[i, 2, p]
            c0 = m[0, 0] * s0 + m[0, 1] * s1 + m[0, 2] * s2 + t[0]
            c1 = m[1, 0] * s0 + m[1, 1] * s1 + m[1, 2] * s2 + t[1]
            c2 = m[2, 0] * s0 + m[2, 1] * s1 + m[2, 2] * s2 + t[2]
            inv_z = f / c2
            du = c0 * inv_z + cx - u[i, p]
            dv = c1 * inv_z + cy - v[i, p]
            points[i, p, 0] = u[i, p] + du
            points[i, p, 1] = v[i, p] + dv
            error2[p] = (du * du + dv * dv) * inv_sigma2
        for r in range(regions):
            total = 0.0
            for p in range(count):
                total += error2[p] * region_average[r, p]
            rms[i, r] = math.sqrt(total)
    return translation, points, rms


@compiled
def head_matrices(angles):
    """(B, 3) yaw, pitch, roll degrees -> (B, 3, 3) rotations Ry @ Rx @ Rz (model.batch_head_matrices)."""
    out = np.empty((angles.shape[0], 3, 3))
    for i in range(angles.shape[0]):
        y, p, r = math.radians(angles[i, 0]), math.radians(angles[i, 1]), math.radians(angles[i, 2])
        cy, sy, cp, sp, cr, sr = math.cos(y), math.sin(y), math.cos(p), math.sin(p), math.cos(r), math.sin(r)
        # ry @ rx, with ry = [[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]], rx = [[1, 0, 0], [0, cp, sp], [0, -sp, cp]]
        a = ((cy, -sy * sp, sy * cp), (0.0, cp, sp), (-sy, -cy * sp, cy * cp))
        # ... @ rz, rz = [[cr, sr, 0], [-sr, cr, 0], [0, 0, 1]]
        for k in range(3):
            out[i, k, 0] = a[k][0] * cr - a[k][1] * sr
            out[i, k, 1] = a[k][0] * sr + a[k][1] * cr
            out[i, k, 2] = a[k][2]
    return out


@compiled
def rotvecs(m):
    """(n, 3, 3) rotations -> ((n, 3) axis-angle radians, (n,) True where the rotation is about pi: the formula turns
    there, and model.rotvecs_from_matrices hands such a row to cv2)."""
    n = m.shape[0]
    out = np.empty((n, 3))
    turned = np.zeros(n, np.bool_)
    for i in range(n):
        r0, r1, r2 = m[i, 2, 1] - m[i, 1, 2], m[i, 0, 2] - m[i, 2, 0], m[i, 1, 0] - m[i, 0, 1]
        s = math.sqrt((r0 * r0 + r1 * r1 + r2 * r2) * 0.25)
        c = min(max((m[i, 0, 0] + m[i, 1, 1] + m[i, 2, 2] - 1.0) * 0.5, -1.0), 1.0)
        scale = math.acos(c) / max(2.0 * s, 1e-300)
        out[i, 0], out[i, 1], out[i, 2] = r0 * scale, r1 * scale, r2 * scale
        if s < 1e-5:
            if c > 0:
                out[i, 0] = out[i, 1] = out[i, 2] = 0.0
            else:
                turned[i] = True
    return out, turned


def warm() -> None:
    """Compile (or load from numba's cache) before the first pass needs it."""
    n, count = 1, 468
    rng = np.random.default_rng(0)
    shape = rng.normal(size=(n, 3, count))
    shape[:, 2] -= 60.0
    reproject(np.eye(3)[None].copy(), shape, rng.uniform(0, 640, (n, count)), rng.uniform(0, 480, (n, count)),
              np.full(n, 640.0), np.full((n, 2), 320.0), np.full((2, count), 1.0 / count), 0.005)
    rotvecs(head_matrices(np.zeros((n, 3))))
