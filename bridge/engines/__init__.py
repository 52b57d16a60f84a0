"""Inference backends behind one interface (see base.py). `create_session` picks one and says why.

Backends: "onnxruntime" (CPU), "onnxruntime-cuda", "openvino" (CPU), "tensorrt" (full TensorRT 10/11),
"tensorrt-rtx" (TensorRT-RTX). "auto" tries them fastest first (select.AUTO_ORDER). A requested backend that
cannot be used here falls back to the next working one with a printed reason, unless strict=True.
"""
from __future__ import annotations

import sys
from pathlib import Path

from bridge.engines.base import EngineError, EngineUnavailable, InferenceSession, TensorSpec  # noqa: F401
from bridge.engines.select import AUTO_ORDER, BACKENDS, candidates, check_available  # noqa: F401

_announced: set[tuple] = set()


def _open(backend: str, model_path: Path, threads: int, cache_dir, precision: str) -> InferenceSession:
    if backend == "onnxruntime":
        from bridge.engines.onnxruntime_backend import OrtSession

        return OrtSession(model_path, threads=threads)
    if backend == "onnxruntime-cuda":
        from bridge.engines.onnxruntime_backend import OrtCudaSession

        return OrtCudaSession(model_path, threads=threads)
    if backend == "openvino":
        from bridge.engines.openvino_backend import OpenVinoSession

        return OpenVinoSession(model_path, threads=threads)
    from bridge.engines.tensorrt.session import TrtSession

    return TrtSession(model_path, backend, cache_dir=cache_dir, precision=precision)


def _say(line: str) -> None:
    if line not in _announced:  # one line per distinct choice, not one per model
        _announced.add(line)
        print(f"engines: {line}", file=sys.stderr, flush=True)


def create_session(model_path: str | Path, backend: str = "onnxruntime", threads: int = 1, *, cache_dir=None,
                   precision: str = "fp32", strict: bool = False) -> InferenceSession:
    """Open `model_path` on `backend` ("auto" = fastest available), falling back with a printed reason.

    The default stays "onnxruntime" so existing callers keep bit-stable CPU results; user-facing commands pass
    --backend (default auto). strict=True raises the requested backend's error instead of falling back.
    """
    model_path = Path(model_path)
    skipped: list[str] = []
    for name in candidates(backend):
        available = check_available(name)
        if not available.ok:
            if strict and name == backend:
                raise EngineUnavailable(available.reason, "choose another --backend, or --backend auto")
            skipped.append(f"{name}: {available.reason}")
            continue
        try:
            session = _open(name, model_path, threads, cache_dir, precision)
        except EngineError as e:
            if strict and name == backend:
                raise
            skipped.append(f"{name}: {e.problem}")
            continue
        if backend not in ("auto", name):
            _say(f"--backend {backend} is not usable here, using {name} ({available.reason}); "
                 + "; ".join(skipped))
        elif backend == "auto":
            why = f" (skipped {'; '.join(skipped)})" if skipped else ""
            _say(f"using {name}: {available.reason}{why}")
        return session
    raise EngineError("no inference backend could open " + model_path.name + ": " + "; ".join(skipped),
                      "check the model file with `facebridge engines verify`")
