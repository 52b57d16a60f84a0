"""Small building blocks: latest-wins queue, One-Euro filter, calibration profiles, atomic writes, sources."""
import json
import threading

import numpy as np
import pytest

from bridge.calibration import CalibrationProfile
from bridge.errors import FaceBridgeError, SourceError
from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES, FaceFrame
from bridge.fsutil import atomic_write_json
from bridge.runtime.queues import Closed, LatestQueue
from bridge.stages.filters import OneEuroFilter


def test_latest_queue_drops_oldest_and_counts():
    q = LatestQueue(2)
    for i in range(5):
        q.put(i)
    assert q.dropped == 3
    assert q.get() == 3 and q.get() == 4
    assert q.get(timeout=0.01) is None
    q.close()
    with pytest.raises(Closed):
        q.get()


def test_latest_queue_blocking_put_keeps_every_item():
    q = LatestQueue(2)
    got = []

    def consume():
        while True:
            try:
                item = q.get(timeout=1)
            except Closed:
                return
            if item is not None:
                got.append(item)

    t = threading.Thread(target=consume)
    t.start()
    for i in range(50):
        q.put(i, block=True)
    q.close()
    t.join(5)
    assert got == list(range(50)) and q.dropped == 0


def test_latest_queue_wakes_consumer():
    q = LatestQueue(2)
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=5)))
    t.start()
    q.put("frame")
    t.join(2)
    assert got == ["frame"]


def test_one_euro_smooths_jitter_and_follows_motion():
    rng = np.random.default_rng(0)
    f = OneEuroFilter(min_cutoff=1.0, beta=0.5)
    still = [f(np.array([0.5]) + rng.normal(0, 0.02, 1), i / 30)[0] for i in range(60)]
    assert np.std(still[30:]) < 0.01  # jitter of 0.02 is cut to well under half
    f.reset()
    ramp = [f(np.array([i / 30.0]), i / 30)[0] for i in range(60)]
    assert abs(ramp[-1] - 59 / 30) < 0.15  # a steady motion is followed closely


def _frame(seq, smile=0.1, found=True):
    fr = FaceFrame(seq=seq, t_capture=float(seq), t_capture_mono=float(seq), face_found=found)
    fr.blendshapes = np.full(NUM_BLENDSHAPES, 0.1, np.float32)
    fr.blendshapes[ARKIT_INDEX["mouthSmileLeft"]] = smile
    fr.head_rotation = np.array([5.0, -3.0, 1.0], np.float32)
    return fr


def test_calibration_profile_round_trip_and_apply(tmp_path):
    frames = [_frame(i) for i in range(20)]
    profile = CalibrationProfile.from_frames("Ada Lovelace", frames, identity=np.arange(4.0))
    path = profile.save(tmp_path)
    assert path.name == "Ada_Lovelace.json"
    loaded = CalibrationProfile.load("Ada Lovelace", tmp_path)
    assert loaded.identity == [0.0, 1.0, 2.0, 3.0] and loaded.frames == 20
    live = _frame(99, smile=0.55)
    loaded.apply(live)
    assert live.blendshapes[ARKIT_INDEX["mouthSmileLeft"]] == pytest.approx(0.5, abs=1e-5)
    assert live.blendshapes[ARKIT_INDEX["jawOpen"]] == pytest.approx(0.0)
    assert np.allclose(live.head_rotation, 0.0)


def test_calibration_needs_a_face(tmp_path):
    with pytest.raises(FaceBridgeError, match="face the camera"):
        CalibrationProfile.from_frames("x", [_frame(i, found=False) for i in range(20)])
    (tmp_path / "broken.json").write_text("{not json")
    with pytest.raises(FaceBridgeError, match="calibrate --subject broken"):
        CalibrationProfile.load("broken", tmp_path)


def test_atomic_write_leaves_no_temporary_files(tmp_path):
    target = tmp_path / "sub" / "results.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["results.json"]


def test_face_frame_dict_round_trip():
    fr = _frame(3, smile=0.7)
    fr.visemes = np.linspace(0, 1, 15, dtype=np.float32)
    back = FaceFrame.from_dict(json.loads(json.dumps(fr.to_dict())))
    assert np.allclose(back.blendshapes, fr.blendshapes, atol=1e-6)
    assert np.allclose(back.visemes, fr.visemes, atol=1e-6)
    assert back.seq == 3 and back.timecode() == fr.timecode()


def test_image_folder_skips_unreadable_images(tmp_path):
    import cv2

    from bridge.sources import open_source

    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "b.png").write_bytes(b"garbage")
    cv2.imwrite(str(tmp_path / "c.png"), np.ones((8, 8, 3), np.uint8))
    src = open_source(str(tmp_path), realtime=False)
    got = [src.read(), src.read(), src.read()]
    assert got[0] is not None and got[1] is not None and got[2] is None
    assert src.skipped == 1 and [g.seq for g in got[:2]] == [0, 1]
    with pytest.raises(SourceError, match="not a number"):
        open_source("camera:x")
