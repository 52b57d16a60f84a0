"""RecordSwitch: takes start and stop while the stream runs, each in a new directory, never over an old one."""
from __future__ import annotations

from bridge.formats.take import TakeReader
from bridge.runtime.recording import RecordSwitch
from bridge.sinks.recorder import TakeRecorder
from tests.helpers import face_frame


def test_takes_start_and_stop_while_frames_flow_and_never_reuse_a_directory(tmp_path):
    switch = RecordSwitch(TakeRecorder, tmp_path / "takes", subject="Ada")
    switch.send(face_frame(0))  # off: nothing recorded, nothing counted
    ok, message = switch.start()
    assert ok and switch.recording and switch.recording.startswith(str(tmp_path / "takes" / "Ada-"))
    assert switch.start() == (False, f"already recording to {switch.recording}. stop that take first.")
    for seq in range(1, 6):
        switch.send(face_frame(seq))
    take = switch.recording
    ok, message = switch.stop()
    assert ok and "5 frames" in message and switch.recording is None and switch.destination == "off"
    assert [f.seq for f in TakeReader(take)] == [1, 2, 3, 4, 5]
    assert switch.stop() == (False, "not recording")
    ok, message = switch.start(take)
    assert not ok and "never overwritten" in message
