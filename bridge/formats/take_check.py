"""What a take may hold: every field of a frames.jsonl record and of take.json is checked on read, and a frame
whose capture time jumps (forward past MAX_GAP_S, or backwards) is put one frame after the one before it.

A take is a file anyone can edit, so nothing in it is trusted: a record with a wrong type, a wrong size, a value
that is not finite or out of range is refused with the reason (the reader skips it and names its line); a clock
step makes neither replay sleep for a day nor the USD export drop every later frame.
"""
from __future__ import annotations

import math

import numpy as np

from bridge.frame import EMOTION_NAMES, NUM_BLENDSHAPES, VISEME_NAMES, FaceFrame, MorphParams

MAX_GAP_S = 5.0  # a longer pause between two frames of one subject is a clock step, not a pause of the camera
MAX_UNIX_TIME = 1e11  # capture times are Unix seconds: 0 < t < year 5138
MIN_RATE, MAX_RATE = 1.0, 1000.0  # frames per second a take may state
MAX_TEXT = 1024  # characters of a subject name or a model version
MAX_ARRAY = 10_000  # values of one morphable-model block


class BadRecord(ValueError):
    """A frames.jsonl record that is not a frame; the message says which field and why."""


def _number(record: dict, key: str, default=None, low: float = -math.inf, high: float = math.inf) -> float:
    value = record.get(key, default)
    if value is None and default is None:
        raise BadRecord(f"'{key}' is missing")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRecord(f"'{key}' is {type(value).__name__}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise BadRecord(f"'{key}' is {value}")
    if not low <= value <= high:
        raise BadRecord(f"'{key}' {value:g} is outside [{low:g}, {high:g}]")
    return value


def _array(record: dict, key: str, sizes: tuple[int, ...], optional: bool = False) -> np.ndarray | None:
    value = record.get(key)
    if value is None:
        if optional:
            return None
        raise BadRecord(f"'{key}' is missing")
    array = np.asarray(value) if isinstance(value, list) else None
    if array is None or array.ndim != 1 or (array.size and array.dtype.kind not in "fiu"):
        raise BadRecord(f"'{key}' is not a list of numbers")  # text, null, nested lists come out as other kinds
    if sizes and len(array) not in sizes:
        raise BadRecord(f"'{key}' has {len(array)} values, not {' or '.join(map(str, sizes))}")
    if array.size and not np.abs(array).max() <= 3.4e38:  # NaN and inf fail the comparison, as do huge values
        raise BadRecord(f"'{key}' holds a value that is not a finite number")
    return array.astype(np.float32)


def _text(value, key: str) -> str:
    if not isinstance(value, str):
        raise BadRecord(f"'{key}' is {type(value).__name__}, not text")
    if len(value) > MAX_TEXT:
        raise BadRecord(f"'{key}' is {len(value)} characters long")
    return value


def _numbers_by_name(record: dict, key: str) -> dict[str, float]:
    value = record.get(key) or {}
    if not isinstance(value, dict):
        raise BadRecord(f"'{key}' is not an object")
    return {_text(k, key): _number(value, k) for k in value}


def _morph(value) -> MorphParams:
    if value is None:
        return MorphParams()
    if not isinstance(value, dict):
        raise BadRecord("'morph' is not an object")
    kw = {}
    for name in ("identity", "expression", "jaw_rotation", "head_rotation", "head_translation",
                 "eye_rotation_left", "eye_rotation_right"):
        if value.get(name) is not None:
            array = _array(value, name, ())
            if array.size > MAX_ARRAY:
                raise BadRecord(f"'morph.{name}' has {array.size} values")
            kw[name] = array
    if "model_id" in value:
        kw["model_id"] = _text(value["model_id"], "morph.model_id")
    return MorphParams(**kw)


def frame_from_record(record) -> FaceFrame:
    """The FaceFrame one frames.jsonl record describes, every field checked; BadRecord says what is wrong."""
    if not isinstance(record, dict):
        raise BadRecord(f"the line is a JSON {type(record).__name__}, not an object")
    seq = record.get("seq", 0)
    if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < 2**63:
        raise BadRecord("'seq' is not a frame number")
    t_capture = _number(record, "t_capture", low=1e-9, high=MAX_UNIX_TIME)
    image_size = record.get("image_size", [0, 0])
    if (not isinstance(image_size, list) or len(image_size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1_000_000 for v in image_size)):
        raise BadRecord("'image_size' is not [width, height]")
    face_found = record.get("face_found", False)
    if not isinstance(face_found, bool):
        raise BadRecord("'face_found' is not true or false")
    versions = record.get("model_versions") or {}
    if not isinstance(versions, dict):
        raise BadRecord("'model_versions' is not an object")
    emotion = _array(record, "emotion", (0, len(EMOTION_NAMES)), optional=True)
    return FaceFrame(
        seq=seq, t_capture=t_capture,
        t_capture_mono=_number(record, "t_capture_mono", default=t_capture, low=-1e12, high=1e12),
        subject=_text(record.get("subject", "FaceBridge"), "subject"),
        face_found=face_found, image_size=(image_size[0], image_size[1]),
        blendshapes=_array(record, "blendshapes", (NUM_BLENDSHAPES,)),
        head_rotation=_array(record, "head_rotation", (3,)),
        head_translation=_array(record, "head_translation", (3,)),
        eye_left=_array(record, "eye_left", (2,)),
        eye_right=_array(record, "eye_right", (2,)),
        morph=_morph(record.get("morph")),
        emotion=np.zeros(len(EMOTION_NAMES), np.float32) if emotion is None else emotion,
        visemes=_array(record, "visemes", (len(VISEME_NAMES),), optional=True),
        confidence=_number(record, "confidence", default=0.0, low=-1e6, high=1e6),
        region_confidence=_numbers_by_name(record, "region_confidence"),
        latencies_ms=_numbers_by_name(record, "latencies_ms"),
        model_versions={_text(k, "model_versions"): _text(v, "model_versions") for k, v in versions.items()},
        frame_rate=_number(record, "frame_rate", default=30.0, low=MIN_RATE, high=MAX_RATE),
    )


def sane_rate(value) -> float | None:
    """A frame rate from take.json, or None when it is missing or not a rate at all."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and MIN_RATE <= value <= MAX_RATE else None


def checked_metadata(meta) -> tuple[dict, list[str]]:
    """take.json's fields that are usable, and what was wrong with the others (for a warning)."""
    if not isinstance(meta, dict):
        return {}, [f"it is a JSON {type(meta).__name__}, not an object"]
    problems, out = [], dict(meta)
    if "frame_rate" in meta and meta["frame_rate"] is not None and sane_rate(meta["frame_rate"]) is None:
        problems.append(f"frame_rate {meta['frame_rate']!r} is not between {MIN_RATE:g} and {MAX_RATE:g}")
        out.pop("frame_rate")
    frames = meta.get("frames")
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 0):
        problems.append(f"frames {frames!r} is not a count")
        out.pop("frames")
    if "complete" in meta and not isinstance(meta["complete"], bool):
        problems.append("complete is not true or false")
        out.pop("complete")
    for key in ("subject", "started"):
        if key in meta and meta[key] is not None and not isinstance(meta[key], str):
            problems.append(f"{key} is not text")
            out.pop(key)
    return out, problems


class Timeline:
    """Keeps each subject's capture times moving forward by sane steps: a frame more than MAX_GAP_S after the
    one before it, or not after it at all, is placed one frame interval after it, and so are the frames that
    follow it (the offset is kept), so one bad stamp moves nothing else."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._offset: dict[str, float] = {}
        self.clamped = 0

    def place(self, frame: FaceFrame) -> bool:
        """Correct `frame.t_capture` in place; True when it had to be moved."""
        subject = frame.subject
        t = frame.t_capture + self._offset.get(subject, 0.0)
        last = self._last.get(subject)
        moved = False
        if last is not None and not 0.0 < t - last <= MAX_GAP_S:
            fixed = last + 1.0 / frame.frame_rate
            self._offset[subject] = self._offset.get(subject, 0.0) + fixed - t
            t, moved = fixed, True
            self.clamped += 1
        self._last[subject] = t
        frame.t_capture = t
        return moved
