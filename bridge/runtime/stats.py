"""Run statistics: totals since the start, and one rolling window of recent frames that every reader shares.

The status line, gRPC `GetStatus`, the monitor page and the metrics read the same `RunStats`, so they never
disagree. Writers are the runner's threads; every read goes through one lock and returns plain numbers.
"""
from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field

import numpy as np

WINDOW_S = 5.0  # recent frames: fps and latency percentiles describe the last few seconds, not the whole run
WINDOW_MAX = 1200  # samples kept at most (a 240 fps source over the window)


class RollingWindow:
    """(time, value) samples of the last `seconds` (at most `maxlen`): rate and percentiles of what is recent."""

    def __init__(self, seconds: float = WINDOW_S, maxlen: int = WINDOW_MAX) -> None:
        self.seconds = seconds
        self._samples: collections.deque[tuple[float, float]] = collections.deque(maxlen=maxlen)

    def add(self, t: float, value: float = 0.0) -> None:
        self._samples.append((t, value))

    def _recent(self, now: float) -> list[tuple[float, float]]:
        while self._samples and self._samples[0][0] < now - self.seconds:
            self._samples.popleft()
        return list(self._samples)

    def rate(self, now: float) -> float:
        """Samples a second over the window (0 with fewer than two samples)."""
        samples = self._recent(now)
        if len(samples) < 2 or samples[-1][0] <= samples[0][0]:
            return 0.0
        return (len(samples) - 1) / (samples[-1][0] - samples[0][0])

    def percentiles(self, now: float, qs=(50, 99)) -> list[float]:
        values = [v for _, v in self._recent(now)]
        if not values:
            return [0.0] * len(qs)
        return [float(v) for v in np.percentile(np.asarray(values), qs)]


@dataclass(frozen=True)
class StatsSnapshot:
    """What the run looks like now: totals since the start and the rolling window's figures."""

    captured: int
    processed: int
    sent: int
    faces: int
    bad_frames: int
    dropped: dict[str, int]  # reason -> frames: "capture" (a stage was busy), "send" (the sinks were busy)
    fps: float  # frames sent a second, over the window
    latency_ms_p50: float  # capture -> sent, over the window
    latency_ms_p99: float
    stage_ms: dict[str, tuple[float, float]]  # stage -> (p50, p99) ms over the window
    face_found: bool  # in the last frame processed
    uptime_s: float
    releases: dict[str, int] = field(default_factory=dict)  # model -> installed release now active (0: shipped)
    sink_dropped: dict[str, int] = field(default_factory=dict)  # sink -> frames it missed being slower than the
    # stream (the other sinks still got them; not part of dropped_total)

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def face_ratio(self) -> float:
        return self.faces / self.processed if self.processed else 0.0


@dataclass
class RunStats:
    captured: int = 0
    processed: int = 0
    sent: int = 0
    faces: int = 0
    bad_frames: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"capture": 0, "send": 0})
    sink_dropped: dict[str, int] = field(default_factory=dict)
    last_face: bool = False
    releases: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    _sends: RollingWindow = field(default_factory=RollingWindow)  # value: capture -> sent ms
    _stages: dict[str, RollingWindow] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    # --- writers (the runner's threads) ---------------------------------------------------------------------------
    def frame_captured(self) -> None:
        with self._lock:
            self.captured += 1

    def frame_bad(self) -> None:
        with self._lock:
            self.bad_frames += 1

    def frame_processed(self, face_found: bool, latencies_ms: dict[str, float], now: float) -> None:
        with self._lock:
            self.processed += 1
            self.faces += int(face_found)
            self.last_face = face_found
            for stage, ms in latencies_ms.items():
                self._stages.setdefault(stage, RollingWindow()).add(now, ms)

    def frame_sent(self, latency_ms: float, now: float) -> None:
        with self._lock:
            self.sent += 1
            self._sends.add(now, latency_ms)

    def set_dropped(self, reason: str, frames: int) -> None:
        with self._lock:
            self.dropped[reason] = frames

    def set_release(self, model: str, release: int) -> None:
        with self._lock:
            self.releases = {**self.releases, model: release}

    def set_sink_dropped(self, per_sink: dict[str, int]) -> None:
        with self._lock:
            self.sink_dropped = dict(per_sink)

    # --- readers ------------------------------------------------------------------------------------------------
    def snapshot(self) -> StatsSnapshot:
        now = time.perf_counter()
        with self._lock:
            p50, p99 = self._sends.percentiles(now)
            return StatsSnapshot(
                captured=self.captured, processed=self.processed, sent=self.sent, faces=self.faces,
                bad_frames=self.bad_frames, dropped=dict(self.dropped), fps=self._sends.rate(now),
                latency_ms_p50=p50, latency_ms_p99=p99,
                stage_ms={k: tuple(w.percentiles(now)) for k, w in self._stages.items()},
                face_found=self.last_face, uptime_s=now - self.started, releases=self.releases,
                sink_dropped=dict(self.sink_dropped))

    def fps(self) -> float:
        return self.snapshot().fps

    def latency_percentiles(self) -> tuple[float, float]:
        s = self.snapshot()
        return s.latency_ms_p50, s.latency_ms_p99

    def face_ratio(self) -> float:
        return self.snapshot().face_ratio

    def status_line(self) -> str:
        s = self.snapshot()
        face = "yes" if s.face_found else "NO"
        installed = " ".join(f"{m} r{r}" for m, r in sorted(s.releases.items()) if r)
        slow = ", ".join(f"{name} {n}" for name, n in s.sink_dropped.items() if n)
        return (f"{s.fps:5.1f} fps | latency p50 {s.latency_ms_p50:5.1f} ms p99 {s.latency_ms_p99:5.1f} ms | "
                f"dropped {s.dropped_total}" + (f" (slow sinks: {slow})" if slow else "") +
                f" | face {face} | frames {s.sent}" + (f" | release {installed}" if installed else ""))
