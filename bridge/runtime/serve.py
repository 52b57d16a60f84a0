"""The composition root of `facebridge serve`: batched runners, one batched service per frame size, the stream
table, each stream's describer and the gRPC front end, built here and nowhere else (also inside each Ray Serve
replica, which calls `build_server`).

Signed releases are followed as `facebridge run` follows them (runtime/serve_releases.py): a newly installed release
of a batched model is built into a runner in the background and swapped in between two passes.

Each batched service describes its passes whole (bridge/stages/describe_rows.py: the single-face pipeline's
describe step, one row per stream, through the same formulas), so a remote stream gets the FaceFrame that
`facebridge run` gives for the same frames. It is injected into serving/, which never imports the stages.
"""
from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

from bridge.calibration import CalibrationProfile
from bridge.engines.cuda_wait import set_cuda_wait
from bridge.errors import FaceBridgeError
from bridge.expression.refresh import IdentityRefresher
from bridge.expression.rows import takes
from bridge.expression.stage import ExpressionEstimator
from bridge.models import manifest
from bridge.multistream.runners import make_runner, make_runners, role_models
from bridge.multistream.service import MultiStreamFaceService
from bridge.runtime.gc_pauses import GcPauses
from bridge.runtime.gc_pauses import settle as settle_heap
from bridge.runtime.native_pools import pin_native_pools
from bridge.runtime.options import update_state_dir
from bridge.runtime.serve_releases import PassGate, ServeReleases
from bridge.runtime.stopping import say_stopped, serve_until_stopped
from bridge.serving.engine_link import RemoteService
from bridge.serving.grpc_service import FaceServeServer, check_listen
from bridge.serving.replies import PassReplies
from bridge.serving.streams import StreamTable
from bridge.stages.describe_rows import DescribeRows, MeasuredFaces

log = logging.getLogger(__name__)

RUNNER_KINDS = {"cpu": "onnxruntime", "torch-cuda": "torch-cuda", "onnxruntime-cuda": "onnxruntime-cuda"}
# GPU batch buckets (as `facebridge bench engines` measured them): a pass runs the next bucket up, so steps of about
# 1.25x keep the padding waste under 25 %
GPU_BUCKETS = (1, 8, 32, 64, 96, 128, 160, 192, 256, 320, 384, 448, 512, 640, 768, 896, 1024, 1280, 1536, 2048,
               2560, 3072, 4096)


