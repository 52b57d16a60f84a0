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


class OneEuroRows:
    """OneEuroFilter for many independent streams at once: one row of `channels` per stream, each row with its
    own clock; `__call__(rows, x, t)` filters the given rows exactly as each row's own OneEuroFilter would."""

    def __init__(self, rows: int, channels: int, min_cutoff: float = 1.0, beta: float = 0.05,
                 d_cutoff: float = 1.0) -> None:
        self.min_cutoff, self.beta, self.d_cutoff = min_cutoff, beta, d_cutoff
        self._x = np.zeros((rows, channels))
        self._dx = np.zeros((rows, channels))
        self._t = np.zeros(rows)
        self._started = np.zeros(rows, bool)

    def reset(self, rows) -> None:
        self._started[rows] = False

    def __call__(self, rows: np.ndarray, x: np.ndarray, t: np.ndarray) -> np.ndarray:
        """rows: (n,) distinct row indices; x: (n, channels); t: (n,) seconds -> (n, channels) float32."""
        x = np.asarray(x, dtype=np.float64).reshape(len(rows), -1)
        t = np.asarray(t, dtype=np.float64)
        last_t = self._t[rows]
        restart = ~self._started[rows] | (t <= last_t)
        dt = np.where(restart, 1.0, t - last_t)[:, None]
        xs, dxs = self._x[rows], self._dx[rows]
        step = x - xs
        dxs = dxs + _alpha(self.d_cutoff, dt) * (step / dt - dxs)
        cutoff = self.min_cutoff + self.beta * np.abs(dxs)
        xs = xs + step / (1.0 + 1.0 / ((2 * math.pi * dt) * cutoff))  # OneEuroFilter's own arithmetic
        xs = np.where(restart[:, None], x, xs)
        self._x[rows] = xs
        self._dx[rows] = np.where(restart[:, None], 0.0, dxs)
        self._t[rows] = t
        self._started[rows] = True
        return xs.astype(np.float32)
