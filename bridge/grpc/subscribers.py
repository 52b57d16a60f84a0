"""Subscriber slots and their lease: a slot is kept only while its client takes frames.

Each subscriber has one latest-frame slot per subject (a slow reader gets the newest frame, what it missed is
counted). Its server thread marks when it hands a frame to gRPC and when gRPC takes it; a frame not taken within
WRITE_DEADLINE_S means flow control stopped the stream (the client stopped reading, or its process hangs), and
the subscriber is evicted: its RPC is cancelled, its thread and slot are freed, one line says so. When every slot
is taken, a newcomer takes the slot of the subscriber stuck longest, once it is stuck for LEASE_GRACE_S.

What cannot be seen from here: a client whose gRPC library keeps accepting frames while its application never
reads them (HTTP/2 window growth) is, to the server, a reader; it keeps its slot until its buffers fill.
"""
from __future__ import annotations

import math
import threading
import time

from bridge.grpc.gen import facebridge_pb2 as pb

WRITE_DEADLINE_S = 10.0  # a frame gRPC has not taken for this long: the client does not read
LEASE_GRACE_S = 2.0  # a newcomer may take the slot of a subscriber stuck at least this long


class Subscriber:
    """One client's latest-frame slots (one per subject), its counters and its lease."""

    def __init__(self, peer: str, subjects: set[str], max_frame_rate: float, context=None) -> None:
        self.peer = peer
        self.subjects = subjects
        self.context = context  # the RPC, to cancel it on eviction
        self.min_interval = 1.0 / max_frame_rate if max_frame_rate > 0 else 0.0
        self.pending: dict[str, tuple[pb.StreamHeader, pb.Frame]] = {}
        self.last_offer: dict[str, float] = {}
        self.header_sent: dict[str, int] = {}  # subject -> layout_id this client has
        self.dropped = 0
        self.sent = 0
        self.closed = False
        self.evicted: str | None = None  # why, once evicted
        self.writing_since: float | None = None  # monotonic time a response was handed to gRPC, until taken
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

    def writing(self) -> None:
        self.writing_since = time.monotonic()

    def written(self) -> None:
        self.writing_since = None

    def stuck_for(self, now: float) -> float:
        """Seconds its current frame has waited for gRPC to take it (0 when none waits)."""
        since = self.writing_since
        return 0.0 if since is None else now - since

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()

    def evict(self, why: str) -> None:
        """Cancel the RPC from outside its thread: gRPC's pending write fails, the thread ends, the slot frees."""
        self.evicted = why
        self.close()
        if self.context is not None:
            self.context.cancel()


def stuck_longest(subscribers: list[Subscriber], now: float, at_least: float) -> Subscriber | None:
    """The subscriber whose frame has waited longest, if it waited at least `at_least` seconds."""
    stuck = [s for s in subscribers if s.stuck_for(now) >= at_least and s.evicted is None]
    return max(stuck, key=lambda s: s.stuck_for(now)) if stuck else None
