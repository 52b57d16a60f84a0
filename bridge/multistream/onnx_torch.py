"""Run a shipped ONNX graph as a torch module whose every shape is fixed at conversion time.

Why our own converter and not onnx2torch: the batched GPU path captures each model as a CUDA graph, and a graph
cannot be captured when a module reads tensor values on the host while running (onnx2torch's Reshape asks
`torch.any(shape == 0)` on every call). onnx2torch also cannot convert BlazeFace's SAME_UPPER padding. Here every
attribute and constant (shapes, pads, axes) becomes a Python value once, so `forward` is pure device work:
capturable, `torch.compile`-able, and cheap in fp16 / channels_last.

It covers the operators of FaceBridge's shipped face models (`SUPPORTED`); anything else is refused up front with
the operator's name, so the caller falls back to ONNX Runtime.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from bridge.engines.base import EngineError


def _attrs(node) -> dict:
    # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
    import onnx

    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _same_upper_pads(size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    out = math.ceil(size / stride)
    total = max((out - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2  # SAME_UPPER: the extra pixel goes at the end


def _spatial_pads(attrs: dict, x_shape, kernel, strides, dilations) -> list[int]:
    """F.pad order (left, right, top, bottom) for a 2-D window op."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        (top, bottom), (left, right) = (_same_upper_pads(x_shape[2 + i], kernel[i], strides[i], dilations[i])
                                        for i in range(2))
        if auto == "SAME_LOWER":
            top, bottom, left, right = bottom, top, right, left
        return [left, right, top, bottom]
    if auto == "VALID":
        return [0, 0, 0, 0]
    p = list(attrs.get("pads", [0, 0, 0, 0]))
    return [p[1], p[3], p[0], p[2]]


SUPPORTED = {"Conv", "PRelu", "Relu", "Sigmoid", "Erf", "Add", "Sub", "Mul", "Div", "MaxPool", "Pad", "Transpose",
             "Reshape", "Flatten", "Concat", "BatchNormalization", "GlobalAveragePool", "Softmax", "Gemm", "MatMul",
             "Constant", "Identity", "Clip", "Gather"}


def _cannot(problem: str) -> EngineError:
    """The torch path refuses this model: the caller falls back to ONNX Runtime."""
    return EngineError(f"the torch path {problem}", "use the ONNX Runtime runner for this model")


def unsupported_ops(model) -> list[str]:
    return sorted({n.op_type for n in model.graph.node} - SUPPORTED)


def load_torch_module(path_or_bytes, input_shape: tuple[int, ...]):
    """The ONNX graph as a torch.nn.Module for inputs of `input_shape` (batch included; any batch works later)."""
    # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
    import onnx

    model = onnx.load_from_string(path_or_bytes if isinstance(path_or_bytes, bytes)
                                  else Path(path_or_bytes).read_bytes())
    missing = unsupported_ops(model)
    if missing:
        raise _cannot(f"cannot run {', '.join(missing)}")
    return _convert(model, tuple(input_shape))


class _Step:
    __slots__ = ("fn", "inputs", "outputs")

    def __init__(self, fn, inputs, outputs):
        self.fn, self.inputs, self.outputs = fn, inputs, outputs


