"""numba's njit for the house's compiled loops: cached on disk where numba finds a folder it can write, else compiled
in memory (numba alone refuses to import a cached function it cannot cache: "no locator available").

Used for small per-frame loops where numpy's cost is its per-call overhead (the attention mesh's custom ops, the
head pose refine, the expression result: bridge/expression/result.py's functions compiled as written). numba is
optional (the `litert` extra): callers check `available()` (or load their loops through `warm_kernels`) and keep a
path without it.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging

log = logging.getLogger(__name__)


def available() -> bool:
    """Whether numba can be imported here (without importing it: that alone costs about half a second)."""
    return importlib.util.find_spec("numba") is not None


def compiled(f):
    """njit(cache=True, nogil=True, fastmath=False), or without the cache where none can be written."""
    # optional extra: litert
    from numba import njit

    try:
        return njit(cache=True, nogil=True, fastmath=False)(f)
    except RuntimeError:  # "cannot cache function ...: no locator available"
        return njit(nogil=True, fastmath=False)(f)


def warm_kernels(module: str, wanted: bool | None, instead: str):
    """The module of compiled loops `module` (it has `warm()`), compiled and warm, where numba is installed (wanted
    None) or where asked (True); None where not, or where its loops fail to compile (said once in the log, with what
    runs `instead`): a broken numba costs the speed-up, never the stream."""
    if not (available() if wanted is None else wanted):
        return None
    try:
        kernels = importlib.import_module(module)
        kernels.warm()
    except Exception as e:  # noqa: BLE001 - see the docstring
        log.warning("%s is unavailable (%s); %s", module, e, instead)
        return None
    return kernels
