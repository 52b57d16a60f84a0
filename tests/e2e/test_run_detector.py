"""`facebridge run` finds small faces (issue 37): two people side by side on a wide frame and in a real photograph
stream as two Live Link Face subjects with --faces 2, and one small face alone is found once it has been missing
for a while. Real processes: the CLI as a subprocess, a UDP receiver on 127.0.0.1, the take recorder."""
import json
import shutil
import subprocess
import time
from pathlib import Path

import cv2
import numpy as np

from bridge.engines.shipped import sample_frames as shipped_frames
from bridge.formats.livelinkface import decode_llf_packet
from bridge.stages.search import FAR_AFTER
from tests.helpers import facebridge_cmd, real_corpus, subprocess_env, udp_collector

FRAMES = 40


def sample_frames(count: int) -> list[np.ndarray]:
    """The bundled sample's first frames in OpenCV's BGR, as a clip file holds them."""
    return [cv2.cvtColor(f, cv2.COLOR_RGB2BGR) for f in shipped_frames(count, step=1)]


def write_clip(path: Path, images: list[np.ndarray]) -> Path:
    h, w = images[0].shape[:2]
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (w, h))
    for image in images:
        out.write(image)
    out.release()
    return path


def stream_two_faces(source: Path, home: Path) -> tuple[str, dict[str, list[dict]]]:
    """Run `--faces 2` on source, Live Link Face to a receiver here: (stdout, subject -> its packets' curves)."""
    with udp_collector() as (port, packets):
        proc = subprocess.run(facebridge_cmd("run", "--source", str(source), "--fast", "--faces", "2",
                                             "--subject", "Ann,Ben", "--llf", f"127.0.0.1:{port}", "--vmc", "off",
                                             "--monitor", "off", "--updates", "off"),
                              env=subprocess_env(home), capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, proc.stderr
        time.sleep(0.3)  # let the last datagrams land
    subjects: dict[str, list[dict]] = {}
    for packet in packets:
        decoded = decode_llf_packet(packet)
        subjects.setdefault(decoded["subject"], []).append(decoded["curves"])
    return proc.stdout, subjects


def median(curves: list[dict], name: str) -> float:
    return float(np.median([c[name] for c in curves]))


def test_two_people_side_by_side_on_a_wide_frame_stream_as_two_mirrored_subjects(tmp_path, isolated_home):
    # the sample next to its mirror image: 960x360, each face about 100 px, a tenth of the frame's width
    clip = write_clip(tmp_path / "side_by_side.mp4",
                      [np.hstack([image, cv2.flip(image, 1)]) for image in sample_frames(FRAMES)])
    stdout, subjects = stream_two_faces(clip, isolated_home)
    assert "detector short + full range" in stdout  # the start line says which detector runs
    assert f"{FRAMES} frames sent, face found in 100%" in stdout
    assert set(subjects) == {"Ann", "Ben"}
    ann, ben = subjects["Ann"], subjects["Ben"]
    assert len(ann) == FRAMES and len(ben) >= FRAMES - 2  # both faces from the first frame or so
    # two faces, each the other's mirror image: head yaw and roll of opposite sign and about equal size
    for name in ("HeadYaw", "HeadRoll"):
        a, b = median(ann, name), median(ben, name)
        assert a * b < 0 and abs(a + b) < 0.5 * abs(a - b), (name, a, b)
    assert min(median(c, "MouthSmileLeft") for c in (ann, ben)) > 0.4  # the sample smiles


def test_the_short_range_detector_alone_finds_no_face_on_that_frame(tmp_path, isolated_home):
    clip = write_clip(tmp_path / "side_by_side.mp4",
                      [np.hstack([image, cv2.flip(image, 1)]) for image in sample_frames(10)])
    proc = subprocess.run(facebridge_cmd("run", "--source", str(clip), "--fast", "--faces", "2", "--detector",
                                         "short", "--llf", "off", "--vmc", "off", "--monitor", "off", "--updates",
                                         "off"),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "detector short range" in proc.stdout
    assert "face found in 0%" in proc.stdout  # why the wide search exists


def test_two_people_of_a_real_photograph_stream_as_two_smiling_subjects(tmp_path, isolated_home):
    # five young people, faces 85-170 px in a 1000x667 photograph
    photo = real_corpus("pyfeat/multi_face.jpg") / "pyfeat/multi_face.jpg"
    folder = tmp_path / "photos"
    folder.mkdir()
    for k in range(10):
        shutil.copy(photo, folder / f"multi_face_{k}.jpg")
    stdout, subjects = stream_two_faces(folder, isolated_home)
    assert "10 frames sent, face found in 100%" in stdout
    assert set(subjects) == {"Ann", "Ben"}
    for curves in subjects.values():
        assert len(curves) == 10  # the second face too, from the first photograph on
        assert median(curves, "MouthSmileLeft") > 0.4 and median(curves, "MouthSmileRight") > 0.4  # all smile
    assert median(subjects["Ann"], "HeadYaw") != median(subjects["Ben"], "HeadYaw")  # two faces, not one twice


def test_one_small_face_alone_is_found_once_it_has_been_missing_for_a_while(tmp_path, isolated_home):
    # the sample scaled so its face is a tenth of a 1280x720 frame's width: too small for the short range
    scale = 0.1 * 1280 / 95  # the sample's face is about 95 px wide
    frames = []
    for image in sample_frames(FRAMES):
        small = cv2.resize(image, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        canvas = np.full((720, 1280, 3), 90, np.uint8)
        y, x = (720 - small.shape[0]) // 2, (1280 - small.shape[1]) // 2
        canvas[y:y + small.shape[0], x:x + small.shape[1]] = small
        frames.append(canvas)
    clip = write_clip(tmp_path / "small.mp4", frames)
    take = tmp_path / "take"
    proc = subprocess.run(facebridge_cmd("run", "--source", str(clip), "--fast", "--record", str(take), "--llf",
                                         "off", "--vmc", "off", "--monitor", "off", "--updates", "off"),
                          env=subprocess_env(isolated_home), capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert "detector short range, full when lost" in proc.stdout.splitlines()[1]  # the second start line
    found = [json.loads(line)["face_found"] for line in (take / "frames.jsonl").read_text().splitlines()]
    assert len(found) == FRAMES
    # the fast short-range detector alone first, then the wide search, which finds it and tracking keeps it
    assert not any(found[:FAR_AFTER]) and all(found[FAR_AFTER + 1:]), found
