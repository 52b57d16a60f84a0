"""Take recorder: a sink that stores every FaceFrame of a session in a take directory (bridge/formats/take.py).

Each frame's frames.jsonl line and frames.csv row are written together, straight to the kernel (no buffer of
ours to lose on a kill), and both files are fsynced at least once a second and on close, so a crash loses at
most the last second and the two files never differ by more than one row. A write that fails (disk full, quota,
disk gone) is undone in both files, so a take never holds half a frame; the frames that did not land are
counted as lost, the run says so and fails. take.json is written atomically when the first frame arrives and
again on close ("complete": true, "frames" the frames that landed) and at each model swap ("model_swaps": where
the versions changed); on a full disk, where the atomic rewrite
has no room, it is rewritten in the space the first one reserved. An existing take is never overwritten: the
recorder refuses a directory that already has files, a file, a broken or looping symbolic link, a name too long.
"""
from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

from bridge.errors import SinkError
from bridge.formats.livelinkface import CSV_HEADER, csv_row
from bridge.formats.take import FRAMES_CSV, FRAMES_JSONL, TAKE_JSON, frame_line, take_metadata
from bridge.frame import FaceFrame
from bridge.fsutil import atomic_write_json, atomic_write_text, printable
from bridge.sinks.base import Sink

RESERVED_METADATA_BYTES = 8192  # the first take.json is padded to this, so the last one fits on a full disk
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def check_take_path(directory: Path) -> None:
    """Refuse, in one line, every take path the recorder cannot or must not write (see the module docstring)."""
    name = printable(directory)
    try:
        if directory.is_symlink():
            try:
                directory.resolve(strict=True)
            except FileNotFoundError:
                raise SinkError(f"take path {name} is a symbolic link to {printable(os.readlink(directory))}, "
                                "which does not exist", "create that directory first, or give another path") from None
            except (RuntimeError, OSError):
                raise SinkError(f"take path {name} is a symbolic link loop",
                                "remove the link or give another directory") from None
        if directory.exists() and not directory.is_dir():
            raise SinkError(f"take path {name} is a file", "give a directory for the take")
        if directory.is_dir() and any(directory.iterdir()):
            raise SinkError(f"take directory {name} already has files in it",
                            "record to a new directory (takes are never overwritten)")
    except OSError as e:
        raise _path_error(directory, e) from None


def _path_error(directory: Path, e: OSError) -> SinkError:
    if e.errno == errno.ENAMETOOLONG:
        return SinkError(f"take path {printable(directory)[:80]}... is too long ({e.strerror})",
                         "use a directory name of at most 255 bytes")
    return SinkError(f"cannot create take directory {printable(directory)} ({e.strerror or e})",
                     "check the path and its permissions")


