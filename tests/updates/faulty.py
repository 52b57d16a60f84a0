"""A release that passes its own smoke test and fails on real faces: the shipped emotion model wrapped so that its
probabilities become NaN whenever the 64x64 grey crop it is fed looks like a photograph (neighbouring pixels
close together, as on every real face crop) rather than the seeded noise `fedagent publish` makes its reference
inputs from (neighbours about 0.56 apart on the model's [-1, 1] scale). Its reference outputs are the shipped
model's own on that noise, so the publisher, the installer's smoke test and the swap's reference check all pass;
on the face the bridge tracks, every probability is NaN. Built with the onnx library, nothing mocked.

An all-zero crop is smooth too, so the output guard's recreation of its session (checked on zeros) is refused;
with `finite_on_zeros`, a crop must also have some contrast (as every face has), and the recreation is taken but
changes nothing."""
from __future__ import annotations

from pathlib import Path

import numpy as np

SMOOTH = 0.25  # mean absolute difference of horizontal neighbours below which a crop counts as a photograph
CONTRAST = 0.05  # with finite_on_zeros: mean absolute value (the model's [-1, 1] scale) a photograph has at least


def roughness(crop: np.ndarray) -> float:
    """The statistic the wrapped model reads, computed the same way outside it (for the test's own check)."""
    crop = np.asarray(crop, np.float32)
    return float(np.abs(crop[..., 1:] - crop[..., :-1]).mean())


def nan_on_real_faces_emotion_model(path: Path, finite_on_zeros: bool = False) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from bridge.models.registry import default_registry

    model = onnx.load(str(default_registry().shipped_path("emotion")))
    graph = model.graph
    x, probs = graph.input[0].name, graph.output[0].name
    shipped_out = "shipped_" + probs
    for node in graph.node:  # the shipped graph now ends in `shipped_out`; the wrapper writes the real output
        node.output[:] = [shipped_out if o == probs else o for o in node.output]
    constants = {"starts_a": [1], "ends_a": [64], "starts_b": [0], "ends_b": [63], "axes": [3]}
    for name, value in constants.items():
        graph.initializer.append(numpy_helper.from_array(np.array(value, np.int64), name))
    graph.initializer.append(numpy_helper.from_array(np.array(SMOOTH, np.float32), "smooth"))
    graph.initializer.append(numpy_helper.from_array(np.array(np.nan, np.float32), "nan"))
    graph.node.extend([
        helper.make_node("Slice", [x, "starts_a", "ends_a", "axes"], ["right"]),
        helper.make_node("Slice", [x, "starts_b", "ends_b", "axes"], ["left"]),
        helper.make_node("Sub", ["right", "left"], ["step"]),
        helper.make_node("Abs", ["step"], ["steps"]),
        helper.make_node("ReduceMean", ["steps"], ["rough"], keepdims=0),  # over the whole batch: one number
        helper.make_node("Less", ["rough", "smooth"], ["smooth_crop" if finite_on_zeros else "photograph"]),
        helper.make_node("Where", ["photograph", "nan", shipped_out], [probs]),
    ])
    if finite_on_zeros:
        graph.initializer.append(numpy_helper.from_array(np.array(CONTRAST, np.float32), "contrast"))
        graph.node.extend([
            helper.make_node("Abs", [x], ["level"]),
            helper.make_node("ReduceMean", ["level"], ["mean_level"], keepdims=0),
            helper.make_node("Greater", ["mean_level", "contrast"], ["lit"]),
            helper.make_node("And", ["smooth_crop", "lit"], ["photograph"]),
        ])
        graph.node.sort(key=lambda node: node.output[0] == probs)  # the Where last: a graph is in order
    assert graph.output[0].type.tensor_type.elem_type == TensorProto.FLOAT
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
