"""Eye gaze from iris position inside the eye opening, and the ARKit eyeLook* shapes that follow from it."""
from __future__ import annotations

import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mesh import EYE_CORNERS, EYE_LID_PAIRS

# Face-mesh indices per eye (subject's left, subject's right): corners (toward image-left first) and lids.
EYE_LIDS = tuple(pairs[1] for pairs in EYE_LID_PAIRS)  # the middle (upper, lower) pair of each eye
MAX_YAW_DEG = 35.0  # iris at the corner ~ this rotation
MAX_PITCH_DEG = 25.0
LOOK_RANGE_YAW = 25.0  # degrees of eye yaw that give eyeLookIn/Out = 1
LOOK_RANGE_PITCH = 20.0


def eye_angles(points: np.ndarray, iris_centres: np.ndarray) -> np.ndarray:
    """(2, 2) yaw, pitch degrees per eye (subject's left, right); FaceFrame signs (+yaw = subject's left)."""
    out = np.zeros((2, 2), np.float32)
    for eye in range(2):
        a, b = points[EYE_CORNERS[eye][0], :2], points[EYE_CORNERS[eye][1], :2]
        axis = b - a
        width = float(np.linalg.norm(axis))
        if width < 1e-3:
            continue
        axis /= width
        normal = np.array([-axis[1], axis[0]])  # points down the image when the eye is level
        centre = (a + b) / 2
        up, down = points[EYE_LIDS[eye][0], :2], points[EYE_LIDS[eye][1], :2]
        mid_lid = (up + down) / 2
        offset = iris_centres[eye, :2] - centre
        h = float(offset @ axis) / (width / 2)  # -1..1 across the eye, + toward image right
        v = float((iris_centres[eye, :2] - mid_lid) @ normal) / (width / 2)
        out[eye, 0] = np.clip(h, -1, 1) * MAX_YAW_DEG  # image right = subject's left = +yaw
        out[eye, 1] = -np.clip(v * 2.0, -1, 1) * MAX_PITCH_DEG  # image down = looking down = -pitch
    return out


def eye_look_shapes(blendshapes: np.ndarray, eyes: np.ndarray) -> None:
    """Write eyeLook{In,Out,Up,Down}{Left,Right} from eye angles (in place)."""
    for eye, side in ((0, "Left"), (1, "Right")):
        yaw, pitch = eyes[eye]
        toward_left = np.clip(yaw / LOOK_RANGE_YAW, 0, 1)
        toward_right = np.clip(-yaw / LOOK_RANGE_YAW, 0, 1)
        # the left eye looks "out" toward the subject's left; the right eye "in"
        out_w, in_w = (toward_left, toward_right) if side == "Left" else (toward_right, toward_left)
        blendshapes[ARKIT_INDEX[f"eyeLookOut{side}"]] = out_w
        blendshapes[ARKIT_INDEX[f"eyeLookIn{side}"]] = in_w
        blendshapes[ARKIT_INDEX[f"eyeLookUp{side}"]] = np.clip(pitch / LOOK_RANGE_PITCH, 0, 1)
        blendshapes[ARKIT_INDEX[f"eyeLookDown{side}"]] = np.clip(-pitch / LOOK_RANGE_PITCH, 0, 1)