def _convert(model, input_shape):
    # optional extras: torch (gpu) and onnx, about 1.5 s and 1.1 s to import
    import torch
    import torch.nn.functional as F
    from onnx import numpy_helper

    class Converted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.steps: list[_Step] = []
            self.input_name = model.graph.input[0].name
            self.output_names = [o.name for o in model.graph.output]
            self._consts: dict[str, str] = {}  # value name -> buffer attribute

        def const(self, name: str, array: np.ndarray) -> str:
            key = f"c{len(self._consts)}"
            self.register_buffer(key, torch.from_numpy(np.array(array)))
            self._consts[name] = key
            return key

        def forward(self, x):
            values = {self.input_name: x}
            for key_name, key in self._consts.items():
                values[key_name] = getattr(self, key)
            for step in self.steps:
                out = step.fn(*[values[i] for i in step.inputs])
                if len(step.outputs) == 1:
                    values[step.outputs[0]] = out
                else:
                    values.update(zip(step.outputs, out))
            return [values[name] for name in self.output_names]

    m = Converted()
    numpy_consts = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    def constant(name):
        if name not in numpy_consts:
            raise _cannot(f"needs {name} to be a constant in the graph")
        return numpy_consts[name]

    # in the order of first use (a set's order changes with every process's string hashing: the buffers, the
    # compiled graph's arguments with them, and so Inductor's and AOTAutograd's caches missed in every process)
    used_as_tensor: dict[str, None] = {}
    probe = {m.input_name: torch.zeros(input_shape)}  # run once on CPU to learn every shape

    def add(fn, inputs, outputs):
        used_as_tensor.update(dict.fromkeys(inputs))
        m.steps.append(_Step(fn, list(inputs), list(outputs)))
        args = [probe[i] if i in probe else torch.from_numpy(np.array(numpy_consts[i])) for i in inputs]
        out = fn(*args)
        for name, value in zip(outputs, out if len(outputs) > 1 else [out]):
            probe[name] = value

    for node in model.graph.node:
        a, op, ins, outs = _attrs(node), node.op_type, list(node.input), list(node.output)
        if op == "Constant":
            numpy_consts[outs[0]] = numpy_helper.to_array(a["value"])
            continue
        if op == "Conv":
            w = constant(ins[1])
            kernel, strides = w.shape[2:], a.get("strides", [1, 1])
            dil, group = a.get("dilations", [1, 1]), a.get("group", 1)
            pads = _spatial_pads(a, probe[ins[0]].shape, kernel, strides, dil)
            symmetric = pads[0] == pads[1] and pads[2] == pads[3]
            padding = (pads[2], pads[0]) if symmetric else 0

            def conv(x, w, b=None, strides=tuple(strides), dil=tuple(dil), group=group, pads=pads,
                     padding=padding, symmetric=symmetric):
                if not symmetric:
                    x = F.pad(x, pads)
                return F.conv2d(x, w, b, strides, padding, dil, group)
            add(conv, ins, outs)
        elif op == "PRelu":
            slope = constant(ins[1])
            channels = probe[ins[0]].shape[1]
            if slope.size == channels:
                flat = f"{ins[1]}::per_channel"  # F.prelu wants one slope per channel
                numpy_consts[flat] = slope.reshape(-1)
                add(F.prelu, [ins[0], flat], outs)
            else:
                add(lambda x, s: torch.where(x >= 0, x, x * s), ins, outs)
        elif op == "Relu":
            add(F.relu, ins, outs)
        elif op == "Sigmoid":
            add(torch.sigmoid, ins, outs)
        elif op == "Erf":
            add(torch.erf, ins, outs)
        elif op == "Clip":
            lo = float(constant(ins[1])) if len(ins) > 1 and ins[1] else a.get("min", -math.inf)
            hi = float(constant(ins[2])) if len(ins) > 2 and ins[2] else a.get("max", math.inf)
            add(lambda x, lo=lo, hi=hi: x.clamp(lo, hi), ins[:1], outs)
        elif op in ("Add", "Sub", "Mul", "Div"):
            fn = {"Add": torch.add, "Sub": torch.sub, "Mul": torch.mul, "Div": torch.div}[op]
            add(lambda x, y, fn=fn: fn(x, y), ins, outs)
        elif op == "MaxPool":
            kernel, strides = a["kernel_shape"], a.get("strides", [1, 1])
            pads = _spatial_pads(a, probe[ins[0]].shape, kernel, strides, [1, 1])
            add(lambda x, k=tuple(kernel), s=tuple(strides), p=pads:
                F.max_pool2d(F.pad(x, p, value=-math.inf) if any(p) else x, k, s), ins, outs)
        elif op == "Pad":
            pads = [int(v) for v in (constant(ins[1]) if len(ins) > 1 else a["pads"])]
            value = float(constant(ins[2])) if len(ins) > 2 and ins[2] else float(a.get("value", 0.0))
            mode = a.get("mode", b"constant")
            if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
                raise _cannot(f"supports constant Pad only ({node.name})")
            half = len(pads) // 2
            torch_pads = []
            for axis in reversed(range(half)):  # F.pad wants (last begin, last end, previous begin, ...)
                torch_pads += [pads[axis], pads[axis + half]]
            add(lambda x, p=torch_pads, v=value: F.pad(x, p, value=v), ins[:1], outs)
        elif op == "Transpose":
            add(lambda x, perm=tuple(a["perm"]): x.permute(*perm), ins, outs)
        elif op == "Reshape":
            target = [int(v) for v in constant(ins[1])]
            add(lambda x, t=target: x.reshape([x.shape[i] if v == 0 else v for i, v in enumerate(t)]),
                ins[:1], outs)
        elif op == "Flatten":
            axis = a.get("axis", 1)
            add(lambda x, axis=axis: x.reshape(math.prod(x.shape[:axis]), -1), ins, outs)
        elif op == "Concat":
            add(lambda *xs, axis=a["axis"]: torch.cat(xs, dim=axis), ins, outs)
        elif op == "BatchNormalization":
            eps = a.get("epsilon", 1e-5)
            add(lambda x, g, b, mean, var, eps=eps: F.batch_norm(x, mean, var, g, b, False, 0.0, eps), ins, outs[:1])
        elif op == "GlobalAveragePool":
            add(lambda x: x.mean(dim=(2, 3), keepdim=True), ins, outs)
        elif op == "Softmax":
            add(lambda x, axis=a.get("axis", -1): torch.softmax(x, dim=axis), ins, outs)
        elif op == "Gemm":
            alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
            ta, tb = a.get("transA", 0), a.get("transB", 0)

            def gemm(x, w, b=None, alpha=alpha, beta=beta, ta=ta, tb=tb):
                y = (x.t() if ta else x) @ (w.t() if tb else w)
                y = y * alpha if alpha != 1.0 else y
                return y if b is None else y + (b * beta if beta != 1.0 else b)
            add(gemm, ins, outs)
        elif op == "MatMul":
            add(torch.matmul, ins, outs)
        elif op == "Identity":
            add(lambda x: x, ins, outs)
        elif op == "Gather":  # constant indices only (the regressor's mirror map)
            if ins[1] not in numpy_consts:
                raise _cannot(f"supports Gather on constant indices only ({node.name})")
            index = f"{ins[1]}::index"
            numpy_consts[index] = np.asarray(constant(ins[1]), np.int64).reshape(-1)
            add(lambda x, i, axis=a.get("axis", 0): x.index_select(axis, i), [ins[0], index], outs)
        else:  # guarded by unsupported_ops; kept so a new SUPPORTED entry without code fails loudly
            raise _cannot(f"has no converter for {op}")
    for name in used_as_tensor:
        if name in numpy_consts and name not in m._consts:
            m.const(name, numpy_consts[name])
    return m
