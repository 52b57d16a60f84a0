"""The head pose's per-frame refine as one compiled loop (numba): Gauss-Newton on the reprojection error from the
last frame's pose, the least squares cv2.solvePnP's iterative solver minimises: `refine` for one stream
(HeadPoseEstimator), `refine_rows` running the same `refine` over the rows of many streams (HeadPoseRows).

cv2's solver cost 0.12-0.15 ms a frame here, and about twice that on a frame after the core idled (its code and
buffers cold); this loop costs about 9 microseconds a frame and lands on the same minimum (within 0.001 degrees on the
sample: tests/stages/test_head_pose.py). Imported only where numba is (bridge/compiled.py).
"""
from __future__ import annotations

import math

import numpy as np

from bridge.compiled import compiled


@compiled
def _cost(model, img, focal, cx, cy, rot, t):
    """Sum of squared reprojection errors (px^2) of the model points under (rot, t)."""
    total = 0.0
    for i in range(model.shape[0]):
        x, y, z = model[i, 0], model[i, 1], model[i, 2]
        y0 = rot[0, 0] * x + rot[0, 1] * y + rot[0, 2] * z + t[0]
        y1 = rot[1, 0] * x + rot[1, 1] * y + rot[1, 2] * z + t[1]
        y2 = rot[2, 0] * x + rot[2, 1] * y + rot[2, 2] * z + t[2]
        inv_z = 1.0 / y2
        du = focal * y0 * inv_z + cx - img[i, 0]
        dv = focal * y1 * inv_z + cy - img[i, 1]
        total += du * du + dv * dv
    return total


@compiled
def _step(model, img, focal, cx, cy, rot, t):
    """The Gauss-Newton step (rotation vector, translation). With x = X/Z, y = Y/Z of a camera point and
    fz = focal/Z: d(u)/d(point) = fz (1, 0, -x), d(v)/d(point) = fz (0, 1, -y), and a rotation w moves the rotated
    point a by w x a, so the rows of the Jacobian are (a x g, g)."""
    jtj = np.zeros((6, 6))
    jtr = np.zeros(6)
    ju = np.zeros(6)
    jv = np.zeros(6)
    for i in range(model.shape[0]):
        x, y, z = model[i, 0], model[i, 1], model[i, 2]
        a0 = rot[0, 0] * x + rot[0, 1] * y + rot[0, 2] * z
        a1 = rot[1, 0] * x + rot[1, 1] * y + rot[1, 2] * z
        a2 = rot[2, 0] * x + rot[2, 1] * y + rot[2, 2] * z
        y0, y1, y2 = a0 + t[0], a1 + t[1], a2 + t[2]
        inv_z = 1.0 / y2
        fz = focal * inv_z
        xs, ys = y0 * inv_z, y1 * inv_z
        ru = focal * y0 * inv_z + cx - img[i, 0]
        rv = focal * y1 * inv_z + cy - img[i, 1]
        ju[0], ju[1], ju[2], ju[3], ju[4], ju[5] = -a1 * xs * fz, (a2 + a0 * xs) * fz, -a1 * fz, fz, 0.0, -xs * fz
        jv[0], jv[1], jv[2], jv[3], jv[4], jv[5] = (-a1 * ys - a2) * fz, a0 * ys * fz, a0 * fz, 0.0, fz, -ys * fz
        for r in range(6):
            jtr[r] += ju[r] * ru + jv[r] * rv
            for c in range(r + 1):  # the lower triangle: J^T J is symmetric (_solve_spd reads only that half)
                jtj[r, c] += ju[r] * ju[c] + jv[r] * jv[c]
    return _solve_spd(jtj, jtr, -1.0)


@compiled
def _solve_spd(a, b, sign):
    """sign * x where a x = b for a symmetric positive definite 6x6 a (only its lower triangle is read), by Cholesky
    (np.linalg.solve would compile numba's LAPACK bindings: seconds more on a first start); NaN where a is not
    positive definite (the step is then refused)."""
    n = b.shape[0]
    low = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            acc = a[i, j]
            for k in range(j):
                acc -= low[i, k] * low[j, k]
            if i == j:
                if not acc > 0.0:
                    return np.full(n, math.nan)
                low[i, i] = math.sqrt(acc)
            else:
                low[i, j] = acc / low[j, j]
    y = np.empty(n)
    for i in range(n):
        acc = b[i]
        for k in range(i):
            acc -= low[i, k] * y[k]
        y[i] = acc / low[i, i]
    x = np.empty(n)
    for i in range(n - 1, -1, -1):
        acc = y[i]
        for k in range(i + 1, n):
            acc -= low[k, i] * x[k]
        x[i] = acc / low[i, i]
    for i in range(n):
        x[i] *= sign
    return x


