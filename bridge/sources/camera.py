"""Live camera source (OpenCV, by index)."""
from __future__ import annotations

import logging
import os
import sys

import cv2

from bridge.errors import SourceError
from bridge.frame import Frame
from bridge.sources.base import FrameSource, sane_fps

log = logging.getLogger(__name__)


def _backend() -> int:
    return cv2.CAP_V4L2 if sys.platform.startswith("linux") else cv2.CAP_ANY


def _may_exist(index: int) -> bool:
    """On Linux a camera is a /dev/videoN node; elsewhere we can only try to open it."""
    return not sys.platform.startswith("linux") or os.path.exists(f"/dev/video{index}")


def list_cameras(max_index: int = 8) -> list[dict]:
    """Cameras that open and deliver a frame, probed by index."""
    found = []
    for index in filter(_may_exist, range(max_index)):
        cap = cv2.VideoCapture(index, _backend())
        try:
            if cap.isOpened():
                ok, image = cap.read()
                if ok and image is not None:
                    found.append({"index": index, "width": image.shape[1], "height": image.shape[0],
                                  "fps": cap.get(cv2.CAP_PROP_FPS) or None})
        finally:
            cap.release()
    return found


def camera_available(index: int = 0) -> bool:
    if not _may_exist(index):
        return False
    cap = cv2.VideoCapture(index, _backend())
    try:
        return bool(cap.isOpened() and cap.read()[0])
    finally:
        cap.release()


class CameraSource(FrameSource):
    """A camera by index. `size` (width, height) and `fps` are asked of the driver; what the camera really
    delivers is what counts (`size`, `fps` afterwards), and a difference is said once at start."""

    live = True

    def __init__(self, index: int = 0, size: tuple[int, int] | None = None, fps: float | None = None) -> None:
        super().__init__()
        self.index = index
        self.name = f"camera:{index}"
        self._cap = cv2.VideoCapture(index, _backend())
        if not self._cap.isOpened():
            self._cap.release()
            raise SourceError(f"camera {index} cannot be opened (missing, or in use by another program)",
                              "list cameras with `facebridge devices`, or use `--source sample` or a video file")
        if size:
            self._cap.set(cv2.CAP_PROP_FRAME_WIDTH, size[0])
            self._cap.set(cv2.CAP_PROP_FRAME_HEIGHT, size[1])
        if fps:
            self._cap.set(cv2.CAP_PROP_FPS, fps)
        self.fps = sane_fps(self._cap.get(cv2.CAP_PROP_FPS))
        self.size = (int(self._cap.get(cv2.CAP_PROP_FRAME_WIDTH)), int(self._cap.get(cv2.CAP_PROP_FRAME_HEIGHT)))
        got = [f"{self.size[0]}x{self.size[1]}" if size and tuple(size) != self.size else "",
               f"{self.fps:g} fps" if fps and abs(fps - self.fps) > 0.5 else ""]
        if any(got):
            log.warning("camera %d gives %s instead of what was asked (%s); it streams what it gives", index,
                        " at ".join(g for g in got if g), " at ".join(
                            ([f"{size[0]}x{size[1]}"] if size else []) + ([f"{fps:g} fps"] if fps else [])))
        self.failed_reads = 0

    def read(self) -> Frame | None:
        for _ in range(30):  # a camera hiccup is not the end of the stream
            ok, image = self._cap.read()
            if ok and image is not None:
                return self._stamp(image)
            self.failed_reads += 1
        raise SourceError(f"camera {self.index} stopped delivering frames", "check the cable and that no other "
                          "program took the camera, then start again")

    def close(self) -> None:
        self._cap.release()
