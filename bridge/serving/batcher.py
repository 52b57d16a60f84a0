"""Many face streams, one GPU: gather frames from every stream into batches, with a deadline.

`DeadlineBatcher` runs one worker thread. Whenever the worker is free it takes everything queued (up to
`max_batch`) and runs it as one batch, so a lone stream is never held back waiting for company; under load the
frames that arrive while a batch runs form the next one, which is how batches grow with the number of streams.
`max_wait_s` optionally waits a little for a fuller batch, but never past the oldest frame's deadline.
Results come back through futures, and per stream in submission order (batches run in FIFO order).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Pending:
    stream: Any
    item: Any
    submitted: float
    future: Future = field(default_factory=Future)


class DeadlineBatcher:
    def __init__(self, run_batch: Callable[[list[Any], list[Any]], list[Any]], max_batch: int = 256,
                 max_wait_s: float = 0.0, name: str = "batcher"):
        """`run_batch(streams, items) -> results` (same length and order as items)."""
        self._run_batch = run_batch
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._closed = False
        # for benchmarks: how the recent batches formed (bounded: a server runs for days)
        self.batch_sizes: deque[int] = deque(maxlen=100_000)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, stream, item) -> Future:
        pending = _Pending(stream, item, time.perf_counter())
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            self._queue.append(pending)
            self._cond.notify()
        return pending.future

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _take_batch(self) -> list[_Pending] | None:
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = self._queue[0].submitted + self.max_wait_s
            while len(self._queue) < self.max_batch and not self._closed:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    break
                self._cond.wait(remaining)
            return [self._queue.popleft() for _ in range(min(self.max_batch, len(self._queue)))]

    def _work(self) -> None:
        while (batch := self._take_batch()) is not None:
            self.batch_sizes.append(len(batch))
            try:
                results = self._run_batch([p.stream for p in batch], [p.item for p in batch])
                if len(results) != len(batch):
                    raise RuntimeError(f"run_batch returned {len(results)} results for {len(batch)} items")
            except Exception as e:  # one bad batch fails its own frames, never the worker
                for p in batch:
                    p.future.set_exception(e)
                continue
            for p, result in zip(batch, results):
                p.future.set_result(result)
