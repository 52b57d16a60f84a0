"""Inference backends behind one interface (see base.py). `create_session` picks one and says why.

Backends: "onnxruntime" (CPU), "onnxruntime-cuda", "openvino" (CPU), "litert" (CPU, XNNPACK, the shipped .tflite),
"tensorrt" (full TensorRT 10/11), "tensorrt-rtx" (TensorRT-RTX). "auto" tries the GPU backends in order
(select.AUTO_ORDER) and, when none is usable, takes the CPU backend measured fastest for that model among those
that agree with ONNX Runtime (fastest.py). A requested backend that cannot be used here falls back to the next
working one with a printed reason, unless strict=True.
CPU backends compute in `cpu_precision` (f32 by default; see precision.py).

Quiet by default: the automatic choice, with every backend it skipped and why, is logged at INFO (`facebridge -v`
shows it; `run` names the backend and precision in its start line). Printed (stderr, once per distinct line) is
only what the user asked for and does not get: a requested backend that falls back, a precision that differs.

A backend's module loads when a model first opens on it: this package loads with every command, `--help`
included, and all the backends' modules together cost about 0.5 s to import (ONNX Runtime 0.13 s,
importlib.metadata for the CPU timings' versions; `python -X importtime`, loaded 2-core VM).
"""
from __future__ import annotations

import logging
import sys
from pathlib import Path

from bridge.engines.base import EngineError, EngineUnavailable, InferenceSession, TensorSpec  # noqa: F401
from bridge.engines.precision import DEFAULT_CPU_PRECISION, check_cpu_precision, precision_note
from bridge.engines.select import AUTO_ORDER, BACKENDS, CPU_BACKENDS, candidates, check_available  # noqa: F401

_announced: set[str] = set()
log = logging.getLogger(__name__)


def _open(backend: str, model_path: Path, threads: int, cache_dir, precision: str,
          cpu_precision: str) -> InferenceSession:
    if backend == "onnxruntime":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.onnxruntime_backend import OrtSession

        return OrtSession(model_path, threads=threads)
    if backend == "onnxruntime-cuda":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.onnxruntime_backend import OrtCudaSession

        return OrtCudaSession(model_path, threads=threads)
    if backend == "litert":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.litert_backend import open_litert

        return open_litert(model_path, threads=threads)
    if backend == "openvino":
        # loaded on first use (bridge/engines/__init__.py says why)
        from bridge.engines.openvino_backend import OpenVinoSession

        return OpenVinoSession(model_path, threads=threads, precision=cpu_precision)
    # loaded on first use (bridge/engines/__init__.py says why)
    from bridge.engines.tensorrt.session import TrtSession

    return TrtSession(model_path, backend, cache_dir=cache_dir, precision=precision)


def _say(line: str, loud: bool = True) -> None:
    """Once per distinct line (not once per model): printed when `loud`, else logged at INFO."""
    if line in _announced:
        return
    _announced.add(line)
    if loud:
        print(f"engines: {line}", file=sys.stderr, flush=True)
    else:
        log.info("%s", line)


def create_session(model_path: str | Path, backend: str = "onnxruntime", threads: int = 1, *, cache_dir=None,
                   precision: str = "fp32", cpu_precision: str = DEFAULT_CPU_PRECISION, batch: int = 1,
                   strict: bool = False) -> InferenceSession:
    """Open `model_path` on `backend` ("auto" = fastest available), falling back with a printed reason.

    The default stays "onnxruntime" so existing callers keep bit-stable CPU results; user-facing commands pass
    --backend (default auto). strict=True raises the requested backend's error instead of falling back.
    `precision` is TensorRT's (fp32, fp16); `cpu_precision` the CPU backends' (f32, bf16); `batch` is the batch
    the caller will run, at which `auto` times the CPU backends.
    """
    model_path = Path(model_path)
    check_cpu_precision(cpu_precision)
    if model_path.suffix == ".tflite":  # a model shipped only as .tflite (MediaPipe's custom ops): LiteRT alone
        return _litert_only(model_path, backend, threads, strict)
    skipped: list[str] = []
    for name in candidates(backend):
        if backend == "auto" and name in CPU_BACKENDS:
            return _fastest_cpu(model_path, threads, cache_dir, precision, cpu_precision, batch, skipped)
        available = check_available(name)
        if not available.ok:
            if strict and name == backend:
                raise EngineUnavailable(available.reason, "choose another --backend, or --backend auto")
            skipped.append(f"{name}: {available.reason}")
            continue
        try:
            session = _open(name, model_path, threads, cache_dir, precision, cpu_precision)
        except EngineError as e:
            if strict and name == backend:
                raise
            skipped.append(f"{name}: {e.problem}")
            continue
        running = getattr(session, "precision", None) if name in ("openvino", "onnxruntime") else None
        note = f", {precision_note(cpu_precision, running, name)}" if running else ""
        differs = bool(running) and running != cpu_precision  # e.g. bf16 asked, f32 runs: say why
        if backend not in ("auto", name):
            _say(f"--backend {backend} is not usable here ({skipped[0].split(': ', 1)[-1]}), using {name}{note}")
            _say("skipped " + "; ".join(skipped), loud=False)
        else:
            why = f" (skipped {'; '.join(skipped)})" if skipped else ""
            _say(f"using {name}: {available.reason}{note}{why}", loud=differs)
        return session
    raise EngineError("no inference backend could open " + model_path.name + ": " + "; ".join(skipped),
                      "check the model file with `facebridge engines verify`")


def _fastest_cpu(model_path: Path, threads: int, cache_dir, precision: str, cpu_precision: str, batch: int,
                 skipped: list[str]) -> InferenceSession:
    # loaded on first use (bridge/engines/__init__.py says why)
    from bridge.engines.fastest import choose

    if skipped:
        _say("no GPU backend here (" + "; ".join(skipped) + "): each model runs on the CPU backend measured fastest",
             loud=False)
    session, choice = choose(model_path, lambda b: _open(b, model_path, threads, cache_dir, precision, cpu_precision),
                             threads=threads, precision=cpu_precision, batch=batch, cache_dir=cache_dir)
    running = getattr(session, "precision", "f32")
    note = precision_note(cpu_precision, running, choice.backend)
    _say(f"{model_path.stem}: using {choice.backend}, {note}, {choice.reason}", loud=running != cpu_precision)
    if not choice.reason.startswith("measured before"):  # a first start: say once why it takes a moment
        _say("timed the CPU backends for this machine once per model (kept for later starts; `facebridge -v` "
             "shows the times, `facebridge engines clear` measures again)")
    return session


def _litert_only(model_path: Path, backend: str, threads: int, strict: bool) -> InferenceSession:
    """A .tflite-only model opens on LiteRT whatever the backend asked: no other backend can run it."""
    # loaded on first use (bridge/engines/__init__.py says why)
    from bridge.engines.fastest import CHOSEN, Choice
    from bridge.engines.litert_backend import open_litert

    why = "the only backend that runs it (MediaPipe's custom ops, compiled (numba) between two LiteRT parts)"
    if backend not in ("auto", "litert"):
        if strict:
            raise EngineUnavailable(f"--backend {backend} cannot run {model_path.name}", "use --backend litert or auto")
        _say(f"{model_path.stem}: --backend {backend} cannot run it, using litert, {why}", loud=False)
    session = open_litert(model_path, threads=threads)
    if backend == "auto":
        CHOSEN[model_path.name] = Choice("litert", why, {})
    _say(f"{model_path.stem}: using litert, f32, {why}", loud=False)
    return session
