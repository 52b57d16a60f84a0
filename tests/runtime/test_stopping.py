"""serve_until_stopped in a real process: status lines while it serves, SIGTERM returns (the handler put back),
Ctrl-C passes through to the caller's cleanup."""
from __future__ import annotations

import signal
import subprocess
import sys
import time

from tests.helpers import subprocess_env

SCRIPT = """
import signal, sys
import bridge.runtime.stopping as stopping
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal (a background parent leaves it ignored)
stopping.STATUS_EVERY_S = 0.2
before = signal.getsignal(signal.SIGTERM)
try:
    stopping.serve_until_stopped(lambda: "status: serving")
    print("returned", signal.getsignal(signal.SIGTERM) is before, flush=True)
except KeyboardInterrupt:
    print("interrupted", flush=True)
    sys.exit(130)
"""


def _started(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=subprocess_env(tmp_path / "home"))
    first = proc.stderr.readline()  # a status line: it is serving, its handler in place
    assert first.strip() == "status: serving", first
    return proc


def test_sigterm_returns_with_the_handler_put_back_and_status_lines_meanwhile(tmp_path):
    proc = _started(tmp_path)
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and out.strip() == "returned True", (out, err)
    assert err.count("status: serving") >= 1 and "Traceback" not in err  # more after the first one read


def test_ctrl_c_passes_through_to_the_caller(tmp_path):
    proc = _started(tmp_path)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and out.strip() == "interrupted", (out, err)


THREAD_SCRIPT = """
import threading, time
import bridge.runtime.stopping as stopping
for every in (30.0, 0.1):  # woken by set() itself; then with the periodic check running meanwhile
    stop, ticks = stopping.Stop(), []
    threading.Timer(0.5, stop.set).start()  # as a front end's engine link when its engine is gone
    t0 = time.monotonic()
    stopping.serve_until_stopped(stop=stop, every_s=every, each=lambda: ticks.append(time.monotonic()))
    print(round(time.monotonic() - t0, 2), len(ticks), flush=True)
"""


def test_another_threads_stop_returns_at_once_and_the_periodic_check_runs_meanwhile(tmp_path):
    run = subprocess.run([sys.executable, "-c", THREAD_SCRIPT], capture_output=True, text=True, timeout=120,
                         env=subprocess_env(tmp_path / "home"))
    assert run.returncode == 0, run.stderr
    (took_long, ticks_long), (took, ticks) = (line.split() for line in run.stdout.splitlines())
    assert 0.45 <= float(took_long) < 20 and ticks_long == "0"  # not the 30 s of a wake-up lost until the check
    assert 0.45 <= float(took) < 20 and 1 <= int(ticks) <= 6  # every 0.1 s for 0.5 s (fewer on a loaded machine)
