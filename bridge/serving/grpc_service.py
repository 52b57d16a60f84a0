"""FaceServeServer: the `facebridge serve` gRPC front end (facebridge.v1.FaceServeService), many face streams on
one batched service, on grpc.aio: one event loop for every stream (bridge/serving/event_loop.py), no thread per
stream.

One long-lived bidirectional Track stream per face stream, run as two coroutines (bridge/serving/track.py); JPEG is
decoded by a small pool of decode workers (threads: OpenCV and nvJPEG release the interpreter lock); the batched
service's passes run on its own threads (bridge/multistream/batcher.py) and hand each result back to its stream's
coroutine through loop.call_soon_threadsafe. A stream lives on the replica that accepted it until it ends; a client
that cancels, vanishes (keepalive 10 s) or is killed frees its slot at once. Beyond `max_streams` a stream is
refused with RESOURCE_EXHAUSTED; a client that stops reading is ended after `write_deadline_s`, one that sends
nothing after `idle_timeout_s` (bridge/serving/leases.py). Binding beyond loopback needs a bearer token, and raw
(unencoded) images are accepted only from loopback clients.
"""
from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2

from bridge import __version__
from bridge.errors import FaceBridgeError
from bridge.grpc import access
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.listeners import AUTO_TOKEN, listener_token, warn_plain_text
from bridge.multistream.decode import ImageDecoder
from bridge.multistream.decode_batch import JpegBatches
from bridge.serving.event_loop import ServeLoop
from bridge.serving.leases import IDLE_TIMEOUT_S, WRITE_DEADLINE_S, WriteDeadline
from bridge.serving.streams import StreamTable
from bridge.serving.track import TrackStreams, serialize_response
from bridge.serving.track_many import TrackManyStreams
from bridge.thread_cpu import thread_cpu_seconds

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["FaceServeService"].full_name
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # a raw 1080p frame is 6.2 MB; a JPEG a few tens of kB
DECODE_WORKERS = 8  # at most: JPEG decode threads (a 480x360 JPEG is about 1.5 ms of CPU in OpenCV)


def check_listen(address: str, token: str | None, tls_cert: str | None, tls_key: str | None) -> str:
    """The host of `address` if serving there is allowed: beyond loopback only with a token (before any model loads)."""
    access.check_token(token)  # the gRPC sink's rules: printable ASCII, loopback or a strong token
    host, _port = access.split_address(address)
    if token == AUTO_TOKEN:
        raise FaceBridgeError("facebridge serve does not make a token (its replicas must share one)",
                              "make one with `python3 -c 'import secrets; print(secrets.token_urlsafe(32))'` and "
                              "pass it as --grpc-token to the server and its clients")
    listener_token("--grpc-token", token, host)
    if not access.is_loopback(host) and not token:
        raise FaceBridgeError(f"facebridge serve on {address} would take camera images from the network without "
                              "a token", "pass --grpc-token TOKEN (and --grpc-tls-cert/--grpc-tls-key), or bind "
                              "127.0.0.1")
    if bool(tls_cert) != bool(tls_key):
        raise FaceBridgeError("TLS needs both a certificate and its private key",
                              "pass both --grpc-tls-cert CERT.pem and --grpc-tls-key KEY.pem")
    if not access.is_loopback(host) and not tls_cert:
        warn_plain_text("facebridge serve", address, "--grpc-tls-cert/--grpc-tls-key")
    return host


