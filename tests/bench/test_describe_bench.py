"""`facebridge bench describe`: a short run writes every stream count and the one-stream comparison; what it
measures is read from the JSON of a real run (docs/PERFORMANCE.md), never asserted here."""
from __future__ import annotations

import json
import subprocess

from tests.helpers import facebridge_cmd, subprocess_env


def test_bench_describe_writes_each_count(tmp_path):
    out = tmp_path / "describe.json"
    run = subprocess.run(facebridge_cmd("bench", "describe", "--streams", "1,3", "--frames", "12",
                                        "--single-streams", "2", "--idle-ms", "0,2", "--json", str(out)),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=600)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    results = json.loads(out.read_text())["results"]
    assert [(t["streams"], t["idle_ms"]) for t in results["trials"]] == [(1, 0), (1, 2), (3, 0), (3, 2)]
    assert results["single_stream"]["streams"] == 2
    for trial in results["trials"]:
        assert trial["frames"] >= 12 and trial["host_us_per_frame"] > 0 and trial["frames_per_s_per_core"] > 0
    assert "streams  host us/frame" in run.stdout and "1 streams a pass, 2 ms idle before each" in run.stderr


def test_bench_describe_refuses_a_bad_count(tmp_path):
    run = subprocess.run(facebridge_cmd("bench", "describe", "--streams", "4,0"), capture_output=True, text=True,
                         env=subprocess_env(tmp_path / "home"), timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr and "0 is not a positive number" in run.stderr


def test_bench_describe_refuses_an_idle_time_that_is_not_milliseconds(tmp_path):
    for bad, said in (("5,soon", "'soon' is not a number of milliseconds"), ("-3", "-3 ms is outside 0..10000")):
        run = subprocess.run(facebridge_cmd("bench", "describe", "--idle-ms", bad), capture_output=True, text=True,
                             env=subprocess_env(tmp_path / "home"), timeout=60)
        assert run.returncode == 2 and "Traceback" not in run.stderr and said in run.stderr, run.stderr
