"""`facebridge bench soak` with the worst day's faults: a short run with a slow disk (strace), gRPC clients that
never read and monitor sockets that never read writes what each output got; what it measures is read from the JSON
of a real run (docs/PERFORMANCE.md), never asserted here."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.helpers import facebridge_cmd, subprocess_env


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (tools/system_packages.sh test installs it)")
def test_bench_soak_runs_with_a_slow_disk_stuck_subscribers_and_idle_monitor_sockets(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run(facebridge_cmd("bench", "soak", "--minutes", "0.5", "--interval", "5", "--slow-fsync-ms",
                                        "300", "--stuck-subscribers", "3", "--monitor-sockets", "5", "--json",
                                        str(out)),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    result = json.loads(out.read_text())["results"]
    assert result["exit_code"] == 0 and result["ended_by"] == "SIGTERM"
    assert result["stuck_subscribers"] == 3 and result["monitor_sockets"] == 5
    outputs = result["outputs"]
    assert outputs["take_metadata"]["complete"] is True and outputs["take_frames"] == outputs["take_csv_rows"]
    for key in ("llf_packets", "llf_longest_gap_ms", "llf_gaps_over_200ms", "llf_rate_hz"):
        assert key in outputs
