"""`facebridge bench engines`: every shipped model and the face pipeline on every available backend, side by side.

Sections of the JSON:
  environment  what ran where: GPU, libraries, which backends were usable and why not
  models       per model x backend: batch 1 and batched latency (median, p99) and throughput; PyTorch eager
               (onnx2torch) where torch is installed, the baseline the TensorRT literature compares against
  pipeline     the coordinator's FacePipeline per backend, one stream, frames from the bundled sample clip
  multistream  (GPU) how many concurrent 30-fps streams of the batched face pipeline are served at p99 <= 20 ms
  trt_builds   TensorRT(-RTX) engine build time per model and whether a second build hits the cache
"""
from __future__ import annotations

import gc
import os
import sys
import tempfile
import time

import numpy as np

from bridge.engines.select import AUTO_ORDER, check_available
from bridge.engines.shipped import (NOT_BUILDABLE, frames_as_input, sample_frames, shipped_models,
                                    value_range_of)

P99_LIMIT_MS = 20.0
FPS = 30.0


def add_arguments(p) -> None:
    p.add_argument("--backends", default="all", help="comma list of backends, or 'all' available (default)")
    p.add_argument("--models", default="all", help="comma list of shipped model names (default: all)")
    p.add_argument("--batch", type=int, default=0, help="batched size (default 32 on CPU, 256 on GPU)")
    p.add_argument("--seconds", type=float, default=0.6, help="time per measurement")
    p.add_argument("--threads", type=int, default=0, help="CPU inference threads (default: all cores)")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch eager baseline")
    p.add_argument("--torch-devices", default="cpu,cuda", help="where to run the PyTorch eager baseline")
    p.add_argument("--sections", default="models,pipeline,multistream,builds",
                   help="which sections to run, in this order (results are saved after each)")
    p.add_argument("--precisions", default="fp32", help="multi-stream precisions, e.g. fp32,fp16")
    p.add_argument("--runners", default="auto",
                   help="multi-stream model runners, e.g. torch-cuda,onnxruntime-cuda (auto: every one usable here)")
    p.add_argument("--no-pipeline", action="store_true", help="skip the whole-pipeline section")
    p.add_argument("--no-builds", action="store_true", help="skip the TensorRT-RTX build section")
    p.add_argument("--multistream", choices=("auto", "on", "off"), default="auto",
                   help="run the multi-stream search (auto: when a CUDA GPU and onnxruntime-gpu are present)")
    p.add_argument("--max-streams", type=int, default=2048)
    p.add_argument("--first-streams", type=int, default=256, help="first stream count tried (then doubled)")
    p.add_argument("--graph-limit", type=int, default=4096, help="largest batch bucket captured as a CUDA graph")
    p.add_argument("--stream-seconds", type=float, default=2.0, help="measured seconds per stream count")
    p.add_argument("--torch-compile", choices=("on", "off"), default="on",
                   help="torch-cuda runners: Inductor-fused kernels (on, the product default) or eager kernels")
    p.add_argument("--frames-from", default="gpu,host,host-async",
                   help="multi-stream frame sources: gpu (decoded on the GPU), host (uploaded from pinned memory "
                        "when the pass starts), host-async (uploaded on a copy stream as each frame arrives)")


def _stats(samples_ms: list[float], batch: int) -> dict:
    a = np.asarray(samples_ms)
    return {"batch": batch, "runs": len(a), "median_ms": round(float(np.median(a)), 4),
            "p99_ms": round(float(np.percentile(a, 99)), 4),
            "items_per_s": round(batch * 1000.0 / float(np.median(a)), 1)}


def measure(fn, batch: int, seconds: float, warmup: int = 3, min_runs: int = 10) -> dict:
    for _ in range(warmup):
        fn()
    samples, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end or len(samples) < min_runs:
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000.0)
        if len(samples) > 20000:
            break
    return _stats(samples, batch)


