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


def eye_angles_rows(points: np.ndarray, iris_centres: np.ndarray) -> np.ndarray:
    """eye_angles over many faces: points (n, 468, >=2), iris_centres (n, 2, >=2) -> (n, 2, 2) float32."""
    corners = np.asarray(EYE_CORNERS)
    p = np.asarray(points, np.float64)[..., :2]
    a, b = p[:, corners[:, 0]], p[:, corners[:, 1]]  # (n, 2 eyes, 2)
    axis = b - a
    width = np.linalg.norm(axis, axis=-1)
    ok = width >= 1e-3
    axis = axis / np.where(ok, width, 1.0)[..., None]
    normal = np.stack([-axis[..., 1], axis[..., 0]], -1)
    lids = np.asarray(EYE_LIDS)
    mid_lid = (p[:, lids[:, 0]] + p[:, lids[:, 1]]) / 2
    iris = np.asarray(iris_centres, np.float64)[..., :2]
    half = np.where(ok, width, 1.0) / 2
    h = ((iris - (a + b) / 2) * axis).sum(-1) / half
    v = ((iris - mid_lid) * normal).sum(-1) / half
    out = np.stack([np.clip(h, -1, 1) * MAX_YAW_DEG, -np.clip(v * 2.0, -1, 1) * MAX_PITCH_DEG], -1)
    return np.where(ok[..., None], out, 0.0).astype(np.float32)


def eye_look_shapes(blendshapes: np.ndarray, eyes: np.ndarray) -> None:
    """Write eyeLook{In,Out,Up,Down}{Left,Right} from eye angles (in place); eyes: (2, 2) array or nested lists."""
    angles = eyes if isinstance(eyes, (list, tuple)) else np.asarray(eyes, np.float64).tolist()
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


def eye_look_shapes_rows(blendshapes: np.ndarray, eyes: np.ndarray) -> None:
    """eye_look_shapes over many faces: blendshapes (n, 52), eyes (n, 2, 2), in place."""
    for eye, side in ((0, "Left"), (1, "Right")):
        yaw, pitch = eyes[..., eye, 0], eyes[..., eye, 1]
        toward_left = np.clip(yaw / LOOK_RANGE_YAW, 0, 1)
        toward_right = np.clip(-yaw / LOOK_RANGE_YAW, 0, 1)
        # the left eye looks "out" toward the subject's left; the right eye "in"
        out_w, in_w = (toward_left, toward_right) if side == "Left" else (toward_right, toward_left)
        blendshapes[..., ARKIT_INDEX[f"eyeLookOut{side}"]] = out_w
        blendshapes[..., ARKIT_INDEX[f"eyeLookIn{side}"]] = in_w
        blendshapes[..., ARKIT_INDEX[f"eyeLookUp{side}"]] = np.clip(pitch / LOOK_RANGE_PITCH, 0, 1)
        blendshapes[..., ARKIT_INDEX[f"eyeLookDown{side}"]] = np.clip(-pitch / LOOK_RANGE_PITCH, 0, 1)
