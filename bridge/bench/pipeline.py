"""`facebridge bench pipeline`: per-stage and end-to-end speed on the bundled sample.

Runs the pipeline over pre-decoded sample frames (video decoding is not counted) in tracking mode, as a live
session would, in two configurations:
- one_core: process() frame after frame in one thread, one inference thread per model;
- two_stage: track() and describe() in two threads joined by a one-slot queue (what `facebridge run` does on
  2+ cores); latency is from the start of track() to the end of describe(), so it includes the wait in the
  queue when the describe thread is saturated.
With --monitor it measures the monitor's cost on the running session instead (bridge/bench/monitor_cost.py).
Pin the process to one core for a one-core figure: `taskset -c 0 facebridge bench pipeline --configs one_core`
(pinning from outside also sizes the backends' thread pools to that core), or pass --core N. `cores` in the JSON is
the number of cores the process was allowed to use. --against-mediapipe adds a side-by-side run of one_core against
MediaPipe FaceMesh on the same frames and core, taking turns (side_by_side.py).
"""
from __future__ import annotations

import argparse
import os
import queue
import threading
import time

import numpy as np

from bridge.bench import monitor_cost
from bridge.bench.common import comma_list, percentiles, positive_int, reporter, table
from bridge.bench.side_by_side import PERIODIC, mediapipe_python, run_side_by_side
from bridge.engines.select import BACKENDS
from bridge.errors import FaceBridgeError

CONFIGS = ("one_core", "two_stage")
PROGRESS_EVERY = 50  # frames between progress lines
_say = reporter("pipeline")


def add_arguments(p) -> None:
    p.add_argument("--frames", type=positive_int, default=300, help="frames to time per configuration (default 300)")
    p.add_argument("--backend", default="auto", choices=BACKENDS,
                   help="inference backend (default auto: what `run` uses)")
    p.add_argument("--cpu-precision", choices=("f32", "bf16"), default="f32",
                   help="CPU backends' inference precision (default f32, as `run`)")
    p.add_argument("--landmarks", choices=("auto", "attention", "mesh+iris"), default="auto",
                   help="face landmark models (default auto: what `run` uses)")
    p.add_argument("--configs", type=comma_list(CONFIGS, "configuration", allow_empty=True), default=list(CONFIGS),
                   help=f"configurations to run, comma-separated (default {','.join(CONFIGS)}; '' with "
                        "--against-mediapipe runs only the side-by-side)")
    p.add_argument("--core", type=int, metavar="N", help="pin this process (and MediaPipe's) to CPU core N")
    p.add_argument("--against-mediapipe", action="store_true",
                   help="also run one_core side by side with MediaPipe 0.10.21 FaceMesh (`make mediapipe-venv`)")
    p.add_argument("--mediapipe-python", metavar="PATH", help="MediaPipe's Python (default .venv-mediapipe)")
    p.add_argument("--mediapipe-variants", default="refine",
                   help="refine (478 points with iris, default), plain (468), or both: refine,plain")
    p.add_argument("--pace", type=_frame_rate, default=0.0, metavar="FPS",
                   help="side by side: each side takes its frames at this rate, idle between them as with a camera "
                        "(default 0: frame after frame; 30 is a webcam, the core cooling between frames)")
    p.add_argument("--without", type=comma_list(PERIODIC, "periodic work", allow_empty=True), default=[],
                   help="side by side, a diagnosis: leave out periodic work (emotion, identity: the emotion model on "
                        "every 4th frame, the identity refresh's steps every 30 frames) to see the spread of the "
                        "frames without it; such a run no longer streams everything")
    p.add_argument("--inline-deferred", action="store_true",
                   help="side by side, the A/B: run the work a frame leaves for after it is handed on (its emotion "
                        "model, identity refresh steps: the runner's run_deferred) inside the next frame instead; "
                        "the frames stream the same either way")
    monitor_cost.add_arguments(p)


def _frame_rate(text: str) -> float:
    """--pace: 0 (frame after frame) or a frame rate up to 1000."""
    try:
        fps = float(text)
    except ValueError:
        fps = -1.0
    if not (fps == 0 or 1 <= fps <= 1000):
        raise argparse.ArgumentTypeError(f"{text} is not a frame rate: give 0 (frame after frame) or 1-1000 (30: a "
                                         "webcam)")
    return fps


def _percentiles(values) -> dict:
    median, p99 = percentiles(values, (50, 99))
    return {"median_ms": median, "p99_ms": p99, "mean_ms": round(float(np.mean(values)), 3)}


def _progress(config: str, done: int, n: int, report) -> None:
    if report is not None and done % PROGRESS_EVERY == 0 and done < n:
        report(f"{config}: {done}/{n} frames")


def _one_core(pipeline, frames, n, report=None) -> tuple[list, list, float]:
    outs, totals = [], []
    t_start = time.perf_counter()
    for i in range(n):
        t0 = time.perf_counter()
        outs.append(pipeline.process(frames[i % len(frames)]))
        totals.append((time.perf_counter() - t0) * 1000.0)
        _progress("one_core", i + 1, n, report)
    return outs, totals, time.perf_counter() - t_start


