"""The expression result's arithmetic (bridge/expression/result.py), as numpy runs it and as numba compiles the same
functions, gives model.py's quantities: the translation of solve_translation, the reprojection of project,
cv2.Rodrigues of the head and eye rotations (rotations about pi included), the parameter block of ict_expression and
jaw_rotation."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from bridge import compiled
from bridge.expression.fit import NOISE_FRACTION
from bridge.expression.model import FLIP, head_matrix, load_model, project, rotvec_from_matrix, solve_translation
from bridge.expression.result import ResultMath

WAYS = [False, pytest.param(True, marks=pytest.mark.skipif(not compiled.available(),
                                                           reason="numba is not installed (the litert extra)"))]
AWAY = np.array([0.0, 0.0, 60.0])  # a translation given: the rotations alone are compared


@pytest.mark.parametrize("compiled_loops", WAYS)
def test_rotation_vectors_are_cv2_rodrigues_in_float32(compiled_loops):
    math_ = ResultMath(load_model(), compiled_loops)
    assert math_.compiled == compiled_loops
    rng = np.random.default_rng(3)
    points, xy = np.zeros((468, 3)), np.zeros((468, 2))
    angles = np.concatenate([rng.uniform(-60, 60, (2000, 3)), [[0.0, 0.0, 0.0], [180.0, 0.0, 0.0]]])
    for yaw, pitch, roll in angles:
        m = head_matrix(yaw, pitch, roll)
        *_, rotations = math_.face(m, points, xy, 640.0, (320.0, 240.0), AWAY, np.array([yaw, pitch] * 2))
        assert np.array_equal(rotations[0].astype(np.float32), rotvec_from_matrix(m).astype(np.float32))
        eye = cv2.Rodrigues(head_matrix(yaw, pitch, 0.0))[0].reshape(3)
        if abs(yaw) < 179.0:
            assert np.array_equal(rotations[1].astype(np.float32), eye.astype(np.float32))
        else:  # the half turn: cv2's own answer, by its own branch
            assert np.allclose(rotations[1], eye) and np.abs(rotations[0]).max() > 3.0
        assert np.array_equal(rotations[1], rotations[2])
    *_, rotations = math_.face(np.eye(3), points, xy, 640.0, (320.0, 240.0), AWAY, np.zeros(4))
    assert not rotations.any()


@pytest.mark.parametrize("compiled_loops", WAYS)
def test_the_result_is_the_models_own(compiled_loops):
    model = load_model()
    rng = np.random.default_rng(5)
    math_ = ResultMath(model, compiled_loops)
    for _ in range(20):
        identity = np.r_[rng.normal(0, 1, 100), 0.5]
        weights = rng.uniform(0, 0.5, 52)
        rot = head_matrix(*rng.uniform(-30, 30, 3))
        points = model.face_points(identity, weights)
        focal, centre = 640.0, (320.0, 240.0)
        truth = np.array([rng.uniform(-5, 5), rng.uniform(-5, 5), rng.uniform(40, 90)])
        xy = project(points @ (FLIP @ rot).T + truth, focal, centre)[:, :2] + rng.normal(0, 0.7, (468, 2))
        block = weights @ math_.params
        t, pu, pv, rms, _ = math_.face(rot, points, xy, focal, centre, None, block[math_.eyes])
        want_t = solve_translation(points @ (FLIP @ rot).T, xy, focal, centre)
        assert np.abs(t - want_t).max() < 1e-9
        proj = project(points @ (FLIP @ rot).T + want_t, focal, centre)[:, :2]
        assert np.abs(np.stack([pu, pv], 1) - (proj - xy)).max() < 1e-9
        want_sigma = NOISE_FRACTION * (np.ptp(xy[:, 0]) + 1e-6)
        error = np.linalg.norm(proj - xy, axis=1) / want_sigma
        assert np.allclose(rms, np.sqrt(model.region_average @ error ** 2), rtol=1e-12)
        given = math_.face(rot, points, xy, focal, centre, truth, block[math_.eyes])[0]
        assert np.array_equal(given, truth)
        w32 = weights.astype(np.float32)
        block = w32.astype(np.float64) @ math_.params
        assert np.allclose(block[math_.expression].astype(np.float32), model.ict_expression(w32), atol=1e-6)
        assert np.allclose(block[math_.jaw].astype(np.float32), model.jaw_rotation(w32), atol=1e-6)
        *_, rotations = math_.face(rot, points, xy, focal, centre, None, block[math_.eyes])
        want_left, want_right = model.eye_rotations(w32)
        assert np.allclose(rotations[1], want_left, atol=1e-6) and np.allclose(rotations[2], want_right, atol=1e-6)
