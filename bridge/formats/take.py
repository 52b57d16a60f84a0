"""The take format: the files of a take directory, their metadata, TakeReader (which reads a take back and trusts
none of it) and `repair_take`. The recorder that writes takes is bridge/sinks/recorder.py.

A take directory holds
    frames.jsonl  one FaceFrame.to_dict() per line (landmarks left out), the lossless record
    frames.csv    Live Link Face's CSV export layout (Timecode, BlendShapeCount, 61 PascalCase curves), for
                  tools that import Live Link Face takes (Unreal's LiveLinkFaceImporter, Blender add-ons);
                  values as on the Live Link Face wire (shapes clipped to [0, 1], angles / 180)
    take.json     metadata: subject, frame rate, start time, curve names, facebridge version, frame count

Crash safety (the recorder's side): each frame's two lines are written together, so the files differ by at most
one row; the recorder's sync thread fsyncs both about once a second and then rewrites take.json (atomically) with
the frames that sync covered, so a killed take is readable as it is and loses at most the last seconds; on close
take.json says "complete": true, and "frames_dropped" counts frames a disk too slow for the stream cost. The
reader's side: every record is checked (bridge/formats/take_check.py), a bad one is skipped and its line named,
capture-time jumps are clamped, a line longer than MAX_LINE_BYTES is skipped without being read whole.
`repair_take` makes a killed take whole again: take.json and frames.csv rebuilt from the frames that frames.jsonl
really holds.
"""
from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bridge import __version__
from bridge.errors import SourceError
from bridge.formats.livelinkface import CSV_HEADER, CURVE_NAMES, csv_row, csv_timecode
from bridge.formats.take_check import BadRecord, Timeline, checked_metadata, frame_from_record
from bridge.frame import ARKIT_NAMES, FaceFrame
from bridge.fsutil import atomic_write_json, atomic_write_with, printable

log = logging.getLogger(__name__)

FRAMES_JSONL = "frames.jsonl"
FRAMES_CSV = "frames.csv"
TAKE_JSON = "take.json"
FORMAT = "facebridge-take"
FORMAT_VERSION = 1
NAMED_PROBLEMS = 10  # lines named one by one in the warnings; the rest are counted
MAX_LINE_BYTES = 1 << 20  # a frames.jsonl line longer than this is not a frame (one is a few KiB): skipped unread


def frame_line(frame: FaceFrame) -> tuple[str, int]:
    """One frames.jsonl line (no newline) and how many NaN/inf values in it were written as 0 (JSON has no NaN,
    and a take must stay readable by every JSON tool)."""
    record = frame.to_dict()
    replaced = 0

    def finite(value):
        nonlocal replaced
        if hasattr(value, "tolist"):  # numpy scalars and arrays that stages leave in dict fields
            value = value.tolist()
        if isinstance(value, float) and not math.isfinite(value):
            replaced += 1
            return 0.0
        if isinstance(value, list):
            return [finite(v) for v in value]
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        return value

    record = finite(record)
    return json.dumps(record, separators=(",", ":"), allow_nan=False), replaced


