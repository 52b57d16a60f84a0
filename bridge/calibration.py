"""Per-subject calibration profiles: the neutral face, stored once and applied on later runs.

A profile holds the subject's neutral blendshape weights, head rotation and eye angles (what their relaxed face
reads as), plus the expression engine's identity coefficients. Applying it removes that offset and rescales each
shape so the full range stays reachable: w' = (w - n) / (1 - n). It may also hold the subject's blendshape mapping
(bridge/mapping.py: gains, curves, dead zones, smoothing per region), applied after it; `calibrate --ranges`, the
monitor page and `calibrate --mapping FILE` store it here.

Files: one per subject under `profiles_dir()` (FACEBRIDGE_HOME/profiles, else ~/.config/facebridge/profiles),
named by a readable slug of the name plus a short hash of its exact UTF-8 bytes (`Ada_Lovelace-3e1f5a0c2b.json`,
`subject-7d4c...json` for `小明`), so two names never share a file and no name is too long or unsafe. A profile
is checked field by field on load (types, sizes, finite numbers) and refused with the fix, never half-applied.
"""
from __future__ import annotations

import hashlib
import json
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from bridge.errors import FaceBridgeError
from bridge.frame import NUM_BLENDSHAPES, FaceFrame
from bridge.fsutil import atomic_write_json
from bridge.mapping import parse_mapping
from bridge.paths import user_dir

PROFILE_VERSION = 1
SLUG_CHARS = 40  # the readable part of a file name; the hash keeps names apart


def profiles_dir() -> Path:
    return user_dir("profiles", kind="config")


def _legacy_name(subject: str) -> str:
    """The file name profiles had before names were hashed (several names shared one); read, never written."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", subject).strip("._") or "subject"


def profile_file_name(subject: str) -> str:
    """A distinct, safe file name for `subject`: readable ASCII slug + 10 hex digits of sha256(exact name)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", subject).strip("._-")[:SLUG_CHARS].rstrip("._-") or "subject"
    digest = hashlib.sha256(subject.encode("utf-8", errors="surrogatepass")).hexdigest()[:10]
    return f"{slug}-{digest}.json"


def _floats(data: dict, key: str, size: int | None) -> list[float]:
    value = data.get(key)
    if (not isinstance(value, list) or (size is not None and len(value) != size)
            or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in value)):
        want = f"a list of {size} numbers" if size is not None else "a list of numbers"
        raise ValueError(f"'{key}' is not {want}")
    if not all(math.isfinite(v) for v in value):
        raise ValueError(f"'{key}' holds NaN or infinity")
    return [float(v) for v in value]


