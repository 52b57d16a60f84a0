"""numba's njit for the house's compiled loops: cached on disk where numba finds a folder it can write, else compiled
in memory (numba alone refuses to import a cached function it cannot cache: "no locator available").

Used for small per-frame loops where numpy's cost is its per-call overhead (the attention mesh's custom ops, the
head pose refine). numba is optional (the `litert` extra): callers check `available()` and keep a path without it.
"""
from __future__ import annotations

import importlib.util


def available() -> bool:
    """Whether numba can be imported here (without importing it: that alone costs about half a second)."""
    return importlib.util.find_spec("numba") is not None


def compiled(f):
    """njit(cache=True, nogil=True, fastmath=False), or without the cache where none can be written."""
    from numba import njit

    try:
        return njit(cache=True, nogil=True, fastmath=False)(f)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True, fastmath=False)(f)
