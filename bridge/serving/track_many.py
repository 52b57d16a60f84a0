"""TrackManyStreams: the batched wire. One TrackMany call carries the images of many face streams (a gateway that
already holds many people's video, or the load generator) and gets their replies back together: one gRPC message
each way per tick instead of one per face per frame, which is most of what a served frame costs the host in gRPC.

Every face stream of a call is the same LiveStream and StreamState a Track call has, with the same checks (bridge/
serving/requests.py), latest wins, counters and describe step, so a face gets the same FaceFrames whichever wire it
came by. What differs is that a call's frames travel as groups, never one by one: the images of every stream whose
turn came together are decoded together (a chunk for each decode worker, or the JPEG batches) and handed to the
batched service in one post (so they share a pass, and no frame has a future of its own); each pass's replies to
the call are made as serialised TrackManyReplies on the describing thread (`ManyCall.pass_done`: the Frames of
bridge/serving/replies.py with the streams' counters) and handed to the loop in one call, which sends them as one
message. One reader for the call opens a face stream on its first item (refused streams are answered at once with
`ended`); one writer sends whatever is ready. What would end a Track call ends one face stream here (a malformed
first item, idle, all images refused, the server full), answered by a reply whose `ended` says why; a client that
stops reading is ended whole, as a Track client is (the write deadline sees every stream's mark).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time
from functools import partial

import grpc

from bridge.grpc import access
from bridge.grpc.frame_wire import many_frame_reply, replica_field, send_time, varint
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.multistream.decode import JPEG, BadImage
from bridge.serving.requests import StreamRefused, first_subject, image_size
from bridge.serving.track import CLOSE_WAIT_S, StreamState

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 2 * 1024 * 1024  # a TrackManyResponse is split past this (clients take 4 MiB by default)
CLIENT_ENDED = "ended by the client"  # TrackManyReply.ended of a stream the client ended, once it is answered
MAX_STREAMS_A_CALL = 4096  # face streams one call may hold open at once (each also takes a --max-streams slot)
MIN_CHUNK = 4  # images a decode worker takes of a group at least (fewer: the hand-off costs more than it saves)

_STREAM_ID, _RESPONSE, _ENDED, _REPLIES = b"\x08", b"\x12", b"\x1a", b"\x0a"  # TrackManyReply / Response tags


def encode_reply(stream_id: int, response: bytes | None = None, ended: str = "") -> bytes:
    """A serialised TrackManyReply from a serialised TrackResponse (no message object, no copy of its parse)."""
    parts = [_STREAM_ID, varint(stream_id)]
    if response is not None:
        parts += [_RESPONSE, varint(len(response)), response]
    if ended:
        text = ended.encode()
        parts += [_ENDED, varint(len(text)), text]
    return b"".join(parts)


def encode_responses(replies: list[bytes], limit: int = MAX_RESPONSE_BYTES) -> list[bytes]:
    """Serialised TrackManyResponses holding `replies` in order, each at most about `limit` bytes."""
    out, batch, size = [], [], 0
    for reply in replies:
        field = b"".join((_REPLIES, varint(len(reply)), reply))
        if batch and size + len(field) > limit:
            out.append(b"".join(batch))
            batch, size = [], 0
        batch.append(field)
        size += len(field)
    if batch:
        out.append(b"".join(batch))
    return out


class ManyCall:
    """One TrackMany call: its face streams by the client's id, which of them have work, the replies made for it on
    other threads (`outbox`), one wake for the writer. It is the `sink` of its frames' passes: `pass_done` and
    `failed` run on the batched service's threads and hand their results to the loop in one call each."""

    def __init__(self, owner: TrackManyStreams, context, task, raw_ok: bool) -> None:
        self.owner, self.context, self.task, self.raw_ok = owner, context, task, raw_ok
        self.streams: dict[int, tuple] = {}  # stream id -> (LiveStream, StreamState)
        self.ready: set[int] = set()
        self.ended: list[bytes] = []  # replies for streams refused or ended outside the writer
        self.outbox: list[bytes] = []  # replies made on the describing thread, in the order to send
        self.wake = asyncio.Event()
        self.input_done = False
        self.fatal: tuple[grpc.StatusCode, str] | None = None  # why the whole call must end

    def mark(self, stream_id: int) -> None:
        self.ready.add(stream_id)
        self.wake.set()

    # ---- a pass's results (the batched service's threads) ------------------------------------------------
    def pass_done(self, served: list, responses: list[list]) -> None:
        """The replies of this call's frames in one pass (replies.py: each frame's header message, if its layout
        changed, and its Frame's bytes), made into TrackManyReplies with each stream's counters."""
        server = self.owner.server
        replica, now, t = replica_field(server.replica), time.time(), time.perf_counter()
        sent = send_time(now)  # the pass's replies leave together
        out, streams, latencies = [], [], []
        for s, frame_responses in zip(served, responses):
            extra = s.extra
            stream, stream_id = extra["state"].stream, extra["sid"]
            for r in frame_responses:
                if isinstance(r, bytes):
                    c = stream.counters
                    r = many_frame_reply(stream_id, r, c.received, c.stale, c.late, c.bad, replica,
                                         stream.slot or 0, sent)
                else:
                    r = encode_reply(stream_id, self.owner.track._counters(stream, r).SerializeToString())
                out.append((stream_id, stream, r))
            streams.append(stream)
            latencies.append((t - s.received) * 1000.0)
        server.table.served_many(streams, latencies)
        self._on_loop(self._returned, served, out)

    def failed(self, served: list, error: Exception) -> None:
        """This call's frames of a pass that failed: each answered with an ImageRefused naming the failure, as
        Track answers its own (a failed pass fails its own frames only; an image refused where it was decoded is
        answered as one refused on arrival)."""
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        for s in served:
            s.extra["state"].stream.count_bad()
        self._on_loop(self._failed, served, reason, isinstance(error, BadImage))

    def check_future(self, served, future) -> None:
        """A frame handed to a service of futures: its replies come through pass_done all the same; a failure
        (its pass, or its image refused where it was decoded) is answered here."""
        error = future.exception()
        if error is not None:
            self.failed([served], error)

    def _on_loop(self, fn, *args) -> None:
        try:
            self.owner.loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:  # the loop is closed: the server stopped
            pass

    # ---- on the loop -------------------------------------------------------------------------------------
    def _current(self, stream_id: int, stream) -> bool:
        entry = self.streams.get(stream_id)
        return entry is not None and entry[0] is stream

    def _returned(self, served: list, out: list) -> None:
        """A pass's replies are here: sent next (those of streams still open), and each stream's turn is free."""
        for s in served:
            stream, stream_id = s.extra["state"].stream, s.extra["sid"]
            if stream.returned(s) and self._current(stream_id, stream):
                self.ready.add(stream_id)
        self.outbox += [reply for stream_id, stream, reply in out if self._current(stream_id, stream)]
        self.wake.set()

    def _failed(self, served: list, reason: str, refused: bool = False) -> None:
        track = self.owner.track
        for s in served:
            state, stream_id = s.extra["state"], s.extra["sid"]
            stream, seq = state.stream, int(s.request.seq)
            if refused:
                track._refused(stream, state, seq, f"image {seq}: {reason}")
            else:
                if stream.counters.bad == 1 or stream.counters.bad % 100 == 0:
                    log.warning("face stream %d: the batched pass failed (%s); %d bad so far", stream.number,
                                reason, stream.counters.bad)
                state.refusals.append((seq, f"image {seq}: the server could not describe its pass ({reason}); the "
                                       "frame is lost, the stream goes on"))
            if stream.returned(s) and self._current(stream_id, stream):
                self.ready.add(stream_id)
        self.wake.set()


