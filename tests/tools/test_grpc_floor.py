"""tools/measure/diag/grpc_floor.py, the floor under a served frame's host CPU (docs/PERFORMANCE.md,
"Serving many streams"): real grpc.aio servers and clients on 127.0.0.1, every message answered and its CPU counted."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "tools" / "measure" / "diag" / "grpc_floor.py"
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_two_servers_answer_every_stream_and_the_cpu_is_counted(tmp_path):
    out = tmp_path / "floor.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--streams", "4", "--fps", "30", "--seconds", "2",
                          "--server-processes", "2", "--client-processes", "2", "--json", str(out)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    row = json.loads(out.read_text())["rows"][0]
    assert row["streams"] == 4 and row["server_processes"] == 2
    assert 4 * 30 * 2 * 0.5 <= row["messages"] <= 4 * 30 * 2 + 8  # paced: about 30 a stream a second
    assert row["server_cpu_ms_per_message"] > 0 and row["client_cpu_ms_per_message"] > 0
    assert 0 < row["round_trip_ms_p50"] <= row["round_trip_ms_p99"]
