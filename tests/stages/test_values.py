"""One formula, two loops: each describe formula gives a face the same answer run on plain floats (one stream,
FaceDescriber) as run on arrays with a row per face (DescribeRows). numpy's hypot and arctan2 may differ from math's
in the last bit of a float64, hence the 1e-6 bound on float32 results; the rest is the same IEEE arithmetic."""
from __future__ import annotations

import math

import numpy as np
import pytest

from bridge.frame import EMOTION_NAMES, NUM_BLENDSHAPES
from bridge.stages import values
from bridge.stages.blink import BlinkEstimator, BlinkRows, eye_openings
from bridge.stages.emotion_context import EmotionContext, EmotionContextRows
from bridge.stages.gaze import eye_angles, eye_look_shapes
from bridge.stages.head_pose import rotation_to_ypr

FACES = 40


@pytest.fixture(scope="module")
def faces():
    """Random faces: the canonical mesh jittered, scaled and shifted, irises near the eye corners' middle."""
    from bridge.stages.head_pose import CANONICAL_PATH

    rng = np.random.default_rng(11)
    mesh = np.load(CANONICAL_PATH)[:, :2] * np.array([1.0, -1.0])
    points = mesh[None] * rng.uniform(8, 20, (FACES, 1, 1)) + rng.uniform(100, 300, (FACES, 1, 2))
    points = points + rng.normal(0, 0.8, points.shape)
    points = np.concatenate([points, np.zeros((FACES, 468, 1))], 2).astype(np.float32)
    irises = (points[:, [33, 263], :] + points[:, [133, 362], :]) / 2 + rng.normal(0, 2, (FACES, 2, 3))
    return points, irises.astype(np.float32)


def test_gaze_and_eye_openings_of_a_face_read_the_same_alone_or_in_a_row(faces):
    points, irises = faces
    rows = eye_angles(points, irises)
    openings = eye_openings(points)
    assert rows.shape == (FACES, 2, 2) and openings.shape == (FACES, 2)
    for i in range(FACES):
        np.testing.assert_allclose(eye_angles(points[i], irises[i]), rows[i], rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(eye_openings(points[i]), openings[i], rtol=1e-6)
    assert np.abs(rows).max() > 1.0  # the irises were off centre: the test reads real angles


def test_eye_look_shapes_of_a_face_are_the_same_alone_or_in_a_row():
    eyes = np.random.default_rng(3).uniform(-40, 40, (FACES, 2, 2)).astype(np.float32)
    rows = np.zeros((FACES, NUM_BLENDSHAPES), np.float32)
    eye_look_shapes(rows, eyes)
    for i in range(FACES):
        alone = np.zeros(NUM_BLENDSHAPES, np.float32)
        eye_look_shapes(alone, eyes[i])
        assert np.array_equal(alone, rows[i])
    assert 0 < rows.max() <= 1.0


def test_head_angles_of_a_rotation_are_the_same_alone_or_in_a_row():
    import cv2

    rng = np.random.default_rng(5)
    rot = np.stack([cv2.Rodrigues(v)[0] for v in rng.normal(0, 0.6, (FACES, 3))])
    rows = rotation_to_ypr(rot)
    for i in range(FACES):
        np.testing.assert_allclose(rotation_to_ypr(rot[i]), rows[i], rtol=1e-6, atol=1e-5)


def test_blink_and_emotion_context_streams_read_the_same_alone_or_in_rows(faces):
    points, _ = faces
    rng = np.random.default_rng(9)
    singles, rows = [BlinkEstimator() for _ in range(4)], BlinkRows(4)
    contexts, context_rows = [EmotionContext() for _ in range(4)], EmotionContextRows(4)
    blinked = 0
    for k in range(60):  # past REFRESH: the open reference is learned on both paths
        face = points[(np.arange(4) + k) % FACES].copy()
        face[:, :, 1] += np.where(rng.random((4, 1)) < 0.2, rng.normal(0, 3, (4, 468)), 0.0)  # some lids move
        got = rows(np.arange(4), face)
        probs = rng.dirichlet(np.ones(len(EMOTION_NAMES)), 4).astype(np.float32)
        weights = rng.uniform(0, 0.5, (4, NUM_BLENDSHAPES)).astype(np.float32)
        blinks = np.where(rng.random((4, 1)) < 0.3, 0.9, 0.1).astype(np.float32) * np.ones((4, 2), np.float32)
        read = context_rows(np.arange(4), probs, weights, blinks, np.full(4, k / 30))
        blinked += int((got > 0.1).sum())
        for i in range(4):
            np.testing.assert_allclose(singles[i](face[i]), got[i], atol=1e-6)
            np.testing.assert_allclose(contexts[i](probs[i], weights[i], blinks[i], k / 30), read[i], atol=1e-6)
    assert blinked > 10  # the moved lids read as blinks: the weights were not all zero


@pytest.mark.parametrize("a, b", [(1.0, 2.0), (2.0, 1.0), (-0.0, 0.0), (0.0, -0.0), (math.nan, 1.0), (1.0, 1.0)])
def test_the_float_forms_of_max_and_min_are_pythons_own(a, b):
    def same(x, y):
        return (math.isnan(x) and math.isnan(y)) or (x == y and math.copysign(1, x) == math.copysign(1, y))

    assert same(values.maximum(a, b), max(a, b)) and same(values.minimum(a, b), min(a, b))
    assert same(values.clip(a, 0.0, 1.5), min(max(a, 0.0), 1.5))
