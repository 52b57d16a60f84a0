"""6-DoF head pose: PnP of the 468 landmarks against MediaPipe's canonical face mesh."""
from __future__ import annotations

import math
from pathlib import Path

import cv2
import numpy as np

from bridge import compiled, mesh
from bridge.stages.values import atan2, cos, degrees, hypot, sin

CANONICAL_PATH = Path(__file__).resolve().parents[1] / "data" / "canonical_face_468.npy"
RIGID_POINTS = np.array(mesh.RIGID_POINTS)
# The per-frame refine from the last pose (the compiled loop, and cv2's solver without numba):
REFINE_ITERATIONS = 20  # cv2's own count; a frame's refine from the last pose takes 3-8
REFINE_STOP = 1e-5  # rad, cm: a step this small ends it (0.0006 degrees; the error left is a tenth of it)


def camera_matrix(width: int, height: int, focal: float | None = None) -> np.ndarray:
    """Pinhole intrinsics; a webcam's focal length is close to the image width (about 60 degree field)."""
    f = focal or float(width)
    return np.array([[f, 0, width / 2], [0, f, height / 2], [0, 0, 1]], dtype=np.float64)


def rotation_to_ypr(rot: np.ndarray) -> np.ndarray:
    """(yaw, pitch, roll) degrees, FaceFrame convention, float32, from a model-to-camera rotation (OpenCV axes):
    (3, 3) -> (3,), or (n, 3, 3) -> (n, 3) (plain floats for one, arrays for many: bridge/stages/values.py).

    The model's forward (out of the face) is -z; its left (subject's left) is +x. Yaw is the turn of forward
    toward the subject's left, pitch its rise, roll the tilt of the left axis toward the subject's left shoulder,
    measured about forward.
    """
    r = rot.tolist() if rot.ndim == 2 else [[rot[:, i, j] for j in range(3)] for i in range(3)]
    fx, fy, fz = -r[0][2], -r[1][2], -r[2][2]  # forward = rot @ (0, 0, -1)
    lx, ly, lz = r[0][0], r[1][0], r[2][0]  # left = rot @ (1, 0, 0)
    yaw = atan2(fx, -fz)
    pitch = atan2(-fy, hypot(fx, fz))
    # left axis of the same head turned by yaw and pitch only, then the signed angle about forward
    cy, sy = cos(yaw), sin(yaw)  # left_no_roll = (cy, 0, sy); up_no_roll = forward x left_no_roll
    ux, uy, uz = fy * sy, fz * cy - fx * sy, -fy * cy
    roll = atan2(lx * ux + ly * uy + lz * uz, lx * cy + lz * sy)
    angles = [degrees(yaw), degrees(pitch), degrees(-roll)]
    return np.array(angles, np.float32) if rot.ndim == 2 else np.stack(angles, 1).astype(np.float32)


def _refine_kernels(wanted: bool | None):
    """head_pose_refine where compiled (bridge/compiled.py), else None: the cv2 and numpy refines."""
    return compiled.warm_kernels("bridge.stages.head_pose_refine", wanted, "cv2's solver refines the head pose instead")


