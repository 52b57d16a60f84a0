"""The session: the run summary says what the source could not deliver and what each output lost in its last
lines; what it refuses at start, in one line, before any model loads (a subject Unreal cannot show, an option no
pipeline runs with, camera options without a camera); several Live Link Face targets."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.errors import FaceBridgeError
from bridge.pipeline import PipelineOptions
from bridge.runtime.runner import BridgeRunner, sink_labels
from bridge.runtime.session import (
    BridgeSession,
    OutputConfig,
    RunConfig,
    check_subject,
    close_all,
    llf_targets,
    open_sinks,
)
from bridge.runtime.summary import summarise
from bridge.sinks.recorder import TakeRecorder
from bridge.sources.files import VideoFileSource
from tests.helpers import udp_collector
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
    stats = BridgeRunner(source, [describe], [recorder], status=False).run().snapshot()
    recorder.close()
    summary = summarise(stats, [recorder], sink_labels([recorder]), source)
    assert any(n.startswith(f"video {clip}: ") and "damaged frame" in n for n in summary.notes), summary.notes
    assert not summary.failed and summary.sinks["recorder"]["frames"] == stats.sent
    # a recording that lost frames to a full disk fails the run: tests/e2e/test_disk_full.py, on a real full disk


DEFAULT = "127.0.0.1:11111"


def test_llf_targets_default_off_several_and_refusals():
    assert llf_targets(None, DEFAULT) == (DEFAULT,)
    assert llf_targets(["off"], DEFAULT) == ()
    assert llf_targets(["10.0.0.2:11111", "10.0.0.3:11111"], DEFAULT) == ("10.0.0.2:11111", "10.0.0.3:11111")
    with pytest.raises(FaceBridgeError, match="given twice"):
        llf_targets(["10.0.0.2:11111", "10.0.0.2:11111"], DEFAULT)
    with pytest.raises(FaceBridgeError, match="--llf off was given together with an address"):
        llf_targets(["off", "10.0.0.2:11111"], DEFAULT)


@pytest.mark.parametrize("subject, message", [("", "empty subject name"), ("  ", "empty subject name"),
                                              ("a" * 65, "65 bytes, the limit is 64"),
                                              ("小明" * 11, "66 bytes, the limit is 64"),
                                              ("tab\there", "control characters")])
def test_a_subject_unreal_cannot_show_is_refused_in_one_line(subject, message):
    with pytest.raises(FaceBridgeError) as e:
        check_subject(subject)
    assert message in str(e.value) and str(e.value).startswith("--subject") and "\n" not in str(e.value)


def test_a_subject_of_64_utf8_bytes_is_fine():
    assert check_subject("小明" * 10 + "abcd") == "小明" * 10 + "abcd"  # 60 + 4 bytes


@pytest.mark.parametrize("config, message", [
    (RunConfig(subject=""), "--subject"),
    (RunConfig(pipeline=PipelineOptions(smoothing=-1.0)), "--smoothing -1 is out of range"),
    (RunConfig(pipeline=PipelineOptions(smoothing=11.0)), "--smoothing 11 is out of range"),
    (RunConfig(camera_size=(0, 720)), "--camera-size 0x720"),
    (RunConfig(camera_fps=0.5), "--camera-fps 0.5 is out of range"),
])
def test_the_session_refuses_bad_options_before_anything_opens(config, message):
    with pytest.raises(FaceBridgeError, match=message):
        BridgeSession(config)


def test_camera_options_are_refused_for_a_file_source(isolated_home):
    session = BridgeSession(RunConfig(source="sample", camera_size=(1280, 720), outputs=OutputConfig(llf=(), vmc=None)))
    with pytest.raises(FaceBridgeError, match="apply to a camera, not to --source sample"):
        session.open()


def test_every_live_link_face_target_gets_its_own_sink_and_label():
    with udp_collector() as (port_a, packets_a), udp_collector() as (port_b, packets_b):
        sinks = open_sinks(OutputConfig(llf=(f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"), vmc=None))
        try:
            assert sink_labels(sinks) == [f"livelinkface 127.0.0.1:{port_a}",
                                                      f"livelinkface 127.0.0.1:{port_b}"]
        finally:
            close_all(sinks)
