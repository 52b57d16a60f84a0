"""`facebridge bench describe`: the host CPU of `facebridge serve` per served frame, beside the model inference:
one pass of N streams described and its replies built (what each batched service's describing thread does), and
the same frames the one-stream way (a FaceDescriber per stream and build_frame per frame), at each stream count.

The streams are the sample as the batched tracker measures it on the CPU (measured once), each stream at its own
offset in the clip, past its first second (its identity restored, so a refresh every IDENTITY_EVERY frames, on the
shared refresher as in serve: its CPU is reported apart, per frame, over at least IDENTITY_EVERY + 1 passes so
that every stream refreshes once). CPU is the describing thread's own
(time.thread_time), so other load on the machine barely moves it. `--idle-ms`: the passes again with that long asleep
before each, as a server's passes are spaced by its streams' frame rate (200 ms at 5 fps): a pass after idle time
finds the CPU's caches cold and costs more than one back to back. Not measured here: gRPC's receive and send of
each message, the protobuf parse of the request, JPEG decode (nvJPEG on a GPU server) and the inference.
"""
from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from bridge.bench.common import positive_int, reporter
from bridge.expression.stage import IDENTITY_EVERY, ExpressionEstimator
from bridge.frame import Frame
from bridge.stages.describe import FaceDescriber, MeasuredFace

say = reporter("describe")
CLIP = 60
INPUTS = 8  # distinct passes, taken in turn (each stream moves on by a frame a pass, back every INPUTS passes)
MAX_IDLE_MS = 10_000.0


def add_arguments(p) -> None:
    p.add_argument("--streams", default="1,64,256,1024", type=lambda text: [positive_int(x) for x in text.split(",")],
                   help="stream counts, comma-separated (default 1,64,256,1024)")
    p.add_argument("--frames", type=positive_int, default=3000, help="frames described per stream count (3000)")
    p.add_argument("--single-streams", type=positive_int, default=32,
                   help="streams of the one-stream comparison (its cost per frame does not depend on it)")
    p.add_argument("--idle-ms", default=[0.0], type=_idle_list,
                   help="idle time before each pass, ms, comma-separated: each stream count once per value "
                        "(default 0: back to back; 200 is a 5 fps server's)")


def _idle_list(text: str) -> list[float]:
    values = []
    for part in text.split(","):
        try:
            value = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a number of milliseconds") from None
        if not 0.0 <= value <= MAX_IDLE_MS:
            raise argparse.ArgumentTypeError(f"{part} ms is outside 0..{MAX_IDLE_MS:.0f}; give the idle time before "
                                             "each pass in milliseconds")
        values.append(value)
    return values


