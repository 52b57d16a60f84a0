"""The in-memory PRelu rewrite for ONNX Runtime's CPU provider is exact: bit-identical outputs on real frames."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from bridge.engines import create_session
from bridge.engines.onnx_passes import prelu_as_relu
from bridge.engines.shipped import find_model, frames_as_input


@pytest.mark.parametrize("name, item", [("face_landmark", (3, 192, 192)), ("iris_landmark", (3, 64, 64))])
def test_prelu_rewrite_is_bit_identical_on_real_frames(name, item):
    path = find_model(name).path
    rewritten = prelu_as_relu(path.read_bytes())
    ops = collections.Counter(n.op_type for n in onnx.load_from_string(rewritten).graph.node)
    assert "PRelu" not in ops and ops["Relu"] == 2 * collections.Counter(
        n.op_type for n in onnx.load(str(path)).graph.node)["PRelu"]
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    original = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    session = create_session(path, "onnxruntime")  # loads the rewritten graph
    x = frames_as_input(item, count=2)
    want = original.run(None, {original.get_inputs()[0].name: x})
    got = session.run({session.inputs[0].name: x})
    assert all(np.array_equal(w, got[o.name]) for w, o in zip(want, original.get_outputs()))


def test_a_model_without_prelu_is_left_alone():
    assert prelu_as_relu(find_model("emotion").path.read_bytes()) is None
