"""GrpcSink over real gRPC channels on 127.0.0.1: stream shape, slow subscribers, auth, TLS, bad clients, leaks."""
from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bridge.errors import SinkError
from bridge.frame import ARKIT_NAMES, FaceFrame
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.server import GrpcSink
from tests.helpers import tool_module, wait_until

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "grpc" / "standalone_client.py"


def make_frame(seq: int, subject: str = "FaceBridge", **kw) -> FaceFrame:
    frame = FaceFrame(seq=seq, t_capture=time.time(), t_capture_mono=time.perf_counter(), subject=subject,
                      face_found=True, confidence=0.9, **kw)
    frame.blendshapes = np.linspace(0, 1, 52, dtype=np.float32) * ((seq % 10) / 10.0)
    frame.head_rotation = np.array([10.0, -5.0, 2.5], dtype=np.float32)
    frame.morph.expression = np.full(10, 0.1 * (seq % 5), dtype=np.float32)
    return frame


class Feeder:
    """Sends frames into a sink from its own thread at a fixed rate, like the pipeline does."""

    def __init__(self, sink: GrpcSink, fps: float = 100.0, subject: str = "FaceBridge") -> None:
        self.sink, self.period, self.subject = sink, 1.0 / fps, subject
        self.sent = 0
        self.max_send_s = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            t0 = time.perf_counter()
            self.sink.send(make_frame(self.sent, self.subject))
            self.max_send_s = max(self.max_send_s, time.perf_counter() - t0)
            self.sent += 1
            next_t += self.period
            time.sleep(max(0.0, next_t - time.perf_counter()))

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


class Reading:
    """Reads a Subscribe stream on its own thread; `wait_for_frame(seq)` blocks until that frame arrived, so a test
    feeds in step with a client instead of sleeping and hoping the machine kept up."""

    def __init__(self, stream) -> None:
        self.stream, self.parts = stream, []
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            for response in self.stream:
                with self._cond:
                    self.parts.append(response)
                    self._cond.notify_all()
        except grpc.RpcError:
            pass

    def frames(self) -> list:
        with self._cond:
            return [p.frame for p in self.parts if p.WhichOneof("part") == "frame"]

    def wait_for_frame(self, seq: int | None = None, timeout: float = 60.0) -> bool:
        """Until the frame `seq` (None: any frame) has arrived."""
        def arrived():
            return any(p.WhichOneof("part") == "frame" and seq in (None, p.frame.seq) for p in reversed(self.parts))

        with self._cond:
            return self._cond.wait_for(arrived, timeout)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stream.cancel()
        self._thread.join(30)


@pytest.fixture
def sink():
    s = GrpcSink("127.0.0.1:0")
    yield s
    s.close()


def stub_for(sink: GrpcSink, **channel_kw):
    channel = grpc.insecure_channel(sink.address, **channel_kw)
    return channel, pb_grpc.FaceBridgeServiceStub(channel)


def test_generated_code_matches_proto():
    """The committed code in bridge/grpc/gen/ is what tools/gen_proto.py makes from proto/ today."""
    gen_proto = tool_module("gen_proto")
    fresh = gen_proto.generate()
    # The descriptor (every message, field number, type and service) must match exactly.
    committed = (gen_proto.OUT_DIR / "facebridge_pb2.py").read_text()
    start = fresh["facebridge_pb2.py"].index("AddSerializedFile(")
    fresh_blob = fresh["facebridge_pb2.py"][start:].split(")\n", 1)[0]
    assert fresh_blob in committed, "bridge/grpc/gen is stale; run python tools/gen_proto.py"
    from importlib.metadata import version
    if version("grpcio-tools") == pb_grpc.GRPC_GENERATED_VERSION:  # same generator: byte-identical output
        for name, text in fresh.items():
            assert (gen_proto.OUT_DIR / name).read_text() == text, f"{name} differs; run tools/gen_proto.py"


