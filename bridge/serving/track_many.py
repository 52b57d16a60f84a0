"""TrackManyStreams: the batched wire. One TrackMany call carries the images of many face streams (a gateway that
already holds many people's video, or the load generator) and gets their replies back together: one gRPC message
each way per tick instead of one per face per frame, which is most of what a served frame costs the host in gRPC.

Every face stream of a call is the same LiveStream and StreamState a Track call has, driven by the same
TrackStreams code (bridge/serving/track.py: checks, decode, submit, replies with counters), so a face gets the
same FaceFrames whichever wire it came by. What differs is only the loop: one reader for the call, which opens a
face stream on its first item (refused streams are answered at once with `ended`), and one writer, which sends
everything every ready stream has in one TrackManyResponse. What would end a Track call ends one face stream here
(a malformed first item, idle, all images refused, the server full), answered by a reply whose `ended` says why;
a client that stops reading is ended whole, as a Track client is (the write deadline sees every stream's mark).
"""
from __future__ import annotations

import asyncio
import logging
import time

import grpc

from bridge.grpc import access
from bridge.grpc.frame_wire import varint
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.serving.decode import BadImage
from bridge.serving.requests import StreamRefused, first_subject, image_size
from bridge.serving.track import CLOSE_WAIT_S, StreamState

log = logging.getLogger(__name__)

MAX_RESPONSE_BYTES = 2 * 1024 * 1024  # a TrackManyResponse is split past this (clients take 4 MiB by default)
CLIENT_ENDED = "ended by the client"  # TrackManyReply.ended of a stream the client ended, once it is answered
MAX_STREAMS_A_CALL = 4096  # face streams one call may hold open at once (each also takes a --max-streams slot)

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
    """One TrackMany call: its face streams by the client's id, which of them have work, one wake for the writer."""

    def __init__(self, context, task, raw_ok: bool) -> None:
        self.context, self.task, self.raw_ok = context, task, raw_ok
        self.streams: dict[int, tuple] = {}  # stream id -> (LiveStream, StreamState)
        self.ready: set[int] = set()
        self.ended: list[bytes] = []  # replies for streams refused or ended outside the writer
        self.wake = asyncio.Event()
        self.input_done = False
        self.fatal: tuple[grpc.StatusCode, str] | None = None  # why the whole call must end

    def mark(self, stream_id: int) -> None:
        self.ready.add(stream_id)
        self.wake.set()


class TrackManyStreams:
    """The TrackMany method, over the same server and TrackStreams (`track`) the Track method uses."""

    def __init__(self, track) -> None:
        self.track = track
        self.server = track.server
        self.loop = track.loop

    async def TrackMany(self, request_iterator, context) -> None:
        call = ManyCall(context, asyncio.current_task(), access.is_loopback(access.peer_host(context.peer())))
        reader = self.loop.create_task(self._read(request_iterator, call))
        try:
            while call.fatal is None:
                call.wake.clear()
                replies = call.ended + self._collect(call)
                call.ended = []
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
        """Every ready stream's work done as Track's writer does it; the replies it made, serialised."""
        track, replies = self.track, []
        ready, call.ready = call.ready, set()
        for stream_id in ready:
            entry = call.streams.get(stream_id)
            if entry is None:
                continue
            stream, state = entry
            out: list = []
            while state.fatal is None:
                work = stream.poll()
                if work is None:
                    break
                todo, done = work
                if todo is not None:
                    track._submit(stream, todo, state)
                if done is not None:
                    out += track._respond(stream, done, state)
                if state.refusals:
                    out += track._refusals(stream, state)
                if stream.counters.late > state.reported_late:
                    state.reported_late = stream.counters.late
                    out.append(track._counters(stream, pb.TrackResponse()))
                if todo is None and done is None:
                    break
            else:
                work = None
            if state.refusals:  # the input ended (or the stream is ending): what was refused is still answered
                out += track._refusals(stream, state)
            replies += [encode_reply(stream_id, r if isinstance(r, bytes) else r.SerializeToString()) for r in out]
            if state.fatal is not None or work is None:
                if state.fatal is not None and state.invalid:
                    self.server.count_invalid()
                replies.append(encode_reply(stream_id, ended=state.fatal[1] if state.fatal else CLIENT_ENDED))
                self._close(call, stream_id)
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

