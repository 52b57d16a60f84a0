"""A face stream is kept only while its client reads and sends: a response gRPC has not taken within the write
deadline means flow control stopped the stream (the client stopped reading, or its process hangs), and the stream is
ended: its coroutines, its slot and its place in the table are freed, and one line says why. A stream whose client
sent nothing for the idle timeout while the server held none of its images (connected, but no camera running) is
ended with DEADLINE_EXCEEDED and the reason: otherwise idle connections could hold every slot.

The stream's coroutine marks when it hands a response to gRPC (`writing_since`) and clears the mark once gRPC took
it; what waits meanwhile is bounded by HTTP/2 flow control and the stream's latest-wins slot. A stream past the
write deadline gets CANCELLED with the reason, which HTTP/2 can only deliver behind the responses the client does
not read (a client that reads again gets them, then the status); its coroutine is cancelled at once, so the
server's side is free whether or not that status is ever read; the server's log and
GetServeStatusResponse.streams_evicted say why. A client whose gRPC library keeps accepting responses while its
application never reads them is, to the server, a reader until its window is full. The checks run on the serve
loop (`start(loop)`), beside the streams they watch: no lock, no thread.
"""
from __future__ import annotations

import asyncio
import logging
import time

import grpc

log = logging.getLogger(__name__)

WRITE_DEADLINE_S = 10.0  # a response gRPC has not taken for this long: the client does not read
IDLE_TIMEOUT_S = 30.0  # no image from the client for this long, none held by the server: the slot is freed


class WriteDeadline:
    """Watches the live streams' write marks and activity from the serve loop; `evicted` counts the streams it
    ended. idle_s: 0 keeps idle streams."""

    def __init__(self, deadline_s: float = WRITE_DEADLINE_S, idle_s: float = IDLE_TIMEOUT_S) -> None:
        if not deadline_s > 0:
            raise ValueError(f"the write deadline must be a positive number of seconds (got {deadline_s})")
        if not idle_s >= 0:
            raise ValueError(f"the idle timeout must be 0 (off) or a positive number of seconds (got {idle_s})")
        self.deadline_s = float(deadline_s)
        self.idle_s = float(idle_s)
        self.period_s = min(1.0, self.deadline_s / 4, self.idle_s / 4 or 1.0)
        self.evicted = 0
        self._live: dict = {}  # stream state -> stream number (touched on the loop only)
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._aborts: set[asyncio.Task] = set()  # the loop keeps only weak references to tasks: held till done

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Check every period_s on `loop` (call from any thread)."""
        self._loop = loop
        loop.call_soon_threadsafe(self._schedule)

    def watch(self, state, number: int) -> None:
        """On the loop. state: has `writing_since` (monotonic seconds or None), `last_activity` (monotonic seconds
        of the last request or response), `stream` (its LiveStream), `context` and `task` (its RPC's servicer
        context and the task running it), `fatal`, `invalid` and `evicted` (None, or why once ended)."""
        self._live[state] = number

    def forget(self, state) -> None:
        self._live.pop(state, None)

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._cancel)

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = None
        self._loop = None

    def _schedule(self) -> None:
        if self._loop is not None:
            self._timer = self._loop.call_later(self.period_s, self._check)

    def _check(self) -> None:
        now = time.monotonic()
        for state, number in list(self._live.items()):
            if state.evicted is not None:
                continue
            since = state.writing_since
            if since is not None and now - since >= self.deadline_s:
                self._end_stuck(state, number)
            elif (self.idle_s and since is None and now - state.last_activity >= self.idle_s
                  and not state.stream.holds_image()):
                self._end_idle(state, number)
        self._schedule()

    def _end_idle(self, state, number: int) -> None:  # the client reads: it can be told why
        state.evicted = f"its client sent no image for {self.idle_s:g} s (--idle-timeout)"
        self.evicted += 1
        log.info("face stream %d ended: %s; its slot is free", number, state.evicted)
        state.fatal = (grpc.StatusCode.DEADLINE_EXCEEDED,
                       f"no image for {self.idle_s:g} s: a stream holds one of the server's slots only while it "
                       "sends; open a new stream when the camera runs again")
        state.stream.end_of_input()

    def _end_stuck(self, state, number: int) -> None:
        state.evicted = (f"its client took no response for {self.deadline_s:g} s (stopped reading; "
                         "--write-deadline)")
        self.evicted += 1
        log.warning("face stream %d ended: %s; its slot is free", number, state.evicted)
        abort = asyncio.ensure_future(_abort_quietly(
            state.context, grpc.StatusCode.CANCELLED, f"the server ended this stream: {state.evicted}"))
        self._aborts.add(abort)
        abort.add_done_callback(self._aborts.discard)
        state.task.cancel()  # the coroutine waiting in its write ends now; its slot is freed on the way out


async def _abort_quietly(context, code: grpc.StatusCode, details: str) -> None:
    """Queue the status (delivered when the client reads again, if ever); its outcome matters to nobody here."""
    try:
        await context.abort(code, details)
    except BaseException:  # noqa: BLE001 - AbortError by design, or the call already gone
        pass
