"""`facebridge bench serve`: `facebridge serve` end to end over real gRPC on 127.0.0.1, sustained per stream count.

The server runs as its own process (or Ray Serve replicas, `--ray-replicas`); client processes (grpc.aio, many
streams each) send the sample's frames as JPEG at `--fps` per stream, one long-lived Track stream each, and time
every FaceFrame from send to receipt on the machine's one monotonic clock. Per stream count: the streams whose
p99 stays within the limit (20 ms), the drops the server reported (stale, late) and the frames never answered,
the share of each stream's measured frames that were served (a stream counts as within the limit only with
MIN_SERVED_SHARE of them: latest wins keeps late answers out, not missing ones), the server's CPU per frame
(its processes' user + system time over the frames served: on GPU runners that is the
ingress, decode, describe and reply; on CPU runners it includes the inference), the client's, and the server-side
stage medians and means (decode, wait, track, describe, and describe_cpu: the describing thread's own CPU time,
which load barely moves) that the FaceFrames carry. Frames are encoded once up front, as a
camera's hardware encoder would; `encode_ms` says what a software encode costs here.
"""
from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import heapq
import multiprocessing as mp
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import threading
import time

import cv2
import numpy as np

from bridge.bench.common import exit_text, percentiles, reporter
from bridge.engines.shipped import sample_frames
from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_json

P99_LIMIT_MS = 20.0
SLOWEST_KEPT = 10  # the slowest frames of a count, each with its server stages: where a stall happened
FACELESS_KEPT = 20  # when a stream's first frames served without a face came (in the measured window)
# a stream counts as served within the limit only when it also got this share of its measured frames: latest
# wins keeps an overloaded server's answers fresh, so p99 alone would pass a stream served a frame in ten
MIN_SERVED_SHARE = 0.95
# the server's stages a FaceFrame's latencies carry that the bench summarises: the first six always (decode, wait,
# track, describe, the describing thread's CPU, received to replies made), then where the server measured them, how
# wait and track split (bridge/serving/replies.py: JPEG batches' hand-off, queue, decode and hand-on; a front end's
# frame to the engine and through its decode; the batcher's queue, the pass, its GPU time, the wait for the
# describing thread)
STAGES = ("decode", "wait", "track", "describe", "describe_cpu", "server", "to_decode", "decode_queue",
          "decode_batch", "decode_batch_cpu", "to_service", "to_engine", "engine_decode", "engine_decode_queue",
          "engine_decode_batch", "engine_hand_on", "queue", "pass", "gpu", "to_describe")
WIRES = ("track", "many")
PHASES = ("spread", "aligned")
GOLDEN = (5 ** 0.5 - 1) / 2  # stream ids times it, mod 1: phases spread evenly over a period for any set of ids
MESSAGE_BYTES = 4 * 1024 * 1024  # a TrackManyRequest of the load generator at most (the server takes 8 MiB)
# the server's thread groups (bridge/thread_cpu.py) by what they do: a library's unnamed threads (gRPC's
# poller: "Thread (_poll_wrapper)") count as the front end, any other as "other"
_PART = {"serve-loop": "front_end", "native": "front_end", "face-service-finish": "describe_and_replies",
         "identity-refresh": "identity_refresh", "face-service": "passes", "serve-decode": "jpeg_decode",
         "serve-jpeg": "jpeg_decode", "engine-link": "describe_and_replies"}  # a front end's link describes
# the engine process's threads (`engine:PID:GROUP` in its front ends' status): its passes and decode as above, the
# rest (its readers of the front ends' messages, its finishing thread writing the results, gRPC-less native
# threads, its main thread) is the engine's share of the host path
_ENGINE_PART = {"face-service": "passes", "engine-jpeg": "jpeg_decode", "engine-decode": "jpeg_decode",
                "decode-processes": "jpeg_decode"}
_STARTED: list = []  # every server process this bench started (they run in their own sessions)
say = reporter("serve")


