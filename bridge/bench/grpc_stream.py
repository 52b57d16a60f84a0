"""`facebridge bench grpc`: cost of GrpcSink.send in the pipeline thread and capture-to-client latency over real
gRPC on 127.0.0.1, with several subscribers and optionally one that has stopped reading.

Subscribers run as threads of this process (they share its interpreter), so the latency includes their Python
decode; a C++ or separate-process client sees less."""
from __future__ import annotations

import threading
import time

import numpy as np

from bridge.bench.common import percentiles, positive_float, positive_int, reporter, table
from bridge.frame import FaceFrame

_say = reporter("grpc")


def add_arguments(p) -> None:
    p.add_argument("--fps", type=positive_float, default=60.0, help="frames per second to publish (default 60)")
    p.add_argument("--seconds", type=positive_float, default=5.0, help="how long to publish (default 5)")
    p.add_argument("--subscribers", type=positive_int, default=2, help="subscribers that keep up (default 2)")
    p.add_argument("--stalled", type=int, default=1, choices=range(0, 65), metavar="N",
                   help="subscribers that stop reading after the header (default 1)")


def _percentiles(values: list[float]) -> dict:
    p50, p99, top = percentiles(values, (50, 99, 100), digits=4)
    return {"p50": p50, "p99": p99, "max": top}


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import grpc

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
    from bridge.grpc.server import GrpcSink

    sink = GrpcSink("127.0.0.1:0")
    latencies: list[list[float]] = [[] for _ in range(args.subscribers)]
    counts = [0] * args.subscribers
    streams, channels = [], []

    def reader(i: int, stream) -> None:
        try:
            for response in stream:
                if response.WhichOneof("part") == "frame":
                    latencies[i].append((time.perf_counter() - response.frame.source_time) * 1000.0)
                    counts[i] += 1
        except grpc.RpcError:
            pass

    threads = []
    for i in range(args.subscribers + args.stalled):
        channel = grpc.insecure_channel(sink.address)
        stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest())
        channels.append(channel)
        streams.append(stream)
        if i < args.subscribers:
            threads.append(threading.Thread(target=reader, args=(i, stream), daemon=True))
            threads[-1].start()
    time.sleep(0.5)
    _say(f"publishing {int(args.seconds * args.fps)} frames at {args.fps:g} fps to {args.subscribers} subscribers "
         f"(+{args.stalled} stalled) on {sink.address}")
    rng = np.random.default_rng(0)
    send_us: list[float] = []
    period = 1.0 / args.fps
    total = int(args.seconds * args.fps)
    next_t = time.perf_counter()
    for seq in range(total):
        frame = FaceFrame(seq=seq, t_capture=time.time(), t_capture_mono=time.perf_counter(), face_found=True)
        frame.blendshapes = rng.uniform(0, 1, 52).astype(np.float32)
        frame.morph.expression = rng.normal(size=53).astype(np.float32)
        frame.morph.identity = rng.normal(size=100).astype(np.float32)
        t0 = time.perf_counter()
        sink.send(frame)
        send_us.append((time.perf_counter() - t0) * 1e6)
        next_t += period
        time.sleep(max(0.0, next_t - time.perf_counter()))
    time.sleep(0.3)
    stats = sink.stats()
    for stream in streams:
        stream.cancel()
    for t in threads:
        t.join(timeout=5)
    for channel in channels:
        channel.close()
    sink.close()
    return {
        "frames_published": total, "fps": args.fps, "subscribers": args.subscribers, "stalled": args.stalled,
        "send_us": _percentiles(send_us),
        "capture_to_client_ms": _percentiles([x for lat in latencies for x in lat]),
        "received_fraction_per_subscriber": [round(c / total, 4) for c in counts],
        "dropped_total": stats["dropped"],
    }


def summary(results: dict) -> str:
    r = results
    received = ", ".join(f"{100 * f:.0f}%" for f in r["received_fraction_per_subscriber"])
    return table(["frames", "fps", "subscribers", "stalled", "send p50 us", "send p99 us", "to client p50 ms",
                  "p99 ms", "received", "dropped"],
                 [[r["frames_published"], r["fps"], r["subscribers"], r["stalled"], r["send_us"]["p50"],
                   r["send_us"]["p99"], r["capture_to_client_ms"]["p50"], r["capture_to_client_ms"]["p99"], received,
                   r["dropped_total"]]])
