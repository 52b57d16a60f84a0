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