def add_arguments(p) -> None:
    p.add_argument("--streams", default="1,2,4,8", help="stream counts to run, comma-separated (default 1,2,4,8)")
    p.add_argument("--seconds", type=float, default=30.0, help="sustained seconds per stream count (default 30)")
    p.add_argument("--warmup", type=float, default=3.0, help="seconds at the start of each count not measured")
    p.add_argument("--fps", type=float, default=30.0, help="frames per second per stream (default 30)")
    p.add_argument("--runners", default="cpu", choices=["cpu", "torch-cuda", "onnxruntime-cuda"])
    p.add_argument("--client-processes", type=int, default=1, help="client processes sharing the streams")
    p.add_argument("--ray-replicas", type=int, default=0, help="serve on this many Ray Serve replicas")
    p.add_argument("--server-processes", type=int, default=1,
                   help="without Ray: this many plain `facebridge serve` processes on the same GPU(s), one port each, "
                        "streams spread over them as direct ingress spreads them over replicas (default 1)")
    p.add_argument("--ray-gpus-per-replica", type=float, default=None,
                   help="GPU share of each replica (default 1 with GPU runners: one replica per GPU)")
    p.add_argument("--serve-args", default="", metavar="ARGS",
                   help="more arguments for each `facebridge serve` started, e.g. \"--cuda-wait spin\"")
    p.add_argument("--address", default=None,
                   help="bench an already running server (HOST:PORT, comma-separated for several replicas)")
    p.add_argument("--kill-replica-at", type=float, default=None, metavar="S",
                   help="with --ray-replicas: kill the first replica's process S seconds into each trial (its "
                        "streams reconnect to the others; counted in reconnects)")
    p.add_argument("--quality", type=int, default=80, help="JPEG quality (default 80)")
    p.add_argument("--deadline-ms", type=float, default=100.0, help="the server's per-frame deadline")
    p.add_argument("--wire", default="track", type=_wires,
                   help="track (default): one Track call per face stream; many: a client process's streams on one "
                        "TrackMany call per server, the frames due together in one message (a gateway's wire); "
                        "track,many: both on the same server, a trial each in turn for every stream count")
    p.add_argument("--rounds", type=int, default=1,
                   help="with several wires: trials of each wire per stream count, taken in turn (default 1)")
    p.add_argument("--in-flight", type=int, default=0, metavar="K",
                   help="frames each stream keeps unanswered at most: 0 (default) sends every frame at --fps, as a "
                        "camera streaming blindly; K holds a frame back while K are unanswered (latest wins at the "
                        "sender, as `run --remote` does with 1), counted in dropped_at_client")
    p.add_argument("--phases", default="spread", choices=PHASES,
                   help="when in each frame period the streams' frames are due: spread (default), evenly over the "
                        "period, as independent cameras are; aligned, all at once, as genlocked cameras (a studio's) "
                        "or a gateway forwarding a frame of every stream together")


def stream_phase(stream_id: int, fps: float, phases: str) -> float:
    """Seconds into each frame period at which a stream's frames are due. Spread: each camera runs on its own
    clock, so 1,000 streams bring about 30 frames a millisecond at 30 fps, not 1,000 every 33 ms."""
    return 0.0 if phases == "aligned" else (stream_id * GOLDEN % 1.0) / fps


class FrameSchedule:
    """When a set of streams' frames fall due, in order: stream s's frame k at start + k / fps + its phase. `take`
    hands out those due by a time, each with whether it is a whole period late (its sender starved of CPU)."""

    def __init__(self, stream_ids, fps: float, phases: str, start: float, end: float):
        phase = {s: stream_phase(s, fps, phases) for s in stream_ids}
        self.order = sorted(phase, key=lambda s: (phase[s], s))
        self.offsets = [phase[s] for s in self.order]
        self.period, self.start, self.end = 1.0 / fps, start, end
        self.k = self.i = 0  # the next frame due: stream order[i]'s frame k

    def next_due(self) -> float | None:
        if not self.order:
            return None
        due = self.start + self.k * self.period + self.offsets[self.i]
        return due if due < self.end else None

    def take(self, now: float) -> list[tuple[int, int, bool]]:
        out = []
        while (due := self.next_due()) is not None and due <= now:
            out.append((self.order[self.i], self.k, due < now - self.period))
            self.i += 1
            if self.i == len(self.order):
                self.i, self.k = 0, self.k + 1
        return out


def _wires(text: str) -> list[str]:
    wires = [w.strip() for w in text.split(",") if w.strip()]
    if not wires or any(w not in WIRES for w in wires):
        raise argparse.ArgumentTypeError(f"{text!r}: give track, many, or both as track,many")
    return list(dict.fromkeys(wires))


def _host_path(threads: dict, cpu_runners: bool = True) -> dict:
    """The server's CPU a frame (ms) by what it did, from its CPU by thread group: the host path (the gRPC front end
    and its native threads; describing the passes and building the replies; with front-end processes, the engine's
    host work; the rest: the release watch, the main thread) apart from JPEG decode (OpenCV on CPU runners, nvJPEG
    with GPU runners), the identity refresher (a new stream refreshes on each of its first 30 frames, then every
    30th: a short trial of new streams is mostly that, the same for either wire) and, on CPU runners, the passes
    (the models' inference runs on their thread there, identical for either wire; with GPU runners their thread is
    host work, in the host path)."""
    parts = {"front_end": 0.0, "describe_and_replies": 0.0, "engine": 0.0, "other": 0.0, "passes": 0.0,
             "jpeg_decode": 0.0, "identity_refresh": 0.0}
    for group, ms in threads.items():
        if group.startswith("engine:"):
            parts[_ENGINE_PART.get(group.split(":", 2)[2], "engine")] += ms
        else:
            parts[_PART.get(group, "front_end" if group.startswith("Thread") else "other")] += ms
    host = parts["front_end"] + parts["describe_and_replies"] + parts["engine"] + parts["other"] + \
        (0.0 if cpu_runners else parts["passes"])
    return {"host_path": round(host, 4), "passes_in_host_path": not cpu_runners,
            **{k: round(v, 4) for k, v in parts.items()}}


