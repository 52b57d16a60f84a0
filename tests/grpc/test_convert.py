"""FaceFrame <-> facebridge.v1 messages: what a remote client rebuilds is the frame the server converted."""
from __future__ import annotations

import numpy as np

from bridge.frame import MorphParams
from bridge.grpc.convert import build_frame, build_header, parse_frame
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
