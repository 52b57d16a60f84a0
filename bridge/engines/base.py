"""The backend interface every inference engine implements."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np


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
        """Run on host arrays; returns every output by name."""
        ...
