"""Live Link Face formats: the iPhone app's UDP packet (version 6), which Unreal's stock "Live Link Face" source
(AppleARKitFaceSupport plugin) receives, and the app's CSV export layout. Bytes only: the sink that sends them is
bridge/sinks/livelinkface.py.

Wire layout (all big-endian; docs/reference in protocols.md section 1):

    uint8 version = 6
    int32 n, n bytes UTF-8 device id        (a 36-char UUID, like the app)
    int32 m, m bytes UTF-8 subject name     (the LiveLink subject)
    int32 frame number, float32 subframe, int32 rate numerator, int32 rate denominator   (FQualifiedFrameTime)
    uint8 count = 61
    61 x float32 in EARFaceBlendShape order: the 52 ARKit shapes in [0, 1], then HeadYaw, HeadPitch, HeadRoll,
                 LeftEyeYaw, LeftEyePitch, LeftEyeRoll, RightEyeYaw, RightEyePitch, RightEyeRoll in [-1, 1]

Packet size = 270 + n + m bytes.

Angle convention. Unreal's ARKit conversion (`ToBlendShapeMap`) sends angle / 180 of the face anchor's
rotator, negating yaw and roll when the face is not mirrored. Worked through for ARKit's face axes this
gives: +HeadYaw = the subject turns to their own left, +HeadPitch = the subject looks *down*, +HeadRoll =
the subject tilts toward their own *right* shoulder. A third-party Live Link Face bone driver (rotations of
value * 90 degrees about the head's x/y/z axes) reads the curves the same way. FaceFrame angles are
+yaw = own left, +pitch = up, +roll = toward own left shoulder, so yaw keeps its sign and pitch and roll flip.
Eyes follow the head (gaze yaw/pitch relative to the head; eye roll is always 0). `mirror=True` flips yaw
and roll, exactly what Unreal's bFaceMirrored does.
"""
from __future__ import annotations

import socket
import struct
import uuid

import numpy as np

from bridge import ports
from bridge.errors import SinkError
from bridge.frame import ARKIT_NAMES, NUM_BLENDSHAPES, FaceFrame
from bridge.timecode import label

PACKET_VERSION = 6
DEFAULT_PORT = ports.port_of(ports.LIVE_LINK_FACE)
ROTATION_NAMES = ("HeadYaw", "HeadPitch", "HeadRoll", "LeftEyeYaw", "LeftEyePitch", "LeftEyeRoll",
                  "RightEyeYaw", "RightEyePitch", "RightEyeRoll")
# Unreal's curve names: EARFaceBlendShape without its prefix, i.e. PascalCase ARKit names + the 9 rotations.
CURVE_NAMES: tuple[str, ...] = tuple(n[0].upper() + n[1:] for n in ARKIT_NAMES) + ROTATION_NAMES
CURVE_COUNT = len(CURVE_NAMES)
assert CURVE_COUNT == 61
MAX_SUBJECT_BYTES = 64  # Unreal's receive buffer allows ~256 per string; stay well under it

# FQualifiedFrameTime + count + 61 floats: everything after the two strings.
_TAIL = struct.Struct(f">ifiiB{CURVE_COUNT}f")
_LENGTH = struct.Struct(">i")
HEADER_FIXED = 1 + 4 + 4  # version + two string lengths
PACKET_FIXED = HEADER_FIXED + _TAIL.size  # = 270
assert PACKET_FIXED == 270

# FaceFrame angle (degrees) -> wire value: sign / 180. Order: head yaw, pitch, roll; left eye yaw, pitch,
# roll; right eye yaw, pitch, roll (see the module docstring for why these signs).
_ANGLE_SIGNS = np.array([+1, -1, -1, +1, -1, 0, +1, -1, 0], dtype=np.float64)
_MIRROR = np.array([-1, 1, -1, -1, 1, -1, -1, 1, -1], dtype=np.float64)


def device_id_for(subject: str) -> str:
    """A stable 36-char UUID for this machine and subject (Unreal keys subjects by device id)."""
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, f"facebridge.{socket.gethostname()}.{subject}")).upper()


def check_subject(subject: str) -> bytes:
    """The subject's UTF-8 bytes, or SinkError when Unreal could not take it as a subject name."""
    data = subject.encode("utf-8") if isinstance(subject, str) else b""
    if not data or not data.strip():
        raise SinkError("Live Link Face: empty subject name", "give a subject name such as FaceBridge")
    if len(data) > MAX_SUBJECT_BYTES:
        raise SinkError(f"Live Link Face: subject name is {len(data)} bytes, the limit is {MAX_SUBJECT_BYTES}",
                        "use a shorter subject name")
    if any(ord(c) < 32 or ord(c) == 127 for c in subject):
        raise SinkError(f"Live Link Face: subject name {subject!r} contains control characters",
                        "use letters, digits, spaces, '-' or '_'")
    return data


