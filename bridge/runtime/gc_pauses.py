"""Python's garbage collector in a long-running server: the heap built at start-up put out of its reach, and every
collection's pause counted.

A full (generation-2) collection walks every object the collector tracks, and it holds the interpreter lock while
it does: in a `facebridge serve` process on torch-cuda runners (torch imported, the passes compiled and captured)
one took 576 ms in the middle of a measured count on the H200, every stream of that process stalled behind it, and
the start-up's own were 580-730 ms (docs/PERFORMANCE.md, "Serving many streams"). The objects it walks are nearly
all the
start-up's, which live as long as the process. `settle()` collects once and freezes what is left (`gc.freeze`:
moved to a permanent generation no collection visits), then collects the now empty old generation once more so
that the collector's "old generation grew by a quarter" trigger counts from what is not frozen: later full
collections are then small and frequent instead of rare and long. Serve settles after start-up and after each
batched service it builds (a new frame size compiles and captures), a front end after building the describe step
once (serve.warm_describe); cyclic garbage made before a settle is collected by it, so nothing is left frozen that
was unreachable.

`GcPauses` records each collection's pause per generation (gc.callbacks), so a server can say what its collector
cost it (GetServeStatus, the status line, `facebridge bench serve`'s JSON) and warns on a long one.
"""
from __future__ import annotations

import gc
import logging
import threading
import time

log = logging.getLogger(__name__)

LONG_PAUSE_MS = 50.0  # a pause at least this long is logged (at most one line every WARN_EVERY_S)
WARN_EVERY_S = 10.0
COUNTED_OVER_MS = 10.0  # GetServeStatus's gc_pauses_over_10ms


def settle() -> float:
    """Collect, freeze what survives, and reset the full-collection trigger; -> the milliseconds it took."""
    t0 = time.perf_counter()
    gc.collect()
    gc.freeze()
    gc.collect()  # walks only what is not frozen (about nothing), and counts the old generation from there
    return (time.perf_counter() - t0) * 1000.0


class GcPauses:
    """Every collection's pause, per generation, from `start()` to `close()`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = [0, 0, 0]
        self.total_ms = [0.0, 0.0, 0.0]
        self.max_ms = [0.0, 0.0, 0.0]
        self.over = 0  # pauses of at least COUNTED_OVER_MS, any generation
        self._started_at = 0.0
        self._warned_at = -1e9
        self._installed = False

    def start(self) -> GcPauses:
        if not self._installed:
            gc.callbacks.append(self._callback)
            self._installed = True
        return self

    def close(self) -> None:
        if self._installed:
            gc.callbacks.remove(self._callback)
            self._installed = False

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_at = time.perf_counter()
            return
        ms = (time.perf_counter() - self._started_at) * 1000.0
        generation = min(int(info.get("generation", 2)), 2)
        with self._lock:
            self.count[generation] += 1
            self.total_ms[generation] += ms
            self.max_ms[generation] = max(self.max_ms[generation], ms)
            self.over += ms >= COUNTED_OVER_MS
        now = time.monotonic()
        if ms >= LONG_PAUSE_MS and now - self._warned_at >= WARN_EVERY_S:
            self._warned_at = now
            log.warning("a generation-%d garbage collection paused this process for %.0f ms (every stream "
                        "waited); if it repeats, report it with the output of `facebridge -v serve`", generation, ms)

    def stats(self) -> dict:
        """{"gc_collections": [gen0, gen1, gen2], "gc_pause_ms_total", "gc_pause_ms_max", "gc_pauses_over_10ms"}"""
        with self._lock:
            return {"gc_collections": list(self.count), "gc_pause_ms_total": round(sum(self.total_ms), 3),
                    "gc_pause_ms_max": round(max(self.max_ms), 3), "gc_pauses_over_10ms": self.over}
