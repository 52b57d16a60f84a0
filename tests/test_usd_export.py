"""facebridge export-usd: takes written by the real TakeRecorder, exported, and read back with usd-core."""
from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

pxr = pytest.importorskip("pxr", reason="usd-core not installed (pip install 'facebridge[usd]')")
from pxr import Gf, Usd, UsdSkel  # noqa: E402

from bridge.frame import ARKIT_NAMES, EMOTION_NAMES, FaceFrame  # noqa: E402
from bridge.sinks.recorder import TakeRecorder  # noqa: E402
from bridge.usd_export import UsdExportError, export_take  # noqa: E402
from tests.helpers import facebridge_cmd, subprocess_env  # noqa: E402

RATE = 30.0


def record_take(directory, count=40, subjects=("Anna",), jitter=True):
    """Frames with distinct weights and slightly uneven capture times, through the real recorder."""
    rng = np.random.default_rng(5)
    recorder = TakeRecorder(directory)
    t0 = 1_790_000_000.25
    frames = []
    for i in range(count):
        for subject in subjects:
            t = t0 + i / RATE + (rng.uniform(-0.004, 0.004) if jitter and i else 0.0)
            f = FaceFrame(seq=i, t_capture=t, t_capture_mono=100.0 + i / RATE, subject=subject, face_found=i != 3,
                          frame_rate=RATE, confidence=float(rng.uniform(0.5, 1)))
            f.blendshapes = rng.uniform(0, 1, 52).astype(np.float32)
            f.head_rotation = np.array([20.0 * np.sin(i / 5), 10.0 * np.cos(i / 7), 3.0], dtype=np.float32)
            f.eye_left = np.array([5.0, -2.0], dtype=np.float32)
            f.emotion = rng.dirichlet(np.ones(7)).astype(np.float32)
            recorder.send(f)
            frames.append(f)
    recorder.close()
    return frames


def read_back(path):
    stage = Usd.Stage.Open(str(path))
    assert stage, f"usd-core cannot open {path}"
    return stage


def test_export_reads_back_same_weights_and_frame_times(tmp_path):
    frames = record_take(tmp_path / "take")
    out = tmp_path / "out" / "take.usda"
    summary = export_take(tmp_path / "take", out)
    assert summary.frames == len(frames) and summary.skipped == 0
    stage = read_back(out)
    assert stage.GetTimeCodesPerSecond() == RATE and stage.GetFramesPerSecond() == RATE
    start = stage.GetRootLayer().customLayerData["facebridge:startTimeUnix"]
    assert start == pytest.approx(frames[0].t_capture, abs=1e-6)
    anim = UsdSkel.Animation(stage.GetPrimAtPath("/Take/Anna/Skeleton/Animation"))
    assert list(anim.GetBlendShapesAttr().Get()) == list(ARKIT_NAMES)
    weights = anim.GetBlendShapeWeightsAttr()
    times = weights.GetTimeSamples()
    assert len(times) == len(frames)
    capture = anim.GetPrim().GetAttribute("facebridge:captureTime")
    for code, frame in zip(times, frames):
        # Frame time: the sample's time code is its capture time on the take's clock.
        assert start + code / RATE == pytest.approx(frame.t_capture, abs=1e-6)
        assert capture.Get(code) == pytest.approx(frame.t_capture, abs=1e-6)
        got = np.array(weights.Get(code), dtype=np.float64)
        np.testing.assert_allclose(got, frame.blendshapes.astype(np.float64), atol=1e-6)
    emotions = anim.GetPrim().GetAttribute("facebridge:emotions")
    np.testing.assert_allclose(emotions.Get(times[5]), frames[5].emotion, atol=1e-6)
    assert list(anim.GetPrim().GetAttribute("facebridge:emotionNames").Get()) == list(EMOTION_NAMES)
    assert anim.GetPrim().GetAttribute("facebridge:faceFound").Get(times[3]) is False


def test_skeleton_binding_and_head_rotation_as_usdskel_computes_them(tmp_path):
    frames = record_take(tmp_path / "take", count=12)
    out = tmp_path / "take.usdc"  # binary crate too
    export_take(tmp_path / "take", out)
    stage = read_back(out)
    cache = UsdSkel.Cache()
    root = UsdSkel.Root(stage.GetPrimAtPath("/Take/Anna"))
    cache.Populate(root, Usd.TraverseInstanceProxies())
    skel_query = cache.GetSkelQuery(UsdSkel.Skeleton(stage.GetPrimAtPath("/Take/Anna/Skeleton")))
    anim_query = skel_query.GetAnimQuery()
    assert anim_query, "the Skeleton's skel:animationSource resolves to the SkelAnimation"
    times = anim_query.GetBlendShapeWeightTimeSamples()
    np.testing.assert_allclose(np.array(anim_query.ComputeBlendShapeWeights(times[7])), frames[7].blendshapes,
                               atol=1e-6)
    # The Head joint turns the face's forward (+Z) the way the FaceBridge angles say.
    xforms = anim_query.ComputeJointLocalTransforms(times[7])
    head = Gf.Matrix4d(xforms[0])
    forward = head.TransformDir(Gf.Vec3d(0, 0, 1))
    yaw, pitch = float(frames[7].head_rotation[0]), float(frames[7].head_rotation[1])
    assert np.degrees(np.arctan2(forward[0], forward[2])) == pytest.approx(yaw, abs=0.05)
    assert np.degrees(np.arcsin(forward[1])) == pytest.approx(pitch, abs=0.05)
    # Interpolation between samples works like any UsdSkel animation (what Omniverse playback does).
    mid = (times[1] + times[2]) / 2
    expected = (np.array(anim_query.ComputeBlendShapeWeights(times[1])) +
                np.array(anim_query.ComputeBlendShapeWeights(times[2]))) / 2
    np.testing.assert_allclose(np.array(anim_query.ComputeBlendShapeWeights(mid)), expected, atol=1e-5)


