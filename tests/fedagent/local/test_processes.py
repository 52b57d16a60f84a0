"""Proc, the Flower processes' handle: a Ctrl-C that lands while a command watches its processes never leaves one
that cannot be stopped."""
from __future__ import annotations

import random
import signal
import sys
import threading

from fedagent.local.processes import Proc


def test_ctrl_c_landing_inside_the_watch_loop_never_stops_stop_from_ending(tmp_path):
    """`fedagent client` watches its SuperNode with `while all(p.alive() ...)`; Ctrl-C raises KeyboardInterrupt
    wherever the main thread is. Popen.poll() there left Popen's wait lock held in about one interrupt in five, and
    stop() then waited on it for ever (a client that ignored Ctrl-C for the test's 240 s)."""
    proc = Proc("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"], {}, tmp_path / "sleeper.log")
    old = signal.signal(signal.SIGALRM, signal.default_int_handler)
    interrupted = 0
    try:
        for _ in range(500):  # with Popen.poll(): no stuck lock with odds of 0.8 ** 500
            try:
                signal.setitimer(signal.ITIMER_REAL, random.uniform(1e-5, 3e-4))
                while proc.alive():
                    pass
            except KeyboardInterrupt:
                interrupted += 1
        signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, old)
    assert interrupted == 500 and proc.alive()
    stopper = threading.Thread(target=proc.stop, args=(1.0,), daemon=True)
    stopper.start()
    stopper.join(15)
    assert not stopper.is_alive(), "stop() blocked: the wait lock was left held"
    assert proc.popen.returncode is not None and not proc.alive()
