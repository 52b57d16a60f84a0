"""`facebridge models verify` checks every shipped model: the face zoo and the lip-sync, voice-activity and
expression models beside the code that uses them, so a corrupt lipsync.onnx is caught here, not by `run`."""
from __future__ import annotations

import shutil

import pytest

from bridge.engines import shipped
from bridge.models.check import find_checks, shipped_checks
from tests.helpers import ROOT

ALL = {"face_detection_short_range", "face_detection_full_range", "face_landmark", "iris_landmark", "emotion",
       "lipsync", "silero_vad", "regressor", "face_landmark_with_attention"}


def test_every_shipped_onnx_file_is_checked():
    checks = shipped_checks()
    assert {c.name for c in checks} == ALL
    onnx = {c.path for c in checks if c.path.suffix == ".onnx"}
    assert onnx == set((ROOT / "bridge").rglob("*.onnx"))  # nothing on disk is left out
    assert onnx == {m.path for m in shipped.shipped_models()}
    assert {c.name for c in checks if c.path.suffix == ".tflite"} == {"face_landmark_with_attention"}
    assert all(c.sha256 for c in checks)


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """The bridge's models (every folder holding an ONNX file, with its manifests) copied, and both model readers
    pointed at the copy: the real files are never touched."""
    import bridge.models

    for folder in {m.path.parent for m in shipped.shipped_models()}:
        target = tmp_path / folder.name
        target.mkdir()
        for f in list(folder.glob("*.onnx")) + list(folder.glob("*.json")) + list(folder.glob("*.tflite")):
            shutil.copyfile(f, target / f.name)
    import bridge.models.registry

    monkeypatch.setattr(bridge.models.registry, "PACKAGE_DIR", tmp_path)
    monkeypatch.setattr(bridge.models, "MODELS_DIR", tmp_path / "models")
    return tmp_path


@pytest.mark.parametrize("name, folder", [("lipsync", "audio"), ("regressor", "expression")])
def test_a_corrupt_model_beside_the_zoo_fails_verify_in_one_line(name, folder, package_copy, capsys):
    from bridge.cli import main

    bad = package_copy / folder / f"{name}.onnx"
    bad.write_bytes(bad.read_bytes()[:-64])  # a truncated copy
    assert main(["models", "verify"]) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("FAIL")]
    assert len(errors) == 1 and errors[0].startswith(f"FAIL {name}:") and "corrupt" in errors[0]
    assert str(bad) in errors[0] and captured.out.count("ok ") == len(ALL) - 1
    assert f"1 of {len(ALL)} models failed verification" in captured.err


def test_verify_by_name_covers_the_audio_models_and_refuses_unknown_ones(capsys):
    from bridge.cli import main
    from bridge.errors import ModelError

    assert main(["models", "verify", "lipsync", "silero_vad"]) == 0
    assert "all 2 models verified" in capsys.readouterr().out
    with pytest.raises(ModelError, match="choose one of: .*lipsync"):
        find_checks(["lipsink"])
