"""Proc, the Flower processes' handle: a Ctrl-C that lands while a command watches its processes never leaves one
that cannot be stopped."""
from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import subprocess_env

# Ctrl-C as `fedagent client` meets it: KeyboardInterrupt raised wherever its main thread is, here 500 times inside
# the watch loop (by SIGALRM, at random moments); then stop() must end. In a process of its own: exceptions raised
# at random moments in the test runner, whose other tests left threads and finalizers, crashed it.
WATCH_THEN_STOP = textwrap.dedent("""
    import os, random, signal, sys, threading
    from fedagent.local.processes import Proc

    proc = Proc("sleeper", [sys.executable, "-c", "import time; time.sleep(600)"], {}, sys.argv[1])
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    interrupted = 0
    for _ in range(500):  # with Popen.poll(): no stuck lock with odds of 0.8 ** 500
        try:
            signal.setitimer(signal.ITIMER_REAL, random.uniform(1e-5, 3e-4))
            while proc.alive():
                pass
        except KeyboardInterrupt:
            interrupted += 1
    signal.setitimer(signal.ITIMER_REAL, 0)
    alive = proc.alive()
    stopper = threading.Thread(target=proc.stop, args=(1.0,), daemon=True)
    stopper.start()
    stopper.join(15)
    if stopper.is_alive():
        os.killpg(proc.pid, signal.SIGKILL)
    print(interrupted, alive, not stopper.is_alive(), proc.popen.returncode is not None and not proc.alive())
""")


def test_ctrl_c_landing_inside_the_watch_loop_never_stops_stop_from_ending(tmp_path):
    """`fedagent client` watches its SuperNode with `while all(p.alive() ...)`. Popen.poll() there left Popen's
    wait lock held in about one interrupt in five, and stop() then waited on it for ever (a client that ignored
    Ctrl-C for the test's 240 s)."""
    out = subprocess.run([sys.executable, "-c", WATCH_THEN_STOP, str(tmp_path / "sleeper.log")], capture_output=True,
                         text=True, timeout=120, env=subprocess_env(tmp_path / "home"))
    assert out.returncode == 0, out.stderr[-2000:]
    interrupted, alive_before_stop, stop_ended, collected = out.stdout.split()
    assert (interrupted, alive_before_stop) == ("500", "True"), out.stdout
    assert stop_ended == "True", "stop() blocked: the wait lock was left held"
    assert collected == "True", out.stdout
