"""LiteRT runs the shipped source .tflite behind the ONNX interface, and agrees with ONNX Runtime on real frames."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.engines import EngineUnavailable, check_available, create_session
from bridge.engines.shipped import find_model, frames_as_input

pytestmark = pytest.mark.skipif(not check_available("litert").ok, reason="ai-edge-litert not installed")


@pytest.mark.parametrize("name, item, batch", [("face_landmark", (3, 192, 192), 1), ("iris_landmark", (3, 64, 64), 2),
                                               ("face_detection_short_range", (3, 128, 128), 1)])
def test_litert_agrees_with_onnxruntime_and_keeps_its_interface(name, item, batch):
    from bridge.engines.shipped import value_range_of

    model = find_model(name)
    ort = create_session(model.path, "onnxruntime", strict=True)
    lite = create_session(model.path, "litert", strict=True)
    assert lite.backend_name == "litert" and lite.precision == "f32"
    assert [(s.name, s.shape) for s in lite.inputs] == [(s.name, s.shape) for s in ort.inputs]
    assert [s.name for s in lite.outputs] == [s.name for s in ort.outputs]
    x = frames_as_input(item, value_range_of(model.entry), count=batch)
    ref, out = ort.run({ort.inputs[0].name: x}), lite.run({lite.inputs[0].name: x})
    for key, want in ref.items():
        assert out[key].shape == want.shape
        assert np.abs(out[key] - want).max() < 1e-3 * max(1.0, np.abs(want).max())  # the backends' parity bound


def test_a_batch_runs_in_one_invoke_with_each_items_own_result():
    session = create_session(find_model("iris_landmark").path, "litert", strict=True)
    assert session.runs_batched(2) and session.runs_batched(3)  # its [1, K] reshapes hold the items in order
    x = frames_as_input((3, 64, 64), count=3)
    both = session.run({"input_1": x})
    for i in range(3):
        one = session.run({"input_1": x[i:i + 1]})
        assert all(np.allclose(one[k][0], both[k][i], rtol=1e-5, atol=1e-4) for k in both)


def test_a_graph_that_does_not_batch_runs_item_by_item():
    session = create_session(find_model("face_detection_short_range").path, "litert", strict=True)
    assert not session.runs_batched(2)
    x = frames_as_input((3, 128, 128), count=2)
    both = session.run({session.inputs[0].name: x})
    one = session.run({session.inputs[0].name: x[1:]})
    assert all(np.array_equal(one[k][0], both[k][1]) for k in both)


def test_a_model_without_a_tflite_falls_back_with_the_reason(capsys, fresh_engine_lines):
    path = find_model("emotion").path
    with pytest.raises(EngineUnavailable, match="no .tflite ships for emotion.onnx"):
        create_session(path, "litert", strict=True)
    session = create_session(path, "litert")
    assert session.backend_name != "litert"
    assert "--backend litert is not usable here" in capsys.readouterr().err


def test_every_tflite_in_the_manifest_is_its_recorded_source():
    from bridge.models import MODELS_DIR, manifest, sha256_file

    shipped = {n: e for n, e in manifest()["models"].items() if "litert" in e}
    assert {"face_landmark", "iris_landmark", "face_detection_short_range"} <= set(shipped)
    for entry in shipped.values():
        on_disk = sha256_file(MODELS_DIR / entry["litert"]["file"])
        assert entry["litert"]["sha256"] == entry["source"]["sha256"] == on_disk
