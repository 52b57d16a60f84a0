"""tools/measure/host_load.py, what tools/measure/gpu_serve_bench.sh's LOAD=1 reads the host and GPU load with: a
real /proc/stat sample, and the summary of each measured window of a bench serve log from known jiffies and dmon
rows."""
from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "tools" / "measure" / "host_load.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)


def test_a_window_reads_busy_cores_and_the_dmon_means(tmp_path):
    t = 1_800_000_000.0
    # two cores: over the window core 0 is busy 90% (user 60, system 20, softirq 10), core 1 idle but 25%
    samples = [{"t": t + 7.0, "stat": {"cpu": [0] * 8, "cpu0": [0] * 8, "cpu1": [0] * 8}},
               {"t": t + 17.0, "stat": {"cpu": [60, 0, 20, 110, 0, 0, 10, 0], "cpu0": [60, 0, 20, 10, 0, 0, 10, 0],
                                        "cpu1": [0, 0, 0, 100, 0, 0, 0, 0]}}]
    (tmp_path / "host.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples))
    stamp = datetime.fromtimestamp(t + 10).strftime("%Y%m%d %H:%M:%S")
    (tmp_path / "dmon.txt").write_text(
        "#Date       Time        gpu    pwr     sm    mem   jpg\n"
        "#YYYYMMDD   HH:MM:SS    Idx      W      %      %     %\n"
        f" {stamp}      0    200     70      5     -\n"
        f" {datetime.fromtimestamp(t + 11).strftime('%Y%m%d %H:%M:%S')}      0    220     80      7    30\n"
        f" {datetime.fromtimestamp(t + 40).strftime('%Y%m%d %H:%M:%S')}      0    100      0      0     0\n")
    # the count's line, then its clients start 3 s later and are measured from warmup 3 s on: t+7 .. t+22 here
    (tmp_path / "bench.log").write_text(f"{t:.6f} bench serve: 64 streams x 30 fps for 20 s ...\n"
                                        f"{t + 25:.6f} bench serve: 64 streams: p99 20 ms\n")
    out = tmp_path / "load.json"
    done = _run("summarise", "--host", str(tmp_path / "host.jsonl"), "--dmon", str(tmp_path / "dmon.txt"),
                "--log", str(tmp_path / "bench.log"), "--json", str(out))
    assert done.returncode == 0, done.stderr
    (window,) = json.loads(out.read_text())["windows"]
    assert window["streams"] == 64 and window["from_unix"] == t + 7 and window["to_unix"] == t + 22
    host = window["host_cpu"]
    assert host["cores"] == 2 and host["busy_cores"] == 0.9 and host["user_cores"] == 0.6
    assert host["system_cores"] == 0.2 and host["irq_softirq_cores"] == 0.1 and host["busiest_core"] == 0.9
    dmon = window["dmon:dmon.txt"]
    assert dmon["samples"] == 2 and dmon["sm"] == {"mean": 75.0, "max": 80.0} and dmon["pwr"]["mean"] == 210.0
    assert dmon["jpg"] == {"mean": 30.0, "max": 30.0}  # a '-' is no reading, not a zero
    assert "64 streams: host busy 0.9 of 2 cores" in done.stdout
    # the same window from the bench's JSON (measured_unix: the window its clients measured)
    (tmp_path / "bench.json").write_text(json.dumps({"benchmark": "serve", "results": {"trials": [
        {"streams": 64, "measured_unix": [t + 6, t + 23]}]}}))
    again = _run("summarise", "--host", str(tmp_path / "host.jsonl"), "--dmon", str(tmp_path / "dmon.txt"),
                 "--bench-json", str(tmp_path / "bench.json"))
    assert again.returncode == 0 and again.stdout == done.stdout


@pytest.mark.skipif(not __import__("os").path.exists("/proc/stat"), reason="needs Linux's /proc/stat")
def test_a_sample_holds_every_core_of_this_machine():
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import host_load
    finally:
        sys.path.pop(0)
    stat = host_load.read_stat()
    assert len(stat["cpu"]) == len(host_load.FIELDS) and any(name.startswith("cpu0") for name in stat)
