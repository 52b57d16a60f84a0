"""The multi-stream section of `facebridge bench engines`: how many concurrent 30-fps face streams one GPU serves
through the batched tracker at p99 <= 20 ms, with frames already on the GPU, copied from the host per pass, or
uploaded from the host as they arrive; and where the time of one pass goes."""
from __future__ import annotations

import contextlib
import gc
import os
import time

import numpy as np

from bridge.bench.common import percentiles, reporter, torch_cuda
from bridge.engines.shipped import sample_frames
from bridge.fsutil import atomic_write_json
from bridge.multistream.runners import make_runners
from bridge.multistream.torch_runner import capture_graphs
from bridge.multistream.tracker import RESULT_WIDTH, BatchedFaceTracker

P99_LIMIT_MS = 20.0
FPS = 30.0


_say = reporter("engines")


def _warm_up(tracker, frames_dev, num_streams: int) -> None:
    """Detect every stream once, then one tracked pass: trials measure the steady state."""
    # optional extra: torch (gpu), about 1.5 s to import
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
    # optional extra: torch (gpu), about 1.5 s to import
    import torch

    result_host = torch.empty((num_streams, RESULT_WIDTH), dtype=torch.float32)
    if frames_dev.device.type == "cuda":
        result_host = result_host.pin_memory()
    phases = np.arange(num_streams) / num_streams / FPS
    return (tracker_for(num_streams), np.random.default_rng(seed), phases, np.zeros(num_streams, dtype=np.int64),
            result_host)


def _trial(num_streams: int, seconds: float, tracker, latencies, batch_sizes, pass_ms) -> dict:
    """seconds: how long the measured part ran (at least the asked length: it ends after a pass it counted)."""
    lat = np.asarray(latencies)
    p50, p99 = percentiles(lat, (50, 99), digits=2)
    return {"streams": num_streams, "frames": int(len(lat)), "seconds": round(seconds, 3),
            "fps_served": round(len(lat) / seconds, 1),
            "p50_ms": p50, "p99_ms": p99,
            "mean_batch": round(float(np.mean(batch_sizes)), 1) if batch_sizes else 0,
            "passes": len(batch_sizes), "detector_items": tracker.detector_runs,
            "pass_ms_p50": round(float(np.median(pass_ms)), 2) if pass_ms else None,
            "pass_ms_max": round(float(np.max(pass_ms)), 2) if pass_ms else None}


def _lose_some(tracker, ready: np.ndarray, rng, fraction: float, device) -> None:
    """Occlusions: a few streams lose the face and need the detector again."""
    # optional extra: torch (gpu), about 1.5 s to import
    import torch

    lost = ready[rng.random(len(ready)) < fraction]
    if len(lost):
        tracker.tracked[torch.from_numpy(lost).to(device)] = False


def simulate_streams(tracker_for, frames_dev, num_streams: int, seconds: float, from_host=None,
                     redetect_fraction: float = 0.01, seed: int = 0) -> dict:
    """N streams at 30 fps with evenly spread phases; each pass takes every frame that has arrived (one per
    stream) and runs the batched pipeline; latency = results back on the host - frame arrival.
    from_host: the frames in pinned host memory, uploaded one copy each when their pass starts."""
    # optional extra: torch (gpu), about 1.5 s to import
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
        if now > seconds + warm and batch_sizes:  # a busy machine may not fit a whole pass: measure one at least
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
    return _trial(num_streams, now - warm, tracker, latencies, batch_sizes, pass_ms)


def simulate_streams_uploading_on_arrival(tracker_for, frames_dev, num_streams: int, seconds: float, from_host,
                                          redetect_fraction: float = 0.01, seed: int = 0) -> dict:
    """As `simulate_streams` with frames in pinned host memory, but each frame is uploaded the moment it arrives,
    on a copy stream into its stream's slot on the device, while the GPU runs the current pass (copy engines and
    compute overlap); a pass then gathers its frames from the slots with one device-side copy. The host never
    blocks on a pass: it polls the pass's event and keeps uploading meanwhile."""
    # optional extra: torch (gpu), about 1.5 s to import
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
        if now > seconds + warm and running is None and batch_sizes:  # as above: one counted pass at least
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
    return _trial(num_streams, now - warm, tracker, latencies, batch_sizes, pass_ms)


