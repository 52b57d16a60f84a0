"""What every benchmark shares: timing a call, the statistics of a list of samples, progress lines, the GPU probe.

Benchmarks write JSON; these helpers keep their numbers computed one way (numpy percentiles, rounded once).
"""
from __future__ import annotations

import sys
import time

import numpy as np


def percentiles(values, qs=(50, 99), digits: int = 3) -> list[float | None]:
    """The `qs` percentiles of `values`, rounded; None for each when there are no values."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return [None] * len(qs)
    return [round(float(v), digits) for v in np.percentile(a, qs)]


def timing_stats(samples_ms, batch: int) -> dict:
    """Runs, median and p99 of per-call milliseconds, and the items a second a batch of `batch` gives."""
    median, p99 = percentiles(samples_ms, (50, 99), digits=4)
    return {"batch": batch, "runs": len(samples_ms), "median_ms": median, "p99_ms": p99,
            "items_per_s": round(batch * 1000.0 / median, 1) if median else None}


def measure(fn, batch: int, seconds: float, warmup: int = 3, min_runs: int = 10) -> dict:
    """Call `fn` for `seconds` (at least `min_runs` times, after `warmup` calls) and summarise with timing_stats."""
    for _ in range(warmup):
        fn()
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < min_runs:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
        if len(samples) > 20000:
            break
    return timing_stats(samples, batch)


def reporter(bench: str):
    """A progress printer for one benchmark: report(line) writes 'bench NAME: line' to stderr at once."""
    def report(line: str) -> None:
        print(f"bench {bench}: {line}", file=sys.stderr, flush=True)
    return report


def torch_cuda():
    """torch when it is installed and sees a CUDA GPU, else None."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None
