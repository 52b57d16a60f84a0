"""FaceFrame <-> facebridge.v1 messages: what a remote client rebuilds is the frame the server converted."""
from __future__ import annotations

import numpy as np

from bridge.frame import MorphParams
from bridge.grpc.convert import build_frame, build_header, parse_frame
from bridge.grpc.gen import facebridge_pb2 as pb
from tests.helpers import face_frame


def test_parse_frame_inverts_build_frame_for_every_field_the_header_names():
    sent = face_frame(7, smile=0.6)
    sent.subject, sent.frame_rate, sent.model_versions = "Ava", 29.97, {"face_landmark": "abc"}
    sent.emotion = np.arange(7, dtype=np.float32) / 10
    sent.eye_left, sent.eye_right = np.array([3.0, -2.0], np.float32), np.array([1.0, 4.0], np.float32)
    sent.head_translation = np.array([1.0, 2.0, 50.0], np.float32)
    sent.morph = MorphParams(identity=np.ones(4, np.float32), expression=np.full(5, 0.5, np.float32))
    sent.confidence, sent.region_confidence, sent.latencies_ms = 0.9, {"eyes": 0.8}, {"track": 3.5}
    header = build_header(sent, 4)
    got = parse_frame(header, build_frame(sent, 4))
    assert (got.seq, got.subject, got.face_found, got.frame_rate) == (7, "Ava", True, 29.97)
    for name in ("blendshapes", "head_rotation", "head_translation", "eye_left", "eye_right", "emotion"):
        assert np.allclose(getattr(got, name), getattr(sent, name)), name
    assert np.allclose(got.morph.identity, 1.0) and np.allclose(got.morph.expression, 0.5)
    assert got.model_versions == {"face_landmark": "abc"} and got.visemes is None
    assert abs(got.confidence - 0.9) < 1e-6 and abs(got.region_confidence["eyes"] - 0.8) < 1e-6
    assert got.latencies_ms == {"track": 3.5}


def test_frames_encoded_together_are_the_messages_build_frame_makes():
    from bridge.frame import FaceFrames
    from bridge.grpc.convert import build_frames, layout_key, layout_keys

    rng = np.random.default_rng(3)
    n = 5
    found = np.array([True, False, True, True, False])
    morph = {"identity": rng.normal(size=(n, 100)), "expression": rng.uniform(size=(n, 53)),
             **{name: rng.normal(size=(n, 3)) for name in ("jaw_rotation", "head_rotation", "head_translation",
                                                             "eye_rotation_left", "eye_rotation_right")}}
    frames = FaceFrames(
        seq=np.arange(n) + 10, t_capture=1000.0 + np.arange(n) / 7, t_capture_mono=np.arange(n) / 3.0,
        subject=[f"S{i}" for i in range(n)], face_found=found, image_size=np.tile([640, 480], (n, 1)),
        blendshapes=rng.uniform(size=(n, 52)).astype(np.float32), head_rotation=rng.normal(size=(n, 3)),
        head_translation=rng.normal(size=(n, 3)), eyes=rng.normal(size=(n, 2, 2)), emotion=rng.uniform(size=(n, 7)),
        confidence=rng.uniform(size=n), morph={k: v.astype(np.float32) for k, v in morph.items()},
        region_names=("eyes", "mouth", "tongue"), region_confidence=rng.uniform(size=(n, 3)),
        frame_rate=np.array([30.0, 29.97, 60.0, 30.0, 25.0]), model_versions={"m": "1"},
        latencies_ms={"describe": 1.5})
    frames.blendshapes[2, 4] = np.nan  # NaN and inf become 0 on both paths
    frames.head_rotation[3, 0] = np.inf
    rows = build_frames(frames, [7] * n)
    assert layout_keys(frames) == [layout_key(frames.frame(i)) for i in range(n)]
    for i in range(n):
        want = build_frame(frames.frame(i), 7)
        assert rows[i] == want and rows[i].SerializeToString() == want.SerializeToString()
    per_row = build_frames(frames, [3] * n, [{"server": float(i)} for i in range(n)])
    assert [dict(m.latencies_ms) for m in per_row] == [{"server": float(i)} for i in range(n)]
    mixed = [{"server": 1.0, "wait": 2.0}] + [{"wait": 3.0}] * (n - 1)  # rows with other stages: row by row
    assert [dict(m.latencies_ms) for m in build_frames(frames, [3] * n, mixed)] == mixed
    from bridge.grpc.frame_wire import encode_frames

    stages = np.array([[float(i), 0.5 * i] for i in range(n)])  # every row's stages as one array (serve's replies)
    as_array = encode_frames(frames, [3] * n, stages=(("server", "wait"), stages))
    as_dicts = build_frames(frames, [3] * n, [{"server": float(i), "wait": 0.5 * i} for i in range(n)])
    assert [pb.Frame.FromString(data) for data in as_array] == as_dicts


def test_an_encoded_frame_with_its_counters_is_the_track_response_serve_sends():
    from bridge.grpc.frame_wire import frame_response, replica_field, varint

    frame = pb.Frame(subject="S", layout_id=3, seq=9, curves=[0.5, 0.25], confidence=0.75)
    frame.latencies_ms["describe"] = 1.5
    got = pb.TrackResponse.FromString(frame_response(frame.SerializeToString(), 300, 200, 5, 1,
                                                     replica_field("replica-α"), 17, 1700000000.25))
    want = pb.TrackResponse(frame=frame, received=300, stale_dropped=200, late_dropped=5, bad_frames=1,
                            replica="replica-α", stream_slot=17)
    want.frame.dropped_frames, want.frame.send_time = 205, 1700000000.25
    assert got == want
    assert [varint(v) for v in (0, 127, 128, 300, 2**32)] == [b"\x00", b"\x7f", b"\x80\x01", b"\xac\x02",
                                                               b"\x80\x80\x80\x80\x10"]


def test_an_encoded_frame_with_its_counters_is_the_track_many_reply_serve_sends():
    from bridge.grpc.frame_wire import many_frame_reply, replica_field, send_time

    frame = pb.Frame(subject="S", layout_id=3, seq=9, curves=[0.5] * 52, confidence=0.75)
    frame.latencies_ms["describe"] = 1.5
    for stream_id, received in ((0, 1), (70_000, 2**40)):  # varints of one byte and of several
        got = pb.TrackManyReply.FromString(many_frame_reply(stream_id, frame.SerializeToString(), received, 200, 5, 1,
                                                            replica_field("replica-α"), 17,
                                                            send_time(1700000000.25)))
        want = pb.TrackManyReply(stream_id=stream_id, response=pb.TrackResponse(
            frame=frame, received=received, stale_dropped=200, late_dropped=5, bad_frames=1, replica="replica-α",
            stream_slot=17))
        want.response.frame.dropped_frames, want.response.frame.send_time = 205, 1700000000.25
        assert got == want
