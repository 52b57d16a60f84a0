"""Read a Keras 2 HDF5 model (architecture JSON + weights) with h5py alone; no TensorFlow.

Shared by the ONNX builder (model_emotion.py) and the independent numpy reference (model_emotion_reference.py).
"""
from __future__ import annotations

import io
import json
from dataclasses import dataclass, field

import h5py
import numpy as np


@dataclass
class KerasLayer:
    kind: str  # Keras class name: Conv2D, SeparableConv2D, BatchNormalization, ...
    name: str
    inputs: list[str]
    config: dict
    weights: dict[str, np.ndarray] = field(default_factory=dict)  # short name ("kernel") -> array


def load_keras_h5(data: bytes) -> list[KerasLayer]:
    """Layers of a functional Keras model in file (= topological) order."""
    with h5py.File(io.BytesIO(data), "r") as f:
        config = json.loads(f.attrs["model_config"])
        if config["class_name"] != "Model":
            raise ValueError(f"expected a functional Keras Model, got {config['class_name']}")
        groups = f["model_weights"]
        layers = []
        for spec in config["config"]["layers"]:
            name = spec["name"]
            inbound = [node[0] for node in spec["inbound_nodes"][0]] if spec["inbound_nodes"] else []
            weights = {}
            if name in groups:
                g = groups[name]
                for wname in g.attrs.get("weight_names", []):
                    wname = wname.decode() if isinstance(wname, bytes) else wname
                    short = wname.split("/")[-1].split(":")[0]  # "conv2d_1_1/kernel:0" -> "kernel"
                    weights[short] = np.array(g[wname], dtype=np.float32)
            layers.append(KerasLayer(spec["class_name"], name, inbound, spec["config"], weights))
    return layers


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'same' padding (before, after) for one axis: the extra pixel goes after."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2
