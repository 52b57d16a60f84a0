"""FP16 the TensorRT 11 way: convert the ONNX graph, then check it against FP32 on real frames.

TensorRT 11 and TensorRT-RTX have no FP16 builder flag: every network is strongly typed, so precision comes from
the types in the ONNX graph. `onnxconverter-common` rewrites weights and activations to float16 while keeping
float32 inputs/outputs (so callers feed the same arrays). The converted graph is run next to the original in
ONNX Runtime on frames from the bundled sample clip; if any output drifts more than `tolerance` of its range, the
FP16 graph is refused and the caller builds FP32.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from bridge.engines.base import EngineError


@dataclass(frozen=True)
class ParityReport:
    max_abs_diff: dict[str, float]  # per output
    output_range: dict[str, float]  # max |fp32 output|
    tolerance: float

    @property
    def worst_relative(self) -> float:
        return max(self.max_abs_diff[k] / max(self.output_range[k], 1e-6) for k in self.max_abs_diff)

    @property
    def ok(self) -> bool:
        return self.worst_relative <= self.tolerance

    def as_dict(self) -> dict:
        return {"max_abs_diff": self.max_abs_diff, "output_range": self.output_range,
                "worst_relative": round(self.worst_relative, 6), "tolerance": self.tolerance, "ok": self.ok}


def convert_to_fp16(onnx_bytes: bytes) -> bytes:
    """The same model with float16 weights and activations, float32 inputs and outputs."""
    # optional extra: tensorrt (onnx, onnxconverter-common)
    import onnx
    from onnxconverter_common import float16

    model = onnx.load_from_string(onnx_bytes)
    with warnings.catch_warnings():  # it warns for every tiny weight it clamps to the fp16 range
        warnings.simplefilter("ignore")
        converted = float16.convert_float_to_float16(model, keep_io_types=True)
    return converted.SerializeToString()


def check_parity(fp32_bytes: bytes, fp16_bytes: bytes, feeds: dict[str, np.ndarray],
                 tolerance: float = 0.01) -> ParityReport:
    """Run both graphs on `feeds` (real frames) in ONNX Runtime CPU and compare every output."""
    def run(model: bytes) -> dict[str, np.ndarray]:
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            session = ort.InferenceSession(model, sess_options=opts, providers=["CPUExecutionProvider"])
        except Exception as e:  # ORT's own exception types
            raise EngineError(f"the FP16 graph cannot be checked ({str(e).splitlines()[0][:160]})",
                              "build with --precision fp32") from None
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds)))

    reference, candidate = run(fp32_bytes), run(fp16_bytes)
    diffs = {k: float(np.abs(candidate[k].astype(np.float64) - reference[k]).max()) for k in reference}
    ranges = {k: float(np.abs(reference[k]).max()) for k in reference}
    return ParityReport(diffs, ranges, tolerance)
