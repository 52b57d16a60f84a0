"""FaceFrame: the one type every sink reads, and the fixed channel orders it uses.

Stages fill a FaceFrame; sinks only read it and never reach back into stages.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np

# Apple's 52 ARKit blendshapes in Apple's documented order (ARFaceAnchor.BlendShapeLocation, grouped by
# region), which is also Unreal's EARFaceBlendShape order used on the Live Link Face wire.
ARKIT_NAMES: tuple[str, ...] = (
    "eyeBlinkLeft", "eyeLookDownLeft", "eyeLookInLeft", "eyeLookOutLeft", "eyeLookUpLeft",
    "eyeSquintLeft", "eyeWideLeft",
    "eyeBlinkRight", "eyeLookDownRight", "eyeLookInRight", "eyeLookOutRight", "eyeLookUpRight",
    "eyeSquintRight", "eyeWideRight",
    "jawForward", "jawLeft", "jawRight", "jawOpen",
    "mouthClose", "mouthFunnel", "mouthPucker", "mouthLeft", "mouthRight",
    "mouthSmileLeft", "mouthSmileRight", "mouthFrownLeft", "mouthFrownRight",
    "mouthDimpleLeft", "mouthDimpleRight", "mouthStretchLeft", "mouthStretchRight",
    "mouthRollLower", "mouthRollUpper", "mouthShrugLower", "mouthShrugUpper",
    "mouthPressLeft", "mouthPressRight", "mouthLowerDownLeft", "mouthLowerDownRight",
    "mouthUpperUpLeft", "mouthUpperUpRight",
    "browDownLeft", "browDownRight", "browInnerUp", "browOuterUpLeft", "browOuterUpRight",
    "cheekPuff", "cheekSquintLeft", "cheekSquintRight",
    "noseSneerLeft", "noseSneerRight",
    "tongueOut",
)
ARKIT_INDEX = {name: i for i, name in enumerate(ARKIT_NAMES)}
NUM_BLENDSHAPES = len(ARKIT_NAMES)
assert NUM_BLENDSHAPES == 52

# Region groups used for confidence and for accuracy reports.
BLENDSHAPE_REGIONS: dict[str, tuple[str, ...]] = {
    "eyes": tuple(n for n in ARKIT_NAMES if n.startswith("eye")),
    "brows": tuple(n for n in ARKIT_NAMES if n.startswith("brow")),
    "jaw": tuple(n for n in ARKIT_NAMES if n.startswith("jaw")),
    "mouth": tuple(n for n in ARKIT_NAMES if n.startswith("mouth")),
    "cheeks_nose": tuple(n for n in ARKIT_NAMES if n.startswith(("cheek", "nose"))),
    "tongue": ("tongueOut",),
}

# fer's mini-Xception class order.
EMOTION_NAMES: tuple[str, ...] = ("angry", "disgust", "fear", "happy", "sad", "surprise", "neutral")

# The 15 standard (Oculus / MPEG-4 style) visemes.
VISEME_NAMES: tuple[str, ...] = (
    "sil", "PP", "FF", "TH", "DD", "kk", "CH", "SS", "nn", "RR", "aa", "E", "ih", "oh", "ou",
)


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.float32)


@dataclass
class MorphParams:
    """FLAME-style morphable-model parameters for one face.

    Angles are radians (axis-angle for rotations, like FLAME); translation is centimetres in camera space
    (x right, y down, z forward, OpenCV convention).
    """

    model_id: str = "ict-face-light"
    identity: np.ndarray = field(default_factory=lambda: _zeros(0))
    expression: np.ndarray = field(default_factory=lambda: _zeros(0))
    jaw_rotation: np.ndarray = field(default_factory=lambda: _zeros(3))
    head_rotation: np.ndarray = field(default_factory=lambda: _zeros(3))
    head_translation: np.ndarray = field(default_factory=lambda: _zeros(3))
    eye_rotation_left: np.ndarray = field(default_factory=lambda: _zeros(3))
    eye_rotation_right: np.ndarray = field(default_factory=lambda: _zeros(3))


@dataclass
class FaceFrame:
    """Everything FaceBridge knows about one subject at one capture instant.

    Conventions (docs/ARCHITECTURE.md, "Coordinates"): head rotation is (yaw, pitch, roll) in degrees with
    +yaw = the subject turns to their own left, +pitch = looks up, +roll = tilts toward their own left
    shoulder; eye gaze is (yaw, pitch) in degrees per eye with the same signs, relative to the head.
    """

    seq: int
    t_capture: float  # wall-clock seconds since the Unix epoch (for timecode)
    t_capture_mono: float  # time.perf_counter() at capture (for latency)
    subject: str = "FaceBridge"
    face_found: bool = False
    image_size: tuple[int, int] = (0, 0)  # (width, height)
    blendshapes: np.ndarray = field(default_factory=lambda: _zeros(NUM_BLENDSHAPES))
    head_rotation: np.ndarray = field(default_factory=lambda: _zeros(3))  # yaw, pitch, roll (deg)
    head_translation: np.ndarray = field(default_factory=lambda: _zeros(3))  # x, y, z (cm, camera space)
    eye_left: np.ndarray = field(default_factory=lambda: _zeros(2))  # yaw, pitch (deg)
    eye_right: np.ndarray = field(default_factory=lambda: _zeros(2))
    morph: MorphParams = field(default_factory=MorphParams)
    emotion: np.ndarray = field(default_factory=lambda: _zeros(len(EMOTION_NAMES)))
    visemes: np.ndarray | None = None  # (15,) when audio lip-sync runs
    confidence: float = 0.0  # overall face confidence in [0, 1]
    region_confidence: dict[str, float] = field(default_factory=dict)
    landmarks: np.ndarray | None = None  # (468, 3) image pixels, for monitors and debugging
    latencies_ms: dict[str, float] = field(default_factory=dict)  # per stage
    model_versions: dict[str, str] = field(default_factory=dict)
    frame_rate: float = 30.0

    def weight(self, name: str) -> float:
        return float(self.blendshapes[ARKIT_INDEX[name]])

    def timecode(self, rate: int | None = None) -> tuple[int, float, int, int]:
        """(frame number, subframe in [0,1), rate numerator, rate denominator) of the capture time,
        counted from midnight UTC so that several machines on NTP agree."""
        num = int(rate or round(self.frame_rate) or 30)
        seconds = self.t_capture % 86400.0
        frames = seconds * num
        whole = math.floor(frames)
        return whole, float(frames - whole), num, 1

    def to_dict(self) -> dict:
        """JSON-safe dict (used by the take recorder); `from_dict` inverts it."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if f.name == "morph":
                v = {k: (x.tolist() if isinstance(x, np.ndarray) else x) for k, x in dataclasses.asdict(v).items()}
            elif isinstance(v, np.ndarray):
                v = [round(float(x), 6) for x in v.ravel()] if f.name != "landmarks" else None
            elif isinstance(v, tuple):
                v = list(v)
            out[f.name] = v
        return out

    @classmethod
    def from_dict(cls, d: dict) -> FaceFrame:
        kw = dict(d)
        kw.pop("landmarks", None)
        arrays = {"blendshapes", "head_rotation", "head_translation", "eye_left", "eye_right", "emotion", "visemes"}
        for k in arrays:
            if kw.get(k) is not None:
                kw[k] = np.asarray(kw[k], dtype=np.float32)
        if "morph" in kw and isinstance(kw["morph"], dict):
            m = dict(kw["morph"])
            for k, v in m.items():
                if isinstance(v, list):
                    m[k] = np.asarray(v, dtype=np.float32)
            kw["morph"] = MorphParams(**m)
        if "image_size" in kw:
            kw["image_size"] = tuple(kw["image_size"])
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in kw.items() if k in known})
