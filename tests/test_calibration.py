"""Calibration profiles: round trip, applied to frames, refused without a face; every name gets its own safe
file; a damaged or hand-edited profile is refused on load with the fix, never half-applied."""
import json
import os

import numpy as np
import pytest

from bridge.calibration import CalibrationProfile, profile_file_name
from bridge.errors import FaceBridgeError
from bridge.frame import ARKIT_INDEX
from tests.helpers import face_frame


def test_calibration_profile_round_trip_and_apply(tmp_path):
    frames = [face_frame(i) for i in range(20)]
    profile = CalibrationProfile.from_frames("Ada Lovelace", frames, identity=np.arange(4.0))
    path = profile.save(tmp_path)
    assert path.name.startswith("Ada_Lovelace-") and path.name == profile_file_name("Ada Lovelace")
    loaded = CalibrationProfile.load("Ada Lovelace", tmp_path)
    assert loaded.identity == [0.0, 1.0, 2.0, 3.0] and loaded.frames == 20
    live = face_frame(99, smile=0.55)
    loaded.apply(live)
    assert live.blendshapes[ARKIT_INDEX["mouthSmileLeft"]] == pytest.approx(0.5, abs=1e-5)
    assert live.blendshapes[ARKIT_INDEX["jawOpen"]] == pytest.approx(0.0)
    assert np.allclose(live.head_rotation, 0.0)


def test_calibration_needs_a_face(tmp_path):
    with pytest.raises(FaceBridgeError, match="face the camera"):
        CalibrationProfile.from_frames("x", [face_frame(i, found=False) for i in range(20)])
    (tmp_path / profile_file_name("broken")).write_text("{not json")
    with pytest.raises(FaceBridgeError, match="calibrate --subject broken"):
        CalibrationProfile.load("broken", tmp_path)


def test_non_latin_empty_and_similar_names_never_share_a_profile(tmp_path):
    names = ["アバ", "小明", "", "Ada Lovelace", "Ada_Lovelace", "ada lovelace", "x" * 300, "a/../../etc", "-"]
    files = {profile_file_name(n) for n in names}
    assert len(files) == len(names)  # distinct
    for name in files:  # safe: short, one path component, plain ASCII
        assert len(name) <= 64 and "/" not in name and name.isascii() and not name.startswith(".")
    for i, name in enumerate(names):
        profile = CalibrationProfile.from_frames(name, [face_frame(k, smile=0.1 * i / 10) for k in range(10)])
        profile.save(tmp_path)
    for i, name in enumerate(names):  # each subject gets its own neutral back
        smile = CalibrationProfile.load(name, tmp_path).neutral_blendshapes[ARKIT_INDEX["mouthSmileLeft"]]
        assert smile == pytest.approx(0.1 * i / 10, abs=1e-6), name
    assert len(os.listdir(tmp_path)) == len(names)


def test_a_legacy_profile_is_read_only_by_the_subject_it_belongs_to(tmp_path):
    legacy = CalibrationProfile.from_frames("アバ", [face_frame(k) for k in range(10)])
    (tmp_path / "subject.json").write_text(json.dumps(legacy.__dict__))  # the old name every non-Latin name shared
    assert CalibrationProfile.load("アバ", tmp_path).subject == "アバ"
    assert CalibrationProfile.load("小明", tmp_path) is None  # not another subject's face


def _profile_dict():
    return CalibrationProfile.from_frames("Ann", [face_frame(k) for k in range(10)]).__dict__


@pytest.mark.parametrize("edit, why", [
    (lambda d: [1, 2, 3], "JSON list"),
    (lambda d: None, "JSON NoneType"),
    (lambda d: 7, "JSON int"),
    (lambda d: {**d, "neutral_blendshapes": "0.1"}, "neutral_blendshapes"),
    (lambda d: {**d, "neutral_blendshapes": [0.1] * 51}, "neutral_blendshapes"),
    (lambda d: {**d, "neutral_blendshapes": [float("nan")] * 52}, "NaN"),
    (lambda d: {**d, "neutral_head_rotation": [1, "2", 3]}, "neutral_head_rotation"),
    (lambda d: {**d, "neutral_eyes": [[0, 0]]}, "neutral_eyes"),
    (lambda d: {**d, "neutral_eyes": [[0, float("inf")], [0, 0]]}, "NaN or infinity"),
    (lambda d: {**d, "identity": {"a": 1}}, "identity"),
    (lambda d: {**d, "frames": -3}, "frames"),
    (lambda d: {**d, "subject": 5}, "subject"),
])
def test_a_hand_edited_profile_is_refused_on_load_with_the_fix(tmp_path, edit, why):
    path = tmp_path / profile_file_name("Ann")
    path.write_text(json.dumps(edit(_profile_dict())))  # json writes NaN/Infinity tokens as a hand edit would
    with pytest.raises(FaceBridgeError) as err:
        CalibrationProfile.load("Ann", tmp_path)
    message = str(err.value)
    assert why in message and "--no-calibration" in message and "\n" not in message


def test_a_profile_never_stores_nan(tmp_path):
    frames = [face_frame(k) for k in range(10)]
    for f in frames:
        f.head_rotation = np.array([np.nan, 0, 0], np.float32)
    with pytest.raises(FaceBridgeError, match="NaN"):
        CalibrationProfile.from_frames("Ann", frames)


def test_tests_never_touch_the_users_own_profiles():
    from bridge.calibration import profiles_dir

    real = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "facebridge")
    assert not str(profiles_dir()).startswith(real)  # tests/conftest.py points FACEBRIDGE_HOME elsewhere


def test_calibrate_without_a_camera_refuses_instead_of_using_the_sample(isolated_home):
    import subprocess

    from bridge.sources.camera import camera_available
    from tests.helpers import facebridge_cmd, subprocess_env

    if camera_available(0):
        pytest.skip("this machine has a camera; calibrate would use it")
    proc = subprocess.run(facebridge_cmd("calibrate", "--subject", "Ann"), env=subprocess_env(isolated_home),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no camera found to calibrate from" in proc.stderr, proc.stderr
    assert "--source sample" in proc.stderr and not (isolated_home / "profiles").exists()
