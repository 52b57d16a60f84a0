"""Real TensorRT-RTX builds of every shipped model on a CPU-only machine: the engine cache (hits, corrupt, stale,
other version, other GPU), bad input (unparsable model, full disk), FP16 parity, profiles and refit, the CUDA
driver check."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from bridge.engines import EngineUnavailable, create_session
from bridge.engines.cache import EngineCache
from bridge.engines.shipped import NOT_BUILDABLE, ShippedModel, find_model, shipped_models
from bridge.engines.tensorrt.builder import EngineBuildError, EngineSpec, build_plan, profiles_for
from tests.helpers import onnx_model_with

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


def test_parser_errors_name_the_node_and_onnxruntime_still_runs_it(flavour, tmp_path):
    path = onnx_model_with("Det", tmp_path)
    with pytest.raises(EngineBuildError) as info:
        build_plan(flavour, path.read_bytes(), EngineSpec(target="sm86", opt_level=0), model_path=path)
    message = str(info.value)
    assert "node 1 'det_1' (Det)" in message and "--backend onnxruntime" in message
    session = create_session(path, "auto")  # the fallback really computes
    x = np.array([[2, 0, 0], [0, 3, 0], [0, 0, 4]], np.float32)
    assert np.isclose(session.run({"x": x})["y"], 24.0)


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
        assert session.backend_name in ("litert", "openvino", "onnxruntime")
    finally:
        subprocess.run(["umount", str(mount)], check=False)


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


def test_an_adapter_release_gets_its_own_engine_with_the_adapter_refittable_or_a_reason(flavour, tmp_path):
    """The live swap's TensorRT path for a new lip-sync adapter: a real TensorRT-RTX build of the shipped graph
    with the new adapter baked in, keyed by that graph; refittable where the library can (a GPU), else says why."""
    from bridge.audio.lipsync import load_adapter
    from bridge.engines.gpu import probe_gpu
    from bridge.models.registry import default_registry
    from bridge.runtime.releases import tensorrt_adapter_engine

    base = load_adapter(default_registry().default_adapter_path("lipsync"))
    first = tensorrt_adapter_engine(base, cache_dir=tmp_path, report=lambda line: None)
    second = tensorrt_adapter_engine({k: v * 0.5 for k, v in base.items()}, cache_dir=tmp_path,
                                     report=lambda line: None)
    assert first.plan and second.plan and not second.cache_hit and second.seconds > 0
    assert first.entry.fields["onnx_sha256"] != second.entry.fields["onnx_sha256"]
    if probe_gpu().gpu is None:
        assert second.entry.meta["refit_unavailable"].startswith("refittable build needs a GPU")
    else:
        assert sorted(second.entry.meta["refittable"]) == ["adapter.A", "adapter.B"]
