"""VMC sink: received by a real python-osc server on 127.0.0.1; the template encoder against python-osc."""
from __future__ import annotations

import socket
import threading
import time

import numpy as np
import pytest
from pythonosc.dispatcher import Dispatcher
from pythonosc.osc_server import BlockingOSCUDPServer
from scipy.spatial.transform import Rotation

from bridge.errors import SinkError
from bridge.frame import ARKIT_NAMES, FaceFrame
from bridge.sinks.vmc import HEAD_POSITION, NUM_FLOATS, NUM_INTS, VmcSink, euler_to_unity_quaternion, vmc_encoder


class OscReceiver:
    """A python-osc server that records (address, args) in arrival order (one thread: a server that handles each
    datagram on a thread of its own records them in whatever order those threads run, on a loaded machine not the
    order they came in)."""

    def __init__(self):
        self.messages: list[tuple[str, tuple]] = []
        self.lock = threading.Lock()
        dispatcher = Dispatcher(strict_timing=False)
        dispatcher.set_default_handler(self._record)
        self.server = BlockingOSCUDPServer(("127.0.0.1", 0), dispatcher)
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05},
                                       daemon=True)
        self.thread.start()

    def _record(self, address, *args):
        with self.lock:
            self.messages.append((address, args))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def wait_for(self, applies: int, timeout: float = 5.0) -> list:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if sum(a == "/VMC/Ext/Blend/Apply" for a, _ in self.messages) >= applies:
                    return list(self.messages)
            time.sleep(0.01)
        raise AssertionError(f"fewer than {applies} frames arrived: {len(self.messages)} messages")

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def osc_receiver():
    r = OscReceiver()
    yield r
    r.close()


def random_frame(rng, seq) -> FaceFrame:
    f = FaceFrame(seq=seq, t_capture=1.7e9 + seq / 30, t_capture_mono=100.0 + seq / 30, face_found=seq % 2 == 0)
    f.blendshapes = rng.uniform(0, 1, 52).astype(np.float32)
    f.head_rotation = rng.uniform(-40, 40, 3).astype(np.float32)
    f.eye_left = rng.uniform(-20, 20, 2).astype(np.float32)
    f.eye_right = rng.uniform(-20, 20, 2).astype(np.float32)
    return f


def split_frames(messages):
    frames, current = [], []
    for address, args in messages:
        current.append((address, args))
        if address == "/VMC/Ext/Blend/Apply":
            frames.append(current)
            current = []
    return frames


@pytest.mark.parametrize("bundle", [True, False])
def test_every_frame_has_all_52_shapes_then_apply(osc_receiver, bundle):
    rng = np.random.default_rng(3)
    sink = VmcSink(osc_receiver.address, bundle=bundle)
    sent = [random_frame(rng, i) for i in range(4)]
    for f in sent:
        sink.send(f)
    frames = split_frames(osc_receiver.wait_for(len(sent)))
    sink.close()
    assert len(frames) == len(sent) and sink.stats() == {"sent": 4, "errors": 0, "nonfinite_values": 0}
    for frame, msgs in zip(sent, frames):
        addresses = [a for a, _ in msgs]
        assert addresses[:4] == ["/VMC/Ext/OK", "/VMC/Ext/T", "/VMC/Ext/Root/Pos", "/VMC/Ext/Bone/Pos"]
        assert addresses[-1] == "/VMC/Ext/Blend/Apply" and addresses.count("/VMC/Ext/Blend/Val") == 52
        ok, t, root, head = (args for _, args in msgs[:4])
        assert ok == (1, 3, 0, 1 if frame.face_found else 0)
        assert t[0] == pytest.approx(frame.t_capture_mono - 100.0, abs=1e-4)
        assert root == ("root", 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)
        assert head[0] == "Head" and head[1:4] == pytest.approx(HEAD_POSITION)
        assert head[4:] == pytest.approx(tuple(euler_to_unity_quaternion(*frame.head_rotation)), abs=1e-6)
        weights = {args[0]: args[1] for a, args in msgs if a == "/VMC/Ext/Blend/Val"}
        assert list(weights) == list(ARKIT_NAMES)  # camelCase, Apple order
        assert np.allclose([weights[n] for n in ARKIT_NAMES], frame.blendshapes, atol=1e-6)


