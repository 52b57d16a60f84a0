"""What every frame source yields, and the interface it implements."""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Frame:
    image: np.ndarray  # HxWx3 uint8, BGR (OpenCV order)
    seq: int
    t_capture: float  # wall clock, seconds since the Unix epoch
    t_capture_mono: float  # time.perf_counter() when the frame was captured (for latency)
    t_media: float = 0.0  # seconds on the source's own timeline (for filters): capture time for a camera,
    # position in the file for a video or image folder, however fast it is read


class FrameSource:
    """Yields Frames. `read()` returns None at the end of a finite source."""

    name = "source"
    fps = 30.0
    live = False  # a camera: frames arrive at their own pace, never paced by us

    def __init__(self) -> None:
        self._seq = 0

    def read(self) -> Frame | None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _stamp(self, image: np.ndarray) -> Frame:
        now = time.perf_counter()
        frame = Frame(image=image, seq=self._seq, t_capture=time.time(), t_capture_mono=now, t_media=now)
        self._seq += 1
        return frame

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
