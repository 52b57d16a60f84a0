"""The blendshape mapping: what each setting does to a weight, defaults that change nothing, files checked."""
import json

import numpy as np
import pytest

from bridge.calibration import CalibrationProfile
from bridge.errors import FaceBridgeError
from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES
from bridge.mapping import Mapping, load_mapping, parse_mapping
from bridge.stages.describe import FILTER_SLICES, channel_strengths

BLINK, JAW, SMILE = ARKIT_INDEX["eyeBlinkLeft"], ARKIT_INDEX["jawOpen"], ARKIT_INDEX["mouthSmileLeft"]


def weights(value: float) -> np.ndarray:
    return np.full(NUM_BLENDSHAPES, value, np.float32)


def test_a_file_with_only_two_gains_is_a_whole_mapping():
    m = parse_mapping({"blendshapes": {"eyeBlinkLeft": {"gain": 2.0}, "jawOpen": {"gain": 0.0}}})
    out = m.apply(weights(0.4))
    assert out[BLINK] == pytest.approx(0.8) and out[JAW] == 0.0
    assert np.allclose(np.delete(out, [BLINK, JAW]), 0.4), "every other shape keeps its default (unchanged)"
    assert m.apply(weights(0.7))[BLINK] == 1.0, "the output stays within [0, 1]"


def test_each_setting_in_order_dead_zone_gain_offset_curve_range():
    m = parse_mapping({"blendshapes": {
        "eyeBlinkLeft": {"dead_zone": 0.2},
        "jawOpen": {"gain": 0.5, "offset": 0.1},
        "mouthSmileLeft": {"gamma": 2.0, "min": 0.2, "max": 0.6},
        "browInnerUp": {"curve": [[0, 0], [0.5, 0.9], [1, 1]]},
    }})
    out = m.apply(weights(0.6))
    assert out[BLINK] == pytest.approx((0.6 - 0.2) / 0.8)
    assert m.apply(weights(0.1))[BLINK] == 0.0, "under the dead zone reads 0"
    assert out[JAW] == pytest.approx(0.4)
    assert out[SMILE] == pytest.approx(0.2 + 0.36 * 0.4)
    assert out[ARKIT_INDEX["browInnerUp"]] == pytest.approx(0.9 + 0.1 * 0.2)


def test_live_link_names_are_accepted_and_a_mapping_round_trips_through_a_profile(tmp_path):
    m = parse_mapping({"blendshapes": {"EyeBlinkLeft": {"gain": 1.5}}, "smoothing": {"head": 2},
                       "head_dead_zone": 0.5})
    assert m.shape("eyeBlinkLeft").gain == 1.5
    profile = CalibrationProfile(subject="Ada", mapping=m.to_dict())
    profile.save(tmp_path)
    loaded = CalibrationProfile.load("Ada", tmp_path)
    again = parse_mapping(loaded.mapping)
    assert again.shape("eyeBlinkLeft").gain == 1.5 and again.smoothing == {"head": 2.0}
    assert again.head_dead_zone == 0.5


def test_a_damaged_mapping_in_a_profile_is_refused_with_the_fix(tmp_path):
    path = CalibrationProfile(subject="Ada").save(tmp_path)
    data = json.loads(path.read_text())
    data["mapping"] = {"blendshapes": {"jawOpen": {"gain": "lots"}}}
    path.write_text(json.dumps(data))
    with pytest.raises(FaceBridgeError, match="damaged.*jawOpen.gain"):
        CalibrationProfile.load("Ada", tmp_path)


@pytest.mark.parametrize("data, expected", [
    ({"blendshapes": {"jawOpen": {"curve": [[0, 0], [0.7, 0.5], [0.6, 1]]}}}, "x values must rise"),
    ({"blendshapes": {"jawOpen": {"gamma": 2, "curve": [[0, 0], [1, 1]]}}}, "both a gamma and a curve"),
    ({"blendshapes": {"jawOpen": {"min": 0.8, "max": 0.2}}}, "above its max"),
    ({"blendshapes": {"jawOpen": {"gain": float("nan")}}}, "gain is NaN"),
    ({"head_dead_zone": 90}, "head_dead_zone is 90"),
    ({"version": 7}, "version 7"),
])
def test_bad_settings_name_the_field(data, expected):
    with pytest.raises(FaceBridgeError, match=expected):
        parse_mapping(data)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(FaceBridgeError, match="does not exist"):
        load_mapping(tmp_path / "nope.json")


def test_region_smoothing_sets_each_region_channels_alone():
    strengths = channel_strengths(1.0, {"head": 3.0, "mouth": 0.0})
    blend = strengths[FILTER_SLICES["blendshapes"]]
    assert blend[JAW] == 0.0 and blend[SMILE] == 0.0 and blend[BLINK] == 1.0
    assert np.all(strengths[FILTER_SLICES["head_rotation"]] == 3.0)
    assert np.all(strengths[FILTER_SLICES["eyes"]] == 1.0) and np.all(strengths[FILTER_SLICES["emotion"]] == 1.0)


def test_identity_mapping_changes_nothing():
    w = np.linspace(0, 1, NUM_BLENDSHAPES).astype(np.float32)
    assert np.array_equal(Mapping().apply(w), w)


def test_a_region_with_smoothing_0_passes_through_while_the_others_are_smoothed():
    from bridge.stages.describe import FaceDescriber

    describer = FaceDescriber(expression=None, smoothing=1.0, region_smoothing={"mouth": 0.0, "eyes": 4.0})
    width = sum(s.stop - s.start for s in FILTER_SLICES.values())
    still, moved = np.zeros(width), np.ones(width)
    describer._filter(still, 0.0)
    out = describer._filter(moved, 1 / 30)
    blend = out[FILTER_SLICES["blendshapes"]]
    assert blend[JAW] == pytest.approx(1.0, abs=1e-6), "mouth: no smoothing"
    assert blend[BLINK] < blend[ARKIT_INDEX["browInnerUp"]] < 1.0, "eyes 4x smoother than brows at 1"
