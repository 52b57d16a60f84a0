"""EndedThread: a thread whose end is an Event, waited on instead of joined.

On CPython up to 3.11, a `Thread.join` that Ctrl-C interrupts can mark a thread that is still running as ended
(cpython#90882: the interrupted join releases the thread's own state lock): `is_alive()` then says False while it
still works. The runner's main thread waits on its threads in a loop that Ctrl-C lands in, and stopped waiting for a
send thread that then sent one more frame after the recorder had closed (the take lacked the run's last frame). An
Event's wait, interrupted, changes nothing about the thread."""
from __future__ import annotations

import threading


class EndedThread(threading.Thread):
    def __init__(self, target, name: str, args: tuple = ()) -> None:
        super().__init__(name=name, daemon=True)
        self._work, self._args = target, args
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            self._work(*self._args)
        finally:
            self.ended.set()

    @property
    def running(self) -> bool:
        """Started and not yet returned from its work (never False while it still works, unlike is_alive)."""
        return self.ident is not None and not self.ended.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Wait up to `timeout` seconds for the work to end; True when it has. Safe to interrupt."""
        return self.ended.wait(timeout)
