"""The side-by-side benchmark against MediaPipe: its venv is found or named, and both sides track the same frames."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.bench.side_by_side import VENV, _by_kind, frame_kind, mediapipe_python
from bridge.errors import FaceBridgeError

ROOT = Path(__file__).resolve().parents[2]


def test_a_missing_mediapipe_venv_is_named_with_the_command_that_makes_it(tmp_path):
    with pytest.raises(FaceBridgeError) as e:
        mediapipe_python(str(tmp_path / "nope" / "python"))
    assert "make mediapipe-venv" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.skipif(not (ROOT / VENV / "bin" / "python").is_file(), reason="no .venv-mediapipe (make mediapipe-venv)")
def test_both_sides_track_the_same_frames_taking_turns(tmp_path, monkeypatch):
    from bridge.cli import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "side.json"
    assert main(["bench", "pipeline", "--frames", "60", "--configs", "", "--against-mediapipe",
                 "--backend", "onnxruntime", "--json", str(out)]) == 0
    side = json.loads(out.read_text())["results"]["side_by_side"]
    assert side["mediapipe"] == "0.10.21" and side["chunk_frames"] == 30
    assert side["facebridge"]["frames"] == side["mediapipe_refine"]["frames"] == 60
    assert side["facebridge"]["face_found_ratio"] == 1.0 and side["mediapipe_refine"]["face_found_ratio"] == 1.0
    assert side["backends"]["landmarks"] == "onnxruntime f32"
    for who in ("facebridge", "mediapipe_refine"):  # the first frame of each turn apart from the rest
        cpu = side[who]["cpu"]
        assert cpu["after_switch"]["frames"] == 2 and cpu["steady"]["frames"] == 58
        assert len(cpu["per_frame_ms"]) == 60 and cpu["after_switch"]["median_ms"] == pytest.approx(
            (cpu["per_frame_ms"][0] + cpu["per_frame_ms"][30]) / 2, abs=1e-3)
    ratio = side["ratio_vs_refine"]
    assert ratio["per_chunk_min"] <= ratio["per_chunk_median"] <= ratio["per_chunk_max"]
    assert side["pace_fps"] == 0 and side["without"] == []
    # the emotion model of the 1st, 5th, ... tracked frame runs after its frame (run_deferred), in no frame's time
    kinds = side["facebridge"]["cpu"]["kinds"]
    assert len(kinds) == 60 and not any(k.startswith("emotion") for k in kinds)
    by_kind = side["facebridge"]["cpu"]["by_kind"]
    assert sum(v["frames"] for v in by_kind.values()) == 60
    deferred = side["facebridge"]["deferred"]
    assert side["deferred"] and deferred["calls_that_ran"] >= 15 and deferred["cpu_mean_per_frame_ms"] > 0
    assert side["facebridge"]["cpu_with_deferred"]["mean_ms"] > side["facebridge"]["cpu"]["mean_ms"]


@pytest.mark.skipif(not (ROOT / VENV / "bin" / "python").is_file(), reason="no .venv-mediapipe (make mediapipe-venv)")
def test_without_the_periodic_work_no_frame_carries_it(tmp_path, monkeypatch):
    from bridge.cli import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "without.json"
    assert main(["bench", "pipeline", "--frames", "90", "--configs", "", "--against-mediapipe", "--without",
                 "emotion,identity", "--inline-deferred", "--json", str(out)]) == 0
    side = json.loads(out.read_text())["results"]["side_by_side"]
    assert side["without"] == ["emotion", "identity"] and not side["deferred"]
    # a face's first tracked frame still classifies its emotion: inline (the A/B), inside the frame after it
    kinds = side["facebridge"]["cpu"]["kinds"]
    assert kinds[1] == "emotion" and set(kinds[:1] + kinds[2:]) == {"plain"}
    assert side["facebridge"]["deferred"]["calls_that_ran"] == 0


def test_each_frame_is_marked_by_the_periodic_work_it_carried():
    assert [frame_kind(e, i) for e, i in ((False, False), (True, False), (False, True), (True, True))] == [
        "plain", "emotion", "identity", "emotion+identity"]
    cpu = [1.0] * 97 + [5.0, 6.0, 2.0]
    kinds = ["plain"] * 97 + ["emotion", "identity", "emotion"]
    by_kind = _by_kind(cpu, kinds)
    assert by_kind["plain"] == {"frames": 97, "median_ms": 1.0, "of_slowest_1pct": 0}
    assert by_kind["emotion"]["frames"] == 2 and by_kind["identity"]["of_slowest_1pct"] == 1


@pytest.mark.skipif(not (ROOT / VENV / "bin" / "python").is_file(), reason="no .venv-mediapipe (make mediapipe-venv)")
def test_paced_sides_take_each_frame_on_its_tick(tmp_path, monkeypatch):
    import time

    from bridge.cli import main

    monkeypatch.chdir(ROOT)
    out = tmp_path / "paced.json"
    t0 = time.monotonic()
    assert main(["bench", "pipeline", "--frames", "30", "--configs", "", "--against-mediapipe", "--pace", "100",
                 "--json", str(out)]) == 0
    side = json.loads(out.read_text())["results"]["side_by_side"]
    assert side["pace_fps"] == 100 and side["facebridge"]["frames"] == side["mediapipe_refine"]["frames"] == 30
    assert time.monotonic() - t0 >= 2 * 30 / 100  # both sides waited for their ticks: 30 frames at 100 fps each


def test_a_pace_that_is_no_frame_rate_is_refused():
    from bridge.cli import main

    with pytest.raises(SystemExit):
        main(["bench", "pipeline", "--against-mediapipe", "--pace", "-5"])
