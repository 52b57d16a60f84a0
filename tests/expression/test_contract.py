"""The expression model contract: a user's ONNX model of the documented shape replaces the shipped regressor,
and its outputs are streamed unchanged."""
import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from bridge.errors import ModelError
from bridge.expression.features import NUM_FEATURES, landmark_features
from bridge.expression.model import head_matrix, load_model
from bridge.expression.stage import ExpressionEstimator, ExpressionInputError
from bridge.expression.synth import synthetic_batch


def gemm_model(path, inp_name, inp_shape, outputs: dict[str, np.ndarray], flatten: bool = False):
    """A tiny model: (flattened) input -> one Gemm per output, with the given weight matrices."""
    nodes, inits, outs = [], [], []
    src = inp_name
    if flatten:
        nodes.append(helper.make_node("Flatten", [inp_name], ["flat"], axis=1))
        src = "flat"
    for name, w in outputs.items():
        inits += [numpy_helper.from_array(w.astype(np.float32), f"{name}_w"),
                  numpy_helper.from_array(np.linspace(-0.1, 0.1, w.shape[1]).astype(np.float32), f"{name}_b")]
        nodes.append(helper.make_node("Gemm", [src, f"{name}_w", f"{name}_b"], [name]))
        outs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, ["n", w.shape[1]]))
    graph = helper.make_graph(nodes, "user_model", [helper.make_tensor_value_info(inp_name, TensorProto.FLOAT,
                                                                                  inp_shape)], outs, inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    onnx.save(m, str(path))


@pytest.fixture
def face():
    b = synthetic_batch(load_model(), np.random.default_rng(99), 1, occlusion=0.0)
    return b.landmarks[0], tuple(int(v) for v in b.image_size[0]), np.repeat(b.iris[0][:, None], 5, axis=1)


def test_user_flame_model_outputs_are_streamed_unchanged(tmp_path, face):
    rng = np.random.default_rng(0)
    w_shape, w_exp = rng.normal(0, 0.01, (NUM_FEATURES, 10)), rng.normal(0, 0.01, (NUM_FEATURES, 20))
    w_pose = np.zeros((NUM_FEATURES, 6))
    w_pose[940, :] = [0.0, 0.3, 0.0, 0.2, 0.0, 0.0]  # feature 940 = iris present (1): a fixed, known pose
    gemm_model(tmp_path / "flame.onnx", "features", ["n", NUM_FEATURES],
               {"shape": w_shape, "exp": w_exp, "pose": w_pose})
    (tmp_path / "model.json").write_text(json.dumps({
        "format": "facebridge-expression-model/1", "file": "flame.onnx", "model_id": "user-flame-2020",
        "input": {"name": "features", "layout": "landmarks-2d-v1"},
        "outputs": {"shape": {"name": "shape"}, "expression": {"name": "exp"},
                    "head_rotation_axis_angle": {"name": "pose", "slice": [0, 3]},
                    "jaw_rotation": {"name": "pose", "slice": [3, 6]}}}))
    est = ExpressionEstimator("regressor", model_dir=str(tmp_path))
    landmarks, size, iris = face
    r = est.estimate(landmarks, size, iris=iris)
    x = landmark_features(landmarks[:, :2], iris[:, 0], size).astype(np.float64)
    bias = lambda k: np.linspace(-0.1, 0.1, k)  # noqa: E731
    assert r.morph.model_id == "user-flame-2020"
    np.testing.assert_allclose(r.morph.identity, x @ w_shape + bias(10), atol=1e-5)
    np.testing.assert_allclose(r.morph.expression, x @ w_exp + bias(20), atol=1e-5)
    pose = x @ w_pose + bias(6)
    np.testing.assert_allclose(r.morph.head_rotation, pose[:3], atol=1e-5)
    np.testing.assert_allclose(r.morph.jaw_rotation, pose[3:], atol=1e-5)
    # no blendshape output: all zero, and the pipeline is told not to trust them
    assert r.blendshapes.shape == (52,) and not r.blendshapes.any()
    assert all(v == 0.0 for v in r.region_confidence.values())
    assert np.isfinite(r.head_rotation).all() and r.head_translation[2] > 0


def test_user_image_model_gets_a_normalised_face_crop(tmp_path, face):
    # input (n, 3, 8, 8) -> Flatten -> Gemm: "shape" = the mean of each channel (checks crop + normalisation)
    w = np.zeros((3 * 64, 3))
    for c in range(3):
        w[c * 64:(c + 1) * 64, c] = 1 / 64
    w_bs = np.zeros((3 * 64, 52))
    gemm_model(tmp_path / "enc.onnx", "image", ["n", 3, 8, 8], {"shape": w, "arkit": w_bs}, flatten=True)
    (tmp_path / "model.json").write_text(json.dumps({
        "format": "facebridge-expression-model/1", "file": "enc.onnx", "model_id": "user-image",
        "input": {"name": "image", "layout": "face-image-v1", "size": [8, 8], "channels": "rgb",
                  "scale": 1 / 255, "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5]},
        "outputs": {"shape": {"name": "shape"}, "blendshapes": {"name": "arkit"}}}))
    est = ExpressionEstimator("regressor", model_dir=str(tmp_path))
    landmarks, size, iris = face
    with pytest.raises(ExpressionInputError, match="needs the camera image"):
        est.estimate(landmarks, size, iris=iris)
    image = np.zeros((size[1], size[0], 3), np.uint8)
    image[..., 2] = 255  # BGR: pure red
    r = est.estimate(landmarks, size, iris=iris, image=image)
    np.testing.assert_allclose(r.morph.identity, [1.0, -1.0, -1.0] + np.linspace(-0.1, 0.1, 3), atol=1e-5)
    assert r.morph.model_id == "user-image" and r.region_confidence["mouth"] > 0  # blendshapes declared


def test_bad_manifests_are_refused_with_the_fix(tmp_path, face):
    gemm_model(tmp_path / "m.onnx", "features", ["n", NUM_FEATURES], {"shape": np.zeros((NUM_FEATURES, 4))})
    base = {"format": "facebridge-expression-model/1", "file": "m.onnx", "model_id": "x",
            "input": {"name": "features", "layout": "landmarks-2d-v1"}, "outputs": {"shape": {"name": "shape"}}}
    cases = [
        ({"outputs": {"shape": {"name": "nope"}}}, "has no output 'nope'"),
        ({"outputs": {"wobble": {"name": "shape"}}}, "role 'wobble' is unknown"),
        ({"input": {"name": "features", "layout": "pixels"}}, "layout 'pixels' is unknown"),
        ({"sha256": "0" * 64}, "does not match the sha256"),
        ({"file": "missing.onnx"}, "is missing"),
    ]
    for change, message in cases:
        (tmp_path / "model.json").write_text(json.dumps({**base, **change}))
        with pytest.raises(ModelError, match=message):
            ExpressionEstimator("regressor", model_dir=str(tmp_path))
    with pytest.raises(ModelError, match="no expression model manifest"):
        ExpressionEstimator("regressor", model_dir=str(tmp_path / "empty"))


def test_shipped_manifest_describes_the_shipped_model():
    from bridge.expression.stage import SHIPPED_DIR

    m = json.loads((SHIPPED_DIR / "regressor.json").read_text())
    model = onnx.load(str(SHIPPED_DIR / m["file"]))
    assert (SHIPPED_DIR / m["file"]).stat().st_size < 2_000_000
    assert [i.name for i in model.graph.input] == [m["input"]["name"]]
    assert {o.name for o in model.graph.output} == {v["name"] for v in m["outputs"].values()}
    assert m["outputs"]["blendshapes"]["names"][-1] == "tongueOut" and m["model_id"] == "ict-face-light"
    np.testing.assert_allclose(head_matrix(0, 0, 0), np.eye(3))


def test_run_streams_a_user_model_through_the_cli(tmp_path, isolated_home):
    """`facebridge run --expression-model DIR`: the recorded take carries the user model's parameters."""
    import subprocess

    from tests.helpers import facebridge_cmd, subprocess_env

    rng = np.random.default_rng(1)
    gemm_model(tmp_path / "m.onnx", "features", ["n", NUM_FEATURES],
               {"shape": rng.normal(0, 0.01, (NUM_FEATURES, 7)), "exp": rng.normal(0, 0.01, (NUM_FEATURES, 12))})
    (tmp_path / "model.json").write_text(json.dumps({
        "format": "facebridge-expression-model/1", "file": "m.onnx", "model_id": "my-encoder",
        "input": {"name": "features", "layout": "landmarks-2d-v1"},
        "outputs": {"shape": {"name": "shape"}, "expression": {"name": "exp"}}}))
    take = tmp_path / "take"
    proc = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "5", "--fast", "--quiet",
                                         "--llf", "off", "--vmc", "off", "--record", str(take),
                                         "--expression-model", str(tmp_path)),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    frames = [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]
    assert len(frames) == 5
    assert all(f["morph"]["model_id"] == "my-encoder" for f in frames)
    assert all(len(f["morph"]["expression"]) == 12 and len(f["morph"]["identity"]) == 7 for f in frames)


def test_a_model_replaced_after_its_contract_loaded_is_checked_again(tmp_path):
    """The digest is kept per file version (serve loads the contract for every stream), never across a change."""
    from bridge.expression.contract import load_contract
    from bridge.models import sha256_file

    model = tmp_path / "m.onnx"
    gemm_model(model, "features", ["n", NUM_FEATURES], {"shape": np.zeros((NUM_FEATURES, 4))})
    manifest = {"format": "facebridge-expression-model/1", "file": "m.onnx", "model_id": "x",
                "input": {"name": "features", "layout": "landmarks-2d-v1"}, "outputs": {"shape": {"name": "shape"}},
                "sha256": sha256_file(model)}
    (tmp_path / "model.json").write_text(json.dumps(manifest))
    assert load_contract(tmp_path).model_id == "x" and load_contract(tmp_path).model_id == "x"
    other = tmp_path / "other.onnx"  # same size, other weights, put in place by rename (as updates install)
    gemm_model(other, "features", ["n", NUM_FEATURES], {"shape": np.ones((NUM_FEATURES, 4))})
    assert other.stat().st_size == model.stat().st_size
    other.replace(model)
    with pytest.raises(ModelError, match="does not match the sha256"):
        load_contract(tmp_path)
