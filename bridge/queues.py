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

    def put(self, item: T) -> None:
        with self._cond:
            if len(self._items) >= self._maxsize:
                self._items.popleft()
                self.dropped += 1
            self._items.append(item)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> T | None:
        """The oldest item still queued; None on timeout; raises Closed once closed and drained."""
        with self._cond:
            if not self._items and not self._closed:
                self._cond.wait(timeout)
            if self._items:
                return self._items.popleft()
            if self._closed:
                raise Closed
            return None

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._items)
