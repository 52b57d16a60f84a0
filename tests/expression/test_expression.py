"""Expression engine: basis, both estimators on held-out synthetic faces, outputs, identity, the bench."""
import json
from pathlib import Path

import numpy as np
import pytest

from bridge.expression.model import VISUAL, head_angles, head_matrix, load_model
from bridge.expression.stage import REGIONS, ExpressionEstimator, ExpressionInputError
from bridge.frame import ARKIT_INDEX, ARKIT_NAMES, MorphParams

ICT_DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "ict_facekit_light.npz"
SEED = 4242  # held out: training uses seeds 0 and 10000


@pytest.fixture(scope="module")
def model():
    return load_model()


@pytest.fixture(scope="module")
def regressor():
    return ExpressionEstimator("regressor")


def run(est, batch, i):
    from bridge.bench.expression import _run

    return _run(est, batch, i)


@pytest.mark.skipif(not ICT_DATA.exists(), reason="ICT-FaceKit source data (../shared/data) not on this machine")
@pytest.mark.parametrize("name", ["jawOpen", "mouthSmileLeft", "eyeBlinkRight", "browInnerUp", "cheekPuff"])
def test_sampling_the_deformed_ict_mesh_gives_the_basis_displacement(name):
    ict = np.load(ICT_DATA)
    b = np.load(Path(__file__).resolve().parents[2] / "bridge" / "expression" / "basis.npz")
    names = [str(n) for n in ict["expression_names"]]
    split = {"browInnerUp": ["browInnerUp_L", "browInnerUp_R"], "cheekPuff": ["cheekPuff_L", "cheekPuff_R"]}
    parts = split.get(name, [name.replace("Left", "_L").replace("Right", "_R")])
    deformed = ict["neutral"].astype(np.float64) + sum(ict["expression_deltas"][names.index(p)].astype(np.float64)
                                                        for p in parts)
    corner, bary = b["attach_vertices"], b["attach_barycentric"].astype(np.float64)
    sampled = (deformed[corner] * bary[:, :, None]).sum(1)
    neutral = (ict["neutral"][corner] * bary[:, :, None]).sum(1)
    np.testing.assert_allclose(neutral, b["neutral"][:468], atol=1e-4)
    np.testing.assert_allclose(sampled - neutral, b["expression"][ARKIT_INDEX[name], :468], atol=1e-3)
    # identity modes too
    ident = ict["neutral"] + ict["identity_deltas"][3].astype(np.float64)
    np.testing.assert_allclose((ident[corner] * bary[:, :, None]).sum(1) - neutral, b["identity"][3, :468], atol=1e-3)


def test_basis_moves_the_right_landmarks(model):
    move = lambda shape, i: float(np.linalg.norm(model.expression_basis[ARKIT_INDEX[shape], i]))  # noqa: E731
    assert move("jawOpen", 14) > 5 * move("jawOpen", 13)  # lower inner lip drops, upper stays
    assert move("eyeBlinkLeft", 386) > 5 * move("eyeBlinkLeft", 159)  # subject's left upper lid (image right)
    assert move("mouthSmileLeft", 291) > 0.5 and move("mouthSmileLeft", 61) < 0.01
    assert model.expression_basis[ARKIT_INDEX["tongueOut"]].max() == 0.0
    assert model.neutral[263, 0] > 0 > model.neutral[33, 0]  # +x = subject's left


def test_head_angles_invert_head_matrix():
    for ypr in [(30, 10, 5), (-44, -29, 19), (0, 0, 0)]:
        np.testing.assert_allclose(head_angles(head_matrix(*ypr)), ypr, atol=1e-9)


def test_regressor_meets_accuracy_on_held_out_faces(model, regressor):
    from bridge.bench.expression import evaluate_regressor

    r = evaluate_regressor(model, regressor, np.random.default_rng(SEED), 400)
    assert r["mae"] <= 0.05, r["regions"]
    for region in REGIONS:
        assert r["regions"][region]["mae"] <= 0.08, (region, r["regions"][region])
    assert r["pose"]["yaw_median_deg"] <= 3 and r["pose"]["pitch_median_deg"] <= 3, r["pose"]
    assert r["regions"]["mouth"]["corr"] > 0.7


