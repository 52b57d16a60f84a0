"""IdentityRefresher: the identity refreshes of many expression engines on one bounded shared worker, off their
streams' threads, every observation waiting folded in as one batch; latest wins per engine.

In `facebridge serve` every new stream's engine wants an identity refresh on each of its first IDENTITY_UPDATES
frames (a least-squares solve, 101 unknowns over 936 residuals: about 0.8 ms of CPU with one BLAS thread, many
times that with a spinning pool), and an overloaded stream served a frame a second stays in that phase, so every
frame it is served paid a refresh inside its describe step. Here an engine
hands its frame's observation over and goes on with the identity it has (the identity moves only the morphable-
model parameters and region confidence, never the blendshapes, head pose or gaze); `workers` threads fold the
observations in, at most one waiting per engine (a newer one replaces it, its place in the queue kept), so the
refreshes cost at most `workers` cores however many streams start, taken in turn over the engines. A worker takes
up to `batch` waiting observations at once and hands those of one engine type to its `refresh_identities`
(ExpressionEstimator: their problems stacked and solved together, the estimate each gets alone), so the
interpreter lock is held about 20 us a refresh instead of 350 (numpy's per-call overhead paid once a batch; the
products and solves release the lock); an engine type without it is refreshed one at a time.
"""
from __future__ import annotations

import logging
import threading

log = logging.getLogger(__name__)


class IdentityRefresher:
    def __init__(self, workers: int = 1, batch: int = 64) -> None:
        if workers < 1 or batch < 1:
            raise ValueError(f"workers and batch must be at least 1 (got {workers}, {batch})")
        self.batch = batch
        self._cond = threading.Condition()
        self._waiting: dict[int, tuple] = {}  # id(engine) -> (engine, observation), oldest first
        self._closed = False
        self._busy = 0  # observations being worked on now
        self.counts = {"offered": 0, "replaced": 0, "done": 0, "failed": 0, "batches": 0}
        self._threads = [threading.Thread(target=self._work, name=f"identity-refresh-{i}", daemon=True)
                         for i in range(workers)]
        for t in self._threads:
            t.start()

    def offer(self, engine, observation) -> None:
        """`engine.refresh_identity(observation)` soon, on a worker; replaces the engine's waiting one."""
        with self._cond:
            self.counts["offered"] += 1
            key = id(engine)
            if key in self._waiting:
                self.counts["replaced"] += 1
            self._waiting[key] = (engine, observation)
            self._cond.notify()

    def discard(self, engine) -> None:
        """Drop the engine's waiting observation (its stream ended)."""
        with self._cond:
            self._waiting.pop(id(engine), None)

    def pending(self) -> int:
        """Observations waiting or being worked on."""
        with self._cond:
            return len(self._waiting) + self._busy

    def drain(self, timeout: float = 30.0) -> bool:
        """Wait until every observation offered so far is folded in (or dropped); False on timeout."""
        with self._cond:
            return self._cond.wait_for(lambda: not self._waiting and not self._busy, timeout)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
                taken = [self._waiting.pop(key) for key in list(self._waiting)[:self.batch]]  # oldest first
                self._busy += len(taken)
            outcomes = self._refresh(taken)
            with self._cond:
                for done in outcomes:
                    self.counts[done] += 1
                self.counts["batches"] += 1
                self._busy -= len(taken)
                self._cond.notify_all()

    def _refresh(self, taken: list[tuple]) -> list[str]:
        """Fold the taken observations in: together per engine type where it can, else (or when the batch fails)
        one at a time, so one bad observation never costs the others their refresh."""
        groups: dict[type, list[tuple]] = {}
        for engine, observation in taken:
            groups.setdefault(type(engine), []).append((engine, observation))
        outcomes = []
        for kind, members in groups.items():
            together = getattr(kind, "refresh_identities", None)
            if together is not None and len(members) > 1:
                try:
                    together([e for e, _ in members], [o for _, o in members])
                    outcomes += ["done"] * len(members)
                    continue
                except Exception as e:  # noqa: BLE001 - find the bad one below, one at a time
                    log.info("a batch of %d identity refreshes failed (%s); refreshing them one at a time",
                             len(members), e)
            for engine, observation in members:
                try:
                    engine.refresh_identity(observation)
                    outcomes.append("done")
                except Exception as e:  # noqa: BLE001 - one bad observation never stops the others' refreshes
                    log.warning("identity refresh failed: %s", e)
                    outcomes.append("failed")
        return outcomes

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._waiting.clear()
            self._cond.notify_all()
        for t in self._threads:
            t.join(5.0)
