"""Emotion in the context of blinks and the face's shapes (bridge/stages/emotion_context.py)."""
import numpy as np

from bridge.frame import ARKIT_INDEX, EMOTION_NAMES
from bridge.stages.emotion_context import HOLD_S, EmotionContext

E = {n: i for i, n in enumerate(EMOTION_NAMES)}
OPEN, SHUT = np.zeros(2), np.ones(2)


def probs(**kw) -> np.ndarray:
    p = np.zeros(7, np.float32)
    for name, v in kw.items():
        p[E[name]] = v
    return p / p.sum()


def weights(**kw) -> np.ndarray:
    w = np.zeros(52, np.float32)
    for name, v in kw.items():
        w[ARKIT_INDEX[name]] = v
    return w


def test_a_blink_holds_the_reading_from_before_the_eyes_shut():
    ctx = EmotionContext()
    happy = ctx(probs(happy=0.8, neutral=0.2), weights(), OPEN, 0.0)
    during = ctx(probs(sad=0.9, neutral=0.1), weights(), SHUT, 0.1)
    np.testing.assert_allclose(during, happy)
    assert ctx(probs(sad=0.9, neutral=0.1), weights(), OPEN, 0.3).argmax() == E["sad"]  # eyes open: read again


def test_a_long_closure_is_read_as_it_comes():
    ctx = EmotionContext()
    ctx(probs(happy=1.0), weights(), OPEN, 0.0)
    ctx(probs(sad=1.0), weights(), SHUT, 0.1)
    assert ctx(probs(sad=1.0), weights(), SHUT, 0.1 + HOLD_S + 0.1).argmax() == E["sad"]


def test_eyes_shut_from_the_start_have_nothing_to_hold():
    assert EmotionContext()(probs(sad=1.0), weights(), SHUT, 0.0).argmax() == E["sad"]


def test_an_open_mouth_without_brows_or_wide_eyes_is_not_fear():
    p = EmotionContext()(probs(fear=0.7, neutral=0.3), weights(jawOpen=0.4), OPEN, 0.0)
    assert p.argmax() == E["neutral"] and p[E["fear"]] < 0.05 and np.isclose(p.sum(), 1.0)


def test_fear_with_raised_inner_brows_stays_fear():
    p = EmotionContext()(probs(fear=0.7, neutral=0.3), weights(jawOpen=0.4, browInnerUp=0.4), OPEN, 0.0)
    assert p.argmax() == E["fear"]


SURPRISED = dict(jawOpen=0.4, browInnerUp=0.5, browOuterUpLeft=0.5, browOuterUpRight=0.5, eyeWideLeft=0.4,
                 eyeWideRight=0.4)


def test_raised_brows_and_wide_eyes_above_the_resting_face_read_as_surprise():
    ctx = EmotionContext()
    ctx(probs(neutral=1.0), weights(), OPEN, 0.0)  # seen resting first
    p = ctx(probs(fear=0.5, neutral=0.3, surprise=0.2), weights(**SURPRISED), OPEN, 0.5)
    assert p.argmax() == E["surprise"]


def test_brows_and_lids_that_always_read_raised_are_this_face_at_rest_not_surprise():
    ctx = EmotionContext()
    still = weights(browInnerUp=0.4, browOuterUpLeft=0.4, browOuterUpRight=0.4, eyeWideLeft=0.3, eyeWideRight=0.3)
    readings = [ctx(probs(neutral=0.7, fear=0.2, surprise=0.1), still, OPEN, i / 10) for i in range(30)]
    assert all(p.argmax() == E["neutral"] for p in readings)


def test_the_resting_baseline_climbs_slowly_so_a_held_surprise_stays_surprise():
    ctx = EmotionContext()
    ctx(probs(neutral=1.0), weights(), OPEN, 0.0)
    held = [ctx(probs(fear=0.5, neutral=0.3, surprise=0.2), weights(**SURPRISED), OPEN, 0.1 * i) for i in range(1, 21)]
    assert all(p.argmax() == E["surprise"] for p in held)  # two seconds of it


def test_a_long_closure_does_not_lower_where_the_lids_rest():
    ctx = EmotionContext()
    wide = weights(eyeWideLeft=0.3, eyeWideRight=0.3, browInnerUp=0.4)
    ctx(probs(neutral=1.0), wide, OPEN, 0.0)
    for i in range(1, 40):  # four seconds shut: past the hold, read as it comes
        ctx(probs(neutral=1.0), weights(), SHUT, 0.1 * i)
    assert ctx(probs(neutral=0.7, surprise=0.3), wide, OPEN, 4.0).argmax() == E["neutral"]


def test_a_closed_mouth_neutral_face_is_left_alone():
    p0 = probs(neutral=0.6, happy=0.3, sad=0.1)
    np.testing.assert_allclose(EmotionContext()(p0, weights(), OPEN, 0.0), p0, atol=1e-6)


def test_rows_read_each_stream_as_its_own_context_would():
    from bridge.stages.emotion_context import EmotionContextRows

    rng = np.random.default_rng(2)
    singles, rows, t = [EmotionContext() for _ in range(4)], EmotionContextRows(4), np.zeros(4)
    for step in range(600):  # blinks held and released, long closures, open mouths, surprise
        sel = np.sort(rng.choice(4, size=rng.integers(1, 5), replace=False))
        p = rng.dirichlet(np.ones(7), len(sel))
        w = rng.uniform(0, 0.6, (len(sel), 52))
        blinks = rng.uniform(0, 1, (len(sel), 2)) ** 0.5
        t[sel] += rng.choice([1 / 30, 1.0], size=len(sel), p=[0.9, 0.1])
        if step == 300:
            rows.reset(sel[:1])
            singles[sel[0]].reset()
        want = np.stack([singles[i](p[k], w[k], blinks[k], t[i]) for k, i in enumerate(sel)])
        assert np.array_equal(rows(sel, p, w, blinks, t[sel]), want)