@dataclass(frozen=True)
class ServeConfig:
    """Everything `facebridge serve` was asked to do (built by bridge/commands/serve.py from its arguments)."""

    grpc: str = "127.0.0.1:50061"  # HOST:PORT the Track service listens on
    runners: str = "cpu"  # cpu | torch-cuda | onnxruntime-cuda
    max_streams: int = 16
    max_streams_per_peer: int | None = None  # streams one client host may hold (None: max_streams)
    max_frame_sizes: int = 4  # frame sizes with a batched service at once (the least recently used idle one goes)
    deadline_ms: float = 100.0  # an image waiting longer than this is dropped as late
    token: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    replica: str | None = None  # name in reports (default: the address)
    threads: int = 1  # CPU runners: inference threads per model
    smoothing: bool = True
    calibration: bool = True  # apply a stored calibration profile per subject, as `run` does
    fp16: bool = True  # GPU runners: half precision (channels_last, compiled)
    graphs: bool = True  # torch-cuda: capture whole passes as CUDA graphs
    prewarm: tuple[tuple[int, int], ...] = ()  # (height, width) frame sizes whose batched service is built at start
    identity_workers: int = 1  # threads that fold every stream's identity refreshes in (bridge/expression/refresh.py)
    write_deadline_s: float = 10.0  # a stream whose client took no response for this long is ended
    idle_timeout_s: float = 30.0  # a stream whose client sent no image for this long is ended (0: never)
    frame_sizes: tuple = ()  # (height, width) sizes accepted; empty: any (each size builds a batched service)
    updates: str | None = "auto"  # the update store to follow: "auto" (the user's), a folder, or None (off)
    decode_workers: int = 0  # JPEG decode threads; 0: one a core, at most 8
    cuda_wait: str = "block"  # GPU runners: how host threads wait for the GPU (bridge/engines/cuda_wait.py)
    jpeg_batches: bool | None = None  # every JPEG waiting decoded in one call (None: when decoding on the GPU)
    jpeg_decoder: str = "torchvision"  # the GPU's JPEG decoder: torchvision (nvJPEG) or nvimgcodec
    # how long a thread may hold the interpreter lock while another waits for it (sys.setswitchinterval), ms;
    # None leaves Python's 5 ms
    switch_interval_ms: float | None = None
    # front-end processes (runtime/serve_engine.py): 0 serves in this one process; N: this process is the engine
    # (runners, decode, passes) and N processes own the gRPC streams and describe them, one port each
    front_ends: int = 0
    frame_slot_kib: int = 512  # with front ends: the largest image (KiB) a shared-memory frame slot holds
    # the most frames a pass (and a JPEG decode batch) takes; 0: every stream's at once. Smaller passes let the
    # decode, the pass and the describe step of different frames overlap (docs/PERFORMANCE.md: what it did)
    pass_batch: int = 0
    # with front ends: the engine's JPEG decode in this many processes of their own (multistream/decode_process.py;
    # under MPS on a GPU they decode beside the passes); 0 decodes in the engine process
    decode_processes: int = 0


class PassDescriber:
    """Every stream of one batched service described a pass at a time (the `make_describer` product): one row of
    DescribeRows per stream, over the batched tracker's StreamFaces."""

    def __init__(self, rows: int, smoothing: bool, calibration: bool, model_versions: dict[str, str],
                 refresher=None, on_pass=None) -> None:
        self._calibration, self._refresher = calibration, refresher
        self._on_pass = on_pass  # on_pass(faces): each pass's results, read by the releases' fallback
        outputs = ExpressionEstimator(session=False).contract
        if not takes(outputs):
            raise FaceBridgeError(f"facebridge serve takes the shipped expression model's outputs, not "
                                  f"{outputs.model_id}", "serve with the shipped regressor")
        self._blendshapes, self._head = outputs.outputs["blendshapes"][0], outputs.outputs["head_rotation"][0]
        self.rows = DescribeRows(rows, smoothing=smoothing, model_versions=model_versions)

    def open(self, subject: str) -> _Row:
        """A new stream's row; its identity refreshes go to the server's shared refresher."""
        expression = ExpressionEstimator(session=False, refresher=self._refresher)  # the regressor ran batched
        profile = CalibrationProfile.load(subject) if self._calibration else None
        return _Row(self, self.rows.open(subject, expression, profile), expression)

    def describe(self, handles: list[_Row], frames, faces, sizes):
        if self._on_pass is not None:
            self._on_pass(faces)
        measured = MeasuredFaces(found=faces.tracked, points=faces.landmarks, presence=faces.presence,
                                 iris=faces.irises, emotion=faces.emotion,
                                 expression_outputs={self._blendshapes: faces.blendshapes,
                                                     self._head: faces.expression_head})
        return self.rows.describe([h.row for h in handles], frames, measured, sizes)


class _Row:
    def __init__(self, describer: PassDescriber, row: int, expression) -> None:
        self.describer, self.row, self.expression = describer, row, expression

    def close(self) -> None:
        """The stream ended: its row is freed, its identity refresh still waiting dropped."""
        if self.expression.refresher is not None:
            self.expression.refresher.discard(self.expression)
        self.describer.rows.close(self.row)


def model_versions() -> dict[str, str]:
    """What the FaceFrames announce (the same as FacePipeline.model_versions for the shipped models)."""
    versions = {name: entry["sha256"][:12] for name, entry in manifest()["models"].items()}
    versions.update(ExpressionEstimator(session=False).model_versions)
    return versions


