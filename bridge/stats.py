"""Run statistics: totals since the start, cumulative latency histograms, and one rolling window of recent frames
that every reader shares.

The status line, gRPC `GetStatus`, the monitor page and the Prometheus metrics read the same `RunStats`, so they
never disagree. Writers are the runner's threads, the output guard, the model swapper and the update watch; every
read goes through one lock and returns plain numbers (a frozen `StatsSnapshot`, or `histograms()` for metrics).
"""
from __future__ import annotations

import bisect
import threading
import time
from dataclasses import dataclass, field

import numpy as np

WINDOW_S = 5.0  # recent frames: fps and latency percentiles describe the last few seconds, not the whole run
WINDOW_MAX = 1200  # samples kept at most (a 240 fps source over the window)
# Histogram bucket upper bounds in milliseconds (Prometheus reads them as seconds): a model stage takes 0.1 to
# 20 ms on a CPU, capture-to-send 10 to 100 ms; the upper buckets catch stalls.
BUCKETS_MS = (0.25, 0.5, 1.0, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 250.0, 500.0,
              1000.0, 2500.0)
CAPTURE_TO_SEND = "capture_to_send"  # the histogram of the whole route, beside the per-stage ones


class RollingWindow:
    """(time, value) samples of the last `seconds` (at most `maxlen`): rate and percentiles of what is recent.

    A numpy ring buffer: adding is two array writes, and a reader selects the recent samples in one vectorised
    pass, so pages asking 10 times a second over full windows cost microseconds, not a Python loop."""

    def __init__(self, seconds: float = WINDOW_S, maxlen: int = WINDOW_MAX) -> None:
        self.seconds = seconds
        self._t = np.full(maxlen, -np.inf)
        self._v = np.zeros(maxlen)
        self._added = 0

    def add(self, t: float, value: float = 0.0) -> None:
        i = self._added % len(self._t)
        self._t[i], self._v[i] = t, value
        self._added += 1

    def _recent(self, now: float) -> np.ndarray:
        return self._t >= now - self.seconds

    def rate(self, now: float) -> float:
        """Samples a second over the window (0 with fewer than two samples)."""
        times = self._t[self._recent(now)]
        if times.size < 2:
            return 0.0
        span = float(times.max() - times.min())
        return (times.size - 1) / span if span > 0 else 0.0

    def percentiles(self, now: float, qs=(50, 99)) -> list[float]:
        values = self._v[self._recent(now)]
        if not values.size:
            return [0.0] * len(qs)
        return [float(v) for v in np.percentile(values, qs)]

    def mean(self, now: float) -> float:
        """Mean value over the window (0 when it is empty)."""
        values = self._v[self._recent(now)]
        return float(values.mean()) if values.size else 0.0


class Histogram:
    """Cumulative counts of values (ms) under BUCKETS_MS, and their sum: what a Prometheus histogram exposes."""

    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS_MS) + 1)  # the last bucket is +Inf
        self.total = 0.0

    def observe(self, ms: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS_MS, ms)] += 1
        self.total += ms

    def cumulative(self) -> tuple[list[int], float]:
        running, out = 0, []
        for c in self.counts:
            running += c
            out.append(running)
        return out, self.total


