"""The batched face tracker on the CPU: finds and tracks the sample face, crops and features match the single-face
pipeline, bounded detector slots, the captured pass is pure device work."""
from __future__ import annotations

import numpy as np
import pytest

from bridge.engines.shipped import find_model


def test_batched_face_tracker_finds_and_tracks_the_sample_face_on_cpu():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

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
    from bridge.mesh import EYE_CORNERS

    iris_x = tracker.last_iris[:, :, 0, 0]  # frame pixels, ARKit's eye order (subject's left eye first)
    for eye, (a, b) in enumerate(EYE_CORNERS):  # each iris lies between its own eye's corners
        lo = torch.minimum(points[:, a, 0], points[:, b, 0])
        hi = torch.maximum(points[:, a, 0], points[:, b, 0])
        assert bool(((iris_x[:, eye] > lo) & (iris_x[:, eye] < hi)).all())
    assert bool((iris_x[:, 0] > iris_x[:, 1]).all())  # the subject's left eye is on the image's right
    assert bool(((tracker.last_blendshapes >= -0.05) & (tracker.last_blendshapes <= 1.05)).all())


def test_gpu_side_expression_features_match_the_reference_layout():
    torch = pytest.importorskip("torch")
    from bridge.expression.features import features_batch
    from bridge.multistream.tracker import landmark_features_torch

    rng = np.random.default_rng(0)
    xy = rng.uniform(100, 300, (3, 468, 2))
    iris = rng.uniform(150, 250, (3, 2, 2))
    want = features_batch(xy, iris, np.ones(3, bool), np.full(3, 480.0), np.tile([240.0, 180.0], (3, 1)))
    got = landmark_features_torch(torch.from_numpy(xy), torch.from_numpy(iris), 480.0, (240.0, 180.0))
    assert got.shape == (3, 944) and np.allclose(got.numpy(), want, atol=1e-5)


def test_batched_eye_pair_crops_are_the_single_crops_in_face_order():
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

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
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

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


def test_tracker_passes_of_every_size_reuse_one_compiled_graph_per_model(monkeypatch, tmp_path):
    """The call pattern of the GPU path (channels_last runners, crops from grid_sample, bounded detector slots,
    passes of changing size) traced with a counting backend: one graph per compiled model, whatever the batch.
    On the H200 each extra graph is another half-minute compile."""
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.torch_runner import TorchRunner, compile_module
    from bridge.multistream.tracker import BatchedFaceTracker

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
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

    torch.set_num_threads(1)
    frames = torch.from_numpy(np.stack(sample_frames(4, step=1)))
    tracker = BatchedFaceTracker(4, tuple(frames.shape[1:3]), make_runners("torch", 4), device="cpu")
    streams = torch.arange(4)
    # this is the pass a CUDA graph captures: two detector rows, picked on the device among the lost streams
    tracker.step(frames, streams, detect_slots=2)
    assert int(tracker.tracked.sum()) == 2  # all four waited alike: which two comes first is the device's choice
    assert bool((tracker.last_landmarks[~tracker.tracked] == 0).all())  # not tracked yet: no results written
    tracker.step(frames, streams, detect_slots=2)
    assert bool(tracker.tracked.all())
    before = tracker.last_landmarks.clone()
    tracker.tracked[1] = False  # one stream loses its face: the spare slot lands on a tracked row, harmlessly
    tracker.step(frames, streams, detect_slots=2)
    assert bool(tracker.tracked.all()) and tracker.detector_runs == 6
    assert float((tracker.last_landmarks[..., :2] - before[..., :2]).abs().max()) < 6.0  # same frames, same faces


def test_bounded_detector_slots_take_the_lost_streams_in_turn_so_faceless_streams_never_starve_the_others():
    """Two streams with no face in view (first in every pass) and two with one, two detector slots a pass: the
    slots go to the lost streams that waited longest, so the faces are found by the second pass, and a face lost
    later is found again within two passes while the faceless streams stay lost (slots by place in the pass gave
    every pass's slots to the faceless streams: the faces were never found)."""
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

    torch.set_num_threads(1)
    face = sample_frames(1)[0]
    wall = np.full_like(face, 128)
    frames = torch.from_numpy(np.stack([wall, wall, face, face]))
    tracker = BatchedFaceTracker(4, tuple(frames.shape[1:3]), make_runners("torch", 4), device="cpu")
    streams = torch.arange(4)
    for _ in range(2):
        tracker.step(frames, streams, detect_slots=2)
    assert tracker.tracked.tolist() == [False, False, True, True]
    tracker.tracked[3] = False  # the face is lost (a hand before it): the faceless streams were tried last pass
    tracker.step(frames, streams, detect_slots=2)
    tracker.step(frames, streams, detect_slots=2)
    assert tracker.tracked.tolist() == [False, False, True, True]
    assert tracker.detector_runs == 8


def test_the_captured_pass_is_pure_device_work():
    """What a CUDA graph captures may not touch host tensors (a copy) nor read values (a sync). Checked without a
    GPU: the pass runs on the meta device (shapes only: reading a value fails) while every op is inspected for
    a host tensor argument."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    from bridge.multistream.torch_runner import TorchRunner
    from bridge.multistream.tracker import BatchedFaceTracker

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
