"""FaceFrame -> facebridge.v1 messages: the stream header (names, layout) and the per-frame arrays."""
from __future__ import annotations

import math

import numpy as np

from bridge.frame import ARKIT_NAMES, EMOTION_NAMES, MORPH_BLOCKS, VISEME_NAMES, FaceFrame, FaceFrames, MorphParams
from bridge.grpc.frame_wire import encode_frames
from bridge.grpc.gen import facebridge_pb2 as pb

# Morphable-model blocks in the order they are concatenated in Frame.parameters (frame.MORPH_BLOCKS, the order
# frame_wire lays them out in), with their units.
_UNITS = {"identity": "coefficient", "expression": "coefficient", "jaw_rotation": "rad (axis-angle)",
          "head_rotation": "rad (axis-angle)", "head_translation": "cm", "eye_rotation_left": "rad (axis-angle)",
          "eye_rotation_right": "rad (axis-angle)"}
PARAMETER_BLOCKS: tuple[tuple[str, str], ...] = tuple((name, _UNITS[name]) for name in MORPH_BLOCKS)


def layout_key(frame: FaceFrame) -> tuple:
    """Everything that, when it changes, makes clients need a new header."""
    sizes = tuple(int(np.size(getattr(frame.morph, name))) for name, _ in PARAMETER_BLOCKS)
    return (len(frame.blendshapes), len(frame.emotion), frame.visemes is not None, frame.morph.model_id, sizes,
            tuple(sorted(frame.model_versions.items())), float(frame.frame_rate))


def layout_keys(frames: FaceFrames) -> list[tuple]:
    """layout_key of each row of `frames` (without a FaceFrame per row)."""
    versions = tuple(sorted(frames.model_versions.items()))
    found = tuple(int(frames.morph[name].shape[1]) if name in frames.morph else 0 for name, _ in PARAMETER_BLOCKS)
    lost = (0, 0, 3, 3, 3, 3, 3)  # MorphParams()
    shared = (frames.blendshapes.shape[1], frames.emotion.shape[1], False, frames.morph_model_id)
    return [(*shared, found if f else lost, versions, float(r)) for f, r in zip(frames.face_found.tolist(),
                                                                                 frames.frame_rate.tolist())]


def _names(names: tuple[str, ...], count: int, prefix: str) -> list[str]:
    return list(names) if count == len(names) else [f"{prefix}{i}" for i in range(count)]


def build_header(frame: FaceFrame, layout_id: int) -> pb.StreamHeader:
    header = pb.StreamHeader(
        subject=frame.subject,
        layout_id=layout_id,
        curve_names=_names(ARKIT_NAMES, len(frame.blendshapes), "curve"),
        emotion_names=_names(EMOTION_NAMES, len(frame.emotion), "emotion"),
        viseme_names=_names(VISEME_NAMES, len(frame.visemes), "viseme") if frame.visemes is not None
        else list(VISEME_NAMES),
        model_versions={str(k): str(v) for k, v in frame.model_versions.items()},
        frame_rate=float(frame.frame_rate),
    )
    header.parameters.model_id = frame.morph.model_id
    for name, unit in PARAMETER_BLOCKS:
        size = int(np.size(getattr(frame.morph, name)))
        if size:
            header.parameters.blocks.add(name=name, size=size, unit=unit)
    return header


