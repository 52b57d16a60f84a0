"""Frame (what a source yields) and FaceFrame (the one type every sink reads), with the fixed channel orders.

Stages fill a FaceFrame from a Frame; sinks only read it and never reach back into stages. A Frame carries its
source's frame rate so that every output (Live Link Face timecode, take.json, USD stage rate, gRPC header) states
the rate the frames were really captured at.
"""
from __future__ import annotations

import dataclasses
import functools
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


@dataclass
class Frame:
    """One image from a source, as it crosses from the capture thread to the pipeline."""

    image: np.ndarray  # HxWx3 uint8, BGR (OpenCV order)
    seq: int
    t_capture: float  # wall clock, seconds since the Unix epoch
    t_capture_mono: float  # time.perf_counter() when the frame was captured (for latency)
    t_media: float = 0.0  # seconds on the source's own timeline (for filters): capture time for a camera,
    # position in the file for a video or image folder, however fast it is read
    fps: float = 30.0  # the source's frame rate (frames per second): a camera's mode, a video's stream rate


# NTSC rates are exact fractions (30000/1001); timecode counts their frames, not rounded 30 fps frames.
_NTSC = {23.976: (24000, 1001), 29.97: (30000, 1001), 47.952: (48000, 1001), 59.94: (60000, 1001),
         119.88: (120000, 1001)}


def rate_fraction(fps: float) -> tuple[int, int]:
    """(numerator, denominator) of a frame rate: whole rates as N/1, NTSC rates as N*1000/1001."""
    for value, fraction in _NTSC.items():
        if abs(fps - value) < 0.005:
            return fraction
    whole = round(fps) if math.isfinite(fps) else 0
    return (whole if whole > 0 else 30), 1


@functools.lru_cache(maxsize=64)
def _merged(base: tuple, name: str, version: str) -> dict[str, str]:
    return {**dict(base), name: version}


def versions_with(versions: dict[str, str], name: str, version: str) -> dict[str, str]:
    """`versions` with `name` set to `version`, as a shared dict that is never modified: a FaceFrame's
    model_versions is fixed per version, so frames already handed on never change when a model is swapped."""
    if versions.get(name) == version:
        return versions
    return _merged(tuple(sorted(versions.items())), name, version)


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

    Conventions (docs/FACE.md, "Coordinates"): head rotation is (yaw, pitch, roll) in degrees with
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
    model_versions: dict[str, str] = field(default_factory=dict)  # shared per version: replace, never modify
    frame_rate: float = 30.0  # the source's frame rate (Frame.fps)

    def weight(self, name: str) -> float:
        return float(self.blendshapes[ARKIT_INDEX[name]])

    def timecode(self, rate: int | None = None) -> tuple[int, float, int, int]:
        """(frame number, subframe in [0,1), rate numerator, rate denominator) of the capture time at the
        frame's own rate (or `rate` fps), counted from midnight UTC so that several machines on NTP agree."""
        num, den = (int(rate), 1) if rate else rate_fraction(self.frame_rate)
        seconds = self.t_capture % 86400.0
        frames = seconds * num / den
        whole = math.floor(frames)
        return whole, float(frames - whole), num, den

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


MORPH_BLOCKS = ("identity", "expression", "jaw_rotation", "head_rotation", "head_translation", "eye_rotation_left",
                "eye_rotation_right")


@dataclass
class FaceFrames:
    """FaceFrame's fields for n frames at once (one batched pass of n streams), as arrays with one row per frame:
    what a many-stream describe gives and the wire encodes without a FaceFrame per frame; `frame(i)` is row i as
    a FaceFrame. A row without a face has morph parameters of MorphParams() and no region confidence."""

    seq: np.ndarray  # (n,) int64
    t_capture: np.ndarray  # (n,) float64
    t_capture_mono: np.ndarray  # (n,) float64
    subject: list[str]
    face_found: np.ndarray  # (n,) bool
    image_size: np.ndarray  # (n, 2) width, height
    blendshapes: np.ndarray  # (n, 52) float32
    head_rotation: np.ndarray  # (n, 3)
    head_translation: np.ndarray  # (n, 3)
    eyes: np.ndarray  # (n, 2, 2): eye_left, eye_right
    emotion: np.ndarray  # (n, 7)
    confidence: np.ndarray  # (n,)
    morph: dict[str, np.ndarray]  # MORPH_BLOCKS -> (n, size), the rows with a face
    region_names: tuple[str, ...]
    region_confidence: np.ndarray  # (n, len(region_names)), the rows with a face
    frame_rate: np.ndarray  # (n,)
    model_versions: dict[str, str] = field(default_factory=dict)
    morph_model_id: str = "ict-face-light"
    landmarks: np.ndarray | None = None  # (n, 468, 3)
    latencies_ms: dict[str, float] = field(default_factory=dict)  # the same for every row (a pass's, per frame)

    def __len__(self) -> int:
        return len(self.seq)

    def frame(self, i: int) -> FaceFrame:
        out = FaceFrame(seq=int(self.seq[i]), t_capture=float(self.t_capture[i]),
                        t_capture_mono=float(self.t_capture_mono[i]), subject=self.subject[i],
                        face_found=bool(self.face_found[i]), image_size=tuple(int(v) for v in self.image_size[i]),
                        blendshapes=self.blendshapes[i].copy(), head_rotation=self.head_rotation[i].copy(),
                        head_translation=self.head_translation[i].copy(), eye_left=self.eyes[i, 0].copy(),
                        eye_right=self.eyes[i, 1].copy(), emotion=self.emotion[i].copy(),
                        confidence=float(self.confidence[i]), model_versions=self.model_versions,
                        frame_rate=float(self.frame_rate[i]), latencies_ms=dict(self.latencies_ms))
        if out.face_found:
            out.morph = MorphParams(model_id=self.morph_model_id,
                                    **{name: self.morph[name][i].copy() for name in MORPH_BLOCKS})
            out.region_confidence = dict(zip(self.region_names, self.region_confidence[i].tolist()))
            out.landmarks = self.landmarks[i] if self.landmarks is not None else None
        return out
