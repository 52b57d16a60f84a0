"""TrackStreams: each Track call (one face stream) is two coroutines on the serve loop, never a thread of its own:
its reader takes the client's images into the stream's latest-wins slot (bridge/serving/streams.py), its writer
hands the image whose turn it is to a decode worker (which decodes it and submits it to the batched service) and
sends the replies made for it when its pass was described (bridge/serving/replies.py), with the stream's drop
counters.

Threads reach a stream only through `LiveStream.wake` (loop.call_soon_threadsafe): the batched service's finishing
thread when a result is ready, a decode worker when an image never reached the service. Requests are checked as
the gRPC sink checks its own (bridge/serving/requests.py): a malformed first message refuses the stream with
INVALID_ARGUMENT and one line, a bad image costs that image only (counted, and answered at once with an
ImageRefused naming the fix), never a traceback; a stream whose last MAX_REFUSED_IN_A_ROW images were all refused
is ended. Raw (unencoded) images are decoded on the loop (a copy); JPEG in the decode pool (OpenCV or nvJPEG,
both release the interpreter lock).
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

import grpc

from bridge.grpc import access
from bridge.grpc.frame_wire import frame_response, replica_field
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.multistream.decode import JPEG, BadImage
from bridge.serving.requests import StreamRefused, first_subject, image_size
from bridge.serving.streams import LiveStream

log = logging.getLogger(__name__)

MAX_REFUSED_IN_A_ROW = 100  # a stream whose last this many images were all refused is ended (it cannot recover)
REFUSALS_KEPT = 16  # refusals waiting to be answered; beyond, the oldest are only counted
CLOSE_WAIT_S = 5.0  # a stream's image that has not come back this long after its stream ended: its slot is lost


class StreamState:
    """What one Track call knows besides its LiveStream: subject, its describe handle, the header the client has
    (the last two kept by PassReplies, on its service's describing thread)."""

    def __init__(self, default_subject: str) -> None:
        self.subject = default_subject
        self.describer = None
        self.layout: tuple | None = None
        self.header: pb.StreamHeader | None = None
        self.reported_late = 0
        self.frame_hw: tuple[int, int] | None = None  # the size of its first decoded image (its service's)
        self.started = False  # the first request arrived (subject known)
        self.raw_ok = False  # the client is on loopback
        self.stream_hw: tuple[int, int] | None = None  # the size of its first accepted image (checked on arrival)
        self.refusals: deque[tuple[int, str]] = deque(maxlen=REFUSALS_KEPT)  # (seq, reason) to answer
        self.refused_in_a_row = 0
        self.fatal: tuple[grpc.StatusCode, str] | None = None  # why the stream must end
        self.invalid = False  # it ends for what its client sent (counted in streams_invalid)
        self.writing_since: float | None = None  # monotonic time a response was handed to gRPC, until taken
        self.last_activity = time.monotonic()  # the last request received or response handed on (idle check)
        self.stream: LiveStream | None = None
        self.evicted: str | None = None
        self.context = None  # the call's servicer context
        self.task: asyncio.Task | None = None  # the task running the call


class TrackStreams:
    """The Track method of `server` (a FaceServeServer: table, decoder, leases, replica, frame sizes, counters),
    run on `loop`, JPEG decoded in `decode_pool`, or with every JPEG waiting by `jpeg_batches` (a JpegBatches:
    a decoder on the GPU)."""

    def __init__(self, server, loop: asyncio.AbstractEventLoop, decode_pool, jpeg_batches=None,
                 forward: bool = False) -> None:
        """forward: images go to the engine process undecoded (`facebridge serve --front-ends N`: the table's
        services are engine_link.RemoteServices, the engine decodes)."""
        self.server = server
        self.loop = loop
        self.decode_pool = decode_pool
        self.jpeg_batches = jpeg_batches
        self.forward = forward

    async def Track(self, request_iterator, context) -> None:
        server = self.server
        peer = access.peer_host(context.peer())
        stream = server.table.open(peer)
        if stream is None:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, server.table.refusal(peer))
        state = StreamState(server.default_subject)
        state.raw_ok = access.is_loopback(access.peer_host(context.peer()))
        state.stream, state.context, state.task = stream, context, asyncio.current_task()
        wake = asyncio.Event()
        stream.wake = lambda: self._wake(wake)
        stream.on_released = lambda: self._released(stream, state)
        server.leases.watch(state, stream.number)
        reader = self.loop.create_task(self._read(request_iterator, stream, state, wake))
        try:
            while state.fatal is None:
                wake.clear()
                work = stream.poll()
                if work is None:
                    break
                todo, done = work
                if todo is not None:
                    self._submit(stream, todo, state)
                if done is not None:
                    await self._send(state, self._respond(stream, done, state))
                if state.refusals:  # at once, each with its reason
                    await self._send(state, self._refusals(stream, state))
                if stream.counters.late > state.reported_late:  # a late drop is reported at once
                    state.reported_late = stream.counters.late
                    await self._send(state, [self._counters(stream, pb.TrackResponse())])
                if todo is None and done is None:
                    await wake.wait()
            if state.fatal is None and state.refusals:  # the input ended: what was refused is still answered
                await self._send(state, self._refusals(stream, state))
            if state.fatal is not None:
                if state.invalid:
                    server.count_invalid()
                await context.abort(*state.fatal)
        finally:
            reader.cancel()
            server.leases.forget(state)
            if not stream.close():  # one of its images is still out: freed when it comes back
                self.loop.call_later(CLOSE_WAIT_S, stream.give_up)

    def _wake(self, wake: asyncio.Event) -> None:
        """Wake a stream's writer from any thread (nothing to wake once the loop is closed: the server stopped)."""
        try:
            self.loop.call_soon_threadsafe(wake.set)
        except RuntimeError:
            pass

    def _released(self, stream: LiveStream, state: StreamState) -> None:
        """The stream's slot is free (on whichever thread freed it): its describe row goes too."""
        close = getattr(state.describer, "close", None)
        if close is not None:
            close()
        log.info("face stream %d ended%s: %s", stream.number, f" ({state.evicted})" if state.evicted else "",
                 stream.counters)

    def _refusals(self, stream: LiveStream, state: StreamState) -> list[pb.TrackResponse]:
        out = []
        while state.refusals:
            seq, reason = state.refusals.popleft()
            out.append(self._counters(stream, pb.TrackResponse(refused=pb.ImageRefused(seq=seq, reason=reason))))
        return out

    @staticmethod
    async def _send(state: StreamState, responses) -> None:
        """Write each response with the mark the write deadline reads (the write waits while flow control stops
        the stream)."""
        context = state.context
        for response in responses:
            state.writing_since = state.last_activity = time.monotonic()
            await context.write(response)
            state.writing_since = None

    async def _read(self, request_iterator, stream: LiveStream, state: StreamState, wake: asyncio.Event) -> None:
        server = self.server
        try:
            async for request in request_iterator:
                state.last_activity = time.monotonic()
                if stream.closed or state.fatal is not None:
                    break
                if not state.started:
                    try:
                        state.subject = first_subject(request, state.subject)
                    except StreamRefused as e:
                        server.note_malformed(stream.number, str(e))
                        state.fatal, state.invalid = (grpc.StatusCode.INVALID_ARGUMENT, str(e)), True
                        break
                    state.started = True
                try:
                    hw = image_size(request, server.decoder, state.raw_ok, state.stream_hw, server.frame_sizes)
                except BadImage as e:
                    stream.refuse()
                    self._refused(stream, state, getattr(getattr(request, "image", None), "seq", 0), str(e))
                    wake.set()
                    continue
                state.stream_hw = state.stream_hw or hw
                if stream.offer(request.image, request.deadline_ms / 1000.0 if request.deadline_ms else None):
                    wake.set()  # else the stream's image in the service wakes it when it comes back
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the client went away (or one broken stream): never the server
            if not isinstance(e, grpc.RpcError) and type(e).__name__ != "AbortError":
                log.warning("face stream %d: reading failed: %s", stream.number, e)
        finally:
            stream.end_of_input()
            wake.set()

    def _refused(self, stream: LiveStream, state: StreamState, seq: int, reason: str) -> None:
        """One image refused (already counted): answered to its client, logged at the first and every 100th."""
        state.refusals.append((int(seq), reason))
        state.refused_in_a_row += 1
        if stream.counters.bad == 1 or stream.counters.bad % 100 == 0:
            log.warning("face stream %d: image refused (%s); %d so far", stream.number, reason, stream.counters.bad)
        if state.refused_in_a_row >= MAX_REFUSED_IN_A_ROW and state.fatal is None:
            state.fatal = (grpc.StatusCode.INVALID_ARGUMENT,
                           f"the last {state.refused_in_a_row} images were all refused (the last: {reason})")
            state.invalid = True

    def _submit(self, stream: LiveStream, todo, state: StreamState) -> None:
        """The image whose turn it is: decoded and submitted here (raw: a copy), by a decode worker, or with the
        other JPEGs waiting (measured on arrival as the stream's size) by the JPEG batches; in a front-end process,
        handed to the engine process as it came (its size measured on arrival), to be decoded there."""
        if self.forward:
            self._decode_and_submit(stream, todo, state, (todo.request, state.stream_hw), 0.0)
        elif todo.request.encoding != JPEG:
            self._decode_and_submit(stream, todo, state)
        elif self.jpeg_batches is not None:
            self.jpeg_batches.submit(todo.request.data, state.stream_hw, self._decoded, stream, todo, state)
        else:
            self.decode_pool.submit(self._decode_and_submit, stream, todo, state)

    def _decoded(self, decoded, times, stream: LiveStream, todo, state: StreamState) -> None:
        """A JPEG decoded with others (JpegBatches' thread, times its DecodeTimes): submitted as a decode worker
        would."""
        self._decode_and_submit(stream, todo, state, decoded, times.ms, times)

    def _decode_and_submit(self, stream: LiveStream, todo, state: StreamState, decoded=None,
                           decode_ms: float | None = None, times=None) -> None:
        """decoded: the image already decoded ((frame, hw), or the BadImage it is), in decode_ms (times: its
        DecodeTimes, from JpegBatches)."""
        image = todo.request
        t0 = time.perf_counter()
        try:
            if stream.closed:
                stream.abandon()
                return
            if decoded is None:  # measured on arrival (requests.image_size): the stream's size
                frame, hw = self.server.decoder.decode_measured(image.encoding, image.data, state.stream_hw)
            elif isinstance(decoded, BadImage):
                raise decoded
            else:
                frame, hw = decoded
            if stream.service is None:
                try:
                    stream.bind(hw)
                except ValueError as e:  # every frame size the server takes is taken
                    self._on_loop(self._fatal, state, (grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)))
                    stream.abandon()
                    return
                state.frame_hw = hw
            elif hw != state.frame_hw:
                raise BadImage(f"the image size changed from {state.frame_hw[1]}x{state.frame_hw[0]} to "
                               f"{hw[1]}x{hw[0]}; open a new stream for another camera mode")
            if decode_ms is None:
                decode_ms = (time.perf_counter() - t0) * 1000.0
            stream.submit(todo, frame, {"decode_ms": decode_ms, "hw": hw, "state": state, "decode_times": times})
            state.refused_in_a_row = 0
        except (BadImage, ValueError) as e:
            stream.count_bad()
            self._on_loop(self._refused, stream, state, image.seq, f"image {image.seq}: {e}")
            stream.abandon()  # wakes the stream: the refusal is answered
        except Exception as e:  # noqa: BLE001 - one broken image never takes a worker (or the server) down
            stream.count_bad()
            log.warning("face stream %d: decoding failed: %s", stream.number, e)
            stream.abandon()

    def _on_loop(self, fn, *args) -> None:
        """Run fn(*args) on the loop: now when called there, else soon (before the wake that follows)."""
        try:
            on_loop = asyncio.get_running_loop() is self.loop
        except RuntimeError:
            on_loop = False
        if on_loop:
            fn(*args)
        else:
            self.loop.call_soon_threadsafe(fn, *args)

    @staticmethod
    def _fatal(state: StreamState, fatal: tuple) -> None:
        if state.fatal is None:
            state.fatal = fatal

    def _respond(self, stream: LiveStream, done, state: StreamState) -> list:
        """The responses made for one served image (a header first when the layout changed, then its Frame). An
        image whose pass failed is answered too, by an ImageRefused naming the failure (sent with the refusals
        right after): a client that holds its next frame until this one is answered (`run --remote`, one frame
        in flight) goes on at once instead of waiting for an answer that never comes. It counts as a bad frame,
        not as one of the client's images refused in a row (the server failed, not the image)."""
        try:
            responses = done.future.result()
        except BadImage as e:  # refused by the engine process (it does not decode): as if refused on arrival
            stream.count_bad()
            self._refused(stream, state, done.request.seq, f"image {done.request.seq}: {e}")
            return []
        except Exception as e:  # noqa: BLE001 - a failed pass fails its own frames only
            stream.count_bad()
            reason = str(e).strip().splitlines()[0][:200] if str(e).strip() else type(e).__name__
            if stream.counters.bad == 1 or stream.counters.bad % 100 == 0:
                log.warning("face stream %d: the batched pass failed (%s); %d bad so far", stream.number, reason,
                            stream.counters.bad)
            state.refusals.append((int(done.request.seq), f"image {done.request.seq}: the server could not "
                                   f"describe its pass ({reason}); the frame is lost, the stream goes on"))
            return []
        stream.count_served((time.perf_counter() - done.received) * 1000.0)
        return [self._counters(stream, response) for response in responses]

    def _counters(self, stream: LiveStream, response):
        """The response with the stream's counters: a message has them set; a Frame's bytes (replies.py) are wrapped
        as a serialised TrackResponse with them."""
        c = stream.counters
        if isinstance(response, bytes):
            return frame_response(response, c.received, c.stale, c.late, c.bad, replica_field(self.server.replica),
                                  stream.slot if stream.slot is not None else 0, time.time())
        response.received, response.stale_dropped, response.late_dropped = c.received, c.stale, c.late
        response.bad_frames = c.bad
        response.replica = self.server.replica
        response.stream_slot = stream.slot if stream.slot is not None else 0
        if response.HasField("frame"):
            response.frame.dropped_frames = c.stale + c.late
            response.frame.send_time = time.time()
        return response


def serialize_response(response) -> bytes:
    """Track's response serializer: a TrackResponse message, or one already serialised (a Frame's, _counters)."""
    return response if isinstance(response, bytes) else response.SerializeToString()