@dataclass(frozen=True)
class StatsSnapshot:
    """What the run looks like now: totals since the start and the rolling window's figures."""

    captured: int
    processed: int
    sent: int
    faces: int
    bad_frames: int
    dropped: dict[str, int]  # reason -> frames: "capture" (a stage was busy), "send" (the sinks were busy),
    #                          "source" (the source skipped them: unreadable images, audio-only clock ticks)
    lipsync: dict[str, int]  # audio runs, outcome -> frames: "fused", "late" (no result within STALE_S of the
    #                          frame's instant), "none" (no result yet), "ended" (after the audio ended); empty
    #                          without --audio
    fps: float  # frames sent a second, over the window
    latency_ms_p50: float  # capture -> sent, over the window
    latency_ms_p99: float
    stage_ms: dict[str, tuple[float, float]]  # stage -> (p50, p99) ms over the window
    face_found: bool  # in the last frame processed
    uptime_s: float
    face_lost_ratio: float = 0.0  # share of the window's processed frames without a face
    guarded: dict[str, int] = field(default_factory=dict)  # "reason/stage" -> frames replaced by the output guard
    recreated: dict[str, int] = field(default_factory=dict)  # stage -> model sessions recreated
    engine_builds: dict[str, int] = field(default_factory=dict)  # model -> sessions built while running
    engine_swaps: dict[str, int] = field(default_factory=dict)  # model -> sessions swapped in between two frames
    last_guard: str = ""  # the output guard's latest event, in words
    sinks: dict[str, dict] = field(default_factory=dict)  # name -> destination, sent, errors, ...
    releases: dict[str, int] = field(default_factory=dict)  # model -> installed release now active (0: shipped)
    sink_dropped: dict[str, int] = field(default_factory=dict)  # sink -> frames it missed being slower than the
    # stream (the other sinks still got them; not part of dropped_total)
    swaps_refused: dict[str, int] = field(default_factory=dict)  # model -> replacements refused (live swap)
    update_status: str = "none"  # the update loop's state (updates/): none, checking, staged, installed, failed...
    models_loaded: bool = False
    rolled_back: dict[str, int] = field(default_factory=dict)  # model -> the release that failed in service and
    # was rolled back (runtime/fallback.py)
    since_last_sent_s: float | None = None  # seconds since a frame last reached the sinks; None before the first

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    @property
    def face_ratio(self) -> float:
        return self.faces / self.processed if self.processed else 0.0

    @property
    def guarded_total(self) -> int:
        return sum(self.guarded.values())

    @property
    def lipsync_frames(self) -> int:
        """Frames described while the audio played (the ones lip-sync could have reached)."""
        return sum(n for k, n in self.lipsync.items() if k != "ended")

    @property
    def fused_ratio(self) -> float:
        """Frames that carried the audio mouth, of those described while the audio played (0 without --audio)."""
        return self.lipsync.get("fused", 0) / self.lipsync_frames if self.lipsync_frames else 0.0