def _cpu_seconds(pids: list[int]) -> dict[int, float]:
    """User + system CPU seconds of each process still alive (a killed replica drops out of the sum)."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.thread_cpu import stat_cpu_seconds

    out = {}
    for pid in pids:
        try:
            out[pid] = stat_cpu_seconds(f"/proc/{pid}/stat")
        except (OSError, IndexError, ValueError):
            pass
    return out


async def _one_stream(channels: list, stream_id: int, jpegs, fps, start, end, measure_from, deadline_ms,
                      in_flight=0, phases="spread"):
    """One face stream for the whole trial; when its call breaks (a replica killed) it reconnects to the next
    address and goes on. `moved` counts replica changes inside one call: it must stay 0. With `in_flight` K, a
    frame due while K of this call's frames are unanswered (served, or reported dropped) is not sent: `held`."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    out = _stream_record(stream_id)
    loop = asyncio.get_running_loop()
    k, which = 0, stream_id % len(channels)
    start += stream_phase(stream_id, fps, phases)
    totals = {"stale": 0, "late": 0, "bad": 0}
    while loop.time() < end:
        call = pb_grpc.FaceServeServiceStub(channels[which]).Track()
        replica = None
        this_call = {"sent": 0, "answered": 0, "dropped": 0}  # the server's counters are per call

        async def writer():
            nonlocal k
            while (t := start + k / fps) < end:
                await asyncio.sleep(max(0.0, t - loop.time()))
                if in_flight and this_call["sent"] - this_call["answered"] - this_call["dropped"] >= in_flight:
                    out["held"] += 1
                    out["held_measured"] += time.perf_counter() >= measure_from
                    k += 1
                    continue
                image = pb.ImageFrame(encoding=pb.ImageFrame.JPEG, data=jpegs[(stream_id + k) % len(jpegs)], seq=k,
                                      capture_time=time.time(), source_time=time.perf_counter(),
                                      media_time=k / fps, frame_rate=fps)
                await call.write(pb.TrackRequest(subject=f"bench{stream_id}", image=image, deadline_ms=deadline_ms))
                out["sent"] += 1
                this_call["sent"] += 1
                out["sent_measured"] += image.source_time >= measure_from
                k += 1
            await call.done_writing()

        async def reader():
            nonlocal replica
            async for response in call:
                if replica is None:
                    replica = response.replica
                    out["replicas"].append(replica)
                elif response.replica != replica:
                    out["moved"] += 1
                out["replica"] = response.replica
                out["stale"] = totals["stale"] + response.stale_dropped
                out["late"] = totals["late"] + response.late_dropped
                out["bad"] = totals["bad"] + response.bad_frames
                this_call["dropped"] = response.stale_dropped + response.late_dropped + response.bad_frames
                if response.WhichOneof("part") != "frame":
                    continue
                this_call["answered"] += 1
                _record_frame(out, response.frame, stream_id, measure_from)

        try:
            await asyncio.gather(writer(), reader())
            break
        except Exception as e:  # noqa: BLE001 - a refused or broken stream is reported and reconnects
            code = getattr(e, "code", None)
            out["error"] = f"{code().name}: {e.details()}"[:200] if callable(code) else str(e).splitlines()[0][:200]
            totals.update(stale=out["stale"], late=out["late"], bad=out["bad"])
            call.cancel()
            out["reconnects"] += 1
            which = (which + 1) % len(channels)
            await asyncio.sleep(0.5)
    return out


def _stream_record(stream_id: int) -> dict:
    return {"sent": 0, "served": 0, "sent_measured": 0, "held": 0, "held_measured": 0, "latency_ms": [], "faces": 0,
            "replica": "", "stale": 0, "late": 0, "bad": 0, "stages": {k: [] for k in STAGES[:6]}, "error": None,
            "slowest": [], "reconnects": 0, "moved": 0, "replicas": [], "id": stream_id, "faceless": 0,
            "faceless_at": [], "face_seen": False, "before_first_face": 0}


def _record_frame(out: dict, frame, stream_id: int, measure_from: float) -> None:
    """A served Frame's latency (send to receipt) and server stages into a stream's record."""
    out["served"] += 1
    seen, out["face_seen"] = out["face_seen"], out["face_seen"] or bool(frame.face_found)
    if frame.source_time < measure_from:
        return
    latency = (time.perf_counter() - frame.source_time) * 1000.0
    out["latency_ms"].append(latency)
    out["faces"] += bool(frame.face_found)
    if not frame.face_found and not seen:  # the stream's face not found yet: its start waits for detection
        out["before_first_face"] += 1
    elif not frame.face_found:  # found, then lost
        out["faceless"] += 1
        if len(out["faceless_at"]) < FACELESS_KEPT:
            out["faceless_at"].append(frame.source_time - measure_from)
    got = frame.latencies_ms
    for stage in STAGES:
        if stage in got:
            out["stages"].setdefault(stage, []).append(got[stage])
    kept = out["slowest"]
    if len(kept) < SLOWEST_KEPT or latency > kept[0][0]:  # its stages copied only when kept
        slowest = (latency, frame.source_time - measure_from, stream_id, {k: round(v, 2) for k, v in got.items()})
        (heapq.heappush if len(kept) < SLOWEST_KEPT else heapq.heapreplace)(kept, slowest)


