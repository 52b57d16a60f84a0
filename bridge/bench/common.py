"""What every benchmark shares: timing a call, the statistics of a list of samples, argument checks, progress
lines, a results table, the GPU probe.

Benchmarks write JSON; these helpers keep their numbers computed one way (numpy percentiles, rounded once). A bad
argument is refused by argparse before anything runs (one line, never a traceback); a benchmark says what it is
doing while it runs and ends with a table a person can read (the JSON holds everything).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from bridge.argparsing import positive_float, positive_int  # noqa: F401 (the bench options' types)
from bridge.console import exit_text  # noqa: F401 (the benches' words for a child's ending)


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
        # optional extra: torch (gpu), about 1.5 s to import
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def comma_list(allowed, what: str = "value", allow_empty: bool = False):
    """argparse type: a comma-separated list whose items are all in `allowed` (order kept, repeats dropped)."""
    def parse(text: str) -> list[str]:
        items = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        unknown = [t for t in items if t not in allowed]
        if unknown or not (items or allow_empty):
            raise argparse.ArgumentTypeError(f"unknown {what} {', '.join(map(repr, unknown)) or '(none given)'}; "
                                             f"choose from {', '.join(allowed)}")
        return items
    return parse


def cost_text(pct: float | None) -> str:
    """A measured cost for people: '+3.1%', or 'none measurable' when the difference came out at or below zero
    (run-to-run noise, never a negative cost; the JSON keeps the signed figure)."""
    if pct is None:
        return "not measured"
    return f"+{pct:g}%" if pct > 0 else "none measurable"


def table(headers: list[str], rows: list[list]) -> str:
    """A plain-text table: columns as wide as their widest cell, numbers right-aligned, None as '-'."""
    def cell(v) -> str:
        if v is None:
            return "-"
        if isinstance(v, float):
            return f"{v:.3g}" if abs(v) < 100 else f"{v:.0f}"
        return str(v)

    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    numeric = [all(isinstance(row[i], (int, float)) or row[i] is None for row in rows) for i in range(len(headers))]

    def line(values) -> str:
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths])] + [line(r) for r in cells])


UNITS = (("_ms", "ms"), ("_s", "s"), ("_pct", "%"), ("_mb", "MB"), ("_per_s", "/s"), ("fps", "fps"))


def figures_table(results: dict, limit: int = 40) -> str:
    """A table of the numbers in `results` (nested keys joined with '.', the unit read from the key's ending),
    for a benchmark without a table of its own; lists and text stay in the JSON."""
    rows = []

    def walk(prefix: str, value) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and len(rows) < limit:
            unit = next((u for end, u in UNITS if prefix.endswith(end)), "")
            rows.append([prefix, value, unit])

    walk("", results)
    return table(["figure", "value", "unit"], rows) if rows else ""