@dataclass
class RunStats:
    captured: int = 0
    processed: int = 0
    sent: int = 0
    faces: int = 0
    bad_frames: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {"capture": 0, "send": 0})
    sink_dropped: dict[str, int] = field(default_factory=dict)
    lipsync: dict[str, int] = field(default_factory=dict)
    last_face: bool = False
    releases: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    guarded: dict[str, int] = field(default_factory=dict)
    recreated: dict[str, int] = field(default_factory=dict)
    engine_builds: dict[str, int] = field(default_factory=dict)
    engine_swaps: dict[str, int] = field(default_factory=dict)
    swaps_refused: dict[str, int] = field(default_factory=dict)
    last_guard: str = ""
    update_status: str = "none"
    models_loaded: bool = False
    rolled_back: dict[str, int] = field(default_factory=dict)
    last_sent: float | None = None  # perf_counter of the last frame sent
    audio_only: bool = False  # --audio-only: no camera, so the status line shows the mode, not "face NO"
    _sinks: list = field(default_factory=list)  # Sink objects whose counters snapshots read
    _sends: RollingWindow = field(default_factory=RollingWindow)  # value: capture -> sent ms
    _faces: RollingWindow = field(default_factory=RollingWindow)  # value: 1 face lost, 0 found
    _stages: dict[str, RollingWindow] = field(default_factory=dict)
    _histograms: dict[str, Histogram] = field(default_factory=dict)
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
            self._faces.add(now, 0.0 if face_found else 1.0)
            for stage, ms in latencies_ms.items():
                self._stages.setdefault(stage, RollingWindow()).add(now, ms)
                self._histogram(stage).observe(ms)

    def frame_sent(self, latency_ms: float, now: float) -> None:
        with self._lock:
            self.sent += 1
            self.last_sent = now
            self._sends.add(now, latency_ms)
            self._histogram(CAPTURE_TO_SEND).observe(latency_ms)

    def set_dropped(self, reason: str, frames: int) -> None:
        with self._lock:
            self.dropped[reason] = frames

    def _histogram(self, name: str) -> Histogram:
        h = self._histograms.get(name)
        if h is None:
            h = self._histograms[name] = Histogram()
        return h

    # --- writers (the session, the output guard, model swaps, the update loop) ----------------------------------
    def attach_sinks(self, sinks: list) -> None:
        """The sinks whose counters (`stats()`) and `destination` every snapshot reports."""
        with self._lock:
            self._sinks = list(sinks)

    def set_models_loaded(self, loaded: bool = True) -> None:
        with self._lock:
            self.models_loaded = loaded

    def frame_guarded(self, reason: str, stage: str, detail: str) -> None:
        with self._lock:
            key = f"{reason}/{stage}"
            self.guarded[key] = self.guarded.get(key, 0) + 1
            self.last_guard = detail

    def _bump(self, counts: dict[str, int], stage: str) -> None:
        with self._lock:
            counts[stage] = counts.get(stage, 0) + 1

    def session_recreated(self, stage: str) -> None:
        self._bump(self.recreated, stage)

    def swap_event(self, event) -> None:
        """A runtime.swap.SwapEvent: a replacement built and swapped in, or refused (the old model serves on)."""
        if event.ok:
            self._bump(self.engine_builds, event.model)
            self._bump(self.engine_swaps, event.model)
        else:
            self._bump(self.swaps_refused, event.model)

    def set_release(self, model: str, release: int) -> None:
        """The release of `model` now active (0: the shipped one), from the update watch."""
        with self._lock:
            self.releases = {**self.releases, model: release}

    def release_rolled_back(self, model: str, release: int) -> None:
        """A release of `model` failed in service and is being rolled back (runtime/fallback.py)."""
        with self._lock:
            self.rolled_back = {**self.rolled_back, model: release}
            self.update_status = "rolled_back"

    def set_sink_dropped(self, per_sink: dict[str, int]) -> None:
        with self._lock:
            self.sink_dropped = dict(per_sink)

    def set_update_status(self, status: str) -> None:
        with self._lock:
            self.update_status = status

    def lipsync_outcome(self, outcome: str) -> None:
        """One frame of an audio run: "fused", "late", "none" or "ended" (bridge.audio.run_audio)."""
        with self._lock:
            self.lipsync[outcome] = self.lipsync.get(outcome, 0) + 1

    # --- readers ------------------------------------------------------------------------------------------------
    def snapshot(self) -> StatsSnapshot:
        now = time.perf_counter()
        sinks = self._sink_stats()
        with self._lock:
            p50, p99 = self._sends.percentiles(now)
            return StatsSnapshot(
                captured=self.captured, processed=self.processed, sent=self.sent, faces=self.faces,
                bad_frames=self.bad_frames, dropped=dict(self.dropped), lipsync=dict(self.lipsync),
                fps=self._sends.rate(now),
                latency_ms_p50=p50, latency_ms_p99=p99,
                stage_ms={k: tuple(w.percentiles(now)) for k, w in self._stages.items()},
                face_found=self.last_face, uptime_s=now - self.started, face_lost_ratio=self._faces.mean(now),
                guarded=dict(self.guarded), recreated=dict(self.recreated), engine_builds=dict(self.engine_builds),
                engine_swaps=dict(self.engine_swaps), last_guard=self.last_guard, sinks=sinks,
                releases=dict(self.releases), swaps_refused=dict(self.swaps_refused),
                update_status=self.update_status, models_loaded=self.models_loaded, rolled_back=dict(self.rolled_back),
                since_last_sent_s=None if self.last_sent is None else now - self.last_sent,
                sink_dropped=dict(self.sink_dropped))

    def _sink_stats(self) -> dict[str, dict]:
        with self._lock:
            sinks = list(self._sinks)
        out = {}
        for sink in sinks:  # each sink's own counters (outside our lock: a sink may take its own)
            out[sink.name] = {"destination": getattr(sink, "destination", ""), **sink.stats()}
        return out

    def histograms(self) -> dict[str, tuple[list[int], float]]:
        """name -> (cumulative counts under BUCKETS_MS then +Inf, sum of ms) since the start."""
        with self._lock:
            return {name: h.cumulative() for name, h in self._histograms.items()}

    def fps(self) -> float:
        return self.snapshot().fps

    def latency_percentiles(self) -> tuple[float, float]:
        s = self.snapshot()
        return s.latency_ms_p50, s.latency_ms_p99

    def face_ratio(self) -> float:
        return self.snapshot().face_ratio

    def status_line(self) -> str:
        s = self.snapshot()
        face = "face yes" if s.face_found else "face NO"
        if self.audio_only:
            face = "audio only (no camera)"
        guard = f" | guarded {s.guarded_total}" if s.guarded else ""
        installed = " ".join(f"{m} r{r}" for m, r in sorted(s.releases.items()) if r)
        slow = ", ".join(f"{name} {n}" for name, n in s.sink_dropped.items() if n)
        lipsync = f" | lip-sync {100 * s.fused_ratio:3.0f}%" if s.lipsync_frames else ""
        rolled = " ".join(f"{m} r{r}" for m, r in sorted(s.rolled_back.items()))
        return (f"{s.fps:5.1f} fps | latency p50 {s.latency_ms_p50:5.1f} ms p99 {s.latency_ms_p99:5.1f} ms | "
                f"dropped {s.dropped_total}" + (f" (slow sinks: {slow})" if slow else "") +
                f" | {face}{lipsync} | frames {s.sent}{guard}" + (f" | release {installed}" if installed else "")
                + (f" | rolled back {rolled}" if rolled else ""))