async def _many_streams(channel, stream_ids: list[int], jpegs, fps, start, end, measure_from, deadline_ms,
                        in_flight=0, phases="spread", batch_ms=2.0):
    """Face streams on one TrackMany call, as a gateway forwards them: the frames due since the last request go
    together in the next, at most one request every `batch_ms`, and each response's replies are shared out by
    stream id. The same schedule (`stream_phase`), in-flight rule and records as `_one_stream`; a frame a whole
    period late (the load generator starved of CPU) is not sent but counted as held (no reconnects: a broken call
    is reported in every stream's `error`). The load generator of the batched wire keeps its own Python small:
    requests are built as bytes (client.ManyRequests: no message object an item) and sent as they are, responses
    parsed in one call each."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import TRACK_MANY, ManyRequests

    outs = {s: _stream_record(s) for s in stream_ids}
    in_call = {s: [0, 0, 0] for s in stream_ids}  # sent, answered, dropped (the server's counters are per call)
    loop = asyncio.get_running_loop()
    call = channel.stream_stream(TRACK_MANY)()  # bytes both ways
    requests = ManyRequests(deadline_ms, fps, {s: f"bench{s}" for s in stream_ids})
    per_message = max(1, MESSAGE_BYTES // max(len(j) + 128 for j in jpegs))
    schedule = FrameSchedule(stream_ids, fps, phases, start, end)
    gap = batch_ms / 1000.0

    async def writer():
        sent_at = -gap
        while (due := schedule.next_due()) is not None:
            await asyncio.sleep(max(0.0, due - loop.time(), sent_at + gap - loop.time()))
            items, wall, now, sent_at = [], time.time(), time.perf_counter(), loop.time()
            measured = now >= measure_from
            for s, k, late in schedule.take(sent_at):
                this, out = in_call[s], outs[s]
                if late or (in_flight and this[0] - this[1] - this[2] >= in_flight):
                    out["held"] += 1
                    out["held_measured"] += measured
                    continue
                items.append((s, jpegs[(s + k) % len(jpegs)], k, wall, now, k / fps))
                out["sent"] += 1
                this[0] += 1
                out["sent_measured"] += measured
            for at in range(0, len(items), per_message):  # within the server's message limit (8 MiB)
                await call.write(requests.request(items[at:at + per_message]))
        await call.done_writing()

    async def reader():
        async for data in call:
            for reply in pb.TrackManyResponse.FromString(data).replies:
                out = outs.get(reply.stream_id)
                if out is None:
                    continue
                if not reply.HasField("response"):
                    if reply.ended and reply.ended != "ended by the client":
                        out["error"] = reply.ended[:200]
                    continue
                r = reply.response
                if not out["replicas"]:
                    out["replicas"].append(r.replica)
                    out["replica"] = r.replica
                out["stale"], out["late"], out["bad"] = r.stale_dropped, r.late_dropped, r.bad_frames
                this = in_call[reply.stream_id]
                this[2] = out["stale"] + out["late"] + out["bad"]
                if r.HasField("frame"):
                    this[1] += 1
                    _record_frame(out, r.frame, reply.stream_id, measure_from)

    try:
        await asyncio.gather(writer(), reader())
    except Exception as e:  # noqa: BLE001 - a broken call is reported in each of its streams
        code = getattr(e, "code", None)
        error = f"{code().name}: {e.details()}"[:200] if callable(code) else str(e).splitlines()[0][:200]
        for out in outs.values():
            out["error"] = out["error"] or error
        call.cancel()
    return [outs[s] for s in stream_ids]


def _client_process(addresses, stream_ids, jpegs, fps, seconds, warmup, deadline_ms, t0, results, in_flight=0,
                    wire="track", phases="spread"):
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import grpc

    import bridge.grpc.gen.facebridge_pb2_grpc  # noqa: F401 - imported before the CPU count starts: the client's
    import bridge.serving.client  # noqa: F401 - CPU a frame is what sending and receiving cost, not start-up

    async def main():
        channels = {a: grpc.aio.insecure_channel(a, options=[("grpc.max_receive_message_length", 64 << 20)])
                    for a in addresses}
        loop = asyncio.get_running_loop()
        start = loop.time() + max(0.0, t0 - time.perf_counter())  # every process starts the same instant
        end = start + seconds
        measure_from = t0 + warmup
        ordered = [channels[a] for a in addresses]
        if wire == "many":  # one call per server address, the streams spread over them as Track spreads them
            by_channel = {i: [s for s in stream_ids if s % len(ordered) == i] for i in range(len(ordered))}
            calls = [_many_streams(ordered[i], ids, jpegs, fps, start, end, measure_from, deadline_ms, in_flight,
                                   phases)
                     for i, ids in by_channel.items() if ids]
            streams = [s for group in await asyncio.gather(*calls) for s in group]
        else:
            tasks = [_one_stream(ordered, s, jpegs, fps, start, end, measure_from, deadline_ms, in_flight, phases)
                     for s in stream_ids]
            streams = await asyncio.gather(*tasks)
        for c in channels.values():
            await c.close()
        return streams

    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    streams = asyncio.run(main())
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    results.put({"streams": streams, "cpu_s": cpu1.ru_utime - cpu0.ru_utime + cpu1.ru_stime - cpu0.ru_stime})


def _status_snapshot(addresses) -> dict:
    """Each server's garbage-collector counters and CPU by thread (GetServeStatus), by address; a server that does
    not answer is left out (a replica killed on purpose, an older server)."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    import grpc

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    out = {}
    for address in addresses:
        try:
            with grpc.insecure_channel(address) as channel:
                r = pb_grpc.FaceServeServiceStub(channel).GetServeStatus(pb.GetServeStatusRequest(), timeout=5)
        except grpc.RpcError:
            continue
        out[address] = {"collections": list(r.gc_collections), "pause_ms_total": r.gc_pause_ms_total,
                        "pause_ms_max": r.gc_pause_ms_max, "over_10ms": r.gc_pauses_over_10ms,
                        "thread_cpu_s": dict(r.thread_cpu_s), "frames_served": r.frames_served,
                        "passes": r.passes, "pass_frames": r.mean_batch * r.passes, "runners": r.runners}
    return out