@pytest.mark.parametrize("eye_bones", [False, True])
def test_bundles_stay_under_1400_bytes_with_apply_last(eye_bones):
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind(("127.0.0.1", 0))
    raw.settimeout(2.0)
    sink = VmcSink(f"127.0.0.1:{raw.getsockname()[1]}", eye_bones=eye_bones)
    sink.send(random_frame(np.random.default_rng(0), 0))
    expected = len(sink.encoder.groups)
    datagrams = [raw.recv(65536) for _ in range(expected)]
    raw.close()
    sink.close()
    assert expected >= 2
    assert all(d.startswith(b"#bundle\0") and len(d) < 1400 for d in datagrams)
    assert b"/VMC/Ext/Blend/Apply" in datagrams[-1]
    assert all(b"/VMC/Ext/Blend/Apply" not in d for d in datagrams[:-1])
    assert (b"LeftEye" in datagrams[0]) == eye_bones


def test_unbundled_mode_sends_plain_messages():
    raw = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    raw.bind(("127.0.0.1", 0))
    raw.settimeout(2.0)
    sink = VmcSink(f"127.0.0.1:{raw.getsockname()[1]}", bundle=False)
    sink.send(random_frame(np.random.default_rng(0), 0))
    datagrams = [raw.recv(65536) for _ in range(57)]  # OK, T, Root, Head, 52 Val, Apply
    raw.close()
    sink.close()
    assert all(d.startswith(b"/VMC/Ext/") for d in datagrams)
    assert datagrams[-1].startswith(b"/VMC/Ext/Blend/Apply")


@pytest.mark.parametrize("bundle", [True, False])
@pytest.mark.parametrize("eye_bones", [True, False])
def test_template_encoder_is_byte_identical_to_python_osc(bundle, eye_bones):
    rng = np.random.default_rng(11)
    encoder = vmc_encoder(bundle=bundle, eye_bones=eye_bones)
    for _ in range(20):
        floats = rng.normal(0, 10, NUM_FLOATS)
        ints = rng.integers(-5, 5, NUM_INTS)
        assert encoder.encode(floats, ints) == encoder.encode_with_python_osc(floats, ints)


def test_head_quaternion_is_unity_left_handed():
    def rotate(q, v):  # same formula as Unity's Quaternion * Vector3
        x, y, z, w = q
        u = np.array([x, y, z])
        return v + 2 * w * np.cross(u, v) + 2 * np.cross(u, np.cross(u, v))

    forward, up = np.array([0.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0])
    assert rotate(euler_to_unity_quaternion(30, 0, 0), forward)[0] < -0.4  # turn to own left: toward -x
    assert rotate(euler_to_unity_quaternion(0, 20, 0), forward)[1] > 0.3  # look up: toward +y
    assert rotate(euler_to_unity_quaternion(0, 0, 15), up)[0] < -0.2  # tilt to own left shoulder: toward -x
    # Composition order is Unity's Quaternion.Euler (z, then x, then y): R_y * R_x * R_z.
    yaw, pitch, roll = 25.0, -12.0, 7.0
    ref = Rotation.from_euler("YXZ", [-yaw, -pitch, roll], degrees=True).as_quat()  # x, y, z, w
    q = euler_to_unity_quaternion(yaw, pitch, roll)
    assert np.allclose(q, ref, atol=1e-9) or np.allclose(q, -ref, atol=1e-9)
    assert np.isclose(np.linalg.norm(q), 1.0)


def test_eye_bones_follow_gaze(osc_receiver):
    sink = VmcSink(osc_receiver.address, eye_bones=True)
    frame = random_frame(np.random.default_rng(5), 0)
    sink.send(frame)
    msgs = split_frames(osc_receiver.wait_for(1))[0]
    sink.close()
    bones = {args[0]: args for a, args in msgs if a == "/VMC/Ext/Bone/Pos"}
    assert set(bones) == {"Head", "LeftEye", "RightEye"}
    q = euler_to_unity_quaternion(frame.eye_left[0], frame.eye_left[1], 0.0)
    assert bones["LeftEye"][4:] == pytest.approx(tuple(q), abs=1e-6)
    assert bones["LeftEye"][1] < 0 < bones["RightEye"][1]  # the avatar's left eye is on -x


def test_nonfinite_values_and_receiver_gone(osc_receiver):
    frame = random_frame(np.random.default_rng(2), 0)
    frame.blendshapes[0] = np.nan
    frame.head_rotation[0] = np.inf
    sink = VmcSink(osc_receiver.address)
    sink.send(frame)
    msgs = split_frames(osc_receiver.wait_for(1))[0]
    assert dict(args for a, args in msgs if a == "/VMC/Ext/Blend/Val")["eyeBlinkLeft"] == 0.0
    assert sink.nonfinite == 1 + 1
    osc_receiver.close()  # the receiver quits; sending goes on, failures are counted
    # The kernel reports each ICMP "port unreachable" on a later send; it rate-limits ICMP machine-wide, so
    # keep sending (never raising) until a few failures were counted.
    frames, deadline = 0, time.monotonic() + 5.0
    while sink.errors < 3 and time.monotonic() < deadline:
        frames += 1
        sink.send(random_frame(np.random.default_rng(frames), frames))
        time.sleep(0.005)
    assert sink.errors >= 3 and sink.sent + sink.errors == 1 + frames
    sink.close()


