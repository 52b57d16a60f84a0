"""GrpcSink: serves the facebridge.v1 stream (proto/facebridge/v1/facebridge.proto) to any number of subscribers.

The pipeline calls `send(frame)`; it converts the frame once and drops it into each subscriber's latest-frame
slot (one slot per subject), so `send` never waits on the network. Each subscriber's own server thread takes
what is in its slots and writes it; a slow reader only ever gets the newest frame, and what it missed is
counted (Frame.dropped_frames). Health checking and server reflection are enabled.
"""
from __future__ import annotations

import logging
import math
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Protocol

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from bridge import __version__
from bridge.errors import SinkError
from bridge.frame import FaceFrame
from bridge.grpc.convert import build_frame, build_header, layout_key
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.listeners import bearer_matches
from bridge.listeners import is_loopback as _is_loopback
from bridge.runtime.stats import RollingWindow
from bridge.sinks.base import Sink

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["FaceBridgeService"].full_name  # "facebridge.v1.FaceBridgeService"
MAX_REQUEST_BYTES = 64 * 1024  # requests are tiny; anything bigger is malformed or hostile
WAKE_INTERVAL_S = 0.5  # how often an idle subscriber thread checks that its client is still there


class BridgeControl(Protocol):
    """What the running pipeline offers the gRPC service beyond frames (implemented by `facebridge run`)."""

    def status(self) -> dict:
        """Keys: sources, backends, model_versions (dict), fps, latency_ms_p50, latency_ms_p99, subjects."""

    def calibrate(self, subject: str) -> tuple[bool, str]:
        ...

    def subjects(self) -> list[str]:
        ...


class _Subscriber:
    """One client's latest-frame slots (one per subject) and its counters."""

    def __init__(self, peer: str, subjects: set[str], max_frame_rate: float) -> None:
        self.peer = peer
        self.subjects = subjects
        self.min_interval = 1.0 / max_frame_rate if max_frame_rate > 0 else 0.0
        self.pending: dict[str, tuple[pb.StreamHeader, pb.Frame]] = {}
        self.last_offer: dict[str, float] = {}
        self.header_sent: dict[str, int] = {}  # subject -> layout_id this client has
        self.dropped = 0
        self.sent = 0
        self.closed = False
        self.cond = threading.Condition()

    def offer(self, subject: str, header: pb.StreamHeader, frame: pb.Frame, now: float) -> None:
        if self.subjects and subject not in self.subjects:
            return
        if self.min_interval and now - self.last_offer.get(subject, -math.inf) < self.min_interval:
            return  # the client asked for fewer frames: not a drop
        self.last_offer[subject] = now
        with self.cond:
            if subject in self.pending:
                self.dropped += 1
            self.pending[subject] = (header, frame)
            self.cond.notify()

    def take(self, timeout: float) -> list[tuple[pb.StreamHeader, pb.Frame]]:
        with self.cond:
            if not self.pending and not self.closed:
                self.cond.wait(timeout)
            items = list(self.pending.values())
            self.pending.clear()
            return items

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()


class _Servicer(pb_grpc.FaceBridgeServiceServicer):
    def __init__(self, sink: GrpcSink) -> None:
        self.sink = sink

    def Subscribe(self, request, context):
        rate = request.max_frame_rate
        if not math.isfinite(rate) or rate < 0:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"max_frame_rate must be a finite number >= 0, got {rate}; send 0 for every frame")
        sub = self.sink._add_subscriber(context.peer(), set(request.subjects), rate)
        if sub is None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this bridge already serves {self.sink.max_subscribers} subscribers; close one "
                          "or start facebridge with a higher limit")
        # Runs when the client cancels, vanishes or the server stops: wakes the loop below at once.
        context.add_callback(sub.close)
        try:
            while not sub.closed and context.is_active():
                for header, frame in sub.take(WAKE_INTERVAL_S):
                    if sub.header_sent.get(header.subject) != header.layout_id:
                        yield pb.SubscribeResponse(header=header)
                        sub.header_sent[header.subject] = header.layout_id
                    response = pb.SubscribeResponse()
                    response.frame.CopyFrom(frame)
                    response.frame.dropped_frames = sub.dropped
                    response.frame.send_time = time.time()
                    yield response
                    sub.sent += 1
            if self.sink._closed and context.is_active():
                context.abort(grpc.StatusCode.UNAVAILABLE, "the bridge is shutting down; reconnect later")
        finally:
            self.sink._remove_subscriber(sub)

    def GetStatus(self, request, context):
        return self.sink.status_message(context)

    def Calibrate(self, request, context):
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
        control = self.sink.control
        subjects = _call(context, control.subjects) if control is not None else self.sink.subjects()
        return pb.ListSubjectsResponse(subjects=[str(s) for s in subjects])


