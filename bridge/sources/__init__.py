"""Frame sources: camera, video file, image folder, bundled sample. `open_source` parses --source."""
from __future__ import annotations

from pathlib import Path

from bridge.errors import SourceError
from bridge.frame import Frame  # noqa: F401
from bridge.sources.base import FrameSource  # noqa: F401

SOURCE_HELP = ("'sample' (the bundled clip), 'camera', 'camera:N' or N (camera index), a video file, "
               "or a folder of images; default: camera 0 if present, else sample")


def open_source(spec: str | None, realtime: bool = True, loop: bool | None = None) -> FrameSource:
    """Open --source. `realtime` paces file sources at their frame rate; `loop` repeats them."""
    from bridge.sources.camera import CameraSource, camera_available
    from bridge.sources.files import ImageFolderSource, SampleSource, VideoFileSource

    if spec in (None, "", "auto"):
        return CameraSource(0) if camera_available(0) else SampleSource(realtime=realtime)
    if spec == "sample":
        return SampleSource(realtime=realtime, loop=True if loop is None else loop)
    if spec == "camera" or spec.startswith("camera:") or spec.isdigit():
        index_text = spec.split(":", 1)[1] if ":" in spec else ("0" if spec == "camera" else spec)
        if not index_text.isdigit():
            raise SourceError(f"camera index '{index_text}' is not a number", "use e.g. --source camera:0")
        return CameraSource(int(index_text))
    path = Path(spec).expanduser()
    if path.is_dir():
        return ImageFolderSource(path, realtime=realtime, loop=bool(loop))
    if path.is_file():
        return VideoFileSource(path, realtime=realtime, loop=bool(loop))
    raise SourceError(f"source '{spec}' is not a camera, a file or a folder", f"use {SOURCE_HELP}")
