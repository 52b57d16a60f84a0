"""Tuning: the mapping on every frame as a new frame, the head's dead zone, the peaks before mapping."""
import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mapping import parse_mapping
from bridge.runtime.tuning import Tuning
from tests.helpers import face_frame

SMILE = ARKIT_INDEX["mouthSmileLeft"]


def test_a_frame_is_mapped_into_a_new_frame_and_the_describers_own_is_untouched():
    tuning = Tuning(default=parse_mapping({"blendshapes": {"mouthSmileLeft": {"gain": 2}}}))
    frame = face_frame(1, smile=0.3)
    out = tuning.wrap(lambda item: item)(frame)
    assert out is not frame and out.blendshapes[SMILE] == np.float32(0.6)
    assert frame.blendshapes[SMILE] == np.float32(0.3), "a lost face relaxes from the unmapped frame"
    assert tuning.peaks("FaceBridge")[SMILE] == np.float32(0.3), "peaks are what was measured"


def test_each_subject_gets_its_own_mapping_and_a_new_one_applies_at_once():
    tuning = Tuning()
    a, b = face_frame(1, smile=0.3), face_frame(1, smile=0.3)
    b.subject = "Other"
    tuning.set_mapping("FaceBridge", parse_mapping({"blendshapes": {"mouthSmileLeft": {"gain": 0}}}))
    out = tuning.wrap(lambda item: item)([a, b])
    assert out[0].blendshapes[SMILE] == 0.0 and out[1] is b


def test_the_head_holds_in_its_dead_zone_and_follows_beyond_it():
    tuning = Tuning(head_dead_zone=2.0)
    yaws = []
    for k, yaw in enumerate([0.0, 1.0, -1.5, 1.9, 5.0, 4.0, 2.5]):
        frame = face_frame(k)
        frame.head_rotation = np.array([yaw, 0.0, 0.0], np.float32)
        yaws.append(float(tuning.apply(frame).head_rotation[0]))
    assert yaws == [0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0]
