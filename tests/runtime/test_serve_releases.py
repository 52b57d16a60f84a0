"""Releases for `facebridge serve` in process (runtime/serve_releases.py), with real ONNX Runtime runners: the
check passes the release's own model, refuses one whose outputs differ from its reference or that cannot take a
batch of the server's size; the pass gate swaps a ready runner in only as a pass begins, and announces it. A
release installed by the real installer into a real store that passes its smoke test and gives NaN on real face
crops is rolled back by the server after a few passes: the store marks it, the shipped model serves again, and it
is never installed or run again."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from bridge.models.registry import default_registry
from bridge.multistream.runners import make_runner
from bridge.runtime.serve_releases import PassGate, check_runner
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from tests.helpers import wait_until
from tests.updates.kit import emotion_model

pytest.importorskip("torch")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The shipped emotion model's outputs on seeded inputs, as a release's reference.npz holds them."""
    import onnxruntime as ort

    path = default_registry().shipped_path("emotion")
    x = np.random.default_rng(0).standard_normal((2, 1, 64, 64)).astype(np.float32) * 0.5
    (probs,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    out = tmp_path_factory.mktemp("ref") / "reference.npz"
    np.savez(out, **{"input.input": x, "output.emotion_probs": probs})
    return path, out


def test_the_check_passes_the_model_and_refuses_drift_and_a_fixed_batch(reference, tmp_path):
    shipped, npz = reference
    check_runner(make_runner("onnxruntime", "emotion", shipped, 8), shipped, npz, (1e-4, 1e-4), 8, "cpu")
    check_runner(make_runner("onnxruntime", "emotion", shipped, 8), shipped, None, (1e-4, 1e-4), 8, "cpu")
    surprised = emotion_model(tmp_path / "surprised.onnx")
    with pytest.raises(SwapRefused, match="differs from its reference"):
        check_runner(make_runner("onnxruntime", "emotion", surprised, 8), surprised, npz, (1e-3, 1e-3), 8, "cpu")
    fixed = emotion_model(tmp_path / "fixed.onnx", fixed_batch=True)
    with pytest.raises(SwapRefused, match="fails on a batch of 8.*dynamic batch dimension"):
        check_runner(make_runner("onnxruntime", "emotion", fixed, 8), fixed, None, (1e-3, 1e-3), 8, "cpu")


def test_the_gate_swaps_a_ready_runner_in_as_a_pass_begins_and_announces_it():
    runners = {"emotion": "old runner", "landmarks": "landmarks runner"}
    swapped: list[list[str]] = []
    swapper = ModelSwapper(report=lambda line: None)
    gate = PassGate(runners, {"emotion": "shipped"}, swapper, {"emotion": "emotion"}, on_swap=swapped.append)
    try:
        with gate:  # a pass is running: a replacement that becomes ready meanwhile waits for the next one
            built = threading.Event()
            swapper.request(SwapRequest("emotion", "r5-test", 5, build=lambda: built.set() or "new runner"))
            assert wait_until(lambda: swapper.settled("emotion"), 30, 0.01)
            assert runners["emotion"] == "old runner" and gate.versions == {"emotion": "shipped"}
        announced = gate.versions
        with gate:
            assert runners == {"emotion": "new runner", "landmarks": "landmarks runner"}
        assert gate.versions == {"emotion": "r5-test"} and announced == {"emotion": "shipped"}  # a new dict
        assert swapped == [["emotion"]] and swapper.active == {"emotion": "r5-test"}
    finally:
        swapper.close()


def _real_face_crops(n: int) -> np.ndarray:
    """Grey 64x64 emotion crops of the sample clip's face, as the batched tracker feeds the emotion model."""
    import time

    from bridge.engines.shipped import sample_frames
    from bridge.frame import Frame
    from bridge.pipeline import FacePipeline

    pipeline = FacePipeline()
    crops = []
    for i, image in enumerate(sample_frames(n)):
        found = pipeline.track(Frame(image, i, time.time(), time.perf_counter())).found
        crops.append(pipeline.emotion.preprocess(image, found.points)[0])
    return np.stack(crops)


def test_a_release_whose_outputs_are_not_finite_on_real_faces_is_rolled_back_in_the_store_and_never_run_again(
        tmp_path):
    import types

    import torch

    from bridge.runtime.serve_releases import PERSIST_PASSES, ServeReleases
    from bridge.updates import install as installer
    from bridge.updates.reasons import UpdateRefused
    from bridge.updates.status import status
    from tests.updates.faulty import nan_on_real_faces_emotion_model
    from tests.updates.kit import Publisher

    publisher, state = Publisher(tmp_path / "publisher"), tmp_path / "state"
    assert publisher.publish(nan_on_real_faces_emotion_model(tmp_path / "faulty.onnx"), model="emotion") == 1
    installer.install(str(publisher.repo), state, trust=publisher.trust, models=["emotion"])  # its smoke test passes
    shipped = default_registry().shipped_path("emotion")
    runners = {"emotion": make_runner("onnxruntime", "emotion", shipped, 4)}
    lines: list[str] = []
    releases = ServeReleases(state, runners, {"emotion": "shipped"}, {"emotion": "emotion"},
                             lambda role, path: make_runner("onnxruntime", role, path, 4), 4, report=lines.append)
    crops = torch.from_numpy(_real_face_crops(4))

    def one_pass():
        """One batched pass over four real face crops, its results as the describer reads them."""
        with releases.gate:
            (probs,) = runners["emotion"](crops)
        faces = types.SimpleNamespace(tracked=np.ones(4, bool), landmarks=np.zeros((4, 468, 3)),
                                      irises=np.zeros((4, 2, 5, 3)), blendshapes=np.zeros((4, 52)),
                                      expression_head=np.zeros((4, 3)), emotion=probs.float().numpy())
        releases.check_pass(faces)
        return faces.emotion

    try:
        releases.start()
        assert releases.gate.versions["emotion"].startswith("r1-")  # the release serves from the first pass
        assert np.isnan(one_pass()).all()  # ... and fails on real faces
        for _ in range(PERSIST_PASSES - 1):
            one_pass()
        # rolled back in the store, and the shipped model built and taken as a pass begins
        assert wait_until(lambda: one_pass() is not None and not releases.gate.versions["emotion"].startswith("r1-"),
                          60, 0.02), lines
        assert np.isfinite(one_pass()).all()  # the shipped model serves again
        assert any("failed in service" in line and "rolled back to the shipped model" in line for line in lines)
        assert "rolled back emotion r1" in releases.status()["release"]
        report = status(state, "emotion")
        assert report["release"] == 0 and report["rolled_back"] == [1]
        with pytest.raises(UpdateRefused) as refused:  # offered again: refused, never installed again
            installer.install(str(publisher.repo), state, models=["emotion"])
        assert refused.value.reason == "rollback"
        releases.watch.poll_now()
        assert not releases.gate.versions["emotion"].startswith("r1-")
    finally:
        releases.close()
