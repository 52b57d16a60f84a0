"""The side-by-side benchmark against MediaPipe: its venv is found or named, and both sides track the same frames."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bridge.bench.side_by_side import VENV, mediapipe_python
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
    ratio = side["ratio_vs_refine"]
    assert ratio["per_chunk_min"] <= ratio["per_chunk_median"] <= ratio["per_chunk_max"]
