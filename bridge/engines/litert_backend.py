"""LiteRT backend (CPU, XNNPACK): runs the source .tflite of a shipped model, as MediaPipe does.

A model qualifies when its manifest entry has a `litert` block: the unchanged source .tflite shipped beside the
ONNX file, with its sha256 (`tools/build_models.py` writes both). The session keeps the ONNX model's interface
(same input and output names, NCHW input, dynamic batch), so stages do not know which backend runs: NCHW input
is transposed to the .tflite's NHWC (free when the caller built NCHW as a view of NHWC pixels, as the stages
do), and a batch runs item by item (the .tflite graphs reshape to batch 1). A model without a .tflite raises
EngineUnavailable, so create_session falls back to the next backend. XNNPACK computes f32 here.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from bridge.engines.base import EngineUnavailable, TensorSpec
from bridge.engines.native_output import native_stderr

log = logging.getLogger(__name__)


def litert_available() -> bool:
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except ImportError:
        return False
    return True


def _companion(model_path: Path) -> tuple[Path, dict]:
    """The verified .tflite shipped for the ONNX model at `model_path`, and its manifest entry."""
    from bridge.models import MODELS_DIR, manifest, verify_file

    model_path = Path(model_path).resolve()
    for entry in manifest()["models"].values():
        if (MODELS_DIR / entry["file"]).resolve() == model_path and "litert" in entry:
            block = entry["litert"]
            return verify_file(MODELS_DIR / block["file"], block["sha256"]), entry
    raise EngineUnavailable(f"no .tflite ships for {model_path.name}", "use --backend openvino or onnxruntime")


class LiteRtSession:
    backend_name = "litert"
    precision = "f32"

    def __init__(self, model_path: str | Path, threads: int = 1):
        if not litert_available():
            raise EngineUnavailable("LiteRT is not installed", "pip install ai-edge-litert")
        from ai_edge_litert.interpreter import Interpreter

        tflite, entry = _companion(Path(model_path))
        try:
            with native_stderr() as said:  # "INFO: Created TensorFlow Lite XNNPACK delegate for CPU." on every run
                self._interp = Interpreter(model_path=str(tflite), num_threads=int(threads))
                self._interp.allocate_tensors()
        except (RuntimeError, ValueError) as e:
            raise EngineUnavailable(f"LiteRT cannot load {tflite.name} ({str(e).splitlines()[0][:160]})",
                                    "use --backend openvino or onnxruntime") from None
        for line in said:
            log.debug("litert (native): %s", line)
        self.inputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in entry["inputs"]]
        self.outputs = [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in entry["outputs"]]
        self._input_index = self._interp.get_input_details()[0]["index"]
        by_name = {d["name"]: d["index"] for d in self._interp.get_output_details()}
        missing = [o.name for o in self.outputs if o.name not in by_name]
        if missing:
            raise EngineUnavailable(f"{tflite.name} has no output {missing[0]} (its ONNX model has)",
                                    "rebuild the models with `python tools/build_models.py`")
        self._output_index = [by_name[o.name] for o in self.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = next(iter(feeds.values()))
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1), dtype=np.float32)
        results = [[] for _ in self.outputs]
        for item in range(len(nhwc)):
            self._interp.set_tensor(self._input_index, nhwc[item:item + 1])
            self._interp.invoke()
            for values, index in zip(results, self._output_index):
                values.append(self._interp.get_tensor(index))
        return {spec.name: np.concatenate(v).reshape(len(nhwc), *spec.shape[1:])
                for spec, v in zip(self.outputs, results)}
