"""One-Euro filter (Casiez et al. 2012), vectorised: one independent filter per channel.

Low cutoff when a channel is still (kills jitter), rising with its speed (keeps fast motion snappy). The filter's
step is one function, `one_euro`, over arrays that broadcast; OneEuroFilter runs it for one stream, OneEuroRows for
many streams at once (one row each, each with its own clock), so both give the same numbers bit for bit.
"""
from __future__ import annotations

import math

import numpy as np


def _alpha(cutoff: np.ndarray | float, dt: float) -> np.ndarray | float:
    tau = 1.0 / (2 * math.pi * cutoff)
    return 1.0 / (1.0 + tau / dt)


def one_euro(x, last_x, last_dx, dt, min_cutoff, beta, d_cutoff):
    """One step of the filter -> (filtered x, its smoothed speed): x, last_x, last_dx (..., channels) float64;
    dt seconds since the last step (a float, or (..., 1) per row); min_cutoff and beta per channel or one for all."""
    step = x - last_x
    dx = last_dx + _alpha(d_cutoff, dt) * (step / dt - last_dx)
    # _alpha(cutoff, dt) = 1 / (1 + tau / dt), tau = 1 / (2 pi cutoff): 1 / (1 + 1 / (2 pi dt cutoff))
    cutoff = min_cutoff + beta * np.abs(dx)
    return last_x + step / (1.0 + 1.0 / ((2 * math.pi * dt) * cutoff)), dx


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
        self._x, self._dx = one_euro(x, self._x, self._dx, t - self._t, self.min_cutoff, self.beta, self.d_cutoff)
        self._t = t
        return self._x.astype(np.float32)


class OneEuroRows:
    """OneEuroFilter's state for many independent streams at once: one row of `channels` per stream, each row with
    its own clock; `__call__(rows, x, t)` filters the given rows exactly as each row's own OneEuroFilter would."""

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
        xs, dxs = one_euro(x, self._x[rows], self._dx[rows], dt, self.min_cutoff, self.beta, self.d_cutoff)
        xs = np.where(restart[:, None], x, xs)
        self._x[rows] = xs
        self._dx[rows] = np.where(restart[:, None], 0.0, dxs)
        self._t[rows] = t
        self._started[rows] = True
        return xs.astype(np.float32)
