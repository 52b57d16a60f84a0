"""Eye gaze from iris position inside the eye opening, and the ARKit eyeLook* shapes that follow from it."""
from __future__ import annotations

import math

import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mesh import EYE_CORNERS, EYE_LID_PAIRS

# Face-mesh indices per eye (subject's left, subject's right): corners (toward image-left first) and lids.
EYE_LIDS = tuple(pairs[1] for pairs in EYE_LID_PAIRS)  # the middle (upper, lower) pair of each eye
MAX_YAW_DEG = 35.0  # iris at the corner ~ this rotation
MAX_PITCH_DEG = 25.0
LOOK_RANGE_YAW = 25.0  # degrees of eye yaw that give eyeLookIn/Out = 1
LOOK_RANGE_PITCH = 20.0


# per eye: corner a, corner b, upper lid, lower lid (one gather a frame)
_EYE_POINTS = np.array([[*EYE_CORNERS[eye], *EYE_LIDS[eye]] for eye in range(2)]).reshape(-1)


def _clip1(v: float) -> float:
    return -1.0 if v < -1.0 else (1.0 if v > 1.0 else v)


def eye_angles(points: np.ndarray, iris_centres: np.ndarray) -> np.ndarray:
    """(2, 2) yaw, pitch degrees per eye (subject's left, right); FaceFrame signs (+yaw = subject's left)."""
    out = np.zeros((2, 2), np.float32)
    pts = points[_EYE_POINTS, :2].astype(np.float64).tolist()
    irises = np.asarray(iris_centres)[:, :2].astype(np.float64).tolist()
    for eye in range(2):
        (ax, ay), (bx, by), (ux, uy), (dx, dy) = pts[4 * eye:4 * eye + 4]
        width = math.hypot(bx - ax, by - ay)
        if width < 1e-3:
            continue
        ex, ey = (bx - ax) / width, (by - ay) / width  # the eye's axis; its normal (-ey, ex) points down the image
        ix, iy = irises[eye]
        h = ((ix - (ax + bx) / 2) * ex + (iy - (ay + by) / 2) * ey) / (width / 2)  # -1..1, + toward image right
        v = (-(ix - (ux + dx) / 2) * ey + (iy - (uy + dy) / 2) * ex) / (width / 2)
        out[eye, 0] = _clip1(h) * MAX_YAW_DEG  # image right = subject's left = +yaw
        out[eye, 1] = -_clip1(v * 2.0) * MAX_PITCH_DEG  # image down = looking down = -pitch
    return out


def eye_look_shapes(blendshapes: np.ndarray, eyes: np.ndarray) -> None:
    """Write eyeLook{In,Out,Up,Down}{Left,Right} from eye angles (in place)."""
    angles = np.asarray(eyes, np.float64).tolist()
    for eye, ((yaw, pitch), (out_i, in_i, up_i, down_i)) in enumerate(zip(angles, _LOOK)):
        toward_left = _clip01(yaw / LOOK_RANGE_YAW)
        toward_right = _clip01(-yaw / LOOK_RANGE_YAW)
        # the left eye (0) looks "out" toward the subject's left; the right eye "in"
        out_w, in_w = (toward_left, toward_right) if eye == 0 else (toward_right, toward_left)
        blendshapes[out_i] = out_w
        blendshapes[in_i] = in_w
        blendshapes[up_i] = _clip01(pitch / LOOK_RANGE_PITCH)
        blendshapes[down_i] = _clip01(-pitch / LOOK_RANGE_PITCH)


_LOOK = tuple(tuple(ARKIT_INDEX[f"eyeLook{d}{side}"] for d in ("Out", "In", "Up", "Down"))
              for side in ("Left", "Right"))


def _clip01(v: float) -> float:
    return 0.0 if v < 0.0 else (1.0 if v > 1.0 else v)
