"""The face search (bridge/stages/search.py) with the shipped BlazeFace models on the bundled sample: which detector
finds what, where the boxes land on a letterboxed wide frame, and that two faces side by side stay two."""
import cv2
import numpy as np
import pytest

from bridge.errors import FaceBridgeError
from bridge.stages.search import FaceSearch
from tests.helpers import ROOT


@pytest.fixture(scope="module")
def search():
    return FaceSearch("auto", backend="onnxruntime")


@pytest.fixture(scope="module")
def sample():
    cap = cv2.VideoCapture(str(ROOT / "bridge" / "data" / "sample.mp4"))
    ok, image = cap.read()
    cap.release()
    assert ok
    return image


def test_two_faces_side_by_side_on_a_wide_frame_are_found_only_by_the_wide_search(search, sample):
    wide = np.hstack([sample, cv2.flip(sample, 1)])  # 960x360, faces about a tenth of its width
    assert search.find(wide, max_faces=2) == []  # the short range alone sees each face at about 16 px
    faces = search.find(wide, max_faces=2, wide=True)
    assert len(faces) == 2  # non-max suppression keeps the two apart
    alone = search.find(sample)[0].box  # the same face on its own 480x360 frame, found by the short range
    left, right = sorted(faces, key=lambda d: d.box[0])
    w = sample.shape[1]
    mirrored = np.array([2 * w - alone[2], alone[1], 2 * w - alone[0], alone[3]])
    # letterboxing keeps the aspect ratio: each box lies where the face is (the two detectors' boxes of one face
    # differ by a few pixels; a squashed or misplaced frame would move them by tens)
    near = 0.15 * (alone[2] - alone[0])
    assert np.abs(left.box - alone).max() < near, (left.box, alone)
    assert np.abs(right.box - mirrored).max() < near, (right.box, mirrored)


def test_a_face_filling_the_frame_is_found_by_the_wide_search_through_the_short_range(search, sample):
    box = search.find(sample)[0].box
    k = 0.9 * 640 / (box[2] - box[0])  # the face nine tenths of a 640x480 frame's width
    cx, cy = (box[0] + box[2]) / 2 * k, (box[1] + box[3]) / 2 * k
    big = cv2.resize(sample, None, fx=k, fy=k)
    x0, y0 = int(cx - 320), int(max(0, cy - 240))
    close = np.ascontiguousarray(big[y0:y0 + 480, x0:x0 + 640])
    assert search.far.detect(close) == []  # the full range misses a face this close
    assert len(search.find(close, wide=True)) == 1


def test_a_detector_choice_names_only_the_detectors_it_runs():
    assert list(FaceSearch("short", backend="onnxruntime").detectors()) == ["face_detection_short_range"]
    assert list(FaceSearch("full", backend="onnxruntime").detectors()) == ["face_detection_full_range"]
    with pytest.raises(FaceBridgeError, match="--detector wide is not a detector choice"):
        FaceSearch("wide")
