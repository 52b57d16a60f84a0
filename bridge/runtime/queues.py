"""A bounded queue where the latest item wins: when full, the oldest item is dropped and counted."""
from __future__ import annotations

import collections
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


class Closed(Exception):
    """The queue was closed and is empty."""


class LatestQueue(Generic[T]):
    def __init__(self, maxsize: int = 2) -> None:
        self._items: collections.deque[T] = collections.deque()
        self._maxsize = maxsize
        self._cond = threading.Condition()
        self._closed = False
        self.dropped = 0

    def put(self, item: T, block: bool = False) -> None:
        """Queue `item`. When full: drop the oldest (a live camera), or with `block` wait for room (a file
        processed as fast as possible, where every frame should be kept)."""
        with self._cond:
            while block and len(self._items) >= self._maxsize and not self._closed:
                self._cond.wait(0.5)
            if len(self._items) >= self._maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify_all()

    def get(self, timeout: float | None = None) -> T | None:
        """The oldest item still queued; None on timeout; raises Closed once closed and drained."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if self._items:
                item = self._items.popleft()
                self._cond.notify_all()  # a blocked producer may go on
                return item
            if self._closed:
                raise Closed
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)