def test_several_subjects_get_their_own_rigs(tmp_path):
    record_take(tmp_path / "take", count=10, subjects=("Anna", "Ben 2"))
    summary = export_take(tmp_path / "take", tmp_path / "two.usda")
    assert summary.subjects == ["Anna", "Ben 2"]
    stage = read_back(tmp_path / "two.usda")
    for path in ("/Take/Anna/Skeleton/Animation", "/Take/Ben_2/Skeleton/Animation"):
        assert len(UsdSkel.Animation(stage.GetPrimAtPath(path)).GetBlendShapeWeightsAttr().GetTimeSamples()) == 10


def test_bad_takes_and_outputs_are_clear_errors(tmp_path):
    with pytest.raises(Exception, match="does not exist"):
        export_take(tmp_path / "missing", tmp_path / "x.usda")
    record_take(tmp_path / "take", count=3)
    with pytest.raises(UsdExportError, match=r"\.usda"):
        export_take(tmp_path / "take", tmp_path / "x.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "frames.jsonl").write_text("")
    with pytest.raises(UsdExportError, match="no readable frames"):
        export_take(empty, tmp_path / "x.usda")
    assert not (tmp_path / "x.usda").exists()
    # A cut-off last line (recorder killed) is skipped, the rest exported.
    with open(tmp_path / "take" / "frames.jsonl", "a") as f:
        f.write('{"seq": 99, "t_capt')
    summary = export_take(tmp_path / "take", tmp_path / "cut.usda")
    assert summary.frames == 3 and summary.skipped == 1


def test_cli_exports_a_take_recorded_by_facebridge_run(tmp_path):
    """The sample clip through the real pipeline, recorded, exported by the CLI, read back."""
    take, out = tmp_path / "take", tmp_path / "sample.usda"
    env = subprocess_env(tmp_path / "home")
    env["OMP_NUM_THREADS"] = "1"
    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "20", "--fast", "--record",
                                        str(take), "--llf", "off", "--vmc", "off", "--quiet"),
                         capture_output=True, text=True, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    export = subprocess.run(facebridge_cmd("export-usd", str(take), str(out)), capture_output=True, text=True,
                            env=env, timeout=120)
    assert export.returncode == 0, export.stderr[-3000:]
    assert "20 frames" in export.stdout
    recorded = [json.loads(line) for line in (take / "frames.jsonl").read_text().splitlines()]
    stage = read_back(out)
    subject = recorded[0]["subject"]
    anim = UsdSkel.Animation(stage.GetPrimAtPath(f"/Take/{subject}/Skeleton/Animation"))
    weights = anim.GetBlendShapeWeightsAttr()
    times = weights.GetTimeSamples()
    assert len(times) == len(recorded) == 20
    start = stage.GetRootLayer().customLayerData["facebridge:startTimeUnix"]
    rate = stage.GetTimeCodesPerSecond()
    for code, frame in zip(times, recorded):
        np.testing.assert_allclose(weights.Get(code), frame["blendshapes"], atol=1e-6)
        assert start + code / rate == pytest.approx(frame["t_capture"], abs=1e-6)
    failing = subprocess.run(facebridge_cmd("export-usd", str(tmp_path / "nope"), str(tmp_path / "x.usda")),
                             capture_output=True,
                             text=True, env=env, timeout=60)
    assert failing.returncode == 1 and failing.stderr.count("\n") == 1 and "nope" in failing.stderr


def test_a_take_recorded_at_a_steady_rate_has_whole_frame_time_codes(tmp_path):
    """Float rounding of Unix seconds made them 0.9999990463..., 299.0000009536743 (issue 21 item 9)."""
    recorder = TakeRecorder(tmp_path / "take")
    t0 = 1_796_125_396.2168548  # a real start time: its float64 spacing is 2.4e-7 s
    for i in range(300):
        f = FaceFrame(seq=i, t_capture=t0 + i / RATE, t_capture_mono=float(i), subject="Anna", face_found=True,
                      frame_rate=RATE)
        recorder.send(f)
    recorder.close()
    export_take(tmp_path / "take", tmp_path / "take.usda")
    stage = read_back(tmp_path / "take.usda")
    anim = UsdSkel.Animation(stage.GetPrimAtPath("/Take/Anna/Skeleton/Animation"))
    codes = anim.GetBlendShapeWeightsAttr().GetTimeSamples()
    assert codes == [float(i) for i in range(300)] and stage.GetEndTimeCode() == 299.0
def test_export_into_missing_folders_creates_them_and_an_unwritable_place_is_one_line(tmp_path):
    take = tmp_path / "take"
    record_take(take, count=5)
    made = export_take(take, tmp_path / "new" / "deeper" / "take.usda")
    assert made.path.exists() and made.frames == 5
    (tmp_path / "a_file").write_text("in the way")
    proc = subprocess.run(facebridge_cmd("export-usd", str(take), str(tmp_path / "a_file" / "take.usda")),
                          env=subprocess_env(), capture_output=True, text=True, timeout=120)
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert proc.returncode == 2 and "Traceback" not in proc.stderr  # refused as the command line is read
    assert len(errors) == 1 and "cannot write" in errors[0] and "a_file is a file" in errors[0]
