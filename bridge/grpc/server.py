"""GrpcSink: serves the facebridge.v1 stream (proto/facebridge/v1/facebridge.proto) to any number of subscribers.

The pipeline calls `send(frame)`; it converts the frame once and drops it into each subscriber's latest-frame
slot (one slot per subject), so `send` never waits on the network. Each subscriber's own server thread takes
what is in its slots and writes it; a slow reader only ever gets the newest frame, and what it missed is
counted (Frame.dropped_frames); a client that falls behind the live stream loses its slot, one peer host holds
a bounded share of them and a newcomer always gets one (bridge/grpc/subscribers.py). Who may
connect is bridge/grpc/access.py. Requests are capped at MAX_REQUEST_BYTES and the server's receive window is
kept that small, so a huge request costs the server one window, not its whole body; a malformed one is refused
with INVALID_ARGUMENT and one log line, never a traceback. Health checking and server reflection are enabled.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from concurrent import futures
from typing import Protocol

import grpc
from grpc_health.v1 import health_pb2

from bridge import __version__, ports
from bridge.errors import SinkError
from bridge.frame import FaceFrame
from bridge.grpc import access
from bridge.grpc.convert import build_frame, build_header, layout_key
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.subscribers import MAX_LAG_S, MAX_PER_PEER, Subscriber, choose_slot
from bridge.listeners import AUTO_TOKEN, listener_token, warn_plain_text
from bridge.sinks.base import Sink
from bridge.stats import RollingWindow

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["FaceBridgeService"].full_name  # "facebridge.v1.FaceBridgeService"
MAX_REQUEST_BYTES = 64 * 1024  # requests are tiny; anything bigger is malformed or hostile
MALFORMED_LOG_INTERVAL_S = 1.0  # one line per malformed request, at most one a second (the rest are counted)
WAKE_INTERVAL_S = 0.5  # how often an idle subscriber thread checks that its client is still there


class BridgeControl(Protocol):
    """What the running pipeline offers the gRPC service beyond frames (implemented by `facebridge run`)."""

    def status(self) -> dict:
        """Keys: sources, backends, model_versions (dict), fps, latency_ms_p50, latency_ms_p99, subjects, state."""

    def calibrate(self, subject: str) -> tuple[bool, str]:
        ...

    def subjects(self) -> list[str]:
        ...


class _Servicer(pb_grpc.FaceBridgeServiceServicer):
    def __init__(self, sink: GrpcSink) -> None:
        self.sink = sink

    def handler(self) -> grpc.GenericRpcHandler:
        """The service with deserializers that never raise, so a malformed request is refused by us."""
        unary, stream = grpc.unary_unary_rpc_method_handler, grpc.unary_stream_rpc_method_handler
        methods = {name: kind(getattr(self, name), access.lenient(request), response.SerializeToString)
                   for name, kind, request, response in (
                       ("Subscribe", stream, pb.SubscribeRequest, pb.SubscribeResponse),
                       ("GetStatus", unary, pb.GetStatusRequest, pb.GetStatusResponse),
                       ("Calibrate", unary, pb.CalibrateRequest, pb.CalibrateResponse),
                       ("ListSubjects", unary, pb.ListSubjectsRequest, pb.ListSubjectsResponse))}
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    def _check(self, request, context) -> None:
        if isinstance(request, access.Malformed):
            self.sink._note_malformed(context.peer(), request)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the request is not a facebridge.v1.{request.message} ({request.error})")

    def Subscribe(self, request, context):
        self._check(request, context)
        rate = request.max_frame_rate
        if not math.isfinite(rate) or rate < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"max_frame_rate must be a finite number >= 0, got {rate}; send 0 for every frame")
        known = self.sink.known_subjects(context)
        unknown = sorted(set(request.subjects) - set(known)) if known else []
        if unknown:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown subject {', '.join(map(repr, unknown))}; this "
                          f"bridge has {', '.join(map(repr, known))} (send no subjects for all of them)")
        sub = self.sink._add_subscriber(context.peer(), set(request.subjects), rate, context)
        if sub is None:
            context.abort(grpc.StatusCode.UNAVAILABLE, "the bridge is shutting down; reconnect later")
        # Runs when the client cancels, vanishes or the server stops: wakes the loop below at once.
        context.add_callback(sub.close)
        try:
            while not sub.closed and context.is_active():
                for header, frame in sub.take(WAKE_INTERVAL_S):
                    if sub.header_sent.get(header.subject) != header.layout_id:
                        sub.writing()
                        yield pb.SubscribeResponse(header=header)  # returns once gRPC took it (flow control)
                        sub.written()
                        sub.header_sent[header.subject] = header.layout_id
                    response = pb.SubscribeResponse()
                    response.frame.CopyFrom(frame)
                    response.frame.dropped_frames = sub.dropped
                    response.frame.send_time = time.time()
                    sub.writing()
                    yield response
                    sub.written()
                    sub.sent += 1
            if self.sink._closed and context.is_active():
                context.abort(grpc.StatusCode.UNAVAILABLE, "the bridge is shutting down; reconnect later")
        finally:
            self.sink._remove_subscriber(sub)

    def GetStatus(self, request, context):
        self._check(request, context)
        return self.sink.status_message(context)

    def Calibrate(self, request, context):
        self._check(request, context)
        control = self.sink.control
        if control is None:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          "this server has no pipeline to calibrate; run `facebridge run --grpc HOST:PORT`")
        subject = request.subject
        if not subject:
            known = _call(context, control.subjects)
            if len(known) != 1:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"name the subject to calibrate (one of: {', '.join(known) or 'none yet'})")
            subject = known[0]
        ok, message = _call(context, control.calibrate, subject)
        return pb.CalibrateResponse(ok=bool(ok), message=str(message))

    def ListSubjects(self, request, context):
        self._check(request, context)
        return pb.ListSubjectsResponse(subjects=self.sink.known_subjects(context))


def _call(context, fn, *args):
    """Call into the pipeline; a failure there becomes an INTERNAL status for this one request."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - one failing request must not take the server down
        log.warning("gRPC %s failed: %s", getattr(fn, "__name__", fn), e)
        context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