@dataclass
class BatchedModels:
    """The batched runners of a serve process and how they are used (`batched_models`)."""

    kind: str
    device: str
    max_batch: int  # the largest pass
    buckets: list[int] | None  # GPU batch buckets (captured passes)
    whole_pass: bool  # torch-cuda: whole passes captured as CUDA graphs
    runners: dict
    gate: object  # serve_releases.PassGate: every pass holds it; `versions` the FaceFrames announce
    releases: object | None  # serve_releases.ServeReleases when following an update store

    def make_service(self, frame_hw, num_streams: int, finish_pass):
        """The batched service of one frame size over these runners (its heap settled after the build)."""
        log.info("batched service for %dx%d frames, %d slots", frame_hw[1], frame_hw[0], num_streams)
        captured = self.buckets if self.whole_pass else None
        t0 = time.monotonic()
        if captured:  # silent, it looked hung: 113-149 s at --max-streams 1000 on an H100
            _report(f"capturing the pass of {frame_hw[1]}x{frame_hw[0]} frames as CUDA graphs for {len(captured)} "
                    f"batch sizes ({min(captured)}-{max(captured)}); at a large --max-streams this takes minutes")
        service = MultiStreamFaceService(num_streams, frame_hw, self.runners, device=self.device,
                                         max_batch=self.max_batch, graph_buckets=captured,
                                         pass_lock=self.gate, finish_pass=finish_pass)
        if captured:
            _report(f"captured the pass of {frame_hw[1]}x{frame_hw[0]} frames in {time.monotonic() - t0:.0f} s")
        # what the build made (compiled passes, captured graphs) lives as long as the service: out of the
        # collector's walks (runtime/gc_pauses.py); once a frame size, beside a build that took seconds
        log.info("heap settled after the build in %.0f ms", settle_heap())
        return service

    def status(self) -> dict:
        return self.releases.status() if self.releases is not None else {"model_versions": self.gate.versions}

    def close(self) -> None:
        if self.releases is not None:
            self.releases.close()


def apply_switch_interval(config: ServeConfig) -> None:
    """--switch-interval-ms in this process (the one server, the engine, and each front end, whose describing thread
    waits for the lock while its gRPC loop holds it)."""
    if config.switch_interval_ms is not None:
        sys.setswitchinterval(config.switch_interval_ms / 1000.0)
        log.info("interpreter lock switch interval: %.2f ms", config.switch_interval_ms)


def check_config(config: ServeConfig) -> None:
    if config.runners not in RUNNER_KINDS:
        raise FaceBridgeError(f"unknown runners {config.runners!r}", f"use one of {', '.join(RUNNER_KINDS)}")
    if config.max_streams < 1:
        raise FaceBridgeError("--max-streams must be at least 1", "pass the number of face streams to serve")

    check_listen(config.grpc, config.token, config.tls_cert, config.tls_key)  # before any model loads


