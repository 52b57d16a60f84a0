"""Plain-numpy forward pass of a Keras 2 HDF5 CNN, NHWC like Keras itself, straight from the stored weights.

It is the independent reference the shipped emotion ONNX model is checked against (build and tests): it shares
no graph-building code with model_emotion.py, only the h5py reader. Float64 throughout, so it is the more exact.
"""
from __future__ import annotations

import numpy as np
from model_keras_h5 import load_keras_h5, same_pads
from numpy.lib.stride_tricks import sliding_window_view


def _pad(x: np.ndarray, k: int, s: int, padding: str, value: float) -> np.ndarray:
    if padding == "valid":
        return x
    ph, pw = same_pads(x.shape[1], k, s), same_pads(x.shape[2], k, s)
    return np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=value)


def _windows(x: np.ndarray, k: int, s: int) -> np.ndarray:
    """(N, H, W, C) -> (N, H', W', C, k, k) strided windows."""
    return sliding_window_view(x, (k, k), axis=(1, 2))[:, ::s, ::s]


def conv2d(x, kernel, stride, padding, bias=None):  # kernel (kh, kw, in, out)
    k = kernel.shape[0]
    win = _windows(_pad(x, k, stride, padding, 0.0), k, stride)
    y = np.einsum("nhwcij,ijco->nhwo", win, kernel)
    return y if bias is None else y + bias


def depthwise_conv2d(x, kernel, stride, padding):  # kernel (kh, kw, in, 1)
    k = kernel.shape[0]
    win = _windows(_pad(x, k, stride, padding, 0.0), k, stride)
    return np.einsum("nhwcij,ijc->nhwc", win, kernel[..., 0])


def max_pool(x, k, stride, padding):
    return _windows(_pad(x, k, stride, padding, -np.inf), k, stride).max(axis=(-2, -1))


def keras_forward(hdf5_bytes: bytes, x_nhwc: np.ndarray) -> np.ndarray:
    """Run the model on (N, H, W, C) input; returns the last layer's output."""
    acts: dict[str, np.ndarray] = {}
    last = None
    for layer in load_keras_h5(hdf5_bytes):
        cfg = layer.config
        w = {k: v.astype(np.float64) for k, v in layer.weights.items()}
        ins = [acts[i] for i in layer.inputs]
        if layer.kind == "InputLayer":
            y = x_nhwc.astype(np.float64)
        elif layer.kind == "Conv2D":
            y = conv2d(ins[0], w["kernel"], cfg["strides"][0], cfg["padding"], w.get("bias"))
        elif layer.kind == "SeparableConv2D":
            y = depthwise_conv2d(ins[0], w["depthwise_kernel"], cfg["strides"][0], cfg["padding"])
            y = conv2d(y, w["pointwise_kernel"], 1, "valid", w.get("bias"))
        elif layer.kind == "BatchNormalization":
            y = (ins[0] - w["moving_mean"]) / np.sqrt(w["moving_variance"] + cfg["epsilon"]) * w["gamma"] + w["beta"]
        elif layer.kind == "Activation" and cfg["activation"] == "relu":
            y = np.maximum(ins[0], 0.0)
        elif layer.kind == "Activation" and cfg["activation"] == "softmax":
            e = np.exp(ins[0] - ins[0].max(axis=-1, keepdims=True))
            y = e / e.sum(axis=-1, keepdims=True)
        elif layer.kind == "MaxPooling2D":
            y = max_pool(ins[0], cfg["pool_size"][0], cfg["strides"][0], cfg["padding"])
        elif layer.kind == "Add":
            y = ins[0] + ins[1]
        elif layer.kind == "GlobalAveragePooling2D":
            y = ins[0].mean(axis=(1, 2))
        else:
            raise ValueError(f"reference has no implementation of {layer.kind} ({cfg.get('activation', '')})")
        acts[layer.name] = last = y
    return last
