"""GPU tests for the inference engines (run on the H200 through the device tool; skipped without a GPU).

They check that the CUDA paths compute what the CPU path computes, on real frames of the bundled clip.
"""
import numpy as np
import pytest

from bridge.engines.gpu import probe_gpu
from bridge.engines.onnxruntime_backend import cuda_provider_available


def _torch_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = pytest.mark.gpu
needs_ort_cuda = pytest.mark.skipif(probe_gpu().gpu is None or not cuda_provider_available(),
                                    reason="needs an NVIDIA GPU and onnxruntime-gpu")
needs_torch_cuda = pytest.mark.skipif(not _torch_cuda(), reason="needs an NVIDIA GPU and torch with CUDA")

RUNNERS, STREAMS_AT_ONCE = "torch-cuda", 64  # the front ends' test below
FACE_MODELS = ["face_detection_short_range", "face_detection_full_range", "face_landmark", "iris_landmark",
               "emotion"]


def _feeds(name: str, batch: int = 4):
    from bridge.engines.onnxruntime_backend import OrtSession
    from bridge.engines.shipped import find_model, frames_as_input, value_range_of

    model = find_model(name)
    spec = OrtSession(model.path).inputs[0]
    return model, spec.name, frames_as_input(tuple(spec.shape[1:]), value_range_of(model.entry), count=batch)


def _close(a, b, rel=2e-3):
    scale = max(float(np.abs(b).max()), 1.0)
    assert float(np.abs(a - b).max()) <= rel * scale, (float(np.abs(a - b).max()), scale)


@needs_ort_cuda
@pytest.mark.parametrize("name", FACE_MODELS)
def test_ort_cuda_matches_cpu_on_real_frames(name):
    from bridge.engines import create_session

    model, input_name, x = _feeds(name)
    cpu = create_session(model.path, "onnxruntime").run({input_name: x})
    gpu_session = create_session(model.path, "onnxruntime-cuda", strict=True)
    assert gpu_session.backend_name == "onnxruntime-cuda"
    gpu = gpu_session.run({input_name: x})
    for key in cpu:
        _close(gpu[key], cpu[key])


@needs_ort_cuda
@pytest.mark.parametrize("name", ["face_landmark", "iris_landmark"])
def test_device_bound_cuda_graph_runner_matches_cpu(name):
    import torch

    from bridge.engines import create_session
    from bridge.multistream.runners import OrtCudaRunner

    model, input_name, x = _feeds(name, batch=3)
    cpu = list(create_session(model.path, "onnxruntime").run({input_name: x}).values())
    runner = OrtCudaRunner(model.path, 4, cuda_graphs=True, buckets=[4])
    xd = torch.from_numpy(x).cuda()
    for _ in range(3):  # replays of the captured graph must keep giving the same answer
        outs = runner(xd)
        torch.cuda.synchronize()
        for got, want in zip(outs, cpu):
            _close(got.cpu().numpy(), want)


@needs_ort_cuda
def test_batched_tracker_on_gpu_matches_cpu():
    import torch

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

    frames = np.stack(sample_frames(4))
    streams = torch.arange(4)
    results = {}
    for device, kind in (("cpu", "onnxruntime"), ("cuda", "onnxruntime-cuda")):
        tracker = BatchedFaceTracker(4, frames.shape[1:3], make_runners(kind, 8, conv_search="HEURISTIC"),
                                     device=device)
        f = torch.from_numpy(frames).to(device)
        for _ in range(3):
            tracker.step(f, streams.to(device))
        results[device] = (tracker.tracked.cpu().numpy(), tracker.last_landmarks.cpu().numpy(),
                           tracker.last_emotion.cpu().numpy())
    assert results["cuda"][0].all() and results["cpu"][0].all(), "the sample face must stay tracked"
    assert np.abs(results["cuda"][1][..., :2] - results["cpu"][1][..., :2]).max() < 1.0  # pixels
    assert np.abs(results["cuda"][2] - results["cpu"][2]).max() < 0.02


@needs_ort_cuda
def test_auto_selection_on_this_gpu_explains_itself(capsys):
    from bridge.engines import create_session
    from bridge.engines.select import check_available
    from bridge.engines.shipped import find_model

    session = create_session(find_model("emotion").path, "auto")
    assert session.backend_name in ("tensorrt", "tensorrt-rtx", "onnxruntime-cuda")
    gpu = probe_gpu().gpu
    rtx = check_available("tensorrt-rtx")
    if gpu.compute_capability == (9, 0):  # H100/H200: TensorRT-RTX engines do not execute here
        assert not rtx.ok
        assert "not installed" in rtx.reason or "9.0" in rtx.reason
        assert session.backend_name in ("tensorrt", "onnxruntime-cuda")


