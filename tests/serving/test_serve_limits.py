"""`facebridge serve`'s limits over a real FaceServeServer on 127.0.0.1 (torch CPU runners, real Track clients):
frame-size services are released when no stream uses them (least recently used first), so short streams of odd
sizes never lock a later size out; one peer holds at most `max_streams_per_peer` streams; GetServeStatus says both.
"""
from __future__ import annotations

import time

import grpc
import numpy as np
import pytest


@pytest.fixture
def serve():
    torch = pytest.importorskip("torch")
    from bridge.multistream.runners import make_runners
    from bridge.multistream.service import MultiStreamFaceService
    from bridge.serving.grpc_service import FaceServeServer
    from bridge.serving.streams import StreamTable

    torch.set_num_threads(1)
    runners = make_runners("torch", 2)

    def finish_pass(slots, served, faces):  # no describe step here: each image is answered with this reason
        raise RuntimeError("not described in this test")

    table = StreamTable(lambda hw, n: MultiStreamFaceService(n, hw, runners, device="cpu", finish_pass=finish_pass),
                        max_streams=2, deadline_s=60.0, max_sizes=2, max_streams_per_peer=1)
    server = FaceServeServer(table, "127.0.0.1:0", device="cpu")
    yield server
    server.close()
    table.close()


def _status(server):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    with grpc.insecure_channel(server.address) as channel:
        return pb_grpc.FaceServeServiceStub(channel).GetServeStatus(pb.GetServeStatusRequest(), timeout=30)


def _one_image(server, side: int, subject: str):
    """A Track stream that sends one side x side JPEG, waits for its answer and ends: (answered, refusals)."""
    from bridge.serving.client import TrackClient, encode_jpeg

    client = TrackClient(server.address, subject=subject, deadline_ms=120_000)
    try:
        client.send_encoded(encode_jpeg(np.full((side, side, 3), 128, np.uint8)), seq=0)
        answered = client.results.get(timeout=180) is not None
        return answered, list(client.refused)
    finally:
        client.close()


def _wait(condition, timeout: float = 30.0) -> bool:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_streams_of_odd_frame_sizes_never_lock_a_later_size_out(serve):
    for side in (40, 48, 56, 64):  # four sizes, two services at most: each new one takes an idle one's place
        answered, refused = _one_image(serve, side, f"Size{side}")
        assert answered and not any("frame sizes" in reason for _, reason in refused), (side, refused)
        assert _wait(lambda: serve.stats()["streams"] == 0)
    status = _status(serve)
    assert status.max_frame_sizes == 2 and status.frame_sizes_released == 2
    assert sorted(status.frame_sizes) == ["56x56", "64x64"]


def test_one_peer_holds_at_most_its_share_of_streams_and_is_told_the_limit(serve):
    from bridge.serving.client import TrackClient, encode_jpeg

    first = TrackClient(serve.address, subject="First", deadline_ms=120_000)
    try:
        first.send_encoded(encode_jpeg(np.full((48, 48, 3), 128, np.uint8)), seq=0)
        assert first.results.get(timeout=180) is not None  # its stream is open
        second = TrackClient(serve.address, subject="Second", deadline_ms=120_000)
        second.send_encoded(encode_jpeg(np.full((48, 48, 3), 128, np.uint8)), seq=0)
        assert second.results.get(timeout=60) is None  # ended at once
        assert second.error is not None and second.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "127.0.0.1 already has 1 face streams on this server (--max-streams-per-peer)" in \
            second.error.details()
        second.close()
        status = _status(serve)
        assert status.max_streams_per_peer == 1 and status.streams_refused_per_peer == 1
        assert status.streams == 1 and status.streams_refused == 1
    finally:
        first.close()
