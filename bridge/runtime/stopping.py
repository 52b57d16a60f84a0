"""Serving until told to stop: SIGTERM (a service manager, `kill`) or Ctrl-C, with a status line every few seconds.

`facebridge serve` in one process and the engine of `serve --front-ends N` both wait here. SIGTERM's handler appends
to a list the loop looks at every 0.1 s (the handler is put back afterwards). The handler takes no lock: one that set a
threading.Event hung the busy engine of `serve --front-ends` for good (py-spy: the handler ran in the waiting thread
while that thread held the Event's lock, and waited for it; its front ends stopped and it started them again).
Ctrl-C is a KeyboardInterrupt that passes through, so the caller's cleanup runs first and the command then ends with
Ctrl-C's status.
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

STATUS_EVERY_S = 5.0


def serve_until_stopped(status_line: Callable[[], str] | None = None) -> None:
    """Return on SIGTERM; print status_line() to stderr every STATUS_EVERY_S meanwhile (None: nothing)."""
    stopped: list[bool] = []  # the handler appends: no lock taken in a signal handler
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    try:
        last = time.monotonic()
        while not stopped:
            time.sleep(0.1)
            if status_line is not None and time.monotonic() - last >= STATUS_EVERY_S:
                print(status_line(), file=sys.stderr, flush=True)
                last = time.monotonic()
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


@contextmanager
def stop_not_cut_short():
    """Ctrl-C ignored while the block runs (a server's own stop, bounded by its time limits): a second Ctrl-C,
    typed while the first one's stop was under way, cut `serve --front-ends N`'s short and left its shared-memory
    rings in /dev/shm, where a container has 64 MiB."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
