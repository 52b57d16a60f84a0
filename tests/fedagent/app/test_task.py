"""Adapter training on the frozen base: the numpy model is the ONNX model, and fine-tuning helps held-out speech."""
import numpy as np
import pytest

from bridge.audio.lipsync import LipSyncModel
from bridge.errors import FaceBridgeError
from fedagent.app import task
from tests.helpers import learn_window


@pytest.fixture(scope="module")
def speaker(speaker_population):
    stores, _ = speaker_population
    trunk = task.Trunk()
    return task.device_frames(trunk, stores[0].windows()), trunk, stores[0]


def test_the_numpy_model_computes_what_the_onnx_model_computes(speaker):
    _, trunk, store = speaker
    window = store.windows()[0]
    rng = np.random.default_rng(0)
    adapter = {k: v + rng.normal(0, 0.05, v.shape).astype(np.float32) for k, v in task.default_adapter().items()}
    vis, mouth = task.predict(adapter, task.frames_from_windows(trunk, [window]))
    model = LipSyncModel(adapter=adapter)
    pad = np.full((model.lookahead, 40), np.log(1e-8), np.float32)
    onnx_vis, onnx_mouth = model.step(np.concatenate([window.mel, pad]))
    assert np.abs(mouth - onnx_mouth[model.lookahead:]).max() < 1e-4
    assert np.abs(vis - onnx_vis[model.lookahead:]).max() < 1e-4


def test_fine_tuning_lowers_the_held_out_error_and_never_returns_a_worse_adapter(speaker):
    (train, held), _, _ = speaker
    start = task.default_adapter()
    result = task.fine_tune(start, train, held, task.TrainConfig(max_epochs=8))
    assert result.error_after < result.error_before - 0.002
    assert result.error_after == pytest.approx(task.mouth_error(result.adapter, held), abs=1e-6)
    frozen = task.fine_tune(start, train, held, task.TrainConfig(max_epochs=3, lr=0.0))
    assert frozen.error_after == frozen.error_before  # nothing better found: the start comes back
    assert all(np.array_equal(frozen.adapter[k], start[k]) for k in start)


def test_a_device_with_too_little_data_is_told_what_to_do():
    with pytest.raises(FaceBridgeError, match="at least 2 are needed.*--learn"):
        task.split_windows([learn_window()])


def test_an_update_of_the_wrong_shape_is_refused():
    arrays = task.adapter_to_list(task.default_adapter())
    with pytest.raises(FaceBridgeError, match="shape"):
        task.adapter_from_list([arrays[0][:, :4], arrays[1]])
    with pytest.raises(FaceBridgeError, match="tensors"):
        task.adapter_from_list(arrays[:1])


def test_the_held_out_slice_is_every_fifth_window_and_stable():
    windows = [learn_window(seed=i) for i in range(12)]
    train, held = task.split_windows(windows)
    assert [w.t_start for w in held] == [windows[4].t_start, windows[9].t_start]
    assert len(train) == 10 and task.split_windows(windows)[1][0] is held[0]
