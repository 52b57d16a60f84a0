"""RunControl's calibration against a real running session (sample video, the real pipeline): one at a time, the
profile in use stays while measuring and after a failure, the new one is stored and switched to only on success,
and a run from the bundled sample never overwrites the stored profile."""
from __future__ import annotations

import threading
import time

from bridge.calibration import CalibrationProfile
from bridge.runtime.session import BridgeSession, OutputConfig, RunConfig
from bridge.sources.files import SAMPLE_PATH
from tests.helpers import face_frame

OFF = OutputConfig(llf=None, vmc=None)


def _stored(subject: str) -> CalibrationProfile:
    profile = CalibrationProfile.from_frames(subject, [face_frame(i, smile=0.3) for i in range(10)])
    profile.save()
    return profile


def _running(config: RunConfig):
    session = BridgeSession(config).open()
    thread = threading.Thread(target=session.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while session.control.state != "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert session.control.state == "running"
    session.control.calibration_timeout_s = 300.0  # a loaded CI box may deliver a frame or two a second
    session.control.calibration_frames = 10
    return session, thread


def test_calibrations_run_one_at_a_time_and_switch_only_when_stored(isolated_home):
    stored = _stored("Actor")
    session, thread = _running(RunConfig(source=str(SAMPLE_PATH), subject="Actor", outputs=OFF, status_line=False,
                                         max_frames=100_000))
    try:
        control, pipeline = session.control, session.pipeline
        old = pipeline.profile
        assert old is not None and old.neutral_blendshapes == stored.neutral_blendshapes
        answers, during = [], []

        def call():
            answers.append(control.calibrate("Actor"))

        callers = [threading.Thread(target=call) for _ in range(8)]
        for c in callers:
            c.start()
        while pipeline.calibration_tap is None and any(c.is_alive() for c in callers):
            time.sleep(0.005)
        during.append(pipeline.profile)  # the stream keeps the profile in use while measuring
        for c in callers:
            c.join(400)
        ok = [message for good, message in answers if good]
        refused = [message for good, message in answers if not good]
        assert len(ok) >= 1 and len(ok) + len(refused) == 8, [m for m in refused if "already" not in m]
        assert all("already running" in m for m in refused), refused
        assert during == [old] and pipeline.profile is not old and pipeline.calibration_tap is None
        assert CalibrationProfile.load("Actor").created == pipeline.profile.created  # stored, then switched
    finally:
        session.runner.stop()
        thread.join(60)


def test_a_failed_calibration_keeps_the_profile_in_use(isolated_home):
    _stored("Actor")
    session, thread = _running(RunConfig(source=str(SAMPLE_PATH), subject="Actor", outputs=OFF, status_line=False,
                                         max_frames=100_000))
    try:
        control, pipeline = session.control, session.pipeline
        old = pipeline.profile
        control.calibration_timeout_s = 0.0  # no frame can arrive in time: the calibration fails
        good, message = control.calibrate("Actor")
        assert not good and "calibration in use is kept" in message
        assert pipeline.profile is old and pipeline.calibration_tap is None
        assert CalibrationProfile.load("Actor").created == old.created
    finally:
        session.runner.stop()
        thread.join(60)


def test_calibrating_a_sample_run_applies_to_the_run_and_keeps_the_stored_profile(isolated_home):
    stored = _stored("FaceBridge")
    before = stored.path().read_bytes()
    session, thread = _running(RunConfig(source="sample", outputs=OFF, status_line=False, max_frames=100_000))
    try:
        good, message = session.control.calibrate("FaceBridge")
        assert good and "for this run only" in message, message
        assert session.pipeline.profile.created != stored.created
        assert stored.path().read_bytes() == before
    finally:
        session.runner.stop()
        thread.join(60)
