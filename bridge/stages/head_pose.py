"""6-DoF head pose: PnP of the 468 landmarks against MediaPipe's canonical face mesh."""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

CANONICAL_PATH = Path(__file__).resolve().parents[1] / "data" / "canonical_face_468.npy"
# Rigid points only: forehead, nose bridge, eye corners, cheekbones, face outline. The mouth, jaw, lids and
# brows move with expression and would drag the pose.
RIGID_POINTS = np.array([
    1, 2, 4, 5, 6, 8, 9, 10, 151, 168, 195, 197, 33, 133, 362, 263, 130, 359, 127, 356, 234, 454, 93, 323,
    116, 345, 117, 346, 118, 347, 50, 280, 101, 330, 36, 266, 67, 297, 109, 338, 103, 332, 54, 284, 21, 251,
    162, 389, 139, 368, 71, 301, 98, 327, 129, 358, 64, 294, 48, 278, 115, 344, 45, 275, 51, 281,
])


def camera_matrix(width: int, height: int, focal: float | None = None) -> np.ndarray:
    """Pinhole intrinsics; a webcam's focal length is close to the image width (about 60 degree field)."""
    f = focal or float(width)
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], dtype=np.float64)


def rotation_to_ypr(rot: np.ndarray) -> np.ndarray:
    """(yaw, pitch, roll) degrees, FaceFrame convention, from a model-to-camera rotation (OpenCV axes).

    The model's forward (out of the face) is -z; its left (subject's left) is +x. Yaw is the turn of forward
    toward the subject's left, pitch its rise, roll the tilt of the left axis toward the subject's left shoulder,
    measured about forward.
    """
    forward = rot @ np.array([0.0, 0.0, -1.0])
    left = rot @ np.array([1.0, 0.0, 0.0])
    yaw = math.atan2(forward[0], -forward[2])
    pitch = math.atan2(-forward[1], math.hypot(forward[0], forward[2]))
    # left axis of the same head turned by yaw and pitch only, then the signed angle about forward
    cy, sy, cp, sp = math.cos(yaw), math.sin(yaw), math.cos(pitch), math.sin(pitch)
    left_no_roll = np.array([cy, 0.0, sy])
    up_no_roll = np.cross(forward, left_no_roll)
    roll = math.atan2(float(left @ up_no_roll), float(left @ left_no_roll))
    del cp, sp
    return np.degrees([yaw, pitch, -roll]).astype(np.float32)


class HeadPoseEstimator:
    def __init__(self) -> None:
        self.model = np.load(CANONICAL_PATH).astype(np.float64)
        self._rvec: np.ndarray | None = None
        self._tvec: np.ndarray | None = None

    def reset(self) -> None:
        self._rvec = self._tvec = None

    def estimate(self, points: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(yaw/pitch/roll degrees, translation cm, 3x3 rotation) of the head in camera space."""
        k = camera_matrix(width, height)
        obj = self.model[RIGID_POINTS]
        img = points[RIGID_POINTS, :2].astype(np.float64)
        if self._rvec is None:
            ok, rvec, tvec = cv2.solvePnP(obj, img, k, None, flags=cv2.SOLVEPNP_SQPNP)
        else:  # refine from the last frame: faster and steadier
            ok, rvec, tvec = cv2.solvePnP(obj, img, k, None, self._rvec.copy(), self._tvec.copy(),
                                          useExtrinsicGuess=True, flags=cv2.SOLVEPNP_ITERATIVE)
        if not ok or tvec[2, 0] <= 0:
            self.reset()
            ok, rvec, tvec = cv2.solvePnP(obj, img, k, None, flags=cv2.SOLVEPNP_SQPNP)
        self._rvec, self._tvec = rvec, tvec
        rot, _ = cv2.Rodrigues(rvec)
        return rotation_to_ypr(rot), tvec.reshape(3).astype(np.float32), rot
