"""The live model swap in process: replacements are built and checked off the frame thread and taken between two
frames; a failing build or check is refused once and never retried; the lip-sync stream and the face pipeline
switch to a deliberately different model, and frames already handed on keep the versions they were made with."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from bridge.audio.lipsync import LipSyncModel, LipSyncStream, analyze, load_adapter
from bridge.audio.sources import FileSource
from bridge.models.registry import default_registry
from bridge.runtime.releases import check_reference
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from tests.helpers import wait_until

SPEECH = default_registry().shipped_path("lipsync").parents[1] / "data" / "sample_speech.wav"


def strange_adapter() -> dict[str, np.ndarray]:
    """The shipped adapter with its output half negated and amplified: a model that reads speech very differently."""
    weights = load_adapter(default_registry().default_adapter_path("lipsync"))
    return {"adapter.A": weights["adapter.A"] * 4.0, "adapter.B": -weights["adapter.B"] * 4.0}


def test_a_ready_replacement_is_taken_once_and_a_build_never_blocks_the_owner():
    release = threading.Event()
    swapper = ModelSwapper(report=lambda line: None)
    try:
        swapper.request(SwapRequest("emotion", "r1", 1, build=lambda: release.wait(10) and "new session"))
        assert swapper.take("emotion") is None  # the build is still running: the frame goes on with the old model
        release.set()
        assert wait_until(lambda: swapper._ready, 30, 0.01)
        ready = swapper.take("emotion")
        assert ready.replacement == "new session" and ready.request.version == "r1"
        assert swapper.take("emotion") is None and swapper.active == {"emotion": "r1"}
        assert [e.ok for e in swapper.events] == [True]
    finally:
        swapper.close()


def test_a_release_that_fails_its_build_or_check_is_refused_and_never_retried():
    lines: list[str] = []
    swapper = ModelSwapper(report=lines.append)
    built = []

    def failing_check(_):
        raise SwapRefused("output y is not finite")

    try:
        assert swapper.request(SwapRequest("iris_landmark", "r2", 2, build=lambda: built.append(1) or "s",
                                           check=failing_check))
        assert swapper.request(SwapRequest("emotion", "r3", 3, build=lambda: 1 / 0))
        assert wait_until(lambda: len(swapper.events) == 2, 30, 0.01)
        assert swapper.take("iris_landmark") is None and swapper.take("emotion") is None
        assert not swapper.request(SwapRequest("iris_landmark", "r2", 2, build=lambda: built.append(1)))
        assert built == [1]  # asked again, never built again
        assert {e.detail for e in swapper.events} == {"output y is not finite", "ZeroDivisionError: division by zero"}
        assert all("will not be tried again" in line for line in lines)
    finally:
        swapper.close()


def test_the_reference_check_refuses_nan_and_drift_and_passes_the_true_outputs(tmp_path):
    model = LipSyncModel()
    feeds = {"mel": np.random.default_rng(0).standard_normal((1, 8, 40)).astype(np.float32),
             "state": np.zeros(model.state_shape, np.float32)}
    outputs = model.run_raw(feeds)
    reference = tmp_path / "reference.npz"
    np.savez(reference, **{f"input.{k}": v for k, v in feeds.items()},
             **{f"output.{k}": v for k, v in outputs.items()})
    check_reference(model.run_raw, reference, (1e-5, 1e-5))
    with pytest.raises(SwapRefused, match="not finite"):
        check_reference(lambda f: {**outputs, "mouth": outputs["mouth"] * np.nan}, reference, (1e-3, 1e-3))
    with pytest.raises(SwapRefused, match="differs from its reference"):
        check_reference(LipSyncModel(adapter=strange_adapter()).run_raw, reference, (1e-3, 1e-3))


def test_the_lipsync_stream_swaps_adapters_between_hops_and_tags_every_result_with_its_version():
    new = strange_adapter()
    stream = LipSyncStream(history=5000, use_vad=False)  # no voice gate: results are the model's own outputs
    swapper = ModelSwapper(report=lambda line: None)
    stream.swapper = swapper
    old_version = stream.model_version
    try:
        stream.start(FileSource(SPEECH, realtime=False))
        assert wait_until(lambda: stream.hops > 300, 30, 0.01)  # 3 s of speech with the shipped adapter
        build = lambda: LipSyncModel(adapter=new, version="r7-test")
        swapper.request(SwapRequest("lipsync", "r7-test", 7, build=build))
        assert wait_until(lambda: not stream.running, 60, 0.01)
    finally:
        stream.stop()
        swapper.close()
    versions = [r.model_version for r in stream.history]
    assert versions[0] == old_version and versions[-1] == "r7-test"
    switch = versions.index("r7-test")
    assert set(versions[switch:]) == {"r7-test"}  # one switch, never back
    # Result i describes audio frame i. After the switch (and a few hops for the carried recurrent state to settle)
    # the results are what the new adapter predicts offline on the same audio, not what the old one does.
    pcm = FileSource(SPEECH, realtime=False).pcm
    results = list(stream.history)
    span = slice(switch + 50, len(results))
    got = np.array([np.concatenate([r.visemes, r.blendshapes[r.mouth_mask]]) for r in results[span]])
    preds = {}
    for name, model in (("old", LipSyncModel()), ("new", LipSyncModel(adapter=new))):
        offline = analyze(pcm, model, vad=False)
        preds[name] = np.concatenate([offline["visemes"], offline["mouth"]], axis=1)[span]
    assert np.abs(got - preds["new"]).mean() < 0.01 < np.abs(got - preds["old"]).mean()


def test_the_face_pipeline_swaps_a_session_at_its_stage_and_earlier_frames_keep_their_versions():
    from bridge.engines import create_session
    from bridge.pipeline import FacePipeline, PipelineOptions
    from bridge.sources.files import SampleSource

    pipeline = FacePipeline(PipelineOptions(backend="onnxruntime", emotion_every=1, smoothing=False))
    swapper = ModelSwapper(report=lambda line: None)
    pipeline.use_swapper(swapper)

    class Surprised:  # the shipped emotion model, its logits pushed toward "surprise": a different emotion model
        def __init__(self):
            self.inner = create_session(default_registry().shipped_path("emotion"))
            self.inputs, self.outputs = self.inner.inputs, self.inner.outputs

        def run(self, feeds):
            out = self.inner.run(feeds)
            return {k: np.eye(7, dtype=np.float32)[[5]] for k in out}

    try:
        with SampleSource(realtime=False, loop=False) as source:
            before = [pipeline.process(source.read()) for _ in range(5)]
            swapper.request(SwapRequest("emotion", "r2-surprise", 2, build=Surprised))
            assert wait_until(lambda: swapper._ready, 30, 0.01)
            after = [pipeline.process(source.read()) for _ in range(5)]
    finally:
        swapper.close()
    assert all(f.model_versions["emotion"] != "r2-surprise" for f in before)
    assert all(f.model_versions["emotion"] == "r2-surprise" for f in after)
    assert before[0].model_versions is before[-1].model_versions  # one shared dict per version
    assert all(np.argmax(f.emotion) == 5 for f in after if f.face_found)
