"""MultiStreamFaceService on the CPU: concurrent streams in order, one frame per stream per pass, refusals."""
from __future__ import annotations

import threading

import numpy as np
import pytest


def _service(torch, streams: int = 3, **options):
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService

    torch.set_num_threads(1)
    return MultiStreamFaceService(streams, (360, 480), make_runners("torch", 4), device="cpu", **options)


def test_face_service_serves_concurrent_streams_in_order_like_one_tracker_per_stream():
    torch = pytest.importorskip("torch")

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.tracker import BatchedFaceTracker

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
        queued = [(torch.from_numpy(frame), None) for frame in clip + [clip[2]]]  # as `submit` hands them on
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
    from bridge.multistream.service import MultiStreamFaceService

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


def test_a_finished_pass_carries_each_frames_pass_timing_through_merged_passes():
    """finish_pass gets each frame's pass start and end (perf_counter) and GPU time (NaN on the CPU), also for
    passes merged for a describing thread that fell behind (each frame keeps its own pass's times)."""
    torch = pytest.importorskip("torch")
    import time

    from bridge.engines.shipped import sample_frames

    clip = sample_frames(3, step=1)
    gate, seen = threading.Event(), []

    def finish(streams, tags, faces):
        if tags[0] == "first":
            gate.wait(60)  # holds the describing thread: the next passes queue for it and come merged
        seen.append((list(tags), faces.timing.copy(), time.perf_counter()))
        return list(tags)

    with _service(torch, finish_pass=finish) as service:
        t0 = time.perf_counter()
        first = service.submit(0, clip[0], tag="first")
        while not service.passes:
            time.sleep(0.001)
        later = []
        for s in (1, 2):  # a pass each, both queued behind the held describing thread
            later.append(service.submit(s, clip[s], tag=f"s{s}"))
            while service.passes < s + 1:
                time.sleep(0.001)
        time.sleep(0.05)
        gate.set()
        assert first.result(timeout=60) == "first" and [f.result(timeout=60) for f in later] == ["s1", "s2"]
    assert [tags for tags, _, _ in seen][0] == ["first"] and sorted(seen[1][0]) == ["s1", "s2"]
    assert len(seen) == 2  # the two passes after the first were finished as one call
    for tags, timing, finished in seen:
        assert timing.shape == (len(tags), 3)
        assert (t0 <= timing[:, 0]).all() and (timing[:, 0] < timing[:, 1]).all() and (timing[:, 1] <= finished).all()
        assert np.isnan(timing[:, 2]).all()  # no GPU
    assert seen[1][1][0, 1] > seen[0][1][0, 1]  # the first pass's end came before the later ones'


def test_kept_frames_of_a_pool_serve_as_copied_frames_do_and_bad_ones_are_refused_before_any_is_queued():
    """post_many(kept=True) (the engine's frame pool on the GPU): views of one device tensor queued as they are give
    the same faces as the same frames posted the usual way; frames that are not such views are refused at once."""
    torch = pytest.importorskip("torch")
    from bridge.engines.shipped import sample_frames

    clip = sample_frames(2, step=1)
    pool = torch.empty((4, 360 * 480 * 3), dtype=torch.uint8)  # rows as the frame pool's, wider than one frame
    views = pool.view(4, -1)[:, :360 * 480 * 3].view(4, 360, 480, 3).unbind(0)
    views[2].copy_(torch.from_numpy(clip[0]))
    views[3].copy_(torch.from_numpy(clip[1]))
    got = {}
    done = threading.Event()

    def finish(streams, tags, faces):
        for tag, stream in zip(tags, streams):
            got[tag] = faces.rows[list(streams).index(stream)].copy()
        if len(got) == 4:
            done.set()
        return list(tags)

    def failed(tags, error):
        raise AssertionError(f"no pass may fail here: {error}")

    with _service(torch, streams=4, finish_pass=finish) as service:
        service.post_many([0, 1], [views[2], views[3]], ["kept-0", "kept-1"], failed, kept=True)
        service.post_many([2, 3], list(clip), ["copied-0", "copied-1"], failed)
        assert done.wait(120)
        for bad, why in (([clip[0]], "tensors on cpu"), ([views[2][:100]], "uint8 RGB of shape"),
                         ([views[2], views[3][:, :240]], "must all be")):
            with pytest.raises(ValueError, match=why):
                service.post_many(list(range(len(bad))), bad, ["bad"] * len(bad), failed, kept=True)
        with pytest.raises(ValueError, match="out of range"):
            service.post_many([7], [views[2]], ["bad"], failed, kept=True)
    for k in (0, 1):
        # same pixels, same model: the same face (to float rounding: the two may have run in passes of other sizes)
        np.testing.assert_allclose(got[f"kept-{k}"], got[f"copied-{k}"], rtol=1e-4, atol=1e-3)
        assert got[f"kept-{k}"][0] > 0.5  # tracked: a face was found
