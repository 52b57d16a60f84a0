"""Take recorder: a sink that stores every FaceFrame of a session in a take directory (bridge/formats/take.py).

Both frame files are flushed and fsynced at least once a second and on close, so a crash loses at most the last
second. take.json is written atomically (bridge.fsutil) when the first frame arrives and again on close
("complete": true). An existing take is never overwritten: the recorder refuses a directory that already has files.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from bridge.errors import SinkError
from bridge.formats.livelinkface import CSV_HEADER, csv_row
from bridge.formats.take import FRAMES_CSV, FRAMES_JSONL, TAKE_JSON, frame_line, take_metadata
from bridge.frame import FaceFrame
from bridge.fsutil import atomic_write_json
from bridge.sinks.base import Sink


class TakeRecorder(Sink):
    """A sink that writes a take directory (see the module docstring)."""

    name = "recorder"

    def __init__(self, directory: str | Path, sync_interval_s: float = 1.0):
        super().__init__()
        self.directory = Path(directory)
        self.destination = str(self.directory)
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
        self._csv.write(CSV_HEADER + "\n")
        self.frames = 0
        self._first: FaceFrame | None = None
        self._last: FaceFrame | None = None
        self._last_sync = time.monotonic()
        self._closed = False
        self._swaps: list[dict] = []  # where the take spans a model swap: first frame recorded with new versions

    def send(self, frame: FaceFrame) -> None:
        if self._closed:
            return
        try:  # both lines are built before either is written, so the two files never disagree
            line = frame_line(frame)
            row = csv_row(frame)
        except (TypeError, ValueError, IndexError) as e:  # a malformed frame: skip it, keep recording
            self._failed(f"frame {frame.seq} not recorded", e)
            return
        try:
            swapped = self._last is not None and frame.model_versions is not self._last.model_versions and \
                frame.model_versions != self._last.model_versions
            if swapped:
                old, new = self._last.model_versions, frame.model_versions
                self._swaps.append({"seq": frame.seq, "frame_index": self.frames, "t_capture": frame.t_capture,
                                    "models": {k: [old.get(k), v] for k, v in new.items() if old.get(k) != v}})
            if self._first is None:
                self._first = frame
                self._write_metadata(complete=False)
            self._jsonl.write(line + "\n")
            self._csv.write(row + "\n")
        except OSError as e:  # disk full, disk gone
            self._failed(f"frame {frame.seq} not recorded in {self.directory}", e)
            return
        self.frames += 1
        self.sent += 1
        self._last = frame
        if swapped:  # said at once: a crash after a swap still tells where the versions changed
            try:
                self._write_metadata(complete=False)
            except OSError as e:
                self._failed(f"cannot note the model swap in {TAKE_JSON}", e)
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
        meta = take_metadata(self._first, self._last, self.frames, complete)
        meta["model_swaps"] = self._swaps
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
