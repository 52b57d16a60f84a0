"""The lip-sync model's low-rank adapter as files and bytes: read and write its .npz, a digest of its weights, and
the shipped ONNX graph with new adapter weights baked in (what a TensorRT refit expects). Re-exported by lipsync.py.
"""
from __future__ import annotations

import hashlib
import io
from pathlib import Path

import numpy as np

from bridge.audio.vad import shipped_model
from bridge.errors import ModelError
from bridge.fsutil import atomic_write_bytes


def load_adapter(path: str | Path) -> dict[str, np.ndarray]:
    """Adapter weights from an .npz holding the manifest's adapter initializer names."""
    try:
        with np.load(path) as z:
            return {k: z[k].astype(np.float32) for k in z.files}
    except (OSError, ValueError) as e:
        raise ModelError(f"cannot read lip-sync adapter {path} ({e})", "pass an .npz written by the trainer "
                         "or the federated agent") from None


def adapter_digest(weights: dict[str, np.ndarray]) -> str:
    """sha256 over the adapter's tensors (name, shape, float32 bytes, in name order): the same weights give the
    same digest whichever file they came in."""
    h = hashlib.sha256()
    for name in sorted(weights):
        value = np.ascontiguousarray(weights[name], dtype=np.float32)
        h.update(name.encode() + str(value.shape).encode() + value.tobytes())
    return h.hexdigest()


def save_adapter(path: str | Path, weights: dict[str, np.ndarray]) -> Path:
    """Write adapter weights as .npz (atomically), the format load_adapter and LipSyncModel(adapter=) read."""
    buf = io.BytesIO()
    np.savez(buf, **{k: np.asarray(v, dtype=np.float32) for k, v in weights.items()})
    return atomic_write_bytes(path, buf.getvalue())


def model_bytes_with_adapter(weights: dict[str, np.ndarray]) -> bytes:
    """The shipped ONNX model with its adapter initializers replaced: the same graph and names, as TensorRT's
    OnnxParserRefitter.refit_from_bytes expects. Needs the `onnx` package (tools/test extras)."""
    try:
        # optional extra: onnx (fed, tools), about 1.1 s to import
        import onnx
        from onnx import numpy_helper
    except ImportError:
        raise ModelError("the onnx package is needed to write a model with a new adapter",
                         "pip install onnx") from None
    path, manifest = shipped_model("lipsync")
    model = onnx.load(str(path))
    shapes = {k: tuple(v) for k, v in manifest["adapter_initializers"].items()}
    for init in model.graph.initializer:
        if init.name in shapes:
            value = np.asarray(weights[init.name], dtype=np.float32)
            if value.shape != shapes[init.name]:
                raise ModelError(f"lip-sync adapter tensor {init.name} has shape {value.shape}, expected "
                                 f"{shapes[init.name]}", "use an adapter trained for this model version")
            init.CopyFrom(numpy_helper.from_array(value, init.name))
    return model.SerializeToString()
