"""Where one captured pass of the batched tracker spends its GPU time (issue 17), on an NVIDIA GPU.

  python tools/measure/gpu_pass_parts.py [--streams 16,64] [--json OUT]

For each pass size: the whole pass as `facebridge serve` replays it (the CUDA graph of the tracked pass, detector
rows included), with its branches on side streams and without (the tracker's `branches`: replay time each way, and
the largest difference between the two passes' results from the same state, which must be 0), then the same pass
run eagerly under torch.profiler with each model in a range of its own: the GPU time of each model's kernels
(detector rows, landmarks, irises, expression regressor, emotion) and of the crops and arithmetic between them
("glue"), launch gaps excluded, and the pass's largest kernels. Graph replays: medians of 50 after 10 warm-up ones;
the profile: 20 eager passes after 5.
"""
from __future__ import annotations

import argparse
import json
import sys

import numpy as np


def _median_ms(torch, fn, reps: int = 50) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return round(float(np.median(times)), 3)


def _branches_vs_chain(torch, tracker, buckets, batch, index) -> dict:
    """The captured pass with its branches on side streams and as one chain: replay time each way, interleaved,
    and how far apart the two passes' results are from the same state (the same kernels: they must not be)."""
    state = ("center", "size", "angle", "_tracked_all")

    def results_from(saved):
        for name, value in zip(state, saved):
            getattr(tracker, name).copy_(value)
        tracker.step(batch, index)
        return tracker.packed_results(index).clone()

    graphs = {}
    for branches in (True, False):
        tracker.release_cuda_graphs()
        tracker.branches = branches
        tracker.capture_cuda_graphs(buckets)
        graphs[branches] = (tracker._graphs, tracker._frame_buffer, tracker._streams_buffer)
    saved = [getattr(tracker, name).clone() for name in state]
    times = {True: [], False: []}
    results = {}
    for _ in range(3):  # interleaved: clocks and other tenants hit both alike
        for branches in (True, False):
            tracker._graphs, tracker._frame_buffer, tracker._streams_buffer = graphs[branches]
            tracker._frame_buffer[:len(index)].copy_(batch)
            times[branches].append(_median_ms(torch, lambda: tracker.step(tracker._frame_buffer[:len(index)],
                                                                          index)))
            results[branches] = results_from(saved)
    tracker._graphs, tracker._frame_buffer, tracker._streams_buffer = graphs[True]
    tracker.branches = True
    return {"branches_ms": times[True], "chain_ms": times[False],
            "max_result_difference": float((results[True] - results[False]).abs().max())}


def measure(n: int) -> dict:
    import torch

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService
    from bridge.runtime.serve import GPU_BUCKETS

    frames = sample_frames(n, step=1)
    hw = frames[0].shape[:2]
    buckets = [b for b in GPU_BUCKETS if b < n] + [n]
    runners = make_runners("torch-cuda", n, fp16=True, buckets=buckets, tracked_pass_graphs=True)
    with MultiStreamFaceService(n, hw, runners, device="cuda", graph_buckets=buckets) as service:
        for k in range(4):  # every stream tracked
            for f in [service.submit(i, frames[(i + k) % n]) for i in range(n)]:
                f.result(timeout=300)
        tracker = service.tracker
        batch = tracker.frame_buffer(n)
        batch.copy_(torch.from_numpy(np.stack(frames)).cuda())
        index = torch.arange(n, device="cuda")
        out = {"streams": n, "tracked": int(tracker.tracked[:n].sum()), "detect_slots": tracker.detect_slots.get(n),
               "graph_pass_ms": _median_ms(torch, lambda: tracker.step(batch, index))}
        out["branches_vs_chain"] = _branches_vs_chain(torch, tracker, buckets, batch, index)

        # the pass run eagerly under the profiler, each model in a range of its own: the GPU time of its kernels
        # (launch gaps excluded, which an eager pass has and the graph has not); the rest is the glue between
        from torch.profiler import ProfilerActivity, profile, record_function

        wrapped = {}
        for role, runner in tracker.runners.items():
            def ranged(x, _role=role, _eager=runner.eager):
                with record_function(f"model:{_role}"):
                    return _eager(x)
            wrapped[role] = (runner, runner.eager)
            runner.eager = ranged
        reps = 20
        with torch.inference_mode():
            for _ in range(5):
                tracker._pass(batch, index, tracker.detect_slots.get(n), eager=True)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                for _ in range(reps):
                    tracker._pass(batch, index, tracker.detect_slots.get(n), eager=True)
                torch.cuda.synchronize()
        for runner, eager in wrapped.values():
            runner.eager = eager
        try:
            # on the GPU timeline each model's range is a span that holds its kernels (and, eager, the gaps
            # between them): each kernel is given to the span it starts in, the rest is the glue between models
            gpu = [e for e in prof.events() if e.device_type.name == "CUDA"]
            spans = [(e.time_range.start, e.time_range.end, e.name.split(":", 1)[1]) for e in gpu
                     if e.name.startswith("model:")]
            kernels = [e for e in gpu if not e.name.startswith("model:")]
            per_model: dict[str, float] = {}
            for k in kernels:
                role = next((r for lo, hi, r in spans if lo <= k.time_range.start < hi), "glue")
                per_model[role] = per_model.get(role, 0.0) + k.time_range.elapsed_us()
            out["eager_pass_kernel_ms"] = {"all kernels": round(sum(per_model.values()) / 1000.0 / reps, 3),
                                           "kernels a pass": len(kernels) // reps,
                                           **{r: round(v / 1000.0 / reps, 3) for r, v in per_model.items()}}
            counts: dict[str, list] = {}
            for k in kernels:
                c = counts.setdefault(k.name[:80], [0.0, 0])
                c[0] += k.time_range.elapsed_us()
                c[1] += 1
            out["top_kernels_ms"] = [(name, round(t / 1000.0 / reps, 3), c // reps)
                                     for name, (t, c) in sorted(counts.items(), key=lambda kv: -kv[1][0])[:15]]
        except (AttributeError, TypeError) as e:  # another torch's profiler API: keep its own table
            out["profile_error"] = repr(e)
            out["profile_table"] = prof.key_averages().table(sort_by="self_cuda_time_total", row_limit=30)

    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", default="16,64")
    p.add_argument("--json", default=None)
    args = p.parse_args()
    results = []
    for n in (int(s) for s in args.streams.split(",")):
        results.append(measure(n))
        print(json.dumps(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"passes": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