def test_unusable_address_raises():
    with pytest.raises(SinkError, match="out of range"):
        VmcSink("127.0.0.1:0")
    sink = VmcSink("localhost")
    assert sink.address[1] == 39539
    sink.close()


def test_malformed_frame_is_counted_not_raised(osc_receiver):
    sink = VmcSink(osc_receiver.address)
    broken = random_frame(np.random.default_rng(0), 0)
    broken.head_rotation = np.zeros(1, dtype=np.float32)
    sink.send(broken)
    sink.send(random_frame(np.random.default_rng(1), 1))
    assert len(split_frames(osc_receiver.wait_for(1))) == 1
    assert (sink.sent, sink.errors) == (1, 1)
    sink.close()


def _shaped_frame(seq=0, **weights) -> FaceFrame:
    from bridge.frame import ARKIT_INDEX

    f = FaceFrame(seq=seq, t_capture=1.7e9, t_capture_mono=100.0, face_found=True)
    for name, value in weights.items():
        f.blendshapes[ARKIT_INDEX[name]] = value
    return f


def test_vrm_presets_for_avatars_without_arkit_shapes(osc_receiver):
    """expressions=('vrm0',): VRM 0.x preset names only, derived from the ARKit weights."""
    sink = VmcSink(osc_receiver.address, expressions=("vrm0",))
    frames = [_shaped_frame(0, jawOpen=1.0),                                  # open mouth: A
              _shaped_frame(1, mouthPucker=1.0),                              # pucker: U
              _shaped_frame(2, eyeBlinkLeft=1.0, eyeBlinkRight=1.0),          # both eyes: Blink
              _shaped_frame(3, eyeBlinkLeft=0.8, mouthSmileLeft=0.9, mouthSmileRight=0.9)]  # wink + smile
    for f in frames:
        sink.send(f)
    got = split_frames(osc_receiver.wait_for(len(frames)))
    sink.close()
    weights = [{args[0]: args[1] for a, args in msgs if a == "/VMC/Ext/Blend/Val"} for msgs in got]
    assert set(weights[0]) == {"A", "I", "U", "E", "O", "Blink", "Blink_L", "Blink_R", "Joy", "Angry", "Sorrow"}
    assert weights[0]["A"] > 0.9 and weights[0]["U"] < 0.1 and weights[0]["Blink"] == 0.0
    assert weights[1]["U"] > 0.9 and weights[1]["A"] < 0.1
    assert weights[2]["Blink"] == pytest.approx(1.0) and weights[2]["Blink_L"] == pytest.approx(0.0)
    assert weights[3]["Blink_L"] == pytest.approx(0.8, abs=1e-6) and weights[3]["Blink"] == 0.0
    assert weights[3]["Joy"] == pytest.approx(0.9, abs=1e-6)


def test_vrm_vowels_follow_lip_sync_visemes():
    from bridge.frame import VISEME_NAMES
    from bridge.sinks.vrm_expressions import VRM1_NAMES, vrm_weights

    visemes = np.zeros(len(VISEME_NAMES))
    visemes[VISEME_NAMES.index("oh")] = 0.7
    w = dict(zip(VRM1_NAMES, vrm_weights(np.zeros(52), visemes)))
    assert w["oh"] == pytest.approx(0.7) and w["aa"] == 0.0 and w["ee"] == 0.0


@pytest.mark.parametrize("expressions", [("arkit", "vrm0"), ("vrm1",)])
def test_template_encoder_matches_python_osc_with_vrm_names(expressions):
    rng = np.random.default_rng(5)
    enc = vmc_encoder(bundle=True, expressions=expressions)
    floats, ints = rng.uniform(-1, 1, NUM_FLOATS), np.array([1])
    assert enc.encode(floats, ints) == enc.encode_with_python_osc(floats, ints)
    assert all(len(d) < 1400 for d in enc.encode(floats, ints))


def test_unknown_expression_set_is_refused():
    with pytest.raises(SinkError, match="use one or more of arkit, vrm0, vrm1"):
        VmcSink("127.0.0.1:39539", expressions=("vrm2",))