def _call(context, fn, *args):
    """Call into the pipeline; a failure there becomes an INTERNAL status for this one request."""
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - one failing request must not take the server down
        log.warning("gRPC %s failed: %s", getattr(fn, "__name__", fn), e)
        context.abort(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}")


class _BearerTokenInterceptor(grpc.ServerInterceptor):
    """Requires `authorization: Bearer <token>` on every call except health checks (probes carry no secrets)."""

    def __init__(self, token: str) -> None:
        self._token = token

        def deny(request_or_iterator, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED,
                          "missing or wrong bearer token; send metadata 'authorization: Bearer <token>'")

        # A refusal must have the same streaming shape as the method it stands in for.
        self._deny = {
            (False, False): grpc.unary_unary_rpc_method_handler(deny),
            (False, True): grpc.unary_stream_rpc_method_handler(deny),
            (True, False): grpc.stream_unary_rpc_method_handler(deny),
            (True, True): grpc.stream_stream_rpc_method_handler(deny),
        }

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or details.method.startswith("/grpc.health.v1.Health/"):
            return handler
        got = next((v for k, v in details.invocation_metadata if k == "authorization"), "")
        if bearer_matches(got, self._token):
            return handler
        return self._deny[(handler.request_streaming, handler.response_streaming)]


def _split_address(address: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise SinkError(f"gRPC address {address!r} is not HOST:PORT", "use e.g. --grpc 127.0.0.1:50051")
    return host, int(port)


class GrpcSink(Sink):
    """The facebridge.v1 gRPC server as a pipeline sink."""

    name = "grpc"

    def __init__(self, address: str = "127.0.0.1:50051", *, token: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, control: BridgeControl | None = None, max_subscribers: int = 16) -> None:
        super().__init__()
        host, port = _split_address(address)
        if not _is_loopback(host) and not token:
            raise SinkError(f"gRPC on {address} would stream face data to the network without a token",
                            "pass --grpc-token TOKEN (and --grpc-tls-cert/--grpc-tls-key), or bind 127.0.0.1")
        if bool(tls_cert) != bool(tls_key):
            raise SinkError("TLS needs both a certificate and its private key",
                            "pass both --grpc-tls-cert CERT.pem and --grpc-tls-key KEY.pem")
        if token and not tls_cert and not _is_loopback(host):
            log.warning("gRPC token on %s travels unencrypted; add --grpc-tls-cert/--grpc-tls-key", address)
        self.control = control
        self.max_subscribers = max_subscribers
        self._lock = threading.Lock()
        self._subscribers: list[_Subscriber] = []
        self._layouts: dict[str, tuple[tuple, pb.StreamHeader]] = {}  # subject -> (layout key, header)
        self._latest: dict[str, tuple[pb.StreamHeader, pb.Frame]] = {}  # what a new subscriber starts with
        self._next_layout_id = 1
        self._dropped_by_gone = 0
        self._window = RollingWindow()  # what this server saw, for GetStatus when no RunControl is attached
        self._model_versions: dict[str, str] = {}
        self._closed = False

        interceptors = [_BearerTokenInterceptor(token)] if token else []
        # One worker per streaming subscriber plus a few for unary calls; more concurrent calls are refused
        # (RESOURCE_EXHAUSTED) instead of queueing without bound.
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=max_subscribers + 4, thread_name_prefix="grpc-sink"),
            interceptors=interceptors,
            maximum_concurrent_rpcs=max_subscribers + 16,
            options=[
                ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
                ("grpc.keepalive_time_ms", 10_000),  # find clients that vanished without closing
                ("grpc.keepalive_timeout_ms", 5_000),
                ("grpc.so_reuseport", 0),  # a second bridge on the same port must fail, not share it
            ],
        )
        pb_grpc.add_FaceBridgeServiceServicer_to_server(_Servicer(self), self._server)
        self._health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, self._server)
        reflection.enable_server_reflection((SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME),
                                            self._server)
        try:
            if tls_cert:
                creds = grpc.ssl_server_credentials([(Path(tls_key).read_bytes(), Path(tls_cert).read_bytes())])
                self.port = self._server.add_secure_port(address, creds)
            else:
                self.port = self._server.add_insecure_port(address)
        except OSError as e:
            raise SinkError(f"cannot read the TLS certificate or key ({e})", "check the --grpc-tls-* paths") from e
        except RuntimeError as e:
            raise SinkError(f"cannot listen for gRPC on {address} ({e})",
                            "the port is probably in use; pick another with --grpc HOST:PORT") from e
        if not self.port:
            raise SinkError(f"cannot listen for gRPC on {address}",
                            "the port is probably in use; pick another with --grpc HOST:PORT")
        self.address = f"{host}:{self.port}"
        self.destination = f"grpc {self.address}" + (" (TLS)" if tls_cert else "")
        self._server.start()
        for service in ("", SERVICE_NAME):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("gRPC stream on %s (%s)", self.address, "TLS" if tls_cert else "plaintext")

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

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._health.enter_graceful_shutdown()
        with self._lock:
            subscribers = list(self._subscribers)
        for sub in subscribers:
            sub.close()
        self._server.stop(grace=1.0).wait(5.0)

    # ---- service side ------------------------------------------------------------------------------------------
    def _add_subscriber(self, peer: str, subjects: set[str], max_frame_rate: float) -> _Subscriber | None:
        with self._lock:
            if self._closed or len(self._subscribers) >= self.max_subscribers:
                return None
            sub = _Subscriber(peer, subjects, max_frame_rate)
            self._subscribers.append(sub)
            latest = list(self._latest.items())
        now = time.monotonic()
        for subject, (header, frame) in latest:  # a client of an idle bridge still gets header and state now
            sub.offer(subject, header, frame, now)
        log.info("gRPC subscriber %s joined (%d now)", peer, len(self._subscribers))
        return sub

    def _remove_subscriber(self, sub: _Subscriber) -> None:
        sub.close()
        with self._lock:
            if sub in self._subscribers:
                self._subscribers.remove(sub)
                self._dropped_by_gone += sub.dropped
        log.info("gRPC subscriber %s left after %d frames, %d dropped", sub.peer, sub.sent, sub.dropped)

    def subjects(self) -> list[str]:
        with self._lock:
            return list(self._layouts)

    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def stats(self) -> dict:
        with self._lock:
            dropped = self._dropped_by_gone + sum(s.dropped for s in self._subscribers)
            return {**super().stats(), "subscribers": len(self._subscribers), "dropped": dropped}

    def status_message(self, context) -> pb.GetStatusResponse:
        stats = self.stats()
        now = time.monotonic()
        with self._lock:
            model_versions = dict(self._model_versions)
            fps = self._window.rate(now)
            p50, p99 = self._window.percentiles(now)
        status = {"sources": [], "backends": [], "model_versions": model_versions, "fps": fps,
                  "latency_ms_p50": p50, "latency_ms_p99": p99, "subjects": self.subjects()}
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
        )