def _threads_during(before: dict, after: dict, frames: int) -> dict:
    """The servers' CPU in the measured window by thread group, in ms a frame served in it (summed over the
    servers)."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.thread_cpu import cpu_between

    total: dict[str, float] = {}
    for address in (a for a in after if a in before):
        for group, seconds in cpu_between(before[address]["thread_cpu_s"], after[address]["thread_cpu_s"]).items():
            if group.startswith("engine:"):  # every front end of an engine carries its threads: counted once
                total[group] = max(total.get(group, 0.0), seconds)
            else:
                total[group] = total.get(group, 0.0) + seconds
    return {k: round(v * 1000.0 / frames, 4) for k, v in sorted(total.items(), key=lambda kv: -kv[1])} if frames else {}


def _busiest_engine_thread(threads: dict, frames: int, seconds: float) -> dict | None:
    """The engine process's busiest thread over the window, in cores (its CPU ms a frame x frames / the window): a
    thread near 1.0 is where the engine stops scaling (one JPEG thread behind torchvision's decoder, one pass
    thread). None without an engine (`serve` in one process: its threads of a name are summed, not one)."""
    engine = [(k.split(":", 2)[2], v) for k, v in threads.items() if k.startswith("engine:")]
    if not engine or seconds <= 0:
        return None
    name, ms = max(engine, key=lambda kv: kv[1])
    return {"thread": name, "cores": round(ms * frames / 1000.0 / seconds, 3)}


def _busiest_text(trial: dict) -> str:
    busiest = trial.get("engine_busiest_thread")
    return f"; the engine's busiest thread {busiest['thread']}, {busiest['cores']} of a core" if busiest else ""


def _gc_during(before: dict, after: dict) -> dict:
    """What the servers' collectors cost in the measured window: collections per generation, pause total, pauses
    of 10 ms or more (summed over the servers), and the longest pause any server had since it started."""
    both = [a for a in after if a in before and len(after[a]["collections"]) == 3 == len(before[a]["collections"])]
    if not both:
        return {}
    return {"servers": len(both),
            "collections": [sum(after[a]["collections"][g] - before[a]["collections"][g] for a in both)
                            for g in range(3)],
            "pause_ms_total": round(sum(after[a]["pause_ms_total"] - before[a]["pause_ms_total"] for a in both), 2),
            "pauses_over_10ms": sum(after[a]["over_10ms"] - before[a]["over_10ms"] for a in both),
            "pause_ms_max_since_start": round(max(after[a]["pause_ms_max"] for a in both), 2)}


def _trial(n: int, addresses, pids, jpegs, args, wire: str = "track") -> dict:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    groups = [list(range(i, n, args.client_processes)) for i in range(min(args.client_processes, n))]
    t0 = time.perf_counter() + 3.0  # time for the processes to start
    procs = [ctx.Process(target=_client_process, args=(addresses, ids, jpegs, args.fps, args.seconds, args.warmup,
                                                       int(args.deadline_ms), t0, results, args.in_flight,
                                                       wire, args.phases))
             for ids in groups]
    for p in procs:
        p.start()
    time.sleep(max(0.0, t0 + args.warmup - time.perf_counter()))
    cpu_start = _cpu_seconds(pids)
    status_start = _status_snapshot(addresses)
    to_unix = time.time() - time.perf_counter()  # the measured window on the wall clock, for load sampled beside
    measured_unix = [round(t0 + args.warmup + to_unix, 3), round(t0 + args.seconds + to_unix, 3)]
    killed = None
    if args.kill_replica_at is not None and len(pids) > 1:
        def kill():
            nonlocal killed
            killed = pids[1]
            try:
                os.kill(killed, signal.SIGKILL)
            except ProcessLookupError:
                pass
        threading.Timer(max(0.0, t0 + args.kill_replica_at - time.perf_counter()), kill).start()
    collected = [results.get(timeout=args.seconds + 300) for _ in procs]
    cpu_end = _cpu_seconds(pids)
    status_end = _status_snapshot(addresses)
    server_cpu_s = sum(cpu_end[p] - cpu_start[p] for p in cpu_end if p in cpu_start)
    for p in procs:
        p.join(30)
    streams = [s for c in collected for s in c["streams"]]
    p99s = [percentiles(s["latency_ms"], (99,))[0] for s in streams]
    # the share of the frames the camera made: one held back at the sender is as lost as one the server dropped
    made = [s["sent_measured"] + s["held_measured"] for s in streams]
    shares = [len(s["latency_ms"]) / m if m else 0.0 for s, m in zip(streams, made)]
    served_measured = sum(len(s["latency_ms"]) for s in streams)
    sent_measured = sum(s["sent_measured"] for s in streams)
    all_latency = [v for s in streams for v in s["latency_ms"]]
    names = [k for k in STAGES if any(k in s["stages"] for s in streams)]
    stages = {k: percentiles([v for s in streams for v in s["stages"].get(k, ())], (50,))[0] for k in names}
    stage_means = {k: round(float(np.mean(v)), 3) if (v := [x for s in streams for x in s["stages"].get(k, ())])
                   else None for k in names}
    sent, served = sum(s["sent"] for s in streams), sum(s["served"] for s in streams)
    stale, late, bad = (sum(s[k] for s in streams) for k in ("stale", "late", "bad"))
    measured_s = args.seconds - args.warmup
    # the server's CPU by thread over the frames it served in the same window (its own counter: under overload the
    # frames served in a window are not those sent in it, and the clients count only the latter)
    def during(key: str):  # a counter's growth over the window, summed over the servers that answered both times
        return sum(status_end[a][key] - status_start[a][key] for a in status_end if a in status_start)

    in_window = during("frames_served")
    threads = _threads_during(status_start, status_end, in_window or served_measured)
    # the passes each server's frames were in (a front end's: the engine's passes that held its frames), so the
    # describe step's calls: its fixed cost a call is spread over this many frames
    passes = during("passes")
    pass_frames = during("pass_frames")  # those passes' frames, whole (a pass may hold several front ends' frames)
    client_cpu_s = sum(c["cpu_s"] for c in collected)
    return {
        "streams": n, "wire": wire, "fps_per_stream": args.fps, "seconds": args.seconds,
        "in_flight": args.in_flight, "phases": args.phases,
        "measured_unix": measured_unix,
        "server_gc": _gc_during(status_start, status_end),
        "server_frames_served_in_window": in_window,
        "frames_a_pass": round(in_window / passes, 2) if passes else None,  # a describe call's, at a front end
        "frames_a_whole_pass": round(pass_frames / passes, 2) if passes else None,
        "server_thread_cpu_ms_per_frame": threads,
        "engine_busiest_thread": _busiest_engine_thread(threads, in_window or served_measured, measured_s),
        # the same by what it did: host_path = front end + describe and replies + other (JPEG decode, identity
        # refreshes and, on CPU runners, the passes apart: there the passes are the inference, most of a frame; all
        # three the same for either wire)
        "server_cpu_ms_per_frame_by_part": _host_path(threads, all(v["runners"] in ("cpu", "") for v in
                                                                   status_end.values())),
        "streams_within_p99_limit": sum(1 for p, share in zip(p99s, shares)
                                        if p is not None and p <= P99_LIMIT_MS and share >= MIN_SERVED_SHARE),
        "streams_p99_within_limit_any_share": sum(1 for p in p99s if p is not None and p <= P99_LIMIT_MS),
        "served_share": dict(zip(("min", "p50"), (round(min(shares), 4), round(float(np.median(shares)), 4)))),
        "latency_ms": dict(zip(("p50", "p99", "max"), percentiles(all_latency, (50, 99, 100)))),
        "worst_stream_p99_ms": max((p for p in p99s if p is not None), default=None),
        "frames_sent": sent, "frames_served": served, "dropped_stale": stale, "dropped_late": late,
        "bad_frames": bad, "unanswered": sent - served - stale - late - bad,
        "dropped_at_client": sum(s["held"] for s in streams),
        "served_per_s": round(served_measured / measured_s, 1) if measured_s > 0 else None,
        # the sample has a face in every frame: a share below 1 is a serving path that lost it (or garbage frames)
        "face_found_share": round(sum(s["faces"] for s in streams) / served_measured, 4) if served_measured else None,
        "faceless_frames": _faceless(streams, addresses),
        "server_cpu_ms_per_frame": round(server_cpu_s * 1000.0 / served_measured, 3)
        if served_measured and pids else None,
        # the same CPU over every frame sent in the measured window: the front end's load (each is received and
        # parsed; latest wins drops most of them when the server is overloaded)
        "server_cpu_ms_per_frame_received": round(server_cpu_s * 1000.0 / sent_measured, 3)
        if sent_measured and pids else None,
        "client_cpu_ms_per_frame": round(client_cpu_s * 1000.0 / max(served, 1), 3),
        # the client processes' CPU over the frames they sent (the load generator's own cost, served or not)
        "client_cpu_ms_per_frame_sent": round(client_cpu_s * 1000.0 / max(sent, 1), 4),
        "client_cpu_s": round(client_cpu_s, 3),
        "latency_ms_per_stream": _per_stream_latency(streams),
        "server_stage_ms_p50": stages, "server_stage_ms_mean": stage_means,
        "replicas": sorted({s["replica"] for s in streams}),
        "streams_per_replica": {r: sum(1 for s in streams if s["replicas"][:1] == [r])
                                for r in sorted({s["replicas"][0] for s in streams if s["replicas"]})},
        "replica_moves_within_a_stream": sum(s["moved"] for s in streams),
        "reconnects": sum(s["reconnects"] for s in streams), "killed_pid": killed,
        "errors": sorted({s["error"] for s in streams if s["error"]}),
        # where the worst waits happened: seconds after the measured window opened, the stream, the server's stages
        "slowest_frames": [{"latency_ms": round(lat, 2), "at_s": round(at, 3), "stream": sid, "stages": stages}
                           for lat, at, sid, stages in heapq.nlargest(SLOWEST_KEPT, (f for s in streams
                                                                                    for f in s["slowest"]))],
    }


def _faceless(streams: list[dict], addresses: list[str]) -> dict:
    """Where the frames served without a face after their stream's face was first found were (the sample has one in
    every frame; those before it, a new stream waiting for the detector, stand apart in before_first_face: many
    streams starting at once on a GPU wait their turn for its bounded detector slots): spread over many streams
    and the whole window (garbage frames from a serving path), or a few streams that lost their face and stayed
    lost (tracking); the earliest ones with their streams (seconds into the measured window); by second of the
    window (each stream's first FACELESS_KEPT: a burst or a trickle) and by the address its stream was sent to
    (a stream's first is its id modulo the addresses, as the clients spread them: one front end or all)."""
    lost = [(s["faceless"], s["id"]) for s in streams if s["faceless"]]
    earliest = sorted((at, s["id"]) for s in streams for at in s["faceless_at"])[:SLOWEST_KEPT]
    seconds = [int(at) for s in streams for at in s["faceless_at"] if at >= 0]
    by_address = {}
    for n, sid in lost:
        address = addresses[sid % len(addresses)] if addresses else ""
        by_address[address] = by_address.get(address, 0) + n
    return {"streams": len(lost), "frames": sum(n for n, _ in lost), "most_in_a_stream": max(lost)[0] if lost else 0,
            "earliest": [{"at_s": round(at, 3), "stream": sid} for at, sid in earliest],
            "by_second": np.bincount(seconds).tolist() if seconds else [],
            "by_address": dict(sorted(by_address.items())),
            "before_first_face": {"streams": sum(1 for s in streams if s["before_first_face"]),
                                  "frames": sum(s["before_first_face"] for s in streams),
                                  "most_in_a_stream": max((s["before_first_face"] for s in streams), default=0)}}


def _per_stream_latency(streams: list[dict]) -> dict:
    """Capture-to-result p50 and p99 of each stream (ms), summarised over the streams: the median stream's and
    the worst stream's."""
    p = [percentiles(s["latency_ms"], (50, 99)) for s in streams if s["latency_ms"]]
    if not p:
        return {}
    p50s, p99s = [a for a, _ in p], [b for _, b in p]
    return {"p50_median_stream": round(float(np.median(p50s)), 2), "p50_worst_stream": round(max(p50s), 2),
            "p99_median_stream": round(float(np.median(p99s)), 2), "p99_worst_stream": round(max(p99s), 2)}


def _wire_ratios(trials: list[dict]) -> list[dict]:
    """For each stream count run over both wires: each wire's mean over its trials of the server's host path,
    its whole CPU but the passes, and the client's CPU a frame, and many's share of track's."""
    out = []
    for n in sorted({t["streams"] for t in trials}):
        means = {}
        for wire in WIRES:
            got = [t for t in trials if t["streams"] == n and t["wire"] == wire]
            if not got:
                break
            means[wire] = {
                "trials": len(got),
                "host_path_ms": round(float(np.mean([t["server_cpu_ms_per_frame_by_part"]["host_path"]
                                                     for t in got])), 4),
                "all_but_passes_ms": round(float(np.mean([
                    sum(v for k, v in t["server_cpu_ms_per_frame_by_part"].items()
                        if k not in ("host_path", "passes", "passes_in_host_path"))
                    for t in got])), 4),
                "client_ms": round(float(np.mean([t["client_cpu_ms_per_frame_sent"] for t in got])), 4)}
        else:
            track, many = means["track"], means["many"]
            out.append({"streams": n, **{w: means[w] for w in WIRES},
                        "many_over_track": {k: round(many[k] / track[k], 3) if track[k] else None
                                            for k in ("host_path_ms", "all_but_passes_ms", "client_ms")}})
    return out


def _start_servers(args, max_streams: int):
    """`--server-processes` plain `facebridge serve` processes (or one that starts Ray replicas), started side
    by side: (processes, addresses, server pids)."""
    count = 1 if args.ray_replicas else max(1, args.server_processes)
    share = -(-max_streams // count)  # each takes its share of the streams (round-robin over the addresses)

    with concurrent.futures.ThreadPoolExecutor(count) as pool:  # models load and compile in parallel
        started = list(pool.map(lambda i: _start_server(args, share, tag=f"[{i}] " if count > 1 else ""),
                                range(count)))
    return ([p for p, _, _ in started], [a for _, addrs, _ in started for a in addrs],
            [pid for _, _, pids in started for pid in pids])


def _start_server(args, max_streams: int, tag: str = ""):
    """A `facebridge serve` process (or Ray replicas): (process, addresses, server pids)."""
    extra = shlex.split(args.serve_args)
    defaults = [("--quiet",), ("--grpc", "127.0.0.1:0" if not args.ray_replicas else "127.0.0.1:50461"),
                ("--runners", args.runners), ("--max-streams", str(max_streams)),
                ("--deadline-ms", str(args.deadline_ms)), ("--prewarm", "480x360")]  # the sample's size
    # --serve-args replaces a default (the command line refuses an option given twice)
    cmd = [sys.executable, "-m", "bridge.cli", "serve"]
    cmd += [x for option in defaults if option[0] not in extra for x in option] + extra
    if args.ray_replicas:
        cmd += ["--ray-replicas", str(args.ray_replicas)]
        if args.ray_gpus_per_replica is not None:
            cmd += ["--ray-gpus-per-replica", str(args.ray_gpus_per_replica)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    _STARTED.append(proc)  # stopped at the end of run() even when it is cut short while they start
    addresses, pids = [], [proc.pid]
    for line in proc.stdout:
        say(tag + line.rstrip())
        pids += [int(p) for p in re.findall(r"pid (\d+)", line)]
        if "listening on" in line:
            addresses = re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", line.split("listening on", 1)[1])
            break
    if not addresses:
        raise RuntimeError(f"facebridge serve did not start ({exit_text(proc.poll())})")
    threading.Thread(target=lambda: [say(tag + x.rstrip()) for x in proc.stdout], daemon=True).start()
    return proc, addresses, pids


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.serving.client import encode_jpeg

    counts = [int(x) for x in args.streams.split(",") if x.strip()]
    if args.in_flight < 0:
        raise FaceBridgeError(f"--in-flight {args.in_flight} is negative",
                              "give 0 to send every frame, or K >= 1 frames unanswered at most")
    clip = [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in sample_frames(60, step=1)]
    t = time.perf_counter()
    jpegs = [encode_jpeg(f, args.quality) for f in clip]
    encode_ms = (time.perf_counter() - t) * 1000.0 / len(clip)

    def stop_on_sigterm(*_):  # a time limit's SIGTERM still stops the servers (they run in their own sessions)
        raise SystemExit(143)

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, stop_on_sigterm)
    procs, addresses, pids, trials = [], args.address.split(",") if args.address else [], [], []

    def results() -> dict:
        best = max((t["streams"] for t in trials if t["streams_within_p99_limit"] == t["streams"]), default=0)
        return {"runners": args.runners, "ray_replicas": args.ray_replicas, "server_processes": len(procs),
                "serve_args": args.serve_args, "mps": bool(os.environ.get("CUDA_MPS_PIPE_DIRECTORY")),
                "addresses": addresses, "gpu": _gpu_name(args.runners), "frame_size": list(clip[0].shape[1::-1]),
                "jpeg_bytes_mean": int(np.mean([len(j) for j in jpegs])), "jpeg_quality": args.quality,
                "encode_ms": round(encode_ms, 3), "p99_limit_ms": P99_LIMIT_MS, "min_served_share": MIN_SERVED_SHARE,
                "most_streams_all_within_limit": best, "wires": args.wire, "phases": args.phases,
                "wire_ratios": _wire_ratios(trials) if len(args.wire) > 1 else [], "trials": trials}

    try:
        if not args.address:
            procs, addresses, pids = _start_servers(args, max(counts))
        rounds = max(1, args.rounds) if len(args.wire) > 1 else 1
        for n in counts:
            for wire in [w for _ in range(rounds) for w in args.wire]:  # the wires in turn: the same load on both
                say(f"{n} streams x {args.fps:g} fps ({args.phases} phases) for {args.seconds:g} s over {wire} ...")
                trial = _trial(n, addresses, pids, jpegs, args, wire)
                held = f", {trial['dropped_at_client']} held back at the clients" if args.in_flight else ""
                part = trial["server_cpu_ms_per_frame_by_part"]
                faceless = trial["faceless_frames"]
                say(f"{n} streams over {wire}: {trial['served_per_s']} served a second ({trial['face_found_share']} "
                    f"with a face; {faceless['frames']} lost once found, {faceless['before_first_face']['frames']} "
                    f"before their stream's first), p99 {trial['latency_ms']['p99']} ms, "
                    f"{trial['streams_within_p99_limit']} within {P99_LIMIT_MS:g} ms with {MIN_SERVED_SHARE:.0%} "
                    f"served, served share min {trial['served_share']['min']}, dropped {trial['dropped_stale']} "
                    f"stale {trial['dropped_late']} late{held}, server {trial['server_cpu_ms_per_frame']} ms CPU a "
                    f"frame (host path {part['host_path']}, passes {part['passes']}, JPEG {part['jpeg_decode']}, "
                    f"identity {part['identity_refresh']}; {trial['frames_a_pass']} frames a describe call, "
                    f"{trial['frames_a_whole_pass']} a pass{_busiest_text(trial)}), client "
                    f"{trial['client_cpu_ms_per_frame_sent']} ms a frame sent")
                trials.append(trial)
                if args.json:  # every trial on disk as it ends: a run cut short keeps what it measured
                    atomic_write_json(args.json + ".partial", {"benchmark": "serve", "results": results()})
        for r in results()["wire_ratios"]:
            say(f"{r['streams']} streams: many / track = {r['many_over_track']['host_path_ms']} of the server's host "
                f"path a frame ({r['many']['host_path_ms']} / {r['track']['host_path_ms']} ms, JPEG decode, "
                f"identity refreshes and CPU runners' passes apart), {r['many_over_track']['all_but_passes_ms']} "
                f"with the first two, client {r['many_over_track']['client_ms']}")
    finally:
        _stop_all()
    return results()


def _stop_all(grace_s: float = 15.0) -> None:
    """SIGTERM to every server this bench started, at once; what has not ended within `grace_s` is killed with
    its process group."""
    procs = [p for p in _STARTED if p.poll() is None]
    _STARTED.clear()
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.1, end - time.monotonic()))
        except Exception:  # noqa: BLE001 - a server that does not stop is killed with its process group
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def _gpu_name(runners: str) -> str | None:
    if runners == "cpu":
        return None
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.gpu import probe_gpu

    gpu = probe_gpu().gpu
    return getattr(gpu, "name", None) or (str(gpu) if gpu is not None else None)
