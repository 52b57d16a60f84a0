"""6-DoF head pose: PnP of the 468 landmarks against MediaPipe's canonical face mesh."""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from bridge import mesh

CANONICAL_PATH = Path(__file__).resolve().parents[1] / "data" / "canonical_face_468.npy"
RIGID_POINTS = np.array(mesh.RIGID_POINTS)


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
