"""One-Euro filter (Casiez et al. 2012), vectorised: one independent filter per channel.

Low cutoff when a channel is still (kills jitter), rising with its speed (keeps fast motion snappy).
"""
from __future__ import annotations

import math

import numpy as np


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    tau = 1.0 / (2 * math.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    def __init__(self, min_cutoff: float = 1.0, beta: float = 0.05, d_cutoff: float = 1.0) -> None:
        self.min_cutoff = min_cutoff
        self.beta = beta
        self.d_cutoff = d_cutoff
        self._x: np.ndarray | None = None
        self._dx: np.ndarray | None = None
        self._t: float | None = None

    def reset(self) -> None:
        self._x = self._dx = self._t = None

    def __call__(self, x: np.ndarray, t: float) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self._x is None or self._t is None or t <= self._t:
            self._x, self._dx, self._t = x.copy(), np.zeros_like(x), t
            return x.astype(np.float32)
        dt = t - self._t
        step = x - self._x
        self._dx = self._dx + _alpha(self.d_cutoff, dt) * (step / dt - self._dx)
        # _alpha(cutoff, dt) = 1 / (1 + tau / dt), tau = 1 / (2 pi cutoff): 1 / (1 + 1 / (2 pi dt cutoff))
        cutoff = self.min_cutoff + self.beta * np.abs(self._dx)
        self._x = self._x + step / (1.0 + 1.0 / ((2 * math.pi * dt) * cutoff))
        self._t = t
        return self._x.astype(np.float32)
