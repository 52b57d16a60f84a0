"""Subscriber slots and their lease: a slot is kept only while its client keeps up with the live stream.

Each subscriber has one latest-frame slot per subject (a slow reader gets the newest frame, what it missed is
counted). Its server thread marks when it hands a frame to gRPC and when gRPC takes it. gRPC takes a frame at once
while the client's flow-control window has room, so a frame that waits means the client is already a window of
frames behind; one not taken within `max_lag_s` (MAX_LAG_S) means the client fell behind the live stream by more
than that (it stopped reading, reads one frame every few seconds, or its process hangs), and the subscriber is
dropped: its RPC is cancelled, its thread and slot are freed, one line says so.

A newcomer always gets a slot at once (`choose_slot`): one peer host holds at most `max_per_peer` subscriptions
and gives up its newest when it asks for more; when every slot is taken the newcomer gets the slot of the
subscriber stuck longest (at least LEASE_GRACE_S), else the newest subscription of the host holding the most. So
clients that connect and never read cannot lock Unreal out: they cost a slot each until they fall behind, and a
reader connecting meanwhile takes one of theirs, not one of the older readers'.

What cannot be seen from here: a client whose gRPC library keeps accepting frames while its application never
reads them (its window grown to megabytes) looks like a reader until that window is full; then the bound above
applies.
"""
from __future__ import annotations

import math
import threading
import time

from bridge.grpc import access
from bridge.grpc.gen import facebridge_pb2 as pb

MAX_LAG_S = 2.0  # a frame gRPC has not taken for this long: the client fell that far behind the live stream
LEASE_GRACE_S = 1.0  # a newcomer takes the slot of a subscriber stuck at least this long before any other
MAX_PER_PEER = 8  # subscriptions one peer host may hold at once


class Subscriber:
    """One client's latest-frame slots (one per subject), its counters and its lease."""

    def __init__(self, peer: str, subjects: set[str], max_frame_rate: float, context=None) -> None:
        self.peer = peer
        self.host = access.peer_host(peer) or peer  # what a per-peer limit counts (a unix socket: itself)
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


def choose_slot(subscribers: list[Subscriber], host: str, max_subscribers: int, max_per_peer: int,
                now: float) -> tuple[bool, Subscriber | None, str]:
    """Where a newcomer from `host` goes: (admitted, the subscriber whose slot it takes or None, why)."""
    live = [s for s in subscribers if s.evicted is None]
    mine = [s for s in live if s.host == host]
    if len(mine) >= max_per_peer:
        return True, _give_up(mine, now), f"{host} holds its limit of {max_per_peer} subscriptions"
    if len(live) < max_subscribers:
        return True, None, ""
    stuck = stuck_longest(live, now, LEASE_GRACE_S)
    if stuck is not None:
        return True, stuck, f"it took no frame for {stuck.stuck_for(now):.0f} s"
    if not live:
        return False, None, "no slot"
    newest = {s.host: i for i, s in enumerate(live)}  # a tie goes to the host that joined last
    busiest = max(newest, key=lambda h: (sum(s.host == h for s in live), h == host, newest[h]))
    return True, _give_up([s for s in live if s.host == busiest], now), \
        f"every slot was taken and {busiest} holds the most"


def _give_up(held: list[Subscriber], now: float) -> Subscriber:
    """Which of one host's subscriptions gives way: the one stuck longest, else its newest (an older one has
    proved itself longer)."""
    stuck = stuck_longest(held, now, LEASE_GRACE_S)
    return stuck if stuck is not None else held[-1]
