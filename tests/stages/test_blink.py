"""Blinks from the lid opening against the subject's own open eye (bridge/stages/blink.py)."""
import numpy as np

from bridge.mesh import EYE_CORNERS, EYE_LID_PAIRS
from bridge.stages.blink import BlinkEstimator, eye_openings


def eye_points(opening: float) -> np.ndarray:
    """468 points where both eyes are 30 px wide and open by `opening` x width."""
    pts = np.zeros((468, 3), np.float32)
    for eye, x0 in ((0, 200.0), (1, 100.0)):
        a, b = EYE_CORNERS[eye]
        pts[a, :2], pts[b, :2] = (x0, 100), (x0 + 30, 100)
        for up, down in EYE_LID_PAIRS[eye]:
            pts[up, :2] = (x0 + 15, 100 - 15 * opening)
            pts[down, :2] = (x0 + 15, 100 + 15 * opening)
    return pts


def test_opening_is_relative_to_eye_width():
    assert np.allclose(eye_openings(eye_points(0.3)), 0.3, atol=1e-6)


def test_blink_is_measured_against_this_subjects_open_eye():
    est = BlinkEstimator()
    for _ in range(60):  # a subject whose open eye reads 0.45 (wider than the default)
        assert est(eye_points(0.45)).max() == 0.0
    assert np.allclose(est(eye_points(0.45 * 0.25)), 1.0)  # closed: a quarter of the open opening
    half = est(eye_points(0.45 * 0.6))
    assert 0.3 < half[0] < 0.6 and np.allclose(half[0], half[1])
    assert est(eye_points(0.45 * 0.9)).max() == 0.0  # within the dead zone: no blink


def test_reset_forgets_the_subject():
    est = BlinkEstimator()
    for _ in range(60):
        est(eye_points(0.6))
    est.reset()
    assert est.open_reference()[0] < 0.6


def test_rows_blink_each_stream_as_its_own_estimator_would():
    from bridge.stages.blink import BlinkRows

    rng = np.random.default_rng(1)
    singles, rows = [BlinkEstimator() for _ in range(4)], BlinkRows(4)
    for step in range(400):  # past the history's length, with partial and full histories side by side
        sel = np.sort(rng.choice(4, size=rng.integers(1, 5), replace=False))
        points = np.stack([eye_points(rng.uniform(0.02, 0.4)) for _ in sel])
        if step == 200:
            rows.reset(sel[:1])
            singles[sel[0]].reset()
        want = np.stack([singles[i](points[k]) for k, i in enumerate(sel)])
        assert np.abs(rows(sel, points) - want).max() < 1e-6


def test_the_open_reference_is_numpys_percentile_value_for_value():
    from bridge.stages.blink import OPEN_PERCENTILE, open_reference

    rng = np.random.default_rng(7)
    for n in (1, 2, 15, 16, 99, 149, 150):  # gamma below and above one half, one and two rows
        history = (rng.random((3, n, 2)) * rng.uniform(0.1, 0.6) + 0.02).astype(np.float32)
        assert np.array_equal(open_reference(history[0]), np.percentile(history[0], OPEN_PERCENTILE, axis=0))
        assert np.array_equal(open_reference(history, axis=1), np.percentile(history, OPEN_PERCENTILE, axis=1))
        assert open_reference(history[0]).dtype == np.float32
