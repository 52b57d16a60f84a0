"""How many of the sample's JPEG frames a second the GPU's decoders take, whatever serves them.

P processes (each its own CUDA context; under MPS if its daemon runs), each with T threads, each thread decoding
batches of B frames one after another, synchronised each time, for --seconds after a warm-up, with a decoder of
--decoder: `torchvision` (its batched nvJPEG call, `decode_jpeg` of a list: one decoder a process behind a mutex) or
`nvimgcodec` (nvImageCodec's batched decode, a Decoder a thread; bridge/multistream/decode.py serves with either).
Reports images a second in all, CPU per image (the whole process's, and the decoding threads' own: the rest is the
library's threads), its batches' wall p50 / p99, and how the nvimgcodec pixels differ from torchvision's on the same
frames; with nvidia-smi on the path, the hardware JPEG engines' utilisation (dmon's `jpg`) over each configuration.
The serve front end needs 30 images a second per stream, so the ceiling here bounds the streams one GPU can decode,
before any tracking or gRPC. --sizes: `fixed` batches of B; `varying`, B/2..B images a call in turn (as serve's
batches take what waits); `padded`, the same varying images each made up to B with a small JPEG (PAD_SIDE square).
--contend on: beside the decoding, each process keeps the GPU busy as serve's passes do (bursts of fp16 matmuls on a
normal-priority stream, CONTEND_BUSY_MS of work then CONTEND_IDLE_MS idle), so a decode's wall time shows what the
passes' kernels cost it. torchvision decodes on a stream of its own from PyTorch's pool at normal priority; the
nvimgcodec decoder here decodes on the calling thread's stream, high priority with --stream-priority high (as
serve's decoding stream). `short`: the same busy share in bursts a fifth as long (a decode that waits for the whole
burst to end, as behind a device-wide synchronisation, then waits a fifth as long; one that shares the SMs does not
change). `process`: the bursts in a process of their own (its own CUDA context: under MPS if its daemon runs, else
time-sliced with the decoders'). `gil`: no GPU work beside, but a thread of pure Python arithmetic holding the
interpreter lock as serve's other engine threads do (with --switch-interval-ms: how long a holder keeps the lock
while the decoding thread waits for it). --pinned on: torchvision reads the JPEGs from page-locked host memory (its
copies to the device then DMA, not staged through the driver's pageable path). --verify: every frame decoded in
the measured time is compared with the same JPEG decoded alone before the clock started (same process, same
decoder): `wrong_frames` counts those that differ, `wrong_max_abs` says by how much (a decoder that serves garbage
under MPS or beside other work shows here; serve lost 2.5-3.8% of its faces with `--decode-processes` under MPS).

    python3 tools/measure/gpu_jpeg_ceiling.py --decoder torchvision,nvimgcodec --procs 1,2 --threads 1,2 \
        --batch 16,64 --seconds 8 --json OUT.json
"""
from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing as mp
import os
import queue
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the checkout
from host_load import read_dmon  # noqa: E402 - tools/measure/host_load.py, beside this script

from bridge.fsutil import atomic_write_json  # noqa: E402 - the checkout's, run as a script


def sample_jpegs(quality: int) -> list[bytes]:
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg

    return [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR), quality) for f in sample_frames(60, step=1)]


PAD_SIDE = 64
CONTEND_BUSY_MS, CONTEND_IDLE_MS = 10.0, 5.0  # a pass of a few hundred frames, then the gap to the next
CONTENDS = ("off", "on", "short", "process", "gil")
SHORT = 5  # `short` bursts: CONTEND_BUSY_MS / SHORT busy, CONTEND_IDLE_MS / SHORT idle


def _pad_jpeg() -> bytes:
    from bridge.serving.client import encode_jpeg

    return encode_jpeg(np.full((PAD_SIDE, PAD_SIDE, 3), 128, np.uint8))


