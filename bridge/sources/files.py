"""Frame sources backed by files: a video, a folder of images, and the bundled sample clip.

No file takes the stream down. A file name that is not UTF-8 (it would crash OpenCV's reader) is read through a
link with a plain name or from its bytes. A damaged region of a video is skipped and counted, and told apart from
the end of the file by the frame count the container states; a truncated file is named as such. An unreadable,
special (FIFO, device) or oversized image is skipped with a warning; a JPEG over MAX_IMAGE_PIXELS is decoded at a
reduced size, any other oversized image is refused. `report()` sums it up for the run's last lines.
"""
from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import time
from pathlib import Path

from bridge.fsutil import is_utf8, printable

MAX_IMAGE_PIXELS = 40_000_000  # an 8K frame is 33 MP; a bigger image would cost gigabytes to decode
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(4 * MAX_IMAGE_PIXELS))  # backstop for unknown headers

import cv2  # noqa: E402  (after the pixel limit, which OpenCV reads once)
import numpy as np  # noqa: E402

from bridge.errors import SourceError  # noqa: E402
from bridge.frame import Frame  # noqa: E402
from bridge.sources.base import FrameSource, sane_fps  # noqa: E402
from bridge.sources.image_size import image_size  # noqa: E402

log = logging.getLogger(__name__)

SAMPLE_PATH = Path(__file__).resolve().parents[1] / "data" / "sample.mp4"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"}
NAMED_SKIPS = 5  # skipped images named one by one; the rest are counted
END_TOLERANCE = 0.01  # a container's frame count may be off by this share before a short file counts as cut
MAX_MISSES = 2000  # failed reads in a row before a file whose stated count is not reached counts as ended


class _Paced(FrameSource):
    """A finite source that, when `realtime`, releases frames at its own frame rate like a camera would."""

    def __init__(self, realtime: bool, loop: bool) -> None:
        super().__init__()
        self.realtime = realtime
        self.loop = loop
        self._t0: float | None = None
        self._t_wall0: float | None = None
        self._gap = 0  # frames of the file skipped so far (damaged): the timeline keeps their place

    def _pace(self) -> None:
        if not self.realtime:
            return
        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + (self._seq + self._gap) / self.fps
        if due > now:
            time.sleep(due - now)

    def _next_image(self) -> np.ndarray | None:
        raise NotImplementedError

    def _rewind(self) -> None:
        raise NotImplementedError

    def read(self) -> Frame | None:
        image = self._next_image()
        if image is None and self.loop and self._seq > 0:
            self._rewind()
            image = self._next_image()
        if image is None:
            return None
        self._pace()
        frame = self._stamp(image)
        # a file's frames keep the file's timing, however fast they are read: the filters and the recorded
        # take see 1/fps between frames
        if self._t_wall0 is None:
            self._t_wall0 = frame.t_capture
        frame.t_media = (frame.seq + self._gap) / self.fps
        frame.t_capture = self._t_wall0 + frame.t_media
        return frame


class VideoFileSource(_Paced):
    def __init__(self, path: str | Path, realtime: bool = True, loop: bool = False) -> None:
        super().__init__(realtime, loop)
        self.path = Path(path)
        self.name = f"video:{printable(self.path)}"
        self._link_dir: str | None = None
        if not self.path.is_file():
            raise SourceError(f"video file {printable(self.path)} does not exist", "check the path given to --source")
        openable = self._openable_path()
        if cv2.haveImageReader(openable):  # by content: a photo renamed .mp4 is still a photo
            if self._link_dir is not None:
                shutil.rmtree(self._link_dir, ignore_errors=True)
                self._link_dir = None
            raise SourceError(f"{printable(self.path)} is a single image, not a video",
                              "give a video file or a camera (a folder of images streams each image as a frame)")
        self._cap = cv2.VideoCapture(openable)
        ok, first = self._cap.read() if self._cap.isOpened() else (False, None)
        if not ok or first is None:
            self.close()
            raise SourceError(f"cannot decode video {printable(self.path)} (unsupported codec or corrupt file)",
                              "convert it with `ffmpeg -i IN -c:v libx264 OUT.mp4`, or pass a folder of images")
        self._first: np.ndarray | None = first
        self.fps = sane_fps(self._cap.get(cv2.CAP_PROP_FPS))
        self.frame_count = int(self._cap.get(cv2.CAP_PROP_FRAME_COUNT))
        self.delivered = 1 if first is not None else 0  # frames of this pass read
        self.damaged = 0  # frames skipped inside the file (reads that failed before good ones), every pass
        self._pass_damaged = 0
        self.missing_at_end = 0  # frames the container states but the file does not hold

    def _openable_path(self) -> str:
        """A path OpenCV can take: the file's own, or a link with a plain name when the name is not UTF-8."""
        if is_utf8(self.path):
            return str(self.path)
        self._link_dir = tempfile.mkdtemp(prefix="facebridge-video-")
        suffix = self.path.suffix if is_utf8(self.path.suffix) else ""
        link = os.path.join(self._link_dir, "video" + suffix)
        os.symlink(os.fsencode(self.path.resolve()), link)
        return link

    def _next_image(self) -> np.ndarray | None:
        if self._first is not None:
            image, self._first = self._first, None
            return image
        misses = 0
        while True:
            ok, image = self._cap.read()
            if ok and image is not None:
                if misses:  # a damaged region: skipped, counted, said once per region
                    self.damaged += misses
                    self._pass_damaged += misses
                    self._gap += misses
                    log.warning("video %s: %d damaged frames after frame %d skipped; the stream goes on",
                                printable(self.path), misses, self.delivered)
                self.delivered += 1
                return image
            misses += 1
            seen = self.delivered + self._pass_damaged + misses
            remaining = self.frame_count - seen if self.frame_count > 0 else 0
            if remaining <= 0 or misses >= MAX_MISSES:  # the end the container states (or no count to go by)
                expected = self.frame_count
                short = expected - self.delivered - self._pass_damaged if expected > 0 else 0
                if short > max(2, END_TOLERANCE * expected):
                    self.missing_at_end = short
                return None

    def _rewind(self) -> None:
        self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)
        self.delivered = self._pass_damaged = 0

    def report(self) -> str | None:
        parts = []
        if self.damaged:
            parts.append(f"{self.damaged} damaged frame{'s' if self.damaged != 1 else ''} skipped")
        if self.missing_at_end:
            more = "more " if self.damaged else ""
            parts.append(f"{self.missing_at_end} {more}of the {self.frame_count} frames it states could not be read "
                         "(the file is truncated or damaged)")
        return f"video {printable(self.path)}: " + "; ".join(parts) if parts else None

    def close(self) -> None:
        self._cap.release()
        if self._link_dir is not None:
            shutil.rmtree(self._link_dir, ignore_errors=True)
            self._link_dir = None


