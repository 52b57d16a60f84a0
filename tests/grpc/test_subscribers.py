"""Subscriber slots on a real server on 127.0.0.1 with real gRPC clients: clients that never read cannot lock a
newcomer out (one host holds a bounded share, a newcomer always gets a slot), a client that falls behind the live
stream is dropped, an unknown subject fails at once with the known ones, and GetStatus says whether the bridge
is starting."""
from __future__ import annotations

import logging
import threading
import time

import grpc
import pytest

from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.server import GrpcSink
from tests.grpc.test_server import Feeder, Reading
from tests.helpers import wait_until


def _non_reader(address: str, **options):
    """A real gRPC client that subscribes and never reads after the header (default client options: its window
    grows with BDP, so to the server it looks like a reader for a long while)."""
    channel = grpc.insecure_channel(address, options=list(options.items()))
    stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest())
    next(stream)  # the header: it is connected, and then it stops reading
    return channel, stream


def test_sixteen_clients_that_never_read_cannot_lock_a_newcomer_out(caplog):
    """16 clients connect and never read (all from 127.0.0.1, as any local process could): one host holds at most
    `max_per_peer` slots, and a reader connecting afterwards is served at once, never refused."""
    sink = GrpcSink("127.0.0.1:0", max_subscribers=16, max_per_peer=8)
    idle = []
    try:
        with caplog.at_level(logging.WARNING), Feeder(sink, fps=60):
            idle = [_non_reader(sink.address) for _ in range(16)]
            assert wait_until(lambda: sink.subscriber_count() == 8, 10)  # each beyond 8 took its host's newest
            channel = grpc.insecure_channel(sink.address)
            stream = pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest(), timeout=30)
            parts = [next(stream).WhichOneof("part") for _ in range(20)]  # at once: no retry, no refusal
            assert parts.count("frame") >= 19
            stream.cancel()
            channel.close()
        dropped = [r.getMessage() for r in caplog.records if "dropped (its slot went to" in r.getMessage()]
        assert len(dropped) >= 9 and all("holds its limit of 8 subscriptions" in m for m in dropped)
        assert not any(r.exc_info for r in caplog.records)
    finally:
        for channel, stream in idle:
            stream.cancel()
            channel.close()
        sink.close()


def test_a_client_that_reads_one_frame_every_three_seconds_is_dropped_once_it_falls_behind():
    """A real client reading one frame every 3 s: once its window is full, each frame waits about 3 s for it, more
    than the 1 s bound, so it is dropped (its stream ends) and its slot freed; a reader beside it is kept."""
    sink = GrpcSink("127.0.0.1:0", max_lag_s=1.0)
    slow_channel = grpc.insecure_channel(sink.address, options=[("grpc.http2.bdp_probe", 0)])  # a 64 KiB window:
    # it is full within a second at this rate (a grown window takes longer to fill, then the same bound holds)
    channel = grpc.insecure_channel(sink.address)
    try:
        with Feeder(sink, fps=300), \
                Reading(pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest())) as reader:
            stream = pb_grpc.FaceBridgeServiceStub(slow_channel).Subscribe(pb.SubscribeRequest(), timeout=120)
            stop = threading.Event()

            def read_every_three_seconds():
                try:
                    while not stop.is_set():
                        next(stream)
                        stop.wait(3.0)
                except grpc.RpcError:
                    pass

            slow = threading.Thread(target=read_every_three_seconds, daemon=True)
            slow.start()
            # the server drops it (the frames already in its window still reach it, then the stream ends)
            assert wait_until(lambda: sink.stats()["evicted"] == 1, 60)
            stop.set()
            stream.cancel()
            slow.join(10)
            assert wait_until(lambda: sink.subscriber_count() == 1, 10)  # the reader is still served
            assert sink.stats()["evicted"] == 1 and reader.wait_for_frame()
    finally:
        slow_channel.close()
        channel.close()
        sink.close()


def test_a_newcomer_takes_the_slot_of_a_client_that_fell_behind_first_else_the_newest_of_the_busiest_host():
    from bridge.grpc.subscribers import Subscriber, choose_slot

    def sub(peer, stuck_s=None):
        s = Subscriber(peer, set(), 0.0)
        s.writing_since = None if stuck_s is None else 100.0 - stuck_s
        return s

    a1, a2, b1, b2 = sub("ipv4:10.0.0.1:1"), sub("ipv4:10.0.0.1:2"), sub("ipv4:10.0.0.2:1"), sub("ipv4:10.0.0.2:2")
    assert choose_slot([a1, a2, b1], "10.0.0.3", 4, 4, 100.0) == (True, None, "")
    assert choose_slot([a1, a2, b1, b2], "10.0.0.3", 4, 4, 100.0)[1] is b2  # newest of the host holding most
    a3 = sub("ipv4:10.0.0.1:3")
    assert choose_slot([a1, b1, a2, a3], "10.0.0.3", 4, 4, 100.0)[1] is a3
    late = sub("ipv6:[::1]:9", stuck_s=1.5)
    assert choose_slot([a1, late, a2, b1], "10.0.0.3", 4, 4, 100.0)[1] is late  # stuck first, whoever holds it
    assert choose_slot([a1, a2, b1], "10.0.0.1", 8, 2, 100.0)[1] is a2  # its own host's limit: its newest


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