def _batch_decoder(decoder: str, jpegs: list[bytes], priority: int = 0, pinned: bool = False):
    """one(k, batch, pad_to) -> that batch of frames decoded on the GPU (made up to pad_to images with a small JPEG),
    synchronised (a thread's own decoder and stream, of `priority`: -1 high, 0 normal; pinned: torchvision's inputs
    in page-locked memory)."""
    import torch

    stream = torch.cuda.Stream(priority=priority)
    if decoder == "torchvision":
        from torchvision.io import decode_jpeg

        raws = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
        pad = torch.frombuffer(bytearray(_pad_jpeg()), dtype=torch.uint8)
        if pinned:
            raws, pad = [r.pin_memory() for r in raws], pad.pin_memory()

        def one(k: int, batch: int, pad_to: int = 0):
            with torch.cuda.stream(stream):
                frames = decode_jpeg([raws[(k + i) % len(raws)] for i in range(batch)] +
                                     [pad] * max(0, pad_to - batch), device="cuda")
                stream.synchronize()
            return frames[:batch]
        return one
    from nvidia import nvimgcodec

    nv = nvimgcodec.Decoder(options=":num_cuda_streams=1")
    params = nvimgcodec.DecodeParams(apply_exif_orientation=False, color_spec=nvimgcodec.SRGB)
    raws = [np.frombuffer(j, np.uint8) for j in jpegs]
    pad = np.frombuffer(_pad_jpeg(), np.uint8)

    def one(k: int, batch: int, pad_to: int = 0):
        streams = [nvimgcodec.CodeStream(raws[(k + i) % len(raws)]) for i in range(batch)]
        streams += [nvimgcodec.CodeStream(pad)] * max(0, pad_to - batch)
        images = nv.decode(streams, params=params, cuda_stream=stream.cuda_stream)
        frames = [torch.as_tensor(image, device="cuda") for image in images[:batch]]
        stream.synchronize()
        return frames
    return one


def _contend(stop, report, scale: float = 1.0) -> None:
    """Keep the GPU busy as serve's passes do until `stop` is set: CONTEND_BUSY_MS * scale of fp16 matmuls on a
    normal-priority stream, waited for, then CONTEND_IDLE_MS * scale idle; then `report(share of the time busy)`."""
    import torch

    stream = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.float16)
    b = torch.randn_like(a)
    with torch.cuda.stream(stream):
        for _ in range(3):
            a @ b
        stream.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            a @ b
        stream.synchronize()
        count = max(1, round(CONTEND_BUSY_MS * scale / ((time.perf_counter() - t0) * 1000.0 / 20)))
        busy_s, t_start = 0.0, time.perf_counter()
        while not stop.is_set():
            t0 = time.perf_counter()
            for _ in range(count):
                a @ b
            stream.synchronize()
            busy_s += time.perf_counter() - t0
            time.sleep(CONTEND_IDLE_MS * scale / 1000.0)
        report(busy_s / max(1e-9, time.perf_counter() - t_start))


def _hold_the_lock(stop, report) -> None:
    """Pure Python arithmetic until `stop` is set: the interpreter lock taken whenever this thread may; then
    `report(share of the time it ran)`."""
    t0, cpu0 = time.perf_counter(), time.thread_time()
    while not stop.is_set():
        sum(i * i for i in range(2000))
    report((time.thread_time() - cpu0) / max(1e-9, time.perf_counter() - t0))


def _wrong(frames: list, refs: list, k: int) -> tuple[int, int]:
    """(frames that differ from their JPEG's reference decode, the largest difference) for a batch starting at k."""
    import torch

    diffs = torch.stack([(f.int() - refs[(k + i) % len(refs)].int()).abs().amax() for i, f in enumerate(frames)])
    return int((diffs > 0).sum().item()), int(diffs.max().item())


