"""The smoke test: a staged release must reproduce its declared reference outputs before it may serve.

The release carries `reference.npz` with the inputs (`input.<name>`) and the outputs (`output.<name>`) the
publisher computed with this same code. Here an ONNX Runtime CPU session opens the staged model (or the shipped
base model with the staged adapter weights put in place of its adapter initializers), runs the inputs, and every
output must be finite and within atol + rtol * |reference| of the declared one. The swap issue adds engines
(TensorRT) on top of the same check. Arrays are read by bridge/updates/arrays.py (bounded, no pickle), so a
hostile .npz cannot run code or exhaust memory.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bridge.updates import reasons
from bridge.updates.arrays import read_npz  # noqa: F401 (read_npz is part of this module's interface)


@dataclass(frozen=True)
class SmokeResult:
    outputs: int  # outputs compared
    max_abs_error: float  # largest |output - reference| seen
    seconds: float


def adapter_weights(path: Path, shapes: dict[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """The adapter tensors, exactly the names and shapes the base model's manifest lists, float32 and finite."""
    arrays = read_npz(path, "adapter.npz")
    if set(arrays) != set(shapes):
        raise reasons.Incompatible(f"adapter holds tensors {sorted(arrays)[:4]}, this model needs {sorted(shapes)}")
    for name, want in shapes.items():
        value = arrays[name]
        if tuple(value.shape) != tuple(want) or value.dtype != np.float32:
            raise reasons.Incompatible(f"adapter tensor {name} is {value.dtype}{list(value.shape)}, this model needs "
                                       f"float32{list(want)}")
        if not np.isfinite(value).all():
            raise reasons.SmokeTestFailed(f"adapter tensor {name} holds NaN or infinite values")
    return {k: np.ascontiguousarray(v) for k, v in arrays.items()}


class ReleaseSession:
    """An ONNX Runtime CPU session for a model file, with adapter initializers replaced when given."""

    def __init__(self, model_path: Path, adapter: dict[str, np.ndarray] | None = None):
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        # ORT keeps only a pointer to initializer buffers: they live as long as the session
        self._values = {n: ort.OrtValue.ortvalue_from_numpy(w) for n, w in (adapter or {}).items()}
        for name, value in self._values.items():
            opts.add_initializer(name, value)
        self.session = ort.InferenceSession(str(model_path), sess_options=opts, providers=["CPUExecutionProvider"])
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(self.output_names, inputs)))


def open_release(kind: str, staged: Path, base_model: Path | None, shapes: dict) -> ReleaseSession:
    """The session a release of `kind` runs as: its own model.onnx, or the base model with its adapter."""
    try:
        if kind == "model":
            return ReleaseSession(staged / "model.onnx")
        return ReleaseSession(base_model, adapter_weights(staged / "adapter.npz", shapes))
    except reasons.UpdateRefused:
        raise
    except Exception as e:  # ONNX Runtime raises its own types for a file it cannot load
        first = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise reasons.SmokeTestFailed(f"ONNX Runtime cannot open the release ({first})") from None


def split_reference(arrays: dict[str, np.ndarray]) -> tuple[dict, dict]:
    inputs = {k[len("input."):]: v for k, v in arrays.items() if k.startswith("input.")}
    outputs = {k[len("output."):]: v for k, v in arrays.items() if k.startswith("output.")}
    return inputs, outputs


def smoke_test(session: ReleaseSession, reference: Path, atol: float, rtol: float) -> SmokeResult:
    """Run the reference inputs; SmokeTestFailed unless every declared output matches."""
    t0 = time.perf_counter()
    inputs, expected = split_reference(read_npz(reference, "reference.npz"))
    bad = sorted(k for k, v in (*inputs.items(), *expected.items()) if not np.isfinite(v).all())
    if bad:  # NaN compares false: a NaN reference would let any output pass
        raise reasons.SmokeTestFailed(f"the release's reference holds NaN or infinite values in {bad[:4]}")
    if set(inputs) != set(session.input_names) or not expected or not set(expected) <= set(session.output_names):
        raise reasons.SmokeTestFailed(f"reference inputs {sorted(inputs)} / outputs {sorted(expected)} do not fit "
                                      f"the model (inputs {session.input_names}, outputs {session.output_names})")
    try:
        got = session.run(inputs)
    except Exception as e:
        first = str(e).splitlines()[0][:120] if str(e) else type(e).__name__
        raise reasons.SmokeTestFailed(f"the model fails on its reference inputs ({first})") from None
    worst = 0.0
    for name, want in expected.items():
        out = got[name]
        if out.shape != want.shape or not np.isfinite(out).all():
            raise reasons.SmokeTestFailed(f"output {name} is {list(out.shape)} or not finite, reference is "
                                          f"{list(want.shape)}")
        error = np.abs(out.astype(np.float64) - want)
        worst = max(worst, float(error.max(initial=0.0)))
        if (error > atol + rtol * np.abs(want)).any():
            raise reasons.SmokeTestFailed(f"output {name} differs from its reference by up to {float(error.max()):.3g} "
                                          f"(allowed {atol:g} + {rtol:g} x |reference|)")
    return SmokeResult(len(expected), worst, time.perf_counter() - t0)


def reference_inputs(session: ReleaseSession, frames: int = 16, seed: int = 0) -> dict[str, np.ndarray]:
    """Deterministic inputs for a model's float inputs (dynamic axes become 1, or `frames` for a named time
    axis), for publishers that bring no reference of their own."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for spec in session.session.get_inputs():
        if spec.type != "tensor(float)":
            raise ValueError(f"input {spec.name} is {spec.type}; pass reference inputs explicitly")
        shape = [d if isinstance(d, int) and d > 0 else (frames if d in ("frames", "time", "T") else 1)
                 for d in spec.shape]
        feeds[spec.name] = rng.standard_normal(shape).astype(np.float32) * 0.5
    return feeds