class HeadPoseEstimator:
    """A face's first frame (or one after a reset) is solved by SQPNP; every other frame refines the last pose, by
    the compiled Gauss-Newton loop (head_pose_refine.py) where numba is installed, else by cv2's iterative solver:
    the same least squares, the same minimum (within 0.001 degrees), the loop at a tenth of the cost."""

    def __init__(self, compiled_refine: bool | None = None) -> None:
        """compiled_refine: None picks the compiled loop where numba is installed; False keeps cv2's solver."""
        self.model = np.load(CANONICAL_PATH).astype(np.float64)
        self._rigid = np.ascontiguousarray(self.model[RIGID_POINTS])
        self._camera: tuple[tuple[int, int], np.ndarray] | None = None
        self._rot: np.ndarray | None = None  # the last pose: model-to-camera rotation, translation (cm)
        self._t: np.ndarray | None = None
        self._rvec: np.ndarray | None = None  # the same pose as cv2 gives and takes it (its own refine)
        kernels = _refine_kernels(compiled_refine)
        self._refine = kernels.refine if kernels else None

    def reset(self) -> None:
        self._rot = self._t = None

    def estimate(self, points: np.ndarray, width: int, height: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(yaw/pitch/roll degrees, translation cm, 3x3 rotation) of the head in camera space."""
        if self._camera is None or self._camera[0] != (width, height):
            self._camera = ((width, height), camera_matrix(width, height))
        k, obj = self._camera[1], self._rigid
        img = points[RIGID_POINTS, :2].astype(np.float64)
        if not math.isfinite(float(img.sum())):  # lost points: no pose (the output guard names the stage that lost
            self.reset()                         # them); the next good frame is solved afresh
            nan = np.full((3, 3), np.nan)
            return rotation_to_ypr(nan), np.full(3, np.nan, np.float32), nan
        rot, t = (None, None) if self._rot is None else self._refined(obj, img, k)  # from the last frame
        if rot is None or not t[2] > 0:
            solved = solve_afresh(obj, img, k)
            if solved is None:  # points no pose fits (all in one place): as lost points
                self.reset()
                nan = np.full((3, 3), np.nan)
                return rotation_to_ypr(nan), np.full(3, np.nan, np.float32), nan
            rot, t, self._rvec = solved
        self._rot, self._t = rot, t
        return rotation_to_ypr(rot), t.astype(np.float32), rot

    def _refined(self, obj: np.ndarray, img: np.ndarray, k: np.ndarray):
        """(rotation, translation) refined from the last pose, or (None, None) where the refine fails."""
        if self._refine is not None:
            rot, t = np.empty((3, 3)), np.empty(3)
            if self._refine(obj, img, k[0, 0], k[0, 2], k[1, 2], self._rot, self._t, rot, t, REFINE_ITERATIONS,
                            REFINE_STOP):
                return rot, t
            return None, None
        ok, rvec, tvec = cv2.solvePnP(obj, img, k, None, self._rvec.copy(), self._t.reshape(3, 1).copy(),
                                      useExtrinsicGuess=True, flags=cv2.SOLVEPNP_ITERATIVE)
        if not ok:
            return None, None
        self._rvec = rvec
        return cv2.Rodrigues(rvec)[0], tvec.reshape(3)


def solve_afresh(obj: np.ndarray, img: np.ndarray, k: np.ndarray):
    """(rotation, translation, rvec) by SQPNP without a guess, or None where no pose fits the points: cv2 refuses
    points that are not finite or all in one place (an assertion), and one such face must not fail the others."""
    if not np.isfinite(img).all():
        return None
    try:
        _, rvec, tvec = cv2.solvePnP(obj, img, k, None, flags=cv2.SOLVEPNP_SQPNP)
    except cv2.error:
        return None
    rot, t = cv2.Rodrigues(rvec)[0], tvec.reshape(3)
    return (rot, t, rvec) if np.isfinite(rot).all() and np.isfinite(t).all() else None


class HeadPoseRows:
    """HeadPoseEstimator's state for many streams at once, one row per stream: a stream's first frame (or one after
    a reset) is solved by SQPNP as there, and every other frame refined from its last pose by the same refine: where
    numba is installed every row in one compiled call (head_pose_refine.refine_rows: each row exactly as
    HeadPoseEstimator refines, the interpreter lock released), without it by cv2's iterative solver row by row."""

    def __init__(self, rows: int, compiled_refine: bool | None = None) -> None:
        """compiled_refine: None picks the compiled refine where numba is installed; False the numpy and cv2 one."""
        self.model = np.load(CANONICAL_PATH).astype(np.float64)
        self._rigid = np.ascontiguousarray(self.model[RIGID_POINTS])
        kernels = _refine_kernels(compiled_refine)
        self._refine_rows = kernels.refine_rows if kernels else None
        self._rot = np.zeros((rows, 3, 3))
        self._t = np.zeros((rows, 3))
        self._has = np.zeros(rows, bool)

    def reset(self, rows) -> None:
        self._has[rows] = False

    def estimate(self, rows: np.ndarray, points: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """rows (n,), points (n, 468, 3), sizes (n, 2) width, height -> (yaw/pitch/roll deg (n, 3), translation
        (n, 3)), both float32."""
        img = np.ascontiguousarray(points[:, RIGID_POINTS, :2], dtype=np.float64)
        focal = sizes[:, 0].astype(np.float64)
        centre = sizes.astype(np.float64) / 2.0
        rot, t, has = self._rot[rows], self._t[rows], self._has[rows]
        if self._refine_rows is not None:
            live = np.flatnonzero(has)
            if len(live):
                ok = np.empty(len(live), np.bool_)
                new_rot, new_t = np.empty((len(live), 3, 3)), np.empty((len(live), 3))
                self._refine_rows(self._rigid, img[live], focal[live], np.ascontiguousarray(centre[live]), rot[live],
                                  t[live], new_rot, new_t, ok, REFINE_ITERATIONS, REFINE_STOP)
                new_rot[~ok], new_t[~ok] = np.nan, np.nan  # solved afresh below
                rot[live], t[live] = new_rot, new_t
        else:  # cv2's own refine, row by row, as HeadPoseEstimator's without numba
            for i in np.flatnonzero(has):
                k = camera_matrix(int(sizes[i, 0]), int(sizes[i, 1]))
                ok, rvec, tvec = cv2.solvePnP(self._rigid, img[i], k, None, cv2.Rodrigues(rot[i])[0],
                                              t[i].reshape(3, 1).copy(), useExtrinsicGuess=True,
                                              flags=cv2.SOLVEPNP_ITERATIVE)
                rot[i], t[i] = (cv2.Rodrigues(rvec)[0], tvec.reshape(3)) if ok else (np.nan, np.nan)
        redo = ~has | ~np.isfinite(t).all(1) | ~(t[:, 2] > 0) | ~np.isfinite(rot).all((1, 2))
        posed = np.ones(len(rows), bool)
        for i in np.flatnonzero(redo):
            solved = solve_afresh(self._rigid, img[i], camera_matrix(int(sizes[i, 0]), int(sizes[i, 1])))
            if solved is None:  # lost or degenerate points: no pose for this row alone, solved afresh next time
                rot[i], t[i], posed[i] = np.nan, np.nan, False
            else:
                rot[i], t[i] = solved[:2]
        self._rot[rows], self._t[rows], self._has[rows] = rot, t, posed
        return rotation_to_ypr(rot), t.astype(np.float32)
