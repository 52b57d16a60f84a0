"""Per-subject calibration profiles: the neutral face, stored once and applied on later runs.

A profile holds the subject's neutral blendshape weights, head rotation and eye angles (what their relaxed face
reads as), plus the expression engine's identity coefficients. Applying it removes that offset and rescales each
shape so the full range stays reachable: w' = (w - n) / (1 - n).
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.frame import NUM_BLENDSHAPES, FaceFrame
from bridge.fsutil import atomic_write_json

PROFILE_VERSION = 1


def profiles_dir() -> Path:
    base = os.environ.get("FACEBRIDGE_HOME") or os.path.join(
        os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "facebridge")
    return Path(base) / "profiles"


def _safe_name(subject: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", subject).strip("._") or "subject"


@dataclass
class CalibrationProfile:
    subject: str
    neutral_blendshapes: list[float] = field(default_factory=lambda: [0.0] * NUM_BLENDSHAPES)
    neutral_head_rotation: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    neutral_eyes: list[list[float]] = field(default_factory=lambda: [[0.0, 0.0], [0.0, 0.0]])
    identity: list[float] = field(default_factory=list)
    frames: int = 0
    created: float = field(default_factory=time.time)
    version: int = PROFILE_VERSION

    @classmethod
    def from_frames(cls, subject: str, frames: list[FaceFrame], identity: np.ndarray | None = None):
        found = [f for f in frames if f.face_found]
        if len(found) < max(5, len(frames) // 2):
            raise FaceBridgeError(f"a face was found in only {len(found)} of {len(frames)} calibration frames",
                                  "face the camera in good light with a relaxed, neutral face and try again")
        med = lambda xs: np.median(np.stack(xs), axis=0).tolist()  # noqa: E731  (median: robust to a blink)
        return cls(subject=subject,
                   neutral_blendshapes=med([f.blendshapes for f in found]),
                   neutral_head_rotation=med([f.head_rotation for f in found]),
                   neutral_eyes=med([np.stack([f.eye_left, f.eye_right]) for f in found]),
                   identity=[] if identity is None else np.asarray(identity, float).tolist(),
                   frames=len(found))

    def path(self, directory: Path | None = None) -> Path:
        return (directory or profiles_dir()) / f"{_safe_name(self.subject)}.json"

    def save(self, directory: Path | None = None) -> Path:
        return atomic_write_json(self.path(directory), asdict(self))

    @classmethod
    def load(cls, subject: str, directory: Path | None = None) -> CalibrationProfile | None:
        path = (directory or profiles_dir()) / f"{_safe_name(subject)}.json"
        if not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
            profile = cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
            if len(profile.neutral_blendshapes) != NUM_BLENDSHAPES:
                raise ValueError("wrong number of blendshapes")
            return profile
        except (ValueError, TypeError) as e:
            raise FaceBridgeError(f"calibration profile {path} is unreadable ({e})",
                                  f"run `facebridge calibrate --subject {subject}` again or delete the file") from None

    def apply(self, frame: FaceFrame) -> None:
        """Remove the neutral offset from a frame, in place."""
        n = np.asarray(self.neutral_blendshapes, np.float32)
        frame.blendshapes = np.clip((frame.blendshapes - n) / np.maximum(1.0 - n, 0.2), 0.0, 1.0).astype(np.float32)
        frame.head_rotation = (frame.head_rotation - np.asarray(self.neutral_head_rotation, np.float32))
        eyes = np.asarray(self.neutral_eyes, np.float32)
        frame.eye_left = frame.eye_left - eyes[0]
        frame.eye_right = frame.eye_right - eyes[1]
