"""encode_frames: every row of a pass's FaceFrames as a serialised facebridge.v1.Frame at once, from a byte template
per row layout: its tags, lengths and map keys laid out once, every float and double of all the rows written into
it by one scatter, then each row's few varints (subject, layout, seq, timecode) joined in front. A pass of n frames
costs a few numpy calls and n short joins instead of n message objects (bytes that parse to the messages
build_frame makes; tests/grpc/test_convert.py). `frame_response` wraps one as a TrackResponse with the stream's
counters, on the serve loop, without a message object either; `many_frame_reply` as TrackMany's reply of it.
"""
from __future__ import annotations

import math
import struct
from functools import lru_cache

import numpy as np

from bridge.frame import MORPH_BLOCKS, FaceFrames, rate_fraction

# Frame field tags (number << 3 | wire type) of facebridge.v1.Frame
_SUBJECT, _LAYOUT, _SEQ, _CAPTURE, _SOURCE, _TIMECODE = b"\x0a", b"\x10", b"\x18", b"\x21", b"\x29", b"\x32"
_FOUND, _CURVES, _HEAD, _EYE_LEFT, _EYE_RIGHT, _EMOTIONS = b"\x38\x01", b"\x42", b"\x4a", b"\x52", b"\x5a", b"\x62"
_PARAMETERS, _CONFIDENCE, _REGIONS, _LATENCIES = b"\x72", b"\x7d", b"\x82\x01", b"\x8a\x01"
_DROPPED, _SEND_TIME = b"\x90\x01", b"\x99\x01"
_DOUBLE, _FLOAT = struct.Struct("<d"), struct.Struct("<f")
_LOST_PARAMETERS = 15  # MorphParams(): jaw, head rotation and translation, both eyes, 3 zeros each


def varint(value: int) -> bytes:
    """A non-negative int as a protobuf varint."""
    if value < _SMALL:
        return _SMALL_VARINTS[value]
    return _varint(value)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


_SMALL = 1 << 14
_SMALL_VARINTS = tuple(_varint(v) for v in range(_SMALL))  # counters, layout ids, rates: a lookup, not a loop


class _Layout:
    """The wire bytes of one row layout: constant bytes, with the places of its floats and doubles."""

    def __init__(self, parts: list) -> None:
        """parts: bytes (constant), or ("f4", count) / ("f8", count): that many floats / doubles, in order."""
        template, f4, f8 = bytearray(), [], []
        for part in parts:
            if isinstance(part, bytes):
                template += part
                continue
            kind, count = part
            width = 4 if kind == "f4" else 8
            (f4 if kind == "f4" else f8).extend(range(len(template), len(template) + width * count))
            template += bytes(width * count)
        self.template = np.frombuffer(bytes(template), np.uint8)
        self.f4, self.f8 = np.array(f4, np.intp), np.array(f8, np.intp)

    def rows(self, floats: np.ndarray, doubles: np.ndarray) -> np.ndarray:
        """(n, len) uint8: the template with each row's floats (n, k) float32 and doubles (n, m) float64."""
        out = np.empty((len(floats), len(self.template)), np.uint8)
        out[:] = self.template
        out[:, self.f4] = np.ascontiguousarray(floats, "<f4").view(np.uint8)
        out[:, self.f8] = np.ascontiguousarray(doubles, "<f8").view(np.uint8)
        return out


def _floats_field(tag: bytes, count: int) -> list:
    return [tag + varint(4 * count), ("f4", count)]


def _map_field(tag: bytes, keys: tuple[str, ...]) -> list:
    """A map<string, float> with these keys, one entry message per key."""
    parts = []
    for key in keys:
        name = key.encode()
        entry = b"\x0a" + varint(len(name)) + name + b"\x15"
        parts += [tag + varint(len(entry) + 4) + entry, ("f4", 1)]
    return parts


@lru_cache(maxsize=64)
def _layout(found: bool, curves: int, emotions: int, parameters: int, regions: tuple, latencies: tuple) -> _Layout:
    """Every field but subject, layout, seq and timecode (their lengths vary), in the order of the float columns
    encode_frames gathers: curves, head, eyes, emotions, [parameters], confidence, [regions], latencies."""
    head = [b"\x0d", ("f4", 1), b"\x15", ("f4", 1), b"\x1d", ("f4", 1),
            b"\x22\x0f", b"\x0d", ("f4", 1), b"\x15", ("f4", 1), b"\x1d", ("f4", 1)]  # HeadPose, 32 bytes
    eye = [b"\x0a", b"\x0d", ("f4", 1), b"\x15", ("f4", 1)]  # EyeGaze, 10 bytes (length first)
    parts = [_CAPTURE, ("f8", 1), _SOURCE, ("f8", 1), _FOUND if found else b"", *_floats_field(_CURVES, curves),
             _HEAD + b"\x20", *head, _EYE_LEFT, *eye, _EYE_RIGHT, *eye, *_floats_field(_EMOTIONS, emotions)]
    if found:
        parts += _floats_field(_PARAMETERS, parameters)
    else:
        parts.append(_PARAMETERS + varint(4 * _LOST_PARAMETERS) + bytes(4 * _LOST_PARAMETERS))
    parts += [_CONFIDENCE, ("f4", 1)]
    if found:
        parts += _map_field(_REGIONS, regions)
    parts += _map_field(_LATENCIES, latencies)
    return _Layout(parts)


@lru_cache(maxsize=4096)
def _subject(name: str) -> bytes:
    data = name.encode()
    return _SUBJECT + varint(len(data)) + data


def _finite(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), a, 0.0).astype("<f4")


