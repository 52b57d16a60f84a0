"""A face stream is kept only while its client reads and sends: a response gRPC has not taken within the write
deadline means flow control stopped the stream (the client stopped reading, or its process hangs), and the stream is
cancelled: its thread, its slot and what gRPC buffered for it are freed, and one line says why. A stream whose
client sent nothing for the idle timeout while the server held none of its images (connected, but no camera
running) is ended with DEADLINE_EXCEEDED and the reason: otherwise idle connections could hold every slot.

The stream's thread marks when it hands a response to gRPC (`writing_since`) and clears the mark once gRPC took
it; what waits meanwhile is bounded by HTTP/2 flow control and the stream's latest-wins slot. The reason cannot
reach the client itself (a status would queue behind the responses it does not read): it sees CANCELLED, and the
server's log and GetServeStatusResponse.streams_evicted say why. A client whose gRPC library keeps accepting
responses while its application never reads them is, to the server, a reader until its window is full.
"""
from __future__ import annotations

import logging
import threading
import time

import grpc

log = logging.getLogger(__name__)

WRITE_DEADLINE_S = 10.0  # a response gRPC has not taken for this long: the client does not read
IDLE_TIMEOUT_S = 30.0  # no image from the client for this long, none held by the server: the slot is freed


class WriteDeadline:
    """Watches the live streams' write marks and activity on its own thread; `evicted` counts the streams it
    ended. idle_s: 0 keeps idle streams."""

    def __init__(self, deadline_s: float = WRITE_DEADLINE_S, idle_s: float = IDLE_TIMEOUT_S) -> None:
        if not deadline_s > 0:
            raise ValueError(f"the write deadline must be a positive number of seconds (got {deadline_s})")
        if not idle_s >= 0:
            raise ValueError(f"the idle timeout must be 0 (off) or a positive number of seconds (got {idle_s})")
        self.deadline_s = float(deadline_s)
        self.idle_s = float(idle_s)
        self.evicted = 0
        self._live: dict = {}  # stream state -> (RPC context, stream number)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="serve-write-deadline", daemon=True)
        self._thread.start()

    def watch(self, state, context, number: int) -> None:
        """state: has `writing_since` (monotonic seconds or None), `last_activity` (monotonic seconds of the last
        request or response), `stream` (its LiveStream), `fatal` and `evicted` (None, or why once ended)."""
        with self._lock:
            self._live[state] = (context, number)

    def forget(self, state) -> None:
        with self._lock:
            self._live.pop(state, None)

    def close(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(min(1.0, self.deadline_s / 4, self.idle_s / 4 or 1.0)):
            now = time.monotonic()
            with self._lock:
                stuck = [(state, context, number) for state, (context, number) in self._live.items()
                         if state.evicted is None and (since := state.writing_since) is not None
                         and now - since >= self.deadline_s]
                idle = [(state, number) for state, (_, number) in self._live.items()
                        if self.idle_s and state.evicted is None and state.writing_since is None
                        and now - state.last_activity >= self.idle_s and not state.stream.holds_image()]
            for state, number in idle:  # the client reads: it can be told why
                state.evicted = f"its client sent no image for {self.idle_s:g} s (--idle-timeout)"
                with self._lock:
                    self.evicted += 1
                log.info("face stream %d ended: %s; its slot is free", number, state.evicted)
                state.fatal = (grpc.StatusCode.DEADLINE_EXCEEDED,
                               f"no image for {self.idle_s:g} s: a stream holds one of the server's slots only "
                               "while it sends; open a new stream when the camera runs again")
                state.stream.end_of_input()
            for state, context, number in stuck:
                state.evicted = (f"its client took no response for {self.deadline_s:g} s (stopped reading; "
                                 "--write-deadline)")
                with self._lock:
                    self.evicted += 1
                log.warning("face stream %d ended: %s; its slot is free", number, state.evicted)
                context.cancel()
