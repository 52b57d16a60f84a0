"""Subscriber slots on a real server on 127.0.0.1: clients that never read cannot lock a reader out (their slot is
leased to the next client, and the write deadline frees the rest), an unknown subject fails at once with the
known ones, and GetStatus says whether the bridge is starting."""
from __future__ import annotations

import logging
import time

import grpc
import pytest

from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.server import GrpcSink
from tests.grpc.test_server import Feeder
from tests.helpers import wait_until


def _non_reader(address: str):
    """A real gRPC client that subscribes and never reads: with the window fixed at 64 KiB (no BDP growth)
    flow control stops the server's writes to it within a second of frames."""
    channel = grpc.insecure_channel(address, options=[("grpc.http2.bdp_probe", 0)])
    stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest())
    next(stream)  # the header: it is connected, and then it stops reading
    return channel, stream


def test_clients_that_never_read_cannot_lock_a_reader_out(caplog):
    sink = GrpcSink("127.0.0.1:0", max_subscribers=4, write_deadline_s=4.0)
    idle = []
    try:
        with caplog.at_level(logging.WARNING), Feeder(sink, fps=200):
            idle = [_non_reader(sink.address) for _ in range(sink.max_subscribers)]
            assert sink.subscriber_count() == sink.max_subscribers
            channel = grpc.insecure_channel(sink.address)
            stub = pb_grpc.FaceBridgeServiceStub(channel)
            frames = 0
            for _attempt in range(200):  # bounded: refused until a non-reader has been stuck for the grace
                try:
                    stream = stub.Subscribe(pb.SubscribeRequest(), timeout=30)
                    parts = [next(stream).WhichOneof("part") for _ in range(20)]
                    frames = parts.count("frame")
                    stream.cancel()
                    break
                except grpc.RpcError as e:
                    assert e.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e
                    time.sleep(0.1)
            assert frames >= 19  # the reader is served
            # and the write deadline frees every slot a non-reader still held
            assert wait_until(lambda: sink.subscriber_count() == 0, 60, 0.05)
            channel.close()
        assert sink.stats()["evicted"] == sink.max_subscribers
        evictions = [r for r in caplog.records if "evicted: it stopped reading" in r.getMessage()]
        assert len(evictions) == sink.max_subscribers and not any(r.exc_info for r in caplog.records)
    finally:
        for channel, stream in idle:
            stream.cancel()
            channel.close()
        sink.close()


class OneSubject:
    def __init__(self) -> None:
        self.stats_ready = False

    def status(self) -> dict:
        return {"subjects": ["Astro"], "state": "running" if self.stats_ready else "starting"}

    def calibrate(self, subject):
        return False, "no"

    def subjects(self) -> list[str]:
        return ["Astro"]


def test_an_unknown_subject_fails_at_once_naming_the_known_ones_and_status_says_starting():
    control = OneSubject()
    sink = GrpcSink("127.0.0.1:0", control=control)
    try:
        channel = grpc.insecure_channel(sink.address)
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).state == "starting"
        with pytest.raises(grpc.RpcError) as err:
            next(stub.Subscribe(pb.SubscribeRequest(subjects=["Nobody"]), timeout=10))
        assert err.value.code() == grpc.StatusCode.NOT_FOUND and "'Astro'" in err.value.details()
        assert "'Nobody'" in err.value.details()
        control.stats_ready = True
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=10).state == "running"
        channel.close()
    finally:
        sink.close()


def test_a_standalone_server_that_saw_no_subject_yet_still_lets_a_subject_wait():
    sink = GrpcSink("127.0.0.1:0")
    try:
        channel = grpc.insecure_channel(sink.address)
        stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest(subjects=["Later"]),
                                                                   timeout=20)
        from tests.grpc.test_server import make_frame

        for seq in range(400):  # bounded: the subject appears, its header arrives
            sink.send(make_frame(seq, subject="Later"))
            if sink.subscriber_count():
                break
            time.sleep(0.02)
        assert next(stream).WhichOneof("part") == "header"
        stream.cancel()
        channel.close()
    finally:
        sink.close()
