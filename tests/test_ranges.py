"""Range calibration's arithmetic: a peak held two frames, gains through the dead zone, unseen shapes kept."""
import numpy as np

from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES
from bridge.mapping import parse_mapping
from bridge.ranges import MAX_GAIN, gain_for_peak, peak_of, ranges_from_frames


def test_a_one_frame_glitch_is_not_a_peak():
    assert peak_of([0.1, 0.9, 0.1, 0.5, 0.6, 0.55]) == 0.55


def test_the_gain_takes_the_peak_to_one_through_the_dead_zone_and_is_capped():
    m = parse_mapping({"blendshapes": {"jawOpen": {"dead_zone": 0.2}}})
    gain = gain_for_peak(m, "jawOpen", 0.6)
    assert abs(m.with_shape("jawOpen", gain=gain).apply(np.full(NUM_BLENDSHAPES, 0.6))[ARKIT_INDEX["jawOpen"]]
               - 1.0) < 1e-3
    assert gain_for_peak(m, "eyeBlinkLeft", 0.06) == MAX_GAIN
    assert gain_for_peak(m, "eyeBlinkLeft", 0.01) is None


def test_each_step_sets_only_its_shapes_and_keeps_other_settings():
    start = parse_mapping({"blendshapes": {"eyeBlinkLeft": {"gamma": 0.8}, "cheekPuff": {"gain": 3}}})
    frames = [np.zeros(NUM_BLENDSHAPES, np.float32) for _ in range(5)]
    for w in frames[1:4]:
        w[ARKIT_INDEX["eyeBlinkLeft"]] = 0.5
    mapping, results = ranges_from_frames(start, [(("eyeBlinkLeft", "cheekPuff"), frames)])
    assert mapping.shape("eyeBlinkLeft").gain == 2.0 and mapping.shape("eyeBlinkLeft").gamma == 0.8
    assert mapping.shape("cheekPuff").gain == 3, "not seen: kept"
    assert [r.gain for r in results] == [2.0, None]
