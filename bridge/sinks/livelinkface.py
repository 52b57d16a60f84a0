"""Live Link Face sink: the iPhone app's UDP packet (version 6), so Unreal's stock "Live Link Face" source
(AppleARKitFaceSupport plugin) receives FaceBridge like a phone.

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

import logging
import socket
import struct
import time
import uuid

import numpy as np

from bridge.errors import SinkError
from bridge.frame import ARKIT_NAMES, NUM_BLENDSHAPES, FaceFrame
from bridge.sinks.udp import UdpSink

log = logging.getLogger(__name__)

PACKET_VERSION = 6
DEFAULT_PORT = 11111
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


class LiveLinkFaceSink(UdpSink):
    """Streams FaceFrames to Unreal's Live Link Face source over UDP (default 127.0.0.1:11111)."""

    name = "livelinkface"
    default_port = DEFAULT_PORT
    address_label = "Live Link Face address"
    receiver_hint = "start Unreal's Live Link Face source or check the port"

    def __init__(self, address: str = f"127.0.0.1:{DEFAULT_PORT}", device_id: str | None = None,
                 subject: str | None = None, mirror: bool = False):
        super().__init__(address)
        self.subject_override = subject
        if subject is not None:
            check_subject(subject)
        if device_id is not None and not (device_id.isascii() and 1 <= len(device_id) <= 64):
            raise SinkError(f"Live Link Face: device id {device_id!r} is not 1-64 ASCII characters",
                            "leave it out to use a stable UUID for this machine")
        self.device_id = device_id
        self.mirror = mirror
        self._headers: dict[str, bytes] = {}  # subject -> version + device id + subject bytes

    def _header(self, subject: str) -> bytes:
        header = self._headers.get(subject)
        if header is None:
            name = check_subject(subject)
            device = (self.device_id or device_id_for(subject)).encode("ascii")
            header = b"".join((bytes((PACKET_VERSION,)), _LENGTH.pack(len(device)), device,
                               _LENGTH.pack(len(name)), name))
            self._headers[subject] = header
        return header

    def packet(self, frame: FaceFrame) -> bytes:
        """The bytes `send` puts on the wire for this frame (raises SinkError for a bad subject name)."""
        header = self._header(self.subject_override or frame.subject)
        values, nonfinite = frame_values(frame, self.mirror)
        if nonfinite:
            self._count_nonfinite(frame, nonfinite)
        frame_number, subframe, num, den = frame.timecode()
        return header + _TAIL.pack(frame_number, subframe, num, den, CURVE_COUNT, *values.tolist())

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        return [self.packet(frame)]



def listen(port: int = DEFAULT_PORT, host: str = "127.0.0.1", seconds: float | None = None) -> int:
    """Print what arrives on a Live Link Face port, about once a second: a check that runs without Unreal.

    `python -m bridge.sinks.livelinkface [PORT]` (stop Unreal first: only one program can hold the port)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    sock.settimeout(1.0)
    print(f"listening for Live Link Face packets on {host}:{port} (Ctrl-C stops)", flush=True)
    received = bad = 0
    last_print = 0.0
    end = None if seconds is None else time.monotonic() + seconds
    try:
        while end is None or time.monotonic() < end:
            try:
                data = sock.recv(4096)
            except TimeoutError:
                continue
            try:
                p = decode_llf_packet(data)
            except ValueError as e:
                bad += 1
                print(f"bad packet ({len(data)} bytes): {e}", flush=True)
                continue
            received += 1
            if time.monotonic() - last_print >= 1.0:
                last_print = time.monotonic()
                c = p["curves"]
                print(f"{received} packets  subject {p['subject']!r}  frame {p['frame_number']} @ "
                      f"{p['rate'][0]}/{p['rate'][1]}  JawOpen {c['JawOpen']:.2f}  EyeBlinkLeft "
                      f"{c['EyeBlinkLeft']:.2f}  HeadYaw {c['HeadYaw']:+.3f}  HeadPitch {c['HeadPitch']:+.3f}",
                      flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        sock.close()
    print(f"{received} packets, {bad} malformed", flush=True)
    return 0 if received else 1


if __name__ == "__main__":
    import sys

    raise SystemExit(listen(int(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_PORT))