def _torch_cuda():
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def environment() -> dict:
    from bridge.engines.gpu import probe_gpu

    probe = probe_gpu()
    env = {"gpu": probe.gpu.describe() if probe.gpu else None, "gpu_reason": probe.reason or None,
           "cpu_count": os.cpu_count(), "backends": {}}
    for name in AUTO_ORDER:
        a = check_available(name)
        env["backends"][name] = {"usable": a.ok, "reason": a.reason}
    for module in ("onnxruntime", "openvino", "torch", "tensorrt", "tensorrt_rtx_bindings"):
        try:
            env[module] = __import__(module).__version__
        except Exception:
            env[module] = None
    return env


# --- per-model section ------------------------------------------------------------------------------------
def _model_input(model, batch: int) -> tuple[str, np.ndarray]:
    from bridge.engines.onnxruntime_backend import OrtSession

    spec = OrtSession(model.path).inputs[0]
    item = tuple(spec.shape[1:])
    frames = frames_as_input(item, value_range_of(model.entry))
    reps = -(-batch // len(frames))
    return spec.name, np.concatenate([frames] * reps)[:batch]


def _is_image_model(model) -> bool:
    from bridge.engines.onnxruntime_backend import OrtSession

    inputs = OrtSession(model.path).inputs
    return len(inputs) == 1 and len(inputs[0].shape) == 4 and inputs[0].shape[1] in (1, 3)


def bench_model_host(model, backend: str, batches: list[int], seconds: float, threads: int) -> dict:
    from bridge.engines import create_session

    session = create_session(model.path, backend, threads=threads, strict=True)
    name, _ = _model_input(model, 1)
    out = {}
    for batch in batches:
        _, x = _model_input(model, batch)
        out[f"batch_{batch}"] = measure(lambda: session.run({name: x}), batch, seconds)
    return out


def bench_model_cuda_device(model, batches: list[int], seconds: float) -> dict:
    """ORT CUDA with device-resident input/output (IOBinding); batch 1 also with a CUDA graph."""
    import torch

    from bridge.engines.face_runners import OrtCudaRunner

    out = {}
    for graphs in (False, True):
        runner = OrtCudaRunner(model.path, max(batches), cuda_graphs=graphs, buckets=batches, graph_limit=1)
        for batch in batches if not graphs else [1]:
            _, x = _model_input(model, batch)
            xd = torch.from_numpy(x).cuda()

            def call():
                runner(xd)
                torch.cuda.synchronize()

            out[f"batch_{batch}{'_cuda_graph' if graphs else ''}"] = measure(call, batch, seconds)
    return out


def bench_model_torch(model, batches: list[int], seconds: float, device: str, threads: int) -> dict:
    import onnx
    import torch
    from onnx2torch import convert

    torch.set_num_threads(threads)
    net = convert(onnx.load(str(model.path))).eval().to(device)
    out = {}
    for batch in batches:
        _, x = _model_input(model, batch)
        xt = torch.from_numpy(x).to(device)

        def call():
            with torch.inference_mode():
                net(xt)
            if device == "cuda":
                torch.cuda.synchronize()

        out[f"batch_{batch}"] = measure(call, batch, seconds)
    return out


def models_section(args, backends: list[str], on_gpu: bool) -> dict:
    threads = args.threads or os.cpu_count() or 1
    wanted = None if args.models == "all" else set(args.models.split(","))
    results = {}
    for model in shipped_models():
        if wanted and model.name not in wanted:
            continue
        if not _is_image_model(model):
            results[model.name] = {"skipped": "audio model: timed by `facebridge bench lipsync`"}
            continue
        row = results.setdefault(model.name, {})
        for backend in backends:
            cpu_batch = args.batch or 32
            batches = [1, args.batch or 256] if backend.startswith(("onnxruntime-cuda", "tensorrt")) else [1, cpu_batch]
            _say(f"{model.name}: {backend}")
            try:
                row[backend] = bench_model_host(model, backend, batches, args.seconds, threads)
                if backend == "onnxruntime-cuda":
                    row["onnxruntime-cuda-iobinding"] = bench_model_cuda_device(model, batches, args.seconds)
            except Exception as e:  # one backend failing one model is a result, not a crash
                row[backend] = {"error": str(e)[:300]}
        if not args.no_torch:
            devices = [d for d in args.torch_devices.split(",") if d == "cpu" or (d == "cuda" and on_gpu)]
            for device in devices:
                batches = [1, (args.batch or 256) if device == "cuda" else (args.batch or 32)]
                _say(f"{model.name}: torch eager {device}")
                try:
                    row[f"torch-eager-{device}"] = bench_model_torch(model, batches, args.seconds, device, threads)
                except Exception as e:
                    row[f"torch-eager-{device}"] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
    return results


# --- whole pipeline, one stream -----------------------------------------------------------------------------
def pipeline_section(backends: list[str], seconds: float, threads: int) -> dict:
    try:
        from bridge.pipeline import FacePipeline, PipelineOptions
        from bridge.sources.base import Frame
    except ImportError as e:
        return {"error": f"pipeline not available ({e})"}
    import cv2

    frames = [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in sample_frames(16)]
    results = {}
    for backend in backends:
        _say(f"pipeline: {backend}")
        try:
            pipeline = FacePipeline(PipelineOptions(backend=backend, threads=threads))
        except Exception as e:
            results[backend] = {"error": str(e)[:300]}
            continue
        counter = iter(range(10 ** 9))

        def one():
            i = next(counter)
            pipeline.process(Frame(frames[i % len(frames)], i, time.time(), time.perf_counter()))

        results[backend] = measure(one, 1, seconds * 2, warmup=5)
    return results


# --- multi-stream ---------------------------------------------------------------------------------------------
def _warm_up(tracker, frames_dev, num_streams: int) -> None:
    """Detect every stream once, then one tracked pass: trials measure the steady state."""
    import torch

    all_streams = torch.arange(num_streams, device=frames_dev.device)
    first_frames = frames_dev[all_streams * 37 % frames_dev.shape[0]]
    for _ in range(num_streams):  # a captured pass detects a few lost streams at a time
        tracker.step(first_frames, all_streams)
        if bool(tracker.tracked.all()):
            break
    tracker.step(first_frames, all_streams)
    if frames_dev.device.type == "cuda":
        torch.cuda.synchronize()


def _trial_setup(tracker_for, frames_dev, num_streams: int, seed: int):
    """A trial's tracker, random source, stream phases (evenly spread over one frame period), per-stream frame
    counters and the pinned host rows the results come back to."""
    import torch

    from bridge.engines.batched_face import RESULT_WIDTH

    result_host = torch.empty((num_streams, RESULT_WIDTH), dtype=torch.float32)
    if frames_dev.device.type == "cuda":
        result_host = result_host.pin_memory()
    phases = np.arange(num_streams) / num_streams / FPS
    return (tracker_for(num_streams), np.random.default_rng(seed), phases, np.zeros(num_streams, dtype=np.int64),
            result_host)


def _trial(num_streams: int, seconds: float, tracker, latencies, batch_sizes, pass_ms) -> dict:
    lat = np.asarray(latencies)
    return {"streams": num_streams, "frames": int(len(lat)),
            "fps_served": round(len(lat) / seconds, 1),
            "p50_ms": round(float(np.percentile(lat, 50)), 2) if len(lat) else None,
            "p99_ms": round(float(np.percentile(lat, 99)), 2) if len(lat) else None,
            "mean_batch": round(float(np.mean(batch_sizes)), 1) if batch_sizes else 0,
            "passes": len(batch_sizes), "detector_items": tracker.detector_runs,
            "pass_ms_p50": round(float(np.median(pass_ms)), 2) if pass_ms else None,
            "pass_ms_max": round(float(np.max(pass_ms)), 2) if pass_ms else None}


def _lose_some(tracker, ready: np.ndarray, rng, fraction: float, device) -> None:
    """Occlusions: a few streams lose the face and need the detector again."""
    import torch

    lost = ready[rng.random(len(ready)) < fraction]
    if len(lost):
        tracker.tracked[torch.from_numpy(lost).to(device)] = False


def simulate_streams(tracker_for, frames_dev, num_streams: int, seconds: float, from_host=None,
                     redetect_fraction: float = 0.01, seed: int = 0) -> dict:
    """N streams at 30 fps with evenly spread phases; each pass takes every frame that has arrived (one per
    stream) and runs the batched pipeline; latency = results back on the host - frame arrival.
    from_host: the frames in pinned host memory, uploaded one copy each when their pass starts."""
    import torch

    tracker, rng, phases, next_k, result_host = _trial_setup(tracker_for, frames_dev, num_streams, seed)
    period, n_frames, device = 1.0 / FPS, frames_dev.shape[0], frames_dev.device
    on_gpu = device.type == "cuda"
    sync = torch.cuda.current_stream().synchronize if on_gpu else (lambda: None)
    staging = torch.empty((num_streams, *frames_dev.shape[1:]), dtype=torch.uint8, device=device)
    _warm_up(tracker, frames_dev, num_streams)
    latencies, batch_sizes, pass_ms, warm = [], [], [], 0.5
    start = time.perf_counter() + 0.01
    while True:
        now = time.perf_counter() - start
        if now > seconds + warm:
            break
        arrivals = phases + next_k * period
        ready = np.nonzero(arrivals <= now)[0]
        if len(ready) == 0:
            time.sleep(max(0.0, min(arrivals.min() - now, 0.001)))
            continue
        streams = torch.from_numpy(ready).to(device, non_blocking=True)
        if redetect_fraction > 0:
            _lose_some(tracker, ready, rng, redetect_fraction, device)
        frame_idx = (ready * 37 + next_k[ready]) % n_frames  # each stream walks the clip frame by frame
        batch = tracker.frame_buffer(len(ready))  # the captured pass's own input buffer, if it has one
        batch = staging[: len(ready)] if batch is None else batch
        if from_host is not None:  # each stream's decoded frame sits in pinned host memory: one upload each
            for row, k in enumerate(frame_idx):
                batch[row].copy_(from_host[k], non_blocking=True)
        else:  # frames decoded on the GPU (NVDEC) already sit there
            torch.index_select(frames_dev, 0, torch.from_numpy(frame_idx).to(device), out=batch)
        t_pass = time.perf_counter()
        tracker.step(batch, streams)
        result_host[: len(ready)].copy_(tracker.packed_results(streams), non_blocking=True)
        sync()
        done = time.perf_counter() - start
        if now >= warm:
            latencies.extend((done - arrivals[ready]) * 1000.0)
            batch_sizes.append(len(ready))
            pass_ms.append((done + start - t_pass) * 1000.0)
        next_k[ready] += 1
    return _trial(num_streams, seconds, tracker, latencies, batch_sizes, pass_ms)


def simulate_streams_uploading_on_arrival(tracker_for, frames_dev, num_streams: int, seconds: float, from_host,
                                          redetect_fraction: float = 0.01, seed: int = 0) -> dict:
    """As `simulate_streams` with frames in pinned host memory, but each frame is uploaded the moment it arrives,
    on a copy stream into its stream's slot on the device, while the GPU runs the current pass (copy engines and
    compute overlap); a pass then gathers its frames from the slots with one device-side copy. The host never
    blocks on a pass: it polls the pass's event and keeps uploading meanwhile."""
    import contextlib

    import torch

    tracker, rng, phases, next_k, result_host = _trial_setup(tracker_for, frames_dev, num_streams, seed)
    period, n_frames, device = 1.0 / FPS, frames_dev.shape[0], frames_dev.device
    on_gpu = device.type == "cuda"
    slots = torch.empty((num_streams, *frames_dev.shape[1:]), dtype=torch.uint8, device=device)
    staging = torch.empty_like(slots)
    copy_stream = torch.cuda.Stream() if on_gpu else None
    uploaded = np.zeros(num_streams, dtype=bool)  # this stream's next frame already sits in its slot
    in_pass = np.zeros(num_streams, dtype=bool)  # its frame is in the running pass (the next has not arrived)
    _warm_up(tracker, frames_dev, num_streams)
    latencies, batch_sizes, pass_ms, warm = [], [], [], 0.5
    running = None  # the pass in flight: (event, ready streams, their arrivals, start time, counted)
    start = time.perf_counter() + 0.01
    while True:
        now = time.perf_counter() - start
        if running is not None and (not on_gpu or running[0].query()):
            done = time.perf_counter() - start
            _event, ready, arrivals, t_pass, counted = running
            if counted:
                latencies.extend((done - arrivals) * 1000.0)
                batch_sizes.append(len(ready))
                pass_ms.append((done - t_pass) * 1000.0)
            next_k[ready] += 1
            in_pass[ready] = False
            running = None
        if now > seconds + warm and running is None:
            break
        arrivals = phases + next_k * period
        arrived = (arrivals <= now) & ~in_pass
        new = np.nonzero(arrived & ~uploaded)[0]
        if len(new):
            with torch.cuda.stream(copy_stream) if on_gpu else contextlib.nullcontext():
                for stream, k in zip(new, (new * 37 + next_k[new]) % n_frames):
                    slots[stream].copy_(from_host[k], non_blocking=True)
            uploaded[new] = True
        ready = np.nonzero(arrived)[0]
        if running is None and len(ready):
            if on_gpu:
                torch.cuda.current_stream().wait_stream(copy_stream)
            streams = torch.from_numpy(ready).to(device, non_blocking=True)
            if redetect_fraction > 0:
                _lose_some(tracker, ready, rng, redetect_fraction, device)
            batch = tracker.frame_buffer(len(ready))
            batch = staging[: len(ready)] if batch is None else batch
            torch.index_select(slots, 0, streams, out=batch)
            t_pass = time.perf_counter() - start
            tracker.step(batch, streams)
            result_host[: len(ready)].copy_(tracker.packed_results(streams), non_blocking=True)
            event = None
            if on_gpu:
                event = torch.cuda.Event()
                event.record()
            running = (event, ready, arrivals[ready], t_pass, now >= warm)
            in_pass[ready] = True
            uploaded[ready] = False
        elif not len(new):
            time.sleep(0.0002)
    return _trial(num_streams, seconds, tracker, latencies, batch_sizes, pass_ms)


# batch buckets: a pass runs the next bucket up, so steps of about 1.25x keep the padding waste under 25 %
STREAM_BUCKETS = [1, 8, 32, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048,
                  2560, 3072, 4096]


def multistream_runners(args, gpu_ort: bool) -> list[str]:
    """Which runner kinds the multi-stream section compares: --runners, or every GPU kind usable here."""
    if args.runners != "auto":
        return args.runners.split(",")
    kinds = ["torch-cuda"] if _torch_cuda() is not None else []
    return kinds + (["onnxruntime-cuda"] if gpu_ort else []) or ["onnxruntime"]


def multistream_section(args, runner: str = "torch-cuda", precision: str = "fp32") -> dict:
    import torch

    from bridge.engines.batched_face import BatchedFaceTracker
    from bridge.engines.face_runners import make_runners

    max_n = args.max_streams
    device = "cuda" if runner.endswith("-cuda") else "cpu"
    t0 = time.perf_counter()
    buckets = [b for b in STREAM_BUCKETS if b < max_n] + [max_n]
    whole_pass = runner == "torch-cuda"  # torch runners can be captured with the glue around them
    if device == "cuda":
        runners = make_runners(runner, max_n, fp16=precision == "fp16", buckets=buckets, graph_limit=args.graph_limit,
                               tracked_pass_graphs=whole_pass, compile=args.torch_compile == "on",
                               report=_say)
    else:
        runners = make_runners(runner, max_n, threads=args.threads or os.cpu_count() or 1)
    setup_s = time.perf_counter() - t0
    frames = np.stack(sample_frames(300, step=1))  # the whole clip: consecutive frames, real motion
    frames_dev = torch.from_numpy(frames).to(device)
    host = torch.from_numpy(frames)
    host = host.pin_memory() if device == "cuda" else host
    hw = frames.shape[1:3]

    def tracker_for(n: int):
        tracker = BatchedFaceTracker(n, hw, runners, device=device)
        if whole_pass:
            gc.collect()  # the last trial's graphs and their memory pool
            torch.cuda.empty_cache()
            tracker.capture_cuda_graphs(buckets)
        return tracker

    out = {"runner": runner, "tracked_pass_cuda_graphs": whole_pass, "setup_seconds": round(setup_s, 1),
           "compiled_models": sorted(role for role, r in runners.items() if getattr(r, "compiled", False)),
           "precision": precision, "frame_size": list(hw), "p99_limit_ms": P99_LIMIT_MS, "fps_per_stream": FPS,
           "redetect_fraction": 0.01}
    modes = {"gpu": ("frames_on_gpu", None, simulate_streams), "host": ("frames_from_host", host, simulate_streams),
             "host-async": ("frames_from_host_uploaded_on_arrival", host, simulate_streams_uploading_on_arrival)}

    def checkpoint(partial: dict) -> None:  # every trial on disk as it ends: a run cut short keeps what it measured
        if getattr(args, "json", None):
            from bridge.fsutil import atomic_write_json

            partial = {**partial, "compiled_graphs": _compiled_graphs()}
            atomic_write_json(args.json + ".partial", {"multistream_in_progress": {f"{runner}-{precision}": partial}})

    unknown = sorted(set(args.frames_from.split(",")) - set(modes))
    if unknown:
        raise SystemExit(f"bench engines: unknown --frames-from {','.join(unknown)}; choose from {','.join(modes)}")
    for mode, from_host, simulate in (modes[m] for m in args.frames_from.split(",")):
        trials = []
        lo, hi, n = 0, None, args.first_streams
        while n <= max_n:  # grow until p99 breaks, then bisect
            r = simulate(tracker_for, frames_dev, n, args.stream_seconds, from_host)
            trials.append(r)
            checkpoint({**out, mode: {"trials": trials}})
            _say(f"multistream {mode}: {n} streams p99 {r['p99_ms']} ms, mean batch {r['mean_batch']}")
            if r["p99_ms"] is not None and r["p99_ms"] <= P99_LIMIT_MS and r["fps_served"] >= 0.97 * n * FPS:
                lo, n = n, n * 2
            else:
                hi = n
                break
        hi = hi or max_n + 1
        while hi - lo > max(32, lo // 16) and lo < max_n:
            mid = (lo + hi) // 2
            r = simulate(tracker_for, frames_dev, mid, args.stream_seconds, from_host)
            trials.append(r)
            checkpoint({**out, mode: {"trials": trials}})
            _say(f"multistream {mode}: {mid} streams p99 {r['p99_ms']} ms, mean batch {r['mean_batch']}")
            ok = r["p99_ms"] is not None and r["p99_ms"] <= P99_LIMIT_MS and r["fps_served"] >= 0.97 * mid * FPS
            lo, hi = (mid, hi) if ok else (lo, mid)
        out[mode] = {"max_streams_at_p99_limit": lo, "trials": trials}
    if device == "cuda":
        out["gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        out["compiled_graphs"] = _compiled_graphs()
        out["stage_ms"] = stage_breakdown(tracker_for, frames_dev, [b for b in (64, 256, 512) if b <= max_n])
    return out


def _compiled_graphs() -> int:
    """Graphs torch.compile made in this process: one per compiled model while the batch stays dynamic as meant;
    more means a model compiled again for some batch size (slow starts, and a sign to investigate)."""
    from torch._dynamo.utils import counters

    return counters["stats"].get("unique_graphs", 0)


def stage_breakdown(tracker_for, frames_dev, batches: list[int]) -> dict:
    """Where the time goes in one pass, per batch size: each model as the captured pass runs it (its eager call on
    float32 crops, captured as one CUDA graph, so no launch overhead counts), then the whole pass. The models run on
    fewer items than the pass holds frames except iris (two eyes a face); the detector runs only on the few frames
    that lost their face, and what the models leave of the whole pass is crops, features and bookkeeping."""
    import torch

    out = {}
    for batch in batches:
        tracker = tracker_for(batch)
        streams = torch.arange(batch, device="cuda")
        frames = frames_dev[streams % frames_dev.shape[0]]
        for _ in range(3):
            tracker.step(frames, streams)
        timings = {}
        for role, runner in tracker.runners.items():
            n = batch * 2 if role == "iris" else batch
            shape = {"detector": (3, 128, 128), "landmarks": (3, 192, 192), "iris": (3, 64, 64),
                     "emotion": (1, 64, 64), "expression": (944,)}[role]
            timings[role] = _model_ms(runner, torch.rand((n, *shape), device="cuda"))
        timings["whole_tracked_pass"] = _cuda_ms(lambda: tracker.step(frames, streams))
        tracked = sum(timings[role] for role in ("landmarks", "iris", "emotion", "expression") if role in timings)
        timings["rest_of_pass"] = round(timings["whole_tracked_pass"] - tracked, 4)
        out[f"batch_{batch}"] = timings
    return out


def _model_ms(runner, x) -> float:
    if not hasattr(runner, "eager"):  # ORT CUDA: its own call is how the pass runs it
        return _cuda_ms(lambda: runner(x))
    from bridge.engines.torch_runner import capture_graphs

    graph, _ = capture_graphs([len(x)], lambda _: runner.eager(x))[len(x)]
    return _cuda_ms(graph.replay)


def _cuda_ms(fn, runs: int = 20) -> float:
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(runs):
        fn()
    end.record()
    torch.cuda.synchronize()
    return round(start.elapsed_time(end) / runs, 4)


# --- TensorRT-RTX builds ----------------------------------------------------------------------------------------
def builds_section() -> dict:
    from bridge.engines.cache import EngineCache
    from bridge.engines.prepare import prepare_engine, spec_for
    from bridge.engines.trt_flavour import load_flavour

    out = {}
    for flavour_name in ("tensorrt-rtx", "tensorrt"):
        try:
            flavour = load_flavour(flavour_name)
        except Exception as e:
            out[flavour_name] = {"error": str(e)}
            continue
        with tempfile.TemporaryDirectory() as tmp:
            cache = EngineCache(tmp)
            rows = {}
            for model in shipped_models():
                if model.name in NOT_BUILDABLE:
                    rows[model.name] = {"skipped": NOT_BUILDABLE[model.name]}
                    continue
                try:
                    spec = spec_for(model, model.path.read_bytes(), flavour, opt_level=3, max_batch=64)
                    first = prepare_engine(model, flavour, cache, spec, report=lambda line: None)
                    t0 = time.perf_counter()
                    second = prepare_engine(model, flavour, cache, spec, report=lambda line: None)
                    rows[model.name] = {"target": spec.target, "build_s": round(first.seconds, 2),
                                        "engine_mb": round(len(first.plan) / 1e6, 2),
                                        "second_build_cache_hit": second.cache_hit,
                                        "cache_hit_s": round(time.perf_counter() - t0, 3)}
                except Exception as e:
                    rows[model.name] = {"error": str(e)[:300]}
            out[flavour_name] = {"version": flavour.version, "models": rows}
    return out


def _say(line: str) -> None:
    print(f"bench engines: {line}", file=sys.stderr, flush=True)


def run(args) -> dict:
    from bridge.fsutil import atomic_write_json

    env = environment()
    usable = [b for b, a in env["backends"].items() if a["usable"]]
    backends = usable if args.backends == "all" else [b for b in args.backends.split(",") if b in usable]
    on_gpu = _torch_cuda() is not None
    threads = args.threads or os.cpu_count() or 1
    gpu_ort = on_gpu and env["backends"]["onnxruntime-cuda"]["usable"]
    results = {"environment": env, "threads": threads}
    for section in args.sections.split(","):
        started = time.perf_counter()
        if section == "models":
            results["models"] = models_section(args, backends, on_gpu)
        elif section == "pipeline" and not args.no_pipeline:
            results["pipeline"] = pipeline_section(backends, args.seconds, threads)
        elif section == "multistream" and (args.multistream == "on" or (args.multistream == "auto" and on_gpu)):
            results["multistream"] = {f"{r}-{p}": multistream_section(args, r, p)
                                      for r in multistream_runners(args, gpu_ort) for p in args.precisions.split(",")}
        elif section == "builds" and not args.no_builds:
            results["trt_builds"] = builds_section()
        else:
            continue
        _say(f"{section} done in {time.perf_counter() - started:.0f} s")
        if getattr(args, "json", None):  # keep what is done if a later section is cut short
            atomic_write_json(args.json + ".partial", {"results": results})
    return results
