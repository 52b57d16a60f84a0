"""Eye gaze from iris position inside the eye opening, and the ARKit eyeLook* shapes that follow from it.

Each formula is written once, over plain floats for one face or arrays for many (bridge/stages/values.py).
"""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mesh import EYE_CORNERS, EYE_LID_PAIRS
from bridge.stages.values import clip, hypot, where

# Face-mesh indices per eye (subject's left, subject's right): corners (toward image-left first) and lids.
EYE_LIDS = tuple(pairs[1] for pairs in EYE_LID_PAIRS)  # the middle (upper, lower) pair of each eye
MAX_YAW_DEG = 35.0  # iris at the corner ~ this rotation
MAX_PITCH_DEG = 25.0
LOOK_RANGE_YAW = 25.0  # degrees of eye yaw that give eyeLookIn/Out = 1
LOOK_RANGE_PITCH = 20.0


# per eye: corner a, corner b, upper lid, lower lid (one gather a frame)
_EYE_POINTS = np.array([[*EYE_CORNERS[eye], *EYE_LIDS[eye]] for eye in range(2)]).reshape(-1)


def eye_angle(ax, ay, bx, by, ux, uy, dx, dy, ix, iy):
    """(yaw, pitch) degrees of one eye from its corners a, b (toward image-left first), its middle lid pair (upper u,
    lower d) and its iris centre i, each coordinate a float (one face) or an array with one value per face."""
    width = hypot(bx - ax, by - ay)
    flat = width < 1e-3  # no eye to read: (0, 0)
    width = where(flat, 1.0, width)
    ex, ey = (bx - ax) / width, (by - ay) / width  # the eye's axis; its normal (-ey, ex) points down the image
    h = ((ix - (ax + bx) / 2) * ex + (iy - (ay + by) / 2) * ey) / (width / 2)  # -1..1, + toward image right
    v = (-(ix - (ux + dx) / 2) * ey + (iy - (uy + dy) / 2) * ex) / (width / 2)
    yaw = clip(h, -1.0, 1.0) * MAX_YAW_DEG  # image right = subject's left = +yaw
    pitch = -clip(v * 2.0, -1.0, 1.0) * MAX_PITCH_DEG  # image down = looking down = -pitch
    return where(flat, 0.0, yaw), where(flat, 0.0, pitch)


def eye_angles(points: np.ndarray, iris_centres: np.ndarray) -> np.ndarray:
    """Yaw, pitch degrees per eye (subject's left, right; FaceFrame signs, +yaw = subject's left), float32: of one
    face, points (468, >=2) and iris_centres (2, >=2) -> (2, 2); of n faces, (n, 468, >=2), (n, 2, >=2) -> (n, 2, 2)."""
    pts = np.asarray(points)[..., _EYE_POINTS, :2].astype(np.float64)
    irises = np.asarray(iris_centres)[..., :2].astype(np.float64)
    if pts.ndim == 2:  # one face: plain floats
        pts, irises = pts.tolist(), irises.tolist()
        return np.array([eye_angle(*pts[4 * eye], *pts[4 * eye + 1], *pts[4 * eye + 2], *pts[4 * eye + 3],
                                   *irises[eye]) for eye in range(2)], np.float32)
    # both eyes in one call: each coordinate (n, 2), faces by eyes (a call's numpy overhead paid once, not twice)
    corners = pts.reshape(len(pts), 2, 4, 2).transpose(2, 3, 0, 1)  # (point, x/y, face, eye)
    return np.stack(eye_angle(*corners.reshape(8, len(pts), 2), *irises.transpose(2, 0, 1)), -1).astype(np.float32)


def look_weights(yaw, pitch):
    """(toward the subject's left, toward the right, up, down) in [0, 1] of one eye's angles (floats or arrays)."""
    return (clip(yaw / LOOK_RANGE_YAW, 0.0, 1.0), clip(-yaw / LOOK_RANGE_YAW, 0.0, 1.0),
            clip(pitch / LOOK_RANGE_PITCH, 0.0, 1.0), clip(-pitch / LOOK_RANGE_PITCH, 0.0, 1.0))


def eye_look_shapes(blendshapes: np.ndarray, eyes) -> None:
    """Write eyeLook{In,Out,Up,Down}{Left,Right} from eye angles, in place: blendshapes (52,) and eyes (2, 2) (an
    array or nested lists) of one face, or (n, 52) and (n, 2, 2) of n faces."""
    if blendshapes.ndim == 1:  # one face: plain floats
        angles = eyes if isinstance(eyes, (list, tuple)) else np.asarray(eyes, np.float64).tolist()
    else:
        rows = np.asarray(eyes, np.float64)
        angles = [(rows[:, eye, 0], rows[:, eye, 1]) for eye in range(2)]
    for eye, ((yaw, pitch), (out_i, in_i, up_i, down_i)) in enumerate(zip(angles, _LOOK)):
        toward_left, toward_right, up, down = look_weights(yaw, pitch)
        # the left eye (0) looks "out" toward the subject's left; the right eye "in"
        out_w, in_w = (toward_left, toward_right) if eye == 0 else (toward_right, toward_left)
        blendshapes[..., out_i] = out_w
        blendshapes[..., in_i] = in_w
        blendshapes[..., up_i] = up
        blendshapes[..., down_i] = down


_LOOK = tuple(tuple(ARKIT_INDEX[f"eyeLook{d}{side}"] for d in ("Out", "In", "Up", "Down"))
              for side in ("Left", "Right"))