def batched_models(config: ServeConfig, services, max_batch: int | None = None) -> BatchedModels:
    """The runners for `config` (and the releases they follow), on a process whose native pools are pinned.
    services() -> the batched services built over them (a swap recaptures their CUDA graphs); max_batch: the
    largest pass (default --max-streams), at most --pass-batch."""
    max_batch = min(max_batch or config.max_streams, config.pass_batch or 1 << 30)
    state_dir = update_state_dir(config.updates)  # "auto": this user's store, even before anything is installed
    try:
        import torch  # noqa: F401 - the batched tracker's
    except ImportError:
        raise FaceBridgeError("facebridge serve needs torch (the batched tracker runs on torch tensors)",
                              "pip install torch (a CUDA build on a GPU server)") from None

    kind = RUNNER_KINDS[config.runners]
    on_gpu = kind.endswith("-cuda")
    device = "cuda" if on_gpu else "cpu"
    if on_gpu:  # before any CUDA call of this process creates the context
        log.info("%s", set_cuda_wait(config.cuda_wait))
    apply_switch_interval(config)
    # one thread per native pool: the streams are the parallelism (CPU runners: --threads for torch's own pool)
    log.info("native pools pinned: %s", pin_native_pools(torch_threads=config.threads if not on_gpu else 1))
    whole_pass = kind == "torch-cuda" and config.graphs
    buckets = [b for b in GPU_BUCKETS if b < max_batch] + [max_batch] if on_gpu else None
    options = dict(fp16=config.fp16 and on_gpu, threads=config.threads, buckets=buckets,
                   tracked_pass_graphs=whole_pass)
    runners = make_runners(kind, max_batch, **options)

    def recapture(roles) -> None:  # a captured pass holds the old runners' kernels: capture it again
        for service in services():
            if not getattr(service, "graphs", False):
                continue
            try:
                service.tracker.capture_cuda_graphs(buckets)
            except (RuntimeError, ValueError) as e:  # never replay the old models' graph: run eager passes
                service.tracker.release_cuda_graphs()
                service.graphs = False
                log.warning("CUDA-graph capture after the swap of %s failed (%s); serving with eager passes",
                            ", ".join(roles), str(e).splitlines()[0][:200])

    releases = None
    if state_dir is None:
        gate = PassGate(runners, model_versions())  # the services of several frame sizes share these runners
    else:
        models = {name: role for role, name in role_models().items() if role in runners}
        releases = ServeReleases(state_dir, runners, model_versions(), models,
                                 lambda role, path: make_runner(kind, role, path, max_batch, **options),
                                 max_batch, device=device, fp16=options["fp16"], report=_report,
                                 on_swap=recapture if whole_pass else None)
        gate = releases.gate
    return BatchedModels(kind, device, max_batch, buckets, whole_pass, runners, gate, releases)


def pass_replies(config: ServeConfig, versions, on_pass=None):
    """(the identity refresher, PassReplies): how a serve process describes each pass of its streams and makes
    their replies. versions() -> the model versions the FaceFrames announce now."""
    refresher = IdentityRefresher(max(1, config.identity_workers))
    return refresher, PassReplies(lambda rows: PassDescriber(rows, config.smoothing, config.calibration, versions,
                                                             refresher=refresher, on_pass=on_pass))


def build_server(config: ServeConfig):
    """The running Track server for `config` (listening when this returns); raises FaceBridgeError on bad input."""
    check_config(config)

    table = None
    models = batched_models(config, lambda: table.services() if table is not None else [])
    gate, releases = models.gate, models.releases
    refresher, replies = pass_replies(config, lambda: gate.versions,
                                      on_pass=releases.check_pass if releases is not None else None)
    try:
        table = StreamTable(lambda hw, n: models.make_service(hw, n, replies.for_service(n)), config.max_streams,
                            deadline_s=config.deadline_ms / 1000.0, max_sizes=config.max_frame_sizes,
                            max_streams_per_peer=config.max_streams_per_peer)
        if releases is not None:
            releases.start()  # releases installed before now serve from the first frame
        for frame_hw in config.prewarm:
            table.prepare(frame_hw)
        server = FaceServeServer(table, config.grpc, device=models.device, token=config.token,
                                 tls_cert=config.tls_cert, tls_key=config.tls_key, replica=config.replica,
                                 runners=config.runners, write_deadline_s=config.write_deadline_s,
                                 idle_timeout_s=config.idle_timeout_s, frame_sizes=config.frame_sizes,
                                 decode_workers=config.decode_workers or None,
                                 batched_jpeg=config.jpeg_batches, jpeg_batch=models.max_batch,
                                 jpeg_decoder=config.jpeg_decoder)
    except BaseException:
        refresher.close()
        models.close()
        raise
    server.on_close(refresher.close)
    warm_describe(config, refresher)
    log.info("heap settled after start-up in %.0f ms", settle_heap())  # models, runners, the gRPC server
    pauses = GcPauses().start()
    server.on_close(pauses.close)
    server.status_extra = lambda: {**models.status(), **pauses.stats()}
    server.on_close(models.close)
    return server


