"""`facebridge bench precision` measures each CPU precision against ONNX Runtime f32 and records what really ran."""
from __future__ import annotations

import json

import pytest

from bridge.engines import check_available
from bridge.engines.precision import cpu_has_native_bf16


@pytest.mark.slow  # six pipelines (three configurations, smoothing off and on)
def test_bench_precision_reports_errors_jitter_and_the_precision_that_ran(tmp_path):
    from bridge.cli import main

    out = tmp_path / "precision.json"
    assert main(["bench", "precision", "--frames", "12", "--still-frames", "13", "--rounds", "1",
                 "--json", str(out)]) == 0
    r = json.loads(out.read_text())["results"]
    assert r["reference"] == "onnxruntime-f32"
    assert r["models"]["onnxruntime-f32"]["face_landmark"]["landmarks_px_at_192"]["max"] == 0.0
    assert set(r["still"]) == {"noise_0", "noise_2"} and r["pipeline_speed"]["onnxruntime-f32"]["frames"] == 12
    if check_available("openvino").ok:
        assert r["running_precision"]["openvino-f32"]["face_landmark"] == "f32"
        assert r["models"]["openvino-f32"]["face_landmark"]["landmarks_px_at_192"]["max"] < 0.01
        expected = "bf16" if cpu_has_native_bf16() else "f32"
        assert r["running_precision"]["openvino-bf16"]["face_landmark"] == expected
