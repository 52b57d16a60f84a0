"""Prometheus metrics of a bridge, read from its one `RunStats` at every scrape (nothing is counted twice).

`metrics_registry(stats, info)` gives a private `CollectorRegistry` (never the global one, so several bridges or
streams in one process do not collide) with the bridge's metrics and the process' own (memory, CPU, open files).
It needs only a `RunStats`, not a running session, so `facebridge serve` exposes the same metrics. Latencies
are histograms in seconds since the start; fps and the face-lost ratio are gauges over the stats' rolling window.
"""
from __future__ import annotations

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    StateSetMetricFamily,
)
from prometheus_client.registry import Collector

from bridge.stats import BUCKETS_MS, CAPTURE_TO_SEND, RunStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# What the update loop (bridge/updates/) reports; an unknown status is shown as well.
UPDATE_STATES = ("none", "checking", "downloading", "verifying", "staged", "installed", "rolled_back", "failed")


def _counter(name: str, doc: str, labels: tuple[str, ...] = (), values: dict | None = None, total=None):
    family = CounterMetricFamily(name, doc, labels=list(labels))
    if values is None:
        family.add_metric([], total)
    else:
        for key, value in sorted(values.items()):
            family.add_metric(list(key) if isinstance(key, tuple) else [key], value)
    return family


class StatsCollector(Collector):
    """Turns one RunStats (and a few facts: version, backend, subject) into metric families. `info` is read at
    each scrape, so facts added to the same dict later (the backend, once models load) appear."""

    def __init__(self, stats: RunStats, info: dict[str, str] | None = None) -> None:
        self.stats, self.info = stats, info if info is not None else {}

    def collect(self):
        s = self.stats.snapshot()
        if self.info:
            yield InfoMetricFamily("facebridge_bridge", "what this bridge runs", value=self.info)
        yield _counter("facebridge_frames_captured", "frames read from the source", total=s.captured)
        yield _counter("facebridge_frames_processed", "frames the pipeline finished", total=s.processed)
        yield _counter("facebridge_frames_sent", "frames handed to the sinks", total=s.sent)
        yield _counter("facebridge_frames_bad", "frames that could not be processed and were skipped",
                       total=s.bad_frames)
        yield _counter("facebridge_frames_dropped", "frames dropped by reason (capture: a stage was busy, send: "
                       "the sinks were)", ("reason",), s.dropped)
        yield _counter("facebridge_guard_replaced_frames", "frames the output guard replaced by the last good one",
                       ("reason", "stage"), {tuple(k.split("/", 1)): v for k, v in s.guarded.items()})
        yield _counter("facebridge_sessions_recreated", "model sessions recreated after persistent bad output",
                       ("stage",), s.recreated)
        yield _counter("facebridge_engine_builds", "model sessions built while running (releases, recreations)",
                       ("model",), s.engine_builds)
        yield _counter("facebridge_engine_swaps", "model sessions swapped in between two frames", ("model",),
                       s.engine_swaps)
        yield _counter("facebridge_sink_packets", "frames each sink sent", ("sink",),
                       {name: v.get("sent", 0) for name, v in s.sinks.items()})
        yield _counter("facebridge_sink_errors", "sends each sink could not make", ("sink",),
                       {name: v.get("errors", 0) for name, v in s.sinks.items()})
        fps = GaugeMetricFamily("facebridge_fps", "frames sent a second over the last seconds")
        fps.add_metric([], s.fps)
        yield fps
        lost = GaugeMetricFamily("facebridge_face_lost_ratio", "share of the last seconds' frames without a face")
        lost.add_metric([], s.face_lost_ratio)
        yield lost
        loaded = GaugeMetricFamily("facebridge_models_loaded", "1 once every model of the pipeline is loaded")
        loaded.add_metric([], 1.0 if s.models_loaded else 0.0)
        yield loaded
        up = GaugeMetricFamily("facebridge_uptime_seconds", "seconds since the bridge started")
        up.add_metric([], s.uptime_s)
        yield up
        states = list(UPDATE_STATES) + ([s.update_status] if s.update_status not in UPDATE_STATES else [])
        yield StateSetMetricFamily("facebridge_update_status", "the update loop's state",
                                   {state: state == s.update_status for state in states})
        active = GaugeMetricFamily("facebridge_active_release", "the installed release each model runs (0: the "
                                   "shipped model)", labels=["model"])
        for model, release in sorted(s.releases.items()):
            active.add_metric([model], float(release))
        yield active
        rolled = GaugeMetricFamily("facebridge_release_rolled_back", "the release of each model that failed in "
                                   "service and was rolled back (runtime/fallback.py)", labels=["model"])
        for model, release in sorted(s.rolled_back.items()):
            rolled.add_metric([model], float(release))
        yield rolled
        yield _counter("facebridge_swaps_refused", "replacement models refused (failed to build or to match their "
                       "reference); the old model served on", ("model",), s.swaps_refused)
        yield from self._histograms()

    def _histograms(self):
        bounds = [f"{ms / 1000.0:g}" for ms in BUCKETS_MS] + ["+Inf"]
        stages = HistogramMetricFamily("facebridge_stage_latency_seconds", "time each pipeline stage took",
                                       labels=["stage"])
        route = HistogramMetricFamily("facebridge_capture_to_send_seconds",
                                      "from the camera's capture to the sinks' send")
        for name, (cumulative, total_ms) in sorted(self.stats.histograms().items()):
            buckets = list(zip(bounds, cumulative))
            if name == CAPTURE_TO_SEND:
                route.add_metric([], buckets, total_ms / 1000.0)
            else:
                stages.add_metric([name], buckets, total_ms / 1000.0)
        yield stages
        yield route


def metrics_registry(stats: RunStats, info: dict[str, str] | None = None) -> CollectorRegistry:
    """A registry with the bridge's metrics and the process' own (process_resident_memory_bytes, ...)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector(stats, info))
    ProcessCollector(registry=registry)
    return registry


def metrics_text(registry: CollectorRegistry) -> bytes:
    """The Prometheus text exposition of `registry`."""
    return generate_latest(registry)