class TakeRecorder(Sink):
    """A sink that writes a take directory (see the module docstring)."""

    name = "recorder"
    queue_depth = 300  # ten seconds at 30 fps may wait for a slow disk before the oldest is dropped
    failure_hint = "check the disk"

    def __init__(self, directory: str | Path, sync_interval_s: float = 1.0):
        super().__init__()
        self.directory = Path(directory)
        self.destination = str(self.directory)
        self.sync_interval_s = sync_interval_s
        check_take_path(self.directory)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_CLOEXEC", 0)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            # O_EXCL: fail rather than overwrite, even if another recorder raced us to the same directory
            self._jsonl = os.open(self.directory / FRAMES_JSONL, flags, 0o666)
            self._csv = os.open(self.directory / FRAMES_CSV, flags, 0o666)
            _write_all(self._csv, (CSV_HEADER + "\n").encode())
        except FileExistsError:
            raise SinkError(f"take directory {printable(self.directory)} already holds a take, or a part of "
                            "its path is a file or a broken link",
                            "record to a new directory (takes are never overwritten)") from None
        except OSError as e:
            raise _path_error(self.directory, e) from None
        self._ends = [os.lseek(fd, 0, os.SEEK_END) for fd in (self._jsonl, self._csv)]
        self.frames = 0
        self.lost = 0  # frames that reached the recorder but not the disk
        self.lost_reason: str | None = None
        self.nonfinite = 0  # NaN/inf values written as 0
        self._first: FaceFrame | None = None
        self._last: FaceFrame | None = None
        self._last_sync = time.monotonic()
        self._closed = False
        self._swaps: list[dict] = []  # where the take spans a model swap: first frame recorded with new versions
        self._metadata_failed: str | None = None

    def send(self, frame: FaceFrame) -> None:
        if self._closed:
            return
        try:  # both lines are built before either is written, so the two files never disagree
            line, replaced = frame_line(frame)
            row = csv_row(frame)
        except (TypeError, ValueError, IndexError) as e:  # a malformed frame: skip it, keep recording
            self._failed(f"frame {frame.seq} not recorded", e)
            return
        swapped = self._last is not None and frame.model_versions is not self._last.model_versions and \
            frame.model_versions != self._last.model_versions
        if self._first is None:
            self._first = frame
            self._write_metadata(complete=False, reserve=True)
        try:
            _write_all(self._jsonl, (line + "\n").encode())
            _write_all(self._csv, (row + "\n").encode())
        except OSError as e:  # disk full, quota, disk gone: undo this frame in both files
            self._undo()
            self.lost += 1
            self.lost_reason = self.lost_reason or (e.strerror or str(e))
            self._failed(f"frame {frame.seq} not recorded in {printable(self.directory)}", e)
            return
        self._ends = [os.lseek(fd, 0, os.SEEK_END) for fd in (self._jsonl, self._csv)]
        self.nonfinite += replaced
        self.frames += 1
        self.sent += 1
        if swapped:  # said at once: a crash after a swap still tells where the versions changed
            old, new = self._last.model_versions, frame.model_versions
            self._swaps.append({"seq": frame.seq, "frame_index": self.frames - 1, "t_capture": frame.t_capture,
                                "models": {k: [old.get(k), v] for k, v in new.items() if old.get(k) != v}})
            self._last = frame
            self._write_metadata(complete=False)  # a failure is counted there
        self._last = frame
        if time.monotonic() - self._last_sync >= self.sync_interval_s:
            self.sync()

    def _undo(self) -> None:
        for fd, end in zip((self._jsonl, self._csv), self._ends):
            try:
                os.ftruncate(fd, end)  # frees space, so it works on a full disk
            except OSError:
                pass

    def sync(self) -> None:
        """fsync both frame files: everything sent so far survives a crash."""
        self._last_sync = time.monotonic()
        for fd, name in ((self._jsonl, FRAMES_JSONL), (self._csv, FRAMES_CSV)):
            try:
                os.fsync(fd)
            except OSError as e:
                self._failed(f"cannot sync {name}", e)

    def _write_metadata(self, complete: bool, reserve: bool = False) -> None:
        extra = {"frames_lost": self.lost, "lost_reason": self.lost_reason} if self.lost else {}
        meta = take_metadata(self._first, self._last, self.frames, complete, extra)
        meta["model_swaps"] = self._swaps
        path = self.directory / TAKE_JSON
        try:
            if reserve:  # padded with spaces (still JSON) to reserve room for the last rewrite
                text = json.dumps(meta, indent=2, allow_nan=False) + "\n"
                atomic_write_text(path, text + " " * max(0, RESERVED_METADATA_BYTES - len(text) - 1) + "\n")
            else:
                atomic_write_json(path, meta, strict=True)
            self._metadata_failed = None
        except OSError as e:
            if e.errno in NO_SPACE and _rewrite_in_place(path, meta):
                self._metadata_failed = None
                return
            self._metadata_failed = e.strerror or str(e)
            self._failed(f"cannot write {TAKE_JSON}", e)

    def close(self) -> None:
        if self._closed:
            return
        self.sync()
        self._closed = True
        os.close(self._jsonl)
        os.close(self._csv)
        if self._first is not None:
            self._write_metadata(complete=True)

    def stats(self) -> dict:
        return {**super().stats(), "frames": self.frames, "lost": self.lost, "lost_reason": self.lost_reason,
                "nonfinite_values": self.nonfinite, "directory": printable(self.directory)}

    def label(self) -> str:
        return f"recorder {printable(self.directory)}"

    def report(self) -> tuple[str | None, bool]:
        where = printable(self.directory)
        if self.lost:
            return (f"recorder: {self.lost} of {self.lost + self.frames} frames were NOT recorded "
                    f"({self.lost_reason}); the take in {where} holds the {self.frames} that landed"), True
        if self._metadata_failed:
            return (f"recorder: {TAKE_JSON} could not be written ({self._metadata_failed}); "
                    f"`facebridge replay {where} --repair` rebuilds it"), True
        line, failed = super().report()
        return line, failed


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[written:]


def _rewrite_in_place(path: Path, meta: dict) -> bool:
    """Overwrite take.json within the bytes it already has (no new disk blocks); False when it does not fit."""
    try:
        old = path.stat().st_size
        text = json.dumps(meta, indent=2, allow_nan=False) + "\n"
        if len(text) > old:
            return False
        fd = os.open(path, os.O_WRONLY)
        try:
            _write_all(fd, (text[:-1] + " " * (old - len(text)) + "\n").encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        return True
    except OSError:
        return False
