"""The floor under a served frame's host CPU: grpc.aio's own cost of one bidirectional stream's message pair.

A grpc.aio server (one process, as one `facebridge serve` process) answers every request of its streams with a
fixed reply of --reply-bytes, nothing else; client processes hold one stream each per face stream, send
--request-bytes (the sample's JPEG q80 is about 26.6 kB) at --fps with one message in flight (as `bench serve
--in-flight 1`), or back to back with --fps 0. With --server-processes S the streams are spread over S such
servers (stream i on server i mod S), as `bench serve --server-processes` spreads them. Prints and writes
(--json) messages a second and the server's and clients' CPU per message, from /proc. What `facebridge serve`
spends above this is its own work.

    python3 tools/measure/diag/grpc_floor.py --streams 64,256 --fps 30 --client-processes 2 --seconds 10 --json OUT.json
"""
from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import sys
import time

import grpc

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from bridge.fsutil import atomic_write_json  # noqa: E402 - the checkout's, run as a script
from bridge.thread_cpu import stat_cpu_seconds  # noqa: E402

METHOD = "/floor.Echo/Track"


def _same(b: bytes) -> bytes:
    return b


def _cpu_s(pid: int) -> float:
    return stat_cpu_seconds(f"/proc/{pid}/stat")


def _server(port: int, reply_bytes: int, bound) -> None:
    reply = os.urandom(reply_bytes)

    async def track(requests, _context):
        async for _ in requests:
            yield reply

    async def main():
        handler = grpc.method_handlers_generic_handler("floor.Echo", {"Track": grpc.stream_stream_rpc_method_handler(
            track, request_deserializer=_same, response_serializer=_same)})
        server = grpc.aio.server(options=[("grpc.max_receive_message_length", 16 << 20)])
        server.add_generic_rpc_handlers((handler,))
        got = server.add_insecure_port(f"127.0.0.1:{port}")  # port 0: one the system picks
        await server.start()
        bound.put(got)
        await server.wait_for_termination()

    asyncio.run(main())


def _client(ports: list[int], first: int, streams: int, request_bytes: int, fps: float, seconds: float, out) -> None:
    request = os.urandom(request_bytes)

    async def main():
        channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}",
                                              options=[("grpc.max_receive_message_length", 16 << 20)])
                    for port in ports]
        tracks = [c.stream_stream(METHOD, request_serializer=_same, response_deserializer=_same) for c in channels]
        end = time.monotonic() + seconds
        counts, rtts = [0], []

        async def one(stream: int, offset: float):
            call = tracks[stream % len(tracks)]()
            tick = time.monotonic() + offset
            while True:
                if fps:
                    await asyncio.sleep(max(0.0, tick - time.monotonic()))
                    tick += 1.0 / fps
                t = time.monotonic()
                if t >= end:
                    break
                await call.write(request)
                await call.read()
                rtts.append(time.monotonic() - t)
                counts[0] += 1
            await call.done_writing()

        await asyncio.gather(*[one(first + i, (i / streams) / fps if fps else 0.0) for i in range(streams)])
        for c in channels:
            await c.close()
        return counts[0], rtts

    cpu0 = time.process_time()
    n, rtts = asyncio.run(main())
    out.put((n, time.process_time() - cpu0, rtts))


def measure(streams: int, args) -> dict:
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    servers, ports = [], []
    for i in range(args.server_processes):
        bound = ctx.Queue()
        servers.append(ctx.Process(target=_server, args=(args.port + i if args.port else 0, args.reply_bytes, bound),
                                   daemon=True))
        servers[-1].start()
        ports.append(bound.get(timeout=60))
    cpu0 = sum(_cpu_s(s.pid) for s in servers)
    per = [streams // args.client_processes + (i < streams % args.client_processes)
           for i in range(args.client_processes)]
    firsts = [sum(per[:i]) for i in range(len(per))]
    clients = [ctx.Process(target=_client, args=(ports, first, k, args.request_bytes, args.fps, args.seconds, out))
               for first, k in zip(firsts, per) if k]
    t0 = time.monotonic()
    for c in clients:
        c.start()
    results = [out.get(timeout=args.seconds + 60) for _ in clients]
    wall = time.monotonic() - t0
    server_cpu = sum(_cpu_s(s.pid) for s in servers) - cpu0
    for s in servers:
        s.kill()
    n = sum(r[0] for r in results)
    rtts = sorted(x for r in results for x in r[2])
    return {"streams": streams, "server_processes": args.server_processes, "fps": args.fps, "messages": n,
            "messages_per_s": round(n / wall, 1),
            "host_cores_busy": round((server_cpu + sum(r[1] for r in results)) / wall, 2),
            "server_cpu_ms_per_message": round(1000.0 * server_cpu / n, 4),
            "client_cpu_ms_per_message": round(1000.0 * sum(r[1] for r in results) / n, 4),
            "round_trip_ms_p50": round(1000.0 * rtts[len(rtts) // 2], 3),
            "round_trip_ms_p99": round(1000.0 * rtts[int(0.99 * (len(rtts) - 1))], 3)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--streams", default="64,256")
    p.add_argument("--fps", type=float, default=30.0, help="per stream; 0 sends back to back")
    p.add_argument("--client-processes", type=int, default=2)
    p.add_argument("--server-processes", type=int, default=1)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--request-bytes", type=int, default=26600)
    p.add_argument("--reply-bytes", type=int, default=1200)
    p.add_argument("--port", type=int, default=0, help="the first server's port, the next ones after it (default: "
                   "ports the system picks)")
    p.add_argument("--json")
    args = p.parse_args()
    rows = []
    for streams in [int(s) for s in args.streams.split(",")]:
        rows.append(measure(streams, args))
        print(json.dumps(rows[-1]), flush=True)
    if args.json:
        doc = {"grpcio": grpc.__version__, "request_bytes": args.request_bytes, "reply_bytes": args.reply_bytes,
               "client_processes": args.client_processes, "rows": rows}
        atomic_write_json(args.json, doc)


if __name__ == "__main__":
    main()
