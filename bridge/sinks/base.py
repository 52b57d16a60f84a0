"""The sink interface: a sink reads FaceFrames and never reaches back into stages."""
from __future__ import annotations

import logging
import time

from bridge.frame import FaceFrame

log = logging.getLogger(__name__)
WARNING_INTERVAL_S = 10.0  # a receiver that is not running yet is normal: say so once, then now and then


class Sink:
    """Base class. `send` must not raise for a transient failure (receiver gone, buffer full): count it
    with `_failed` so the stream goes on; raise only from the constructor for unusable configuration."""

    name = "sink"
    queue_depth = 2  # frames that may wait for this sink (its own thread sends them); live outputs want the newest
    failure_hint = "is the receiver running?"  # what the run summary says about failed sends
    destination = ""  # where it sends, in words (an address, a directory), for the monitor and the metrics
    only_subject: str | None = None  # with several faces: send only this subject's frames (None: every subject)
    keeps_every_frame = False  # a run that keeps every frame (a file being recorded) waits for this sink's queue
    counts_skipped = False  # `skipped` counts, and `report` names, the frames its queue dropped before it got them
    generated_token = False  # its listener's token was made for this run (`auto`): the command prints it once

    def __init__(self) -> None:
        self.sent = 0
        self.errors = 0
        self._last_warning: float | None = None

    def send(self, frame: FaceFrame) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def skipped(self, count: int) -> None:
        """`count` frames were dropped from this sink's queue before it got them (it was slower than the stream);
        called from the thread that feeds the queue. A sink that keeps a record (the take) says so in it."""

    def _failed(self, what: str, exc: BaseException) -> None:
        """Count a failed send; warn on the first and then at most every WARNING_INTERVAL_S, naming the fix."""
        self.errors += 1
        now = time.monotonic()
        if self._last_warning is None or now - self._last_warning > WARNING_INTERVAL_S:
            self._last_warning = now
            log.warning("%s: %s (%s); %d failed so far, the stream goes on", self.name, what, exc, self.errors)

    def stats(self) -> dict:
        return {"sent": self.sent, "errors": self.errors}

    def label(self) -> str:
        """The sink and where it sends, for the start-up line."""
        return self.name

    def report(self) -> tuple[str | None, bool]:
        """(one summary line or None, whether frames meant to be kept were lost: the run then fails)."""
        if self.errors:
            return f"{self.name}: {self.errors} sends failed ({self.failure_hint})", False
        return None, False