@compiled
def _matmul3(a, b):
    """a @ b for 3x3 matrices, in loops (numba's @ would compile its BLAS bindings: seconds on a first start)."""
    out = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            out[i, j] = a[i, 0] * b[0, j] + a[i, 1] * b[1, j] + a[i, 2] * b[2, j]
    return out


@compiled
def _rotvec_matrix(w):
    """Rodrigues' formula: the rotation matrix of the rotation vector w's first three values."""
    theta = math.sqrt(w[0] * w[0] + w[1] * w[1] + w[2] * w[2])
    d = max(theta, 1e-300)
    k0, k1, k2 = w[0] / d, w[1] / d, w[2] / d
    s, c = math.sin(theta), 1.0 - math.cos(theta)
    skew = np.zeros((3, 3))
    skew[0, 1], skew[0, 2], skew[1, 0], skew[1, 2], skew[2, 0], skew[2, 1] = -k2, k1, k2, -k0, -k1, k0
    square = _matmul3(skew, skew)
    out = np.empty((3, 3))
    for i in range(3):
        for j in range(3):
            out[i, j] = (1.0 if i == j else 0.0) + s * skew[i, j] + c * square[i, j]
    return out


@compiled
def refine(model, img, focal, cx, cy, rot, t, rot_out, t_out, iterations, stop):
    """Refine (rot, t) on the model points (P, 3) against their image points (P, 2) into rot_out, t_out, at most
    `iterations` steps, ending at a step below `stop` (head_pose.REFINE_ITERATIONS, REFINE_STOP); False when the
    pose at hand is not finite (the caller solves from scratch then)."""
    # scalar loops, no array expressions: each of those would compile numba's ufunc machinery (seconds, once)
    cost = _cost(model, img, focal, cx, cy, rot, t)
    if not math.isfinite(cost):
        return False
    for i in range(3):
        t_out[i] = t[i]
        for j in range(3):
            rot_out[i, j] = rot[i, j]
    new_t = np.empty(3)
    for _ in range(iterations):
        step = _step(model, img, focal, cx, cy, rot_out, t_out)
        new_rot = _matmul3(_rotvec_matrix(step), rot_out)
        largest = 0.0
        for i in range(3):
            new_t[i] = t_out[i] + step[3 + i]
        for i in range(6):
            largest = max(largest, abs(step[i]))
        new_cost = _cost(model, img, focal, cx, cy, new_rot, new_t)
        if not (math.isfinite(new_cost) and new_cost <= cost):
            break  # the step would raise the error: the pose at hand is the minimum
        for i in range(3):
            t_out[i] = new_t[i]
            for j in range(3):
                rot_out[i, j] = new_rot[i, j]
        cost = new_cost
        if largest <= stop:
            break
    return True


@compiled
def refine_rows(model, img, focal, centre, rot, t, rot_out, t_out, ok, iterations, stop):
    """`refine` of each row: img (n, P, 2), focal (n,), centre (n, 2), rot (n, 3, 3), t (n, 3) into rot_out, t_out,
    ok (n,) bool. One call for a pass of many streams (HeadPoseRows), the interpreter lock released throughout; each
    row's arithmetic is `refine`'s, so a stream gets the pose its own HeadPoseEstimator gives, bit for bit."""
    for i in range(img.shape[0]):
        ok[i] = refine(model, img[i], focal[i], centre[i, 0], centre[i, 1], rot[i], t[i], rot_out[i], t_out[i],
                       iterations, stop)


def warm() -> None:
    """Compile (or load from the cache) for the estimator's array types, so no frame pays it."""
    model = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    img = np.array([[320.0, 240.0], [330.0, 240.0], [320.0, 250.0], [331.0, 251.0]])
    refine(model, img, 640.0, 320.0, 240.0, np.eye(3), np.array([0.0, 0.0, 60.0]), np.empty((3, 3)), np.empty(3), 20,
           1e-5)
    refine_rows(model, img[None], np.array([640.0]), np.array([[320.0, 240.0]]), np.eye(3)[None],
                np.array([[0.0, 0.0, 60.0]]), np.empty((1, 3, 3)), np.empty((1, 3)), np.empty(1, np.bool_), 20, 1e-5)
