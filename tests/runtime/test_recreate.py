"""The guard's session recreation goes through the live swap: the swapper's builder thread builds, the stage's own
thread takes the new session between two frames, the announced version stays, and a model already on its way is
not asked twice."""
from __future__ import annotations

import time

import numpy as np
import pytest

from bridge.frame import Frame
from bridge.pipeline import FacePipeline
from bridge.runtime.recreate import SessionRecreator, finite_on_zeros
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from bridge.stats import RunStats


@pytest.fixture(scope="module")
def pipeline():
    return FacePipeline()


def _wait_ready(swapper, seconds: float = 60.0) -> None:
    end = time.monotonic() + seconds
    while not swapper._ready and time.monotonic() < end:  # built and checked, waiting for its owner
        time.sleep(0.05)


def test_a_recreated_session_is_taken_by_its_stage_between_frames_under_the_same_version(pipeline):
    stats = RunStats()
    recreator = None
    swapper = ModelSwapper(on_event=lambda e: (stats.swap_event(e), recreator.on_event(e)))
    recreator = SessionRecreator(pipeline, swapper, stats)
    pipeline.use_swapper(swapper)
    try:
        old, version = pipeline.emotion.session, pipeline.model_versions["emotion"]
        recreator("emotion")
        recreator("emotion")  # on its way already: not asked twice
        _wait_ready(swapper)
        assert pipeline.emotion.session is old, "nothing changes until the describe thread's next frame"
        image = np.zeros((64, 64, 3), np.uint8)
        pipeline.describe(pipeline.track(Frame(image=image, seq=0, t_capture=0.0, t_capture_mono=0.0)))
        new = pipeline.emotion.session
        assert new is not old and pipeline.model_versions["emotion"] == version
        feeds = {old.inputs[0].name: np.random.default_rng(0).random((1, 1, 64, 64), dtype=np.float32)}
        np.testing.assert_allclose(next(iter(old.run(feeds).values())), next(iter(new.run(feeds).values())),
                                   atol=1e-6)
        snap = stats.snapshot()
        assert snap.recreated == {"emotion": 1} and snap.engine_swaps == {"emotion": 1}
        assert len([e for e in swapper.events if e.ok]) == 1
        # once a swap served, recreating it repeats that request's own loader
        assert recreator._request("emotion", "emotion").build is swapper.serving["emotion"].build
    finally:
        pipeline.use_swapper(None)
        swapper.close()


def test_describe_asks_for_every_model_the_describe_step_runs_and_audio_only_has_none(pipeline):
    recreator = SessionRecreator(pipeline, ModelSwapper())
    assert [m for m, _ in recreator.models("describe")] == ["iris_landmark", "emotion", "regressor"]
    assert recreator.models("landmarks") == [("face_landmark", "landmarker")]
    assert recreator.models("detect") == [("face_detection_short_range", "detector")]
    assert recreator.models("head_pose") == []
    recreator.swapper.close()

    from bridge.audio.run_audio import AudioOnlyPipeline

    assert SessionRecreator(AudioOnlyPipeline(stream=None), None).models("describe") == []


def test_a_session_that_gives_nan_on_zeros_is_refused(pipeline):
    finite_on_zeros(pipeline.iris.session)

    class Broken:
        inputs = pipeline.iris.session.inputs

        def run(self, feeds):
            return {"out": np.full(3, np.nan)}

    with pytest.raises(SwapRefused, match="not finite"):
        finite_on_zeros(Broken())
    swapper = ModelSwapper()
    try:
        swapper.request(SwapRequest("iris_landmark", "v", 0, Broken, finite_on_zeros))
        end = time.monotonic() + 30
        while not swapper.events and time.monotonic() < end:
            time.sleep(0.05)
        assert swapper.events and not swapper.events[0].ok and swapper.take("iris_landmark") is None
    finally:
        swapper.close()


def test_a_release_still_failing_after_its_session_was_recreated_is_rolled_back_and_the_shipped_model_serves(
        tmp_path):
    """Through the real store and installer: a release that is NaN on real face crops (but finite on zeros, so its
    recreation is taken) keeps failing after the recreation; the fallback rolls it back in the store, the release
    watch swaps the shipped model in between two frames, and the guard lets the frames through again."""
    from bridge.engines.shipped import sample_frames
    from bridge.runtime.fallback import ReleaseFallback
    from bridge.runtime.guard import OutputGuard
    from bridge.runtime.releases import ReleaseWatch
    from bridge.updates import install as installer
    from bridge.updates.status import status
    from tests.updates.faulty import nan_on_real_faces_emotion_model
    from tests.updates.kit import Publisher

    publisher, state = Publisher(tmp_path / "publisher"), tmp_path / "state"
    assert publisher.publish(nan_on_real_faces_emotion_model(tmp_path / "faulty.onnx", finite_on_zeros=True),
                             model="emotion") == 1
    installer.install(str(publisher.repo), state, trust=publisher.trust, models=["emotion"])
    pipeline = FacePipeline()
    shipped = pipeline.model_versions["emotion"]
    stats, lines = RunStats(), []
    recreator = None
    swapper = ModelSwapper(report=lines.append, on_event=lambda e: (stats.swap_event(e), recreator.on_event(e)))
    pipeline.use_swapper(swapper)
    watch = ReleaseWatch(state, ["emotion"], swapper, on_release=stats.set_release)  # builds release 1 at once
    recreator = SessionRecreator(pipeline, swapper, stats, ReleaseFallback(
        watch, lambda model, release, why: stats.release_rolled_back(model, release), report=lines.append))
    guard = OutputGuard(pipeline.process, stats=stats, recreate=recreator, reset=pipeline.reset_description)
    images = sample_frames(20)
    versions, replaced, back = [], [], None
    try:
        for seq in range(600):
            out = guard(Frame(image=images[seq % len(images)], seq=seq, t_capture=seq / 30, t_capture_mono=0.0,
                              t_media=seq / 30))
            pipeline.run_deferred()
            versions.append(pipeline.model_versions["emotion"])
            replaced.append(guard.replaced)
            if back is None and versions[-1] == shipped and any(v.startswith("r1-") for v in versions):
                back = seq  # the shipped model serves again
            if back is not None and seq - back >= 10:
                break
            time.sleep(1 / 30)  # a stream's pace: the builder thread builds beside it
    finally:
        pipeline.use_swapper(None)
        watch.stop()
        swapper.close()
    served = [v for v in versions if v.startswith("r1-")]
    assert served and versions[-1] == shipped, lines
    assert stats.snapshot().recreated == {"emotion": 1}, "the release was recreated once first"
    assert any("failed in service" in line and "after its session was recreated" in line for line in lines)
    assert replaced[-1] == replaced[-10], "the shipped model's frames are let through"
    assert np.isfinite(out.emotion).all() and out.face_found
    assert stats.snapshot().rolled_back == {"emotion": 1} and "rolled back emotion r1" in stats.status_line()
    report = status(state, "emotion")
    assert report["release"] == 0 and report["rolled_back"] == [1]
