"""The lip-sync results of the last few seconds, looked up by instant or by media time.

A video frame asks for the result describing its own capture instant (`at`), not the newest one, so a frame that
waited in a busy pipeline still meets the mouth of its own moment. A stream followed in step (a file whose frames
are all kept) asks by media time (`first_at_media`). Writer: the lip-sync thread (or the caller's, in step);
readers: the stage threads. One lock guards everything.
"""
from __future__ import annotations

import bisect
import collections
import threading

RECENT_S = 10.0  # results kept: longer than a frame waits in a busy lossless pipeline
RESULTS_PER_S = 100  # one result per 10 ms hop


class RecentResults:
    def __init__(self, seconds: float = RECENT_S) -> None:
        self._results: collections.deque = collections.deque(maxlen=int(seconds * RESULTS_PER_S))
        self._lock = threading.Lock()

    def add(self, result) -> None:
        with self._lock:
            self._results.append(result)

    def __iter__(self):
        with self._lock:
            return iter(list(self._results))

    def at(self, t_mono: float):
        """The result whose instant (t_capture_mono) is nearest `t_mono`; None before the first."""
        with self._lock:
            recent = list(self._results)
        if not recent:
            return None
        i = bisect.bisect_left([r.t_capture_mono for r in recent], t_mono)
        return min(recent[max(0, i - 1):i + 1], key=lambda r: abs(r.t_capture_mono - t_mono))

    def first_at_media(self, t_media: float):
        """The first result at or after media time `t_media`; None when there is none."""
        with self._lock:
            recent = list(self._results)
        i = bisect.bisect_left([r.t_media for r in recent], t_media)
        return recent[i] if i < len(recent) else None
