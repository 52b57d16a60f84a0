"""The regressor's face and mirror passes run as one batch of two on ONNX Runtime's CPU provider, bit-identically;
models without twin chains load unchanged, and ops that mix rows stay one per pass."""
from __future__ import annotations

import collections

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bridge.engines import create_session
from bridge.engines.onnx_twins import twin_passes_as_batch
from bridge.engines.shipped import find_model
from bridge.expression.stage import SHIPPED_DIR

REGRESSOR = SHIPPED_DIR / "regressor.onnx"


def _ops(data: bytes) -> collections.Counter:
    return collections.Counter(n.op_type for n in onnx.load_from_string(data).graph.node)


def test_the_regressors_two_passes_become_one_batch_with_the_same_outputs():
    original = REGRESSOR.read_bytes()
    rewritten = twin_passes_as_batch(original)
    assert rewritten is not None
    before, after = _ops(original), _ops(rewritten)
    assert after["Gemm"] * 2 == before["Gemm"] and after["Concat"] == 1 and after["Split"] == 2
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    plain = ort.InferenceSession(str(REGRESSOR), options, providers=["CPUExecutionProvider"])
    session = create_session(REGRESSOR, "onnxruntime")  # loads the batched graph
    rng = np.random.default_rng(3)
    for rows in (1, 2, 5):
        x = rng.normal(0.0, 0.3, (rows, 944)).astype(np.float32)
        want = plain.run(None, {"features": x})
        got = session.run({"features": x})
        assert all(np.array_equal(w, got[o.name]) for w, o in zip(want, plain.get_outputs()))


def test_models_without_twin_chains_are_left_alone():
    for name in ("emotion", "face_landmark"):
        assert twin_passes_as_batch(find_model(name).path.read_bytes()) is None


def _two_passes(mixing: bool) -> bytes:
    """x and -x through the same Gemm; with `mixing`, each pass then sums over its rows (not row-wise)."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 7, "w")
    nodes = [helper.make_node("Neg", ["x"], ["nx"])]
    for tag, src in (("a", "x"), ("b", "nx")):
        nodes.append(helper.make_node("Gemm", [src, "w"], [f"g{tag}"]))
        last = f"g{tag}"
        if mixing:
            nodes.append(helper.make_node("ReduceSum", [last], [f"s{tag}"], keepdims=1))
            last = f"s{tag}"
        nodes.append(helper.make_node("Sigmoid", [last], [f"y{tag}"]))
    nodes.append(helper.make_node("Add", ["ya", "yb"], ["y"]))
    graph = helper.make_graph(nodes, "twins", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_only_the_row_wise_part_of_twin_chains_is_batched():
    assert _ops(twin_passes_as_batch(_two_passes(mixing=False)))["Gemm"] == 1
    original = _two_passes(mixing=True)
    rewritten = twin_passes_as_batch(original)
    ops = _ops(rewritten)
    assert ops["Gemm"] == 1 and ops["ReduceSum"] == 2  # the sums over rows stay one per pass, after the split
    x = np.random.default_rng(0).normal(size=(3, 4)).astype(np.float32)
    want, got = (ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(None, {"x": x})
                 for m in (original, rewritten))
    assert np.array_equal(want[0], got[0])