def take_metadata(first: FaceFrame | None, last: FaceFrame | None, frames: int, complete: bool,
                  extra: dict | None = None) -> dict:
    """take.json for a take whose first and last recorded frames are `first` and `last`."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "facebridge_version": __version__,
        "subject": first.subject if first else None,
        "frame_rate": first.frame_rate if first else None,
        "started": (dt.datetime.fromtimestamp(first.t_capture, dt.timezone.utc).isoformat() if first else None),
        "started_unix": first.t_capture if first else None,
        "start_timecode": csv_timecode(first.timecode()) if first else None,  # HH:MM:SS:FF.mmm, as in the CSV
        "frames": frames,
        "duration_s": round(last.t_capture - first.t_capture, 6) if first and last else 0.0,
        "complete": complete,
        "files": {"frames": FRAMES_JSONL, "csv": FRAMES_CSV},
        "blendshape_names": list(ARKIT_NAMES),
        "curve_names": list(CURVE_NAMES),
        **(extra or {}),
    }


class TakeReader:
    """Reads a take directory: `metadata` (take.json, checked; {} if missing or unusable) and iteration over its
    FaceFrames, every record checked and capture-time jumps clamped.

    Counters after (or during) iteration: `skipped` lines that are not frames, `clamped` frames whose capture
    time was moved, `problems` the first few of both by line number, `cut_short` when the last line was
    half-written (the recorder was killed)."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)
        self.frames_path = self.directory / FRAMES_JSONL
        name = printable(self.directory)
        try:
            is_dir, has_frames = self.directory.is_dir(), self.frames_path.is_file()
        except OSError as e:  # a name too long, a permission
            raise SourceError(f"take {name} cannot be read ({e.strerror})", "check the path") from None
        if not is_dir:
            if self.directory.name == FRAMES_JSONL and self.directory.is_file():
                raise SourceError(f"{name} is a take's frames file, not the take",
                                  f"give the take's folder: {printable(self.directory.parent)}")
            if self.directory.exists():
                raise SourceError(f"take {name} is a file, not a take folder",
                                  "give the directory a take was recorded to (it holds frames.jsonl and take.json)")
            raise SourceError(f"take {name} does not exist", "give the directory a take was recorded to")
        if not has_frames:
            raise SourceError(f"take {name} has no {FRAMES_JSONL}",
                              "give the directory a take was recorded to (it holds frames.jsonl and take.json)")
        self.metadata: dict = {}
        meta_path = self.directory / TAKE_JSON
        if meta_path.is_file():
            try:
                raw = json.loads(meta_path.read_text(encoding="utf-8", errors="replace"))
            except (OSError, ValueError) as e:
                log.warning("take %s: cannot read %s (%s); reading the frames without it", name, TAKE_JSON, e)
            else:
                self.metadata, problems = checked_metadata(raw)
                if problems:
                    log.warning("take %s: %s: %s; those fields are ignored", name, TAKE_JSON, "; ".join(problems))
        self.incomplete = bool(self.metadata) and self.metadata.get("complete") is False
        if self.incomplete:  # both causes named: a reader cannot tell a take being recorded from one a crash left
            log.warning("take %s was not closed cleanly: it is still being recorded, or its recorder crashed or was "
                        "killed (then the last second may be missing; --repair rewrites its take.json and frames.csv "
                        "from the frames it holds)", name)
        self.skipped = self.clamped = 0
        self.cut_short = False
        self.problems: list[str] = []

    def _note(self, text: str) -> None:
        if len(self.problems) < NAMED_PROBLEMS:
            self.problems.append(text)
            log.warning("take %s: %s", printable(self.directory), text)

    def __iter__(self) -> Iterator[FaceFrame]:
        self.skipped = self.clamped = 0
        self.cut_short = False
        self.problems = []
        timeline = Timeline()
        with open(self.frames_path, "rb") as f:
            for number, line in enumerate(_bounded_lines(f), start=1):
                if line is None:  # longer than any frame: never held in memory whole
                    self.skipped += 1
                    self._note(f"line {number} is longer than {MAX_LINE_BYTES // 1024} KiB (a frame is a few); "
                               "skipped")
                    continue
                if not line.strip():
                    continue
                try:
                    frame = frame_from_record(json.loads(line))
                except (ValueError, RecursionError) as e:  # BadRecord and JSONDecodeError are ValueErrors
                    self.skipped += 1
                    if not line.endswith("\n"):
                        self.cut_short = True
                        self._note(f"last line {number} is cut short (the recorder was interrupted); skipped")
                    else:
                        reason = e if isinstance(e, BadRecord) else "not JSON"
                        self._note(f"line {number} is not a frame ({reason}); skipped")
                    continue
                before = frame.t_capture
                if timeline.place(frame):
                    self.clamped += 1
                    self._note(f"line {number}: capture time jumps by {before - frame.t_capture:+.3g} s; "
                               "placed one frame after the frame before it")
                yield frame

    def summary(self) -> str:
        """What reading found wrong, for a command's last line ('' when nothing)."""
        parts = []
        if self.skipped:
            parts.append(f"skipped {self.skipped} damaged line{'s' if self.skipped != 1 else ''}")
        if self.clamped:
            parts.append(f"clamped {self.clamped} capture-time jump{'s' if self.clamped != 1 else ''}")
        return "; ".join(parts)


def _bounded_lines(f) -> Iterator[str | None]:
    """The lines of a binary file as text, None for one longer than MAX_LINE_BYTES (read past in pieces, so a
    1 GB line costs a MiB of memory, not gigabytes). The last line keeps its missing newline (a cut-short write)."""
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):
                raw = f.readline(MAX_LINE_BYTES)
            yield None
            continue
        yield raw.decode("utf-8", errors="replace")


@dataclass
class RepairReport:
    frames: int
    skipped: int
    clamped: int
    truncated_bytes: int = 0  # the half-written last line removed from frames.jsonl
    rewrote: list[str] = field(default_factory=list)


def repair_take(directory: str | Path) -> RepairReport:
    """Make a take whole after a crash or a kill: cut a half-written last line off frames.jsonl, rebuild
    frames.csv from the frames it holds (one row each, so the two agree) and write take.json with their count,
    first and last frame ("complete": true, "repaired": when). Every file is replaced atomically."""
    reader = TakeReader(directory)
    directory = reader.directory
    truncated = _cut_half_line(reader.frames_path)
    first = last = None
    frames = 0

    def write_csv(tmp: Path) -> None:
        nonlocal first, last, frames
        with open(tmp, "w", encoding="utf-8", newline="") as out:
            out.write(CSV_HEADER + "\n")
            for frame in reader:
                out.write(csv_row(frame) + "\n")
                first = first or frame
                last = frame
                frames += 1

    atomic_write_with(directory / FRAMES_CSV, write_csv)
    if not frames:
        raise SourceError(f"take {printable(directory)} holds no readable frames", "there is nothing to repair")
    extra = {"repaired": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
             "skipped_lines": reader.skipped, "clamped_times": reader.clamped}
    atomic_write_json(directory / TAKE_JSON, take_metadata(first, last, frames, True, extra), strict=True)
    return RepairReport(frames=frames, skipped=reader.skipped, clamped=reader.clamped, truncated_bytes=truncated,
                        rewrote=[FRAMES_CSV, TAKE_JSON] + ([FRAMES_JSONL] if truncated else []))


def _cut_half_line(path: Path) -> int:
    """Remove a last line without its newline that is not a whole record (a write the kill cut short)."""
    size = path.stat().st_size
    if size == 0:
        return 0
    with open(path, "rb") as f:
        f.seek(max(0, size - 1))
        if f.read(1) == b"\n":
            return 0
        back = min(size, 1 << 20)
        f.seek(size - back)
        tail = f.read(back)
    start = tail.rfind(b"\n") + 1
    try:
        frame_from_record(json.loads(tail[start:]))
        return 0  # a whole record that only lacks its newline: keep it
    except (ValueError, RecursionError):
        pass
    cut = back - start
    with open(path, "r+b") as f:
        f.truncate(size - cut)
        os.fsync(f.fileno())
    return cut
