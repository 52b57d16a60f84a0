"""The landmark-space morphable model: ICT-FaceKit Light sampled at MediaPipe's 468 points (+ 2 iris centres),
with the head-pose and camera conventions every estimator and the synthetic-data generator share.

Model space: centimetres, +x = the subject's left, +y up, +z out of the face (ICT's axes).
Camera space: OpenCV (x right, y down, z forward), centimetres.
    X_cam = FLIP @ head_matrix(yaw, pitch, roll) @ X_model + t
with (yaw, pitch, roll) in degrees as in bridge.frame.FaceFrame: +yaw turns to the subject's own left, +pitch
looks up, +roll tilts toward the subject's own left shoulder.
Points 0..467 follow MediaPipe's face_landmark order; 468 and 469 are the iris centres of the subject's left and
right eye.
"""
from __future__ import annotations

import math
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

from bridge.errors import ModelError
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES

BASIS_PATH = Path(__file__).resolve().parent / "basis.npz"
MODEL_ID = "ict-face-light"
NUM_POINTS = 470
IRIS_LEFT, IRIS_RIGHT = 468, 469
FLIP = np.diag([1.0, -1.0, -1.0])
# Shapes seen in the landmarks (all but tongueOut, which comes from lip-sync).
VISUAL = np.array([i for i, n in enumerate(ARKIT_NAMES) if n != "tongueOut"])
DEGREE = math.pi / 180.0  # math.radians(x) is x * DEGREE
GAZE_SHAPES = [ARKIT_INDEX[f"eyeLook{d}{s}"] for s in ("Left", "Right") for d in ("Down", "In", "Out", "Up")]


def head_matrix(yaw, pitch, roll) -> np.ndarray:
    """Rotation (model space) for FaceFrame angles in degrees: R = Ry(yaw) Rx(-pitch) Rz(-roll). Of floats, (3, 3);
    of n faces' angles (arrays (n,): ExpressionRows), (n, 3, 3) by the same arithmetic."""
    rows = isinstance(yaw, np.ndarray)
    cos, sin = (np.cos, np.sin) if rows else (math.cos, math.sin)
    if not rows:
        yaw, pitch, roll = float(yaw), float(pitch), float(roll)
    y, p, r = yaw * DEGREE, pitch * DEGREE, roll * DEGREE
    cy, sy, cp, sp, cr, sr = cos(y), sin(y), cos(p), sin(p), cos(r), sin(r)
    # Ry(y) @ Rx(-p) @ Rz(-r), multiplied out (one small array instead of three and two products)
    m = np.array([[cy * cr + sy * sp * sr, cy * sr - sy * sp * cr, sy * cp],
                  [-cp * sr, cp * cr, sp],
                  [cy * sp * sr - sy * cr, -sy * sr - cy * sp * cr, cy * cp]])
    return np.ascontiguousarray(m.transpose(2, 0, 1)) if rows else m


def head_angles(matrix: np.ndarray) -> np.ndarray:
    """Inverse of head_matrix: (yaw, pitch, roll) degrees."""
    (_, _, m02), (m10, m11, m12), (_, _, m22) = np.asarray(matrix, dtype=np.float64).tolist()
    # R = Ry(a) Rx(b) Rz(c): m[1,2] = -sin(b), m[0,2] = cos(b) sin(a), m[2,2] = cos(b) cos(a),
    # m[1,0] = cos(b) sin(c), m[1,1] = cos(b) cos(c)
    b = math.asin(min(max(-m12, -1.0), 1.0))
    a = math.atan2(m02, m22)
    c = math.atan2(m10, m11)
    return np.array([math.degrees(a), -math.degrees(b), -math.degrees(c)])


def batch_head_matrices(angles: np.ndarray) -> np.ndarray:
    """(B, 3) degrees -> (B, 3, 3), vectorised head_matrix."""
    y, p, r = np.radians(np.asarray(angles, dtype=np.float64)).T
    one, zero = np.ones_like(y), np.zeros_like(y)
    ry = np.stack([np.cos(y), zero, np.sin(y), zero, one, zero, -np.sin(y), zero, np.cos(y)], -1).reshape(-1, 3, 3)
    rx = np.stack([one, zero, zero, zero, np.cos(p), np.sin(p), zero, -np.sin(p), np.cos(p)], -1).reshape(-1, 3, 3)
    rz = np.stack([np.cos(r), np.sin(r), zero, -np.sin(r), np.cos(r), zero, zero, zero, one], -1).reshape(-1, 3, 3)
    return ry @ rx @ rz


def rotvec_from_matrix(m: np.ndarray) -> np.ndarray:
    """Axis-angle (radians) of a rotation matrix."""
    return cv2.Rodrigues(np.asarray(m, dtype=np.float64))[0].reshape(3)