TORCH_MODELS = ["face_detection_short_range", "face_landmark", "iris_landmark", "emotion", "regressor"]


def _torch_feeds(name: str, batch: int):
    if name != "regressor":
        return _feeds(name, batch)
    from bridge.engines.shipped import find_model

    return find_model(name), "features", np.random.default_rng(0).normal(size=(batch, 944)).astype(np.float32)


@needs_torch_cuda
@pytest.mark.parametrize("name", TORCH_MODELS)
def test_torch_cuda_graph_runner_matches_ort_cpu_and_fp16_stays_close(name):
    import torch

    from bridge.engines import create_session
    from bridge.multistream.torch_runner import TorchRunner

    model, input_name, x = _torch_feeds(name, batch=3)
    cpu = list(create_session(model.path, "onnxruntime").run({input_name: x}).values())
    xd = torch.from_numpy(x).cuda()
    fp32 = TorchRunner(model.path, 4, "cuda", buckets=[2, 4])
    half = TorchRunner(model.path, 4, "cuda", fp16=True, channels_last=True, buckets=[4])
    for _ in range(3):  # replays of the captured graphs must keep giving the same answer
        for got, want in zip(fp32(xd), cpu):
            _close(got.cpu().numpy(), want)
        for got, want in zip(half(xd), cpu):  # the same check the FP16 engine build makes: 1% of the range
            _close(got.cpu().numpy(), want, rel=0.01)


@needs_torch_cuda
def test_batched_tracker_torch_cuda_fp16_matches_cpu():
    import torch

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

    frames = np.stack(sample_frames(6, step=1))
    streams = torch.arange(6)
    results = {}
    for device, kind in (("cpu", "onnxruntime"), ("cuda", "torch-cuda")):
        tracker = BatchedFaceTracker(6, frames.shape[1:3], make_runners(kind, 8, fp16=True, buckets=[4, 8]),
                                     device=device)
        f = torch.from_numpy(frames).to(device)
        for _ in range(3):
            tracker.step(f, streams.to(device))
        assert tracker.detector_runs == 6  # once per stream, then tracked
        results[device] = [v.cpu().numpy() for v in (tracker.tracked, tracker.last_landmarks, tracker.last_emotion,
                                                      tracker.last_blendshapes)]
    assert results["cuda"][0].all() and results["cpu"][0].all(), "the sample face must stay tracked"
    assert np.abs(results["cuda"][1][..., :2] - results["cpu"][1][..., :2]).max() < 1.5  # pixels, fp16
    assert np.abs(results["cuda"][2] - results["cpu"][2]).max() < 0.03
    assert np.abs(results["cuda"][3] - results["cpu"][3]).max() < 0.05


@needs_torch_cuda
def test_captured_tracked_pass_matches_the_eager_pass_with_padding_and_a_lost_stream():
    import torch

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

    frames = torch.from_numpy(np.stack(sample_frames(8, step=1))).cuda()
    runners = make_runners("torch-cuda", 8, buckets=[4, 8], tracked_pass_graphs=True)
    eager = BatchedFaceTracker(5, frames.shape[1:3], runners)
    graphed = BatchedFaceTracker(5, frames.shape[1:3], runners)
    graphed.capture_cuda_graphs([4, 8], detect_fraction=1.0)  # as many detector slots as rows, like eager
    passes = [torch.arange(5), torch.arange(5), torch.tensor([0, 2, 4]), torch.arange(5)]
    for k, streams in enumerate(passes):
        streams = streams.cuda()
        if k == 3:  # stream 1 loses its face: the detector runs for it, the rest replay the graph
            eager.tracked[1] = graphed.tracked[1] = False
        batch = frames[(streams + k) % 8]
        eager.step(batch, streams)
        graphed.step(batch, streams)
        torch.cuda.synchronize()
        assert bool((eager.tracked == graphed.tracked).all())
        # cuDNN may pick other kernels for a padded bucket than for the exact batch (TF32 on): tiny differences
        for a, b, tolerance in ((eager.last_landmarks, graphed.last_landmarks, 0.05),  # pixels
                                (eager.last_iris, graphed.last_iris, 0.05),
                                (eager.last_emotion, graphed.last_emotion, 5e-3),
                                (eager.last_blendshapes, graphed.last_blendshapes, 5e-3)):
            assert float((a - b).abs().max()) < tolerance
    assert bool(graphed.tracked.all())