def without_neutral(blendshapes, head_rotation, eyes, neutral_blendshapes, neutral_head_rotation, neutral_eyes):
    """(blendshapes, head rotation, eye angles) with a neutral face's taken off: the blendshapes rescaled so that
    the neutral reads 0 and 1 stays 1, the angles less the neutral's; one frame's, or rows of many (float32)."""
    blendshapes = np.clip((blendshapes - neutral_blendshapes) / np.maximum(1.0 - neutral_blendshapes, 0.2), 0.0, 1.0)
    return blendshapes.astype(np.float32), head_rotation - neutral_head_rotation, eyes - neutral_eyes


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
    mapping: dict | None = None  # the subject's mapping (bridge/mapping.py's JSON), None: none stored

    @classmethod
    def from_frames(cls, subject: str, frames: list[FaceFrame], identity: np.ndarray | None = None):
        found = [f for f in frames if f.face_found]
        if len(found) < max(5, len(frames) // 2):
            raise FaceBridgeError(f"a face was found in only {len(found)} of {len(frames)} calibration frames",
                                  "face the camera in good light with a relaxed, neutral face and try again")
        med = lambda xs: np.median(np.stack(xs), axis=0).tolist()  # noqa: E731  (median: robust to a blink)
        profile = cls(subject=subject,
                      neutral_blendshapes=med([f.blendshapes for f in found]),
                      neutral_head_rotation=med([f.head_rotation for f in found]),
                      neutral_eyes=med([np.stack([f.eye_left, f.eye_right]) for f in found]),
                      identity=[] if identity is None else np.asarray(identity, float).tolist(),
                      frames=len(found))
        values = profile.neutral_blendshapes + profile.neutral_head_rotation + sum(profile.neutral_eyes, [])
        if not all(math.isfinite(v) for v in values + profile.identity):
            raise FaceBridgeError("the calibration frames gave NaN or infinite values",
                                  "try again facing the camera; if it repeats, report it with `facebridge devices`")
        return profile

    def path(self, directory: Path | None = None) -> Path:
        return (directory or profiles_dir()) / profile_file_name(self.subject)

    def save(self, directory: Path | None = None) -> Path:
        """Store atomically (the previous profile stays whole until the new one has fully landed)."""
        return atomic_write_json(self.path(directory), asdict(self), strict=True)

    @classmethod
    def load(cls, subject: str, directory: Path | None = None) -> CalibrationProfile | None:
        """The subject's stored profile, None when there is none; FaceBridgeError when the file is damaged."""
        directory = directory or profiles_dir()
        path = directory / profile_file_name(subject)
        try:
            if not path.exists():
                legacy = directory / f"{_legacy_name(subject)}.json"
                if not _exists(legacy):
                    return None
                path = legacy
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise _damaged(path, subject, e.strerror or str(e)) from None
        except ValueError as e:
            raise _damaged(path, subject, f"not JSON: {e}") from None
        if path.name != profile_file_name(subject) and (not isinstance(data, dict) or data.get("subject") != subject):
            return None  # a legacy file shared by several names belongs to another subject
        try:
            return cls.from_dict(data)
        except ValueError as e:
            raise _damaged(path, subject, str(e)) from None

    @classmethod
    def from_dict(cls, data) -> CalibrationProfile:
        """A profile from its JSON, every field checked; ValueError names the first one that is wrong."""
        if not isinstance(data, dict):
            raise ValueError(f"it holds a JSON {type(data).__name__}, not a profile")
        subject = data.get("subject")
        if not isinstance(subject, str):
            raise ValueError("'subject' is not text")
        eyes = data.get("neutral_eyes")
        if not isinstance(eyes, list) or len(eyes) != 2:
            raise ValueError("'neutral_eyes' is not two [yaw, pitch] pairs")
        pairs = [_floats({"neutral_eyes": e}, "neutral_eyes", 2) for e in eyes]
        frames = data.get("frames", 0)
        if isinstance(frames, bool) or not isinstance(frames, int) or frames < 0:
            raise ValueError("'frames' is not a count")
        created = data.get("created", 0.0)
        if isinstance(created, bool) or not isinstance(created, (int, float)) or not math.isfinite(created):
            raise ValueError("'created' is not a time")
        mapping = data.get("mapping")
        if mapping is not None:
            try:
                mapping = parse_mapping(mapping, "in the profile").to_dict()
            except FaceBridgeError as e:
                raise ValueError(e.problem.removeprefix("mapping in the profile: ")) from None
        return cls(subject=subject,
                   neutral_blendshapes=_floats(data, "neutral_blendshapes", NUM_BLENDSHAPES),
                   neutral_head_rotation=_floats(data, "neutral_head_rotation", 3),
                   neutral_eyes=pairs,
                   identity=_floats({"identity": data.get("identity", [])}, "identity", None),
                   frames=frames, created=float(created), version=PROFILE_VERSION, mapping=mapping)

    def apply(self, frame: FaceFrame) -> None:
        """Remove the neutral offset from a frame, in place."""
        frame.blendshapes, frame.head_rotation, eyes = without_neutral(
            frame.blendshapes, frame.head_rotation, np.stack([frame.eye_left, frame.eye_right]),
            np.asarray(self.neutral_blendshapes, np.float32), np.asarray(self.neutral_head_rotation, np.float32),
            np.asarray(self.neutral_eyes, np.float32))
        frame.eye_left, frame.eye_right = eyes[0], eyes[1]


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a legacy name longer than the file system allows was never written
        return False


def _damaged(path: Path, subject: str, why: str) -> FaceBridgeError:
    return FaceBridgeError(f"calibration profile {path} is damaged ({why})",
                           f"run `facebridge calibrate --subject {subject}` again, delete the file, or run with "
                           "--no-calibration")
