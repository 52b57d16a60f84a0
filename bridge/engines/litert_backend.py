"""LiteRT backend (CPU, XNNPACK): runs the source .tflite of a shipped model, as MediaPipe does.

A model qualifies when its manifest entry has a `litert` block: the unchanged source .tflite shipped beside the
ONNX file, with its sha256 (`tools/build_models.py` writes both). The session keeps the ONNX model's interface
(same input and output names, NCHW input, dynamic batch), so stages do not know which backend runs: NCHW input
is transposed to the .tflite's NHWC (free when the caller built NCHW as a view of NHWC pixels, as the stages
do). A batch of N runs as one invoke of a second interpreter resized to batch N when that gives each item's own
result: the .tflite graphs end in reshapes to [1, K], which at batch N give [1, N*K] holding the N items in order,
so on first use of a batch size the batched interpreter is checked against item-by-item runs on distinct seeded
inputs, and used only when they agree (the iris model's two eyes: one invoke, about 7% less CPU than two); a graph
that does not resize or mixes items runs item by item. A model without a .tflite raises EngineUnavailable, so
create_session falls back to the next backend. XNNPACK computes f32 here.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bridge import models
from bridge.engines.base import EngineUnavailable
from bridge.engines.litert_loading import litert_available, loaded_interpreters, manifest_specs


def _companion(model_path: Path) -> tuple[Path, dict]:
    """The verified .tflite shipped for the ONNX model at `model_path`, and its manifest entry."""
    model_path = Path(model_path).resolve()
    for entry in models.manifest()["models"].values():
        if (models.MODELS_DIR / entry["file"]).resolve() == model_path and "litert" in entry:
            block = entry["litert"]
            return models.verify_file(models.MODELS_DIR / block["file"], block["sha256"]), entry
    raise EngineUnavailable(f"no .tflite ships for {model_path.name}", "use --backend openvino or onnxruntime")


def open_litert(model_path: str | Path, threads: int = 1):
    """A LiteRT session for a shipped model: LiteRtSession, or, for a .tflite whose manifest says it holds
    MediaPipe's custom ops (`litert.custom_ops`), the session that cuts it at them (litert_mediapipe_ops.py)."""
    if not litert_available():
        raise EngineUnavailable("LiteRT is not installed", "pip install ai-edge-litert")
    tflite, entry = _companion(Path(model_path))
    if entry["litert"].get("custom_ops") == "mediapipe":
        try:
            # optional extra: litert's numba, which the custom ops' compiled loops need (litert_mediapipe_kernels.py)
            from bridge.engines.litert_mediapipe_ops import MediaPipeAttentionSession
        except ImportError as e:
            raise EngineUnavailable(f"{e.name or 'numba'} is not installed (MediaPipe's ops on LiteRT)",
                                    "pip install 'facebridge[litert]', or use --landmarks mesh+iris") from e

        return MediaPipeAttentionSession(tflite, entry, threads=threads)
    return LiteRtSession(model_path, threads=threads)


class LiteRtSession:
    backend_name = "litert"
    precision = "f32"

    def __init__(self, model_path: str | Path, threads: int = 1):
        if not litert_available():
            raise EngineUnavailable("LiteRT is not installed", "pip install ai-edge-litert")
        tflite, entry = _companion(Path(model_path))
        self._tflite, self._threads = tflite, int(threads)
        self._batch_interp: dict[int, tuple | None] = {}  # batch size -> batched interpreter, or None
        (self._interp,) = loaded_interpreters([{"model_path": str(tflite)}], threads, tflite.name,
                                              "use --backend openvino or onnxruntime")
        self.inputs, self.outputs = manifest_specs(entry, "inputs"), manifest_specs(entry, "outputs")
        self._input_index = self._interp.get_input_details()[0]["index"]
        by_name = {d["name"]: d["index"] for d in self._interp.get_output_details()}
        missing = [o.name for o in self.outputs if o.name not in by_name]
        if missing:
            raise EngineUnavailable(f"{tflite.name} has no output {missing[0]} (its ONNX model has)",
                                    "rebuild the models with `python tools/build_models.py`")
        self._output_index = [by_name[o.name] for o in self.outputs]

    def runs_batched(self, batch: int) -> bool:
        """Whether a batch of `batch` items runs as one invoke (see the module docstring)."""
        return batch > 1 and self._batched(batch) is not None

    def _batched(self, batch: int):
        """(interpreter, input index, output indices) resized to `batch`, checked once; None if it cannot be."""
        if batch in self._batch_interp:
            return self._batch_interp[batch]
        # optional extra: litert
        from ai_edge_litert.interpreter import Interpreter

        found = None
        try:
            interp = Interpreter(model_path=str(self._tflite), num_threads=self._threads)
            index = interp.get_input_details()[0]["index"]
            shape = [batch, *self._interp.get_input_details()[0]["shape"][1:]]
            interp.resize_tensor_input(index, shape, strict=False)
            interp.allocate_tensors()
            by_name = {d["name"]: d["index"] for d in interp.get_output_details()}
            candidate = (interp, index, [by_name[o.name] for o in self.outputs])
            probe = np.random.default_rng(0).uniform(0.0, 1.0, shape).astype(np.float32)
            together = self._invoke_batched(candidate, probe)
            alone = self._invoke_each(probe)
            if all(np.allclose(together[k], alone[k], rtol=1e-5, atol=1e-5 * max(1.0, float(np.abs(alone[k]).max())))
                   for k in alone):
                found = candidate
        except (RuntimeError, ValueError, KeyError):
            pass  # the graph does not resize: item by item
        self._batch_interp[batch] = found
        return found

    def _invoke_batched(self, batched, nhwc: np.ndarray) -> dict[str, np.ndarray]:
        interp, index, outputs = batched
        interp.set_tensor(index, nhwc)
        interp.invoke()
        return {spec.name: interp.get_tensor(i).reshape(len(nhwc), *spec.shape[1:])
                for spec, i in zip(self.outputs, outputs)}

    def _invoke_each(self, nhwc: np.ndarray) -> dict[str, np.ndarray]:
        results = [[] for _ in self.outputs]
        for item in range(len(nhwc)):
            self._interp.set_tensor(self._input_index, nhwc[item:item + 1])
            self._interp.invoke()
            for values, index in zip(results, self._output_index):
                values.append(self._interp.get_tensor(index))
        return {spec.name: np.concatenate(v).reshape(len(nhwc), *spec.shape[1:])
                for spec, v in zip(self.outputs, results)}

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = next(iter(feeds.values()))
        nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1), dtype=np.float32)
        batched = self._batched(len(nhwc)) if len(nhwc) > 1 else None
        return self._invoke_batched(batched, nhwc) if batched is not None else self._invoke_each(nhwc)