def _measured():
    """The sample's frames as the batched tracker measures them on the CPU: the packed result rows, the size."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService

    frames = sample_frames(CLIP, step=1)
    hw = frames[0].shape[:2]
    try:
        import onnxruntime  # noqa: F401
        kind = "onnxruntime"
    except ImportError:  # a GPU image with torch (and onnx) only: the same models converted, on the CPU
        kind = "torch"
    with MultiStreamFaceService(1, hw, make_runners(kind, 1), device="cpu") as service:
        faces = [service.submit(0, f).result(timeout=300) for f in frames]
    return faces, hw


def _pass_faces(faces, n: int, k: int):
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.multistream.service import StreamFaces

    picked = [faces[(k + 7 * i) % CLIP] for i in range(n)]
    fields = ("tracked", "presence", "landmarks", "irises", "emotion", "blendshapes", "expression_head")
    return StreamFaces(streams=np.arange(n), **{f: np.stack([np.asarray(getattr(p, f)) for p in picked])
                                                for f in fields})


def _served(n: int, k: int, hw, states):
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.streams import Served

    now = time.perf_counter()
    return [Served(pb.ImageFrame(seq=k, capture_time=1000.0 + k / 30, source_time=k / 30, media_time=k / 30,
                                 frame_rate=30.0), now, now, None, {"decode_ms": 0.0, "hw": hw, "state": states[i]})
            for i in range(n)]


def _rows_trial(faces, hw, n: int, frames: int, idle_s: float = 0.0) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.expression.refresh import IdentityRefresher
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.runtime.serve import PassDescriber, model_versions
    from bridge.serving.replies import PassReplies
    from bridge.serving.track import StreamState

    refresher = IdentityRefresher(1)
    replies = PassReplies(lambda rows: PassDescriber(rows, True, False, model_versions(), refresher=refresher))
    finish = replies.for_service(n)
    states = [StreamState(f"bench{i}") for i in range(n)]
    passes = max(IDENTITY_EVERY + 1, frames // n)  # every stream reaches a frame that refreshes its identity
    inputs = [(_pass_faces(faces, n, k), _served(n, k, hw, states)) for k in range(INPUTS)]
    for faces_k, served in inputs[:2]:  # first frames: open the rows, SQPNP, headers
        finish(None, served, faces_k)
    for state in states:  # past the first second: an identity refresh every IDENTITY_EVERY frames
        state.describer.expression.set_identity(state.describer.expression.identity)
    refresher.drain()
    cpu0, proc0, t0 = time.thread_time(), _process_cpu(), time.perf_counter()
    describe_ms = slept = 0.0
    for k in range(passes):
        if idle_s:
            t_sleep = time.perf_counter()
            time.sleep(idle_s)
            slept += time.perf_counter() - t_sleep
        faces_k, served = inputs[k % len(inputs)]
        for s in served:
            s.request.seq = k + 2
            s.request.media_time = s.request.capture_time = (k + 2) / 30
        replies_k = finish(None, served, faces_k)
        describe_ms += pb.Frame.FromString(replies_k[0][-1]).latencies_ms["describe_cpu"] * n  # up to its replies
    cpu = time.thread_time() - cpu0
    wall = time.perf_counter() - t0 - slept
    refresher.drain()
    refresh_cpu = max(0.0, _process_cpu() - proc0 - cpu)
    refresher.close()
    count = passes * n
    return {"streams": n, "idle_ms": round(idle_s * 1000.0, 3), "passes": passes, "frames": count,
            "host_us_per_frame": round(cpu * 1e6 / count, 1),
            "describe_us_per_frame": round(describe_ms * 1e3 / count, 1),
            "replies_us_per_frame": round(max(0.0, cpu * 1e6 / count - describe_ms * 1e3 / count), 1),
            "refresh_cpu_us_per_frame": round(refresh_cpu * 1e6 / count, 1),
            "wall_us_per_frame": round(wall * 1e6 / count, 1),
            "frames_per_s_per_core": round(count / cpu) if cpu else None}


def _single_trial(faces, hw, n: int, frames: int) -> dict:
    """The one-stream way: a FaceDescriber per stream (serve before batching), build_frame per frame."""
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.expression.refresh import IdentityRefresher
    from bridge.grpc.convert import build_frame
    from bridge.grpc.gen import facebridge_pb2 as pb

    refresher = IdentityRefresher(1)
    contract = ExpressionEstimator(session=False).contract
    blend, head = contract.outputs["blendshapes"][0], contract.outputs["head_rotation"][0]
    describers = [FaceDescriber(ExpressionEstimator(session=False, refresher=refresher)) for _ in range(n)]
    size = (hw[1], hw[0])

    def one(k: int) -> None:
        for i, d in enumerate(describers):
            f = faces[(k + 7 * i) % CLIP]
            measured = MeasuredFace(points=f.landmarks, presence=f.presence, iris=f.irises, emotion=f.emotion,
                                    expression_outputs={blend: f.blendshapes[None], head: f.expression_head[None]})
            out = d.describe(Frame(image=None, seq=k, t_capture=1000 + k / 30, t_capture_mono=k / 30,
                                   t_media=k / 30), measured, image_size=size)
            pb.TrackResponse(frame=build_frame(out, 1))

    for k in range(2):
        one(k)
    for d in describers:
        d.expression.set_identity(d.expression.identity)
    refresher.drain()
    passes = max(3, frames // n)
    cpu0 = time.thread_time()
    for k in range(passes):
        one(k + 2)
    cpu = time.thread_time() - cpu0
    refresher.close()
    return {"streams": n, "frames": passes * n, "host_us_per_frame": round(cpu * 1e6 / (passes * n), 1)}


def _process_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(args) -> dict:
    # loaded when the bench runs: `facebridge --help` imports every bench module (bridge/cli.py)
    from bridge.runtime.native_pools import pin_native_pools

    pinned = pin_native_pools()  # as serve does
    counts = args.streams
    say("measuring the sample on the CPU tracker ...")
    faces, hw = _measured()
    say(f"one stream at a time ({args.single_streams} streams) ...")
    single = _single_trial(faces, hw, args.single_streams, min(args.frames, 1000))
    trials = []
    for n in counts:
        for idle_ms in args.idle_ms:
            after = f", {idle_ms:g} ms idle before each" if idle_ms else ""
            say(f"{n} streams a pass{after} ...")
            trials.append(_rows_trial(faces, hw, n, args.frames, idle_ms / 1000.0))
            say(f"{n} streams{after}: {trials[-1]['host_us_per_frame']} us CPU a frame (describe "
                f"{trials[-1]['describe_us_per_frame']}, replies {trials[-1]['replies_us_per_frame']})")
    return {"native_pools": pinned, "frame_size": [hw[1], hw[0]], "single_stream": single, "trials": trials}


def summary(results: dict) -> str:
    single = results["single_stream"]["host_us_per_frame"]
    lines = [f"one stream at a time: {single} us CPU a frame (FaceDescriber + build_frame)",
             f"{'streams':>8} {'host us/frame':>14} {'describe':>9} {'replies':>8} {'refresh':>8} "
             f"{'frames/s/core':>14} {'idle ms':>8}"]
    for t in results["trials"]:
        lines.append(f"{t['streams']:>8} {t['host_us_per_frame']:>14} {t['describe_us_per_frame']:>9} "
                     f"{t['replies_us_per_frame']:>8} {t['refresh_cpu_us_per_frame']:>8} "
                     f"{t['frames_per_s_per_core']:>14} {t.get('idle_ms', 0.0):>8g}")
    return "\n".join(lines)