def warm_describe(config: ServeConfig, refresher) -> None:
    """Build now what a stream's describe step first builds (its compiled kernels, numba and the modules they import:
    about 90,000 objects), so that the heap settles with it: built at a front end's first stream instead, it stayed
    in every later full collection's walk (50-80 ms pauses on the 2-core VM, every stream of the front end
    waiting; 50-144 ms in the H100 runs that lost faces, docs/PERFORMANCE.md). A one-process server does it too (its
    first frame size's describer was built before its settle, a stream's first row after)."""
    PassDescriber(1, config.smoothing, False, {}, refresher=refresher).open("warm-up").close()


def build_front_end(config: ServeConfig, link, address: str, max_streams: int, replica: str | None = None):
    """A front-end process's Track server (`--front-ends N`): the streams, their describe step and replies here,
    their images sent undecoded to the engine process through `link` (serving/engine_link.py)."""
    log.info("native pools pinned: %s", pin_native_pools(torch_threads=1))
    refresher, replies = pass_replies(config, lambda: link.versions)
    try:
        table = StreamTable(lambda hw, n: RemoteService(link, hw, n, replies.for_service(n)), max_streams,
                            deadline_s=config.deadline_ms / 1000.0, max_sizes=config.max_frame_sizes,
                            max_streams_per_peer=config.max_streams_per_peer)
        server = FaceServeServer(table, address, device="cpu", token=config.token, tls_cert=config.tls_cert,
                                 tls_key=config.tls_key, replica=replica, runners=config.runners,
                                 write_deadline_s=config.write_deadline_s, idle_timeout_s=config.idle_timeout_s,
                                 frame_sizes=config.frame_sizes, forward=True)
    except BaseException:
        refresher.close()
        raise
    server.on_close(refresher.close)
    warm_describe(config, refresher)
    log.info("heap settled after start-up in %.0f ms", settle_heap())
    pauses = GcPauses().start()
    server.on_close(pauses.close)
    server.status_extra = lambda: {"model_versions": link.versions, "engine_cpu": link.engine_cpu(), **pauses.stats()}
    return server


def _report(line: str) -> None:
    """One line to stderr in one write: the engine and its front ends share the terminal (or pipe), and print's two
    writes, the text and then its newline, let two processes' lines run into one."""
    sys.stderr.write(f"facebridge serve: {line}\n")
    sys.stderr.flush()


def status_line(stats: dict) -> str:
    release = f" | release {stats['release']}" if stats.get("release") else ""
    return (f"{stats['streams']}/{stats['max_streams']} streams | served {stats['served']} | dropped stale "
            f"{stats['stale']} late {stats['late']} | bad {stats['bad']} | server p50 {stats['latency_ms_p50']:.1f} "
            f"ms p99 {stats['latency_ms_p99']:.1f} ms | batch {stats['mean_batch']:.1f} | gc max "
            f"{stats.get('gc_pause_ms_max', 0.0):.1f} ms{release}")


def serve(config: ServeConfig, status: bool = True, ready=lambda line: print(line, flush=True)) -> int:
    """Serve until Ctrl-C or SIGTERM; `ready(line)` is told the address once the server listens."""
    server = build_server(config)
    try:  # Ctrl-C: the streams end cleanly, then the command's Ctrl-C status (130)
        ready(f"facebridge serve: listening on {server.address} ({config.runners} runners, decode "
              f"{server.decoder_name}, up to {config.max_streams} streams)")
        serve_until_stopped((lambda: status_line(server.stats())) if status else None)
    finally:
        server.close()
    say_stopped("facebridge serve")  # returned: SIGTERM (Ctrl-C passes through as KeyboardInterrupt)
    return 0
