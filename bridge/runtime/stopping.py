"""Serving until told to stop: SIGTERM (a service manager, `kill`), Ctrl-C, or another thread's `Stop.set()`, with a
status line (or another periodic check) every few seconds.

`facebridge serve` in one process, the engine of `serve --front-ends N` and each of its front ends wait here. The wait
is a select on a socket pair: Python's signal wakeup fd writes to it as a signal arrives and `Stop.set()` writes to it
from any thread, so the loop wakes at once and otherwise only for its periodic call (it polled every 0.1 s: 0.6 ms of
CPU a second in an idle engine). SIGTERM's handler only appends to a list and writes that byte, and is put back
afterwards. It takes no lock: one that set a threading.Event hung the busy engine of `serve --front-ends` for good
(py-spy: the handler ran in the waiting thread while that thread held the Event's lock, and waited for it; its front
ends stopped and it started them again); the front ends' handler did the same. Ctrl-C is a KeyboardInterrupt that
passes through, so the caller's cleanup runs first and the command then ends with Ctrl-C's status.
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


class Stop:
    """A stop, asked from any thread or a signal handler: `set()` takes no lock and wakes the waiting loop at once."""

    def __init__(self) -> None:
        self.asked: list[bool] = []
        self.woken, self._wake = socket.socketpair()
        self.woken.setblocking(False)
        self._wake.setblocking(False)

    def set(self, *_signal) -> None:
        self.asked.append(True)
        try:
            self._wake.send(b"\0")
        except OSError:  # its buffer is full (the loop wakes anyway) or it is closed (the wait is over)
            pass

    def is_set(self) -> bool:
        return bool(self.asked)

    def close(self) -> None:
        self.woken.close()
        self._wake.close()


def serve_until_stopped(status_line: Callable[[], str] | None = None, stop: Stop | None = None,
                        every_s: float | None = None, each: Callable[[], None] | None = None) -> None:
    """Return on SIGTERM, or once `stop` is set; print status_line() to stderr every STATUS_EVERY_S meanwhile (None:
    nothing), or call `each()` every `every_s` (a check of the caller's own)."""
    own = stop is None
    stop = Stop() if own else stop
    every = every_s or STATUS_EVERY_S
    tick = each or ((lambda: print(status_line(), file=sys.stderr, flush=True)) if status_line else None)
    main = threading.current_thread() is threading.main_thread()  # only it can take signals
    previous = signal.signal(signal.SIGTERM, stop.set) if main else None
    try:
        previous_fd = signal.set_wakeup_fd(stop._wake.fileno(), warn_on_full_buffer=False) if main else None
        try:
            _wait(stop, every, tick)
        finally:
            if main:
                signal.set_wakeup_fd(previous_fd)
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
        if own:
            stop.close()


def _wait(stop: Stop, every: float, tick) -> None:
    """Until the stop is set: asleep in select on its socket between the periodic calls."""
    last = time.monotonic()
    while not stop.is_set():
        left = every - (time.monotonic() - last)
        if left > 0:
            if select.select([stop.woken], [], [], left)[0]:
                try:
                    stop.woken.recv(4096)  # signals' numbers and set()'s bytes: what they say is in stop.asked
                except BlockingIOError:
                    pass
            continue
        if tick is not None:
            tick()
        last = time.monotonic()


def say_stopped(prog: str) -> None:
    """The last line of a server that a SIGTERM stopped (a service manager's journal shows the stop was clean);
    Ctrl-C has its own (console.py)."""
    print(f"{prog}: stopped (SIGTERM)", file=sys.stderr, flush=True)


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
