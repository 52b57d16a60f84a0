"""ExpressionRows' compiled loops (rows_compiled.py, numba) give what its numpy arithmetic gives: the same
translations, reprojected points and region confidence, on faces of the morphable model seen by a camera, with
landmark noise, at the pass sizes serve describes (1, 7 and 64 rows); the same head matrices and rotation vectors,
rotations about pi (where the rotation vector's formula turns) included."""
from __future__ import annotations

import numpy as np
import pytest

from bridge import compiled
from bridge.expression.model import FLIP, batch_head_matrices, load_model, project, rotvecs_from_matrices
from bridge.expression.rows import ExpressionRows
from bridge.expression.stage import ExpressionEstimator

pytestmark = pytest.mark.skipif(not compiled.available(), reason="numba is not installed (the litert extra)")


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


@pytest.mark.parametrize("n", [1, 7, 64])
def test_the_compiled_rows_are_numpys(n):
    xy, outputs, sizes, _ = _faces(n, seed=n)
    results = []
    for compiled_loops in (False, True):
        rows = ExpressionRows(n, compiled_loops=compiled_loops)
        assert (rows._compiled is not None) == compiled_loops
        engines = [ExpressionEstimator(session=False) for _ in range(n)]
        results.append((rows.finish(np.arange(n), engines, xy, outputs, sizes), rows._last_points.copy()))
    (numpy_batch, numpy_points), (compiled_batch, compiled_points) = results
    assert numpy_batch.usable.all() and np.isfinite(compiled_batch.head_translation).all()
    # the translations are metres from the camera's normal equations: summed in another order, equal to rounding
    np.testing.assert_allclose(compiled_batch.head_translation, numpy_batch.head_translation, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(compiled_points, numpy_points, rtol=0, atol=1e-6)
    # confidences are rounded to 4 decimals: at most one step apart where a value sits on a rounding edge
    assert np.abs(compiled_batch.region_confidence - numpy_batch.region_confidence).max() <= 1.0001e-4
    assert 0.05 < float(np.median(numpy_batch.region_confidence[:, :-1])) < 1.0  # a real spread, not all 0 or 1
    for name in ("blendshapes", "identity", "expression"):
        np.testing.assert_array_equal(getattr(compiled_batch, name), getattr(numpy_batch, name))
    for name in ("head_rotation", "eye_rotation_left", "eye_rotation_right"):
        np.testing.assert_allclose(getattr(compiled_batch, name), getattr(numpy_batch, name), rtol=0, atol=1e-6)


def test_the_compiled_reprojection_error_per_region_is_numpys():
    """Before its rounding: the rms reprojection error of each region, both ways, on the same inputs."""
    n = 16
    xy, _, sizes, angles = _faces(n, seed=3)
    rot = FLIP @ batch_head_matrices(angles)
    rows = [ExpressionRows(n, compiled_loops=c) for c in (False, True)]
    shape = np.ascontiguousarray(load_model()._neutral468.reshape(468, 3).T[None].repeat(n, 0))
    focal, centre = sizes[:, 0].astype(np.float64), sizes.astype(np.float64) / 2.0
    (t0, p0, rms0), (t1, p1, rms1) = (r._reproject(rot, shape, xy, focal, centre) for r in rows)
    assert rms0.min() > 0.1  # the mean face under these expressions: a real error to compare
    np.testing.assert_allclose(rms1, rms0, rtol=1e-9)
    np.testing.assert_allclose(t1, t0, rtol=1e-9)
    np.testing.assert_allclose(p1, p0, rtol=0, atol=1e-8)


def test_a_reprojection_that_fails_to_compile_leaves_numpys_and_says_so(monkeypatch, caplog):
    from bridge.expression import rows_compiled

    def broken():
        raise RuntimeError("numba: no target for this CPU")

    monkeypatch.setattr(rows_compiled, "warm", broken)
    rows = ExpressionRows(2)
    assert rows._compiled is None and "numpy computes the rows instead" in caplog.text
    xy, outputs, sizes, _ = _faces(2, seed=5)
    batch = rows.finish(np.arange(2), [ExpressionEstimator(session=False) for _ in range(2)], xy, outputs, sizes)
    assert batch.usable.all() and np.isfinite(batch.head_translation).all()


def test_the_compiled_rotations_are_numpys():
    rng = np.random.default_rng(11)
    about_pi = [[180.0, 0.0, 0.0], [0.0, 180.0, 0.0], [0.0, 0.0, 180.0], [90.0, 180.0, -90.0]]
    angles = np.concatenate([rng.uniform(-180.0, 180.0, (200, 3)), np.zeros((1, 3)), about_pi])
    rows = [ExpressionRows(1, compiled_loops=c) for c in (False, True)]
    m0, m1 = (r._head_matrices(angles) for r in rows)
    np.testing.assert_allclose(m1, m0, rtol=0, atol=1e-12)
    np.testing.assert_allclose(m0, batch_head_matrices(angles), rtol=0, atol=0)
    v0, v1 = (r._rotvecs(m0) for r in rows)
    np.testing.assert_allclose(v1, v0, rtol=0, atol=1e-9)
    np.testing.assert_allclose(v0, rotvecs_from_matrices(m0), rtol=0, atol=0)
    assert np.abs(v0[-4:]).max() > 3.0  # the rotations about pi went to cv2 and came back as such
