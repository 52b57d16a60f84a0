"""FaceServeServer: the `facebridge serve` gRPC front end (facebridge.v1.FaceServeService), many face streams on
one batched service.

One long-lived bidirectional Track stream per face stream: a reader thread takes the client's images into the
stream's latest-wins slot (bridge/serving/streams.py), and the stream's own server thread decodes the image whose
turn it is, hands it to the batched service, and writes back the reply made for it when its pass was described,
all of the pass's streams at once (bridge/serving/replies.py), with the stream's drop counters. A stream lives on
the replica that accepted it until it ends; a client that cancels, vanishes (keepalive 10 s) or is killed frees
its slot at once. Beyond `max_streams` a stream is refused with RESOURCE_EXHAUSTED. Requests are checked as the
gRPC sink checks its own (bridge/serving/requests.py): a malformed first message refuses the stream with
INVALID_ARGUMENT and one line, a bad image costs that image only (counted, and answered at once with an
ImageRefused naming the fix), never a traceback. A client that stops reading is ended after `write_deadline_s`
(its responses wait in gRPC's flow control, bounded; its slot frees). Binding beyond loopback needs a bearer token,
and raw (unencoded) images are accepted only from loopback clients.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent import futures

import grpc
from grpc_health.v1 import health_pb2

from bridge import __version__
from bridge.errors import FaceBridgeError
from bridge.grpc import access
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.serving.decode import BadImage, ImageDecoder
from bridge.serving.leases import IDLE_TIMEOUT_S, WRITE_DEADLINE_S, WriteDeadline
from bridge.serving.requests import StreamRefused, first_subject, image_size
from bridge.serving.streams import LiveStream, StreamTable

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["FaceServeService"].full_name
MAX_MESSAGE_BYTES = 8 * 1024 * 1024  # a raw 1080p frame is 6.2 MB; a JPEG a few tens of kB
WAKE_INTERVAL_S = 0.5  # how often an idle stream thread checks that its client is still there
MAX_REFUSED_IN_A_ROW = 100  # a stream whose last this many images were all refused is ended (it cannot recover)
REFUSALS_KEPT = 16  # refusals waiting to be answered; beyond, the oldest are only counted


class _StreamState:
    """What one Track call knows besides its LiveStream: subject, its describe handle, the header the client has
    (the last two kept by PassReplies, on its service's describing thread)."""

    def __init__(self, default_subject: str) -> None:
        self.subject = default_subject
        self.describer = None
        self.layout: tuple | None = None
        self.header: pb.StreamHeader | None = None
        self.reported_late = 0
        self.frame_hw: tuple[int, int] | None = None
        self.started = threading.Event()  # the first request arrived (subject known)
        self.raw_ok = False  # the client is on loopback
        self.stream_hw: tuple[int, int] | None = None  # the size of its first accepted image (checked on arrival)
        self.refusals: deque[tuple[int, str]] = deque(maxlen=REFUSALS_KEPT)  # (seq, reason) to answer
        self.refused_in_a_row = 0
        self.fatal: tuple[grpc.StatusCode, str] | None = None  # why the stream must end, set by its reader
        self.writing_since: float | None = None  # monotonic time a response was handed to gRPC, until taken
        self.last_activity = time.monotonic()  # the last request received or response handed on (idle check)
        self.stream: LiveStream | None = None
        self.evicted: str | None = None


class _Servicer(pb_grpc.FaceServeServiceServicer):
    def __init__(self, server: FaceServeServer) -> None:
        self.server = server

    def handler(self) -> grpc.GenericRpcHandler:
        """The service with deserializers that never raise, so a malformed request is refused by us (one line)."""
        methods = {
            "Track": grpc.stream_stream_rpc_method_handler(self.Track, access.lenient(pb.TrackRequest),
                                                           pb.TrackResponse.SerializeToString),
            "GetServeStatus": grpc.unary_unary_rpc_method_handler(
                self.GetServeStatus, access.lenient(pb.GetServeStatusRequest),
                pb.GetServeStatusResponse.SerializeToString)}
        return grpc.method_handlers_generic_handler(SERVICE_NAME, methods)

    def Track(self, request_iterator, context):
        server = self.server
        stream = server.table.open()
        if stream is None:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"this server already serves {server.table.max_streams} face streams (--max-streams); "
                          "connect to another replica or try again later")
        state = _StreamState(server.default_subject)
        state.raw_ok = access.is_loopback(access.peer_host(context.peer()))
        state.stream = stream
        context.add_callback(stream.end_of_input)  # cancelled, vanished or killed: wake the loop below at once
        server.leases.watch(state, context, stream.number)
        reader = threading.Thread(target=self._read, args=(request_iterator, stream, state),
                                  name=f"serve-read-{stream.number}", daemon=True)
        reader.start()
        try:
            while context.is_active() and state.fatal is None:
                work = stream.next_work(WAKE_INTERVAL_S)
                if work is None or state.fatal is not None:
                    break
                todo, done = work
                if todo is not None:
                    self._submit(stream, todo, state, context)
                if done is not None:
                    yield from self._sending(state, self._respond(stream, done, state))
                yield from self._sending(state, self._refusals(stream, state))  # at once, each with its reason
                if stream.counters.late > state.reported_late:  # a late drop is reported at once
                    state.reported_late = stream.counters.late
                    yield from self._sending(state, [self._counters(stream, pb.TrackResponse())])
            if context.is_active():  # the input ended: what was refused is still answered
                yield from self._sending(state, self._refusals(stream, state))
            if state.fatal is not None:
                if state.evicted is None:  # an idle stream was not invalid
                    server.count_invalid()
                context.abort(*state.fatal)
        finally:
            server.leases.forget(state)
            stream.close()
            close = getattr(state.describer, "close", None)
            if close is not None:
                close()
            log.info("face stream %d ended%s: %s", stream.number,
                     f" ({state.evicted})" if state.evicted else "", stream.counters)

    def _refusals(self, stream: LiveStream, state: _StreamState):
        while state.refusals:
            seq, reason = state.refusals.popleft()
            yield self._counters(stream, pb.TrackResponse(refused=pb.ImageRefused(seq=seq, reason=reason)))

    @staticmethod
    def _sending(state: _StreamState, responses):
        """Yield each response with the mark the write deadline reads (gRPC holds the yield while flow control
        stops the stream)."""
        for response in responses:
            state.writing_since = state.last_activity = time.monotonic()
            yield response
            state.writing_since = None

    def _read(self, request_iterator, stream: LiveStream, state: _StreamState) -> None:
        try:
            for request in request_iterator:
                state.last_activity = time.monotonic()
                if stream.closed:
                    break
                if not state.started.is_set():
                    try:
                        state.subject = first_subject(request, state.subject)
                    except StreamRefused as e:
                        self.server.note_malformed(stream.number, str(e))
                        state.fatal = (grpc.StatusCode.INVALID_ARGUMENT, str(e))
                        break
                    state.started.set()
                try:
                    hw = image_size(request, self.server.decoder, state.raw_ok, state.stream_hw,
                                    self.server.frame_sizes)
                except BadImage as e:
                    stream.refuse()
                    self._refused(stream, state, getattr(getattr(request, "image", None), "seq", 0), str(e))
                    continue
                state.stream_hw = state.stream_hw or hw
                deadline = request.deadline_ms / 1000.0 if request.deadline_ms else None
                stream.offer(request.image, deadline)
        except grpc.RpcError:
            pass  # the client went away; the stream thread sees end_of_input
        except Exception as e:  # noqa: BLE001 - one broken stream never takes the server down
            log.warning("face stream %d: reading failed: %s", stream.number, e)
        finally:
            stream.end_of_input()

    def _refused(self, stream: LiveStream, state: _StreamState, seq: int, reason: str) -> None:
        """One image refused (already counted): answered to its client, logged at the first and every 100th."""
        state.refusals.append((int(seq), reason))
        state.refused_in_a_row += 1
        if stream.counters.bad == 1 or stream.counters.bad % 100 == 0:
            log.warning("face stream %d: image refused (%s); %d so far", stream.number, reason, stream.counters.bad)
        if state.refused_in_a_row >= MAX_REFUSED_IN_A_ROW and state.fatal is None:
            state.fatal = (grpc.StatusCode.INVALID_ARGUMENT,
                           f"the last {state.refused_in_a_row} images were all refused (the last: {reason})")
            stream.end_of_input()

    def _submit(self, stream: LiveStream, todo, state: _StreamState, context) -> None:
        image = todo.request
        t0 = time.perf_counter()
        try:
            frame, hw = self.server.decoder.decode(image.encoding, image.data, image.width, image.height,
                                                   raw_ok=state.raw_ok)
            if stream.service is None:
                try:
                    stream.bind(hw)
                except ValueError as e:
                    context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(e))
                state.frame_hw = hw
            elif hw != state.frame_hw:
                raise BadImage(f"the image size changed from {state.frame_hw[1]}x{state.frame_hw[0]} to "
                               f"{hw[1]}x{hw[0]}; open a new stream for another camera mode")
            decode_ms = (time.perf_counter() - t0) * 1000.0
            stream.submit(todo, frame, {"decode_ms": decode_ms, "hw": hw, "state": state})
            state.refused_in_a_row = 0
        except (BadImage, ValueError) as e:
            stream.count_bad()
            self._refused(stream, state, image.seq, f"image {image.seq}: {e}")

    def _respond(self, stream: LiveStream, done, state: _StreamState) -> list[pb.TrackResponse]:
        """The responses made for one served image (a header first when the layout changed, then its Frame)."""
        try:
            responses = done.future.result()
        except Exception as e:  # noqa: BLE001 - a failed pass fails its own frames only
            stream.count_bad()
            log.warning("face stream %d: the batched pass failed (%s)", stream.number, e)
            return []
        stream.count_served((time.perf_counter() - done.received) * 1000.0)
        return [self._counters(stream, response) for response in responses]

    def _counters(self, stream: LiveStream, response: pb.TrackResponse) -> pb.TrackResponse:
        c = stream.counters
        response.received, response.stale_dropped, response.late_dropped = c.received, c.stale, c.late
        response.bad_frames = c.bad
        response.replica = self.server.replica
        response.stream_slot = stream.slot if stream.slot is not None else 0
        if response.HasField("frame"):
            response.frame.dropped_frames = c.stale + c.late
            response.frame.send_time = time.time()
        return response

    def GetServeStatus(self, request, context):
        if isinstance(request, access.Malformed):
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"the request is not a facebridge.v1.{request.message} ({request.error})")
        s = self.server.stats()
        return pb.GetServeStatusResponse(
            replica=self.server.replica, runners=self.server.runners, streams=s["streams"],
            max_streams=s["max_streams"], frames_received=s["received"], frames_served=s["served"],
            stale_dropped=s["stale"], late_dropped=s["late"], bad_frames=s["bad"], streams_refused=s["refused"],
            passes=s["passes"], mean_batch=s["mean_batch"], latency_ms_p50=s["latency_ms_p50"],
            latency_ms_p99=s["latency_ms_p99"], server_version=__version__, decoder=self.server.decoder.name,
            streams_evicted=s["evicted"], streams_invalid=s["invalid"],
            model_versions={str(k): str(v) for k, v in (s.get("model_versions") or {}).items()},
            release=str(s.get("release") or ""))


