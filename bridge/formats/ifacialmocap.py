"""The iFacialMocap UDP text protocol: one datagram of UTF-8 text per frame, as the iPhone app sends it (described
by its author for developers at ifacialmocap.com/for-developer; the de-facto interchange format that VMagicMirror,
VRCFaceTracking, VNyan, Warudo and VSeeFace accept; UDP port 49983).

    name-value|name-value|...|=head#X,Y,Z,x,y,z|rightEye#X,Y,Z|leftEye#X,Y,Z|

Values are the 52 ARKit blendshapes as whole numbers 0 to 100, named as the app names them: ARKit's names with a
side suffix `_L` / `_R` in place of `Left` / `Right` (eyeBlink_L, mouthSmile_R), except jawLeft, jawRight,
mouthLeft and mouthRight, which are directions and keep their names. The head is three Euler angles in degrees and
a position; each eye three Euler angles in degrees.

Angles follow Unity's conventions, as the VMC sink's do (sinks/vmc.py): X = -pitch (positive tilts the nose down),
Y = -yaw, Z = roll, from FaceFrame's (yaw, pitch, roll); an eye's roll is 0. The position is metres in ARKit's
camera space (x right, y up, z toward the viewer: a face in front of the camera has negative z), from FaceFrame's
centimetres (x right, y down, z away from the camera). The app itself is closed, so these signs are this bridge's
reading of the description, not a measured fact about the app.
"""
from __future__ import annotations

import math

import numpy as np

from bridge import ports
from bridge.frame import ARKIT_NAMES, FaceFrame

DEFAULT_PORT = ports.port_of(ports.IFACIALMOCAP)
DIRECTIONS = ("jawLeft", "jawRight", "mouthLeft", "mouthRight")  # not sides: these keep their names


def ifm_name(arkit: str) -> str:
    """ARKit name -> iFacialMocap name (eyeBlinkLeft -> eyeBlink_L; jawLeft stays jawLeft)."""
    if arkit in DIRECTIONS:
        return arkit
    if arkit.endswith("Left"):
        return arkit[:-4] + "_L"
    if arkit.endswith("Right"):
        return arkit[:-5] + "_R"
    return arkit


IFM_NAMES: tuple[str, ...] = tuple(ifm_name(n) for n in ARKIT_NAMES)  # ARKit order


def _finite(values) -> list[float]:
    return [float(v) if math.isfinite(float(v)) else 0.0 for v in np.asarray(values, np.float64).reshape(-1)]


def _angles(yaw: float, pitch: float, roll: float = 0.0) -> str:
    return f"{-pitch:.4f},{-yaw:.4f},{roll:.4f}"


def encode_ifm(frame: FaceFrame) -> bytes:
    """One frame as the app's datagram (NaN or infinity sent as 0)."""
    weights = np.clip(np.nan_to_num(np.asarray(frame.blendshapes, np.float64)[:len(IFM_NAMES)]), 0.0, 1.0)
    parts = [f"{name}-{int(round(w * 100))}" for name, w in zip(IFM_NAMES, weights)]
    yaw, pitch, roll = _finite(frame.head_rotation)[:3]
    x, y, z = (v / 100.0 for v in _finite(frame.head_translation)[:3])
    left, right = _finite(frame.eye_left)[:2], _finite(frame.eye_right)[:2]
    parts.append(f"=head#{_angles(yaw, pitch, roll)},{x:.5f},{-y:.5f},{-z:.5f}")
    parts.append(f"rightEye#{_angles(*right)}")
    parts.append(f"leftEye#{_angles(*left)}")
    return ("|".join(parts) + "|").encode("utf-8")