class FaceServeServer:
    """The Track service on `address`, over the table's batched services (which finish their passes with a
    PassReplies: the replies the stream coroutines send). Built, used and closed from any thread: the gRPC server
    itself lives on its ServeLoop."""

    def __init__(self, table: StreamTable, address: str = "127.0.0.1:50061", *,
                 device: str = "cpu", token: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, replica: str | None = None, runners: str = "",
                 default_subject: str = "FaceBridge", write_deadline_s: float = WRITE_DEADLINE_S,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, frame_sizes=(), decode_workers: int | None = None,
                 batched_jpeg: bool | None = None, jpeg_batch: int | None = None, forward: bool = False,
                 jpeg_decoder: str = "torchvision") -> None:
        """frame_sizes: the (height, width) sizes images may have (each builds a batched service on first use);
        empty: any, up to the table's max_sizes. decode_workers: JPEG decode threads (default: one a core, at
        most DECODE_WORKERS). batched_jpeg: every JPEG waiting decoded in one call on one thread (JpegBatches;
        default: when the decoder decodes on the GPU, nvJPEG's batched decode), else on the decode workers;
        jpeg_batch: the most JPEGs such a call takes (default the table's max_streams); jpeg_decoder: the GPU's
        JPEG decoder (multistream/decode.py: torchvision or nvimgcodec).
        forward: a front-end process of `facebridge serve --front-ends N`: images are only measured here and go to
        the engine process undecoded (the table's services are engine_link.RemoteServices)."""
        host = check_listen(address, token, tls_cert, tls_key)
        loopback = access.is_loopback(host)
        self.table = table
        self.decoder = ImageDecoder(device, allow_raw=loopback, library=jpeg_decoder)
        self.runners = runners
        self.default_subject = default_subject
        self.frame_sizes = frozenset(tuple(hw) for hw in frame_sizes)
        self._closed = False
        self._stopped = threading.Event()
        self._on_close: list = []
        self.status_extra = lambda: {}  # more for stats(): {"model_versions": {...}, "release": "..."} (serve)
        # a stream whose client stopped reading, or sends nothing, is ended
        self.leases = WriteDeadline(write_deadline_s, idle_timeout_s)
        self._live_lock = threading.Lock()
        self.invalid = self.malformed = 0
        self._malformed_logged_at = -1e9
        access.one_line_grpc_logs()  # gRPC's own records of bad requests: one line each
        self.forward = forward
        workers = 1 if forward else decode_workers or max(1, min(DECODE_WORKERS, os.cpu_count() or 1))
        self._decode_pool = futures.ThreadPoolExecutor(workers, thread_name_prefix="serve-decode")
        if batched_jpeg is None:
            batched_jpeg = self.decoder.gpu_jpeg
        batched_jpeg = batched_jpeg and not forward
        self._jpeg_batches = JpegBatches(self.decoder, max(1, jpeg_batch or table.max_streams)) if batched_jpeg \
            else None
        self.decoder_name = "in the engine process" if forward else \
            f"{self.decoder.name}, batched" if batched_jpeg else self.decoder.name
        self._loop = ServeLoop()
        try:
            self.port = self._loop.call(self._start(address, token, tls_cert, tls_key), timeout=60)
        except BaseException:
            self._loop.stop()
            self._decode_pool.shutdown(wait=False)
            if self._jpeg_batches is not None:
                self._jpeg_batches.close()
            raise
        self.address = f"{host}:{self.port}"
        self.replica = replica or self.address
        self.leases.start(self._loop.loop)
        log.info("facebridge serve on %s (%s, grpc.aio), up to %d streams, %d decode workers", self.address,
                 "TLS" if tls_cert else "plaintext", table.max_streams, workers)

    async def _start(self, address: str, token: str | None, tls_cert: str | None, tls_key: str | None) -> int:
        """On the loop: the grpc.aio server with Track, TrackMany, GetServeStatus, health and reflection, listening."""
        track = TrackStreams(self, self._loop.loop, self._decode_pool, self._jpeg_batches, self.forward)
        self._server = grpc.aio.server(
            interceptors=[access.AioBearerTokenInterceptor(token)] if token else [],
            maximum_concurrent_rpcs=self.table.max_streams + 16,  # past max_streams: our refusal, then gRPC's
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                     ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                     ("grpc.so_reuseport", 0)])  # a second server on the same port must fail, not share it
        methods = {  # deserializers that never raise: a malformed request is refused by us (one line)
            "Track": grpc.stream_stream_rpc_method_handler(track.Track, access.lenient(pb.TrackRequest),
                                                           serialize_response),
            "TrackMany": grpc.stream_stream_rpc_method_handler(TrackManyStreams(track).TrackMany,
                                                               access.lenient(pb.TrackManyRequest),
                                                               serialize_response),
            "GetServeStatus": grpc.unary_unary_rpc_method_handler(
                self._get_serve_status, access.lenient(pb.GetServeStatusRequest),
                pb.GetServeStatusResponse.SerializeToString)}
        self._server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME, methods),))
        self._health = access.add_health_and_reflection(self._server, SERVICE_NAME)
        port = access.bind(self._server, address, tls_cert, tls_key)
        await self._server.start()
        for service in ("", SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        return port

    async def _get_serve_status(self, request, context):
        if isinstance(request, access.Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                f"the request is not a facebridge.v1.{request.message} ({request.error})")
        # off the loop: a front end's stats wait up to a quarter second for the engine's CPU (EngineLink.engine_cpu)
        s = await asyncio.get_running_loop().run_in_executor(None, self.stats)
        return pb.GetServeStatusResponse(
            replica=self.replica, runners=self.runners, streams=s["streams"],
            max_streams=s["max_streams"], frames_received=s["received"], frames_served=s["served"],
            stale_dropped=s["stale"], late_dropped=s["late"], bad_frames=s["bad"], streams_refused=s["refused"],
            passes=s["passes"], mean_batch=s["mean_batch"], latency_ms_p50=s["latency_ms_p50"],
            latency_ms_p99=s["latency_ms_p99"], server_version=__version__, decoder=self.decoder_name,
            streams_evicted=s["evicted"], streams_invalid=s["invalid"],
            model_versions={str(k): str(v) for k, v in (s.get("model_versions") or {}).items()},
            release=str(s.get("release") or ""), gc_collections=s.get("gc_collections", []),
            gc_pause_ms_total=s.get("gc_pause_ms_total", 0.0), gc_pause_ms_max=s.get("gc_pause_ms_max", 0.0),
            gc_pauses_over_10ms=s.get("gc_pauses_over_10ms", 0),
            thread_cpu_s=_with_engine(thread_cpu_seconds(), s.get("engine_cpu")),
            frame_sizes=s["frame_sizes"], max_frame_sizes=s["max_sizes"], frame_sizes_released=s["sizes_released"],
            max_streams_per_peer=s["max_streams_per_peer"], streams_refused_per_peer=s["refused_per_peer"])

    # ---- streams refused ------------------------------------------------------------------------------
    def note_malformed(self, number: int, why: str) -> None:
        """A stream refused for its first message: one line a second at most (the rest are counted)."""
        with self._live_lock:
            self.malformed += 1
            now = time.monotonic()
            quiet = now - self._malformed_logged_at < 1.0
            if not quiet:
                self._malformed_logged_at = now
        if not quiet:
            log.warning("face stream %d refused: %s (%d so far)", number, why, self.malformed)

    def count_invalid(self) -> None:
        with self._live_lock:
            self.invalid += 1

    def on_close(self, fn) -> None:
        """Call fn() when the server closes (after its streams ended)."""
        self._on_close.append(fn)

    def stats(self) -> dict:
        """Live streams, totals, recent latency: what GetServeStatus answers and the metrics read."""
        return {**self.table.stats(), "replica": self.replica, "runners": self.runners,
                "decoder": self.decoder_name, "evicted": self.leases.evicted, "invalid": self.invalid,
                **self.status_extra()}

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until the server stopped; True when `timeout` passed first (as grpc.Server.wait_for_termination)."""
        return not self._stopped.wait(timeout)

    async def _stop(self) -> None:
        await self._health.enter_graceful_shutdown()
        await self._server.stop(grace=1.0)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.leases.close()
        try:
            self._loop.call(self._stop(), timeout=10.0)
        except Exception as e:  # noqa: BLE001 - closing goes on: the loop stops below either way
            log.warning("the gRPC server did not stop cleanly: %s", e)
        self._loop.stop()
        self._decode_pool.shutdown(wait=True)
        if self._jpeg_batches is not None:
            self._jpeg_batches.close()
        self.table.close()
        self._stopped.set()
        for fn in self._on_close:
            fn()


def _with_engine(own: dict[str, float], engine: dict | None) -> dict[str, float]:
    """A front end's CPU by thread group with its engine process's (as the engine last sent them, every second),
    each of those named `engine:PID:GROUP` (every front end of that engine carries the same ones)."""
    if not engine:
        return own
    return {**own, **{f"engine:{engine['pid']}:{k}": v for k, v in engine["threads"].items()}}