def check_listen(address: str, token: str | None, tls_cert: str | None, tls_key: str | None) -> str:
    """The host of `address` if serving there is allowed: beyond loopback only with a token (before any model loads)."""
    access.check_token(token)  # the gRPC sink's rules: printable ASCII, loopback or a token
    host, _port = access.split_address(address)
    if not access.is_loopback(host) and not token:
        raise FaceBridgeError(f"facebridge serve on {address} would take camera images from the network without "
                              "a token", "pass --grpc-token TOKEN (and --grpc-tls-cert/--grpc-tls-key), or bind "
                              "127.0.0.1")
    if bool(tls_cert) != bool(tls_key):
        raise FaceBridgeError("TLS needs both a certificate and its private key",
                              "pass both --grpc-tls-cert CERT.pem and --grpc-tls-key KEY.pem")
    return host


class FaceServeServer:
    """The Track service on `address`, over the table's batched services (which finish their passes with a
    PassReplies: the replies the stream threads send)."""

    def __init__(self, table: StreamTable, address: str = "127.0.0.1:50061", *,
                 device: str = "cpu", token: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, replica: str | None = None, runners: str = "",
                 default_subject: str = "FaceBridge", write_deadline_s: float = WRITE_DEADLINE_S,
                 idle_timeout_s: float = IDLE_TIMEOUT_S, frame_sizes=()) -> None:
        """frame_sizes: the (height, width) sizes images may have (each builds a batched service on first use);
        empty: any, up to the table's max_sizes."""
        host = check_listen(address, token, tls_cert, tls_key)
        loopback = access.is_loopback(host)
        if token and not tls_cert and not loopback:
            log.warning("the serve token on %s travels unencrypted; add --grpc-tls-cert/--grpc-tls-key", address)
        self.table = table
        self.decoder = ImageDecoder(device, allow_raw=loopback)
        self.runners = runners
        self.default_subject = default_subject
        self.frame_sizes = frozenset(tuple(hw) for hw in frame_sizes)
        self._closed = False
        self._on_close: list = []
        self.status_extra = lambda: {}  # more for stats(): {"model_versions": {...}, "release": "..."} (serve)
        # a stream whose client stopped reading, or sends nothing, is ended
        self.leases = WriteDeadline(write_deadline_s, idle_timeout_s)
        self._live_lock = threading.Lock()
        self.invalid = self.malformed = 0
        self._malformed_logged_at = -1e9
        access.one_line_grpc_logs()  # gRPC's own records of bad requests: one line each
        workers = table.max_streams + 8  # one per Track stream, a few for status and health
        self._server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="serve"),
            interceptors=[access.BearerTokenInterceptor(token)] if token else [],
            maximum_concurrent_rpcs=workers + 8,  # streams past max_streams get our refusal, not a queue
            options=[("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                     ("grpc.keepalive_time_ms", 10_000), ("grpc.keepalive_timeout_ms", 5_000),
                     ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
                     ("grpc.so_reuseport", 0)])  # a second server on the same port must fail, not share it
        self._server.add_generic_rpc_handlers((_Servicer(self).handler(),))
        self._health = access.add_health_and_reflection(self._server, SERVICE_NAME)
        self.port = access.bind(self._server, address, tls_cert, tls_key)
        self.address = f"{host}:{self.port}"
        self.replica = replica or self.address
        self._server.start()
        for service in ("", SERVICE_NAME):
            self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        log.info("facebridge serve on %s (%s), up to %d streams", self.address, "TLS" if tls_cert else "plaintext",
                 table.max_streams)

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
                "decoder": self.decoder.name, "evicted": self.leases.evicted, "invalid": self.invalid,
                **self.status_extra()}

    def wait(self, timeout: float | None = None) -> bool:
        return self._server.wait_for_termination(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.leases.close()
        self._health.enter_graceful_shutdown()
        self._server.stop(grace=1.0).wait(5.0)
        self.table.close()
        for fn in self._on_close:
            fn()
