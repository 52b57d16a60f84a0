"""Take recorder: stores every FaceFrame of a session in a take directory, and TakeReader reads it back.

A take directory holds
    frames.jsonl  one FaceFrame.to_dict() per line (landmarks left out), the lossless record
    frames.csv    Live Link Face's CSV export layout (Timecode, BlendShapeCount, 61 PascalCase curves), for
                  tools that import Live Link Face takes (Unreal's LiveLinkFaceImporter, Blender add-ons);
                  values as on the Live Link Face wire (shapes clipped to [0, 1], angles / 180)
    take.json     metadata: subject, frame rate, start time, curve names, facebridge version, frame count

Crash safety: both frame files are flushed and fsynced at least once a second and on close, so a crash loses
at most the last second; TakeReader skips a half-written last line with a warning. take.json is written
atomically (bridge.fsutil) when the first frame arrives and again on close ("complete": true). An existing
take is never overwritten: the recorder refuses a directory that already has files in it.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

from bridge import __version__
from bridge.errors import SinkError, SourceError
from bridge.frame import ARKIT_NAMES, FaceFrame
from bridge.fsutil import atomic_write_json
from bridge.sinks.base import Sink
from bridge.sinks.livelinkface import CURVE_NAMES, frame_values

log = logging.getLogger(__name__)

FRAMES_JSONL = "frames.jsonl"
FRAMES_CSV = "frames.csv"
TAKE_JSON = "take.json"
FORMAT = "facebridge-take"
FORMAT_VERSION = 1

# Live Link Face's CSV lists JawRight before JawLeft and MouthRight before MouthLeft, unlike its UDP
# order (seen in several public importers of the app's exports); readers match columns by name.
CSV_CURVES: tuple[str, ...] = tuple(
    {"JawLeft": "JawRight", "JawRight": "JawLeft", "MouthLeft": "MouthRight", "MouthRight": "MouthLeft"}.get(n, n)
    for n in CURVE_NAMES)
_CSV_INDEX = [CURVE_NAMES.index(n) for n in CSV_CURVES]


def csv_timecode(timecode: tuple[int, float, int, int]) -> str:
    """Live Link Face's CSV timecode 'HH:MM:SS:FF.mmm' (frame within the second, then the sub-frame)."""
    frame_number, subframe, num, den = timecode
    fps = max(1, round(num / max(den, 1)))
    seconds, frame_in_second = divmod(frame_number, fps)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours % 24:02d}:{minutes:02d}:{secs:02d}:{frame_in_second:02d}.{min(int(subframe * 1000), 999):03d}"


def _json_default(value):
    """numpy scalars and arrays that stages leave in dict fields (latencies, region confidence)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


class TakeRecorder(Sink):
    """A sink that writes a take directory (see the module docstring)."""

    name = "recorder"

    def __init__(self, directory: str | Path, sync_interval_s: float = 1.0):
        super().__init__()
        self.directory = Path(directory)
        self.sync_interval_s = sync_interval_s
        if self.directory.exists() and not self.directory.is_dir():
            raise SinkError(f"take path {self.directory} is a file", "give a directory for the take")
        if self.directory.is_dir() and any(self.directory.iterdir()):
            raise SinkError(f"take directory {self.directory} already has files in it",
                            "record to a new directory (takes are never overwritten)")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # "x": fail rather than overwrite, even if another recorder raced us to the same directory
            self._jsonl = open(self.directory / FRAMES_JSONL, "x", encoding="utf-8")
            self._csv = open(self.directory / FRAMES_CSV, "x", encoding="utf-8", newline="")
        except FileExistsError:
            raise SinkError(f"take directory {self.directory} already holds a take",
                            "record to a new directory (takes are never overwritten)") from None
        except OSError as e:
            raise SinkError(f"cannot create take directory {self.directory} ({e.strerror or e})",
                            "check the path and its permissions") from None
        self._csv.write(",".join(("Timecode", "BlendShapeCount") + CSV_CURVES) + "\n")
        self.frames = 0
        self._first: FaceFrame | None = None
        self._last: FaceFrame | None = None
        self._last_sync = time.monotonic()
        self._closed = False

    def send(self, frame: FaceFrame) -> None:
        if self._closed:
            return
        try:  # both lines are built before either is written, so the two files never disagree
            line = json.dumps(frame.to_dict(), separators=(",", ":"), default=_json_default)
            values, _ = frame_values(frame)
            row = [csv_timecode(frame.timecode()), str(len(CSV_CURVES))]
            row += [f"{values[i]:.7g}" for i in _CSV_INDEX]
        except (TypeError, ValueError, IndexError) as e:  # a malformed frame: skip it, keep recording
            self._failed(f"frame {frame.seq} not recorded", e)
            return
        try:
            if self._first is None:
                self._first = frame
                self._write_metadata(complete=False)
            self._jsonl.write(line + "\n")
            self._csv.write(",".join(row) + "\n")
        except OSError as e:  # disk full, disk gone
            self._failed(f"frame {frame.seq} not recorded in {self.directory}", e)
            return
        self.frames += 1
        self.sent += 1
        self._last = frame
        if time.monotonic() - self._last_sync >= self.sync_interval_s:
            self.sync()

    def sync(self) -> None:
        """Flush and fsync both frame files: everything sent so far survives a crash."""
        self._last_sync = time.monotonic()
        for f in (self._jsonl, self._csv):
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                self._failed(f"cannot sync {f.name}", e)

    def _write_metadata(self, complete: bool) -> None:
        first, last = self._first, self._last
        meta = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "facebridge_version": __version__,
            "subject": first.subject if first else None,
            "frame_rate": first.frame_rate if first else None,
            "started": (dt.datetime.fromtimestamp(first.t_capture, dt.timezone.utc).isoformat() if first else None),
            "started_unix": first.t_capture if first else None,
            "frames": self.frames,
            "duration_s": round(last.t_capture - first.t_capture, 6) if first and last else 0.0,
            "complete": complete,
            "files": {"frames": FRAMES_JSONL, "csv": FRAMES_CSV},
            "blendshape_names": list(ARKIT_NAMES),
            "curve_names": list(CURVE_NAMES),
        }
        atomic_write_json(self.directory / TAKE_JSON, meta)

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        self._closed = True
        self._jsonl.close()
        self._csv.close()
        try:
            self._write_metadata(complete=True)
        except OSError as e:
            self._failed(f"cannot write {TAKE_JSON}", e)

    def stats(self) -> dict:
        return {**super().stats(), "frames": self.frames, "directory": str(self.directory)}


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
