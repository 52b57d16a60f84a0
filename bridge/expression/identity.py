"""Identity refreshes of the regressor path, any number of subjects at once: each subject's frame is a row of stacked
arrays, and the rows' least-squares problems (101 unknowns over 936 residuals each) are formed and solved together,
so many refreshes pay numpy's per-call overhead once.

One frame's identity estimate, pose and expression held: the camera translation that best projects the subject's
current shape onto its landmarks, then a Gauss-Newton step of the landmark reprojection (468 points) under the
identity prior (fit.identity_prior). A row's result does not depend on the other rows (every product is a stack of
per-row products), so a subject refreshed in a batch of many gets what it gets alone
(tests/expression/test_identity.py). Used by ExpressionEstimator inline (one row) and by the shared
IdentityRefresher (all the observations waiting, one batch).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from bridge.expression.fit import NOISE_FRACTION, identity_prior
from bridge.expression.model import FLIP, MorphableModel

IDENTITY_STEPS = 4  # next() calls identity_refresh_steps takes


def identity_refresh(model: MorphableModel, identity: np.ndarray, weights: np.ndarray, rot: np.ndarray,
                     xy: np.ndarray, focal: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """Each row's identity estimate: identity (n, 101), weights (n, 52), head rotations (n, 3, 3) model space,
    landmarks xy (n, 468, 2) pixels, focal (n,), centre (n, 2) -> (n, 101) float64."""
    steps = identity_refresh_steps(model, identity, weights, rot, xy, focal, centre)
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def identity_refresh_steps(model: MorphableModel, identity: np.ndarray, weights: np.ndarray, rot: np.ndarray,
                           xy: np.ndarray, focal: np.ndarray, centre: np.ndarray):
    """identity_refresh as a generator of IDENTITY_STEPS steps of about a quarter of its CPU each (each next() runs
    one; the last returns the estimates through StopIteration), so a caller can spread it over frames."""
    ids = np.asarray(identity, np.float64)
    n = len(ids)
    w = np.asarray(weights, np.float64)
    xy = np.asarray(xy, np.float64)
    focal = np.asarray(focal, np.float64).reshape(n)
    centre = np.asarray(centre, np.float64).reshape(n, 2)
    # the subject's current shape (model.face_points), rotated into camera axes
    base = model._neutral468 + np.matmul(ids[:, None, :], model._id468)[:, 0]
    shape = (base + np.matmul(w[:, None, :], model._exp468)[:, 0]).reshape(n, 468, 3)
    m = np.matmul(FLIP, np.asarray(rot, np.float64))  # (n, 3, 3)
    cam = np.matmul(shape, m.transpose(0, 2, 1))
    cam += _translations(cam, xy, focal, centre)[:, None, :]
    sigma = NOISE_FRACTION * (xy[..., 0].max(1) - xy[..., 0].min(1) + 1e-6)
    inv_z = 1.0 / cam[..., 2:3]  # (n, 468, 1)
    f = focal[:, None, None]
    proj = f * cam[..., :2] * inv_z + centre[:, None, :]
    r = ((xy - proj) / sigma[:, None, None]).reshape(n, -1)  # point-major: u0, v0, u1, v1, ...
    yield  # the Jacobian reads the 0.6 MB identity_by_point: its own step (a cold cache made it the largest)
    # d(u, v)/d(model point) per point, (n, 468, 2, 3), then through each point's identity modes (468, 3, 101):
    # the Jacobian's rows in the residual's order
    scale = (f / sigma[:, None, None]) * inv_z
    d_uv = np.stack([scale * (m[:, None, 0] - m[:, None, 2] * (cam[..., 0:1] * inv_z)),
                     scale * (m[:, None, 1] - m[:, None, 2] * (cam[..., 1:2] * inv_z))], 2)
    # the products in float32, the solve in float64: the normal equations' 936-term sums are most of the refresh's
    # CPU, and float32 takes a third off; the estimates move by 1e-4 at most where a subject's own estimate moves
    # 0.7 from frame to frame (the sequences of tests/expression/test_identity.py, 480 refreshes)
    jac = np.matmul(d_uv.astype(np.float32), model.identity_by_point).reshape(n, 2 * 468, -1)
    yield
    jac_t = jac.transpose(0, 2, 1)
    hess = np.matmul(jac_t, jac).astype(np.float64)
    yield
    mean, precision = _prior(model)
    diag = np.arange(hess.shape[1])
    hess[:, diag, diag] += precision
    residual = (r + np.matmul(jac, ids[..., None].astype(np.float32))[..., 0]).astype(np.float32)
    grad = np.matmul(jac_t, residual[..., None])[..., 0] + precision * mean
    return np.linalg.solve(hess, grad[..., None])[..., 0]


def _translations(cam: np.ndarray, xy: np.ndarray, focal: np.ndarray, centre: np.ndarray) -> np.ndarray:
    """model.solve_translation of each row: the camera translation (n, 3) that best projects the rotated points
    cam (n, P, 3) onto xy (n, P, 2), by the normal equations of its 2P x 3 linear system, summed in closed form."""
    count = cam.shape[1]
    d = xy - centre[:, None, :]  # (du, dv) per point
    f = focal[:, None, None]
    b = d * cam[..., 2:3] - f * cam[..., :2]  # (du Z - f X, dv Z - f Y)
    s_d, s_b = d.sum(1), b.sum(1)  # (n, 2)
    ata = np.zeros((len(cam), 3, 3))
    ata[:, 0, 0] = ata[:, 1, 1] = count * focal * focal
    ata[:, 0, 2] = ata[:, 2, 0] = -focal * s_d[:, 0]
    ata[:, 1, 2] = ata[:, 2, 1] = -focal * s_d[:, 1]
    ata[:, 2, 2] = (d * d).sum((1, 2))
    atb = np.stack([focal * s_b[:, 0], focal * s_b[:, 1], -(d * b).sum((1, 2))], 1)
    return np.linalg.solve(ata, atb[..., None])[..., 0]


@lru_cache(maxsize=4)
def _prior(model: MorphableModel) -> tuple[np.ndarray, np.ndarray]:
    return identity_prior(model)
