"""Tuning: the mapping on every frame as a new frame, the head's dead zone, the peaks before mapping."""
import numpy as np

from bridge.frame import ARKIT_INDEX
from bridge.mapping import parse_mapping
from bridge.ranges import MAX_GAIN
from bridge.runtime.tuning import Tuning
from tests.helpers import face_frame

SMILE = ARKIT_INDEX["mouthSmileLeft"]


def test_a_frame_is_mapped_into_a_new_frame_and_the_describers_own_is_untouched():
    tuning = Tuning(default=parse_mapping({"blendshapes": {"mouthSmileLeft": {"gain": 2}}}))
    frame = face_frame(1, smile=0.3)
    out = tuning.wrap(lambda item: item)(frame)
    assert out is not frame and out.blendshapes[SMILE] == np.float32(0.6)
    assert frame.blendshapes[SMILE] == np.float32(0.3), "a lost face relaxes from the unmapped frame"
    assert tuning.peaks("FaceBridge")[SMILE] == 0.0, "a peak counts once held two frames"
    tuning.apply(face_frame(2, smile=0.9))
    tuning.apply(face_frame(3, smile=0.5))
    assert tuning.peaks("FaceBridge")[SMILE] == np.float32(0.5), "peaks are what was measured, held two frames"


def test_the_page_sets_a_shape_takes_ranges_from_the_peaks_and_saves_to_the_profile(tmp_path):
    from bridge.calibration import CalibrationProfile

    tuning = Tuning()
    tuning.set_shape("FaceBridge", "jawOpen", {"dead_zone": 0.1})
    for k in range(3):
        frame = face_frame(k)
        frame.blendshapes[ARKIT_INDEX["eyeBlinkLeft"]] = 0.5
        tuning.apply(frame)
    results = {r.name: r for r in tuning.apply_ranges("FaceBridge")}
    assert results["eyeBlinkLeft"].gain == 2.0
    assert results["cheekPuff"].gain == MAX_GAIN, "face_frame's 0.1 everywhere: the gain is capped"
    view = tuning.view("FaceBridge")
    assert view["mapping"]["blendshapes"]["jawOpen"]["dead_zone"] == 0.1, "ranges keep the other settings"
    tuning.save("FaceBridge", tmp_path)
    stored = CalibrationProfile.load("FaceBridge", tmp_path).mapping["blendshapes"]
    assert stored["eyeBlinkLeft"] == {"gain": 2.0} and stored["jawOpen"]["dead_zone"] == 0.1


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
