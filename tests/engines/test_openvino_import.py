"""Nothing leaves the machine: the bridge imports OpenVINO without its telemetry, which otherwise sends a usage
event to Google Analytics from a forked process (the fork gRPC complained about) and writes a client id under
~/intel."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, subprocess_env

pytest.importorskip("openvino", reason="OpenVINO is in the test extra")


def test_an_openvino_session_sends_nothing_and_writes_nothing_home(tmp_path):
    script = f"""
import os, sys
sys.path.insert(0, {str(ROOT)!r})
forks = []
os.register_at_fork(before=lambda: forks.append(1))
from bridge.engines import create_session
session = create_session({str(ROOT / "bridge/models/emotion.onnx")!r}, "openvino", strict=True)
print(session.backend_name, "telemetry" if sys.modules.get("openvino_telemetry") else "no-telemetry",
      "forks", len(forks))
"""
    env = {**subprocess_env(), "HOME": str(tmp_path)}
    env.pop("CI", None)  # the telemetry stays off in CI by itself; the bridge must not rely on that
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["openvino", "no-telemetry", "forks", "0"]
    assert not (tmp_path / "intel").exists(), os.listdir(tmp_path)
