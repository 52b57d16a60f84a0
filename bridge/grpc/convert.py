"""FaceFrame -> facebridge.v1 messages: the stream header (names, layout) and the per-frame arrays."""
from __future__ import annotations

import math

import numpy as np

from bridge.frame import ARKIT_NAMES, EMOTION_NAMES, VISEME_NAMES, FaceFrame, FaceFrames, rate_fraction
from bridge.grpc.gen import facebridge_pb2 as pb

# Morphable-model blocks in the order they are concatenated in Frame.parameters, with their units.
PARAMETER_BLOCKS: tuple[tuple[str, str], ...] = (
    ("identity", "coefficient"),
    ("expression", "coefficient"),
    ("jaw_rotation", "rad (axis-angle)"),
    ("head_rotation", "rad (axis-angle)"),
    ("head_translation", "cm"),
    ("eye_rotation_left", "rad (axis-angle)"),
    ("eye_rotation_right", "rad (axis-angle)"),
)


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
    shared frames.latencies_ms), the same messages: the float arrays of all rows are laid out in protobuf's wire
    format at once (packed floats, the head and eye messages, the maps) and each message takes its own bytes in
    one parse, instead of one Python float at a time."""
    n = len(frames)
    finite = lambda a: np.where(np.isfinite(a), a, 0.0).astype("<f4")  # noqa: E731 NaN/inf -> 0, as build_frame
    head = np.concatenate([finite(frames.head_rotation[:, :3]), finite(frames.head_translation[:, :3])], 1)
    eyes = finite(frames.eyes.reshape(n, 4))
    fixed = [_packed(8, finite(frames.blendshapes)), _packed(12, finite(frames.emotion)),
             _message(9, [(1, head[:, 0]), (2, head[:, 1]), (3, head[:, 2])],
                      (4, [(1, head[:, 3]), (2, head[:, 4]), (3, head[:, 5])])),
             _message(10, [(1, eyes[:, 0]), (2, eyes[:, 1])]), _message(11, [(1, eyes[:, 2]), (2, eyes[:, 3])])]
    found = frames.face_found
    if latencies is None:
        latencies = [frames.latencies_ms] * n
    keys = [str(k) for k in latencies[0]] if n else []
    same_keys = all(len(row) == len(keys) and all(str(k) == key for k, key in zip(row, keys)) for row in latencies)
    if keys and same_keys:  # the latencies map in the wire bytes too (every row has the same stages)
        fixed.append(_float_map(17, keys, finite(np.array([list(row.values()) for row in latencies], np.float64))))
    wire = np.concatenate(fixed, 1)
    tails = {}  # the rows with a face: their parameters and region confidence
    if found.any():
        rows = np.flatnonzero(found)
        blocks = np.concatenate([frames.morph[name][rows].reshape(len(rows), -1) for name, _ in PARAMETER_BLOCKS], 1)
        names = [str(name) for name in frames.region_names]
        tail = np.concatenate([_packed(14, finite(blocks)), _float_map(16, names,
                                                                       finite(frames.region_confidence[rows]))], 1)
        tails = dict(zip(rows.tolist(), tail))
    lost = _packed(14, np.zeros((1, 15), "<f4"))[0].tobytes()  # MorphParams(): jaw, head and eyes, zeros
    seconds = frames.t_capture % 86400.0
    rates = {r: rate_fraction(r) for r in set(frames.frame_rate.tolist())}
    confidence = np.where(np.isfinite(frames.confidence), frames.confidence, 0.0).tolist()
    out = []
    for i in range(n):
        num, den = rates[float(frames.frame_rate[i])]
        tc = float(seconds[i]) * num / den
        whole = math.floor(tc)
        msg = pb.Frame(subject=frames.subject[i], layout_id=layout_ids[i], seq=max(int(frames.seq[i]), 0),
                       capture_time=float(frames.t_capture[i]), source_time=float(frames.t_capture_mono[i]),
                       timecode=pb.Timecode(frame=whole, subframe=tc - whole, rate_numerator=num,
                                            rate_denominator=den),
                       face_found=bool(found[i]), confidence=confidence[i])
        msg.MergeFromString(wire[i].tobytes() + (tails[i].tobytes() if found[i] else lost))
        if not same_keys:
            msg.latencies_ms.update({str(k): _finite(v) for k, v in latencies[i].items()})
        out.append(msg)
    return out


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _columns(parts: list, n: int) -> np.ndarray:
    """(n, bytes) uint8: each part either constant bytes (the same in every row) or float32 values (n,) or (n, k)."""
    cols = []
    for part in parts:
        if isinstance(part, bytes):
            cols.append(np.broadcast_to(np.frombuffer(part, np.uint8), (n, len(part))))
        else:
            cols.append(np.ascontiguousarray(part, "<f4").reshape(n, -1).view(np.uint8))
    return np.concatenate(cols, 1)


def _packed(field: int, values: np.ndarray) -> np.ndarray:
    """A packed repeated float field of each row: tag, length, the little-endian floats."""
    n, k = values.shape
    return _columns([_varint(field << 3 | 2) + _varint(4 * k), values], n)


def _float_map(field: int, keys: list[str], values: np.ndarray) -> np.ndarray:
    """A map<string, float> field of each row, every row with the same keys: one entry message per key."""
    parts = []
    for j, key in enumerate(keys):
        name = key.encode()
        entry = b"\x0a" + _varint(len(name)) + name + b"\x15"
        parts += [_varint(field << 3 | 2) + _varint(len(entry) + 4) + entry, values[:, j]]
    return _columns(parts, len(values))


def _message(field: int, floats: list, child: tuple | None = None) -> np.ndarray:
    """A sub-message of float fields (number, (n,) values), and optionally one sub-message (number, its floats)."""
    n = len(floats[0][1])
    parts = []
    for number, values in floats:
        parts += [_varint(number << 3 | 5), values]
    body = _columns(parts, n)
    if child is not None:
        body = np.concatenate([body, _message(child[0], child[1])], 1)
    return np.concatenate([_columns([_varint(field << 3 | 2) + _varint(body.shape[1])], n), body], 1)


def _finite(x) -> float:
    x = float(x)
    return x if math.isfinite(x) else 0.0


def parse_frame(header: pb.StreamHeader, msg: pb.Frame):
    """facebridge.v1 messages -> FaceFrame (what a remote client hands its local sinks); inverts build_frame for
    every field the header describes (landmarks do not travel)."""
    from bridge.frame import MorphParams

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
