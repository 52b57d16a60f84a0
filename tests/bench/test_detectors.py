"""`facebridge bench detectors` (bridge/bench/detectors.py): run as a user would, without the real corpus, it
scores the sets made from the bundled sample, says that it skipped the real ones, and ends with its table."""
import json
import subprocess

from tests.helpers import facebridge_cmd, subprocess_env


def test_bench_detectors_shows_which_way_finds_small_and_close_faces(tmp_path):
    out = tmp_path / "detectors.json"
    proc = subprocess.run(facebridge_cmd("bench", "detectors", "--frames", "6", "--repeats", "2", "--data",
                                         str(tmp_path / "no-corpus"), "--json", str(out)),
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "real sets skipped" in proc.stderr
    ways = json.loads(out.read_text())["results"]["ways"]
    assert ways["short"]["real stills (labelled faces)"] is None
    side = {way: r["960x360 side by side"] for way, r in ways.items()}
    assert side["short"][0] <= 1 and side["full"] == side["auto wide"] == [12, 12]
    close = {way: r["640x480 close-up at 90%"] for way, r in ways.items()}
    assert close["full"][0] == 0 and close["short"] == close["auto wide"] == [2, 2]
    assert all(r["cpu_ms"]["960x360"] > 0 for r in ways.values())
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["set", "short", "full", "short", "tiles", "full", "tiles", "auto", "wide"]
    assert lines[-1] == f"wrote {out}"
