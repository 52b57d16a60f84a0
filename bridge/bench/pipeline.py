"""`facebridge bench pipeline`: per-stage and end-to-end speed on the bundled sample.

Runs the pipeline over pre-decoded sample frames (so video decoding is not counted), in tracking mode as a live
session would, with ONNX Runtime on 1 and on 2 threads per model.
"""
from __future__ import annotations

import os
import time

import numpy as np


def add_arguments(p) -> None:
    p.add_argument("--frames", type=int, default=300, help="frames to time per configuration (default 300)")
    p.add_argument("--threads", default="1,2", help="ORT threads per model to try, comma-separated (default 1,2)")
    p.add_argument("--backend", default="onnxruntime", help="inference backend (default onnxruntime)")


def _percentiles(values) -> dict:
    a = np.asarray(values, dtype=np.float64)
    return {"median_ms": round(float(np.median(a)), 3), "p99_ms": round(float(np.percentile(a, 99)), 3),
            "mean_ms": round(float(a.mean()), 3)}


def run(args) -> dict:
    from bridge.pipeline import FacePipeline, PipelineOptions
    from bridge.sources.files import SampleSource

    with SampleSource(realtime=False, loop=True) as src:
        frames = [src.read() for _ in range(min(args.frames, 300))]
    results = {}
    for threads in [int(t) for t in args.threads.split(",")]:
        pipeline = FacePipeline(PipelineOptions(backend=args.backend, threads=threads))
        for f in frames[:10]:  # warm-up: first detection, allocator growth
            pipeline.process(f)
        stage_ms: dict[str, list[float]] = {}
        totals, found = [], 0
        t_start = time.perf_counter()
        for i in range(args.frames):
            frame = frames[i % len(frames)]
            t0 = time.perf_counter()
            out = pipeline.process(frame)
            totals.append((time.perf_counter() - t0) * 1000.0)
            found += out.face_found
            for k, v in out.latencies_ms.items():
                stage_ms.setdefault(k, []).append(v)
        wall = time.perf_counter() - t_start
        results[f"threads_{threads}"] = {
            "ort_threads_per_model": threads,
            "frames": args.frames,
            "fps": round(args.frames / wall, 1),
            "face_found_ratio": round(found / args.frames, 4),
            "detector_runs": pipeline.detector_runs,
            "per_frame": _percentiles(totals),
            "stages": {k: _percentiles(v) | {"runs": len(v)} for k, v in stage_ms.items()},
        }
        print(f"threads={threads}: {results[f'threads_{threads}']['fps']} fps, per frame median "
              f"{results[f'threads_{threads}']['per_frame']['median_ms']} ms, p99 "
              f"{results[f'threads_{threads}']['per_frame']['p99_ms']} ms")
    return {"source": "sample", "cpu_count": os.cpu_count(), "configurations": results}
