"""OpenVINO backend (CPU): reads the same ONNX files; often the fastest CPU path on Intel machines.

The inference precision is always set explicitly (see precision.py): f32 unless bf16 is asked for, and
`precision` says what the compiled model really runs.
OpenVINO is imported through openvino_import.py, which keeps its telemetry from sending anything.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from bridge.engines.base import EngineUnavailable, TensorSpec
from bridge.engines.openvino_import import import_openvino
from bridge.engines.precision import DEFAULT_CPU_PRECISION, check_cpu_precision


def openvino_available() -> bool:
    try:
        import_openvino()
    except ImportError:
        return False
    return True


class OpenVinoSession:
    backend_name = "openvino"

    def __init__(self, model_path: str | Path, threads: int = 1, device: str = "CPU",
                 precision: str = DEFAULT_CPU_PRECISION):
        self.requested_precision = check_cpu_precision(precision)
        try:
            ov = import_openvino()
        except ImportError:
            raise EngineUnavailable("OpenVINO is not installed", "pip install 'facebridge[openvino]'") from None
        core = ov.Core()
        config = {"INFERENCE_NUM_THREADS": int(threads), "PERFORMANCE_HINT": "LATENCY",
                  "INFERENCE_PRECISION_HINT": precision}
        try:
            model = core.read_model(str(model_path))
            self._compiled = core.compile_model(model, device, config)
        except RuntimeError as e:
            raise EngineUnavailable(f"OpenVINO cannot compile {Path(model_path).name} for {device} "
                                    f"({str(e).splitlines()[0][:160]})", "use --backend onnxruntime") from None
        self.precision = self._compiled.get_property("INFERENCE_PRECISION_HINT").to_string()  # "f32", "bf16"
        self._request = self._compiled.create_infer_request()
        self.inputs = [self._spec(p) for p in self._compiled.inputs]
        self.outputs = [self._spec(p) for p in self._compiled.outputs]

    @staticmethod
    def _spec(port) -> TensorSpec:
        shape = tuple(d.get_length() if d.is_static else "batch" if i == 0 else None
                      for i, d in enumerate(port.get_partial_shape()))
        return TensorSpec(port.get_any_name(), shape, np.dtype(port.get_element_type().to_dtype()).name)

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        results = self._request.infer(feeds)
        return {spec.name: np.array(results[port]) for spec, port in zip(self.outputs, self._compiled.outputs)}
