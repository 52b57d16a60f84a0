"""What a finished run tells its user: what was sent, and every shortfall with its cause and what to do about it.

A degradation is never silent: the source's and each sink's own reports (a failing output, frames a slow output
missed, a take that lost frames, which fails the run), frames dropped (by reason), lip-sync results that missed
their frames, an audio-only take that covers less than its file, and fewer frames than --max-frames asked are
each one line. The numbers come from the run's one RunStats (bridge/stats.py), the same the status line
shows.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from bridge.audio.fusion import STALE_S
from bridge.sinks.base import Sink
from bridge.sources.base import SourceMode
from bridge.stats import StatsSnapshot

COVERAGE_WARNING = 0.9  # an audio-only take covering less of its file than this is flagged


@dataclass(frozen=True)
class RunSummary:
    """What a finished run did: the statistics' last snapshot, each sink's counters (by its label), the lines the
    source and sinks reported (`notes`), `failed` when frames meant to be kept were lost, and what the summary
    needs to explain a shortfall."""

    stats: StatsSnapshot
    sinks: dict[str, dict]
    notes: list[str] = field(default_factory=list)
    failed: bool = False
    source: str = ""  # the source's name
    mode: SourceMode = SourceMode.LIVE
    lossless: bool = False
    max_frames: int | None = None
    frame_rate: float = 0.0  # the source's frames per second
    audio_only: bool = False
    audio_s: float | None = None  # an audio-only run from a file: the file's length
    interrupted: bool = False  # ended by Ctrl-C (the command exits 130 after the summary)


def summarise(stats: StatsSnapshot, sinks: list[Sink], labels: list[str], source=None, **run) -> RunSummary:
    """The run summary from the source's and the sinks' own reports and the frames each sink missed being slower
    than the stream; `run` holds RunSummary's remaining fields (mode, lossless, max_frames, ...)."""
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
        # the take names its own (exactly the frames it lacks); the idle record switch lacks none
        if counters[label]["queue_dropped"] and not sink.counts_skipped and getattr(sink, "in_use", True):
            notes.append(f"{label}: {counters[label]['queue_dropped']} frames skipped for this output alone "
                         "(it was slower than the stream; the other outputs got them)")
    return RunSummary(stats=stats, sinks=counters, notes=notes, failed=failed, source=getattr(source, "name", ""),
                      **run)


def _dropped(summary: RunSummary) -> str | None:
    s = summary.stats
    if not s.dropped_total:
        return None
    parts = []
    if s.dropped.get("capture"):
        parts.append(f"{s.dropped['capture']} while a stage was still busy with an earlier frame")
    if s.dropped.get("send"):
        parts.append(f"{s.dropped['send']} while the outputs were still busy")
    if s.dropped.get("source"):
        why = "ticks the audio-only clock skipped when it fell behind" if summary.audio_only else \
            "unreadable images skipped"
        parts.append(f"{s.dropped['source']} {why}")
    if summary.mode is SourceMode.PACED and not summary.lossless:
        fix = "the pipeline is slower than the file's frame rate here; --record or --fast keeps every frame"
    elif summary.mode is SourceMode.LIVE:
        fix = ("a live source never waits for a slower pipeline, the newest frame goes first; a faster backend "
               "(`facebridge engines list`), a lower --camera-fps or a less busy machine drops fewer")
    else:
        fix = "the pipeline fell behind"
    return f"dropped {s.dropped_total} of {s.captured} frames: {', '.join(parts)} ({fix})"


def _lipsync(summary: RunSummary) -> str | None:
    s = summary.stats
    if not s.lipsync:
        return None
    fused, late, none, ended = (s.lipsync.get(k, 0) for k in ("fused", "late", "none", "ended"))
    line = (f"lip-sync: mouth from audio in {fused} of the {s.lipsync_frames} frames described while the audio "
            f"played ({100 * s.fused_ratio:.0f}%)")
    missed = [f"{ended} more came after the audio ended"] if ended else []
    if late:
        missed.append(f"{late} had no lip-sync result within {STALE_S * 1000:.0f} ms of their instant (lip-sync "
                      "fell behind the video: a busy CPU)")
    if none:
        missed.append(f"{none} came before the first lip-sync result")
    return line + ("; " + "; ".join(missed) if missed else "")


def _coverage(summary: RunSummary) -> str | None:
    """An audio-only run from a file: each frame stands for 1/frame_rate s of it."""
    if not summary.audio_s or not summary.frame_rate:
        return None
    covered = min(summary.stats.sent / summary.frame_rate, summary.audio_s)
    share = covered / summary.audio_s
    line = f"audio: the frames sent cover {covered:.2f} s of the {summary.audio_s:.2f} s file ({100 * share:.0f}%)"
    if share < COVERAGE_WARNING:
        stopped = summary.max_frames is not None and summary.stats.sent >= summary.max_frames
        line += ": --max-frames stopped it" if stopped else ": stopped early, or frames were dropped (above)"
    return line


def summary_lines(summary: RunSummary) -> list[str]:
    """The lines `facebridge run` prints at the end, most important first."""
    s = summary.stats
    lines = list(summary.notes)  # the source's and the sinks' own lines (a failing output, a take's losses)
    face = "" if summary.audio_only else f", face found in {100 * s.face_ratio:.0f}%"
    guard = f", {s.guarded_total} replaced by the output guard" if s.guarded else ""
    lines.append(f"{s.sent} frames sent{face}, {s.dropped_total} dropped, {s.bad_frames} bad{guard}")
    lines += [line for line in (_dropped(summary), _lipsync(summary), _coverage(summary)) if line]
    if summary.max_frames is not None and s.sent < summary.max_frames:
        cause = "the run was stopped (Ctrl-C)" if summary.interrupted else "the source ended or the run was stopped"
        lines.append(f"sent {s.sent} of the {summary.max_frames} frames --max-frames asked for: {cause} first")
    return lines
