"""TFLite -> ONNX with tflite2onnx, then a dynamic batch axis, plus the LiteRT reference used to check it.

tflite2onnx writes NCHW float32 inputs (opset 11) with the batch fixed at 1. To batch many crops in one call,
the graph input/output batch becomes the symbolic 'batch', Reshape targets copy the batch (0 instead of 1)
and Resize nodes given fixed output `sizes` get the equivalent `scales` instead.
"""
from __future__ import annotations

import contextlib
import io
import logging
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def tflite_to_onnx(tflite_bytes: bytes) -> onnx.ModelProto:
    import tflite2onnx

    # tflite2onnx logs one warning per fp16 tensor ("float16 not supported/tested yet"); the fp16 weights
    # are dequantized in the graph and the result is checked against LiteRT afterwards, so silence them.
    logging.getLogger("tflite2onnx").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp) / "model.tflite", Path(tmp) / "model.onnx"
        src.write_bytes(tflite_bytes)
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            tflite2onnx.convert(str(src), str(dst))
        return onnx.load(str(dst))


def make_batch_dynamic(model: onnx.ModelProto) -> onnx.ModelProto:
    """Return a copy of a batch-1 model whose batch axis is the symbolic dimension 'batch'."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(inferred.graph.value_info) + list(inferred.graph.input)}
    model = onnx.ModelProto.FromString(model.SerializeToString())
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}

    for node in graph.node:
        if node.op_type == "Reshape":
            init = inits[node.input[1]]
            target = numpy_helper.to_array(init).copy()
            if target[0] == 1:  # shared initializers are rewritten once
                target[0] = 0  # 0 = copy the input's dimension
                init.CopyFrom(numpy_helper.from_array(target.astype(np.int64), init.name))
            elif target[0] != 0:
                raise ValueError(f"Reshape {node.name}: cannot make batch dynamic for target {target}")
        elif node.op_type == "Resize" and len(node.input) == 4 and node.input[3] in inits:
            sizes = numpy_helper.to_array(inits[node.input[3]])
            in_shape = shapes[node.input[0]]
            scales = np.array([1.0, 1.0] + [o / i for o, i in zip(sizes[2:], in_shape[2:])], np.float32)
            name = f"{node.name or node.output[0]}_scales"
            graph.initializer.append(numpy_helper.from_array(scales, name))
            del node.input[3]
            node.input[2] = name

    for value in list(graph.input) + list(graph.output):
        dim = value.type.tensor_type.shape.dim[0]
        dim.Clear()
        dim.dim_param = "batch"
    del graph.value_info[:]  # stale batch-1 shapes; ORT infers them again
    # tflite2onnx emits initializers in set order (varies with PYTHONHASHSEED); sort for reproducible bytes
    inits_sorted = sorted(graph.initializer, key=lambda t: t.name)
    graph.ClearField("initializer")
    graph.initializer.extend(inits_sorted)
    onnx.checker.check_model(model, full_check=True)
    return model


def run_litert(tflite_bytes: bytes, x: np.ndarray) -> dict[str, np.ndarray]:
    """Run the source .tflite in LiteRT on an NCHW batch (like the ONNX model's input), one item per call.
    Returns {output name: array (N, ...)} with each item's leading batch-1 axis dropped."""
    from ai_edge_litert.interpreter import Interpreter

    interp = Interpreter(model_content=tflite_bytes, num_threads=1)
    interp.allocate_tensors()
    (inp,) = interp.get_input_details()
    outs = interp.get_output_details()
    results: dict[str, list[np.ndarray]] = {o["name"]: [] for o in outs}
    for item in x:
        interp.set_tensor(inp["index"], np.ascontiguousarray(item.transpose(1, 2, 0)[None], np.float32))
        interp.invoke()
        for o in outs:
            results[o["name"]].append(interp.get_tensor(o["index"])[0].copy())
    return {name: np.stack(r) for name, r in results.items()}