def test_fit_and_regressor_agree(model, regressor):
    from bridge.bench.expression import evaluate_fit

    fit = ExpressionEstimator("fit")
    r = evaluate_fit(model, regressor, fit, np.random.default_rng(SEED + 1), subjects=2, frames=24, warmup=8)
    assert r["agreement_mae"] <= 0.05, r
    assert r["fit"]["mae"] <= 0.06, r["fit"]["regions"]
    assert r["fit"]["pose"]["yaw_median_deg"] <= 3


@pytest.mark.parametrize("method", ["regressor", "fit"])
def test_outputs_have_the_documented_shapes_and_ranges(model, method):
    from bridge.expression.synth import synthetic_batch

    est = ExpressionEstimator(method)
    batch = synthetic_batch(model, np.random.default_rng(SEED + 2), 4)
    for i in range(4):
        r = run(est, batch, i)
        assert r.blendshapes.shape == (52,) and r.blendshapes.dtype == np.float32
        assert np.all((r.blendshapes >= 0) & (r.blendshapes <= 1))
        assert r.blendshapes[ARKIT_INDEX["tongueOut"]] == 0.0
        assert set(r.region_confidence) == set(REGIONS) | {"tongue"}
        assert all(0.0 <= v <= 1.0 for v in r.region_confidence.values())
        m = r.morph
        assert isinstance(m, MorphParams) and m.model_id == "ict-face-light"
        assert m.identity.shape == (100,) and m.expression.shape == (53,)
        for v in (m.jaw_rotation, m.head_rotation, m.head_translation, m.eye_rotation_left, m.eye_rotation_right):
            assert v.shape == (3,) and np.isfinite(v).all()
        assert abs(r.head_translation[2] - batch.head_translation[i, 2]) < 0.3 * batch.head_translation[i, 2]
    # a frontal face at rest has high confidence everywhere it can see
    assert min(v for k, v in r.region_confidence.items() if k != "tongue") > 0.2


def test_bad_input_is_a_clear_error_and_lost_points_are_bridged(model, regressor):
    from bridge.expression.synth import synthetic_batch

    batch = synthetic_batch(model, np.random.default_rng(SEED + 3), 1, occlusion=0.0)
    with pytest.raises(ExpressionInputError, match="468"):
        regressor.estimate(np.zeros((68, 2), np.float32), (640, 480))
    with pytest.raises(ExpressionInputError, match="image_size"):
        regressor.estimate(batch.landmarks[0], (0, 480))
    regressor.reset()
    with pytest.raises(ExpressionInputError, match="not finite"):
        regressor.estimate(np.full((468, 3), np.nan, np.float32), (640, 480))
    good = run(regressor, batch, 0)
    holes = batch.landmarks[0].copy()
    holes[:20] = np.nan  # a few points lost after a good frame: bridged from the model
    r = regressor.estimate(holes, tuple(batch.image_size[0]))
    assert np.isfinite(r.blendshapes).all() and np.abs(r.blendshapes - good.blendshapes).max() < 0.3


def test_identity_converges_and_restores(model):
    from bridge.bench.expression import sequences

    batch = next(sequences(model, np.random.default_rng(SEED + 4), 1, 30))
    truth = batch.identity[0, :100]
    for method in ("regressor", "fit"):
        est = ExpressionEstimator(method)
        first = None
        for i in range(30):
            run(est, batch, i)
            if i == 0:
                first = np.abs(est.identity[:5] - truth[:5]).mean()
        err = np.abs(est.identity[:5] - truth[:5]).mean()
        assert err < 0.5 and err <= first + 1e-6, (method, first, err)
        saved = est.identity.copy()
        est.reset()
        est.set_identity(saved[:100])
        np.testing.assert_allclose(est.identity[:100], saved[:100])
        with pytest.raises(ExpressionInputError, match="identity"):
            est.set_identity(np.zeros(7))