def encode_frames(frames: FaceFrames, layout_ids: list[int], latencies: list[dict] | None = None,
                  stages: tuple[tuple[str, ...], np.ndarray] | None = None) -> list[bytes]:
    """build_frame of every row of `frames`, serialised (row i under layout_ids[i], with latencies[i] if given,
    else the shared frames.latencies_ms; NaN and inf as 0), Frame.parameters' morph blocks in MORPH_BLOCKS' order
    (convert.PARAMETER_BLOCKS'). stages: every row's latencies as (keys,
    (n, len(keys)) values), in place of `latencies` (no dict a row)."""
    n = len(frames)
    if not n:
        return []
    if stages is not None:
        keys, same_keys, stages = tuple(stages[0]), True, np.asarray(stages[1], np.float64).reshape(n, -1)
    else:
        if latencies is None:
            latencies = [frames.latencies_ms] * n
        keys = tuple(str(k) for k in latencies[0])
        same_keys = all(len(row) == len(keys) and all(str(k) == key for k, key in zip(row, keys))
                        for row in latencies)
        stages = np.array([list(row.values()) for row in latencies], np.float64) if same_keys else np.zeros((n, 0))
    common = np.concatenate([frames.blendshapes, frames.head_rotation[:, :3], frames.head_translation[:, :3],
                             frames.eyes.reshape(n, 4), frames.emotion], 1)
    doubles = np.stack([frames.t_capture, frames.t_capture_mono], 1).astype(np.float64)
    found = np.asarray(frames.face_found, bool)
    body = [b""] * n
    regions = tuple(str(name) for name in frames.region_names)
    for is_found in (True, False):
        at = np.flatnonzero(found == is_found)
        if not len(at):
            continue
        cols = [common[at]]
        parameters = 0
        if is_found:
            cols.append(np.concatenate([frames.morph[name][at].reshape(len(at), -1) for name in MORPH_BLOCKS], 1))
            parameters = cols[-1].shape[1]
        cols.append(frames.confidence[at, None])
        if is_found:
            cols.append(frames.region_confidence[at])
        cols.append(stages[at])
        layout = _layout(is_found, frames.blendshapes.shape[1], frames.emotion.shape[1], parameters, regions,
                         keys if same_keys else ())
        rows = layout.rows(_finite(np.concatenate(cols, 1)), doubles[at])
        blob, width = rows.tobytes(), rows.shape[1]
        for j, i in enumerate(at.tolist()):
            body[i] = blob[j * width:(j + 1) * width]
    out = []
    seconds = frames.t_capture % 86400.0
    rates = {r: rate_fraction(r) for r in set(frames.frame_rate.tolist())}
    seqs = np.maximum(frames.seq, 0).tolist()
    for i in range(n):
        num, den = rates[float(frames.frame_rate[i])]
        tc = float(seconds[i]) * num / den
        whole = math.floor(tc)
        timecode = b"\x08" + varint(whole) + b"\x15" + _FLOAT.pack(tc - whole) + b"\x18" + varint(num) \
            + b"\x20" + varint(den)
        head = [_subject(frames.subject[i]), _LAYOUT, varint(layout_ids[i]), _SEQ, varint(seqs[i]), _TIMECODE,
                varint(len(timecode)), timecode, body[i]]
        if not same_keys:
            head.append(_latencies(latencies[i]))
        out.append(b"".join(head))
    return out


def _latencies(row: dict) -> bytes:
    """One row's latencies map, row by row (rows with other stages than the first's)."""
    keys = tuple(str(k) for k in row)
    values = _finite(np.array([float(v) for v in row.values()], np.float64))
    return _Layout(_map_field(_LATENCIES, keys)).rows(values[None], np.zeros((1, 0)))[0].tobytes()


def frame_response(frame: bytes, received: int, stale: int, late: int, bad: int, replica: bytes, slot: int,
                   send_time: float) -> bytes:
    """A serialised TrackResponse of one encoded Frame with the stream's counters (Frame.dropped_frames = stale +
    late, Frame.send_time); replica: its field's bytes (replica_field)."""
    tail = b"".join((_DROPPED, varint(stale + late), _SEND_TIME, _DOUBLE.pack(send_time)))
    return b"".join((b"\x12", varint(len(frame) + len(tail)), frame, tail, b"\x18", varint(received), b"\x20",
                     varint(stale), b"\x28", varint(late), b"\x30", varint(bad), replica, b"\x40", varint(slot)))


def send_time(t: float) -> bytes:
    """Frame.send_time's field (tag and double), for replies that leave together (many_frame_reply)."""
    return _SEND_TIME + _DOUBLE.pack(t)


def many_frame_reply(stream_id: int, frame: bytes, received: int, stale: int, late: int, bad: int, replica: bytes,
                     slot: int, sent: bytes) -> bytes:
    """A serialised TrackManyReply (stream_id, response) of one encoded Frame: frame_response's TrackResponse, in
    one join; sent: send_time(t)."""
    tail = b"".join((_DROPPED, varint(stale + late), sent))
    counters = b"".join((b"\x18", varint(received), b"\x20", varint(stale), b"\x28", varint(late), b"\x30",
                         varint(bad), replica, b"\x40", varint(slot)))
    frame_len = len(frame) + len(tail)
    size = varint(frame_len)
    return b"".join((b"\x08", varint(stream_id), b"\x12", varint(1 + len(size) + frame_len + len(counters)), b"\x12",
                     size, frame, tail, counters))


@lru_cache(maxsize=16)
def replica_field(replica: str) -> bytes:
    """TrackResponse.replica's bytes (tag, length, name)."""
    data = replica.encode()
    return b"\x3a" + varint(len(data)) + data