def frame_values(frame: FaceFrame, mirror: bool = False) -> tuple[np.ndarray, int]:
    """The 61 wire values for a frame, and how many non-finite inputs were replaced by 0."""
    values = np.zeros(CURVE_COUNT, dtype=np.float64)
    values[:NUM_BLENDSHAPES] = np.asarray(frame.blendshapes, dtype=np.float64).reshape(-1)[:NUM_BLENDSHAPES]
    head = np.asarray(frame.head_rotation, dtype=np.float64).reshape(-1)
    left = np.asarray(frame.eye_left, dtype=np.float64).reshape(-1)
    right = np.asarray(frame.eye_right, dtype=np.float64).reshape(-1)
    angles = np.array([head[0], head[1], head[2], left[0], left[1], 0.0, right[0], right[1], 0.0])
    signs = _ANGLE_SIGNS * _MIRROR if mirror else _ANGLE_SIGNS
    values[NUM_BLENDSHAPES:] = angles * signs / 180.0 + 0.0  # + 0.0 turns -0.0 (0 * -1) into a clean 0
    bad = ~np.isfinite(values)
    nonfinite = int(bad.sum())
    if nonfinite:
        values[bad] = 0.0
    np.clip(values[:NUM_BLENDSHAPES], 0.0, 1.0, out=values[:NUM_BLENDSHAPES])
    np.clip(values[NUM_BLENDSHAPES:], -1.0, 1.0, out=values[NUM_BLENDSHAPES:])
    return values, nonfinite


def decode_llf_packet(data: bytes) -> dict:
    """Decode one version-6 packet (for tests, `facebridge replay` checks and debugging receivers).

    Returns {version, device_id, subject, frame_number, subframe, rate: (num, den), count, values: [61 floats],
    curves: {name: value}}. Raises ValueError naming what is wrong with a malformed packet."""
    data = bytes(data)
    if len(data) < PACKET_FIXED:
        raise ValueError(f"packet is {len(data)} bytes, a version-6 packet has at least {PACKET_FIXED}")
    version = data[0]
    if version != PACKET_VERSION:
        raise ValueError(f"packet version {version}, expected {PACKET_VERSION}")
    strings = []
    offset = 1
    for what in ("device id", "subject"):
        (n,) = _LENGTH.unpack_from(data, offset)
        offset += 4
        if n < 0 or offset + n + _TAIL.size + (4 if what == "device id" else 0) > len(data):
            raise ValueError(f"{what} length {n} does not fit a {len(data)}-byte packet")
        try:
            strings.append(data[offset:offset + n].decode("utf-8"))
        except UnicodeDecodeError as e:
            raise ValueError(f"{what} is not UTF-8 ({e})") from None
        offset += n
    if len(data) != offset + _TAIL.size:
        raise ValueError(f"packet is {len(data)} bytes, its header says {offset + _TAIL.size}")
    frame_number, subframe, num, den, count, *values = _TAIL.unpack_from(data, offset)
    if count != CURVE_COUNT:
        raise ValueError(f"blend shape count {count}, expected {CURVE_COUNT}")
    return {"version": version, "device_id": strings[0], "subject": strings[1], "frame_number": frame_number,
            "subframe": subframe, "rate": (num, den), "count": count, "values": values,
            "curves": dict(zip(CURVE_NAMES, values))}


def packet_header(device_id: str, subject: str) -> bytes:
    """Everything before the timecode: version, device id and subject (checked with `check_subject`)."""
    name = check_subject(subject)
    device = device_id.encode("ascii")
    return b"".join((bytes((PACKET_VERSION,)), _LENGTH.pack(len(device)), device, _LENGTH.pack(len(name)), name))


def encode_packet(header: bytes, values: np.ndarray, timecode: tuple[int, float, int, int]) -> bytes:
    """One packet: `packet_header` bytes, then the timecode (frame, subframe, num, den) and the 61 values."""
    frame_number, subframe, num, den = timecode
    return header + _TAIL.pack(frame_number, subframe, num, den, CURVE_COUNT, *values.tolist())


# Live Link Face's CSV lists JawRight before JawLeft and MouthRight before MouthLeft, unlike its UDP
# order (seen in several public importers of the app's exports); readers match columns by name.
CSV_CURVES: tuple[str, ...] = tuple(
    {"JawLeft": "JawRight", "JawRight": "JawLeft", "MouthLeft": "MouthRight", "MouthRight": "MouthLeft"}.get(n, n)
    for n in CURVE_NAMES)
_CSV_INDEX = [CURVE_NAMES.index(n) for n in CSV_CURVES]
CSV_HEADER = ",".join(("Timecode", "BlendShapeCount") + CSV_CURVES)


def csv_timecode(timecode: tuple[int, float, int, int]) -> str:
    """Live Link Face's CSV timecode 'HH:MM:SS:FF.mmm' (frame within the second, then the sub-frame); drop-frame
    'HH:MM:SS;FF.mmm' at 29.97 and 59.94 (bridge/timecode.py)."""
    frame_number, subframe, num, den = timecode
    return f"{label(frame_number, num, max(den, 1))}.{min(int(subframe * 1000), 999):03d}"


def csv_row(frame: FaceFrame) -> str:
    """One CSV line (no newline): the wire values (shapes clipped to [0, 1], angles / 180) in CSV column order."""
    values, _ = frame_values(frame)
    row = [csv_timecode(frame.timecode()), str(len(CSV_CURVES))]
    row += [f"{values[i]:.7g}" for i in _CSV_INDEX]
    return ",".join(row)
