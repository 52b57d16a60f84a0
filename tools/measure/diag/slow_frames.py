"""Where one-core FacePipeline's slowest frames come from, with nothing else running (issue 18): the sample's frames
back to back on one core, each frame's CPU (process and thread), its stages' CPU, the deferred call after it, the
identity steps, garbage collections and the core's steal time; prints the slowest 1% with what they exceeded.

  python tools/measure/diag/slow_frames.py [--core N] [--frames N]
"""
import argparse
import gc
import os
import sys
import time

import numpy as np

from bridge.pipeline import FacePipeline, PipelineOptions
from bridge.sources.files import SampleSource

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from host_load import FIELDS, read_stat  # noqa: E402 - tools/measure/host_load.py, beside this folder


def steal_ticks(core: int) -> int:
    """The hypervisor's steal time of that core so far (/proc/stat, clock ticks; 0 where the core is not listed)."""
    return read_stat().get(f"cpu{core}", [0] * len(FIELDS))[FIELDS.index("steal")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--core", type=int, default=1)
    ap.add_argument("--frames", type=int, default=900)
    args = ap.parse_args()
    os.sched_setaffinity(0, {args.core})
    with SampleSource(realtime=False, loop=True) as src:
        frames = [src.read() for _ in range(300)]
    pipeline = FacePipeline(PipelineOptions(backend="auto", threads=1))
    for f in frames[:30]:  # warm-up, as bench pipeline's side-by-side does
        pipeline.process(f)
    pipeline.reset()
    pipeline.stage_cpu = True
    collections, now = [], {"frame": 0, "start": 0.0}

    def on_gc(phase, info):
        if phase == "start":
            now["start"] = time.process_time()
        else:
            collections.append((now["frame"], info["generation"], (time.process_time() - now["start"]) * 1e3))

    gc.callbacks.append(on_gc)
    expression, rows = pipeline.expression, []
    for i in range(args.frames):
        now["frame"] = i
        work, steal = expression.identity_work, steal_ticks(args.core)
        c0, t0 = time.process_time(), time.thread_time()
        pipeline.process(frames[i % len(frames)])
        cpu, thread = (time.process_time() - c0) * 1e3, (time.thread_time() - t0) * 1e3
        d0 = time.process_time()
        pipeline.run_deferred()
        rows.append({"cpu": cpu, "thread": thread, "deferred": (time.process_time() - d0) * 1e3,
                     "stages": dict(pipeline.last_stage_cpu_ms), "identity": expression.identity_work - work,
                     "steal": steal_ticks(args.core) - steal})
    gc.callbacks.remove(on_gc)
    cpu = np.array([r["cpu"] for r in rows])
    median = float(np.median(cpu))
    stage_median = {k: float(np.median([r["stages"][k] for r in rows if k in r["stages"]]))
                    for k in {k for r in rows for k in r["stages"]}}
    print(f"{len(rows)} frames on core {args.core}: CPU median {median:.3f} ms, p99 {np.percentile(cpu, 99):.3f} "
          f"({np.percentile(cpu, 99) / median:.3f}x), {len(collections)} collections, steal ticks "
          f"{sum(r['steal'] for r in rows)}")
    print("stage medians (ms):", {k: round(v, 3) for k, v in sorted(stage_median.items())})
    for i in sorted(range(len(rows)), key=lambda i: -rows[i]["cpu"])[:max(9, len(rows) // 100)]:
        r = rows[i]
        excess = {k: round(v - stage_median[k], 2) for k, v in r["stages"].items() if v - stage_median[k] > 0.15}
        print(f"frame {i} (sample {i % len(frames)}): {r['cpu']:.2f} ms (thread {r['thread']:.2f}), over the "
              f"stage medians {excess}, deferred before it {rows[i - 1]['deferred'] if i else 0.0:.2f} ms, "
              f"identity steps {r['identity']}, steal {r['steal']}, collections "
              f"{[c[1:] for c in collections if c[0] == i]}")


if __name__ == "__main__":
    main()
