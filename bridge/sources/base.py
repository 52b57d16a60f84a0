"""The interface every frame source implements; what it yields is bridge.frame.Frame, stamped with its fps."""
from __future__ import annotations

import enum
import time

import numpy as np

from bridge.frame import Frame


class SourceMode(enum.Enum):
    """How a source delivers frames, which decides what the runner does when a stage is busy."""

    LIVE = "live"  # a camera (or the audio clock): frames come at their own pace; a busy stage drops the oldest
    PACED = "paced"  # a file released at its frame rate, like a camera: drops the oldest too
    FAST = "fast"  # a file read as fast as the pipeline goes: back-pressure, every frame is kept


def sane_fps(value: float | None, default: float = 30.0) -> float:
    """A reported frame rate, or `default` where the driver or container reports 0, NaN or nonsense."""
    try:
        fps = float(value or 0.0)
    except (TypeError, ValueError):
        return default
    return fps if 1.0 <= fps <= 1000.0 else default


class FrameSource:
    """Yields Frames. `read()` returns None at the end of a finite source."""

    name = "source"
    fps = 30.0
    live = False  # a camera: frames arrive at their own pace, never paced by us
    realtime = True  # a file source released at its frame rate (False: as fast as it is read)
    skipped = 0  # frames the source could not deliver (unreadable images, an audio clock's missed ticks)
    mirror = False  # flip every image left to right (--mirror): the avatar moves like the subject's reflection
    fallback: str | None = None  # why this source stands in for the one asked for (no camera: the sample), in words

    def __init__(self) -> None:
        self._seq = 0

    @property
    def mode(self) -> SourceMode:
        if self.live:
            return SourceMode.LIVE
        return SourceMode.PACED if self.realtime else SourceMode.FAST

    def read(self) -> Frame | None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def report(self) -> str | None:
        """One line for the run summary about frames this source could not deliver, or None."""
        return None

    def _stamp(self, image: np.ndarray) -> Frame:
        if self.mirror:
            image = np.ascontiguousarray(image[:, ::-1])
        now = time.perf_counter()
        frame = Frame(image=image, seq=self._seq, t_capture=time.time(), t_capture_mono=now, t_media=now,
                      fps=self.fps)
        self._seq += 1
        return frame

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
