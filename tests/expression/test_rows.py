"""ExpressionRows (a pass of many faces, `facebridge serve`) gives each row what its own ExpressionEstimator's
estimate_outputs gives that face (`facebridge run`): the same weights, identity, parameter block, head and eye
rotation vectors, translation and region confidence, on faces of the morphable model seen by a camera with landmark
noise, at the pass sizes serve describes (1, 7 and 64 rows), as numpy runs result.py and as numba compiles it; a few
lost landmarks taken from each row's last reprojection, as the estimator takes them from its own."""
from __future__ import annotations

import numpy as np
import pytest

from bridge import compiled
from bridge.expression.model import FLIP, batch_head_matrices, load_model, project
from bridge.expression.result import result_math
from bridge.expression.rows import ExpressionRows
from bridge.expression.stage import ExpressionEstimator

WAYS = [False, pytest.param(True, marks=pytest.mark.skipif(not compiled.available(),
                                                           reason="numba is not installed (the litert extra)"))]


def _faces(n: int, seed: int):
    """n faces of the model's mean identity with random expressions and poses, 45-90 cm from a 640x480 camera:
    (landmarks (n, 468, 2) with 0.5 px of noise, the regressor's outputs, sizes, head angles in degrees)."""
    rng = np.random.default_rng(seed)
    model = load_model()
    weights = rng.uniform(0.0, 0.4, (n, 52)).astype(np.float32)
    angles = rng.uniform(-25.0, 25.0, (n, 3))
    rot = FLIP @ batch_head_matrices(angles)
    points = np.stack([model.points_from(model._neutral468.reshape(-1), w.astype(np.float64)) for w in weights])
    cam = points @ rot.transpose(0, 2, 1) + np.stack([rng.uniform(-8, 8, n), rng.uniform(-6, 6, n),
                                                      rng.uniform(45, 90, n)], 1)[:, None]
    xy = project(cam, 640.0, (320.0, 240.0))[..., :2] + rng.normal(0.0, 0.5, (n, 468, 2))
    contract = ExpressionEstimator(session=False).contract
    outputs = {contract.outputs["blendshapes"][0]: weights,
               contract.outputs["head_rotation"][0]: angles.astype(np.float32)}
    return xy, outputs, np.tile([640, 480], (n, 1)), angles


def _same(batch, k, result):
    """Row k of an ExpressionBatch against one face's ExpressionResult."""
    m = result.morph
    np.testing.assert_array_equal(batch.blendshapes[k], result.blendshapes)
    for name in ("identity", "expression", "jaw_rotation", "head_rotation", "eye_rotation_left", "eye_rotation_right"):
        np.testing.assert_allclose(getattr(batch, name)[k], getattr(m, name), rtol=0, atol=1e-6, err_msg=name)
    # metres from the camera's normal equations: one face's sums against another matrix product's, equal to rounding
    np.testing.assert_allclose(batch.head_translation[k], m.head_translation, rtol=1e-6, atol=1e-6)
    # confidences are rounded to 4 decimals: at most one step apart where a value sits on a rounding edge
    want = [result.region_confidence[name] for name in batch.region_names]
    assert np.abs(batch.region_confidence[k] - want).max() <= 1.0001e-4


@pytest.mark.parametrize("compiled_loops", WAYS)
@pytest.mark.parametrize("n", [1, 7, 64])
def test_each_row_is_what_its_own_estimator_gives_that_face(n, compiled_loops):
    xy, outputs, sizes, _ = _faces(n, seed=n)
    rows = ExpressionRows(n, compiled_loops=compiled_loops)
    assert rows.math.compiled == compiled_loops
    batch = rows.finish(np.arange(n), [ExpressionEstimator(session=False) for _ in range(n)], xy, outputs, sizes)
    assert batch.usable.all() and 0.05 < float(np.median(batch.region_confidence[:, :-1])) < 1.0  # a real spread
    for k in range(n):
        single = ExpressionEstimator(session=False)
        lm = np.concatenate([xy[k], np.zeros((468, 1))], 1)
        _same(batch, k, single.estimate_outputs(lm, (640, 480), {name: v[k:k + 1] for name, v in outputs.items()}))


def test_compiled_rows_are_numpys():
    if not compiled.available():
        pytest.skip("numba is not installed (the litert extra)")
    n = 16
    xy, outputs, sizes, _ = _faces(n, seed=3)
    batches = []
    for compiled_loops in (False, True):
        rows = ExpressionRows(n, compiled_loops=compiled_loops)
        batches.append((rows.finish(np.arange(n), [ExpressionEstimator(session=False) for _ in range(n)], xy,
                                    outputs, sizes), rows._last_points.copy()))
    (numpy_batch, numpy_points), (compiled_batch, compiled_points) = batches
    np.testing.assert_allclose(compiled_batch.head_translation, numpy_batch.head_translation, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(compiled_points, numpy_points, rtol=0, atol=1e-6)
    assert np.abs(compiled_batch.region_confidence - numpy_batch.region_confidence).max() <= 1.0001e-4
    for name in ("blendshapes", "identity", "expression", "jaw_rotation"):
        np.testing.assert_array_equal(getattr(compiled_batch, name), getattr(numpy_batch, name))
    for name in ("head_rotation", "eye_rotation_left", "eye_rotation_right"):
        np.testing.assert_allclose(getattr(compiled_batch, name), getattr(numpy_batch, name), rtol=0, atol=1e-6)


def test_a_few_lost_landmarks_are_taken_from_the_rows_last_reprojection_as_the_estimator_takes_them():
    xy, outputs, sizes, _ = _faces(2, seed=9)
    rows, engines = ExpressionRows(2), [ExpressionEstimator(session=False) for _ in range(2)]
    singles = [ExpressionEstimator(session=False) for _ in range(2)]
    lost = xy.copy()
    lost[0, :40] = np.nan  # a few points of row 0; too many of row 1
    lost[1, :200] = np.nan
    for frame in (xy, lost):
        batch = rows.finish(np.arange(2), engines, frame, outputs, sizes)
    assert batch.usable.tolist() == [True, False]
    for k, frame in ((0, xy), (0, lost)):
        lm = np.concatenate([frame[k], np.zeros((468, 1))], 1)
        result = singles[k].estimate_outputs(lm, (640, 480), {name: v[k:k + 1] for name, v in outputs.items()})
    _same(batch, 0, result)


def test_compiled_arithmetic_that_fails_to_compile_leaves_numpys_and_says_so(monkeypatch, caplog):
    if not compiled.available():
        pytest.skip("numba is not installed (the litert extra)")
    from bridge.expression import result_compiled

    def broken():
        raise RuntimeError("numba: no target for this CPU")

    monkeypatch.setattr(result_compiled, "warm", broken)
    result_math.cache_clear()  # a ResultMath made before the break would hold the compiled functions
    rows = ExpressionRows(2, compiled_loops=True)
    result_math.cache_clear()
    assert not rows.math.compiled and "numpy computes the expression result instead" in caplog.text
    xy, outputs, sizes, _ = _faces(2, seed=5)
    batch = rows.finish(np.arange(2), [ExpressionEstimator(session=False) for _ in range(2)], xy, outputs, sizes)
    assert batch.usable.all() and np.isfinite(batch.head_translation).all()