def _two_stage(pipeline, frames, n, report=None) -> tuple[list, list, float]:
    handoff: queue.Queue = queue.Queue(maxsize=1)
    starts: dict[int, float] = {}
    outs, totals = [], []

    def describe_all():
        for _ in range(n):
            tracked = handoff.get()
            out = pipeline.describe(tracked)
            totals.append((time.perf_counter() - starts[id(tracked)]) * 1000.0)
            outs.append(out)
            _progress("two_stage", len(outs), n, report)

    worker = threading.Thread(target=describe_all)
    t_start = time.perf_counter()
    worker.start()
    for i in range(n):
        t0 = time.perf_counter()
        tracked = pipeline.track(frames[i % len(frames)])
        starts[id(tracked)] = t0
        handoff.put(tracked)
    worker.join()
    return outs, totals, time.perf_counter() - t_start


def run(args) -> dict:
    if args.monitor:
        return monitor_cost.run(args)
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.pipeline import FacePipeline, PipelineOptions
    from bridge.sources.files import SampleSource

    if args.core is not None:
        if not hasattr(os, "sched_setaffinity"):
            raise FaceBridgeError("--core needs Linux (sched_setaffinity)", "pin the process with your OS's tool")
        try:
            os.sched_setaffinity(0, {args.core})
        except (OSError, ValueError) as e:
            raise FaceBridgeError(f"--core {args.core} cannot be used ({getattr(e, 'strerror', None) or e})",
                                  f"give a core between 0 and {(os.cpu_count() or 1) - 1}") from None
    with SampleSource(realtime=False, loop=True) as src:
        frames = [src.read() for _ in range(min(args.frames, 300))]
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    results, side = {}, None
    if args.against_mediapipe:
        python = mediapipe_python(args.mediapipe_python)
        _say("side by side with MediaPipe: loading the models")
        pipeline = FacePipeline(PipelineOptions(backend=args.backend, threads=1, cpu_precision=args.cpu_precision,
                                                landmarks=args.landmarks))
        side = run_side_by_side(pipeline, frames, args.frames, python, args.mediapipe_variants.split(","),
                                pace_fps=args.pace, without=tuple(args.without), deferred=not args.inline_deferred)
        # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
        from bridge.engines.fastest import CHOSEN

        side |= {"cores": cores, "backends": _backends(pipeline), "landmarks": pipeline.landmark_path,
                 "landmarks_reason": pipeline.landmark_reason,
                 "cpu_backend_choice": {m: {"backend": c.backend, "reason": c.reason, "median_ms": c.timings_ms}
                                        for m, c in CHOSEN.items()}}
    configs = args.configs.split(",") if isinstance(args.configs, str) else args.configs
    for config in (c for c in configs if c):
        runner = {"one_core": _one_core, "two_stage": _two_stage}[config]
        _say(f"{config}: loading the models")
        pipeline = FacePipeline(PipelineOptions(backend=args.backend, threads=1, cpu_precision=args.cpu_precision,
                                                landmarks=args.landmarks))
        backend = pipeline.landmarker.session.backend_name
        precision = getattr(pipeline.landmarker.session, "precision", None)
        runner(pipeline, frames, min(10, len(frames)))  # warm-up: first detection, allocators
        pipeline.reset()
        detector_runs = pipeline.detector_runs
        _say(f"{config}: timing {args.frames} frames on {backend}")
        outs, totals, wall = runner(pipeline, frames, args.frames, _say)
        stage_ms: dict[str, list[float]] = {}
        for out in outs:
            for k, v in out.latencies_ms.items():
                stage_ms.setdefault(k, []).append(v)
        results[config] = {
            "backend": backend,
            "landmarks": pipeline.landmark_path,
            "precision": precision,  # what the landmark model's session really computes in (CPU backends)
            "cores": cores,
            "frames": args.frames,
            "fps": round(args.frames / wall, 1),
            "face_found_ratio": round(sum(o.face_found for o in outs) / len(outs), 4),
            "detector_runs": pipeline.detector_runs - detector_runs,
            "per_frame": _percentiles(totals),
            "stages": {k: _percentiles(v) | {"runs": len(v)} for k, v in stage_ms.items()},
        }
        r = results[config]
        _say(f"{config}: {r['fps']} fps, per frame median {r['per_frame']['median_ms']} ms")
    out = {"source": "sample", "cpu_count": os.cpu_count(), "configurations": results}
    return out | ({"side_by_side": side} if side else {})


def _backends(pipeline) -> dict:
    """Which backend and precision each model's session runs on."""
    stages = {"detector": pipeline.detector, "far detector": pipeline.far_detector, "landmarks": pipeline.landmarker,
              "iris": pipeline.iris, "emotion": pipeline.emotion, "expression": pipeline.expression}
    return {name: f"{stage.session.backend_name} {getattr(stage.session, 'precision', '')}".strip()
            for name, stage in stages.items() if getattr(stage, "session", None) is not None}


def summary(results: dict) -> str | None:
    """The results table: one row per configuration (None for --monitor, which prints its own line)."""
    if "configurations" not in results:
        return None
    rows = [[name, f"{r['backend']} {r['precision'] or ''}".strip(), r["cores"], r["frames"], r["fps"],
             r["per_frame"]["median_ms"], r["per_frame"]["p99_ms"], round(100 * r["face_found_ratio"])]
            for name, r in results["configurations"].items()]
    return table(["configuration", "backend", "cores", "frames", "fps", "median ms", "p99 ms", "face %"], rows)