@needs_torch_cuda
def test_compiled_runner_matches_eager_kernels_for_every_bucket_and_batch_one_stays_eager():
    import torch

    from bridge.multistream.torch_runner import TorchRunner

    model, _input, x = _feeds("face_landmark", batch=3)
    xd = torch.from_numpy(x).cuda()
    eager = TorchRunner(model.path, 4, "cuda", fp16=True, channels_last=True, buckets=[1, 2, 4])
    compiled = TorchRunner(model.path, 4, "cuda", fp16=True, channels_last=True, buckets=[1, 2, 4], compile=True)
    assert compiled.compiled and not eager.compiled
    for rows in (3, 2, 1):  # bucket 4 (padded), bucket 2, and batch 1 (eager kernels inside the compiled runner)
        for _ in range(2):  # graph replays keep giving the same answer
            for got, want in zip(compiled(xd[:rows]), eager(xd[:rows])):
                _close(got.cpu().numpy(), want.cpu().numpy(), rel=0.01)


@needs_torch_cuda
def test_face_service_on_the_gpu_product_path_matches_the_cpu_service():
    """The multi-stream product path end to end: compiled fp16 torch-cuda runners, whole passes captured as CUDA
    graphs with detection inside, host and device frames, against the CPU service on the same frames."""
    import torch

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService

    clip = sample_frames(10, step=1)
    hw = clip[0].shape[:2]
    faces = {}
    gpu_runners = make_runners("torch-cuda", 8, fp16=True, buckets=[2, 4, 8], tracked_pass_graphs=True)
    for name, service in (("cpu", MultiStreamFaceService(4, hw, make_runners("onnxruntime", 4), device="cpu")),
                          ("gpu", MultiStreamFaceService(4, hw, gpu_runners, graph_buckets=[2, 4, 8]))):
        with service:
            assert name == "cpu" or service.graphs, "the GPU service must run captured passes"
            rounds = []
            for k in range(6):  # 2 detector slots per captured pass: all 4 streams tracked by the 2nd round
                frames = [clip[s + k] for s in range(4)]
                if name == "gpu" and k % 2:  # frames already on the device (NVDEC) every other round
                    frames = [torch.from_numpy(f).cuda() for f in frames]
                rounds.append([f.result(timeout=120) for f in [service.submit(s, frames[s]) for s in range(4)]])
            faces[name] = rounds
    for k in (4, 5):
        for cpu, gpu in zip(faces["cpu"][k], faces["gpu"][k]):
            assert cpu.stream == gpu.stream and cpu.tracked and gpu.tracked
            # pixels: fp16 (up to 1.5 in the tracker test) plus streams 2 and 3 detected a frame later (0.6 by round 4)
            assert np.abs(cpu.landmarks[:, :2] - gpu.landmarks[:, :2]).max() < 2.5
            assert np.abs(cpu.emotion - gpu.emotion).max() < 0.03
            assert np.abs(cpu.blendshapes - gpu.blendshapes).max() < 0.05


@needs_torch_cuda
def test_nvjpeg_on_the_serving_gpu_decodes_what_opencv_decodes():
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.decode import JPEG, ImageDecoder
    from bridge.serving.client import encode_jpeg

    data = encode_jpeg(cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR))
    decoder = ImageDecoder("cuda")
    assert decoder.gpu_jpeg and decoder.name == "gpu (nvjpeg)"
    frame, hw = decoder.decode(JPEG, data)
    assert hw == (360, 480) and frame.is_cuda and tuple(frame.shape) == (360, 480, 3)
    want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    assert _near_opencv(frame, want)


@needs_torch_cuda
def test_nvjpeg_decodes_a_batch_in_one_call_and_refuses_only_the_bad_image():
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.decode import BadImage, ImageDecoder
    from bridge.serving.client import encode_jpeg

    frames = sample_frames(3, step=5)
    datas = [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in frames]
    decoder = ImageDecoder("cuda")
    got = decoder.decode_jpegs(datas, [(360, 480)] * 3)  # one batched nvJPEG call
    for data, (frame, hw) in zip(datas, got):
        want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        assert hw == (360, 480) and frame.is_cuda and _near_opencv(frame, want)
    broken = datas[1][:600] + bytes(len(datas[1]) - 602) + b"\xff\xd9"  # its header, then nothing decodable
    # nvJPEG may refuse the batch, or decode the zeroed scan as an image (torchvision 0.26 on the H200 did):
    # either way the good images come out as they did alone
    mixed = decoder.decode_jpegs([datas[0], broken, datas[2]], [(360, 480)] * 3)
    assert not isinstance(mixed[0], BadImage) and not isinstance(mixed[2], BadImage)
    assert torch_equal(mixed[0][0], got[0][0]) and torch_equal(mixed[2][0], got[2][0])
    # as the engine hands them over: ring-slot arrays made tensors on its reader threads (`encoded`), no copy
    slots = [np.frombuffer(bytearray(d), np.uint8) for d in datas]  # writable, as a ring slot is
    tensors = [decoder.encoded(a) for a in slots]
    assert all(t.data_ptr() == a.ctypes.data for t, a in zip(tensors, slots))
    again = decoder.decode_jpegs(tensors, [(360, 480)] * 3)
    assert all(torch_equal(a[0], b[0]) for a, b in zip(again, got))


