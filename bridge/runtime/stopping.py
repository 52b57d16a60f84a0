"""Serving until told to stop: SIGTERM (a service manager, `kill`) or Ctrl-C, with a status line every few seconds.

`facebridge serve` in one process and the engine of `serve --front-ends N` both wait here. SIGTERM's handler appends
to a list (the handler is put back afterwards); the wait is a select on Python's signal wakeup fd, which the
interpreter writes as a signal arrives, so the loop wakes at once for a signal and otherwise only for the status line
(it polled every 0.1 s: 0.6 ms of CPU a second in an idle engine). The handler takes no lock: one that set a
threading.Event hung the busy engine of `serve --front-ends` for good (py-spy: the handler ran in the waiting thread
while that thread held the Event's lock, and waited for it; its front ends stopped and it started them again).
Ctrl-C is a KeyboardInterrupt that passes through, so the caller's cleanup runs first and the command then ends with
Ctrl-C's status.
"""
from __future__ import annotations

import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

STATUS_EVERY_S = 5.0


def serve_until_stopped(status_line: Callable[[], str] | None = None) -> None:
    """Return on SIGTERM; print status_line() to stderr every STATUS_EVERY_S meanwhile (None: nothing)."""
    stopped: list[bool] = []  # the handler appends: no lock taken in a signal handler
    if threading.current_thread() is not threading.main_thread():  # no signal handler can be set: serve on
        _wait(stopped, status_line, None)
        return
    previous = signal.signal(signal.SIGTERM, lambda *_: stopped.append(True))
    woken, wake = socket.socketpair()
    try:
        woken.setblocking(False)
        wake.setblocking(False)
        previous_fd = signal.set_wakeup_fd(wake.fileno(), warn_on_full_buffer=False)
        try:
            _wait(stopped, status_line, woken)
        finally:
            signal.set_wakeup_fd(previous_fd)
    finally:
        signal.signal(signal.SIGTERM, previous)
        woken.close()
        wake.close()


def _wait(stopped: list, status_line, woken: socket.socket | None) -> None:
    """Until `stopped` holds something: asleep in select on `woken` (written as a signal arrives) between the status
    lines; without it (not the main thread), asleep until the next status line."""
    last = time.monotonic()
    while not stopped:
        left = STATUS_EVERY_S - (time.monotonic() - last)
        if left > 0:
            if woken is None:
                time.sleep(left)
            elif select.select([woken], [], [], left)[0]:
                try:
                    woken.recv(4096)  # the signals' numbers: the handlers have run or run next
                except BlockingIOError:
                    pass
            continue
        if status_line is not None:
            print(status_line(), file=sys.stderr, flush=True)
        last = time.monotonic()


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
