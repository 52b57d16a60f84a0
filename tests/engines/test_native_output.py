"""What native code writes to file descriptor 2 is captured around a builder call, while Python's own stderr
(progress lines) still reaches the terminal."""
from __future__ import annotations

import subprocess
import sys

from tests.helpers import ROOT, subprocess_env


def test_native_stderr_is_captured_and_python_stderr_is_not():
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
from bridge.engines.native_output import native_stderr
with native_stderr() as lines:
    os.write(2, b"Internal Error: MyelinCheckException: graph_jit.cpp:278\\n")
    print("progress line", file=sys.stderr, flush=True)
print("captured:", lines)
os.write(2, b"after\\n")
"""
    proc = subprocess.run([sys.executable, "-c", script], env=subprocess_env(), capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "MyelinCheckException" not in proc.stderr and "progress line" in proc.stderr and "after" in proc.stderr
    assert "captured: ['Internal Error: MyelinCheckException: graph_jit.cpp:278']" in proc.stdout