@needs_torch_cuda
def test_nvimgcodec_decodes_a_batch_as_nvjpeg_does_and_refuses_only_the_bad_image():
    """--jpeg-decoder nvimgcodec: the same frames as torchvision's nvJPEG within its tolerance against OpenCV, in
    PyTorch's memory (a copy on the decoding stream), and a broken image refused alone, as BadImage."""
    pytest.importorskip("nvidia.nvimgcodec", reason="nvImageCodec is not installed (nvidia-nvimgcodec-cu13)")
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.decode import BadImage, ImageDecoder
    from bridge.serving.client import encode_jpeg

    frames = sample_frames(3, step=5)
    datas = [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in frames]
    decoder = ImageDecoder("cuda", library="nvimgcodec")
    assert decoder.name == "gpu (nvimgcodec)" and decoder.encoded(datas[0]) is datas[0]
    slots = [np.frombuffer(bytearray(d), np.uint8) for d in datas]  # as the engine hands them over
    got = decoder.decode_jpegs(slots, [(360, 480)] * 3)
    for data, (frame, hw) in zip(datas, got):
        want = cv2.cvtColor(cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
        assert hw == (360, 480) and frame.is_cuda and frame.shape == (360, 480, 3) and _near_opencv(frame, want)
    broken = datas[1][:600] + bytes(len(datas[1]) - 602) + b"\xff\xd9"
    mixed = decoder.decode_jpegs([datas[0], broken, datas[2]], [(360, 480)] * 3)
    assert torch_equal(mixed[0][0], got[0][0]) and torch_equal(mixed[2][0], got[2][0])
    assert isinstance(mixed[1], BadImage) or mixed[1][0].shape == (360, 480, 3)  # refused, or decoded as zeros
    garbage = b"\xff\xd8\xff\xdb" + bytes(200) + b"\xff\xd9"  # no header nvImageCodec can read: refused alone
    alone = decoder.decode_jpegs([datas[0], garbage, datas[2]], [(360, 480)] * 3)
    assert isinstance(alone[1], BadImage)
    assert torch_equal(alone[0][0], got[0][0]) and torch_equal(alone[2][0], got[2][0])
    frame, hw = decoder.decode(1, datas[2])  # one image alone (JPEG = 1)
    assert hw == (360, 480) and torch_equal(frame, got[2][0])


def _near_opencv(frame, want) -> bool:
    # nvJPEG's IDCT and chroma upsampling are not libjpeg-turbo's (OpenCV upsamples 4:2:0 chroma with a triangle
    # filter): a fraction of a level on average, but up to 30 levels at sharp colour edges (H200, 2026-12-02)
    diff = np.abs(frame.cpu().numpy().astype(int) - want.astype(int))
    return bool(diff.mean() < 1.0 and diff.max() <= 48)


def torch_equal(a, b) -> bool:
    return bool((a.contiguous() == b.contiguous()).all())


@needs_torch_cuda
def test_serve_with_torch_cuda_runners_gives_the_facebridge_run_frames():
    """The product path on the GPU (compiled fp16 runners, captured passes, nvJPEG) over real gRPC against the
    single-face pipeline on the same decoded frames; fp16 adds to the CPU tolerances of tests/e2e/test_serve.py."""
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.frame import Frame
    from bridge.pipeline import FacePipeline
    from bridge.runtime.serve import ServeConfig, build_server
    from bridge.serving.client import TrackClient, encode_jpeg

    jpegs = [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in sample_frames(12, step=1)]
    server = build_server(ServeConfig(grpc="127.0.0.1:0", runners="torch-cuda", max_streams=8))
    try:
        assert server.decoder.gpu_jpeg
        client = TrackClient(server.address, deadline_ms=600_000)
        served = []
        for k, data in enumerate(jpegs):
            client.send_encoded(data, seq=k, capture_time=1000 + k / 30, source_time=k / 30, media_time=k / 30)
            served.append(client.results.get(timeout=300)[0])
        client.close()
    finally:
        server.close()
    pipeline = FacePipeline()
    for k, (got, data) in enumerate(zip(served, jpegs)):
        image = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        want = pipeline.process(Frame(image=image, seq=k, t_capture=1000 + k / 30, t_capture_mono=k / 30,
                                      t_media=k / 30))
        assert got.face_found and want.face_found
        assert np.abs(got.head_rotation - want.head_rotation).max() < (3.0 if k < 6 else 1.5)
        assert np.abs(got.blendshapes - want.blendshapes).max() < (0.2 if k < 6 else 0.08)
        assert np.abs(got.emotion - want.emotion).max() < 0.05


@needs_torch_cuda
@pytest.mark.parametrize("decode", [(), ("--decode-processes", "2")], ids=["engine-decodes", "decode-processes"])
def test_front_ends_on_the_gpu_serve_many_new_streams_at_once_with_the_facebridge_run_frames(tmp_path, decode):
    """`facebridge serve --front-ends 2` with the GPU runners: 64 streams over TrackMany start in the same passes
    (where nvJPEG's outputs were once overwritten by the next decode while a queued pass still read them: NaN
    landmarks for dozens of new streams at once, H100). A captured pass detects a bounded number of lost streams
    (tracker.capture_cuda_graphs: a sixteenth of its bucket, at least 2, to the lost streams that waited longest),
    so new streams are found a few a pass: each stream within 20 frames, and from then on every frame is a face,
    finite, and what the single-face pipeline computes from that frame on (the fp16 tolerances of the one-process
    test above); every frame is finite before it too, and the engine never reports a non-finite result. Again with
    the JPEGs decoded in two decode processes into the engine's frame pool (CUDA IPC)."""
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.frame import Frame
    from bridge.pipeline import FacePipeline
    from bridge.serving.client import TrackManyClient, encode_jpeg
    from tests.helpers import serve_process

    streams, frames = STREAMS_AT_ONCE, 24
    # four detected a frame (a pass of 64 detects 4, one of a front end's 32 detects 2): 16 frames, and a few more
    # where a pass holds one front end's frames only and that front end has no lost stream left for its slots
    detect_within = streams // 4 + 4
    jpegs = [encode_jpeg(cv2.cvtColor(f, cv2.COLOR_RGB2BGR)) for f in sample_frames(frames, step=1)]
    args = ("--grpc", "127.0.0.1:0", "--runners", RUNNERS, "--front-ends", "2", "--max-streams", str(streams),
            "--updates", "off", *decode)
    with serve_process(*args, home=tmp_path / "home", ready_timeout=600) as (proc, addresses):
        assert not decode or "in 2 decode processes" in next(x for x in proc.lines if "listening on" in x)
        clients = [TrackManyClient(address) for address in addresses]
        served: dict[int, list] = {i: [] for i in range(streams)}
        try:
            for k, data in enumerate(jpegs):  # every stream's frame k in one message a front end, in lockstep
                for f, client in enumerate(clients):
                    ids = range(f, streams, len(clients))
                    client.send([client.item(i, data, subject=f"Subject{i}", seq=k, capture_time=1000 + k / 30,
                                             source_time=k / 30, media_time=k / 30, deadline_ms=600_000)
                                 for i in ids])
                for f, client in enumerate(clients):
                    for i in range(f, streams, len(clients)):
                        face, dropped, _ = client.results[i].get(timeout=300)
                        assert face is not None and dropped == 0, (i, k)
                        served[i].append(face)
            assert all(client.error is None for client in clients)
        finally:
            for client in clients:
                client.close()
        assert not [line for line in proc.lines if "non-finite" in line]
    for i in range(streams):
        assert all(np.isfinite(f.blendshapes).all() and np.isfinite(f.head_rotation).all() for f in served[i]), i
    first = {i: next((k for k, f in enumerate(served[i]) if f.face_found), frames) for i in range(streams)}
    assert max(first.values()) < detect_within, sorted(first.values())
    images = [cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR) for data in jpegs]
    for start in sorted(set(first.values())):  # the single-face pipeline from the frame these streams were found
        pipeline = FacePipeline()
        wants = [pipeline.process(Frame(image=images[k], seq=k, t_capture=1000 + k / 30, t_capture_mono=k / 30,
                                        t_media=k / 30)) for k in range(start, frames)]
        for i in (i for i in range(streams) if first[i] == start):
            for k, want in enumerate(wants, start):
                got, since = served[i][k], k - start
                assert got.face_found and want.face_found, (i, k)
                assert np.abs(got.head_rotation - want.head_rotation).max() < (3.0 if since < 6 else 1.5), (i, k)
                assert np.abs(got.blendshapes - want.blendshapes).max() < (0.2 if since < 6 else 0.08), (i, k)
