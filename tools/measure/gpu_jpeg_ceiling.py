"""How many of the sample's JPEG frames a second the GPU's decoders take, whatever serves them.

P processes (each its own CUDA context; under MPS if its daemon runs) each decode batches of B frames with
torchvision's batched nvJPEG call (`decode_jpeg` of a list, as bridge/multistream/decode.py does), one batch after
another, synchronised each time, for --seconds after a warm-up. Reports images a second in all, each process's
CPU per image and its batches' wall p50 / p99; with nvidia-smi on the path, the hardware JPEG engines' utilisation
(dmon's `jpg`) over each configuration. The serve front end needs 30 images a second per stream, so the ceiling
here bounds the streams one GPU can decode, before any tracking or gRPC.

    python3 tools/measure/gpu_jpeg_ceiling.py --procs 1,2,4,8 --batch 16,64 --seconds 8 --json OUT.json
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from host_load import read_dmon  # noqa: E402 - tools/measure/host_load.py, beside this script

from bridge.fsutil import atomic_write_json  # noqa: E402 - the checkout's, run as a script


def sample_jpegs(quality: int) -> list[bytes]:
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg

    return [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR), quality) for f in sample_frames(60, step=1)]


def _decoder(jpegs, batch, warmup, seconds, ready, go, out):
    import torch
    from torchvision.io import decode_jpeg

    raws = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    k = 0

    def one():
        nonlocal k
        items = [raws[(k + i) % len(raws)] for i in range(batch)]
        k += batch
        frames = decode_jpeg(items, device="cuda")
        torch.cuda.synchronize()
        return frames

    one()  # the decoder's state and the context made before the clock starts
    ready.put(os.getpid())
    go.wait()
    t_end = time.time() + warmup + seconds
    measure_from = time.time() + warmup
    walls, n, cpu0, t0 = [], 0, None, None
    while time.time() < t_end:
        if cpu0 is None and time.time() >= measure_from:
            cpu0, t0 = time.process_time(), time.perf_counter()
        t = time.perf_counter()
        one()
        if cpu0 is not None:
            walls.append((time.perf_counter() - t) * 1000.0)
            n += batch
    out.put({"images": n, "seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - cpu0,
             "batch_ms": walls})


def measure(jpegs, procs: int, batch: int, warmup: float, seconds: float) -> dict:
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [ctx.Process(target=_decoder, args=(jpegs, batch, warmup, seconds, ready, go, out))
               for _ in range(procs)]
    for w in workers:
        w.start()
    dmon, dmon_path = None, f"/tmp/jpeg-ceiling-dmon-{os.getpid()}.txt"
    try:
        waiting = len(workers)  # each imports torch and makes its context and decoder first
        while waiting:
            try:
                ready.get(timeout=1.0)
                waiting -= 1
            except queue.Empty:
                dead = [w.exitcode for w in workers if w.exitcode is not None]
                if dead:
                    raise RuntimeError(f"a decoding process exited ({dead[0]}) before it was ready: "
                                       "this needs torch and torchvision with CUDA and a GPU") from None
        go.set()
        time.sleep(warmup)
        try:
            with open(dmon_path, "w") as log:
                dmon = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-d", "1", "-o", "DT"], stdout=log)
        except FileNotFoundError:
            dmon = None
        results = [out.get(timeout=120 + seconds) for _ in workers]
    finally:
        for w in workers:
            w.join(timeout=30)
            if w.is_alive():
                w.kill()
        if dmon is not None:
            dmon.terminate()
            dmon.wait(timeout=10)
    jpg = [row["jpg"] for row in read_dmon(dmon_path) if "jpg" in row] if dmon is not None else []
    if os.path.exists(dmon_path):
        os.remove(dmon_path)
    images = sum(r["images"] for r in results)
    seconds_mean = statistics.mean(r["seconds"] for r in results)
    walls = sorted(w for r in results for w in r["batch_ms"])
    return {
        "processes": procs, "batch": batch, "images": images,
        "images_per_s": round(images / seconds_mean, 1),
        "cpu_ms_per_image": round(1000.0 * sum(r["cpu_s"] for r in results) / images, 4),
        "batch_ms_p50": round(walls[len(walls) // 2], 3),
        "batch_ms_p99": round(walls[min(len(walls) - 1, int(0.99 * len(walls)))], 3),
        "jpg_util_percent": jpg,
        "jpg_util_median": statistics.median(jpg) if jpg else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--procs", default="1,2,4,8")
    p.add_argument("--batch", default="16,64")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--quality", type=int, default=80)
    p.add_argument("--json", required=True)
    args = p.parse_args()
    jpegs = sample_jpegs(args.quality)
    rows = []
    for batch in [int(b) for b in args.batch.split(",")]:
        for procs in [int(x) for x in args.procs.split(",")]:
            row = measure(jpegs, procs, batch, args.warmup, args.seconds)
            print(json.dumps({k: v for k, v in row.items() if k != "jpg_util_percent"}), flush=True)
            rows.append(row)
    import torch
    import torchvision

    doc = {"jpeg_bytes_mean": int(statistics.mean(len(j) for j in jpegs)), "jpeg_quality": args.quality,
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "device": torch.cuda.get_device_name(0), "rows": rows}
    atomic_write_json(args.json, doc)


if __name__ == "__main__":
    main()
