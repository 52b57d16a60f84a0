"""The few operations the describe formulas need beyond + - * /, for one stream or for many at once.

Each describe formula (gaze, blinks, the emotion's context, the head's angles) is written once and runs on plain
floats for one stream (FaceDescriber, `facebridge run`: numpy's per-call cost would be most of the arithmetic on a
handful of values) or on numpy arrays with one value per stream (DescribeRows, `facebridge serve`: one call for a
whole pass). The arithmetic is the same IEEE float64 either way, so one face gives the same numbers on both paths.
These helpers pick the float or the array form of what differs: clipping, min/max, a choice, and math's functions.
"""
from __future__ import annotations

import math

import numpy as np


def clip(v, lo: float, hi: float):
    """v clipped to [lo, hi]; NaN stays NaN."""
    if isinstance(v, np.ndarray):
        return np.minimum(np.maximum(v, lo), hi)
    return lo if v < lo else (hi if v > hi else v)


def maximum(a, b):
    """The larger of a and b; of floats, as Python's max(a, b) (a where they tie or a is NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return b if b > a else a


def minimum(a, b):
    """The smaller of a and b; of floats, as Python's min(a, b) (a where they tie or a is NaN)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return b if b < a else a


def where(cond, a, b):
    """a where cond holds, else b."""
    if isinstance(cond, np.ndarray):
        return np.where(cond, a, b)
    return a if cond else b


def hypot(x, y):
    return np.hypot(x, y) if isinstance(x, np.ndarray) else math.hypot(x, y)


def atan2(y, x):
    return np.arctan2(y, x) if isinstance(y, np.ndarray) else math.atan2(y, x)


def cos(x):
    return np.cos(x) if isinstance(x, np.ndarray) else math.cos(x)


def sin(x):
    return np.sin(x) if isinstance(x, np.ndarray) else math.sin(x)


def degrees(x):
    return np.degrees(x) if isinstance(x, np.ndarray) else math.degrees(x)
