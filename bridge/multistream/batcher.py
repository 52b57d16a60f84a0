"""Many face streams, one GPU: gather frames from every stream into batches, with a deadline.

`DeadlineBatcher` runs one worker thread. Whenever the worker is free it takes everything queued (up to
`max_batch`) and runs it as one batch, so a lone stream is never held back waiting for company; under load the
frames that arrive while a batch runs form the next one, which is how batches grow with the number of streams.
`max_wait_s` optionally waits a little for a fuller batch, but never past the oldest frame's deadline.
Results come back through futures, and per stream in submission order (batches run in FIFO order). With
`finish`, each batch's results go through `finish` on a second thread, as one unit, while the next batch runs (the
device is never idle while the host describes a pass). With `merge` too, batches that queued for the finishing
thread while it was busy are finished together, as one unit (their results merged, when no stream is in two of
them): the finishing step's fixed cost per call is paid once for all of them, so a finisher that falls behind
catches up instead of queueing small units.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    stream: Any
    item: Any
    submitted: float
    future: Future | None = field(default_factory=Future)  # None: posted, nobody waits for the result


class DeadlineBatcher:
    def __init__(self, run_batch: Callable[[list[Any], list[Any]], Any], max_batch: int = 256,
                 max_wait_s: float = 0.0, name: str = "batcher",
                 finish: Callable[[list[Any], list[Any], Any], list[Any]] | None = None,
                 merge: Callable[[list[Any]], Any] | None = None,
                 on_fail: Callable[[list[Any], Exception], None] | None = None):
        """`run_batch(streams, items) -> results` (same length and order as items); with `finish`, run_batch may
        return anything and `finish(streams, items, that) -> results` makes the results, on its own thread.
        `merge(thats) -> that`: what run_batch returned for several batches as one (for batches taken in order:
        merge of their results in that order). `on_fail(items, error)`: the posted items (no future to fail) of a
        batch that failed, so whoever posted them hears of it (else the failure is only logged)."""
        self._run_batch = run_batch
        self._finish = finish
        self._merge = merge
        self._on_fail = on_fail
        self.finish_sizes: deque[int] = deque(maxlen=100_000)  # items per finish call (for benchmarks)
        self._finishing: deque = deque()
        self._finish_cond = threading.Condition()
        self.max_batch = max_batch
        self.max_wait_s = max_wait_s
        self._queue: deque[_Pending] = deque()
        self._cond = threading.Condition()
        self._closed = False
        # for benchmarks: how the recent batches formed (bounded: a server runs for days)
        self.batch_sizes: deque[int] = deque(maxlen=100_000)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()
        self._finisher = None
        if finish is not None:
            self._finisher = threading.Thread(target=self._finish_work, name=f"{name}-finish", daemon=True)
            self._finisher.start()

    def submit(self, stream, item) -> Future:
        return self._queue_item(_Pending(stream, item, time.perf_counter())).future

    def post(self, stream, item) -> None:
        """submit, for a caller that never reads the result (run_batch hands each item on itself): no Future is
        made (a Future is a Condition and its lock; py-spy put 0.11 ms of a served frame's lock there, H200)."""
        self._queue_item(_Pending(stream, item, time.perf_counter(), None))

    def post_many(self, streams: list, items: list) -> None:
        """post of many items at once: one lock and one wake for all of them (a gateway's frames that arrived
        together go to the same batch)."""
        now = time.perf_counter()
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            self._queue.extend(_Pending(stream, item, now, None) for stream, item in zip(streams, items))
            self._cond.notify()

    def _queue_item(self, pending: _Pending) -> _Pending:
        with self._cond:
            if self._closed:
                raise RuntimeError("batcher is closed")
            self._queue.append(pending)
            self._cond.notify()
        return pending

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()
        if self._finisher is not None:
            with self._finish_cond:
                self._finishing.append(None)
                self._finish_cond.notify()
            self._finisher.join()

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
            except Exception as e:  # one bad batch fails its own frames, never the worker
                self._fail(batch, e)
                continue
            if self._finish is None:
                self._resolve(batch, results)
            else:
                with self._finish_cond:
                    self._finishing.append((batch, results))
                    self._finish_cond.notify()

    def _resolve(self, batch: list[_Pending], results) -> None:
        if len(results) != len(batch):
            self._fail(batch, RuntimeError(f"the batch gave {len(results)} results for {len(batch)} items"))
            return
        for p, result in zip(batch, results):
            if p.future is not None:
                p.future.set_result(result)

    def _fail(self, batch: list[_Pending], error: Exception) -> None:
        posted = []
        for p in batch:
            if p.future is not None:
                p.future.set_exception(error)
            else:
                posted.append(p.item)
        if posted and self._on_fail is not None:
            try:
                self._on_fail(posted, error)
            except Exception as e:  # noqa: BLE001 - never the worker
                log.warning("telling of a failed batch failed: %s", e)
        elif posted:  # nobody waits for these: the log is where the failure shows
            log.warning("a batch failed for %d posted items: %s", len(posted), error)

    def _finish_work(self) -> None:
        while True:
            with self._finish_cond:
                while not self._finishing:
                    self._finish_cond.wait()
                jobs = [self._finishing.popleft()]
                if jobs[0] is None:
                    return
                if self._merge is not None:
                    jobs += _disjoint_prefix(self._finishing, {p.stream for p in jobs[0][0]})
            if len(jobs) == 1:
                batch, results = jobs[0]
            else:
                batch = [p for job, _ in jobs for p in job]
                try:
                    results = self._merge([r for _, r in jobs])
                except Exception as e:  # noqa: BLE001 - those batches fail their own frames, never the finisher
                    self._fail(batch, e)
                    continue
            self.finish_sizes.append(len(batch))
            try:
                results = self._finish([p.stream for p in batch], [p.item for p in batch], results)
            except Exception as e:  # noqa: BLE001 - one bad batch fails its own frames, never the finisher
                self._fail(batch, e)
                continue
            self._resolve(batch, results)


def _disjoint_prefix(queue: deque, streams: set) -> list:
    """Take from the front of `queue` the batches that share no stream with `streams` or each other (stopping at
    the first that does, or at the close marker), so each stream's results stay in submission order."""
    taken = []
    while queue and queue[0] is not None:
        others = {p.stream for p in queue[0][0]}
        if others & streams:
            break
        streams |= others
        taken.append(queue.popleft())
    return taken
