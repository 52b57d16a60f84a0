"""Inference backends behind one interface (see base.py). `create_session` picks one."""
from __future__ import annotations

from pathlib import Path

from bridge.engines.base import InferenceSession, TensorSpec  # noqa: F401


def create_session(model_path: str | Path, backend: str = "onnxruntime", threads: int = 1) -> InferenceSession:
    """Open `model_path` on `backend`. The foundation ships ONNX Runtime CPU; other backends plug in here."""
    from bridge.engines.onnxruntime_backend import OrtSession

    if backend not in ("auto", "onnxruntime"):
        raise ValueError(f"unknown backend {backend!r}")
    return OrtSession(model_path, threads=threads)