class GrpcSink(Sink):
    """The facebridge.v1 gRPC server as a pipeline sink."""

    name = "grpc"
    failure_hint = "frames that could not be encoded; the stream went on"

    def __init__(self, address: str = ports.GRPC, *, token: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, control: BridgeControl | None = None, max_subscribers: int = 16,
                 max_lag_s: float = MAX_LAG_S, max_per_peer: int = MAX_PER_PEER) -> None:
        super().__init__()
        access.check_token(token)
        host, port = access.split_address(address)
        if not access.is_loopback(host) and not token:
            raise SinkError(f"gRPC on {address} would stream face data to the network without a token",
                            "pass --grpc-token auto (a random token is made and printed; and --grpc-tls-cert/"
                            "--grpc-tls-key), or bind 127.0.0.1")
        if bool(tls_cert) != bool(tls_key):
            raise SinkError("TLS needs both a certificate and its private key",
                            "pass both --grpc-tls-cert CERT.pem and --grpc-tls-key KEY.pem")
        self.generated_token = token == AUTO_TOKEN  # the command prints it once
        token = self.token = listener_token("--grpc-token", token, host)
        if not tls_cert and not access.is_loopback(host):
            warn_plain_text("the gRPC stream", address, "--grpc-tls-cert/--grpc-tls-key")
        self.control = control
        self.max_subscribers = max_subscribers
        self.max_lag_s = max_lag_s
        self.max_per_peer = max(1, min(max_per_peer, max_subscribers))
        self._lock = threading.Lock()
        self._subscribers: list[Subscriber] = []
        self._layouts: dict[str, tuple[tuple, pb.StreamHeader]] = {}  # subject -> (layout key, header)
        self._latest: dict[str, tuple[pb.StreamHeader, pb.Frame]] = {}  # what a new subscriber starts with
        self._next_layout_id = 1
        self._dropped_by_gone = 0
        self._window = RollingWindow()  # what this server saw, for GetStatus when no RunControl is attached
        self._model_versions: dict[str, str] = {}
        self._closed = False
        self._closing = threading.Event()
        self._malformed = 0
        self._malformed_logged_at = -1e9
        self.evicted = 0
        access.one_line_grpc_logs()  # gRPC's own records of bad requests: one line each

        interceptors = [access.BearerTokenInterceptor(token)] if token else []
        # One worker per streaming subscriber plus a few for unary calls; more concurrent calls are refused
        # (RESOURCE_EXHAUSTED) instead of queueing without bound.
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_subscribers + 4, thread_name_prefix="grpc-sink"),
            interceptors=interceptors,
            maximum_concurrent_rpcs=max_subscribers + 16,
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                # the receive window stays about one request: a huge request is refused after one window,
                # not read in full (a 64 MB body cost CPU the pipeline needed)
                ("grpc.http2.lookahead_bytes", MAX_REQUEST_BYTES + 1024),
                ("grpc.http2.bdp_probe", 0),
                ("grpc.keepalive_time_ms", 10_000),  # find clients that vanished without closing
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.so_reuseport", 0),  # a second bridge on the same port must fail, not share it
            ],
        )
        self._server.add_generic_rpc_handlers((_Servicer(self).handler(),))
        self._health = access.add_health_and_reflection(self._server, SERVICE_NAME)
        self.port = access.bind(self._server, address, tls_cert, tls_key)
        self.address = f"{host}:{self.port}"
        self.destination = f"grpc {self.address}" + (" (TLS)" if tls_cert else "")
        self._server.start()
        # With a pipeline behind it the server says NOT_SERVING until the first frame is published (the models
        # are still loading); on its own it serves at once.
        self._serving = control is None
        self._set_health(self._serving)
        self._reaper = threading.Thread(target=self._evict_stuck, name="grpc-sink-lease", daemon=True)
        self._reaper.start()
        log.info("gRPC stream on %s (%s)", self.address, "TLS" if tls_cert else "plaintext")

    def _set_health(self, serving: bool) -> None:
        status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        for service in ("", SERVICE_NAME):
            self._health.set(service, status)

    # ---- pipeline side -------------------------------------------------------------------------------------
    def send(self, frame: FaceFrame) -> None:
        try:
            self._publish(frame)
        except Exception as e:  # noqa: BLE001 - a bad frame is counted, the stream goes on
            self._failed(f"frame {frame.seq} could not be encoded", e)

    def _publish(self, frame: FaceFrame) -> None:
        key = layout_key(frame)
        now = time.monotonic()
        latency_ms = (time.perf_counter() - frame.t_capture_mono) * 1000.0
        with self._lock:
            known = self._layouts.get(frame.subject)
            if known is None or known[0] != key:
                header = build_header(frame, self._next_layout_id)
                self._next_layout_id += 1
                self._layouts[frame.subject] = (key, header)
            else:
                header = known[1]
            self._window.add(now, latency_ms)
            self._model_versions.update(header.model_versions)
            subscribers = list(self._subscribers)
        message = build_frame(frame, header.layout_id)
        with self._lock:
            self._latest[frame.subject] = (header, message)
        for sub in subscribers:
            sub.offer(frame.subject, header, message, now)
        self.sent += 1
        if not self._serving:
            self._serving = True
            self._set_health(True)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._health.enter_graceful_shutdown()
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.close()
        self._server.stop(grace=1.0).wait(5.0)

    def label(self) -> str:
        return f"grpc {self.address}"

    # ---- service side ------------------------------------------------------------------------------------------
    def _add_subscriber(self, peer: str, subjects: set[str], max_frame_rate: float, context=None
                        ) -> Subscriber | None:
        """A slot for a newcomer, always (bridge/grpc/subscribers.py `choose_slot`); None once closing."""
        with self._lock:
            if self._closed:
                return None
            host = access.peer_host(peer) or peer
            admitted, evicted, why = choose_slot(self._subscribers, host, self.max_subscribers, self.max_per_peer,
                                                 time.monotonic())
            if not admitted:
                return None
            if evicted is not None:
                self._subscribers.remove(evicted)
                self._dropped_by_gone += evicted.dropped
            sub = Subscriber(peer, subjects, max_frame_rate, context)
            self._subscribers.append(sub)
            latest = list(self._latest.items())
        if evicted is not None:
            self._evict(evicted, f"its slot went to {peer}: {why}")
        now = time.monotonic()
        for subject, (header, frame) in latest:  # a client of an idle bridge still gets header and state now
            sub.offer(subject, header, frame, now)
        log.info("gRPC subscriber %s joined (%d now)", peer, len(self._subscribers))
        return sub

    def _evict(self, sub: Subscriber, why: str) -> None:
        self.evicted += 1
        log.warning("gRPC subscriber %s dropped (%s); its slot is free", sub.peer, why)
        sub.evict(why)

    def _evict_stuck(self) -> None:
        """The lease keeper: drop every subscriber whose frame gRPC has not taken for `max_lag_s` (it fell that
        far behind the live stream)."""
        while not self._closing.wait(min(0.25, self.max_lag_s / 4)):
            now = time.monotonic()
            with self._lock:
                stuck = [s for s in self._subscribers if s.stuck_for(now) >= self.max_lag_s and not s.evicted]
            for sub in stuck:
                behind = sub.stuck_for(now)  # before removal: the thread may clear it as it ends
                self._remove_subscriber(sub)
                self._evict(sub, f"it fell behind the live stream: no frame taken for {behind:.1f} s")

    def _remove_subscriber(self, sub: Subscriber) -> None:
        sub.close()
        with self._lock:
            if sub not in self._subscribers:
                return
            self._subscribers.remove(sub)
            self._dropped_by_gone += sub.dropped
        log.info("gRPC subscriber %s left after %d frames, %d dropped", sub.peer, sub.sent, sub.dropped)

    def _note_malformed(self, peer: str, request) -> None:
        self._malformed += 1
        now = time.monotonic()
        if now - self._malformed_logged_at >= MALFORMED_LOG_INTERVAL_S:
            self._malformed_logged_at = now
            log.warning("gRPC: a malformed %s from %s was refused (%s); %d so far", request.message, peer,
                        request.error, self._malformed)

    def known_subjects(self, context=None) -> list[str]:
        """The subjects this bridge has: the pipeline's when one is attached, else those seen so far."""
        if self.control is not None:
            return [str(s) for s in _call(context, self.control.subjects)]
        return self.subjects()

    def subjects(self) -> list[str]:
        with self._lock:
            return list(self._layouts)

    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def stats(self) -> dict:
        with self._lock:
            dropped = self._dropped_by_gone + sum(s.dropped for s in self._subscribers)
            return {**super().stats(), "subscribers": len(self._subscribers), "dropped": dropped,
                    "evicted": self.evicted, "malformed_requests": self._malformed}

    def status_message(self, context) -> pb.GetStatusResponse:
        stats = self.stats()
        now = time.monotonic()
        with self._lock:
            model_versions = dict(self._model_versions)
            fps = self._window.rate(now)
            p50, p99 = self._window.percentiles(now)
        status = {"sources": [], "backends": [], "model_versions": model_versions, "fps": fps,
                  "latency_ms_p50": p50, "latency_ms_p99": p99, "subjects": self.subjects(),
                  "state": "stopping" if self._closed else "running"}
        if self.control is not None:
            status.update(_call(context, self.control.status) or {})
        return pb.GetStatusResponse(
            sources=[str(s) for s in status.get("sources", [])],
            backends=[str(b) for b in status.get("backends", [])],
            model_versions={str(k): str(v) for k, v in dict(status.get("model_versions") or {}).items()},
            fps=float(status.get("fps") or 0.0),
            latency_ms_p50=float(status.get("latency_ms_p50") or 0.0),
            latency_ms_p99=float(status.get("latency_ms_p99") or 0.0),
            subjects=[str(s) for s in status.get("subjects", [])],
            subscribers=stats["subscribers"],
            frames_published=self.sent,
            frames_dropped=stats["dropped"],
            server_version=__version__,
            state=str(status.get("state") or ""),
        )
