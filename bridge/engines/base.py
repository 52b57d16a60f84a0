"""The backend interface every inference engine implements, and the error engines raise."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from bridge.errors import FaceBridgeError


@dataclass(frozen=True)
class TensorSpec:
    name: str
    shape: tuple  # ints, or str/None for dynamic axes
    dtype: str  # numpy dtype name, e.g. "float32"


class InferenceSession(Protocol):
    backend_name: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run on host arrays; returns every output by name. The leading axis may be any batch size the
        model allows."""
        ...


class EngineError(FaceBridgeError):
    """An inference backend cannot be used here (missing library or GPU, bad engine, failed build)."""


class EngineUnavailable(EngineError):
    """The backend's library, GPU or driver is not present: choose another backend."""


class EngineBuildError(EngineError):
    """TensorRT could not parse or build a model, or the engine could not be stored."""
