"""Blinks from the lids' opening, measured against the subject's own open eye.

The expression regressor reads blinks from the whole landmark shape and under-reads them on real faces (a
person's open eye is not ICT's). The lids the iris model finds give a direct measure: the opening between the
upper and lower lid over the eye's width. Each person's open eye differs, so the reference is learned from the
last few seconds (a high percentile of the opening); a closed eye is a quarter of it. Each formula is written once,
over plain floats for one face (BlinkEstimator) or arrays for many (BlinkRows; bridge/stages/values.py).
"""
from __future__ import annotations

import math

import numpy as np

from bridge.mesh import EYE_CORNERS, EYE_LID_PAIRS
from bridge.stages.values import clip, hypot, maximum

HISTORY = 150  # frames (5 s at 30 fps) the open reference is taken from
DEFAULT_OPEN = 0.33  # opening / width of a typical open eye, used until the history fills
CLOSED_FRACTION = 0.25  # a closed eye reads about a quarter of the open opening (lashes, lid thickness)
DEAD_ZONE = 0.15  # openings within 15% of the open reference are not a blink (noise, gaze down)
REFRESH = 15  # frames between recomputing the open reference (a percentile over the history)
OPEN_PERCENTILE = 90


def open_reference(history: np.ndarray, axis: int = 0) -> np.ndarray:
    """np.percentile(history, OPEN_PERCENTILE, axis) (linear), value for value, as one sort and two rows: on a
    warm core the same cost, but np.percentile's many Python layers ran cold every REFRESH frames (0.25 ms in the
    pipeline against 0.03 isolated: the slowest frames of a run, docs/PERFORMANCE.md, "Face pipeline on one CPU
    core"). The
    history's order does not matter (a ring may hold it rotated)."""
    ordered = np.sort(history, axis=axis)
    virtual = (ordered.shape[axis] - 1) * (OPEN_PERCENTILE / 100)  # numpy's 'linear' method, its arithmetic
    below = math.floor(virtual)
    gamma = virtual - below
    lo = np.take(ordered, below, axis=axis)
    hi = np.take(ordered, min(below + 1, ordered.shape[axis] - 1), axis=axis)
    step = hi - lo
    return lo + step * gamma if gamma < 0.5 else hi - step * (1 - gamma)


_FROM = np.array([[EYE_CORNERS[eye][0], *(u for u, _ in EYE_LID_PAIRS[eye])] for eye in range(2)]).reshape(-1)
_TO = np.array([[EYE_CORNERS[eye][1], *(d for _, d in EYE_LID_PAIRS[eye])] for eye in range(2)]).reshape(-1)
_ENDS = np.concatenate([_FROM, _TO])


def eye_openings(points: np.ndarray) -> np.ndarray:
    """Lid opening / eye width for the subject's left and right eye, float32: of one face, points (468, >=2) -> (2,);
    of n faces, (n, 468, >=2) -> (n, 2)."""
    ends = np.asarray(points)[..., _ENDS, :2].astype(np.float64)  # per eye the corners, then the three lid pairs
    n = len(_FROM)
    if ends.ndim == 3:  # many faces: every pair's length in one call, each an array over the faces
        d = ends[:, :n] - ends[:, n:]
        length = list(np.hypot(d[..., 0], d[..., 1]).T)
    else:  # one face: plain floats
        p = ends.tolist()
        length = [hypot(p[i][0] - p[n + i][0], p[i][1] - p[n + i][1]) for i in range(n)]
    openings = [(length[k + 1] + length[k + 2] + length[k + 3]) / 3 / maximum(length[k], 1e-6) for k in (0, 4)]
    return np.array(openings, np.float32) if ends.ndim == 2 else np.stack(openings, -1).astype(np.float32)


def blink_weight(open_reference, opening):
    """The blink weight in [0, 1] of an eye's opening against its open reference (floats, or arrays)."""
    closure = (open_reference - opening) / maximum(open_reference * (1 - CLOSED_FRACTION), 1e-6)
    return clip((closure - DEAD_ZONE) / (1 - DEAD_ZONE), 0.0, 1.0)


class BlinkEstimator:
    def __init__(self) -> None:
        self._history = np.zeros((HISTORY, 2), np.float32)  # a ring: the last HISTORY openings
        self._count = 0  # openings seen since the reset
        self._open = np.full(2, DEFAULT_OPEN, np.float32)
        self._since_refresh = 0

    def reset(self) -> None:
        self._count = 0
        self._open = np.full(2, DEFAULT_OPEN, np.float32)
        self._since_refresh = 0

    def open_reference(self) -> np.ndarray:
        return self._open

    def _refresh(self) -> None:
        self._since_refresh += 1
        if self._count >= REFRESH and self._since_refresh >= REFRESH:
            self._open = open_reference(self._history[:min(self._count, HISTORY)]).astype(np.float32)
            self._since_refresh = 0

    def __call__(self, points: np.ndarray) -> np.ndarray:
        """(2,) blink weights in [0, 1] for the subject's left and right eye."""
        opening = eye_openings(points)
        self._history[self._count % HISTORY] = opening
        self._count += 1
        self._refresh()
        # two values: plain floats (numpy's per-call cost is most of the arithmetic on arrays of 2)
        return np.array([blink_weight(ref, o) for ref, o in zip(self._open.tolist(), opening.tolist())], np.float32)


class BlinkRows:
    """BlinkEstimator's state for many streams at once, one row per stream (its history a ring of HISTORY openings),
    through the same formulas (eye_openings, blink_weight, open_reference)."""

    def __init__(self, rows: int) -> None:
        self._history = np.zeros((rows, HISTORY, 2), np.float32)
        self._count = np.zeros(rows, np.int64)  # openings seen since the reset (the ring holds the last HISTORY)
        self._open = np.full((rows, 2), DEFAULT_OPEN, np.float32)
        self._since = np.zeros(rows, np.int64)

    def reset(self, rows) -> None:
        self._count[rows] = 0
        self._open[rows] = DEFAULT_OPEN
        self._since[rows] = 0

    def __call__(self, rows: np.ndarray, points: np.ndarray) -> np.ndarray:
        """rows (n,) distinct, points (n, 468, >=2) -> (n, 2) blink weights in [0, 1]."""
        opening = eye_openings(points)
        self._history[rows, self._count[rows] % HISTORY] = opening
        self._count[rows] += 1
        self._since[rows] += 1
        due = rows[(np.minimum(self._count[rows], HISTORY) >= REFRESH) & (self._since[rows] >= REFRESH)]
        full = due[self._count[due] >= HISTORY]
        if len(full):
            self._open[full] = open_reference(self._history[full], axis=1)
        for row in due[self._count[due] < HISTORY]:
            self._open[row] = open_reference(self._history[row, :self._count[row]])
        self._since[due] = 0
        return blink_weight(self._open[rows].astype(np.float64), opening.astype(np.float64)).astype(np.float32)