def test_standalone_client_gets_header_then_frames_and_reflection(sink):
    with Feeder(sink, fps=100):
        out = subprocess.run([sys.executable, str(CLIENT), sink.address, "--frames", "20"],
                             capture_output=True, text=True, timeout=90)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["bridge_imported"]
    assert "facebridge.v1.FaceBridgeService" in result["services"]
    assert "grpc.health.v1.Health" in result["services"]
    assert result["first_part"] == "header"
    assert result["header"]["curve_names"] == list(ARKIT_NAMES)
    assert ["expression", 10] in result["header"]["blocks"]
    assert result["frame_count"] == 20
    first = result["frames"][0]
    assert first["curves"] == 52 and first["layout_id"] == result["header"]["layout_id"]
    assert first["parameters"] == 10 + 5 * 3
    seqs = [f["seq"] for f in result["frames"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)


def test_frame_values_round_trip(sink):
    channel, stub = stub_for(sink)
    stream = stub.Subscribe(pb.SubscribeRequest(), timeout=20)
    frame = make_frame(7)
    frame.emotion = np.array([0.1, 0, 0, 0.7, 0, 0.1, 0.1], dtype=np.float32)
    frame.eye_left = np.array([3.0, -1.0], dtype=np.float32)
    frame.latencies_ms = {"detect": 1.5}
    frame.blendshapes[3] = float("nan")  # a bad value must not poison the stream
    threading.Timer(0.3, sink.send, args=(frame,)).start()
    header = next(stream).header
    got = next(stream).frame
    stream.cancel()
    channel.close()
    assert header.emotion_names[3] == "happy"
    expected = np.nan_to_num(frame.blendshapes)
    np.testing.assert_allclose(got.curves, expected, atol=1e-7)
    np.testing.assert_allclose(got.emotions, frame.emotion, atol=1e-7)
    assert got.head.yaw_deg == pytest.approx(10.0) and got.head.pitch_deg == pytest.approx(-5.0)
    assert got.eye_left.yaw_deg == pytest.approx(3.0)
    assert got.capture_time == frame.t_capture and got.source_time == frame.t_capture_mono
    tc = frame.timecode()
    assert (got.timecode.frame, got.timecode.rate_numerator) == (tc[0], tc[2])
    assert got.latencies_ms["detect"] == pytest.approx(1.5)


def test_header_resent_when_layout_or_model_changes(sink):
    channel, stub = stub_for(sink)
    changed = make_frame(2)
    changed.model_versions = {"expression": "2"}
    wider = make_frame(3)
    wider.model_versions = {"expression": "2"}
    wider.morph.expression = np.zeros(20, dtype=np.float32)
    with Reading(stub.Subscribe(pb.SubscribeRequest(), timeout=120)) as reading:
        assert wait_until(lambda: sink.subscriber_count() == 1, timeout=60)
        for frame in (make_frame(0), make_frame(1), changed, wider):
            sink.send(frame)
            assert reading.wait_for_frame(frame.seq)  # in step, so the latest-frame slot keeps each one
    channel.close()
    parts = reading.parts
    kinds = [p.WhichOneof("part") for p in parts]
    headers = [p.header for p in parts if p.WhichOneof("part") == "header"]
    assert kinds[0] == "header"
    assert len(headers) == 3, kinds
    assert headers[1].model_versions["expression"] == "2"
    assert [b.size for b in headers[2].parameters.blocks if b.name == "expression"] == [20]
    for p in parts:  # every frame follows the header it names
        if p.WhichOneof("part") == "header":
            current = p.header.layout_id
        else:
            assert p.frame.layout_id == current


def test_subject_filter_and_rate_cap(sink):
    channel, stub = stub_for(sink)
    subscribed = time.monotonic()
    with Reading(stub.Subscribe(pb.SubscribeRequest(subjects=["B"], max_frame_rate=10), timeout=120)) as reading:
        assert wait_until(lambda: sink.subscriber_count() == 1, timeout=60)
        with Feeder(sink, fps=100, subject="A"), Feeder(sink, fps=100, subject="B") as fed_b:
            time.sleep(1.0)
        assert reading.wait_for_frame()
    lifetime = time.monotonic() - subscribed
    channel.close()
    frames = reading.frames()
    assert frames and {f.subject for f in frames} == {"B"}
    # the cap counts on the sink's clock: at most 10 a second of the subscription's life, not the ~100 produced
    # (a busy machine may produce and deliver fewer, never more)
    assert len(frames) <= min(fed_b.sent, 10 * lifetime + 1)
    assert sorted(sink.subjects()) == ["A", "B"]


def test_stalled_subscriber_does_not_slow_fast_one_or_pipeline(sink):
    """One client stops reading; the fast one still gets every frame and `send` never blocks: frames are fed in
    step with the fast client, so a send that waited for the stalled one would never finish."""
    # A small receive window makes the stalled client's stream back up within a few frames.
    slow_channel, slow_stub = stub_for(sink, options=[("grpc.http2.lookahead_bytes", 4096),
                                                      ("grpc.http2.bdp_probe", 0)])
    fast_channel, fast_stub = stub_for(sink)
    slow = slow_stub.Subscribe(pb.SubscribeRequest(), timeout=120)
    count = 300
    with Reading(fast_stub.Subscribe(pb.SubscribeRequest(), timeout=120)) as fast:
        sink.send(make_frame(0))  # a client joining later starts with the latest frame
        next(slow)  # the slow client reads its header, then stops reading
        assert fast.wait_for_frame(0)
        for seq in range(1, count):
            sink.send(make_frame(seq))
            assert fast.wait_for_frame(seq), f"frame {seq} never reached the fast client"
        stats = sink.stats()
    slow.cancel()
    fast_channel.close()
    slow_channel.close()
    assert [f.seq for f in fast.frames()] == list(range(count))  # every frame, in order
    assert stats["dropped"] > 50, stats  # the stalled subscriber lost frames, counted


def test_many_subscribers_at_once(sink):
    channels = [stub_for(sink) for _ in range(5)]
    streams = [stub.Subscribe(pb.SubscribeRequest(), timeout=20) for _, stub in channels]
    counts = [0] * len(streams)

    def read(i):
        for response in streams[i]:
            if response.WhichOneof("part") == "frame":
                counts[i] += 1
                if counts[i] == 30:
                    return

    readers = [threading.Thread(target=read, args=(i,)) for i in range(len(streams))]
    for r in readers:
        r.start()
    with Feeder(sink, fps=100):
        for r in readers:
            r.join(timeout=20)
    assert counts == [30] * len(streams)
    for (channel, _), stream in zip(channels, streams):
        stream.cancel()
        channel.close()


def test_token_required_and_checked():
    with pytest.raises(SinkError, match="without a token"):
        GrpcSink("0.0.0.0:0")
    sink = GrpcSink("127.0.0.1:0", token="s3cret")
    try:
        channel, stub = stub_for(sink)
        for metadata in (None, [("authorization", "Bearer wrong")], [("authorization", "s3cret")]):
            with pytest.raises(grpc.RpcError) as err:
                stub.GetStatus(pb.GetStatusRequest(), metadata=metadata, timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            with pytest.raises(grpc.RpcError) as err:
                next(stub.Subscribe(pb.SubscribeRequest(), metadata=metadata, timeout=5))
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
        reflect = reflection_pb2_grpc.ServerReflectionStub(channel)
        ask = reflection_pb2.ServerReflectionRequest(list_services="")
        with pytest.raises(grpc.RpcError) as err:
            next(reflect.ServerReflectionInfo(iter([ask]), timeout=5))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
        good = [("authorization", "Bearer s3cret")]
        assert next(reflect.ServerReflectionInfo(iter([ask]), metadata=good, timeout=5)).list_services_response
        assert stub.GetStatus(pb.GetStatusRequest(), metadata=good, timeout=5).server_version
        health = health_pb2_grpc.HealthStub(channel)  # probes need no token
        reply = health.Check(health_pb2.HealthCheckRequest(service="facebridge.v1.FaceBridgeService"), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        channel.close()
    finally:
        sink.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl command not installed (apt-get install openssl)")
def test_tls_with_token(tmp_path):
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    sink = GrpcSink("127.0.0.1:0", token="t", tls_cert=str(cert), tls_key=str(key))
    try:
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        channel = grpc.secure_channel(sink.address, creds, options=[("grpc.ssl_target_name_override", "localhost")])
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        sink.send(make_frame(0))
        reply = stub.ListSubjects(pb.ListSubjectsRequest(), metadata=[("authorization", "Bearer t")], timeout=10)
        assert list(reply.subjects) == ["FaceBridge"]
        channel.close()
        plain_channel, plain = stub_for(sink)  # a plaintext client cannot talk to a TLS port
        with pytest.raises(grpc.RpcError):
            plain.ListSubjects(pb.ListSubjectsRequest(), metadata=[("authorization", "Bearer t")], timeout=3)
        plain_channel.close()
    finally:
        sink.close()
    with pytest.raises(SinkError, match="both"):
        GrpcSink("127.0.0.1:0", tls_cert=str(cert))


def test_bad_addresses_and_busy_port(sink):
    with pytest.raises(SinkError, match="HOST:PORT"):
        GrpcSink("nonsense")
    with pytest.raises(SinkError, match="in use"):
        GrpcSink(sink.address)


class PipelineControl:
    """A minimal BridgeControl: what `facebridge run` hands the server."""

    def __init__(self) -> None:
        self.calibrated: list[str] = []
        self.fail = False

    def status(self) -> dict:
        if self.fail:
            raise RuntimeError("pipeline is restarting")
        return {"sources": ["sample"], "backends": ["onnxruntime:cpu"], "model_versions": {"face_landmark": "1"},
                "fps": 30.0, "latency_ms_p50": 12.0, "latency_ms_p99": 20.0, "subjects": ["FaceBridge"]}

    def calibrate(self, subject: str) -> tuple[bool, str]:
        self.calibrated.append(subject)
        return True, f"neutral captured for {subject}"

    def subjects(self) -> list[str]:
        return ["FaceBridge"]


def test_status_calibrate_and_subjects_through_control():
    control = PipelineControl()
    sink = GrpcSink("127.0.0.1:0", control=control)
    try:
        channel, stub = stub_for(sink)
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=5)
        assert list(status.backends) == ["onnxruntime:cpu"] and status.latency_ms_p99 == 20.0
        assert status.model_versions["face_landmark"] == "1"
        reply = stub.Calibrate(pb.CalibrateRequest(), timeout=5)  # the only subject is implied
        assert reply.ok and control.calibrated == ["FaceBridge"]
        assert list(stub.ListSubjects(pb.ListSubjectsRequest(), timeout=5).subjects) == ["FaceBridge"]
        control.fail = True
        with pytest.raises(grpc.RpcError) as err:
            stub.GetStatus(pb.GetStatusRequest(), timeout=5)
        assert err.value.code() == grpc.StatusCode.INTERNAL and "restarting" in err.value.details()
        control.fail = False
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=5).fps == 30.0  # and the server is still fine
        channel.close()
    finally:
        sink.close()


def test_calibrate_without_pipeline_is_a_clear_error(sink):
    channel, stub = stub_for(sink)
    with pytest.raises(grpc.RpcError) as err:
        stub.Calibrate(pb.CalibrateRequest(subject="x"), timeout=5)
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    channel.close()


def test_malformed_requests_never_hurt_the_server(sink):
    channel, stub = stub_for(sink)
    raw = channel.unary_unary("/facebridge.v1.FaceBridgeService/GetStatus",
                              request_serializer=None, response_deserializer=None)
    raw_stream = channel.unary_stream("/facebridge.v1.FaceBridgeService/Subscribe",
                                      request_serializer=None, response_deserializer=None)
    for garbage in (b"\xff\xff\xff\xff", b"\x0a\x05ab", os.urandom(300)):
        with pytest.raises(grpc.RpcError):
            raw(garbage, timeout=5)
        with pytest.raises(grpc.RpcError):
            next(raw_stream(garbage, timeout=5))
    with pytest.raises(grpc.RpcError) as err:  # far beyond any real request
        raw(b"\x0a" + b"\xff" * 200_000, timeout=5)
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(grpc.RpcError) as err:
        next(stub.Subscribe(pb.SubscribeRequest(max_frame_rate=float("nan")), timeout=5))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    unknown = channel.unary_unary("/facebridge.v1.FaceBridgeService/Nope")
    with pytest.raises(grpc.RpcError) as err:
        unknown(b"", timeout=5)
    assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    # A frame that cannot be encoded is counted, not raised into the pipeline.
    broken = make_frame(1)
    broken.blendshapes = np.array(["not", "numbers"])
    sink.send(broken)
    assert sink.errors == 1
    sink.send(make_frame(2))
    assert stub.GetStatus(pb.GetStatusRequest(), timeout=5).frames_published == 1
    channel.close()


def test_client_killed_mid_stream(sink):
    with Feeder(sink, fps=100):
        proc = subprocess.Popen([sys.executable, str(CLIENT), sink.address, "--frames", "100000",
                                 "--stall-after", "20"], stdout=subprocess.PIPE, text=True)
        try:
            assert json.loads(proc.stdout.readline())["stalled"]
            assert sink.subscriber_count() == 1
            proc.kill()
        finally:
            proc.wait(timeout=10)
            proc.stdout.close()
        deadline = time.monotonic() + 15
        while sink.subscriber_count() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert sink.subscriber_count() == 0
        channel, stub = stub_for(sink)  # and the next client is served as usual
        stream = stub.Subscribe(pb.SubscribeRequest(), timeout=10)
        assert next(stream).WhichOneof("part") == "header"
        assert next(stream).WhichOneof("part") == "frame"
        stream.cancel()
        channel.close()


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _threads() -> dict:
    pool = sum(t.name.startswith("grpc-sink") for t in threading.enumerate())
    return {"pool": pool, "other": threading.active_count() - pool}


def test_connect_disconnect_cycles_do_not_leak(sink):
    def cycle():
        channel, stub = stub_for(sink)
        stream = stub.Subscribe(pb.SubscribeRequest(), timeout=10)
        assert next(stream).WhichOneof("part") == "header"
        next(stream)
        stream.cancel()
        channel.close()

    with Feeder(sink, fps=200):
        for _ in range(20):  # warm-up: thread pool and allocator reach their steady state
            cycle()
        gc.collect()
        threads_before, rss_before = _threads(), _rss_mb()
        for _ in range(100):
            cycle()
        deadline = time.monotonic() + 10
        while sink.subscriber_count() and time.monotonic() < deadline:
            time.sleep(0.05)
        gc.collect()
        threads_after, rss_after = _threads(), _rss_mb()
    assert sink.subscriber_count() == 0
    # Server workers are pooled and capped; every other thread count must be back where it was.
    assert threads_after["pool"] <= sink.max_subscribers + 4, threads_after
    assert threads_after["other"] <= threads_before["other"], (threads_before, threads_after)
    assert rss_after - rss_before < 20, f"RSS grew {rss_after - rss_before:.1f} MB over 100 cycles"


def test_close_ends_streams_and_frees_the_port():
    sink = GrpcSink("127.0.0.1:0")
    channel, stub = stub_for(sink)
    stream = stub.Subscribe(pb.SubscribeRequest(), timeout=10)
    sink.send(make_frame(0))
    next(stream)
    t0 = time.monotonic()
    sink.close()
    with pytest.raises(grpc.RpcError) as err:
        for _ in stream:
            pass
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert time.monotonic() - t0 < 5
    channel.close()
    again = GrpcSink(sink.address)  # the port is free again at once
    again.close()