def _decoder(decoder, jpegs, batch, sizes, threads, warmup, seconds, ready, go, out, contend="off", priority=0,
             pinned=False, switch_ms=None, verify=False):
    import threading

    import torch

    if switch_ms is not None:
        sys.setswitchinterval(switch_ms / 1000.0)
    ones = [_batch_decoder(decoder, jpegs, priority, pinned) for _ in range(threads)]
    for one in ones:
        one(0, batch)  # the decoder's state and the context made before the clock starts
    refs = [ones[0](j, 1)[0].clone() for j in range(len(jpegs))] if verify else []  # each decoded alone
    wrong = []  # (frames, largest difference) of each thread
    ready.put(os.getpid())
    go.wait()
    measure_from = time.time() + warmup
    t_end = measure_from + seconds
    results = []

    def loop(one, t: int) -> None:
        walls, n, k, cpu0, bad, worst = [], 0, t * 7, None, 0, 0
        in_turn = itertools.cycle([batch] if sizes == "fixed" else
                                  [max(1, batch * (8 - j) // 8) for j in (0, 3, 1, 4, 2)])
        while time.time() < t_end:
            if cpu0 is None and time.time() >= measure_from:
                cpu0 = time.thread_time()
            size = next(in_turn)
            t0 = time.perf_counter()
            frames = one(k, size, batch if sizes == "padded" else 0)
            if cpu0 is not None:
                walls.append((time.perf_counter() - t0) * 1000.0)
                n += size
                if verify:  # after the batch's time is taken: the check is not the decoder's cost
                    count, largest = _wrong(frames, refs, k)
                    bad, worst = bad + count, max(worst, largest)
            k += size
        results.append((n, walls, time.thread_time() - (cpu0 or time.thread_time())))
        wrong.append((bad, worst))

    workers = [threading.Thread(target=loop, args=(one, t)) for t, one in enumerate(ones)]
    stop, busy = threading.Event(), []
    contender = threading.Thread(target=_contend, args=(stop, busy.append, 1.0 / SHORT if contend == "short" else 1.0),
                                 daemon=True) if contend in ("on", "short") else None
    if contend == "gil":
        contender = threading.Thread(target=_hold_the_lock, args=(stop, busy.append), daemon=True)
    if contender is not None:
        contender.start()
    time.sleep(max(0.0, measure_from - time.time()))
    cpu0, t0 = time.process_time(), time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    seconds_taken, cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    if contender is not None:
        stop.set()
        contender.join(30)
    torch.cuda.synchronize()
    out.put({"images": sum(r[0] for r in results), "seconds": seconds_taken, "cpu_s": cpu_s,
             "thread_cpu_s": sum(r[2] for r in results), "batch_ms": [w for r in results for w in r[1]],
             "contender_busy": busy[0] if busy else None,
             "wrong_frames": sum(b for b, _ in wrong) if verify else None,
             "wrong_max_abs": max((w for _, w in wrong), default=0) if verify else None})


def pixel_difference(jpegs: list[bytes]) -> dict:
    """nvimgcodec's frames against torchvision's, the same JPEGs (both nvJPEG; the hardware engine and the CUDA
    decoder may round differently): the largest and the mean absolute difference in 0..255."""
    import torch

    a = _batch_decoder("torchvision", jpegs)(0, len(jpegs))
    b = _batch_decoder("nvimgcodec", jpegs)(0, len(jpegs))
    diffs = [(x.permute(1, 2, 0).int() - y.int()).abs() for x, y in zip(a, b)]
    return {"max_abs": int(max(d.max().item() for d in diffs)),
            "mean_abs": round(float(torch.stack([d.float().mean() for d in diffs]).mean().item()), 4),
            "shapes_equal": all(tuple(x.shape[1:]) == tuple(y.shape[:2]) for x, y in zip(a, b))}


def measure(decoder: str, jpegs, procs: int, threads: int, batch: int, warmup: float, seconds: float,
            sizes: str = "fixed", contend: str = "off", priority: int = 0, pinned: bool = False,
            switch_ms: float | None = None, verify: bool = False) -> dict:
    ctx = mp.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    workers = [ctx.Process(target=_decoder, args=(decoder, jpegs, batch, sizes, threads, warmup, seconds,
                                                  ready, go, out, contend, priority, pinned, switch_ms, verify))
               for _ in range(procs)]
    stop_contender, contender_busy = ctx.Event(), ctx.Queue()
    if contend == "process":  # started first: busy before the decoders' clocks start
        workers.append(ctx.Process(target=_contend, args=(stop_contender, contender_busy.put), daemon=True))
    for w in workers:
        w.start()
    dmon, dmon_path = None, f"/tmp/jpeg-ceiling-dmon-{os.getpid()}.txt"
    try:
        waiting = procs  # each imports torch and makes its context and decoder first
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
        results = [out.get(timeout=120 + seconds) for _ in range(procs)]
        if contend == "process":
            stop_contender.set()
            try:
                busy = contender_busy.get(timeout=30)
            except queue.Empty:  # the contending process failed (its error is above): the row says so
                busy = None
            results = [{**r, "contender_busy": busy} for r in results]
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
    shares = [r["contender_busy"] for r in results]  # None where no contender ran or it failed
    return {
        "decoder": decoder, "processes": procs, "threads": threads, "batch": batch, "sizes": sizes,
        "contend": contend, "stream_priority": priority, "pinned": pinned, "switch_interval_ms": switch_ms,
        "images": images,
        # the share of the time the contending matmuls kept the GPU busy (each process's, averaged); with `gil`, the
        # share of the time the lock-holding thread ran
        "contender_busy": round(statistics.mean(shares), 3) if None not in shares else None,
        "images_per_s": round(images / seconds_mean, 1),
        "cpu_ms_per_image": round(1000.0 * sum(r["cpu_s"] for r in results) / images, 4),
        "decoding_thread_cpu_ms_per_image": round(1000.0 * sum(r["thread_cpu_s"] for r in results) / images, 4),
        "batch_ms_p50": round(walls[len(walls) // 2], 3),
        "batch_ms_p99": round(walls[min(len(walls) - 1, int(0.99 * len(walls)))], 3),
        "wrong_frames": sum(r["wrong_frames"] for r in results) if verify else None,
        "wrong_max_abs": max(r["wrong_max_abs"] for r in results) if verify else None,
        "jpg_util_percent": jpg,
        "jpg_util_median": statistics.median(jpg) if jpg else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--decoder", default="torchvision", help="torchvision, nvimgcodec or both, comma-separated")
    p.add_argument("--procs", default="1,2,4,8")
    p.add_argument("--threads", default="1", help="decoding threads a process, each its own decoder")
    p.add_argument("--batch", default="16,64")
    p.add_argument("--seconds", type=float, default=8.0)
    p.add_argument("--warmup", type=float, default=2.0)
    p.add_argument("--sizes", default="fixed", help="fixed, varying, padded or several, comma-separated (see above)")
    p.add_argument("--contend", default="off",
                   help=f"{', '.join(CONTENDS)} or several, comma-separated: the GPU kept busy beside (see above)")
    p.add_argument("--pinned", default="off", help="off, on or both as off,on: torchvision's inputs page-locked")
    p.add_argument("--stream-priority", default="normal", choices=["normal", "high"],
                   help="the decoding threads' own streams (nvimgcodec decodes on it; torchvision on its own)")
    p.add_argument("--switch-interval-ms", default="", help="the decoding processes' sys.setswitchinterval (ms), "
                   "several comma-separated; default: Python's (5 ms)")
    p.add_argument("--quality", type=int, default=80)
    p.add_argument("--verify", action="store_true", help="compare every frame with its JPEG decoded alone first")
    p.add_argument("--json", required=True)
    args = p.parse_args()
    if set(args.contend.split(",")) - set(CONTENDS):
        p.error(f"--contend {args.contend}: give {', '.join(CONTENDS)}, comma-separated")
    if set(args.pinned.split(",")) - {"off", "on"}:
        p.error(f"--pinned {args.pinned}: give off, on or off,on")
    try:
        switches = [float(x) for x in args.switch_interval_ms.split(",") if x]
    except ValueError:
        switches = [0.0]
    if any(not ms > 0 for ms in switches):
        p.error(f"--switch-interval-ms {args.switch_interval_ms}: give milliseconds above 0, comma-separated")
    jpegs = sample_jpegs(args.quality)
    rows = []
    decoders = args.decoder.split(",")
    for decoder in decoders:
        for batch in [int(b) for b in args.batch.split(",")]:
            for procs in [int(x) for x in args.procs.split(",")]:
                for threads in [int(x) for x in args.threads.split(",")]:
                    for sizes, contend, pinned, switch in itertools.product(
                            args.sizes.split(","), args.contend.split(","), args.pinned.split(","),
                            switches or [None]):
                        row = measure(decoder, jpegs, procs, threads, batch, args.warmup, args.seconds, sizes,
                                      contend, -1 if args.stream_priority == "high" else 0, pinned == "on", switch,
                                      args.verify)
                        print(json.dumps({k: v for k, v in row.items() if k != "jpg_util_percent"}), flush=True)
                        rows.append(row)
    import torch
    import torchvision

    doc = {"jpeg_bytes_mean": int(statistics.mean(len(j) for j in jpegs)), "jpeg_quality": args.quality,
           "torch": torch.__version__, "torchvision": torchvision.__version__,
           "device": torch.cuda.get_device_name(0), "rows": rows}
    if "nvimgcodec" in decoders:
        from nvidia import nvimgcodec

        doc["nvimgcodec"] = nvimgcodec.__version__
        doc["nvimgcodec_against_torchvision"] = pixel_difference(jpegs)
        print(json.dumps(doc["nvimgcodec_against_torchvision"]), flush=True)
    atomic_write_json(args.json, doc)


if __name__ == "__main__":
    main()
