"""ServeLoop: the one asyncio event loop of a `facebridge serve` process, on a thread of its own, so the gRPC front
end runs every face stream as coroutines while the caller's thread (the command, a Ray Serve replica's actor)
stays free; other threads reach it only through `call` (a coroutine run there, its result or exception returned)
and `loop.call_soon_threadsafe`.
"""
from __future__ import annotations

import asyncio
import logging
import threading

log = logging.getLogger(__name__)


class ServeLoop:
    def __init__(self, name: str = "serve-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            pending = [t for t in asyncio.all_tasks(self.loop) if not t.done()]
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()

    def call(self, coro, timeout: float | None = None):
        """Run `coro` on the loop from another thread and return what it returns (or raise what it raises)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the loop (its tasks cancelled) and wait for its thread."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the serve loop did not stop within %.0f s", timeout)
