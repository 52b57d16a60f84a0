"""Frame sources backed by files: a video, a folder of images, and the bundled sample clip."""
from __future__ import annotations

import time
from pathlib import Path

import cv2
import numpy as np

from bridge.errors import SourceError
from bridge.frame import Frame
from bridge.sources.base import FrameSource, sane_fps

SAMPLE_PATH = Path(__file__).resolve().parents[1] / "data" / "sample.mp4"
IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff"}


class _Paced(FrameSource):
    """A finite source that, when `realtime`, releases frames at its own frame rate like a camera would."""

    def __init__(self, realtime: bool, loop: bool) -> None:
        super().__init__()
        self.realtime = realtime
        self.loop = loop
        self._t0: float | None = None
        self._t_wall0: float | None = None

    def _pace(self) -> None:
        if not self.realtime:
            return
        now = time.perf_counter()
        if self._t0 is None:
            self._t0 = now
        due = self._t0 + self._seq / self.fps
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
        frame.t_media = frame.seq / self.fps
        frame.t_capture = self._t_wall0 + frame.t_media
        return frame


class VideoFileSource(_Paced):
    def __init__(self, path: str | Path, realtime: bool = True, loop: bool = False) -> None:
        super().__init__(realtime, loop)
        self.path = Path(path)
        self.name = f"video:{self.path}"
        if not self.path.is_file():
            raise SourceError(f"video file {self.path} does not exist", "check the path given to --source")
        self._cap = cv2.VideoCapture(str(self.path))
        ok, first = self._cap.read() if self._cap.isOpened() else (False, None)
        if not ok or first is None:
            self._cap.release()
            raise SourceError(f"cannot decode video {self.path} (unsupported codec or corrupt file)",
                              "convert it with `ffmpeg -i IN -c:v libx264 OUT.mp4`, or pass a folder of images")
        self._first: np.ndarray | None = first
        self.fps = sane_fps(self._cap.get(cv2.CAP_PROP_FPS))
        self.frame_count = int(self._cap.get(cv2.CAP_PROP_FRAME_COUNT))

    def _next_image(self) -> np.ndarray | None:
        if self._first is not None:
            image, self._first = self._first, None
            return image
        ok, image = self._cap.read()
        return image if ok else None

    def _rewind(self) -> None:
        self._cap.set(cv2.CAP_PROP_POS_FRAMES, 0)

    def close(self) -> None:
        self._cap.release()


class SampleSource(VideoFileSource):
    """The bundled 10-second clip; loops, so `--max-frames` can ask for more than 300 frames."""

    def __init__(self, realtime: bool = True, loop: bool = True) -> None:
        super().__init__(SAMPLE_PATH, realtime=realtime, loop=loop)
        self.name = "sample"


class ImageFolderSource(_Paced):
    def __init__(self, folder: str | Path, fps: float = 30.0, realtime: bool = True, loop: bool = False) -> None:
        super().__init__(realtime, loop)
        self.folder = Path(folder)
        self.name = f"images:{self.folder}"
        self.fps = fps
        if not self.folder.is_dir():
            raise SourceError(f"image folder {self.folder} does not exist", "check the path given to --source")
        self.paths = sorted(p for p in self.folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
        if not self.paths:
            raise SourceError(f"image folder {self.folder} has no images",
                              f"put {', '.join(sorted(IMAGE_SUFFIXES))} files in it")
        self._index = 0
        self.skipped = 0

    def _next_image(self) -> np.ndarray | None:
        while self._index < len(self.paths):
            path = self.paths[self._index]
            self._index += 1
            image = cv2.imread(str(path), cv2.IMREAD_COLOR)
            if image is not None:
                return image
            self.skipped += 1  # one unreadable image never stops the stream
        return None

    def _rewind(self) -> None:
        self._index = 0
