"""What `facebridge bench serve --wire many`'s load generator costs a frame at a gateway's scale, on this machine.

The load generator (bridge/bench/serve.py `_many_streams`: TrackMany requests built as bytes by
client.ManyRequests, responses parsed one call a message, each frame's latency and server stages recorded) runs
as in the bench, in one client process with one frame in flight a stream, against a grpc.aio server that answers
each TrackManyRequest at once with one real reply an item: a TrackResponse carrying a full FaceFrame recorded from
a real `facebridge serve` (CPU runners, the sample) on start, its seq and source_time set from the item, so the
client times and parses exactly what it would. No inference runs, so the client is driven far beyond what CPU
runners serve here; its CPU (user + system, from getrusage, imports excluded) over the frames it sent is its cost a
frame, and `cores_at_30000_frames_a_s` that cost times 30,000 frames a second: what the load generator of the
issue's GPU run would need (per-frame work only grows with items, per-message work shrinks a frame as messages
grow, so a measurement at fewer frames a second does not flatter it). The answering server's own CPU a frame is
reported too: gRPC's receive of the images and send of the replies, with a parse and a reply an item, the floor
under what `facebridge serve` spends a frame on the batched wire.

    python3 tools/measure/diag/many_client_cost.py --streams 1000 --fps 2 --seconds 20 --json OUT.json
    python3 tools/measure/diag/many_client_cost.py --streams 125 --fps 30 --phases spread,aligned  # a GPU run's
                                                               # client process: 1,000 streams over 8 of them
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, ROOT)
from bridge.bench.serve import PHASES  # noqa: E402 - the checkout's, run as a script
from bridge.fsutil import atomic_write_json  # noqa: E402
from bridge.thread_cpu import stat_cpu_seconds  # noqa: E402

METHOD = "/facebridge.v1.FaceServeService/TrackMany"


def _jpegs() -> list[bytes]:
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg

    return [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in sample_frames(60, step=1)]


def record_reply(jpeg: bytes) -> bytes:
    """A serialised TrackResponse with a FaceFrame of the sample, from a real `facebridge serve` (CPU runners)."""
    import grpc

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import ManyRequests

    env = {**os.environ, "PYTHONPATH": ROOT, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "bridge.cli", "serve", "--quiet", "--grpc", "127.0.0.1:0",
                             "--runners", "cpu", "--max-streams", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    try:
        address = None
        for line in proc.stdout:
            if "listening on" in line:
                address = re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", line.split("listening on", 1)[1])[0]
                break
        if address is None:
            raise SystemExit("facebridge serve did not start")
        requests = ManyRequests(60_000, 30.0, {0: "Recorded"})
        with grpc.insecure_channel(address) as channel:
            call = channel.stream_stream(METHOD)(iter([requests.request([(0, jpeg, k, time.time(), time.perf_counter(),
                                                                          k / 30) for k in (1,)])]))
            for data in call:
                for reply in pb.TrackManyResponse.FromString(data).replies:
                    if reply.HasField("response") and reply.response.HasField("frame"):
                        return reply.response.SerializeToString()
        raise SystemExit("facebridge serve answered no frame")
    finally:
        proc.terminate()
        proc.wait(30)


def _server(template: bytes, bound) -> None:
    """Answers each TrackManyRequest at once: one recorded reply an item, its seq and source_time the item's."""
    import grpc

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.track_many import encode_reply, encode_responses

    response = pb.TrackResponse.FromString(template)

    async def track_many(requests, _context):
        async for data in requests:
            replies = []
            for item in pb.TrackManyRequest.FromString(data).items:
                if not item.HasField("image"):
                    continue
                response.frame.seq, response.frame.source_time = item.image.seq, item.image.source_time
                replies.append(encode_reply(item.stream_id, response.SerializeToString()))
            for message in encode_responses(replies):
                yield message

    async def main():
        handler = grpc.method_handlers_generic_handler("facebridge.v1.FaceServeService", {
            "TrackMany": grpc.stream_stream_rpc_method_handler(track_many)})
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 8 << 20)])
        server.add_generic_rpc_handlers((handler,))
        bound.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def measure(args) -> dict:
    from bridge.bench.serve import _client_process

    jpegs = _jpegs()
    template = record_reply(jpegs[0])
    ctx = mp.get_context("spawn")
    bound, results = ctx.Queue(), ctx.Queue()
    server = ctx.Process(target=_server, args=(template, bound), daemon=True)
    server.start()
    address = f"127.0.0.1:{bound.get(timeout=60)}"
    out = []
    try:
        for streams, phases in [(n, ph) for n in args.streams for ph in args.phases]:
            t0 = time.perf_counter() + 2.0
            client = ctx.Process(target=_client_process, args=([address], list(range(streams)), jpegs, args.fps,
                                                               args.seconds, args.warmup, 60_000, t0, results, 1,
                                                               "many", phases))
            cpu0 = stat_cpu_seconds(f"/proc/{server.pid}/stat")
            client.start()
            got = results.get(timeout=args.seconds + 120)
            client.join(30)
            server_s = stat_cpu_seconds(f"/proc/{server.pid}/stat") - cpu0
            sent = sum(s["sent"] for s in got["streams"])
            served = sum(s["served"] for s in got["streams"])
            latency = sorted(v for s in got["streams"] for v in s["latency_ms"])
            ms = got["cpu_s"] * 1000.0 / max(sent, 1)
            out.append({"streams": streams, "fps": args.fps, "phases": phases, "seconds": args.seconds,
                        "frames_sent": sent,
                        "frames_answered": served, "held_back": sum(s["held"] for s in got["streams"]),
                        "client_cpu_s": round(got["cpu_s"], 3), "client_cpu_ms_per_frame": round(ms, 4),
                        "cores_at_30000_frames_a_s": round(ms * 30.0, 2),  # 1,000 streams at 30 fps
                        # the answering server's own CPU (gRPC's receive and send, each request parsed, a reply an
                        # item joined): the floor under what `facebridge serve` spends a frame on the batched wire
                        "echo_server_cpu_ms_per_frame": round(server_s * 1000.0 / max(sent, 1), 4),
                        "round_trip_ms_p50": round(latency[len(latency) // 2], 2) if latency else None,
                        "errors": sorted({s["error"] for s in got["streams"] if s["error"]})})
            print(json.dumps(out[-1]), flush=True)
    finally:
        server.kill()
    return {"reply_bytes": len(template), "jpeg_bytes_mean": sum(map(len, jpegs)) // len(jpegs), "trials": out}


def _phases(text: str) -> list[str]:
    phases = [x.strip() for x in text.split(",") if x.strip()]
    if not phases or any(x not in PHASES for x in phases):
        raise argparse.ArgumentTypeError(f"{text!r}: give spread, aligned or both as spread,aligned")
    return phases


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="1000", type=lambda t: [int(x) for x in t.split(",")])
    p.add_argument("--fps", type=float, default=2.0, help="per stream (default 2)")
    p.add_argument("--phases", default=["spread"], type=_phases,
                   help="when the streams' frames fall due, each in turn (bench serve --phases; default spread)")
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=3.0)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    result = measure(args)
    if args.json:
        atomic_write_json(args.json, {"benchmark": "many_client_cost", "results": result})


if __name__ == "__main__":
    main()
