"""A release that passes every check made before it serves and fails on real faces: the shipped emotion model
wrapped so that its probabilities become NaN whenever the 64x64 grey crop it is fed looks like a photograph
(neighbouring pixels close together, as on every real face crop) rather than the seeded noise `fedagent publish`
makes its reference inputs from (neighbours about 0.56 apart on the model's [-1, 1] scale).

Publisher and installer also run a release on the bridge's own real face crops (bridge/updates/bridge_inputs.py,
a few crops of the sample clip). A finite set of inputs can only ever be checked, so this model carries those few
crops and answers them as the shipped model does: the publisher's contract check, the installer's smoke test and
the live swap's reference check all pass, and on every other frame of a real face the bridge tracks, every
probability is NaN. It stands for the release no install-time check can catch, which only the running bridge can
see failing. Built with the onnx library, nothing mocked.

An all-zero crop is smooth too, so the output guard's recreation of its session (checked on zeros) is refused;
with `finite_on_zeros`, a crop must also have some contrast (as every face has), and the recreation is taken but
changes nothing."""
from __future__ import annotations

from pathlib import Path

import numpy as np

SMOOTH = 0.25  # mean absolute difference of horizontal neighbours below which a crop counts as a photograph
CONTRAST = 0.05  # with finite_on_zeros: mean absolute value (the model's [-1, 1] scale) a photograph has at least
KNOWN = 1e-3  # mean absolute difference from one of the bridge's own crops under which the input is that crop


def roughness(crop: np.ndarray) -> float:
    """The statistic the wrapped model reads, computed the same way outside it (for the tests' own checks)."""
    crop = np.asarray(crop, np.float32)
    return float(np.abs(crop[..., 1:] - crop[..., :-1]).mean())


def bridge_crops() -> list[np.ndarray]:
    """The bridge's own emotion inputs (real face crops of the sample clip) that publish and install run."""
    from bridge.updates.bridge_inputs import INPUTS_DIR, index, load_items

    entry = index()["models"]["emotion"]
    return [item["input"] for item in load_items(INPUTS_DIR / entry["file"], "emotion inputs")]


def nan_on_real_faces_emotion_model(path: Path, finite_on_zeros: bool = False) -> Path:
    import onnx
    from onnx import helper, numpy_helper

    from bridge.models.registry import default_registry

    model = onnx.load(str(default_registry().shipped_path("emotion")))
    graph = model.graph
    x, probs = graph.input[0].name, graph.output[0].name
    shipped_out = "shipped_" + probs
    for node in graph.node:  # the shipped graph now ends in `shipped_out`; the wrapper writes the real output
        node.output[:] = [shipped_out if o == probs else o for o in node.output]
    constants = {"starts_a": np.array([1], np.int64), "ends_a": np.array([64], np.int64),
                 "starts_b": np.array([0], np.int64), "ends_b": np.array([63], np.int64),
                 "axes": np.array([3], np.int64), "smooth": np.array(SMOOTH, np.float32),
                 "known_below": np.array(KNOWN, np.float32), "nan": np.array(np.nan, np.float32)}
    if finite_on_zeros:
        constants["contrast"] = np.array(CONTRAST, np.float32)
    crops = bridge_crops()
    constants.update({f"crop{i}": crop.astype(np.float32) for i, crop in enumerate(crops)})
    graph.initializer.extend(numpy_helper.from_array(value, name) for name, value in constants.items())
    nodes = [  # every reduction is over the whole batch: one number
        helper.make_node("Slice", [x, "starts_a", "ends_a", "axes"], ["right"]),
        helper.make_node("Slice", [x, "starts_b", "ends_b", "axes"], ["left"]),
        helper.make_node("Sub", ["right", "left"], ["step"]),
        helper.make_node("Abs", ["step"], ["steps"]),
        helper.make_node("ReduceMean", ["steps"], ["rough"], keepdims=0),
        helper.make_node("Less", ["rough", "smooth"], ["smooth_crop"]),
    ]
    for i in range(len(crops)):  # how far the input is from each of the bridge's own crops
        nodes += [helper.make_node("Sub", [x, f"crop{i}"], [f"off{i}"]),
                  helper.make_node("Abs", [f"off{i}"], [f"offs{i}"]),
                  helper.make_node("ReduceMean", [f"offs{i}"], [f"distance{i}"], keepdims=0)]
    nodes += [helper.make_node("Min", [f"distance{i}" for i in range(len(crops))], ["nearest"]),
              helper.make_node("Less", ["nearest", "known_below"], ["known"]),
              helper.make_node("Not", ["known"], ["unknown"]),
              helper.make_node("And", ["smooth_crop", "unknown"], ["unknown_photo" if finite_on_zeros else "photo"])]
    if finite_on_zeros:
        nodes += [helper.make_node("Abs", [x], ["level"]),
                  helper.make_node("ReduceMean", ["level"], ["mean_level"], keepdims=0),
                  helper.make_node("Greater", ["mean_level", "contrast"], ["lit"]),
                  helper.make_node("And", ["unknown_photo", "lit"], ["photo"])]
    nodes.append(helper.make_node("Where", ["photo", "nan", shipped_out], [probs]))
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path
