"""ONNX Runtime CPU backend."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnxruntime as ort

from bridge.engines.base import TensorSpec
from bridge.errors import ModelError

_ORT_TYPES = {"tensor(float)": "float32", "tensor(float16)": "float16", "tensor(int64)": "int64",
              "tensor(int32)": "int32", "tensor(uint8)": "uint8", "tensor(double)": "float64"}


def _spec(arg) -> TensorSpec:
    return TensorSpec(arg.name, tuple(arg.shape), _ORT_TYPES.get(arg.type, arg.type))


class OrtSession:
    backend_name = "onnxruntime"

    def __init__(self, model_path: str | Path, threads: int = 1, providers: list[str] | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        # Spinning worker threads fight the numpy glue for the cores; measured 3x slower without this.
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        opts.log_severity_level = 3
        try:
            self._session = ort.InferenceSession(str(model_path), sess_options=opts,
                                                 providers=providers or ["CPUExecutionProvider"])
        except Exception as e:  # ORT raises several private exception types
            raise ModelError(f"ONNX Runtime cannot load {model_path} ({str(e).splitlines()[0][:200]})",
                             "check the file is a valid ONNX model; rebuild shipped ones with "
                             "`python tools/build_models.py`") from None
        self.inputs = [_spec(a) for a in self._session.get_inputs()]
        self.outputs = [_spec(a) for a in self._session.get_outputs()]
        self._output_names = [o.name for o in self.outputs]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        values = self._session.run(self._output_names, feeds)
        return dict(zip(self._output_names, values))
