"""Take recorder: a sink that stores every FaceFrame of a session in a take directory (bridge/formats/take.py).

Each frame's frames.jsonl line and frames.csv row are written together, straight to the kernel (no buffer of
ours to lose on a kill), so the two files never differ by more than one row. The disk's slow part, fsync, runs on
the recorder's own sync thread on its own clock: every `sync_interval_s` after the last sync ended, both files are
fsynced and take.json is rewritten (atomically) with the frames synced so far, so a killed take is readable
without repair and loses at most the last seconds; `send` never waits for the disk to sync. A write that fails
(disk full, quota, disk gone) is undone in both files, so a take never holds half a frame; the frames that did not
land are counted as lost, the run says so and fails. Frames the recorder never got, because the disk was slower
than the stream for longer than its queue holds, are counted too (`frames_dropped` in take.json and the summary).
take.json is written when the take opens, before the stream reaches it (padded, so that on a full disk, where
the atomic rewrite has no room, the later ones are rewritten in the space it reserved), by the sync thread, at
each model swap ("model_swaps": where the versions changed) and on close ("complete": true). A take that received
no frame is removed on close, and a directory that holds only such an empty take (a kill before the first frame)
is reused. An existing take is never overwritten: the recorder refuses a directory that already has other files,
a file, a broken or looping symbolic link, a name too long.
"""
from __future__ import annotations

import errno
import json
import os
import threading
from pathlib import Path

from bridge.errors import SinkError
from bridge.formats.livelinkface import CSV_HEADER, csv_row
from bridge.formats.take import FRAMES_CSV, FRAMES_JSONL, TAKE_JSON, frame_line, take_metadata
from bridge.frame import FaceFrame
from bridge.fsutil import atomic_write_json, atomic_write_text, printable
from bridge.sinks.base import Sink

RESERVED_METADATA_BYTES = 8192  # the first take.json is padded to this, so the last one fits on a full disk
NO_SPACE = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
MIN_SYNC_WAIT_S = 0.01  # the sync thread's shortest wait (sync_interval_s 0: as often as it can, never a spin)
DROPPED_REASON = "the disk was slower than the stream for longer than the recorder's queue holds"


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
        if directory.is_dir() and any(directory.iterdir()) and not _remove_empty_take(directory):
            raise SinkError(f"take directory {name} already has files in it",
                            "record to a new directory (takes are never overwritten)")
    except OSError as e:
        raise _path_error(directory, e) from None


