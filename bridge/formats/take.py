"""The take format: the files of a take directory, their metadata, and TakeReader, which reads a take back.
The recorder that writes takes is bridge/sinks/recorder.py.

A take directory holds
    frames.jsonl  one FaceFrame.to_dict() per line (landmarks left out), the lossless record
    frames.csv    Live Link Face's CSV export layout (Timecode, BlendShapeCount, 61 PascalCase curves), for
                  tools that import Live Link Face takes (Unreal's LiveLinkFaceImporter, Blender add-ons);
                  values as on the Live Link Face wire (shapes clipped to [0, 1], angles / 180)
    take.json     metadata: subject, frame rate, start time, curve names, facebridge version, frame count

Crash safety (the recorder's side): both frame files are flushed and fsynced at least once a second and on close,
so a crash loses at most the last second; TakeReader skips a half-written last line with a warning. take.json is
written atomically when the first frame arrives and again on close ("complete": true). An existing take is never
overwritten.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Iterator
from pathlib import Path

from bridge import __version__
from bridge.errors import SourceError
from bridge.formats.livelinkface import CURVE_NAMES
from bridge.frame import ARKIT_NAMES, FaceFrame

log = logging.getLogger(__name__)

FRAMES_JSONL = "frames.jsonl"
FRAMES_CSV = "frames.csv"
TAKE_JSON = "take.json"
FORMAT = "facebridge-take"
FORMAT_VERSION = 1

def frame_line(frame: FaceFrame) -> str:
    """One frames.jsonl line (no newline): the frame's dict, landmarks left out."""
    return json.dumps(frame.to_dict(), separators=(",", ":"), default=_json_default)


def take_metadata(first: FaceFrame | None, last: FaceFrame | None, frames: int, complete: bool) -> dict:
    """take.json for a take whose first and last recorded frames are `first` and `last`."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "facebridge_version": __version__,
        "subject": first.subject if first else None,
        "frame_rate": first.frame_rate if first else None,
        "started": (dt.datetime.fromtimestamp(first.t_capture, dt.timezone.utc).isoformat() if first else None),
        "started_unix": first.t_capture if first else None,
        "frames": frames,
        "duration_s": round(last.t_capture - first.t_capture, 6) if first and last else 0.0,
        "complete": complete,
        "files": {"frames": FRAMES_JSONL, "csv": FRAMES_CSV},
        "blendshape_names": list(ARKIT_NAMES),
        "curve_names": list(CURVE_NAMES),
    }


def _json_default(value):
    """numpy scalars and arrays that stages leave in dict fields (latencies, region confidence)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class TakeReader:
    """Reads a take directory: `metadata` (take.json, {} if missing) and iteration over its FaceFrames.

    A half-written last line (the recorder was killed) is skipped with a warning, as is any other line that
    does not decode; `skipped` counts them."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.frames_path = self.directory / FRAMES_JSONL
        if not self.directory.is_dir():
            raise SourceError(f"take {self.directory} does not exist or is not a directory",
                              "give the directory a take was recorded to")
        if not self.frames_path.is_file():
            raise SourceError(f"take {self.directory} has no {FRAMES_JSONL}",
                              "give the directory a take was recorded to (it holds frames.jsonl and take.json)")
        self.metadata: dict = {}
        meta_path = self.directory / TAKE_JSON
        if meta_path.is_file():
            try:
                self.metadata = json.loads(meta_path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as e:
                log.warning("take %s: cannot read %s (%s); reading the frames without it", self.directory,
                            TAKE_JSON, e)
        if self.metadata and not self.metadata.get("complete", True):
            log.warning("take %s was not closed cleanly (crash or kill); the last second may be missing",
                        self.directory)
        self.skipped = 0

    def __iter__(self) -> Iterator[FaceFrame]:
        with open(self.frames_path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    yield FaceFrame.from_dict(json.loads(line))
                except (ValueError, TypeError, KeyError) as e:
                    self.skipped += 1
                    if not line.endswith("\n"):
                        log.warning("take %s: last line %d is cut short (the recorder was interrupted); "
                                    "skipped it", self.directory, number)
                    else:
                        log.warning("take %s: line %d is not a frame (%s); skipped it", self.directory, number, e)
