"""What the gRPC server accepts, on 127.0.0.1: tokens no client could send are refused at start, malformed
requests get INVALID_ARGUMENT and one log line (no traceback, also for the health service), and 64 MB requests
are refused while the live subscriber goes on."""
from __future__ import annotations

import logging
import os
import threading

import grpc
import pytest

from bridge.errors import SinkError
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.server import GrpcSink
from tests.grpc.test_server import Feeder


@pytest.mark.parametrize("token", ["pässwort", "tok\nen", "", " padded ", "\u200bzero-width"])
def test_a_token_no_client_can_send_is_refused_at_start(token):
    with pytest.raises(SinkError) as err:
        GrpcSink("127.0.0.1:0", token=token)
    assert "--grpc-token" in str(err.value) and "\n" not in str(err.value)


def test_a_printable_ascii_token_works():
    sink = GrpcSink("127.0.0.1:0", token="s3cret-T0ken_~!")
    try:
        channel = grpc.insecure_channel(sink.address)
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        reply = stub.GetStatus(pb.GetStatusRequest(), metadata=[("authorization", "Bearer s3cret-T0ken_~!")],
                               timeout=10)
        assert reply.server_version
        channel.close()
    finally:
        sink.close()


def test_malformed_requests_are_refused_with_one_line_and_no_traceback(caplog):
    sink = GrpcSink("127.0.0.1:0")
    try:
        channel = grpc.insecure_channel(sink.address)
        with caplog.at_level(logging.INFO):
            for method in ("GetStatus", "Calibrate", "ListSubjects"):
                raw = channel.unary_unary(f"/facebridge.v1.FaceBridgeService/{method}")
                with pytest.raises(grpc.RpcError) as err:
                    raw(b"\xff\xff\xff\xff", timeout=10)
                assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, method
                assert f"not a facebridge.v1.{method}Request" in err.value.details()
            raw_stream = channel.unary_stream("/facebridge.v1.FaceBridgeService/Subscribe")
            with pytest.raises(grpc.RpcError) as err:
                next(raw_stream(b"\x0a\x05ab", timeout=10))
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            health = channel.unary_unary("/grpc.health.v1.Health/Check")  # gRPC's own servicer
            with pytest.raises(grpc.RpcError):
                health(os.urandom(64) + b"\xff\xff\xff\xff", timeout=10)
        assert sink.stats()["malformed_requests"] == 4
        assert not any(r.exc_info or r.exc_text for r in caplog.records), "a traceback was logged"
        lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert lines and all("\n" not in line for line in lines)
        assert stub_ok(channel)  # and the server is fine
        channel.close()
    finally:
        sink.close()


def stub_ok(channel) -> bool:
    return bool(pb_grpc.FaceBridgeServiceStub(channel).GetStatus(pb.GetStatusRequest(), timeout=10).server_version)


def test_64_mb_requests_are_refused_while_the_live_subscriber_goes_on():
    sink = GrpcSink("127.0.0.1:0")
    try:
        with Feeder(sink, fps=60):
            reader = grpc.insecure_channel(sink.address)
            stream = pb_grpc.FaceBridgeServiceStub(reader).Subscribe(pb.SubscribeRequest(), timeout=120)
            received = []
            flooding = threading.Event()

            def read():
                try:
                    for part in stream:
                        if flooding.is_set() and part.WhichOneof("part") == "frame":
                            received.append(part.frame.seq)
                except grpc.RpcError:  # cancelled at the end
                    pass

            thread = threading.Thread(target=read, daemon=True)
            thread.start()
            attacker = grpc.insecure_channel(sink.address, options=[("grpc.max_send_message_length", 1 << 30)])
            big = pb.CalibrateRequest(subject="x" * (64 << 20)).SerializeToString()
            flooding.set()
            codes = []
            for _ in range(4):
                with pytest.raises(grpc.RpcError) as err:
                    attacker.unary_unary("/facebridge.v1.FaceBridgeService/Calibrate")(big, timeout=60)
                codes.append(err.value.code())
            for _ in range(400):  # bounded: frames keep coming during and after the flood
                if len(received) >= 30:
                    break
                threading.Event().wait(0.05)
            stream.cancel()
            thread.join(10)
            attacker.close()
            reader.close()
        assert set(codes) == {grpc.StatusCode.RESOURCE_EXHAUSTED}
        assert len(received) >= 30 and received == sorted(received)
    finally:
        sink.close()
