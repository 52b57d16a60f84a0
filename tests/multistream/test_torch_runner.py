"""The ONNX-to-torch conversion and the torch runner on the CPU: parity with ONNX Runtime, one compile per model,
fallback to eager kernels, refusals by name."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.engines import EngineUnavailable
from bridge.engines.shipped import find_model


@pytest.mark.parametrize("name", ["face_detection_short_range", "face_landmark", "iris_landmark", "emotion"])
def test_torch_conversion_matches_onnx_runtime_on_real_frames(name):
    torch = pytest.importorskip("torch")
    from bridge.engines.onnxruntime_backend import OrtSession
    from bridge.engines.shipped import frames_as_input, value_range_of
    from bridge.multistream.onnx_torch import load_torch_module

    torch.set_num_threads(1)
    model = find_model(name)
    session = OrtSession(model.path, threads=1)
    spec = session.inputs[0]
    x = frames_as_input(tuple(spec.shape[1:]), value_range_of(model.entry), count=3)
    want = list(session.run({spec.name: x}).values())
    with torch.inference_mode():
        got = load_torch_module(model.path, x.shape).eval()(torch.from_numpy(x))
    for g, w in zip(got, want):
        assert tuple(g.shape) == w.shape
        assert float(np.abs(g.numpy() - w).max()) <= 2e-5 * max(float(np.abs(w).max()), 1.0)


def test_compile_traces_each_model_once_and_its_batch_dimension_stays_dynamic(tmp_path, monkeypatch):
    """The compiled GPU runners rely on this: one compile per model serves every batch bucket. A regression
    (an example input that is not an inference tensor, a shape the converter fixes) compiles again per call
    shape, which on a GPU costs half a minute per bucket and model. Traced here with a backend that counts."""
    torch = pytest.importorskip("torch")
    from bridge.multistream.onnx_torch import load_torch_module
    from bridge.multistream.torch_runner import compile_module

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch._dynamo.reset()
    traced = []

    def counting_backend(graph_module, example_inputs):
        traced.append(graph_module)
        return graph_module.forward

    item = (3, 64, 64)
    module = load_torch_module(find_model("iris_landmark").path, (1, *item)).eval()
    lines = []
    compiled = compile_module(module, item, torch.float32, torch.contiguous_format, "iris_landmark",
                              report=lines.append, batch=8, backend=counting_backend)
    assert len(traced) == 1 and "compiling iris_landmark" in lines[0] and lines[1].startswith("compiled")
    # CPU convolutions guard on batch < 16 (oneDNN's choice), so these stay on one side of it
    with torch.inference_mode():
        for batch in (2, 5, 15):
            x = torch.rand((batch, *item))
            for got, want in zip(compiled(x), module(x)):
                assert tuple(got.shape) == tuple(want.shape) and bool(torch.equal(got, want))
    assert len(traced) == 1, "a new batch size compiled the model again"
    torch._dynamo.reset()


def test_a_compiled_model_that_fails_at_run_time_falls_back_to_its_eager_kernels_with_a_warning():
    torch = pytest.importorskip("torch")
    from bridge.multistream.torch_runner import TorchRunner

    lines = []
    runner = TorchRunner(find_model("emotion").path, 4, "cpu", report=lines.append)
    x = torch.rand((3, 1, 64, 64))
    with torch.inference_mode():
        want = runner(x)

    def broken(_x):  # what Inductor raises when, say, Triton cannot build a kernel on this machine
        raise RuntimeError("backend compiler failed\nlong traceback")

    runner._compiled = broken
    assert runner.compiled
    with torch.inference_mode():
        got = runner(x)
    assert all(bool(torch.equal(g, w)) for g, w in zip(got, want))
    assert not runner.compiled and len(lines) == 1
    assert "torch.compile failed for emotion (RuntimeError: backend compiler failed)" in lines[0]
    assert "eager kernels" in lines[0] and "pip install triton" in lines[0]


def test_torch_conversion_refuses_an_operator_it_cannot_run_by_name():
    pytest.importorskip("torch")
    from bridge.engines.base import EngineError
    from bridge.multistream.onnx_torch import load_torch_module

    with pytest.raises(EngineError, match="cannot run Resize") as info:
        load_torch_module(find_model("face_detection_full_range").path, (1, 3, 192, 192))
    assert "ONNX Runtime" in str(info.value)


def test_gpu_runners_where_they_cannot_run_say_why_and_what_works_instead():
    pytest.importorskip("torch")
    from bridge.multistream.runners import make_runners, runner_availability

    usable = {kind: ok for kind, ok, _ in runner_availability()}
    assert usable["onnxruntime"]
    for kind in ("torch-cuda", "onnxruntime-cuda"):
        if usable[kind]:
            continue  # a GPU machine: nothing to refuse
        with pytest.raises(EngineUnavailable, match=f"the {kind} runners cannot run on this machine") as info:
            make_runners(kind, 4)
        assert "onnxruntime" in str(info.value) and "facebridge engines list" in str(info.value)


def test_a_converted_model_lays_out_its_buffers_the_same_in_every_process():
    """Inductor's and AOTAutograd's on-disk caches key on the graph's argument order: it must not change with a
    process's string hashing, or every `facebridge serve` process compiles every model from scratch."""
    import subprocess
    import sys

    from tests.helpers import subprocess_env

    code = ("from bridge.engines.shipped import find_model; "
            "from bridge.multistream.onnx_torch import load_torch_module; "
            "m = load_torch_module(find_model('emotion').verified_path(), (1, 1, 64, 64)); "
            "print([(tuple(b.shape), round(float(b.double().sum()), 3)) for b in m.buffers()])")
    layouts = {subprocess.run([sys.executable, "-c", code], env={**subprocess_env(), "PYTHONHASHSEED": seed},
                              capture_output=True, text=True, timeout=120, check=True).stdout for seed in ("1", "2")}
    assert len(layouts) == 1
