"""`facebridge bench faces`: the hand labels and how the Done-when figures are scored (bridge/bench/faces.py)."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.bench.faces import LABELS, collect, load_labels, score
from bridge.frame import ARKIT_NAMES
from tests.helpers import real_corpus, tool_module

CATEGORIES = {"smile", "neutral", "closed_eyes", "smile_closed_eyes", "surprise", "other", "unsure"}


def test_every_labelled_file_is_one_the_fetch_tool_checks_by_sha256():
    files = set(tool_module("fetch_real_data").FACE_FILES)
    labels = load_labels()
    named = {v["file"] for v in labels["videos"]} | {s["file"] for s in labels["stills"]}
    assert named <= files, named - files


def test_labels_use_known_categories_shapes_and_non_overlapping_frames():
    labels = load_labels(LABELS)
    for video in labels["videos"]:
        last = -1
        for seg in video["segments"]:
            a, b = seg["frames"]
            assert last < a <= b and seg["category"] in CATEGORIES
            assert set(seg["shapes"]) <= set(ARKIT_NAMES) and all(0 <= v <= 1 for v in seg["shapes"].values())
            last = b
    for still in labels["stills"]:
        x0, y0, x1, y1 = still["box"]
        assert still["category"] in CATEGORIES and x1 > x0 and y1 > y0


def labelled_originals(labels: dict) -> dict[str, int]:
    """Frames or faces per Done-when set in the labels file, copies left out (what bench faces will score)."""
    n = dict.fromkeys(("smile", "neutral", "closed_eyes"), 0)
    for video in labels["videos"]:
        if video.get("copy_of"):
            continue
        for seg in video["segments"]:
            size = seg["frames"][1] - seg["frames"][0] + 1
            for name in n:
                if seg["category"] == name or (seg["category"] == "smile_closed_eyes" and name != "neutral"):
                    n[name] += size
    for still in labels["stills"]:
        if still["category"] in n:
            n[still["category"]] += 1
    return n


def test_the_labels_hold_at_least_50_original_frames_of_each_done_when_set_and_name_their_people():
    assert min(labelled_originals(load_labels()).values()) >= 50
    not_sad_closed = sum(s["frames"][1] - s["frames"][0] + 1 for v in load_labels()["videos"] if not v.get("copy_of")
                         for s in v["segments"] if s["category"] in ("closed_eyes", "smile_closed_eyes")
                         and s["emotion"] not in (None, "sad"))
    assert not_sad_closed >= 50
    assert all("person" in v or v["file"].startswith("pyfeat/") for v in load_labels()["videos"])


def test_people_are_counted_once_per_set_however_many_frames_they_give():
    recs = [dict(record("neutral", 0.0, 0.0, emotion="neutral"), person=p) for p in ("x", "x", "y")]
    recs.append(record("neutral", 0.0, 0.0, emotion="neutral", source="z"))  # no person: its source stands in
    assert score(recs)["counts"]["neutral"]["people"] == 3


def record(category, smile_l, smile_r, blink=0.0, emotion="happy", predicted="happy", copy=False, source="a"):
    weights = dict.fromkeys(ARKIT_NAMES, 0.0)
    weights.update(mouthSmileLeft=smile_l, mouthSmileRight=smile_r, eyeBlinkLeft=blink, eyeBlinkRight=blink)
    return {"source": source, "index": 0, "category": category, "emotion": emotion, "found": True, "copy": copy,
            "shapes": {"mouthSmileLeft": 0.8, "mouthSmileRight": 0.8}, "weights": weights,
            "predicted_emotion": predicted}


def test_smiles_are_detected_at_the_threshold_and_the_sides_compared():
    recs = [record("smile", 0.35, 0.3), record("smile", 0.2, 0.25), record("smile_closed_eyes", 0.5, 0.6, blink=0.9),
            record("neutral", 0.0, 0.01, emotion="neutral", predicted="neutral"),
            record("closed_eyes", 0.0, 0.0, blink=0.7, emotion="neutral", predicted="sad", copy=True)]
    r = score(recs)
    assert r["smile"]["detected_on_smiles"] == pytest.approx(2 / 3, abs=1e-3)
    assert r["smile"]["detected_on_neutral"] == 0.0 and r["smile"]["auc_smile_vs_neutral"] == 1.0
    assert r["smile"]["right_larger_share"] == pytest.approx(2 / 3, abs=1e-3)
    assert r["closed_eyes"]["detected"] == 1.0 and r["closed_eyes"]["read_sad_when_not_sad"] == 0.5
    assert r["counts"]["closed_eyes"] == {"items": 2, "of_which_copies": 1, "people": 1, "sources": ["a"]}
    assert r["per_shape_mae"]["mouthSmileLeft"]["items"] == 5
    assert r["emotion_confusion"]["table"]["neutral"] == {"neutral": 1, "sad": 1}


def test_a_real_smile_reads_as_a_smile_and_the_neutral_start_does_not():
    from bridge.pipeline import FacePipeline

    real = real_corpus("pyfeat/single_face.mp4")
    labels = load_labels()
    labels["videos"] = [v for v in labels["videos"] if v["file"] == "pyfeat/single_face.mp4"]
    labels["stills"] = []
    recs = collect(FacePipeline(), labels, real)
    smile = np.array([0.5 * (r["weights"]["mouthSmileLeft"] + r["weights"]["mouthSmileRight"]) for r in recs])
    cats = np.array([r["category"] for r in recs])
    assert (smile[cats == "smile"] >= 0.3).mean() > 0.9
    assert smile[cats == "neutral"].max() < 0.3
