"""The expression result's fewer-call arithmetic (bridge/expression/result.py) gives model.py's quantities: the
translation of solve_translation, the reprojection of project, cv2.Rodrigues of the head and eye rotations, the
parameter block of ict_expression and jaw_rotation."""
from __future__ import annotations

import cv2
import numpy as np

from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import FLIP, head_matrix, load_model, project, rotvec_from_matrix, solve_translation
from bridge.expression.result import eye_rotvec, result_math, rotvec


def test_rotation_vectors_are_cv2_rodrigues_in_float32():
    rng = np.random.default_rng(3)
    for yaw, pitch, roll in rng.uniform(-60, 60, (2000, 3)):
        m = head_matrix(yaw, pitch, roll)
        assert np.array_equal(rotvec(m).astype(np.float32), rotvec_from_matrix(m).astype(np.float32))
        eye = cv2.Rodrigues(head_matrix(yaw, pitch, 0.0))[0].reshape(3)
        assert np.array_equal(np.array(eye_rotvec(yaw, pitch), np.float32), eye.astype(np.float32))
    assert not rotvec(np.eye(3)).any() and eye_rotvec(0.0, 0.0) == (0.0, 0.0, 0.0)
    half_turn = cv2.Rodrigues(head_matrix(180.0, 0.0, 0.0))[0].reshape(3)
    assert np.allclose(eye_rotvec(180.0, 0.0), half_turn)
    assert np.allclose(rotvec(head_matrix(180.0, 0.0, 0.0)), rotvec_from_matrix(head_matrix(180.0, 0.0, 0.0)))


def test_pose_fit_and_region_error_are_the_models_own():
    model = load_model()
    rng = np.random.default_rng(5)
    math_ = result_math(model)
    for _ in range(20):
        identity = np.r_[rng.normal(0, 1, 100), 0.5]
        weights = rng.uniform(0, 0.5, 52)
        rot = head_matrix(*rng.uniform(-30, 30, 3))
        points = model.face_points(identity, weights)
        focal, centre = 640.0, (320.0, 240.0)
        truth = np.array([rng.uniform(-5, 5), rng.uniform(-5, 5), rng.uniform(40, 90)])
        xy = project(points @ (FLIP @ rot).T + truth, focal, centre)[:, :2] + rng.normal(0, 0.7, (468, 2))
        t, pu, pv, sigma = math_.pose_fit(points, rot, xy, focal, centre)
        want_t = solve_translation(points @ (FLIP @ rot).T, xy, focal, centre)
        assert np.abs(t - want_t).max() < 1e-9
        proj = project(points @ (FLIP @ rot).T + want_t, focal, centre)[:, :2]
        assert np.abs(np.stack([pu, pv], 1) - (proj - xy)).max() < 1e-9
        want_sigma = NOISE_FRACTION * (np.ptp(xy[:, 0]) + 1e-6)
        assert abs(sigma - want_sigma) < 1e-12
        error = np.linalg.norm(proj - xy, axis=1) / want_sigma
        assert np.allclose(math_.region_rms(pu, pv, sigma), np.sqrt(model.region_average @ error ** 2), rtol=1e-12)
        given = math_.pose_fit(points, rot, xy, focal, centre, t=truth)[0]
        assert np.array_equal(given, truth)
        expression, jaw, left, right = math_.parameters(weights.astype(np.float32))
        w32 = weights.astype(np.float32)
        assert np.allclose(expression, model.ict_expression(w32), atol=1e-6)
        assert np.allclose(jaw, model.jaw_rotation(w32), atol=1e-6)
        want_left, want_right = model.eye_rotations(w32)
        assert np.allclose(left, want_left, atol=1e-6) and np.allclose(right, want_right, atol=1e-6)
