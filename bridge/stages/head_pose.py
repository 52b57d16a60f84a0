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
    fx, fy, fz = -float(rot[0, 2]), -float(rot[1, 2]), -float(rot[2, 2])  # forward = rot @ (0, 0, -1)
    lx, ly, lz = float(rot[0, 0]), float(rot[1, 0]), float(rot[2, 0])  # left = rot @ (1, 0, 0)
    yaw = math.atan2(fx, -fz)
    pitch = math.atan2(-fy, math.hypot(fx, fz))
    # left axis of the same head turned by yaw and pitch only, then the signed angle about forward
    cy, sy = math.cos(yaw), math.sin(yaw)  # left_no_roll = (cy, 0, sy); up_no_roll = forward x left_no_roll
    ux, uy, uz = fy * sy, fz * cy - fx * sy, -fy * cy
    roll = math.atan2(lx * ux + ly * uy + lz * uz, lx * cy + lz * sy)
    return np.degrees([yaw, pitch, -roll]).astype(np.float32)


class HeadPoseEstimator:
    def __init__(self) -> None:
        self.model = np.load(CANONICAL_PATH).astype(np.float64)
        self._rigid = np.ascontiguousarray(self.model[RIGID_POINTS])
        self._camera: tuple[tuple[int, int], np.ndarray] | None = None
        self._rvec: np.ndarray | None = None
        self._tvec: np.ndarray | None = None

    def reset(self) -> None:
        self._rvec = self._tvec = None

    def estimate(self, points: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(yaw/pitch/roll degrees, translation cm, 3x3 rotation) of the head in camera space."""
        if self._camera is None or self._camera[0] != (width, height):
            self._camera = ((width, height), camera_matrix(width, height))
        k, obj = self._camera[1], self._rigid
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
