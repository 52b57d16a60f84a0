"""Releases for `facebridge serve` in process (runtime/serve_releases.py), with real ONNX Runtime runners: the
check passes the release's own model, refuses one whose outputs differ from its reference or that cannot take a
batch of the server's size; the pass gate swaps a ready runner in only as a pass begins, and announces it."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from bridge.models.registry import default_registry
from bridge.runtime.serve_releases import PassGate, check_runner
from bridge.runtime.swap import ModelSwapper, SwapRefused, SwapRequest
from bridge.serving.runners import make_runner
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
