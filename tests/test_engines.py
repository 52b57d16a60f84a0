"""Inference engines on a CPU-only machine: real TensorRT-RTX builds of every shipped model, the engine cache
(hits, corrupt, stale, other version), bad input (unparsable model, no GPU, full disk), FP16 parity, backend
selection and fallback, the deadline batcher and the batched face tracker on the CPU."""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from bridge.engines import EngineUnavailable, create_session
from bridge.engines.cache import EngineCache
from bridge.engines.select import AUTO_ORDER, candidates, check_available
from bridge.engines.shipped import NOT_BUILDABLE, ShippedModel, find_model, shipped_models
from bridge.engines.tensorrt.builder import EngineBuildError, EngineSpec, build_plan, profiles_for
from bridge.serving.batcher import DeadlineBatcher

trt_rtx = pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX is in the test extra")

BUILDABLE = [m for m in shipped_models() if m.name not in NOT_BUILDABLE]
QUICK = {"opt_level": 0, "max_batch": 16}  # the fastest real build: CI builds every model in seconds


@pytest.fixture(scope="module")
def flavour():
    from bridge.engines.tensorrt.flavour import load_flavour

    return load_flavour("tensorrt-rtx")


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory):
    return EngineCache(tmp_path_factory.mktemp("engines"))


def _prepare(model, flavour, cache, **kw):
    from bridge.engines.tensorrt.prepare import prepare_engine, spec_for

    spec = spec_for(model, model.verified_path().read_bytes(), flavour, **{**QUICK, **kw})
    return prepare_engine(model, flavour, cache, spec, report=lambda line: None)


# --- every shipped model builds, and the second build is a cache hit ---------------------------------------------
def test_shipped_models_are_discovered():
    names = {m.name for m in shipped_models()}
    assert {"face_detection_short_range", "face_landmark", "iris_landmark", "emotion"} <= names
    assert all(m.path.suffix == ".onnx" and m.path.exists() for m in shipped_models())


@pytest.mark.parametrize("model", BUILDABLE, ids=lambda m: m.name)
def test_every_shipped_model_builds_and_rebuild_hits_cache(model, flavour, shared_cache):
    first = _prepare(model, flavour, shared_cache)
    assert not first.cache_hit and len(first.plan) > 10_000
    fields = first.entry.fields
    assert fields["flavour"] == "tensorrt-rtx" and fields["trt_version"] == flavour.version
    assert fields["compute_capability"] == "sm86" and fields["precision"] == "fp32"
    second = _prepare(model, flavour, shared_cache)
    assert second.cache_hit and second.plan == first.plan and second.entry.key == first.entry.key


@pytest.mark.parametrize("name", sorted(NOT_BUILDABLE))
def test_known_unbuildable_models_still_fail_cleanly_and_fall_back(name, flavour, tmp_path, capsys):
    model = find_model(name)
    with pytest.raises(EngineBuildError, match="could not build"):  # when this starts passing, update the list
        _prepare(model, flavour, EngineCache(tmp_path))
    session = create_session(model.path, "tensorrt-rtx")
    assert session.backend_name in ("openvino", "onnxruntime")


def test_no_timing_cache_for_tensorrt_rtx(flavour, shared_cache):
    # TensorRT-RTX made timing caches no-ops (its kernels are chosen on the GPU at first run); full TensorRT
    # keeps one per flavour, version and GPU under timing/.
    _prepare(find_model("emotion"), flavour, shared_cache)
    assert not shared_cache.timing_cache_path("tensorrt-rtx", flavour.version, "sm86").exists()


def test_key_changes_with_precision_target_and_profiles(flavour, tmp_path):
    cache = EngineCache(tmp_path)
    model = find_model("emotion")
    keys = {_prepare(model, flavour, cache, **kw).entry.key
            for kw in ({}, {"target": "sm89"}, {"max_batch": 8})}
    assert len(keys) == 3