def project(points_cam: np.ndarray, focal, centre) -> np.ndarray:
    """Pinhole projection to MediaPipe-style landmarks: (..., P, 3) camera cm -> (..., P, 3) with x, y in
    image pixels and z the depth relative to the face's mean depth, in the same pixel scale as x.
    focal: scalar or (...,); centre: (2,) or (..., 2)."""
    f = np.asarray(focal, dtype=np.float64)[..., None, None]
    c = np.asarray(centre, dtype=np.float64)[..., None, :]
    z = points_cam[..., 2:3]
    xy = f * points_cam[..., :2] / z + c
    zmean = z.mean(axis=-2, keepdims=True)
    return np.concatenate([xy, f * (z - zmean) / zmean], axis=-1)


class MorphableModel:
    """Linear model X = neutral + identity . B_id + weights . B_exp, plus eye rotation for the iris points.

    identity vectors have 101 entries: ICT's 100 PCA coefficients, then the MediaPipe-mean share."""

    def __init__(self, path: str | Path = BASIS_PATH):
        try:
            b = np.load(path)
        except FileNotFoundError:
            raise ModelError(f"expression basis {path} is missing",
                             "rebuild it with `python tools/derive_expression_basis.py`") from None
        self.neutral = b["neutral"].astype(np.float64)  # (470, 3)
        self.identity_basis = b["identity"].astype(np.float64)  # (100, 470, 3)
        self.expression_basis = b["expression"].astype(np.float64)  # (52, 470, 3)
        self.ict_expression_names = [str(n) for n in b["ict_expression_names"]]
        self.ict_to_arkit = b["ict_to_arkit"].astype(np.float64)  # (52, 53)
        self.eye_pivot = b["eye_pivot"].astype(np.float64)  # (2, 3)
        self.eye_pivot_identity = b["eye_pivot_identity"].astype(np.float64)  # (100, 2, 3)
        self.eye_yaw_pitch_deg = b["eye_yaw_pitch_deg"].astype(np.float64)  # (52, 2, 2)
        self.jaw_rotvec = b["jaw_rotvec"].astype(np.float64)  # (52, 3)
        self._eye_angles_flat = self.eye_yaw_pitch_deg.reshape(52, 4)
        self.region_names = [str(n) for n in b["region_names"]]
        self.region_points = b["region_points"]  # (regions, 468) bool
        self.canonical = b["canonical_rigid"].astype(np.float64)  # (468, 3): MediaPipe's own mean face, aligned
        self.num_ict_identity = self.identity_basis.shape[0]
        # The per-subject shape is ICT's 100 identity modes plus one more: the offset from ICT's neutral to
        # MediaPipe's own mean face, a systematic difference of the real landmark model that identity alone
        # cannot express. Its coefficient (the "MediaPipe-mean share") is the last entry of every identity vector.
        self.mediapipe_offset = self.canonical - self.neutral[:468]
        offset_mode = np.zeros((1, NUM_POINTS, 3))
        offset_mode[0, :468] = self.mediapipe_offset
        self.identity_basis = np.concatenate([self.identity_basis, offset_mode])
        self.num_identity = self.identity_basis.shape[0]  # 101
        self._id_flat = self.identity_basis.reshape(self.num_identity, -1)
        self._exp_flat = self.expression_basis.reshape(52, -1)
        # the 468 face points' columns, contiguous: face_points runs every frame
        self._neutral468 = np.ascontiguousarray(self.neutral[:468].reshape(-1))
        self._id468 = np.ascontiguousarray(self._id_flat[:, :1404])
        self._exp468 = np.ascontiguousarray(self._exp_flat[:, :1404])
        # the identity modes of the 468 points laid out point by point, (468, 3, 101): the identity update's
        # Jacobian is one batched (2 x 3) @ (3 x 101) product per point (identity.identity_refresh_steps), in
        # float32 as that update's products are
        self.identity_by_point = np.ascontiguousarray(self.identity_basis[:, :468].transpose(1, 2, 0), np.float32)
        self._base: tuple[bytes, np.ndarray] | None = None  # (identity key, its points): one attribute, so a
        # thread that reads it never pairs one subject's key with another's points (one model serves every stream)
        counts = self.region_points.sum(1, keepdims=True)
        self.region_average = self.region_points / np.maximum(counts, 1)  # (regions, 468): mean over a region

    # -- shape ------------------------------------------------------------------------------------------
    def face_points(self, identity: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(468, 3) model-space landmarks, without the iris (faster than shape() for one face). The identity's
        part is kept between calls: a subject's identity changes only every IDENTITY_EVERY frames (an estimator
        that serves one of many streams keeps its own with identity_points and points_from)."""
        key = np.asarray(identity).tobytes()
        base = self._base
        if base is None or base[0] != key:
            base = self._base = (key, self.identity_points(identity))
        return self.points_from(base[1], weights)

    def identity_points(self, identity: np.ndarray) -> np.ndarray:
        """The identity's part of face_points: (1404,) flat model-space points of the neutral expression; of n
        identities (n, 101), (n, 1404)."""
        return self._neutral468 + identity @ self._id468

    def points_from(self, base: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """face_points from an identity_points result: (468, 3); of n faces' bases (n, 1404) and weights (n, 52),
        (n, 468, 3)."""
        return (base + weights @ self._exp468).reshape(*weights.shape[:-1], 468, 3)

    def eye_angles(self, weights: np.ndarray) -> np.ndarray:
        """(..., 52) weights -> (..., 2, 2) per-eye (yaw, pitch) degrees in head space, [left, right]."""
        return np.einsum("...k,kes->...es", weights, self.eye_yaw_pitch_deg)

    def shape(self, identity: np.ndarray, weights: np.ndarray) -> np.ndarray:
        """(..., 101) identity and (..., 52) weights -> (..., 470, 3) model-space points, gaze applied."""
        identity, weights = np.asarray(identity, np.float64), np.asarray(weights, np.float64)
        flat = self.neutral.reshape(-1) + identity @ self._id_flat + weights @ self._exp_flat
        pts = flat.reshape(*flat.shape[:-1], NUM_POINTS, 3)
        pivots = self.eye_pivot + np.einsum("...k,kes->...es", identity[..., :self.num_ict_identity],
                                            self.eye_pivot_identity)  # (..., 2, 3)
        ang = np.radians(self.eye_angles(weights))  # (..., 2, 2)
        yaw, pitch = ang[..., 0], ang[..., 1]
        # gaze rotation Ry(yaw) Rx(-pitch) applied to the iris offset from the eyeball centre
        iris = pts[..., IRIS_LEFT:, :] - pivots
        y1 = iris[..., 1] * np.cos(pitch) + iris[..., 2] * np.sin(pitch)
        z1 = -iris[..., 1] * np.sin(pitch) + iris[..., 2] * np.cos(pitch)
        x2 = iris[..., 0] * np.cos(yaw) + z1 * np.sin(yaw)
        z2 = -iris[..., 0] * np.sin(yaw) + z1 * np.cos(yaw)
        pts[..., IRIS_LEFT:, :] = np.stack([x2, y1, z2], -1) + pivots
        return pts

    def to_camera(self, points: np.ndarray, rotation: np.ndarray, translation: np.ndarray) -> np.ndarray:
        """Model points (..., P, 3), head rotation matrices (..., 3, 3), translation (..., 3) -> camera space."""
        m = FLIP @ rotation
        return points @ np.swapaxes(m, -1, -2) + np.asarray(translation)[..., None, :]

    # -- FLAME-style parameter block ---------------------------------------------------------------------
    def ict_expression(self, weights: np.ndarray) -> np.ndarray:
        """ARKit weights (52,) -> the model's own 53 expression coefficients (split shapes get the merged weight)."""
        return (self.ict_to_arkit.T @ np.asarray(weights, np.float64)).astype(np.float32)

    def jaw_rotation(self, weights: np.ndarray) -> np.ndarray:
        """Axis-angle (radians, model space) of the lower jaw implied by the jaw shapes."""
        return (np.asarray(weights, np.float64) @ self.jaw_rotvec).astype(np.float32)

    def eye_rotations(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Axis-angle (radians, head space) of the left and right eyeball for the eyeLook weights."""
        angles = (np.asarray(weights, np.float64) @ self._eye_angles_flat).tolist()  # eye_angles: (yaw, pitch) x 2
        left, right = (cv2.Rodrigues(head_matrix(angles[2 * e], angles[2 * e + 1], 0.0))[0].reshape(3) for e in (0, 1))
        return left.astype(np.float32), right.astype(np.float32)


@lru_cache(maxsize=4)
def load_model(path: str | Path = BASIS_PATH) -> MorphableModel:
    return MorphableModel(path)


def solve_translation(points_model_rotated: np.ndarray, xy: np.ndarray, focal: float,
                      centre: tuple[float, float]) -> np.ndarray:
    """Camera translation t that best projects the (already rotated, camera-axis) points onto xy pixels.

    From u = f (X + tx) / (Z + tz) + cx: f tx - (u - cx) tz = (u - cx) Z - f X, linear in t (same for v)."""
    p = np.asarray(points_model_rotated, np.float64)
    n, f = len(p), float(focal)
    d = np.asarray(xy, np.float64) - centre  # (du, dv) per point
    b = d * p[:, 2:3] - f * p[:, :2]  # (du Z - f X, dv Z - f Y)
    ones = np.ones(n)
    (su, sv), (sbu, sbv) = (ones @ d).tolist(), (ones @ b).tolist()
    # the normal equations A^T A t = A^T b of the rows (f, 0, -du) and (0, f, -dv), summed in closed form:
    # 3 unknowns, well conditioned
    ata = np.array([[n * f * f, 0.0, -f * su], [0.0, n * f * f, -f * sv], [-f * su, -f * sv, float(np.vdot(d, d))]])
    return np.linalg.solve(ata, np.array([f * sbu, f * sbv, -float(np.vdot(d, b))]))
