"""Live face streams on the batched service: one slot per stream, latest wins, a deadline per image.

A stream has at most one image in the batched service and one waiting. A newer image replaces the waiting one
(counted as stale), so a stream that sends faster than the server serves gets its newest frames, never a
backlog; an image that waited longer than its deadline is dropped before it reaches the device (counted as
late). Streams beyond `max_streams` are refused (the gRPC front end answers RESOURCE_EXHAUSTED), and so are those
of one peer beyond `max_streams_per_peer`. A stream is bound to the batched service of its frame size on its first
image; when it ends, its slot is freed and the slot's tracking state reset for the next stream. At most
`max_sizes` frame sizes have a service (each holds its buffers and compiled passes); a new size takes the place of
the least recently used one that no stream uses (closed, its memory released; sizes built at start stay), so
short-lived streams of odd sizes never lock later sizes out. Counters feed the stream's own reports and `stats()`
(the metrics and GetServeStatus).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from bridge.stats import RollingWindow

DEFAULT_DEADLINE_S = 0.1  # an image older than this when its turn comes is late: the client has newer ones


@dataclass
class Pending:
    """An image received for a stream, not yet handed to the service."""

    request: Any  # what the front end received (decoded when its turn comes)
    received: float  # time.perf_counter() on arrival
    deadline_s: float


@dataclass
class Served:
    """One image's trip through the service, handed back to the stream's front end."""

    request: Any
    received: float
    submitted: float
    future: Future | None
    extra: dict = field(default_factory=dict)  # what the front end decoded with it (frame metadata, its stream)


@dataclass
class StreamCounters:
    received: int = 0
    stale: int = 0  # replaced by a newer image while waiting
    late: int = 0  # waited past its deadline
    bad: int = 0  # undecodable, wrong size, or failed in the service
    served: int = 0


class LiveStream:
    """One face stream: written by its front end on the serve loop (images in, work taken), by a decode worker
    (submitted) and by the service (results); `wake()` (set by the front end, thread-safe) is called whenever a
    thread other than the loop made work for it: a result came back, or an image never reached the service."""

    def __init__(self, table: StreamTable, number: int, peer: str = "") -> None:
        self.table = table
        self.number = number  # unique for the server's lifetime (logs)
        self.peer = peer  # the client's host, for the per-peer limit
        self.service = None  # bound on the first image (by its frame size)
        self.slot: int | None = None
        self.counters = StreamCounters()
        self.wake = lambda: None
        self.on_released = lambda: None  # called once, on whichever thread frees the slot
        self._lock = threading.Lock()
        self._pending: Pending | None = None
        self._taken: Pending | None = None  # taken for its turn, being decoded (not yet in the service)
        self._in_flight: Served | None = None
        self._done: Served | None = None
        self._input_ended = False
        self._released = False
        self.closed = False

    # --- the front end's side (the serve loop) --------------------------------------------------------------
    def offer(self, request, deadline_s: float | None = None) -> bool:
        """A new image: it replaces the one waiting, if any (latest wins). True when its turn can come now (none of
        the stream's images is being decoded or tracked); else the result of the one that is will wake the stream."""
        with self._lock:
            self.counters.received += 1
            stale = self._pending is not None
            if stale:
                self.counters.stale += 1
            self._pending = Pending(request, time.perf_counter(), deadline_s or self.table.deadline_s)
            turn = self._taken is None and self._in_flight is None
        self.table._count("received", "stale" if stale else None)
        return turn

    def refuse(self) -> None:
        """An image refused on arrival (bad before its turn): received and bad, never replacing the waiting one."""
        with self._lock:
            self.counters.received += 1
            self.counters.bad += 1
        self.table._count("received", "bad")

    def holds_image(self) -> bool:
        """Whether one of its images waits, is being decoded or tracked, or waits to be sent (the idle check)."""
        return (self._pending is not None or self._taken is not None or self._in_flight is not None
                or self._done is not None)

    def end_of_input(self) -> None:
        with self._lock:
            self._input_ended = True
        self.wake()

    def poll(self) -> tuple[Pending | None, Served | None] | None:
        """(image whose turn it is, finished result to send) now, either may be None; None when the stream is over
        (input ended and nothing is left, or closed). Never waits. Late images are dropped here and counted; an
        image taken must be handed to `submit` or `abandon` (until then the stream has no other turn)."""
        with self._lock:
            if self.closed:
                return None
            done, self._done = self._done, None
            todo = None
            if self._pending is not None and self._taken is None and self._in_flight is None:
                todo, self._pending = self._pending, None
                if time.perf_counter() - todo.received > todo.deadline_s:
                    self.counters.late += 1
                    self.table._count("late")
                    todo = None
                else:
                    self._taken = todo
            elif (done is None and self._input_ended and self._pending is None and self._taken is None
                  and self._in_flight is None):
                return None
            return todo, done

    # --- a decode worker's side -----------------------------------------------------------------------------
    def bind(self, frame_hw: tuple[int, int]) -> None:
        """Take a slot in the batched service for this frame size (on the first image)."""
        self.service, self.slot = self.table._take_slot(tuple(frame_hw))

    def submit(self, pending: Pending, frame, extra: dict | None = None) -> None:
        """Hand a decoded frame (uint8 RGB HxWx3, host or device) to the service; its result comes back through
        `poll`. Raises ValueError for a frame the service refuses (the caller counts it and calls `abandon`)."""
        served = Served(pending.request, pending.received, time.perf_counter(), None, extra or {})
        served.future = self.service.submit(self.slot, frame, tag=served)  # the tag goes to a finish_pass
        with self._lock:
            self._taken, self._in_flight = None, served
        # the callback names the stream, not `served`: a closure over it would make served -> future -> callback
        # -> served a reference cycle, every frame's image and objects then freed only by the garbage collector
        # (its collections grew with the load to 2 ms a pass on the H200: runtime/gc_pauses.py)
        served.future.add_done_callback(self._finished)

    def posted(self, pending: Pending, extra: dict) -> Served:
        """`submit`'s bookkeeping for an image its caller hands to the service itself, with others at once
        (`service.post_many`, TrackMany's groups): in flight, with no future; `returned` when its pass is done."""
        served = Served(pending.request, pending.received, time.perf_counter(), None, extra)
        with self._lock:
            self._taken, self._in_flight = None, served
        return served

    def returned(self, served: Served) -> bool:
        """A posted image is back (its replies made, or its pass failed): the stream's turn is free, a closed
        stream is freed. No wake: the caller, on the loop, takes the next turn itself. True while open."""
        with self._lock:
            if self._in_flight is served:
                self._in_flight = None
        if self.closed:
            self._release_if_idle()
            return False
        return True

    def abandon(self) -> None:
        """The image taken never reached the service (refused on decode): the stream's turn is free again."""
        with self._lock:
            self._taken = None
        self._settled()

    def _finished(self, future: Future) -> None:
        with self._lock:
            served = self._in_flight
            if served is None or served.future is not future:  # not this stream's image in flight: nothing to do
                return
            self._in_flight = None
            self._done = served
        self._settled()

    def _settled(self) -> None:
        if self.closed:
            self._release_if_idle()
        else:
            self.wake()

    def count_bad(self) -> None:
        with self._lock:
            self.counters.bad += 1
        self.table._count("bad")

    def count_served(self, latency_ms: float) -> None:
        with self._lock:
            self.counters.served += 1
        self.table._served(latency_ms)

    def close(self) -> bool:
        """End the stream without waiting: its slot is freed and reset now if none of its images is in the
        service or being decoded, else as soon as that one comes back (or by `give_up`). True when freed now."""
        with self._lock:
            self.closed = True
        return self._release_if_idle()

    def give_up(self) -> None:
        """Its image never came back: free the stream (not its slot, which stays out of use)."""
        self._release(reset=False)

    def _release_if_idle(self) -> bool:
        with self._lock:
            idle = self._taken is None and self._in_flight is None
        if idle:
            self._release(reset=True)
        return idle

    def _release(self, reset: bool) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
        self.table._release(self, reset=reset)
        self.on_released()


class StreamTable:
    """All live streams of one server replica: admission, slots per frame size, totals.

    `make_service(frame_hw, num_streams)` builds the batched service for one frame size (called on the first
    stream of that size); every service gets `max_streams` slots, so no size can starve another."""

    def __init__(self, make_service, max_streams: int, deadline_s: float = DEFAULT_DEADLINE_S,
                 max_sizes: int = 4, max_streams_per_peer: int | None = None) -> None:
        if max_streams < 1:
            raise ValueError(f"max_streams must be at least 1 (got {max_streams})")
        self.max_streams = max_streams
        self.deadline_s = deadline_s
        self.max_sizes = max_sizes
        self.max_streams_per_peer = min(max_streams, max_streams_per_peer or max_streams)
        self._make_service = make_service
        self._lock = threading.Lock()
        self._streams: set[LiveStream] = set()
        self._services: dict[tuple[int, int], Any] = {}
        self._free: dict[tuple[int, int], list[int]] = {}
        self._bound: dict[tuple[int, int], int] = {}  # streams bound to each size's service now
        self._used: dict[tuple[int, int], float] = {}  # when a stream last bound to or left each size
        self._pinned: set[tuple[int, int]] = set()  # built at start (prepare): never released
        self._next_number = 0
        self.totals = {"received": 0, "stale": 0, "late": 0, "bad": 0, "served": 0, "refused": 0, "opened": 0,
                       "refused_per_peer": 0, "sizes_released": 0}
        self._latency = RollingWindow()

    def open(self, peer: str = "") -> LiveStream | None:
        """A new stream from `peer` (its host), or None when `max_streams` are live or that peer holds
        `max_streams_per_peer` (refused, counted; `refusal` says which)."""
        with self._lock:
            if len(self._streams) >= self.max_streams:
                self.totals["refused"] += 1
                return None
            if peer and sum(s.peer == peer for s in self._streams) >= self.max_streams_per_peer:
                self.totals["refused"] += 1
                self.totals["refused_per_peer"] += 1
                return None
            self._next_number += 1
            stream = LiveStream(self, self._next_number, peer)
            self._streams.add(stream)
            self.totals["opened"] += 1
            return stream

    def refusal(self, peer: str = "") -> str:
        """Why `open(peer)` refused: the problem and the fix, for the client."""
        with self._lock:
            full = len(self._streams) >= self.max_streams
        if full or not peer:
            return (f"this server already serves {self.max_streams} face streams (--max-streams); connect to "
                    "another replica or try again later")
        return (f"{peer} already has {self.max_streams_per_peer} face streams on this server "
                "(--max-streams-per-peer); end one, or connect from another machine")

    def prepare(self, frame_hw: tuple[int, int]) -> None:
        """Build the batched service of one frame size now (model warm-up, CUDA-graph capture), before streams
        of that size arrive, so the first of them does not wait for it. Such a size is never released."""
        self._service_for(tuple(frame_hw))
        with self._lock:
            self._pinned.add(tuple(frame_hw))

    def _service_for(self, frame_hw: tuple[int, int]):
        with self._lock:
            return self._service_locked(frame_hw)

    def _service_locked(self, frame_hw: tuple[int, int]):
        service = self._services.get(frame_hw)
        if service is None:
            if len(self._services) >= self.max_sizes:
                self._release_idle_size()
            if len(self._services) >= self.max_sizes:
                sizes = ", ".join(f"{w}x{h}" for h, w in self._services)
                raise ValueError(f"this server already serves {self.max_sizes} frame sizes ({sizes}), each with "
                                 "streams now; send one of them")
            service = self._services[frame_hw] = self._make_service(frame_hw, self.max_streams)
            self._free[frame_hw] = list(range(self.max_streams - 1, -1, -1))
            self._bound[frame_hw] = 0
            self._used[frame_hw] = time.monotonic()
        return service

    def _release_idle_size(self) -> None:
        """Close the service of the least recently used size that no stream uses and no image is out in (not one
        built at start), to make room for a new size (call with the lock held)."""
        idle = [hw for hw in self._services if hw not in self._pinned and not self._bound[hw]
                and len(self._free[hw]) == self.max_streams]
        if not idle:
            return
        hw = min(idle, key=self._used.__getitem__)
        service = self._services.pop(hw)
        del self._free[hw], self._bound[hw], self._used[hw]
        self.totals["sizes_released"] += 1
        service.close()

    def _take_slot(self, frame_hw: tuple[int, int]):
        with self._lock:
            service = self._service_locked(frame_hw)
            self._bound[frame_hw] += 1
            self._used[frame_hw] = time.monotonic()
            return service, self._free[frame_hw].pop()

    def _release(self, stream: LiveStream, reset: bool) -> None:
        service = stream.service
        with self._lock:
            self._streams.discard(stream)
            if stream.slot is None:
                return
            hw = tuple(service.frame_hw)
            if hw in self._bound:
                self._bound[hw] -= 1
                self._used[hw] = time.monotonic()
            if reset:  # the next stream in this slot starts from detection, not from this face
                service.reset_stream(stream.slot)
                self._free[hw].append(stream.slot)
            stream.slot = None  # a slot whose image never came back stays out of use
            idle = self._bound.get(hw) == 0 and len(self._free.get(hw, ())) == self.max_streams
        if idle:  # the size's last stream ended with its image back (an engine process may release the size)
            service.idle()

    def _count(self, key: str, also: str | None = None) -> None:
        with self._lock:
            self.totals[key] += 1
            if also is not None:
                self.totals[also] += 1

    def _served(self, latency_ms: float) -> None:
        with self._lock:
            self.totals["served"] += 1
            self._latency.add(time.monotonic(), latency_ms)

    def served_many(self, streams: list[LiveStream], latencies_ms: list[float]) -> None:
        """count_served of many streams' frames at once (a pass's, one lock)."""
        for stream in streams:
            stream.counters.served += 1  # a stream's served count is written by one thread at a time
        now = time.monotonic()
        with self._lock:
            self.totals["served"] += len(latencies_ms)
            for latency in latencies_ms:
                self._latency.add(now, latency)

    def services(self) -> list:
        with self._lock:
            return list(self._services.values())

    def stats(self) -> dict:
        """Plain numbers for GetServeStatus and the metrics: live streams, totals, recent server latency."""
        services = self.services()
        with self._lock:
            p50, p99 = self._latency.percentiles(time.monotonic())
            live = len(self._streams)
            totals = dict(self.totals)
        passes = sum(s.passes for s in services)
        frames = sum(s.frames for s in services)
        return {"streams": live, "max_streams": self.max_streams, **totals, "passes": passes,
                "mean_batch": frames / passes if passes else 0.0, "latency_ms_p50": p50, "latency_ms_p99": p99,
                "frame_sizes": [f"{w}x{h}" for h, w in (tuple(s.frame_hw) for s in services)],
                "max_sizes": self.max_sizes, "max_streams_per_peer": self.max_streams_per_peer}

    def close(self) -> None:
        for service in self.services():
            service.close()
