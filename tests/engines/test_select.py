"""Backend choice: the automatic order, a missing GPU falls back with a printed reason, the CPU backends agree."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.engines import EngineUnavailable, create_session
from bridge.engines.select import AUTO_ORDER, candidates, check_available
from bridge.engines.shipped import find_model


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
