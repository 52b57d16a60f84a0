"""TrackStreams over a real FaceServeServer and MultiStreamFaceService (torch CPU runners) whose passes cannot be
described: every image is still answered, so a client with one frame in flight goes on."""
from __future__ import annotations

import time

import pytest


def test_an_image_whose_pass_fails_is_answered_and_the_stream_goes_on():
    torch = pytest.importorskip("torch")
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService
    from bridge.serving.client import TrackClient, encode_jpeg
    from bridge.serving.grpc_service import FaceServeServer
    from bridge.serving.streams import StreamTable

    torch.set_num_threads(1)
    runners = make_runners("torch", 1)
    described = []

    def finish_pass(slots, served, faces):  # as a describe step that raises (H200: cv2's SQPNP on a bad row)
        described.append(len(served))
        raise RuntimeError("the head pose failed\nsecond line of the error")

    table = StreamTable(lambda hw, n: MultiStreamFaceService(n, hw, runners, device="cpu", finish_pass=finish_pass),
                        max_streams=1, deadline_s=60.0)
    server = FaceServeServer(table, "127.0.0.1:0", device="cpu")
    jpeg = encode_jpeg(cv2.cvtColor(sample_frames(1, step=1)[0], cv2.COLOR_RGB2BGR))
    client = TrackClient(server.address, subject="Failing", deadline_ms=60_000)
    try:
        for seq in range(3):  # one frame in flight: the next is sent only once this one is answered
            client.send_encoded(jpeg, seq=seq, media_time=seq / 30)
            face, _dropped, _replica = client.results.get(timeout=120)
            assert face is None
            assert client.refused[-1][0] == seq
            assert "could not describe its pass (the head pose failed)" in client.refused[-1][1]
            assert "the stream goes on" in client.refused[-1][1]
            assert client.report.bad_frames == seq + 1
        deadline = time.monotonic() + 10
        while server.stats()["bad"] < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.stats()["bad"] == 3 and described == [1, 1, 1]
        assert client.error is None  # the stream is still open
    finally:
        client.close()
        server.close()
        table.close()


def test_track_many_frames_whose_pass_fails_are_each_answered_and_their_streams_go_on():
    """The batched wire posts a call's frames without a future a frame: a failed pass reaches each of them through
    the batcher's on_fail all the same, answered by an ImageRefused naming the failure, and every stream goes on."""
    torch = pytest.importorskip("torch")
    import cv2

    from bridge.engines.shipped import sample_frames
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService
    from bridge.serving.client import TrackManyClient, encode_jpeg
    from bridge.serving.grpc_service import FaceServeServer
    from bridge.serving.streams import StreamTable

    torch.set_num_threads(1)
    runners = make_runners("torch", 2)

    def finish_pass(slots, served, faces):
        raise RuntimeError("the head pose failed")

    table = StreamTable(lambda hw, n: MultiStreamFaceService(n, hw, runners, device="cpu", finish_pass=finish_pass),
                        max_streams=2, deadline_s=60.0)
    server = FaceServeServer(table, "127.0.0.1:0", device="cpu")
    jpeg = encode_jpeg(cv2.cvtColor(sample_frames(1, step=1)[0], cv2.COLOR_RGB2BGR))
    client = TrackManyClient(server.address)
    try:
        for seq in range(2):  # both streams' images in one request, each answered before the next is sent
            client.send([client.item(i, jpeg, subject=f"Failing{i}", seq=seq, deadline_ms=60_000) for i in (0, 1)])
            for i in (0, 1):
                face, _dropped, _replica = client.results[i].get(timeout=120)
                assert face is None and client.refused[i][-1][0] == seq
                assert "could not describe its pass (the head pose failed)" in client.refused[i][-1][1]
                assert client.reports[i].bad_frames == seq + 1
        assert server.stats()["bad"] == 4 and server.stats()["streams"] == 2  # both still open
        assert client.error is None and not client.ended
    finally:
        client.close()
        server.close()
        table.close()