def build_frame(frame: FaceFrame, layout_id: int) -> pb.Frame:
    # All float fields go through one array: one finiteness check (NaN/inf would poison every consumer's
    # interpolation; they become 0) and one tolist, instead of one per field.
    parts = [frame.blendshapes, frame.emotion, frame.visemes if frame.visemes is not None else (),
             frame.head_rotation[:3], frame.head_translation[:3], frame.eye_left[:2], frame.eye_right[:2]]
    parts += [getattr(frame.morph, name) for name, _ in PARAMETER_BLOCKS]
    arrays = [np.asarray(p, dtype=np.float32).ravel() for p in parts]
    values = np.concatenate(arrays)
    if not np.isfinite(values).all():
        values = np.where(np.isfinite(values), values, np.float32(0.0))
    flat = values.tolist()
    chunks, at = [], 0
    for a in arrays:
        chunks.append(flat[at:at + a.size])
        at += a.size
    curves, emotions, visemes, (yaw, pitch, roll), (tx, ty, tz), eye_l, eye_r = chunks[:7]
    tc_frame, tc_sub, tc_num, tc_den = frame.timecode()
    msg = pb.Frame(
        subject=frame.subject,
        layout_id=layout_id,
        seq=max(int(frame.seq), 0),
        capture_time=float(frame.t_capture),
        source_time=float(frame.t_capture_mono),
        timecode=pb.Timecode(frame=tc_frame, subframe=tc_sub, rate_numerator=tc_num, rate_denominator=tc_den),
        face_found=bool(frame.face_found),
        curves=curves,
        emotions=emotions,
        visemes=visemes,
        parameters=[x for chunk in chunks[7:] for x in chunk],
        confidence=_finite(frame.confidence),
        region_confidence={str(k): _finite(v) for k, v in frame.region_confidence.items()},
        latencies_ms={str(k): _finite(v) for k, v in frame.latencies_ms.items()},
    )
    msg.head.yaw_deg, msg.head.pitch_deg, msg.head.roll_deg = yaw, pitch, roll
    msg.head.translation_cm.x, msg.head.translation_cm.y, msg.head.translation_cm.z = tx, ty, tz
    msg.eye_left.yaw_deg, msg.eye_left.pitch_deg = eye_l
    msg.eye_right.yaw_deg, msg.eye_right.pitch_deg = eye_r
    return msg


def build_frames(frames: FaceFrames, layout_ids: list[int], latencies: list[dict] | None = None) -> list[pb.Frame]:
    """build_frame of every row of `frames` (row i under layout_ids[i], with latencies[i] if given, else the
    shared frames.latencies_ms), the same messages: each parsed from what frame_wire.encode_frames lays out for all
    rows at once (what `facebridge serve` sends as it is, without a message per frame)."""
    return [pb.Frame.FromString(data) for data in encode_frames(frames, layout_ids, latencies)]


def _finite(x) -> float:
    x = float(x)
    return x if math.isfinite(x) else 0.0


def parse_frame(header: pb.StreamHeader, msg: pb.Frame):
    """facebridge.v1 messages -> FaceFrame (what a remote client hands its local sinks); inverts build_frame for
    every field the header describes (landmarks do not travel)."""
    out = FaceFrame(seq=int(msg.seq), t_capture=msg.capture_time, t_capture_mono=msg.source_time,
                    subject=msg.subject or header.subject, face_found=msg.face_found,
                    frame_rate=header.frame_rate or 30.0, model_versions=dict(header.model_versions))
    if len(msg.curves) == len(ARKIT_NAMES):
        out.blendshapes = np.asarray(msg.curves, np.float32)
    if len(msg.emotions) == len(EMOTION_NAMES):
        out.emotion = np.asarray(msg.emotions, np.float32)
    out.visemes = np.asarray(msg.visemes, np.float32) if len(msg.visemes) else None
    out.head_rotation = np.array([msg.head.yaw_deg, msg.head.pitch_deg, msg.head.roll_deg], np.float32)
    t = msg.head.translation_cm
    out.head_translation = np.array([t.x, t.y, t.z], np.float32)
    out.eye_left = np.array([msg.eye_left.yaw_deg, msg.eye_left.pitch_deg], np.float32)
    out.eye_right = np.array([msg.eye_right.yaw_deg, msg.eye_right.pitch_deg], np.float32)
    morph, values, at = MorphParams(model_id=header.parameters.model_id), np.asarray(msg.parameters, np.float32), 0
    for block in header.parameters.blocks:
        if block.name in dict(PARAMETER_BLOCKS):
            setattr(morph, block.name, values[at:at + block.size].copy())
        at += block.size
    out.morph = morph
    out.confidence = msg.confidence
    out.region_confidence = dict(msg.region_confidence)
    out.latencies_ms = dict(msg.latencies_ms)
    return out
