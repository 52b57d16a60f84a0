"""File sources never take the stream down: unreadable, special, oversized and non-UTF-8-named images, videos
with a damaged region or a cut-off end, each skipped or read and said so; a single photo (even renamed .mp4) is
not a video; camera options are refused for files; --mirror flips every frame."""
import os
import struct
import subprocess
import sys
import zlib

import cv2
import numpy as np
import pytest

from bridge.errors import SourceError
from bridge.sources import files
from bridge.sources.files import ImageFolderSource, VideoFileSource
from tests.helpers import ROOT, facebridge_cmd, subprocess_env


def test_image_folder_skips_unreadable_images(tmp_path, caplog):
    from bridge.sources import open_source

    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((8, 8, 3), np.uint8))
    (tmp_path / "b.png").write_bytes(b"garbage")
    cv2.imwrite(str(tmp_path / "c.png"), np.ones((8, 8, 3), np.uint8))
    src = open_source(str(tmp_path), realtime=False)
    got = [src.read(), src.read(), src.read()]
    assert got[0] is not None and got[1] is not None and got[2] is None
    assert src.skipped == 1 and [g.seq for g in got[:2]] == [0, 1]
    assert "b.png cannot be decoded" in caplog.text and "1 images skipped" in src.report()
    with pytest.raises(SourceError, match="not a number"):
        open_source("camera:x")


def test_a_fifo_in_an_image_folder_is_skipped_not_waited_on(tmp_path, caplog):
    cv2.imwrite(str(tmp_path / "a.png"), np.zeros((8, 8, 3), np.uint8))
    os.mkfifo(tmp_path / "b.png")  # nobody ever writes to it: opening it would block for good
    cv2.imwrite(str(tmp_path / "c.png"), np.zeros((8, 8, 3), np.uint8))
    src = ImageFolderSource(tmp_path, realtime=False)
    assert [src.read() is not None for _ in range(3)] == [True, True, False]
    assert "not a regular file" in caplog.text


def _png_header_only(path, width: int, height: int) -> None:
    """A PNG that claims width x height (its pixel data cut short): decoding would allocate it all."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 4096)))


def test_a_folder_of_20000_pixel_pngs_is_refused_image_by_image_without_decoding(tmp_path):
    for i in range(3):
        _png_header_only(tmp_path / f"huge{i}.png", 20000, 20000)
    cv2.imwrite(str(tmp_path / "small.png"), np.zeros((8, 8, 3), np.uint8))
    script = f"""
import logging, sys
sys.path.insert(0, {str(ROOT)!r})
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from bridge.sources.files import ImageFolderSource
src = ImageFolderSource({str(tmp_path)!r}, realtime=False)
frames = 0
while src.read() is not None:
    frames += 1