class SampleSource(VideoFileSource):
    """The bundled 10-second clip; loops, so `--max-frames` can ask for more than 300 frames."""

    def __init__(self, realtime: bool = True, loop: bool = True) -> None:
        super().__init__(SAMPLE_PATH, realtime=realtime, loop=loop)
        self.name = "sample"


def read_image(path: Path) -> tuple[np.ndarray | None, str]:
    """(image, '') or (None, why it was skipped), never a crash: special files, unreadable and oversized images
    are refused; an oversized JPEG is decoded at 1/2, 1/4 or 1/8 of its size (the reason then says so)."""
    try:
        info = os.stat(path)
    except OSError as e:
        return None, f"cannot be read ({e.strerror})"
    if not stat.S_ISREG(info.st_mode):
        return None, "is not a regular file (a FIFO or device would block the stream)"
    flags, note = cv2.IMREAD_COLOR, ""
    header = image_size(path)
    if header is not None and header[1] * header[2] > MAX_IMAGE_PIXELS:
        kind, w, h = header
        reduced = {2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4, 8: cv2.IMREAD_REDUCED_COLOR_8}
        factor = next((f for f in reduced if w * h / (f * f) <= MAX_IMAGE_PIXELS), None)
        if kind == "jpeg" and factor:  # libjpeg decodes at the reduced size itself
            flags, note = reduced[factor], f"downscaled 1/{factor} from {w}x{h}"
        else:
            return None, (f"is {w}x{h} ({w * h / 1e6:.0f} MP), over the {MAX_IMAGE_PIXELS / 1e6:.0f} MP a frame may "
                          "have; downscale it")
    try:
        if is_utf8(path):
            image = cv2.imread(str(path), flags)
        else:  # OpenCV crashes on such names: hand it the bytes
            image = cv2.imdecode(np.frombuffer(Path(path).read_bytes(), np.uint8), flags)
    except (OSError, cv2.error) as e:
        return None, f"cannot be decoded ({e})"
    if image is None:
        return None, "cannot be decoded (damaged or not an image)"
    return image, note


class ImageFolderSource(_Paced):
    def __init__(self, folder: str | Path, fps: float = 30.0, realtime: bool = True, loop: bool = False) -> None:
        super().__init__(realtime, loop)
        self.folder = Path(folder)
        self.name = f"images:{printable(self.folder)}"
        self.fps = fps
        if not self.folder.is_dir():
            raise SourceError(f"image folder {printable(self.folder)} does not exist",
                              "check the path given to --source")
        self.paths = sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.paths:
            raise SourceError(f"image folder {printable(self.folder)} has no images",
                              f"put {', '.join(sorted(IMAGE_SUFFIXES))} files in it")
        self._index = 0
        self.skipped = 0
        self.downscaled = 0

    def _next_image(self) -> np.ndarray | None:
        while self._index < len(self.paths):
            path = self.paths[self._index]
            self._index += 1
            image, why = read_image(path)
            if image is not None:
                if why:
                    self.downscaled += 1
                    if self.downscaled <= NAMED_SKIPS:
                        log.warning("image %s %s", printable(path), why)
                return image
            self.skipped += 1  # one unreadable image never stops the stream
            if self.skipped <= NAMED_SKIPS:
                log.warning("image %s %s; skipped%s", printable(path), why,
                            " (further skips are counted, not named)" if self.skipped == NAMED_SKIPS else "")
        return None

    def _rewind(self) -> None:
        self._index = 0

    def report(self) -> str | None:
        parts = [f"{self.skipped} images skipped"] if self.skipped else []
        parts += [f"{self.downscaled} oversized images downscaled"] if self.downscaled else []
        return f"image folder {printable(self.folder)}: " + ", ".join(parts) if parts else None
