"""The run summary names every shortfall with its cause and what to do: dropped frames by reason, lip-sync that
missed frames, an audio-only take shorter than its file, fewer frames than --max-frames asked."""
from __future__ import annotations

from bridge.runtime.session import RunSummary
from bridge.runtime.summary import summary_lines
from bridge.sources.base import SourceMode
from bridge.stats import RunStats


def _stats(sent: int, captured: int, dropped: dict | None = None, lipsync: dict | None = None) -> RunStats:
    stats = RunStats()
    stats.captured = captured
    stats.processed = stats.sent = stats.faces = sent
    for reason, n in (dropped or {}).items():
        stats.set_dropped(reason, n)
    for outcome, n in (lipsync or {}).items():
        for _ in range(n):
            stats.lipsync_outcome(outcome)
    return stats


def test_frames_dropped_from_a_paced_file_say_why_and_how_to_keep_them():
    summary = RunSummary(_stats(212, 300, {"capture": 80, "send": 8}).snapshot(), {}, mode=SourceMode.PACED,
                         max_frames=300)
    lines = summary_lines(summary)
    assert lines[0] == "212 frames sent, face found in 100%, 88 dropped, 0 bad"
    assert "dropped 88 of 300 frames: 80 while a stage was still busy" in lines[1]
    assert "8 while the outputs were still busy" in lines[1] and "--record or --fast keeps every frame" in lines[1]
    assert lines[-1].startswith("sent 212 of the 300 frames --max-frames asked for")


def test_a_live_source_that_drops_points_at_what_helps():
    line = summary_lines(RunSummary(_stats(90, 100, {"capture": 10}).snapshot(), {}, mode=SourceMode.LIVE))[1]
    assert "a live source never waits" in line and "--camera-fps" in line


def test_a_clean_run_is_one_line_and_the_sinks_own_reports_come_first():
    sinks = {"livelinkface": {"sent": 0, "errors": 20}, "vmc": {"sent": 20}}
    clean = summary_lines(RunSummary(_stats(20, 20).snapshot(), sinks, mode=SourceMode.FAST, lossless=True))
    assert clean == ["20 frames sent, face found in 100%, 0 dropped, 0 bad"]
    note = "livelinkface: 20 sends failed (is the receiver running?)"  # what the sink's report() said
    lines = summary_lines(RunSummary(_stats(20, 20).snapshot(), sinks, notes=[note], mode=SourceMode.FAST,
                                     lossless=True))
    assert lines == [note, "20 frames sent, face found in 100%, 0 dropped, 0 bad"]


def test_lip_sync_that_missed_frames_is_said_with_the_reason():
    stats = _stats(86, 86, lipsync={"fused": 70, "late": 10, "none": 2, "ended": 4})
    line = next(x for x in summary_lines(RunSummary(stats.snapshot(), {})) if x.startswith("lip-sync"))
    assert "mouth from audio in 70 of the 82 frames described while the audio played (85%)" in line
    assert "10 had no lip-sync result within 250 ms" in line and "2 came before the first" in line
    assert "4 more came after the audio ended" in line


def test_an_audio_only_take_shorter_than_its_file_is_flagged():
    stats = _stats(300, 300).snapshot()
    full = summary_lines(RunSummary(stats, {}, audio_only=True, frame_rate=60.0, audio_s=5.0))
    assert "face found" not in full[0] and full[-1] == "audio: the frames sent cover 5.00 s of the 5.00 s file (100%)"
    short = summary_lines(RunSummary(stats, {}, audio_only=True, frame_rate=60.0, audio_s=10.0, max_frames=300))
    assert short[-1].endswith("(50%): --max-frames stopped it")


def test_the_idle_record_switch_never_reports_skipped_frames_but_a_take_names_exactly_what_it_lacks(tmp_path):
    from bridge.runtime.recording import RecordSwitch
    from bridge.runtime.summary import summarise
    from bridge.sinks.recorder import TakeRecorder

    stats = RunStats()
    stats.set_sink_dropped({"recorder": 3})  # frames its queue let go while the stream ran
    idle = RecordSwitch(TakeRecorder, tmp_path / "takes")
    assert not any("recorder" in n for n in summarise(stats.snapshot(), [idle], ["recorder"]).notes)
    used = RecordSwitch(TakeRecorder, tmp_path / "takes")
    used.begin(tmp_path / "take")
    used.skipped(3)  # what the sink worker tells the take when its queue lets frames go
    used.stop()
    summary = summarise(stats.snapshot(), [used], ["recorder"])
    assert [n for n in summary.notes if n.startswith("recorder:")] == [
        "recorder: 3 of 3 frames were NOT recorded (3 the disk was slower than the stream for longer than the "
        f"recorder's queue holds); no frame landed, no take was left in {tmp_path / 'take'}"]
    assert summary.failed and not (tmp_path / "take").exists()