peak = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmHWM:"))  # this process's own
print(frames, src.skipped, peak // 1024)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    frames, skipped, peak_mb = (int(v) for v in out.stdout.split())
    assert (frames, skipped) == (1, 3) and "is 20000x20000 (400 MP)" in out.stderr, out.stderr
    assert peak_mb < 600  # one decoded 20000x20000 frame alone is 1.2 GB


def test_an_oversized_jpeg_is_decoded_at_a_reduced_size(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(files, "MAX_IMAGE_PIXELS", 100 * 100)
    cv2.imwrite(str(tmp_path / "big.jpg"), np.full((300, 300, 3), 128, np.uint8))
    _png_header_only(tmp_path / "big2.png", 300, 300)
    src = ImageFolderSource(tmp_path, realtime=False)
    frame = src.read()
    assert frame.image.shape[:2] == (75, 75) and "downscaled 1/4 from 300x300" in caplog.text
    assert src.read() is None and src.skipped == 1 and "1 oversized images downscaled" in src.report()


def test_non_utf8_file_names_are_read_not_crashed_on(tmp_path):
    """OpenCV segfaults on such names (exit 139); the sources read them and the names print as \\xNN."""
    folder = os.path.join(os.fsencode(tmp_path), b"caf\xe9")  # Latin-1, not UTF-8
    os.mkdir(folder)
    ok, png = cv2.imencode(".png", np.zeros((16, 16, 3), np.uint8))
    for i in range(3):
        with open(os.path.join(folder, b"img%d\xff.png" % i), "wb") as f:
            f.write(png.tobytes())
    video = os.path.join(os.fsencode(tmp_path), b"clip\xff.mp4")
    writer = cv2.VideoWriter(str(tmp_path / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), 30, (32, 32))
    for _ in range(5):
        writer.write(np.zeros((32, 32, 3), np.uint8))
    writer.release()
    os.rename(tmp_path / "clip.mp4", video)
    for source, frames in ((folder, 3), (video, 5)):
        proc = subprocess.run(facebridge_cmd("run", "--llf", "off", "--vmc", "off", "--fast", "--quiet") +
                              ["--source", source], env=subprocess_env(tmp_path / "home"), capture_output=True,
                              timeout=180)
        out, err = proc.stdout.decode(), proc.stderr.decode()
        assert proc.returncode == 0, (proc.returncode, err[-2000:])
        assert f"{frames} frames sent" in out and "Traceback" not in err


def _video(path, frames: int = 150) -> None:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30, (96, 64))
    rng = np.random.default_rng(1)
    for i in range(frames):
        image = np.full((64, 96, 3), i % 250, np.uint8)
        image[:12] = rng.integers(0, 255, (12, 96, 3))  # detail, so every frame costs bytes
        writer.write(image)
    writer.release()


def _read_all(source) -> int:
    count = 0
    while source.read() is not None:
        count += 1
    return count


def test_a_damaged_region_is_skipped_and_counted_and_the_rest_of_the_video_still_plays(tmp_path):
    clip = tmp_path / "clip.mp4"
    _video(clip)
    data = bytearray(clip.read_bytes())
    a, b = int(len(data) * 0.40), int(len(data) * 0.55)
    data[a:b] = np.random.default_rng(2).integers(0, 256, b - a, dtype=np.uint8).tobytes()
    (tmp_path / "damaged.mp4").write_bytes(bytes(data))
    src = VideoFileSource(tmp_path / "damaged.mp4", realtime=False)
    read = _read_all(src)
    first_failure = int(150 * 0.40)
    assert read > first_failure + 20  # before the fix the stream ended at the first failed read
    assert src.damaged > 0 and read + src.damaged + src.missing_at_end >= 150 - 3
    assert "damaged frame" in src.report()


def test_a_truncated_video_is_named_as_such_and_an_intact_one_says_nothing(tmp_path):
    writer = cv2.VideoWriter(str(tmp_path / "clip.avi"), cv2.VideoWriter_fourcc(*"MJPG"), 30, (96, 64))
    for i in range(120):
        writer.write(np.full((64, 96, 3), i, np.uint8))
    writer.release()
    intact = VideoFileSource(tmp_path / "clip.avi", realtime=False)
    assert _read_all(intact) == 120 and intact.report() is None
    data = (tmp_path / "clip.avi").read_bytes()
    (tmp_path / "cut.avi").write_bytes(data[: len(data) * 6 // 10])
    cut = VideoFileSource(tmp_path / "cut.avi", realtime=False)
    read = _read_all(cut)
    assert read < 100 and cut.missing_at_end == 120 - read
    assert f"{120 - read} of the 120 frames it states could not be read" in cut.report()
@pytest.mark.parametrize("name, ext", [("photo.mp4", ".jpg"), ("photo.jpg", ".jpg"), ("still.png", ".png")])
def test_a_single_image_given_as_a_video_is_refused_in_one_line(tmp_path, name, ext):
    import cv2

    from bridge.sources import open_source

    ok, data = cv2.imencode(ext, np.full((64, 48, 3), 128, np.uint8))
    (tmp_path / name).write_bytes(data.tobytes())  # a JPEG renamed .mp4 is still a JPEG
    with pytest.raises(SourceError) as e:
        open_source(str(tmp_path / name))
    assert "is a single image, not a video" in str(e.value) and "\n" not in str(e.value)


def test_camera_options_are_refused_for_files():
    from bridge.sources import open_source

    with pytest.raises(SourceError, match="apply to a camera"):
        open_source("sample", size=(1280, 720))
    with pytest.raises(SourceError, match="apply to a camera"):
        open_source("sample", fps=60.0)


def test_mirror_flips_every_frame_left_to_right():
    from bridge.sources import open_source

    with open_source("sample", realtime=False) as plain, open_source("sample", realtime=False, mirror=True) as mirror:
        for _ in range(3):
            a, b = plain.read(), mirror.read()
            assert np.array_equal(a.image[:, ::-1], b.image) and b.image.flags["C_CONTIGUOUS"]
