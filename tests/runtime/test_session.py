"""The run summary (bridge/runtime/session.py): what the source could not deliver and what each output lost are
said in the last lines."""
from __future__ import annotations

import numpy as np

from bridge.runtime.runner import BridgeRunner, sink_labels
from bridge.runtime.summary import summarise
from bridge.sinks.recorder import TakeRecorder
from bridge.sources.files import VideoFileSource
from tests.runtime.test_runner import describe
from tests.sources.test_files import _video


def test_the_summary_names_the_damaged_frames_a_video_source_skipped(tmp_path):
    clip = tmp_path / "clip.mp4"
    _video(clip, 90)
    data = bytearray(clip.read_bytes())
    a, b = len(data) * 4 // 10, len(data) * 55 // 100
    data[a:b] = np.random.default_rng(3).integers(0, 256, b - a, dtype=np.uint8).tobytes()
    clip.write_bytes(bytes(data))
    source = VideoFileSource(clip, realtime=False)
    recorder = TakeRecorder(tmp_path / "take")
    stats = BridgeRunner(source, describe, [recorder], status=False).run().snapshot()
    summary = summarise(stats, [recorder], sink_labels([recorder]), source)
    assert any(n.startswith(f"video {clip}: ") and "damaged frame" in n for n in summary.notes), summary.notes
    assert not summary.failed and summary.sinks["recorder"]["frames"] == stats.sent
    # a recording that lost frames to a full disk fails the run: tests/e2e/test_disk_full.py, on a real full disk
