"""`facebridge bench soak` with the worst day's faults: a short run with a slow disk (strace), gRPC clients that
never read and monitor sockets that never read writes what each output got; what it measures is read from the JSON
of a real run (docs/PERFORMANCE.md), never asserted here."""
from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from bridge.bench import soak
from tests.helpers import facebridge_cmd, subprocess_env


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace (tools/system_packages.sh test installs it)")
def test_bench_soak_runs_with_a_slow_disk_stuck_subscribers_and_idle_monitor_sockets(tmp_path):
    out = tmp_path / "soak.json"
    run = subprocess.run(facebridge_cmd("bench", "soak", "--minutes", "0.25", "--interval", "5", "--slow-fsync-ms",
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
    # gaps are timed by the kernel's arrival stamps, not by when this process's busy receiver got to them
    assert outputs["llf_gap_clock"] == "kernel arrival (SO_TIMESTAMPNS)"
    assert len(outputs["llf_gaps"]) == min(outputs["llf_gaps_over_200ms"], 100)
    assert all(ms > 200 and ms <= outputs["llf_longest_gap_ms"] for _, ms in outputs["llf_gaps"])
    assert 0 < outputs["llf_rate_hz"] < 40  # the sample's 30 fps, on one clock


def test_a_thread_that_comes_and_goes_is_not_growth_but_one_a_quarter_hour_is():
    def result(threads_per_hour, minutes):
        return {"growth_per_hour": {"rss_mb": 0.5, "threads": threads_per_hour, "open_files": 0.0},
                "minutes": minutes}

    assert not soak._grows(result(2.04, 30))  # 38-39 threads over half an hour (a real soak's figure)
    assert soak._grows(result(4.0, 30))  # two more threads by the end of half an hour
    assert soak._grows(result(2.0, 60))
