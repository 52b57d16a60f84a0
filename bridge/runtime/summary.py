"""RunSummary: what a finished run did, told from the source's and the sinks' own reports: each sink's counters, the
frames a slow sink missed, and `failed` when frames meant to be kept were lost (BridgeSession.run returns it)."""
from __future__ import annotations

from dataclasses import dataclass, field

from bridge.runtime.stats import StatsSnapshot
from bridge.sinks.base import Sink


@dataclass(frozen=True)
class RunSummary:
    """What a finished run did: the statistics' last snapshot, each sink's counters, and the lines to tell the
    user (a sink's failures, frames a slow sink missed); `failed` when frames meant to be kept were lost."""

    stats: StatsSnapshot
    sinks: dict[str, dict]
    notes: list[str] = field(default_factory=list)
    failed: bool = False


def summarise(stats: StatsSnapshot, sinks: list[Sink], labels: list[str], source=None) -> RunSummary:
    """The run summary from the source's and the sinks' own reports and the frames each sink missed being slower
    than the stream."""
    notes, failed, counters = [], False, {}
    source_note = source.report() if source is not None and hasattr(source, "report") else None
    if source_note:
        notes.append(source_note)
    for sink, label in zip(sinks, labels):
        counters[label] = {**sink.stats(), "queue_dropped": stats.sink_dropped.get(label, 0)}
        line, lost = sink.report()
        if line:
            notes.append(line)
        failed = failed or lost
        if counters[label]["queue_dropped"]:
            notes.append(f"{label}: {counters[label]['queue_dropped']} frames skipped for this output alone "
                         "(it was slower than the stream; the other outputs got them)")
    return RunSummary(stats=stats, sinks=counters, notes=notes, failed=failed)