def _remove_empty_take(directory: Path) -> bool:
    """A directory holding only what a recorder killed before its first frame left (an empty frames.jsonl, a
    frames.csv with its header alone, a take.json of 0 frames) is emptied for reuse; True when it was."""
    try:
        names = {p.name for p in directory.iterdir()}
        if names - {FRAMES_JSONL, FRAMES_CSV, TAKE_JSON} or FRAMES_JSONL not in names:
            return False
        if TAKE_JSON in names and json.loads((directory / TAKE_JSON).read_text()).get("frames") != 0:
            return False
        header_only = FRAMES_CSV not in names or (directory / FRAMES_CSV).read_bytes().strip() in (
            b"", CSV_HEADER.encode())
        if (directory / FRAMES_JSONL).stat().st_size or not header_only:
            return False
        for name in names:
            (directory / name).unlink()
        return True
    except (OSError, ValueError, AttributeError):
        return False


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
    keeps_every_frame = True
    counts_skipped = True
    failure_hint = "check the disk"

    def __init__(self, directory: str | Path, sync_interval_s: float = 1.0):
        super().__init__()
        self.directory = Path(directory)
        self.destination = str(self.directory)
        self.sync_interval_s = sync_interval_s
        check_take_path(self.directory)
        created = not self.directory.exists()
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
        self._created = created  # the directory is ours to remove when the take ends without a frame
        self._ends = [os.lseek(fd, 0, os.SEEK_END) for fd in (self._jsonl, self._csv)]
        self.frames = 0
        self.lost = 0  # frames that reached the recorder but not the disk
        self.lost_reason: str | None = None
        self.dropped = 0  # frames the recorder never got: its queue was full (a disk slower than the stream)
        self.nonfinite = 0  # NaN/inf values written as 0
        self.syncs = 0  # completed syncs (both files fsynced, take.json rewritten)
        self._first: FaceFrame | None = None
        self._last: FaceFrame | None = None
        self._closed = False
        self._swaps: list[dict] = []  # where the take spans a model swap: first frame recorded with new versions
        self._metadata_failed: str | None = None
        self._state = threading.Lock()  # the counters above, read whole by the sync thread
        self._metadata_lock = threading.Lock()  # one take.json write at a time
        self._written = (0, 0, 0, 0)  # (frames, lost, dropped, swaps) that the last take.json holds
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._syncer = threading.Thread(target=self._sync_loop, name="facebridge-take-sync", daemon=True)
        self._write_metadata(complete=False)  # before the stream: its fsyncs cost no frame
        self._syncer.start()

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
        first = self._first is None
        if first:
            self._first = frame
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
        with self._state:
            self.nonfinite += replaced
            self.frames += 1
            self.sent += 1
            if swapped:  # said at once (the sync thread is woken): a crash still tells where the versions changed
                old, new = self._last.model_versions, frame.model_versions
                self._swaps.append({"seq": frame.seq, "frame_index": self.frames - 1, "t_capture": frame.t_capture,
                                    "models": {k: [old.get(k), v] for k, v in new.items() if old.get(k) != v}})
            self._last = frame
        if swapped or first:
            self._wake.set()

    def skipped(self, count: int) -> None:
        with self._state:
            self.dropped += count

    def _undo(self) -> None:
        for fd, end in zip((self._jsonl, self._csv), self._ends):
            try:
                os.ftruncate(fd, end)  # frees space, so it works on a full disk
            except OSError:
                pass

    def _sync_loop(self) -> None:
        """The sync thread: its clock starts when a sync ends, so a disk whose fsync takes longer than the
        interval gets one sync after another, never one per frame."""
        while not self._closing.is_set():
            self._wake.wait(max(self.sync_interval_s, MIN_SYNC_WAIT_S))
            self._wake.clear()
            if self._closing.is_set():
                return
            with self._state:
                changed = self._first is not None and self._counts() != self._written
            if changed:
                self.sync()

    def _counts(self) -> tuple[int, int, int, int]:
        return self.frames, self.lost, self.dropped, len(self._swaps)

    def sync(self) -> None:
        """fsync both frame files, then rewrite take.json with the frames that the fsync covered: everything
        counted there survives a crash."""
        with self._state:
            snapshot = self._snapshot()
        for fd, name in ((self._jsonl, FRAMES_JSONL), (self._csv, FRAMES_CSV)):
            try:
                os.fsync(fd)
            except OSError as e:
                self._failed(f"cannot sync {name}", e)
        if snapshot["first"] is not None:
            self._write_metadata(complete=False, snapshot=snapshot)
        self.syncs += 1

    def _snapshot(self) -> dict:
        """What take.json says, taken whole (call with `_state` held)."""
        return {"first": self._first, "last": self._last, "counts": self._counts(), "swaps": list(self._swaps),
                "lost_reason": self.lost_reason}

    def _write_metadata(self, complete: bool, snapshot: dict | None = None) -> None:
        with self._metadata_lock:
            if snapshot is None:
                with self._state:
                    snapshot = self._snapshot()
            self._write_metadata_now(complete, snapshot)

    def _write_metadata_now(self, complete: bool, snapshot: dict) -> None:
        """take.json; until the take is complete padded with spaces (still JSON) to RESERVED_METADATA_BYTES, so
        the last rewrite always finds room (in place) on a full disk."""
        frames, lost, dropped, _ = snapshot["counts"]
        extra = {"frames_lost": lost, "lost_reason": snapshot["lost_reason"]} if lost else {}
        if dropped:
            extra.update(frames_dropped=dropped, dropped_reason=DROPPED_REASON)
        meta = take_metadata(snapshot["first"], snapshot["last"], frames, complete, extra)
        meta["model_swaps"] = snapshot["swaps"]
        path = self.directory / TAKE_JSON
        try:
            if not complete:
                text = json.dumps(meta, indent=2, allow_nan=False) + "\n"
                atomic_write_text(path, text + " " * max(0, RESERVED_METADATA_BYTES - len(text) - 1) + "\n")
            else:
                atomic_write_json(path, meta, strict=True)
            self._metadata_failed = None
        except OSError as e:
            if e.errno in NO_SPACE and _rewrite_in_place(path, meta):
                self._metadata_failed = None
            else:
                self._metadata_failed = e.strerror or str(e)
                self._failed(f"cannot write {TAKE_JSON}", e)
        self._written = snapshot["counts"]

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._wake.set()
        self._syncer.join()  # a sync under way ends first (a slow disk: seconds)
        if self._first is None:  # no frame: no take (the name stays free)
            os.close(self._jsonl)
            os.close(self._csv)
            self._remove_empty()
            return
        for fd, name in ((self._jsonl, FRAMES_JSONL), (self._csv, FRAMES_CSV)):
            try:
                os.fsync(fd)
            except OSError as e:
                self._failed(f"cannot sync {name}", e)
            os.close(fd)
        self._write_metadata(complete=True)

    def _remove_empty(self) -> None:
        try:
            for name in (FRAMES_JSONL, FRAMES_CSV, TAKE_JSON):
                (self.directory / name).unlink(missing_ok=True)
            if self._created:
                self.directory.rmdir()
        except OSError:
            pass  # left as an empty take, which a later recorder reuses

    def stats(self) -> dict:
        return {**super().stats(), "frames": self.frames, "lost": self.lost, "lost_reason": self.lost_reason,
                "dropped": self.dropped,
                "nonfinite_values": self.nonfinite, "directory": printable(self.directory)}

    def label(self) -> str:
        return f"recorder {printable(self.directory)}"

    def report(self) -> tuple[str | None, bool]:
        where = printable(self.directory)
        if self.lost or self.dropped:
            why = "; ".join(([self.lost_reason or "write failed"] if self.lost else []) +
                            ([f"{self.dropped} {DROPPED_REASON}"] if self.dropped else []))
            missing = self.lost + self.dropped
            held = f"the take in {where} holds the {self.frames} that landed" if self.frames else \
                f"no frame landed, no take was left in {where}"
            return f"recorder: {missing} of {missing + self.frames} frames were NOT recorded ({why}); {held}", True
        if self._first is None:
            return f"recorder: no frame reached {where}; no take was left there", False
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
