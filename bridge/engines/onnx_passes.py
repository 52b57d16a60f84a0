"""Exact graph rewrites applied in memory before ONNX Runtime's CPU provider loads a model (files stay as shipped).

PRelu with a constant slope becomes Relu(x) + (-slope) * Relu(-x), which is bit-identical (one rounding, in the
multiply, either way) and which ONNX Runtime runs on its blocked NCHWc layout: its CPU provider has no blocked
PRelu, so each of the MediaPipe models' PRelus (23 in face_landmark, 53 in iris_landmark) cost a reorder out of
and back into that layout plus a slow kernel; measured on one core, 54% of the landmark model's time went to PRelu
and 12% to the reorders, and the rewrite makes both models 1.7-2.5x faster (docs/PERFORMANCE.md). Needs the
`onnx` package; without it the model loads unchanged.
"""
from __future__ import annotations


def prelu_as_relu(model_bytes: bytes) -> bytes | None:
    """The model with every constant-slope PRelu rewritten, or None when there is none (or onnx is missing)."""
    try:
        # optional extra: onnx (fed, tools), about 1.1 s to import
        import onnx
        from onnx import helper, numpy_helper
    except ImportError:
        return None
    model = onnx.load_from_string(model_bytes)
    graph = model.graph
    slopes = {init.name: init for init in graph.initializer}
    if not any(n.op_type == "PRelu" and n.input[1] in slopes for n in graph.node):
        return None
    nodes, negated = [], {}
    for node in graph.node:
        if node.op_type != "PRelu" or node.input[1] not in slopes:
            nodes.append(node)
            continue
        x, slope = node.input
        y = node.output[0]
        if slope not in negated:
            negated[slope] = f"{slope}__negated"
            graph.initializer.append(numpy_helper.from_array(-numpy_helper.to_array(slopes[slope]), negated[slope]))
        nodes += [helper.make_node("Relu", [x], [f"{y}__pos"]), helper.make_node("Neg", [x], [f"{y}__neg_x"]),
                  helper.make_node("Relu", [f"{y}__neg_x"], [f"{y}__neg"]),
                  helper.make_node("Mul", [f"{y}__neg", negated[slope]], [f"{y}__scaled"]),
                  helper.make_node("Add", [f"{y}__pos", f"{y}__scaled"], [y])]
    del graph.node[:]
    graph.node.extend(nodes)
    used = {i for n in graph.node for i in n.input}
    kept = [init for init in graph.initializer if init.name in used]
    del graph.initializer[:]
    graph.initializer.extend(kept)
    return model.SerializeToString()
