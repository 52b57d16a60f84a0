"""FaceFrame survives its dict round trip (the take format)."""
import json

import numpy as np

from bridge.frame import FaceFrame
from tests.helpers import face_frame


def test_face_frame_dict_round_trip():
    fr = face_frame(3, smile=0.7)
    fr.visemes = np.linspace(0, 1, 15, dtype=np.float32)
    back = FaceFrame.from_dict(json.loads(json.dumps(fr.to_dict())))
    assert np.allclose(back.blendshapes, fr.blendshapes, atol=1e-6)
    assert np.allclose(back.visemes, fr.visemes, atol=1e-6)
    assert back.seq == 3 and back.timecode() == fr.timecode()