# --- stale, corrupt, other-version engines are never loaded blindly -----------------------------------------------
def test_corrupt_engine_is_detected_and_rebuilt(flavour, tmp_path):
    from bridge.engines.tensorrt.verify import verify_cache

    cache = EngineCache(tmp_path)
    model = find_model("emotion")
    good = _prepare(model, flavour, cache)
    data = bytearray(good.entry.plan_path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    good.entry.plan_path.write_bytes(bytes(data))
    assert [status for _, status in verify_cache(tmp_path)][0].startswith("corrupt")
    again = _prepare(model, flavour, cache)
    assert not again.cache_hit and again.plan == good.plan  # rebuilt, identical to the original


def test_stale_engine_is_reported_when_the_model_changes(flavour, tmp_path):
    import onnx

    from bridge.engines.tensorrt.verify import verify_cache

    copy = tmp_path / "emotion.onnx"
    shutil.copy(find_model("emotion").path, copy)
    model = ShippedModel("emotion", copy, {})
    cache = EngineCache(tmp_path / "cache")
    _prepare(model, flavour, cache)
    proto = onnx.load(str(copy))
    proto.doc_string = "retrained"
    onnx.save(proto, str(copy))
    assert [s for _, s in verify_cache(cache.root)] == ["stale: emotion.onnx changed since the engine was built"]
    assert not _prepare(model, flavour, cache).cache_hit  # a new key: built afresh, the old one never used


def test_engine_from_another_version_is_never_picked(flavour, tmp_path):
    import json

    from bridge.engines.tensorrt.verify import verify_cache

    cache = EngineCache(tmp_path)
    model = find_model("emotion")
    built = _prepare(model, flavour, cache)
    meta_path = built.entry.plan_path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    meta["key_fields"]["trt_version"] = "0.9.0.1"
    meta_path.write_text(json.dumps(meta))
    assert [s for _, s in verify_cache(tmp_path)][0].startswith("other version")
    assert not _prepare(model, flavour, cache).cache_hit


def test_engine_for_another_gpu_is_a_different_entry(flavour, tmp_path):
    cache = EngineCache(tmp_path)
    a = _prepare(find_model("emotion"), flavour, cache, target="sm86")
    b = _prepare(find_model("emotion"), flavour, cache, target="sm120")
    assert a.entry.key != b.entry.key and b.entry.fields["compute_capability"] == "sm120"


# --- bad input: unparsable model, missing GPU, full disk ---------------------------------------------------------
def _model_with(op: str, tmp_path: Path) -> Path:
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_in"), helper.make_node(op, ["r"], ["y"], name="det_1")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "det.onnx"
    onnx.save(model, str(path))
    return path


def test_parser_errors_name_the_node_and_onnxruntime_still_runs_it(flavour, tmp_path):
    path = _model_with("Det", tmp_path)
    with pytest.raises(EngineBuildError) as info:
        build_plan(flavour, path.read_bytes(), EngineSpec(target="sm86", opt_level=0), model_path=path)
    message = str(info.value)
    assert "node 1 'det_1' (Det)" in message and "--backend onnxruntime" in message
    session = create_session(path, "auto")  # the fallback really computes
    x = np.array([[2, 0, 0], [0, 3, 0], [0, 0, 4]], np.float32)
    assert np.isclose(session.run({"x": x})["y"], 24.0)


def test_missing_gpu_falls_back_with_a_printed_reason(capsys):
    from bridge.engines.gpu import probe_gpu

    if probe_gpu().gpu is not None:
        pytest.skip("this machine has a GPU")
    path = find_model("emotion").path
    session = create_session(path, "tensorrt-rtx")
    assert session.backend_name in ("openvino", "onnxruntime")
    err = capsys.readouterr().err
    assert "--backend tensorrt-rtx is not usable here" in err and "GPU" in err
    with pytest.raises(EngineUnavailable, match="needs an NVIDIA GPU"):
        create_session(path, "tensorrt-rtx", strict=True)
    rtx = check_available("tensorrt-rtx")
    assert not rtx.ok and "GPU" in rtx.reason


def test_full_disk_during_build_gives_a_clear_error_and_leaves_nothing(flavour, tmp_path):
    mount = tmp_path / "tiny"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs permission to mount a small tmpfs")
    try:
        with pytest.raises(EngineBuildError, match="no space left") as info:
            _prepare(find_model("face_landmark"), flavour, EngineCache(mount))  # 5 MB engine, 1 MB disk
        assert "--cache-dir" in str(info.value)
        assert not list(mount.rglob("*.engine")) and not list(mount.rglob("*.tmp"))
        session = create_session(find_model("face_landmark").path, "auto", cache_dir=mount)
        assert session.backend_name in ("openvino", "onnxruntime")
    finally:
        subprocess.run(["umount", str(mount)], check=False)


# --- FP16 by graph conversion, checked on real frames --------------------------------------------------------------
def test_fp16_engine_is_built_from_a_converted_graph_checked_against_fp32(flavour, tmp_path):
    cache = EngineCache(tmp_path)
    model = find_model("face_landmark")
    fp16 = _prepare(model, flavour, cache, precision="fp16")
    parity = fp16.entry.meta["fp16_parity"]
    assert parity["ok"] and 0 < parity["worst_relative"] < 0.01
    fp32 = _prepare(model, flavour, cache)
    assert fp16.plan != fp32.plan and len(fp16.plan) < len(fp32.plan)  # half-size weights


def test_fp16_parity_check_refuses_drift():
    from bridge.engines.shipped import frames_as_input
    from bridge.engines.tensorrt.fp16 import check_parity, convert_to_fp16

    data = find_model("iris_landmark").path.read_bytes()
    feeds = {"input_1": frames_as_input((3, 64, 64))}
    report = check_parity(data, convert_to_fp16(data), feeds, tolerance=1e-7)
    assert not report.ok and report.worst_relative > 1e-7


# --- profiles and refit ----------------------------------------------------------------------------------------------
def test_profiles_cover_batch_and_other_dynamic_axes():
    landmark = profiles_for(find_model("face_landmark").path.read_bytes(), 1, 64)
    assert landmark == (("input_1", (1, 3, 192, 192), (1, 3, 192, 192), (64, 3, 192, 192)),)
    lipsync = dict((p[0], p[1:]) for p in profiles_for(find_model("lipsync").path.read_bytes(), 1, 8))
    assert lipsync["mel"] == ((1, 1, 40), (1, 64, 40), (1, 1024, 40))


def test_refittable_build_marks_only_adapter_weights(flavour, tmp_path):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])
    inits = [numpy_helper.from_array(rng.normal(size=(16, 16)).astype(np.float32), "base.W"),
             numpy_helper.from_array(rng.normal(size=(16, 4)).astype(np.float32), "adapter.A")]
    nodes = [helper.make_node("MatMul", ["x", "base.W"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("MatMul", ["r", "adapter.A"], ["y"])]
    path = tmp_path / "adapted.onnx"
    onnx.save(helper.make_model(helper.make_graph(nodes, "g", [x], [y], inits),
                                opset_imports=[helper.make_opsetid("", 17)]), str(path))
    from bridge.engines.gpu import probe_gpu
    from bridge.engines.tensorrt.builder import refittable_initializers

    assert refittable_initializers(path.read_bytes(), ["adapter.*"]) == ("adapter.A",)
    model = ShippedModel("adapted", path, {"engine": {"refittable": ["adapter.*"]}})
    built = _prepare(model, flavour, EngineCache(tmp_path / "c"))
    if probe_gpu().gpu is None:  # TensorRT-RTX 1.7 compiles refittable layers with CUDA: fixed weights here
        assert built.entry.fields["refittable"] == [] and "needs a GPU" in built.entry.meta["refit_unavailable"]
    else:
        assert built.entry.fields["refittable"] == ["adapter.A"] == built.entry.meta["refittable"]


def test_lipsync_adapter_is_refittable_or_says_why(flavour, tmp_path):
    from bridge.engines.gpu import probe_gpu

    built = _prepare(find_model("lipsync"), flavour, EngineCache(tmp_path))
    if probe_gpu().gpu is None:
        assert built.entry.meta["refit_unavailable"].startswith("refittable build needs a GPU")
    else:
        assert sorted(built.entry.meta["refittable"]) == ["adapter.A", "adapter.B"]


# --- backend choice ---------------------------------------------------------------------------------------------------
def test_candidates_follow_the_automatic_order_with_the_request_first():
    assert candidates("auto") == list(AUTO_ORDER)
    assert candidates("openvino")[0] == "openvino" and sorted(candidates("openvino")) == sorted(AUTO_ORDER)
    with pytest.raises(ValueError, match="unknown backend"):
        candidates("tensorflow")


def test_cpu_backends_agree_on_real_frames():
    from bridge.engines.shipped import frames_as_input

    model = find_model("face_landmark")
    x = frames_as_input((3, 192, 192), count=2)
    ort_out = create_session(model.path, "onnxruntime", strict=True).run({"input_1": x})
    if not check_available("openvino").ok:
        pytest.skip("openvino not installed")
    ov = create_session(model.path, "openvino", strict=True)
    assert ov.backend_name == "openvino" and ov.inputs[0].shape[1:] == (3, 192, 192)
    ov_out = ov.run({"input_1": x})
    for name in ort_out:
        assert np.abs(ov_out[name] - ort_out[name]).max() < 1e-3 * max(1.0, np.abs(ort_out[name]).max())


# --- engines command -----------------------------------------------------------------------------------------------
def test_engines_command_build_list_verify_clear(tmp_path, capsys):
    from bridge.cli import main

    args = ["--cache-dir", str(tmp_path), "--backend", "tensorrt-rtx"]
    assert main(["engines", "build", "emotion", "--opt-level", "0", *args]) == 0
    assert "emotion: built in" in capsys.readouterr().out
    assert main(["engines", "build", "emotion", "--opt-level", "0", *args]) == 0
    assert "emotion: cached" in capsys.readouterr().out
    kernel = tmp_path / "torch-inductor" / "fxgraph" / "ab" / "kernel"  # what torch.compile leaves there
    kernel.parent.mkdir(parents=True)
    kernel.write_text("{}")
    (tmp_path / "torch-inductor" / "index.json").write_text("{}")  # not an engine's metadata, though it looks so
    assert main(["engines", "list", *args]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime" in out and "emotion" in out and "sm86" in out
    assert "compiled torch kernels in" in out and "2 files" in out  # reported, not listed as an engine
    runners = out.split("multi-stream face runners here")[1].split("engines in")[0]
    torch_cuda_line = next(line for line in runners.splitlines() if " torch-cuda " in line)
    assert "onnxruntime" in runners and torch_cuda_line.split()[0] in ("yes", "no")
    if torch_cuda_line.startswith("  no"):  # this machine has no CUDA torch: the line says why
        assert "torch" in torch_cuda_line and ("CUDA" in torch_cuda_line or "not installed" in torch_cuda_line)
    assert main(["engines", "verify", *args]) == 0
    assert capsys.readouterr().out.strip().endswith("ok")
    assert main(["engines", "clear", *args]) == 0
    assert not list(tmp_path.rglob("*.engine")) and not (tmp_path / "torch-inductor").exists()


def test_engines_build_of_an_unparsable_model_fails_with_the_node(tmp_path, capsys):
    from bridge.cli import main

    path = _model_with("Det", tmp_path)
    assert main(["engines", "build", str(path), "--cache-dir", str(tmp_path / "c"), "--opt-level", "0"]) == 1
    assert "det_1" in capsys.readouterr().err


# --- multi-stream batching -----------------------------------------------------------------------------------------
def test_lone_stream_is_not_held_back_for_a_batch():
    with DeadlineBatcher(lambda streams, items: [i * 2 for i in items], max_batch=256) as batcher:
        started = time.perf_counter()
        assert batcher.submit("only", 21).result(timeout=2) == 42
        assert time.perf_counter() - started < 0.2  # no waiting for company (a loaded CI box may be slow to wake)


def test_batches_form_under_load_and_results_return_in_order_per_stream():
    def slow_double(streams, items):
        time.sleep(0.01)  # a GPU pass
        return [(s, i * 2) for s, i in zip(streams, items)]

    with DeadlineBatcher(slow_double, max_batch=64) as batcher:
        futures = {s: [] for s in range(8)}

        def stream(s):
            for i in range(20):
                futures[s].append(batcher.submit(s, i))
                time.sleep(0.001)

        threads = [threading.Thread(target=stream, args=(s,)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s, fs in futures.items():
            assert [f.result(timeout=5) for f in fs] == [(s, i * 2) for i in range(20)]
        assert max(batcher.batch_sizes) > 1 and sum(batcher.batch_sizes) == 160


def test_a_failing_batch_fails_only_its_own_frames():
    calls = []

    def flaky(streams, items):
        calls.append(list(items))
        if "bad" in items:
            raise ValueError("bad frame")
        return items

    with DeadlineBatcher(flaky, max_batch=4) as batcher:
        bad = batcher.submit(0, "bad")
        with pytest.raises(ValueError):
            bad.result(timeout=2)
        assert batcher.submit(0, "good").result(timeout=2) == "good"


def test_max_wait_gathers_a_fuller_batch_but_respects_the_deadline():
    with DeadlineBatcher(lambda s, items: items, max_batch=8, max_wait_s=0.05) as batcher:
        started = time.perf_counter()
        futures = [batcher.submit(i, i) for i in range(3)]
        assert [f.result(timeout=2) for f in futures] == [0, 1, 2]
        assert 0.04 < time.perf_counter() - started < 0.5
        assert batcher.batch_sizes == [3]


def test_batched_face_tracker_finds_and_tracks_the_sample_face_on_cpu():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.serving.runners import make_runners
    from bridge.serving.tracker import BatchedFaceTracker

    torch.set_num_threads(1)
    frames = torch.from_numpy(np.stack(sample_frames(2)))
    tracker = BatchedFaceTracker(2, tuple(frames.shape[1:3]), make_runners("onnxruntime", 4), device="cpu")
    streams = torch.arange(2)
    tracker.step(frames, streams)
    assert tracker.detector_runs == 2 and bool(tracker.tracked.all())
    tracker.step(frames, streams)
    assert tracker.detector_runs == 2 and tracker.tracked_runs == 4  # tracked: no second detection
    points = tracker.last_landmarks[..., :2]
    h, w = frames.shape[1:3]
    assert bool(((points[..., 0] > 0) & (points[..., 0] < w) & (points[..., 1] > 0) & (points[..., 1] < h)).all())
    assert int(tracker.last_emotion.argmax(dim=1)[0]) == 3  # the astronaut smiles: "happy"
    iris_center = tracker.last_iris[:, :, 0, :2]
    assert bool(((iris_center > 16) & (iris_center < 48)).all())  # iris centred in its 64x64 eye crop
    assert bool(((tracker.last_blendshapes >= -0.05) & (tracker.last_blendshapes <= 1.05)).all())


def test_gpu_side_expression_features_match_the_reference_layout():
    torch = pytest.importorskip("torch")
    from bridge.expression.features import features_batch
    from bridge.serving.tracker import landmark_features_torch

    rng = np.random.default_rng(0)
    xy = rng.uniform(100, 300, (3, 468, 2))
    iris = rng.uniform(150, 250, (3, 2, 2))
    want = features_batch(xy, iris, np.ones(3, bool), np.full(3, 480.0), np.tile([240.0, 180.0], (3, 1)))
    got = landmark_features_torch(torch.from_numpy(xy), torch.from_numpy(iris), 480.0, (240.0, 180.0))
    assert got.shape == (3, 944) and np.allclose(got.numpy(), want, atol=1e-5)


def test_cuda_driver_check_says_what_is_missing():
    pytest.importorskip("cuda.bindings", reason="cuda-python is in the tensorrt/gpu extras")
    from bridge.engines.gpu import probe_gpu
    from bridge.engines.tensorrt.cuda_buffers import check_driver

    if probe_gpu().gpu is not None:
        check_driver()  # a working GPU machine: the driver is new enough for the CUDA runtime we ship
        return
    with pytest.raises(EngineUnavailable, match="no NVIDIA driver|driver supports CUDA") as info:
        check_driver()
    assert "--backend onnxruntime" in str(info.value)


@pytest.mark.parametrize("name", ["face_detection_short_range", "face_landmark", "iris_landmark", "emotion"])
def test_torch_conversion_matches_onnx_runtime_on_real_frames(name):
    torch = pytest.importorskip("torch")
    from bridge.engines.onnxruntime_backend import OrtSession
    from bridge.engines.shipped import find_model, frames_as_input, value_range_of
    from bridge.serving.onnx_torch import load_torch_module

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
    from bridge.engines.shipped import find_model
    from bridge.serving.onnx_torch import load_torch_module
    from bridge.serving.torch_runner import compile_module

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
    from bridge.engines.shipped import find_model
    from bridge.serving.torch_runner import TorchRunner

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
    from bridge.engines.shipped import find_model
    from bridge.serving.onnx_torch import load_torch_module

    with pytest.raises(EngineError, match="cannot run Resize") as info:
        load_torch_module(find_model("face_detection_full_range").path, (1, 3, 192, 192))
    assert "ONNX Runtime" in str(info.value)


def test_batched_eye_pair_crops_are_the_single_crops_in_face_order():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.serving.runners import make_runners
    from bridge.serving.tracker import BatchedFaceTracker

    frames = torch.from_numpy(np.stack(sample_frames(2)))
    images = frames.permute(0, 3, 1, 2).float()
    tracker = BatchedFaceTracker(2, tuple(frames.shape[1:3]), make_runners("onnxruntime", 4), device="cpu")
    # two crops per frame: inside, across the border, rotated, flipped
    center = torch.tensor([[240.0, 180.0], [10.0, 20.0], [470.0, 350.0], [200.0, 100.0]])
    size, angle = torch.tensor([150.0, 80.0, 60.0, 300.0]), torch.tensor([0.0, 0.3, -1.0, 2.0])
    flip = torch.tensor([False, True, False, True])
    pairs = tracker._crop(images, center, size, angle, 64, flip, per_image=2)
    assert pairs.shape == (4, 3, 64, 64)
    for i in range(4):
        single = tracker._crop(images[i // 2:i // 2 + 1], center[i:i + 1], size[i:i + 1], angle[i:i + 1], 64,
                               flip[i:i + 1])
        assert float((pairs[i] - single[0]).abs().max()) < 1e-3
    assert bool((pairs[1] == 0).any()) and bool((pairs[1] > 0).any())  # partly outside the frame: zeros there


def test_batched_tracker_with_torch_runners_matches_onnx_runtime_runners():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.serving.runners import make_runners
    from bridge.serving.tracker import BatchedFaceTracker

    torch.set_num_threads(1)
    frames = torch.from_numpy(np.stack(sample_frames(3, step=1)))
    results = []
    for kind in ("onnxruntime", "torch"):
        tracker = BatchedFaceTracker(3, tuple(frames.shape[1:3]), make_runners(kind, 4), device="cpu")
        for _ in range(2):
            tracker.step(frames, torch.arange(3))
        assert tracker.detector_runs == 3 and bool(tracker.tracked.all())
        results.append([tracker.last_landmarks, tracker.last_iris, tracker.last_emotion, tracker.last_blendshapes])
    for ort_value, torch_value in zip(*results):
        assert float((ort_value - torch_value).abs().max()) < 1e-2


def test_gpu_runners_where_they_cannot_run_say_why_and_what_works_instead():
    pytest.importorskip("torch")
    from bridge.serving.runners import make_runners, runner_availability

    usable = {kind: ok for kind, ok, _ in runner_availability()}
    assert usable["onnxruntime"]
    for kind in ("torch-cuda", "onnxruntime-cuda"):
        if usable[kind]:
            continue  # a GPU machine: nothing to refuse
        with pytest.raises(EngineUnavailable, match=f"the {kind} runners cannot run on this machine") as info:
            make_runners(kind, 4)
        assert "onnxruntime" in str(info.value) and "facebridge engines list" in str(info.value)


def test_tracker_passes_of_every_size_reuse_one_compiled_graph_per_model(monkeypatch, tmp_path):
    """The call pattern of the GPU path (channels_last runners, crops from grid_sample, bounded detector slots,
    passes of changing size) traced with a counting backend: one graph per compiled model, whatever the batch.
    On the H200 each extra graph is another half-minute compile."""
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import find_model, sample_frames
    from bridge.serving.torch_runner import TorchRunner, compile_module
    from bridge.serving.tracker import BatchedFaceTracker

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    torch.set_num_threads(1)
    torch._dynamo.reset()
    traced = []

    def counting_backend(graph_module, example_inputs):
        traced.append(graph_module)
        return graph_module.forward

    names = {"detector": "face_detection_short_range", "landmarks": "face_landmark", "iris": "iris_landmark",
             "emotion": "emotion", "expression": "regressor"}
    runners = {role: TorchRunner(find_model(name).path, 16, "cpu", channels_last=True)
               for role, name in names.items()}
    for role, runner in runners.items():
        if role != "expression":  # as make_runners does on a GPU
            runner._compiled = compile_module(runner.module, runner.item_shape, runner.dtype, runner._format, role,
                                              report=lambda line: None, batch=4, backend=counting_backend)
    assert len(traced) == 4
    frames = torch.from_numpy(np.stack(sample_frames(7, step=1)))
    tracker = BatchedFaceTracker(7, tuple(frames.shape[1:3]), runners, device="cpu")
    for n in (7, 7, 7, 7, 2, 5, 3, 7):  # 2 detector slots a pass: all 7 found by the 4th; iris batches < 16 (oneDNN)
        tracker.step(frames[:n], torch.arange(n), detect_slots=2)
    assert bool(tracker.tracked.all())
    assert len(traced) == 4, f"{len(traced) - 4} extra compiles for new batch sizes"
    torch._dynamo.reset()


def test_batched_tracker_with_bounded_detector_slots_acquires_lost_streams_over_passes():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.serving.runners import make_runners
    from bridge.serving.tracker import BatchedFaceTracker

    torch.set_num_threads(1)
    frames = torch.from_numpy(np.stack(sample_frames(4, step=1)))
    tracker = BatchedFaceTracker(4, tuple(frames.shape[1:3]), make_runners("torch", 4), device="cpu")
    streams = torch.arange(4)
    # this is the pass a CUDA graph captures: two detector rows, picked on the device among the lost streams
    tracker.step(frames, streams, detect_slots=2)
    assert tracker.tracked.tolist() == [True, True, False, False]
    assert bool((tracker.last_landmarks[2:] == 0).all())  # not tracked yet: no results written
    tracker.step(frames, streams, detect_slots=2)
    assert bool(tracker.tracked.all())
    before = tracker.last_landmarks.clone()
    tracker.tracked[1] = False  # one stream loses its face: the spare slot lands on a tracked row, harmlessly
    tracker.step(frames, streams, detect_slots=2)
    assert bool(tracker.tracked.all()) and tracker.detector_runs == 6
    assert float((tracker.last_landmarks[..., :2] - before[..., :2]).abs().max()) < 6.0  # same frames, same faces


def test_the_captured_pass_is_pure_device_work():
    """What a CUDA graph captures may not touch host tensors (a copy) nor read values (a sync). Checked without a
    GPU: the pass runs on the meta device (shapes only: reading a value fails) while every op is inspected for
    a host tensor argument."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from bridge.engines.shipped import find_model
    from bridge.serving.torch_runner import TorchRunner
    from bridge.serving.tracker import BatchedFaceTracker

    class HostTensorSpy(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = set()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if any(isinstance(a, torch.Tensor) and a.device.type == "cpu" and a.dim() > 0
                   for a in tree_flatten((args, kwargs))[0]):
                self.ops.add(str(func))
            return func(*args, **kwargs)

    names = {"detector": "face_detection_short_range", "landmarks": "face_landmark", "iris": "iris_landmark",
             "emotion": "emotion", "expression": "regressor"}
    runners = {role: TorchRunner(find_model(name).path, 8, "meta") for role, name in names.items()}
    tracker = BatchedFaceTracker(6, (360, 480), runners, device="meta")
    frames = torch.zeros((8, 360, 480, 3), dtype=torch.uint8, device="meta")
    streams = torch.full((8,), 6, dtype=torch.long, device="meta")  # all padding rows: the scratch slot
    with torch.inference_mode(), HostTensorSpy() as spy:
        tracker._pass(frames, streams, detect_slots=2, eager=True)
    assert not spy.ops, f"host tensors inside the captured pass: {sorted(spy.ops)}"


def _service(torch, streams: int = 3, **options):
    from bridge.serving.runners import make_runners
    from bridge.serving.service import MultiStreamFaceService

    torch.set_num_threads(1)
    return MultiStreamFaceService(streams, (360, 480), make_runners("torch", 4), device="cpu", **options)


def test_face_service_serves_concurrent_streams_in_order_like_one_tracker_per_stream():
    torch = pytest.importorskip("torch")
    import threading

    from bridge.engines.shipped import sample_frames
    from bridge.serving.runners import make_runners
    from bridge.serving.tracker import BatchedFaceTracker

    clip = sample_frames(6, step=1)
    futures = {s: [] for s in range(3)}

    def camera(stream):  # each stream's frames from its own thread, as decoders would submit them
        for k in range(4):
            futures[stream].append(service.submit(stream, clip[stream + k]))

    with _service(torch) as service:
        threads = [threading.Thread(target=camera, args=(s,)) for s in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        results = {s: [f.result(timeout=60) for f in futures[s]] for s in range(3)}
    assert service.passes >= 4  # four frames per stream need at least four passes
    for stream in range(3):
        reference = BatchedFaceTracker(1, (360, 480), make_runners("torch", 1), device="cpu")
        for k, face in enumerate(results[stream]):
            assert face.stream == stream and face.tracked
            reference.step(torch.from_numpy(clip[stream + k][None]), torch.tensor([0]))
            # same frames in the same order: the same face, whatever batches the service formed
            assert np.abs(face.landmarks[:, :2] - reference.last_landmarks[0, :, :2].numpy()).max() < 0.5
            assert face.blendshapes.shape == (52,) and face.irises.shape == (2, 5, 3)


def test_face_service_gives_a_stream_one_frame_per_pass_and_refuses_bad_frames():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames

    clip = sample_frames(3, step=1)
    with _service(torch, streams=2) as service:
        queued = [torch.from_numpy(frame) for frame in clip + [clip[2]]]  # as `submit` hands them on
        faces = service._run([0, 0, 1, 0], queued)  # stream 0 queued three frames
        assert service.passes == 3 and [f.stream for f in faces] == [0, 0, 1, 0]
        assert all(f.tracked for f in faces)
        assert service.submit(1, torch.from_numpy(clip[1])).result(timeout=60).tracked  # a torch frame works too
        with pytest.raises(ValueError, match="out of range"):
            service.submit(2, clip[0])
        with pytest.raises(ValueError, match=r"uint8 RGB of shape \(360, 480, 3\)"):
            service.submit(0, clip[0][:100])
        with pytest.raises(ValueError, match="float32"):
            service.submit(0, clip[0].astype(np.float32))


def test_face_service_refuses_a_shape_it_cannot_serve_before_loading_anything():
    pytest.importorskip("torch")
    from bridge.serving.service import MultiStreamFaceService

    for options, message in ((dict(num_streams=0, frame_hw=(360, 480)), "at least one stream"),
                             (dict(num_streams=2, frame_hw=(0, 480)), r"at least 32x32 pixels .*\(0, 480\)"),
                             (dict(num_streams=2, frame_hw=(360,)), "height, width"),
                             (dict(num_streams=2, frame_hw=(360, 480), max_batch=0), "max_batch must be at least 1")):
        with pytest.raises(ValueError, match=message):
            MultiStreamFaceService(runners={}, device="cpu", **options)


def test_face_service_serves_without_graphs_when_capture_is_impossible(caplog):
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames

    with _service(torch, streams=1, graph_buckets=[1]) as service:  # the CPU cannot capture CUDA graphs
        face = service.submit(0, sample_frames(1)[0]).result(timeout=60)
    assert not service.graphs and face.tracked
    assert "CUDA-graph capture failed" in caplog.text and "eager passes" in caplog.text


def test_bench_multistream_search_writes_every_trial_as_it_ends(tmp_path):
    """The multi-stream search through the real CLI, on the CPU runners (the GPU runs use the same code): the
    JSON holds the trials and the answer. Each trial is also on disk as it ends (`.partial`), so a run cut short
    by a wall-clock limit keeps what it measured: checked by running the section alone, as a cut run leaves it."""
    pytest.importorskip("torch")
    import argparse
    import json
    import sys

    from bridge.bench import engines as bench
    from bridge.bench.multistream import multistream_section

    flags = ["--sections", "multistream", "--multistream", "on", "--runners", "onnxruntime", "--first-streams", "1",
             "--max-streams", "2", "--stream-seconds", "0.3", "--frames-from", "gpu,host-async", "--threads", "1"]
    out = tmp_path / "ms.json"
    proc = subprocess.run([sys.executable, "-m", "bridge", "bench", "engines", *flags, "--json", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    section = json.loads(out.read_text())["results"]["multistream"]["onnxruntime-fp32"]
    trials = section["frames_on_gpu"]["trials"]
    assert trials[0]["streams"] == 1 and all(t["frames"] > 0 for t in trials)
    # uploads on arrival: results come back, and never more than the frames that arrived (none counted twice)
    uploaded = section["frames_from_host_uploaded_on_arrival"]["trials"][0]
    assert uploaded["streams"] == 1 and 0 < uploaded["frames"] <= 0.3 * 30 + 2
    assert section["compiled_models"] == [] and section["frames_on_gpu"]["max_streams_at_p99_limit"] in (0, 1, 2)

    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    parser.add_argument("--json")  # `facebridge bench` adds it to every benchmark
    args = parser.parse_args([*flags, "--json", str(tmp_path / "cut.json")])
    from torch._dynamo.utils import counters

    counters.clear()  # process-wide: other tests compile
    multistream_section(args, "onnxruntime", "fp32")
    partial = json.loads((tmp_path / "cut.json.partial").read_text())
    kept = partial["multistream_in_progress"]["onnxruntime-fp32"]["frames_on_gpu"]["trials"]
    assert kept and kept[0]["streams"] == 1 and kept[0]["frames"] > 0
    assert partial["multistream_in_progress"]["onnxruntime-fp32"]["compiled_graphs"] == 0  # nothing compiled on CPU
