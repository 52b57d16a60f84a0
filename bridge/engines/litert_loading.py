"""Loading LiteRT interpreters the one way both LiteRT sessions do: native chatter to the debug log, a model LiteRT
cannot load refused as EngineUnavailable with the fix, the ONNX interface read from the model's manifest entry."""
from __future__ import annotations

import logging

from bridge.engines.base import EngineUnavailable, TensorSpec
from bridge.engines.native_output import native_stderr

log = logging.getLogger(__name__)


def litert_available() -> bool:
    try:
        from ai_edge_litert.interpreter import Interpreter  # noqa: F401
    except ImportError:
        return False
    return True


def loaded_interpreters(models: list[dict], threads: int, what: str, fix: str) -> list:
    """LiteRT interpreters of `models` (each the Interpreter's model_path= or model_content=), tensors allocated,
    their native chatter ("Created TensorFlow Lite XNNPACK delegate" on every load) logged at debug; a model LiteRT
    cannot load is EngineUnavailable naming `what`, with `fix`."""
    # optional extra: litert
    from ai_edge_litert.interpreter import Interpreter

    try:
        with native_stderr() as said:
            interpreters = [Interpreter(num_threads=int(threads), **model) for model in models]
            for interpreter in interpreters:
                interpreter.allocate_tensors()
    except (RuntimeError, ValueError) as e:
        raise EngineUnavailable(f"LiteRT cannot load {what} ({str(e).splitlines()[0][:160]})", fix) from None
    for line in said:
        log.debug("litert (native): %s", line)
    return interpreters


def manifest_specs(entry: dict, key: str) -> list[TensorSpec]:
    """The manifest entry's "inputs" or "outputs" as TensorSpecs (the ONNX model's interface the session keeps)."""
    return [TensorSpec(t["name"], tuple(t["shape"]), t["dtype"]) for t in entry[key]]