def test_an_identity_far_from_the_prior_is_held_within_its_limit_and_said_once(model, caplog):
    from bridge.expression.fit import IDENTITY_LIMIT, hold_identity, identity_prior

    mean, precision = identity_prior(model)
    far = mean.copy()
    far[3], far[7], far[-1] = 16.5, -9.0, 0.5 + 3.0  # the last mode's prior is N(0.5, 0.5^2): 6 sd
    held, worst = hold_identity(far.astype(np.float32), mean, precision)
    assert worst == pytest.approx(16.5) and held.dtype == np.float32
    np.testing.assert_allclose(held[[3, 7, -1]], [IDENTITY_LIMIT, -IDENTITY_LIMIT, 0.5 + 0.5 * IDENTITY_LIMIT])
    near = mean + 0.5
    assert hold_identity(near, mean, precision)[0] is near  # a face near the prior is left as it is

    est = ExpressionEstimator("regressor", session=False)
    with caplog.at_level("INFO", logger="bridge.expression.stage"):
        est._fold_identity(far)
        est._fold_identity(far)
    assert np.abs(est.identity[:-1]).max() == pytest.approx(IDENTITY_LIMIT)
    said = [r for r in caplog.records if "standard deviations" in r.getMessage()]
    assert len(said) == 1 and "16.5" in said[0].getMessage()
    est.set_identity(far[:100])  # a profile stored before identities were held
    assert np.abs(est.identity[:-1]).max() == pytest.approx(IDENTITY_LIMIT)


def test_bench_expression_writes_json(tmp_path):
    from bridge.cli import main

    out = tmp_path / "expr.json"
    assert main(["bench", "expression", "--json", str(out), "--samples", "40", "--subjects", "1", "--frames", "6",
                 "--warmup", "2", "--jitter-frames", "4", "--speed-faces", "10"]) == 0
    doc = json.loads(out.read_text())
    res = doc["results"]
    assert set(res["regressor"]["regions"]) == set(REGIONS)
    assert len(res["regressor"]["per_blendshape"]) == len(VISUAL) == 51
    assert res["speed"]["regressor"]["model_run_ms"] > 0 and "agreement_mae" in res["fit"]
    assert set(ARKIT_NAMES) - set(res["regressor"]["per_blendshape"]) == {"tongueOut"}


def _mirror_of_rendered(batch):
    """What the landmark model would report for the mirrored image: x flipped, points and irises relabelled."""
    from bridge.expression.features import mirror_map

    partner = mirror_map()[0][:936:2] // 2
    lm = batch.landmarks.copy()
    lm[..., 0] = batch.image_size[:, None, 0] - lm[..., 0]
    iris = batch.iris.copy()
    iris[..., 0] = batch.image_size[:, None, 0] - iris[..., 0]
    return lm[:, partner], iris[:, ::-1]


def test_the_mirror_map_gives_the_features_of_the_mirrored_face(model):
    from bridge.expression.features import features_batch, mirror_map
    from bridge.expression.synth import synthetic_batch

    index, sign = mirror_map()
    assert (index[index] == np.arange(len(index))).all()
    b = synthetic_batch(model, np.random.default_rng(SEED + 5), 4, occlusion=0.0)
    lm, iris = _mirror_of_rendered(b)
    f = lambda lm, ir: features_batch(lm[..., :2].astype(np.float64), ir.astype(np.float64), b.iris_present,  # noqa: E731
                                      b.image_size[:, 0].astype(np.float64), b.image_size / 2.0)
    np.testing.assert_allclose(f(b.landmarks, b.iris)[:, index] * sign, f(lm, iris), atol=1e-5)


def test_the_shipped_regressor_reads_a_mirrored_face_as_the_mirror_of_its_reading(model, regressor):
    """The exported graph averages the network with its mirror image: no side can read larger by itself."""
    from bridge.expression.synth import synthetic_batch

    b = synthetic_batch(model, np.random.default_rng(SEED + 6), 6, occlusion=0.0, iris_missing=0.0)
    lm, iris = _mirror_of_rendered(b)
    swap = [ARKIT_NAMES.index(n.replace("Left", "#").replace("Right", "Left").replace("#", "Right"))
            for n in ARKIT_NAMES]
    for i in range(len(b.weights)):
        a = regressor.estimate(b.landmarks[i], tuple(b.image_size[i]), iris=np.repeat(b.iris[i][:, None], 5, 1))
        m = regressor.estimate(lm[i], tuple(b.image_size[i]), iris=np.repeat(iris[i][:, None], 5, 1))
        np.testing.assert_allclose(a.blendshapes, m.blendshapes[swap], atol=1e-4)
        yaw, pitch = a.head_rotation[:2]
        assert abs(yaw + m.head_rotation[0]) < 0.05 and abs(pitch - m.head_rotation[1]) < 0.05
