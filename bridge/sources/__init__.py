"""Frame sources: camera, video file, image folder, bundled sample. `open_source` parses --source."""
from __future__ import annotations

import logging
from pathlib import Path

from bridge.errors import SourceError
from bridge.frame import Frame  # noqa: F401
from bridge.sources.base import FrameSource  # noqa: F401

log = logging.getLogger(__name__)

SOURCE_HELP = ("'sample' (the bundled clip), 'camera', 'camera:N' or N (camera index), a video file, "
               "or a folder of images; default: camera 0 if present, else sample")


def open_source(spec: str | None, realtime: bool = True, loop: bool | None = None,
                size: tuple[int, int] | None = None, fps: float | None = None, mirror: bool = False) -> FrameSource:
    """Open --source. `realtime` paces file sources at their frame rate; `loop` repeats them. `size` (width,
    height) and `fps` are asked of a camera (refused for files, whose size and rate are their own); `mirror`
    flips every image left to right before tracking."""
    source = _open(spec, realtime, loop, size, fps)
    source.mirror = mirror
    return source


def _open(spec, realtime, loop, size, fps) -> FrameSource:
    # loaded when a source opens: `facebridge --help` imports this package (bridge/cli.py)
    from bridge.sources.camera import CameraSource, camera_available
    from bridge.sources.files import ImageFolderSource, SampleSource, VideoFileSource

    if spec in (None, "", "auto"):
        if camera_available(0):
            return CameraSource(0, size=size, fps=fps)
        if size or fps:
            log.warning("no camera found: streaming the bundled sample; --camera-size/--camera-fps are ignored")
        sample = SampleSource(realtime=realtime)
        sample.fallback = "no camera found, so the bundled sample clip"  # the start line says it in words
        return sample
    if spec == "camera" or spec.startswith("camera:") or spec.isdigit():
        index_text = spec.split(":", 1)[1] if ":" in spec else ("0" if spec == "camera" else spec)
        if not index_text.isdigit():
            raise SourceError(f"camera index '{index_text}' is not a number", "use e.g. --source camera:0")
        return CameraSource(int(index_text), size=size, fps=fps)
    if size or fps:
        raise SourceError(f"--camera-size and --camera-fps apply to a camera, not to --source {spec}",
                          "leave them out: a file keeps its own size and frame rate")
    if spec == "sample":
        return SampleSource(realtime=realtime, loop=True if loop is None else loop)
    path = Path(spec).expanduser()
    if path.is_dir():
        return ImageFolderSource(path, realtime=realtime, loop=bool(loop))
    if path.is_file():
        return VideoFileSource(path, realtime=realtime, loop=bool(loop))
    if not path.exists() and ("/" in spec or path.suffix):  # a path, named as such: its cause is that it is missing
        raise SourceError(f"source {spec} does not exist", f"check the path, or use {SOURCE_HELP}")
    raise SourceError(f"source '{spec}' is not a camera, a file or a folder", f"use {SOURCE_HELP}")