# batch buckets: a pass runs the next bucket up, so steps of about 1.25x keep the padding waste under 25 %
STREAM_BUCKETS = [1, 8, 32, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048,
                  2560, 3072, 4096]


def multistream_runners(args, gpu_ort: bool) -> list[str]:
    """Which runner kinds the multi-stream section compares: --runners, or every GPU kind usable here."""
    if args.runners != "auto":
        return args.runners.split(",")
    kinds = ["torch-cuda"] if torch_cuda() is not None else []
    return kinds + (["onnxruntime-cuda"] if gpu_ort else []) or ["onnxruntime"]


def multistream_section(args, runner: str = "torch-cuda", precision: str = "fp32") -> dict:
    # optional extra: torch (gpu), about 1.5 s to import
    import torch

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
            partial = {**partial, "compiled_graphs": _compiled_graphs()}
            atomic_write_json(args.json + ".partial", {"multistream_in_progress": {f"{runner}-{precision}": partial}})

    unknown = sorted(set(args.frames_from.split(",")) - set(modes))
    if unknown:
        raise SystemExit(f"bench engines: unknown --frames-from {','.join(unknown)}; choose from {','.join(modes)}")

    def search(mode: str, from_host, simulate) -> dict:
        """Double the stream count until p99 breaks, then bisect: the most streams served at p99 within the limit."""
        trials = []

        def served(n: int) -> bool:  # one trial of n streams, on disk as it ends
            r = simulate(tracker_for, frames_dev, n, args.stream_seconds, from_host)
            trials.append(r)
            checkpoint({**out, mode: {"trials": trials}})
            _say(f"multistream {mode}: {n} streams p99 {r['p99_ms']} ms, mean batch {r['mean_batch']}")
            return r["p99_ms"] is not None and r["p99_ms"] <= P99_LIMIT_MS and r["fps_served"] >= 0.97 * n * FPS

        lo, hi, n = 0, None, args.first_streams
        while n <= max_n:
            if not served(n):
                hi = n
                break
            lo, n = n, n * 2
        hi = hi or max_n + 1
        while hi - lo > max(32, lo // 16) and lo < max_n:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if served(mid) else (lo, mid)
        return {"max_streams_at_p99_limit": lo, "trials": trials}

    for m in args.frames_from.split(","):
        mode, from_host, simulate = modes[m]
        out[mode] = search(mode, from_host, simulate)
    if device == "cuda":
        out["gpu_memory_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
        out["compiled_graphs"] = _compiled_graphs()
        out["stage_ms"] = stage_breakdown(tracker_for, frames_dev, [b for b in (64, 256, 512) if b <= max_n])
    return out


def _compiled_graphs() -> int:
    """Graphs torch.compile made in this process: one per compiled model while the batch stays dynamic as meant;
    more means a model compiled again for some batch size (slow starts, and a sign to investigate)."""
    # optional extra: torch (gpu), about 1.5 s to import
    from torch._dynamo.utils import counters

    return counters["stats"].get("unique_graphs", 0)


def stage_breakdown(tracker_for, frames_dev, batches: list[int]) -> dict:
    """Where the time goes in one pass, per batch size: each model as the captured pass runs it (its eager call on
    float32 crops, captured as one CUDA graph, so no launch overhead counts), then the whole pass. The models run on
    fewer items than the pass holds frames except iris (two eyes a face); the detector runs only on the few frames
    that lost their face, and what the models leave of the whole pass is crops, features and bookkeeping."""
    # optional extra: torch (gpu), about 1.5 s to import
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
            timings[role] = _model_ms(runner, torch.rand((n, *runner.item_shape), device="cuda"))
        timings["whole_tracked_pass"] = _cuda_ms(lambda: tracker.step(frames, streams))
        tracked = sum(timings[role] for role in ("landmarks", "iris", "emotion", "expression") if role in timings)
        timings["rest_of_pass"] = round(timings["whole_tracked_pass"] - tracked, 4)
        out[f"batch_{batch}"] = timings
    return out


def _model_ms(runner, x) -> float:
    if not hasattr(runner, "eager"):  # ORT CUDA: its own call is how the pass runs it
        return _cuda_ms(lambda: runner(x))

    graph, _ = capture_graphs([len(x)], lambda _: runner.eager(x))[len(x)]
    return _cuda_ms(graph.replay)


def _cuda_ms(fn, runs: int = 20) -> float:
    # optional extra: torch (gpu), about 1.5 s to import
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
