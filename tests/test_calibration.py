"""Calibration profiles: round trip, applied to frames, refused without a face."""

import numpy as np
import pytest

from bridge.calibration import CalibrationProfile
from bridge.errors import FaceBridgeError
from bridge.frame import ARKIT_INDEX
from tests.helpers import face_frame


def test_calibration_profile_round_trip_and_apply(tmp_path):
    frames = [face_frame(i) for i in range(20)]
    profile = CalibrationProfile.from_frames("Ada Lovelace", frames, identity=np.arange(4.0))
    path = profile.save(tmp_path)
    assert path.name == "Ada_Lovelace.json"
    loaded = CalibrationProfile.load("Ada Lovelace", tmp_path)
    assert loaded.identity == [0.0, 1.0, 2.0, 3.0] and loaded.frames == 20
    live = face_frame(99, smile=0.55)
    loaded.apply(live)
    assert live.blendshapes[ARKIT_INDEX["mouthSmileLeft"]] == pytest.approx(0.5, abs=1e-5)
    assert live.blendshapes[ARKIT_INDEX["jawOpen"]] == pytest.approx(0.0)
    assert np.allclose(live.head_rotation, 0.0)


def test_calibration_needs_a_face(tmp_path):
    with pytest.raises(FaceBridgeError, match="face the camera"):
        CalibrationProfile.from_frames("x", [face_frame(i, found=False) for i in range(20)])
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(FaceBridgeError, match="calibrate --subject broken"):
        CalibrationProfile.load("broken", tmp_path)
