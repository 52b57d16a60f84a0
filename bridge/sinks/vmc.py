"""VMC sink: FaceFrames as VMC protocol OSC messages (Performer -> Marionette, default 127.0.0.1:39539), for
VSeeFace, VNyan, VMagicMirror, Warudo, EVMC4U and Unreal's VMC plugins.

Per frame, in this order (protocols.md section 2):
    /VMC/Ext/OK        i 1 (loaded), i 3 (calibrated), i 0 (normal calibration), i tracking (1 = face found)
    /VMC/Ext/T         f seconds since the first frame
    /VMC/Ext/Root/Pos  s "root", position 0, identity rotation
    /VMC/Ext/Bone/Pos  s "Head", local position, rotation quaternion (x, y, z, w) from the head rotation
    /VMC/Ext/Bone/Pos  s "LeftEye" / "RightEye" from the gaze           (eye_bones=True only)
    /VMC/Ext/Blend/Val s <ARKit name in camelCase, as PerfectSync avatars name them>, f weight  x 52
    /VMC/Ext/Blend/Val s <VRM preset: A I U E O Blink ... (vrm0) or aa ih ou ee oh blink ... (vrm1)>, f weight
                       (only with expressions including "vrm0" / "vrm1": for avatars without ARKit shapes)
    /VMC/Ext/Blend/Apply

Coordinates are Unity's: left-handed, x right, y up, z forward, metres; the avatar faces +z, so its own left
is -x. Unity's Quaternion.Euler(x, y, z) (rotate about z, then x, then y) with x = -pitch (Unity's +x pitch
is nose down), y = -yaw (Unity's +y turns toward +x = the avatar's right), z = +roll (Unity's +z tilts the
head toward -x = the avatar's left shoulder) reproduces FaceFrame's head angles on a (VRM-normalised)
avatar, not mirrored: the subject turning to their left turns the avatar to its left.

Bone positions: receivers such as EVMC4U apply bone local positions by default, so the Head (and eye) bones
carry a typical humanoid offset from their parent instead of 0, which would collapse the head into the neck.

Bundling (default): the frame goes out as several bundles each under 1,400 bytes, so no datagram is IP-
fragmented on Ethernet, with Apply in the last. bundle=False sends every message as its own datagram
(some receivers cannot read bundles).

Encoding: the frame's messages keep their shape, so they are a plan that `formats/osc.py`'s template fills
with each frame's numbers (byte-identical to python-osc, at a fraction of its cost).
"""
from __future__ import annotations

import logging

import numpy as np

from bridge import ports
from bridge.errors import SinkError
from bridge.formats.osc import OscTemplate, Slot
from bridge.frame import ARKIT_NAMES, NUM_BLENDSHAPES, FaceFrame
from bridge.sinks.udp import UdpSink
from bridge.sinks.vrm_expressions import VRM0_NAMES, VRM1_NAMES, vrm_weights

log = logging.getLogger(__name__)

DEFAULT_PORT = ports.port_of(ports.VMC)
CALIBRATED, NORMAL_CALIBRATION = 3, 0
HEAD_POSITION = (0.0, 0.1, 0.0)  # Head relative to Neck, metres (typical humanoid)
LEFT_EYE_POSITION = (-0.03, 0.06, 0.07)  # eyes relative to Head; the avatar's left is -x
RIGHT_EYE_POSITION = (0.03, 0.06, 0.07)


# Indexes into the per-frame float vector.
F_TIME = 0
F_HEAD = 1  # 4 floats: quaternion x, y, z, w
F_LEFT_EYE = 5
F_RIGHT_EYE = 9
F_BLEND = 13  # 52 weights
F_VRM = F_BLEND + NUM_BLENDSHAPES  # VRM preset weights, VRM1_NAMES order
NUM_FLOATS = F_VRM + len(VRM1_NAMES)
EXPRESSION_SETS = ("arkit", "vrm0", "vrm1")
I_TRACKING = 0
NUM_INTS = 1


def euler_to_unity_quaternion(yaw_deg, pitch_deg, roll_deg) -> np.ndarray:
    """FaceFrame (yaw, pitch, roll) degrees -> Unity quaternion(s) (x, y, z, w); broadcasts over arrays.

    = Quaternion.Euler(-pitch, -yaw, roll) = q_y * q_x * q_z (see the module docstring)."""
    hx = np.radians(-np.asarray(pitch_deg, dtype=np.float64)) / 2
    hy = np.radians(-np.asarray(yaw_deg, dtype=np.float64)) / 2
    hz = np.radians(np.asarray(roll_deg, dtype=np.float64)) / 2
    cx, sx, cy, sy, cz, sz = np.cos(hx), np.sin(hx), np.cos(hy), np.sin(hy), np.cos(hz), np.sin(hz)
    # q_y * q_x, then * q_z (Hamilton product written out for these axis-aligned factors)
    ax, ay, az, aw = cy * sx, sy * cx, -sy * sx, cy * cx
    return np.stack([ax * cz + ay * sz, ay * cz - ax * sz, aw * sz + az * cz, aw * cz - az * sz], axis=-1)


