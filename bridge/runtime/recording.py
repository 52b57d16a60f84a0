"""RecordSwitch: the take recorder of a running bridge, turned on and off while the stream goes on (`--record DIR`
at the start, the monitor page's Record button later). Each start opens a new take directory, never an existing
one; a stop closes the take (flushed, take.json complete). A take started from the page goes to a new
`<takes dir>/<subject>-<date>-<time>-<milliseconds>` directory (numbered `-2`, `-3` if that exists): the page
never names a path, and the subject is made safe for a file name (no separator, no `..`, no control character),
so the take is always inside the takes directory and no remote client can write elsewhere on this machine."""
from __future__ import annotations

import re
import threading
import time
from pathlib import Path

from bridge.errors import FaceBridgeError
from bridge.frame import FaceFrame
from bridge.sinks.base import Sink


class RecordSwitch(Sink):
    """A sink that forwards every frame to the take being recorded, if any. `open_take(directory)` makes the
    recorder (the session passes the take recorder's class: only the session knows concrete sinks)."""

    name = "recorder"
    queue_depth = 300  # as the take recorder's own: seconds of a slow disk before a frame is dropped (and counted)
    keeps_every_frame = True
    counts_skipped = True

    def __init__(self, open_take, takes_dir: str | Path = "takes", subject: str = "FaceBridge") -> None:
        super().__init__()
        self._open_take, self.takes_dir, self.subject = open_take, Path(takes_dir), subject
        self._take = None
        self._finished: list = []  # closed takes: their reports (frames lost, take.json unwritten) end the run
        self._lock = threading.Lock()

    @property
    def destination(self) -> str:
        take = self._take
        return str(take.directory) if take is not None else "off"

    @property
    def in_use(self) -> bool:
        """Whether any take was recorded in this run (frames it skipped while idle cost nothing)."""
        return self._take is not None or bool(self._finished)

    @property
    def recording(self) -> str | None:
        """The directory being recorded to, or None."""
        take = self._take
        return str(take.directory) if take is not None else None

    def begin(self, directory: str | Path | None = None) -> Path:
        """Open a new take (raises the recorder's SinkError for a used or unwritable directory)."""
        with self._lock:
            if self._take is not None:
                raise FaceBridgeError(f"already recording to {self._take.directory}", "stop that take first")
            path = Path(directory) if directory else new_take_path(self.takes_dir, self.subject)
            self._take = self._open_take(path)
            return path

    def start(self, directory: str | Path | None = None) -> tuple[bool, str]:
        """`begin`, answering (ok, message) instead of raising (for the page's button)."""
        try:
            return True, f"recording to {self.begin(directory)}"
        except FaceBridgeError as e:
            return False, str(e)

    def stop(self) -> tuple[bool, str]:
        with self._lock:
            take, self._take = self._take, None
        if take is None:
            return False, "not recording"
        take.close()
        self.errors += take.errors
        self._finished.append(take)
        return True, f"stopped; {take.sent} frames in {take.directory}"

    def send(self, frame: FaceFrame) -> None:
        with self._lock:  # start/stop (the monitor's thread) never swap the take under a send
            if self._take is None:
                return
            self._take.send(frame)
        self.sent += 1

    def skipped(self, count: int) -> None:
        take = self._take
        if take is not None:  # frames skipped while no take is open cost nothing
            take.skipped(count)

    def close(self) -> None:
        self.stop()

    def stats(self) -> dict:
        take = self._take
        takes = self._finished + ([take] if take is not None else [])
        return {**super().stats(), "recording": self.recording or "",
                "take_frames": take.sent if take is not None else 0,
                "lost": sum(t.lost for t in takes), "dropped": sum(t.dropped for t in takes)}

    def report(self) -> tuple[str | None, bool]:
        """Each take's own report (frames that did not reach the disk fail the run), else the base one."""
        take = self._take
        reports = [t.report() for t in self._finished + ([take] if take is not None else [])]
        lines = [line for line, _ in reports if line]
        if lines:
            return "\n".join(lines), any(failed for _, failed in reports)
        return super().report()


def safe_name(subject: str) -> str:
    """`subject` as one file name: letters, digits, `_`, `-` and single dots kept, any other run of characters (a
    path separator, `..`, a control character, a space) one `_`, none at either end (so never `.` or `..`)."""
    name = re.sub(r"(?:[^\w.-]|\.\.)+", "_", subject, flags=re.ASCII)
    return re.sub(r"_+", "_", name).strip("._-")[:64] or "take"


def new_take_path(takes_dir: Path, subject: str) -> Path:
    """A take directory inside `takes_dir` that does not exist yet: the subject, the date and time to the
    millisecond, numbered when two takes start within the same millisecond."""
    now = time.time()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f"-{int(now * 1000) % 1000:03d}"
    base = f"{safe_name(subject)}-{stamp}"
    path, number = takes_dir / base, 1
    while path.exists() or path.is_symlink():
        number += 1
        path = takes_dir / f"{base}-{number}"
    return path
