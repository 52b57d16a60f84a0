"""--faces N: subject names, slot choice, and two real faces tracked in-process with stable slots."""
import numpy as np
import pytest

from bridge.errors import FaceBridgeError
from bridge.multiface import MultiFacePipeline, box_iou, pick_slot, subject_names
from bridge.pipeline import PipelineOptions
from bridge.runtime.faces import vmc_targets
from tests.helpers import two_face_clip


def test_one_face_keeps_the_subject_as_given():
    assert subject_names("FaceBridge", 1) == ["FaceBridge"]
    assert subject_names("A,B", 1) == ["A,B"]  # unchanged single-face behaviour


def test_names_come_from_the_list_and_the_rest_are_numbered():
    assert subject_names("Alice,Bob", 2) == ["Alice", "Bob"]
    assert subject_names("FaceBridge", 3) == ["FaceBridge", "FaceBridge2", "FaceBridge3"]
    assert subject_names("Alice, Bob", 3) == ["Alice", "Bob", "Alice3"]


@pytest.mark.parametrize("spec, faces", [("A,B,C", 2), ("A,,B", 3), ("A,A", 2), ("A", 0)])
def test_bad_subject_lists_are_refused_with_a_fix(spec, faces):
    with pytest.raises(FaceBridgeError):
        subject_names(spec, faces)


def test_each_face_gets_its_own_vmc_target():
    assert vmc_targets("127.0.0.1:39539", ["only"]) == [(None, "127.0.0.1:39539")]
    assert vmc_targets("127.0.0.1:39539", ["A", "B"]) == [("A", "127.0.0.1:39539"), ("B", "127.0.0.1:39540")]
    assert vmc_targets("h:1,h:7", ["A", "B"]) == [("A", "h:1"), ("B", "h:7")]
    with pytest.raises(FaceBridgeError):
        vmc_targets("h:1,h:2,h:3", ["A", "B"])


def test_a_returning_face_takes_the_free_slot_it_was_last_seen_nearest():
    last = {0: np.array([100.0, 100.0]), 2: np.array([400.0, 100.0])}
    assert pick_slot([0, 2], last, np.array([390.0, 120.0])) == 2
    assert pick_slot([1, 3], last, np.array([390.0, 120.0])) == 1  # no free slot was seen: the lowest
    assert box_iou(np.array([0, 0, 10, 10.0]), np.array([5, 0, 15, 10.0])) == pytest.approx(1 / 3)


def test_two_faces_keep_their_slots_and_the_second_enters_and_leaves(tmp_path):
    import cv2

    from bridge.frame import Frame

    path = two_face_clip(tmp_path / "two.mp4", frames=60, second=(10, 45))
    pipeline = MultiFacePipeline(PipelineOptions(), ["Left", "Right"])
    cap = cv2.VideoCapture(str(path))
    seen = []
    for i in range(60):
        ok, image = cap.read()
        assert ok
        faces = pipeline.process(Frame(image=image, seq=i, t_capture=i / 30, t_capture_mono=i / 30, t_media=i / 30))
        seen.append({f.subject: f for f in faces})
    cap.release()
    assert all(s["Left"].face_found for s in seen)
    assert all(s["Left"].landmarks[:, 0].mean() < 240 for s in seen)  # the left face stays "Left"
    right = [i for i, s in enumerate(seen) if "Right" in s and s["Right"].face_found]
    assert right and 10 <= right[0] <= 10 + 10 and right[-1] == 44  # found within a detector scan of entering
    assert all(seen[i]["Right"].landmarks[:, 0].mean() > 240 for i in right)
    assert all("Right" not in seen[i] for i in range(right[0]))  # not sent before it was first seen
    gone = [seen[i]["Right"] for i in range(45, 60)]
    assert not any(f.face_found for f in gone) and all(f.confidence == 0.0 for f in gone)
    assert gone[-1].blendshapes.max() < gone[0].blendshapes.max()  # relaxing toward neutral