def message_plan(eye_bones: bool, expressions: tuple[str, ...] = ("arkit",)) -> list[tuple[str, list]]:
    """The frame's messages as (address, [(type, constant or Slot)]) in send order."""
    def f(i):  # a per-frame float
        return ("f", Slot("f", i))

    def const(values):
        return [("f", float(v)) for v in values]

    plan = [
        ("/VMC/Ext/OK", [("i", 1), ("i", CALIBRATED), ("i", NORMAL_CALIBRATION), ("i", Slot("i", I_TRACKING))]),
        ("/VMC/Ext/T", [f(F_TIME)]),
        ("/VMC/Ext/Root/Pos", [("s", "root")] + const((0, 0, 0, 0, 0, 0, 1))),
        ("/VMC/Ext/Bone/Pos", [("s", "Head")] + const(HEAD_POSITION) + [f(F_HEAD + k) for k in range(4)]),
    ]
    if eye_bones:
        eyes = (("LeftEye", LEFT_EYE_POSITION, F_LEFT_EYE), ("RightEye", RIGHT_EYE_POSITION, F_RIGHT_EYE))
        for bone, pos, start in eyes:
            plan.append(("/VMC/Ext/Bone/Pos", [("s", bone)] + const(pos) + [f(start + k) for k in range(4)]))
    if "arkit" in expressions:
        for i, name in enumerate(ARKIT_NAMES):
            plan.append(("/VMC/Ext/Blend/Val", [("s", name), f(F_BLEND + i)]))
    for names in (VRM0_NAMES if "vrm0" in expressions else (), VRM1_NAMES if "vrm1" in expressions else ()):
        for i, name in enumerate(names):
            if name is not None:
                plan.append(("/VMC/Ext/Blend/Val", [("s", name), f(F_VRM + i)]))
    plan.append(("/VMC/Ext/Blend/Apply", []))
    return plan


def vmc_encoder(bundle: bool = True, eye_bones: bool = False,
                expressions: tuple[str, ...] = ("arkit",)) -> OscTemplate:
    """The frame's datagrams as a template filled from `frame_numbers`' vectors."""
    return OscTemplate(message_plan(eye_bones, expressions), bundle)


class VmcSink(UdpSink):
    """Streams FaceFrames as VMC over UDP (default 127.0.0.1:39539, the Marionette port).

    eye_bones is off by default: PerfectSync avatars move their eyes with the eyeLook* blendshapes, and eye bone
    positions that do not match the avatar displace its eyes in receivers that apply bone positions."""

    name = "vmc"
    default_port = DEFAULT_PORT
    address_label = "VMC address"
    receiver_hint = "start the VMC receiver, e.g. VSeeFace's VMC receiver, or check the port"

    def __init__(self, address: str = f"127.0.0.1:{DEFAULT_PORT}", bundle: bool = True, eye_bones: bool = False,
                 expressions: tuple[str, ...] = ("arkit",)):
        unknown = [e for e in expressions if e not in EXPRESSION_SETS]
        if unknown or not expressions:
            raise SinkError(f"VMC: unknown expression set {', '.join(unknown) or '(none)'}",
                            f"use one or more of {', '.join(EXPRESSION_SETS)}, comma-separated")
        super().__init__(address)
        self.expressions = tuple(expressions)
        self.encoder = vmc_encoder(bundle, eye_bones, self.expressions)
        self._t0: float | None = None

    def frame_numbers(self, frame: FaceFrame) -> tuple[np.ndarray, np.ndarray]:
        """The frame's per-frame float and int vectors (see the F_* / I_* indexes)."""
        if self._t0 is None:
            self._t0 = frame.t_capture_mono
        floats = np.zeros(NUM_FLOATS, dtype=np.float64)
        floats[F_TIME] = frame.t_capture_mono - self._t0
        weights = np.asarray(frame.blendshapes, dtype=np.float64).reshape(-1)[:NUM_BLENDSHAPES]
        floats[F_BLEND:F_BLEND + len(weights)] = weights
        head = np.asarray(frame.head_rotation, dtype=np.float64).reshape(-1)
        eyes = np.array([frame.eye_left, frame.eye_right], dtype=np.float64).reshape(2, 2)
        angles = np.array([[head[0], head[1], head[2]], [eyes[0, 0], eyes[0, 1], 0.0],
                           [eyes[1, 0], eyes[1, 1], 0.0]])
        bad = ~np.isfinite(angles)
        bad_count = int(bad.sum()) + int((~np.isfinite(floats)).sum())
        if bad_count:
            angles[bad] = 0.0
            floats[~np.isfinite(floats)] = 0.0
            self._count_nonfinite(frame, bad_count)
        quats = euler_to_unity_quaternion(angles[:, 0], angles[:, 1], angles[:, 2])
        floats[F_HEAD:F_BLEND] = quats.reshape(-1)
        np.clip(floats[F_BLEND:F_VRM], 0.0, 1.0, out=floats[F_BLEND:F_VRM])
        if self.expressions != ("arkit",):
            floats[F_VRM:] = vrm_weights(floats[F_BLEND:F_VRM], frame.visemes)
        ints = np.array([1 if frame.face_found else 0], dtype=np.int64)
        return floats, ints

    def datagrams(self, frame: FaceFrame) -> list[bytes]:
        return self.encoder.encode(*self.frame_numbers(frame))

