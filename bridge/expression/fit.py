"""Reference estimator: analysis-by-synthesis fit of the morphable model to 468 landmarks (+ iris centres).

Per frame: an initial head pose from OpenCV's PnP of the current shape, then a few Gauss-Newton steps on
head pose, expression weights and identity together. Each step linearises the perspective projection and
solves one bounded least-squares problem (weights in [0, 1]) whose priors are
  * expression: a Gaussian with the moments of the synthetic expression prior (synth.py), which carries its
    correlations (left/right symmetry, smiles with cheek squints, conjugate gaze);
  * identity (ICT's 100 modes + the MediaPipe-mean share, see model.py): the subject's running estimate, whose
    weight grows with the frames seen. After the frame, the running estimate takes the frame's identity with
    weight 1/n for the first IDENTITY_FRAMES (about 3 s), then follows slowly, held within IDENTITY_LIMIT
    standard deviations of the prior in every mode (hold_identity).
Points far off the model (an occluded patch) are down-weighted (Huber-like) so they cannot drag the face along.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from bridge.expression.model import FLIP, GAZE_SHAPES, VISUAL, MorphableModel, project
from bridge.expression.synth import sample_expressions

IDENTITY_FRAMES = 90
NOISE_FRACTION = 0.005  # assumed landmark noise, as a share of the face width
# Identity is who the person is, never a fault: but the least-squares fit to 468 landmarks overshoots the prior on
# real faces (on the real corpus, tools/fetch_real_data.py, the fitted modes have an RMS of 1.2 to 3.6 standard
# deviations where real people have 1, and single modes reach 16 on a photo), because the landmark model's mesh and
# the morphable model differ in ways identity alone cannot express. A real person lies beyond 4 standard deviations
# in any of the 100 modes with a chance of about 0.6% (P(|z| > 4) = 6e-5 per mode): so each mode is held within 4.
IDENTITY_LIMIT = 4.0


@dataclass
class FitResult:
    weights: np.ndarray  # (52,)
    rotation: np.ndarray  # (3, 3) head rotation, model space
    translation: np.ndarray  # (3,) cm, camera space
    point_error: np.ndarray  # (468,) reprojection error per landmark, in units of the assumed noise


def identity_prior(model: MorphableModel) -> tuple[np.ndarray, np.ndarray]:
    """Mean and precision of the identity prior: ICT modes N(0, 1); the MediaPipe-mean share N(0.5, 0.5^2)."""
    mean = np.zeros(model.num_identity)
    mean[-1] = 0.5
    precision = np.ones(model.num_identity)
    precision[-1] = 4.0
    return mean, precision


def hold_identity(identity: np.ndarray, mean: np.ndarray, precision: np.ndarray) -> tuple[np.ndarray, float]:
    """(identity held within IDENTITY_LIMIT standard deviations of the prior (mean, precision) in every mode, the
    largest distance in standard deviations it had before). The dtype is kept."""
    sd = 1.0 / np.sqrt(precision)
    z = (np.asarray(identity, np.float64) - mean) / sd
    worst = float(np.abs(z).max()) if z.size else 0.0
    if worst <= IDENTITY_LIMIT:
        return identity, worst
    held = mean + np.clip(z, -IDENTITY_LIMIT, IDENTITY_LIMIT) * sd
    return held.astype(np.asarray(identity).dtype), worst


def _rotation_step(omega: np.ndarray) -> np.ndarray:
    return cv2.Rodrigues(omega.reshape(3, 1))[0]


class ExpressionFit:
    def __init__(self, model: MorphableModel, prior_strength: float = 1.0, iterations: int = 3):
        self.model = model
        self.iterations = iterations

        samples = sample_expressions(np.random.default_rng(1234), 20000)[:, VISUAL]
        cov = np.cov(samples.T) + 1e-3 * np.eye(len(VISUAL))
        self.prior_precision = prior_strength * np.linalg.inv(cov)
        self.prior_mean = samples.mean(0)
        self.identity_prior_mean, self.identity_prior_precision = identity_prior(model)
        self.reset()

    def reset(self) -> None:
        self.identity = self.identity_prior_mean.copy()
        self.identity_worst = 0.0  # the largest distance from the prior of the last fold, in standard deviations
        self.frames = 0
        self._pose: tuple[np.ndarray, np.ndarray] | None = None
        self._weights = np.zeros(52)

    def set_identity(self, identity: np.ndarray, frames: int = IDENTITY_FRAMES) -> None:
        self.identity, _ = hold_identity(np.asarray(identity, dtype=np.float64).copy(), self.identity_prior_mean,
                                         self.identity_prior_precision)
        self.frames = frames

    # ------------------------------------------------------------------------------------------------
    def fit(self, xy: np.ndarray, iris: np.ndarray | None, focal: float, centre: tuple[float, float]) -> FitResult:
        obs = np.asarray(xy, dtype=np.float64)
        use = np.arange(468)
        if iris is not None:
            obs = np.concatenate([obs, np.asarray(iris, dtype=np.float64)])
            use = np.arange(470)
        cam_k = np.array([[focal, 0, centre[0]], [0, focal, centre[1]], [0, 0, 1.0]])
        sigma = NOISE_FRACTION * (np.ptp(obs[:468, 0]) + 1e-6)
        identity = self.identity.copy()
        # identity prior: the running estimate, trusted more as frames accumulate
        n_seen = min(self.frames, IDENTITY_FRAMES)
        id_precision = self.identity_prior_precision * (1.0 + n_seen)
        id_mean = self.identity if self.frames else self.identity_prior_mean
        weights = self._weights.copy() if self._pose is not None else np.zeros(52)
        rot, t = self._initial_pose(identity, weights, use, obs, cam_k)
        point_w = np.ones(len(use))
        for _ in range(self.iterations):
            rot, t, weights, identity, resid = self._step(rot, t, weights, identity, obs, use, focal, centre,
                                                          sigma, point_w, id_mean, id_precision)
            err = np.linalg.norm(resid.reshape(2, -1).T, axis=1) / sigma
            point_w = np.where(err > 3.0, 3.0 / err, 1.0)  # Huber-like
        self.frames += 1
        running = self.identity + (identity - self.identity) / min(self.frames, IDENTITY_FRAMES)
        self.identity, self.identity_worst = hold_identity(running, self.identity_prior_mean,
                                                           self.identity_prior_precision)
        self._pose, self._weights = (rot, t), weights
        return FitResult(weights=weights.astype(np.float32), rotation=rot, translation=t,
                         point_error=err[:468])

    # ------------------------------------------------------------------------------------------------
    def _initial_pose(self, identity, weights, use, obs, cam_k):
        """Iterative PnP of the current shape from EPnP's answer and from the last pose; the better one wins."""
        shape = self.model.shape(identity, weights)[use]
        starts = []
        ok, rvec, tvec = cv2.solvePnP(shape, obs, cam_k, None, flags=cv2.SOLVEPNP_EPNP)
        if ok:
            starts.append((rvec, tvec))
        if self._pose is not None:
            starts.append((cv2.Rodrigues(FLIP @ self._pose[0])[0], self._pose[1].reshape(3, 1).copy()))
        if not starts:
            starts.append((np.zeros((3, 1)), np.array([[0.0], [0.0], [60.0]])))
        best = None
        for rvec, tvec in starts:
            _, rvec, tvec = cv2.solvePnP(shape, obs, cam_k, None, rvec=rvec, tvec=tvec, useExtrinsicGuess=True,
                                         flags=cv2.SOLVEPNP_ITERATIVE)
            proj = cv2.projectPoints(shape, rvec, tvec, cam_k, None)[0].reshape(-1, 2)
            err = float(((proj - obs) ** 2).sum())
            if best is None or err < best[0]:
                best = (err, rvec, tvec)
        return FLIP @ cv2.Rodrigues(best[1])[0], best[2].reshape(3)

    def _residual(self, identity, weights, rot, t, obs, use, focal, centre):
        shape = self.model.shape(identity, weights)[use]
        proj = project(self.model.to_camera(shape, rot, t), focal, centre)[:, :2]
        r = obs - proj
        return shape, np.concatenate([r[:, 0], r[:, 1]])

    @staticmethod
    def _projection_jacobian(cam, dcam, focal):
        """cam (P, 3) camera points, dcam (K, P, 3) their derivatives -> d(pixels)/d(params) (2P, K)."""
        inv_z = 1.0 / cam[:, 2]
        du = focal * (dcam[..., 0] * inv_z - dcam[..., 2] * cam[:, 0] * inv_z ** 2)
        dv = focal * (dcam[..., 1] * inv_z - dcam[..., 2] * cam[:, 1] * inv_z ** 2)
        return np.concatenate([du, dv], axis=1).T

    def _step(self, rot, t, weights, identity, obs, use, focal, centre, sigma, point_w, id_mean, id_precision):
        shape, r = self._residual(identity, weights, rot, t, obs, use, focal, centre)
        m = FLIP @ rot
        cam = shape @ m.T + t
        # pose: R <- R exp(omega) (model space), t <- t + dt
        d_rot = np.stack([np.cross(np.eye(3)[k], shape) @ m.T for k in range(3)])
        d_t = np.broadcast_to(np.eye(3)[:, None, :], (3, len(shape), 3))
        # expression (iris points move by eye rotation: numerical derivative of the gaze shapes)
        basis = self.model.expression_basis[VISUAL][:, use].copy()
        if len(use) == 470:
            eps = 0.05
            for k in GAZE_SHAPES:
                w2 = weights.copy()
                w2[k] += eps
                moved = self.model.shape(identity, w2)[468:]
                basis[int(np.searchsorted(VISUAL, k)), 468:] = (moved - shape[468:]) / eps
        d_exp = basis @ m.T
        d_id = self.model.identity_basis[:, use] @ m.T
        jac = self._projection_jacobian(cam, np.concatenate([d_rot, d_t, d_exp, d_id]), focal)
        pw = np.concatenate([point_w, point_w]) / sigma
        jw = jac * pw[:, None]
        # unknowns x = [omega (3), dt (3), w (51), identity (101)], linear model r ~ J (x - x0)
        ne, ni = len(VISUAL), self.model.num_identity
        x0 = np.concatenate([np.zeros(6), weights[VISUAL], identity])
        hess = jw.T @ jw
        hess[6:6 + ne, 6:6 + ne] += self.prior_precision
        hess[6 + ne:, 6 + ne:] += np.diag(id_precision)
        hess[:6, :6] += 1e-6 * np.eye(6)
        grad = jw.T @ ((r + jac @ x0) * pw)
        grad[6:6 + ne] += self.prior_precision @ self.prior_mean
        grad[6 + ne:] += id_precision * id_mean
        # pose and identity are unbounded: eliminate them (Schur complement), solve the 51 bounded weights,
        # then back-substitute
        free = np.r_[0:6, 6 + ne:6 + ne + ni]
        box = np.r_[6:6 + ne]
        h_ff_inv = np.linalg.inv(hess[np.ix_(free, free)])
        h_bf = hess[np.ix_(box, free)]
        schur = hess[np.ix_(box, box)] - h_bf @ h_ff_inv @ h_bf.T
        g_box = grad[box] - h_bf @ h_ff_inv @ grad[free]
        chol = np.linalg.cholesky(0.5 * (schur + schur.T))
        from scipy.optimize import lsq_linear  # here, not at the top: the regressor path never needs scipy

        w_box = lsq_linear(chol.T, np.linalg.solve(chol, g_box), bounds=(0.0, 1.0), method="bvls").x
        x = np.empty(6 + ne + ni)
        x[box] = w_box
        x[free] = h_ff_inv @ (grad[free] - h_bf.T @ w_box)
        rot = rot @ _rotation_step(x[:3])
        t = t + x[3:6]
        weights = np.zeros(52)
        weights[VISUAL] = x[6:6 + ne]
        identity = x[6 + ne:]
        _, r_new = self._residual(identity, weights, rot, t, obs, use, focal, centre)
        return rot, t, weights, identity, r_new