class Group:
    """The images of one call whose turn came together: decoded together (a chunk for each decode worker, or each
    in the JPEG batches), then handed to the batched service in one post (by the thread that decoded the last).
    todo: (stream id, LiveStream, StreamState, Pending) each."""

    def __init__(self, owner: TrackManyStreams, call: ManyCall, todo: list) -> None:
        self.owner, self.call, self.todo = owner, call, todo
        self.decoded: list = [None] * len(todo)  # (frame, hw, decode ms, DecodeTimes or None) or the BadImage
        self._left = 0
        self._lock = threading.Lock()

    def start(self) -> None:
        owner, decoder = self.owner, self.owner.server.decoder
        if getattr(owner.track, "forward", False):  # a front-end process: the engine process decodes them
            self.decoded = [(p.request, state.stream_hw, 0.0, None) for _, _, state, p in self.todo]
            self._post()
            return
        jpegs = [i for i, (_, _, _, p) in enumerate(self.todo) if p.request.encoding == JPEG]
        others = [i for i, (_, _, _, p) in enumerate(self.todo) if p.request.encoding != JPEG]
        if owner.track.jpeg_batches is not None:  # the JPEGs with the others waiting (nvJPEG), raw here (a copy)
            self._left = len(jpegs) + 1
            for i in jpegs:
                _, _, state, pending = self.todo[i]
                owner.track.jpeg_batches.submit(pending.request.data, state.stream_hw, self._jpeg_decoded, i)
            self._decode(others, decoder)
            self._one_done()
            return
        order = jpegs + others
        chunks = max(1, min(owner.workers, len(order) // MIN_CHUNK))
        self._left = chunks
        for k in range(chunks):
            owner.track.decode_pool.submit(self._decode_chunk, order[k::chunks], decoder)

    def _decode_chunk(self, at: list[int], decoder) -> None:
        try:
            self._decode(at, decoder)
        finally:
            self._one_done()

    def _decode(self, at: list[int], decoder) -> None:
        for i in at:
            _, stream, state, pending = self.todo[i]
            t0 = time.perf_counter()
            image = pending.request
            try:
                frame, hw = decoder.decode_measured(image.encoding, image.data, state.stream_hw)
                self.decoded[i] = (frame, hw, (time.perf_counter() - t0) * 1000.0, None)
            except BadImage as e:
                self.decoded[i] = e
            except Exception as e:  # noqa: BLE001 - one broken image never takes a worker (or the server) down
                log.warning("face stream %d: decoding failed: %s", stream.number, e)
                self.decoded[i] = e

    def _jpeg_decoded(self, decoded, times, i: int) -> None:
        """One JPEG from the JPEG batches' thread (decoded: (frame, hw) or its BadImage; times: DecodeTimes)."""
        self.decoded[i] = decoded if isinstance(decoded, BaseException) else (*decoded, times.ms, times)
        self._one_done()

    def _one_done(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._post()

    def _post(self) -> None:
        """Every image decoded: each bound to its stream's slot and handed to the service of its size, all of a
        size in one post; a refused one answered alone."""
        track, call = self.owner.track, self.call
        groups: dict = {}  # service -> (slots, frames, served)
        for (stream_id, stream, state, pending), decoded in zip(self.todo, self.decoded):
            seq = pending.request.seq
            try:
                if stream.closed:
                    stream.abandon()
                    continue
                if isinstance(decoded, BaseException):
                    raise decoded
                frame, hw, decode_ms, times = decoded
                if stream.service is None:
                    try:
                        stream.bind(hw)
                    except ValueError as e:  # every frame size the server takes is taken
                        track._on_loop(track._fatal, state, (grpc.StatusCode.RESOURCE_EXHAUSTED, str(e)))
                        stream.abandon()
                        continue
                    state.frame_hw = hw
                elif hw != state.frame_hw:
                    raise BadImage(f"the image size changed from {state.frame_hw[1]}x{state.frame_hw[0]} to "
                                   f"{hw[1]}x{hw[0]}; open a new stream for another camera mode")
                served = stream.posted(pending, {"decode_ms": decode_ms, "hw": hw, "state": state,
                                                 "decode_times": times, "sid": stream_id, "sink": call})
                slots, frames, posted = groups.setdefault(stream.service, ([], [], []))
                slots.append(stream.slot)
                frames.append(frame)
                posted.append(served)
                state.refused_in_a_row = 0
            except BadImage as e:
                stream.count_bad()
                track._on_loop(track._refused, stream, state, seq, f"image {seq}: {e}")
                stream.abandon()  # wakes the stream: the refusal is answered
            except Exception:  # noqa: BLE001 - logged where it was decoded; the frame is lost, the stream goes on
                stream.count_bad()
                stream.abandon()
        for service, (slots, frames, posted) in groups.items():
            submitted = 0
            try:
                if hasattr(service, "post_many"):
                    service.post_many(slots, frames, posted, call.failed)
                    continue
                for slot, frame, served in zip(slots, frames, posted):  # a service of futures (another process's)
                    # the future names its frame, the frame never its future (no reference cycle a frame)
                    service.submit(slot, frame, tag=served).add_done_callback(partial(call.check_future, served))
                    submitted += 1
            except Exception as e:  # noqa: BLE001 - the service refused the frames: each answered, never lost
                call.failed(posted[submitted:], e)


class TrackManyStreams:
    """The TrackMany method, over the same server and TrackStreams (`track`) the Track method uses."""

    def __init__(self, track) -> None:
        self.track = track
        self.server = track.server
        self.loop = track.loop
        self.workers = max(1, getattr(track.decode_pool, "_max_workers", 1))

    async def TrackMany(self, request_iterator, context) -> None:
        call = ManyCall(self, context, asyncio.current_task(), access.is_loopback(access.peer_host(context.peer())))
        reader = self.loop.create_task(self._read(request_iterator, call))
        try:
            while call.fatal is None:
                call.wake.clear()
                replies = call.ended + call.outbox
                call.ended, call.outbox = [], []
                replies += self._collect(call)
                if replies:
                    await self._write(call, replies)
                elif call.input_done and not call.streams:
                    break
                else:
                    await call.wake.wait()
            if call.fatal is not None:
                await context.abort(*call.fatal)
        finally:
            reader.cancel()
            for stream_id in list(call.streams):
                self._close(call, stream_id)

    # ---- reading ---------------------------------------------------------------------------------------------
    async def _read(self, request_iterator, call: ManyCall) -> None:
        first = True
        try:
            async for request in request_iterator:
                if isinstance(request, access.Malformed):
                    why = f"a message that is not a facebridge.v1.TrackManyRequest ({request.error})"
                    self.server.note_malformed(0, why)
                    if first:  # nothing to tell it apart from a client of another service: refuse the call
                        call.fatal = (grpc.StatusCode.INVALID_ARGUMENT, f"{why}; send TrackManyRequests")
                        self.server.count_invalid()
                        break
                    continue
                first = False
                for item in request.items:
                    self._item(call, item)
                call.wake.set()
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001 - the client went away (or one broken call): never the server
            if not isinstance(e, grpc.RpcError) and type(e).__name__ != "AbortError":
                log.warning("TrackMany call: reading failed: %s", e)
        finally:
            call.input_done = True
            for stream, _state in list(call.streams.values()):
                stream.end_of_input()
            call.wake.set()

    def _item(self, call: ManyCall, item) -> None:
        """One face stream's image (or its end): offered to its stream, opened on its first item."""
        stream_id = item.stream_id
        entry = call.streams.get(stream_id)
        if item.end:
            if entry is not None:
                entry[0].end_of_input()
            if not item.HasField("image"):
                return
        if entry is None:
            entry = self._open(call, item)
            if entry is None:
                return
        stream, state = entry
        state.last_activity = time.monotonic()
        try:
            hw = image_size(item, self.server.decoder, state.raw_ok, state.stream_hw, self.server.frame_sizes)
        except BadImage as e:
            stream.refuse()
            self.track._refused(stream, state, item.image.seq, str(e))
            call.mark(stream_id)
            return
        state.stream_hw = state.stream_hw or hw
        if stream.offer(item.image, item.deadline_ms / 1000.0 if item.deadline_ms else None):
            call.mark(stream_id)
        if item.end:
            stream.end_of_input()

    def _open(self, call: ManyCall, item):
        """A new face stream of the call, or None (answered with `ended`: the server full, a bad first item)."""
        stream_id = item.stream_id
        if len(call.streams) >= MAX_STREAMS_A_CALL:
            call.ended.append(encode_reply(stream_id, ended=f"this call already holds {MAX_STREAMS_A_CALL} face "
                                           "streams; end some (TrackManyItem.end) or open another call"))
            return None
        state = StreamState(self.server.default_subject)
        try:
            state.subject = first_subject(item, state.subject)
        except StreamRefused as e:
            self.server.note_malformed(0, str(e))
            self.server.count_invalid()
            call.ended.append(encode_reply(stream_id, ended=str(e).replace("TrackRequest", "TrackManyItem")))
            return None
        peer = access.peer_host(call.context.peer())
        stream = self.server.table.open(peer)
        if stream is None:
            call.ended.append(encode_reply(stream_id, ended=self.server.table.refusal(peer)))
            return None
        state.started, state.raw_ok = True, call.raw_ok
        state.stream, state.context, state.task = stream, call.context, call.task
        stream.wake = lambda: self._wake(call, stream_id)
        stream.on_released = lambda: self.track._released(stream, state)
        self.server.leases.watch(state, stream.number)
        call.streams[stream_id] = (stream, state)
        return stream, state

    def _wake(self, call: ManyCall, stream_id: int) -> None:
        """Mark a stream ready from any thread (nothing to wake once the loop is closed: the server stopped)."""
        try:
            self.loop.call_soon_threadsafe(call.mark, stream_id)
        except RuntimeError:
            pass

    # ---- writing ---------------------------------------------------------------------------------------------
    def _collect(self, call: ManyCall) -> list[bytes]:
        """Every ready stream's turn taken (its images decoded and posted as one group), and what it must be told
        now, serialised: images refused, a late drop, its end."""
        replies, todo = [], []
        ready, call.ready = call.ready, set()
        for stream_id in ready:
            entry = call.streams.get(stream_id)
            if entry is None:
                continue
            stream, state = entry
            work = None
            if state.fatal is None:
                work = stream.poll()  # a posted image comes back through pass_done: never `done` here
                if work is not None and work[0] is not None:
                    todo.append((stream_id, stream, state, work[0]))
            out = self.track._refusals(stream, state) if state.refusals else []
            if stream.counters.late > state.reported_late:  # a late drop is reported at once
                state.reported_late = stream.counters.late
                out.append(self.track._counters(stream, pb.TrackResponse()))
            replies += [encode_reply(stream_id, r.SerializeToString()) for r in out]
            if state.fatal is not None or work is None:
                if state.fatal is not None and state.invalid:
                    self.server.count_invalid()
                replies.append(encode_reply(stream_id, ended=state.fatal[1] if state.fatal else CLIENT_ENDED))
                self._close(call, stream_id)
        if todo:
            Group(self, call, todo).start()
        return replies

    async def _write(self, call: ManyCall, replies: list[bytes]) -> None:
        """Write the replies, every stream of the call marked as writing (the write deadline reads the marks)."""
        states = [state for _stream, state in call.streams.values()]
        for message in encode_responses(replies):
            now = time.monotonic()
            for state in states:
                state.writing_since = state.last_activity = now
            await call.context.write(message)
            for state in states:
                state.writing_since = None

    def _close(self, call: ManyCall, stream_id: int) -> None:
        stream, state = call.streams.pop(stream_id)
        self.server.leases.forget(state)
        if not stream.close():  # one of its images is still out: freed when it comes back
            self.loop.call_later(CLOSE_WAIT_S, stream.give_up)

