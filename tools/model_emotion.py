"""fer's mini-Xception emotion model (Keras 2 HDF5) written directly as an ONNX graph with onnx.helper.

Input `input` (batch, 1, 64, 64) float32 grayscale in [-1, 1]; output `emotion_probs` (batch, 7) softmax
probabilities in bridge.frame.EMOTION_NAMES order. Keras 'same' padding is asymmetric (the extra pixel goes
after), so pads are computed from the static sizes and written explicitly; BatchNorm keeps Keras' eps 1e-3.
"""
from __future__ import annotations

import numpy as np
import onnx
from model_keras_h5 import load_keras_h5, same_pads
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
INPUT, OUTPUT = "input", "emotion_probs"


class _Graph:
    def __init__(self):
        self.nodes, self.inits = [], []

    def const(self, name: str, array: np.ndarray) -> str:
        self.inits.append(numpy_helper.from_array(np.ascontiguousarray(array, np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attrs))
        return output


def _conv_pads(cfg: dict, hw: tuple[int, int], k: int, s: int) -> list[int]:
    if cfg["padding"] == "valid":
        return [0, 0, 0, 0]
    (t, b), (left, r) = same_pads(hw[0], k, s), same_pads(hw[1], k, s)
    return [t, left, b, r]


def _out_hw(hw, pads, k, s):
    return tuple((n + pads[i] + pads[i + 2] - k) // s + 1 for i, n in enumerate(hw))


def emotion_to_onnx(hdf5_bytes: bytes) -> onnx.ModelProto:
    g = _Graph()
    shape: dict[str, tuple[int, int, int]] = {}  # tensor -> (C, H, W), batch excluded
    out_of: dict[str, str] = {}  # Keras layer name -> ONNX tensor name
    for layer in load_keras_h5(hdf5_bytes):
        cfg, w, name = layer.config, layer.weights, layer.name
        x = out_of[layer.inputs[0]] if layer.inputs else None
        if layer.kind == "InputLayer":
            h, wd, c = cfg["batch_input_shape"][1:]
            out_of[name], shape[INPUT] = INPUT, (c, h, wd)
            continue
        c, h, wd = shape[x]
        if layer.kind in ("Conv2D", "SeparableConv2D"):
            k, s = cfg["kernel_size"][0], cfg["strides"][0]
            pads = _conv_pads(cfg, (h, wd), k, s)
            if layer.kind == "SeparableConv2D":  # depthwise (kh,kw,in,1) then pointwise (1,1,in,out)
                dw = g.const(f"{name}/depthwise", w["depthwise_kernel"].transpose(2, 3, 0, 1))
                x = g.node("Conv", [x, dw], f"{name}/dw", group=c, kernel_shape=[k, k], pads=pads,
                           strides=[s, s])
                kernel, k_pw, pads_pw = w["pointwise_kernel"], 1, [0, 0, 0, 0]
            else:
                kernel, k_pw, pads_pw = w["kernel"], k, pads
            inputs = [x, g.const(f"{name}/kernel", kernel.transpose(3, 2, 0, 1))]  # (kh,kw,in,out)->(out,in,kh,kw)
            if cfg["use_bias"]:
                inputs.append(g.const(f"{name}/bias", w["bias"]))
            stride_pw = 1 if layer.kind == "SeparableConv2D" else s
            out = g.node("Conv", inputs, name, kernel_shape=[k_pw, k_pw], pads=pads_pw, strides=[stride_pw] * 2)
            shape[out] = (cfg["filters"], *_out_hw((h, wd), pads, k, s))
            if cfg.get("activation", "linear") != "linear":
                raise ValueError(f"{name}: fused activation {cfg['activation']} not handled")
        elif layer.kind == "BatchNormalization":
            params = [g.const(f"{name}/{p}", w[p]) for p in ("gamma", "beta", "moving_mean", "moving_variance")]
            out = g.node("BatchNormalization", [x, *params], name, epsilon=float(cfg["epsilon"]))
            shape[out] = shape[x]
        elif layer.kind == "Activation":
            act = cfg["activation"]
            if act == "relu":
                out = g.node("Relu", [x], name)
            elif act == "softmax":
                out = g.node("Softmax", [x], OUTPUT, axis=1)
            else:
                raise ValueError(f"{name}: activation {act} not handled")
            shape[out] = shape[x]
        elif layer.kind == "MaxPooling2D":
            k, s = cfg["pool_size"][0], cfg["strides"][0]
            pads = _conv_pads(cfg, (h, wd), k, s)  # MaxPool pads never win the max (they act as -inf)
            out = g.node("MaxPool", [x], name, kernel_shape=[k, k], strides=[s, s], pads=pads)
            shape[out] = (c, *_out_hw((h, wd), pads, k, s))
        elif layer.kind == "Add":
            a, b = (out_of[i] for i in layer.inputs)
            if shape[a] != shape[b]:
                raise ValueError(f"{name}: cannot add {shape[a]} and {shape[b]}")
            out = g.node("Add", [a, b], name)
            shape[out] = shape[a]
        elif layer.kind == "GlobalAveragePooling2D":
            pooled = g.node("GlobalAveragePool", [x], f"{name}/pool")
            out = g.node("Flatten", [pooled], name, axis=1)
            shape[out] = (c, 1, 1)
        else:
            raise ValueError(f"Keras layer {layer.kind} ({name}) is not handled")
        out_of[name] = out

    c_in, h_in, w_in = shape[INPUT]
    graph = helper.make_graph(
        g.nodes, "fer_mini_xception",
        [helper.make_tensor_value_info(INPUT, TensorProto.FLOAT, ["batch", c_in, h_in, w_in])],
        [helper.make_tensor_value_info(OUTPUT, TensorProto.FLOAT, ["batch", shape[OUTPUT][0]])],
        g.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="facebridge tools/model_emotion.py")
    model.ir_version = 8  # readable by older ONNX Runtime / TensorRT parsers too
    onnx.checker.check_model(model, full_check=True)
    return model
