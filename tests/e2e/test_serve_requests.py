"""`facebridge serve` (a real process, CPU runners, 127.0.0.1) refuses malformed requests as the gRPC sink does:
a stream whose first message is not a valid TrackRequest ends with INVALID_ARGUMENT and one line; a bad image
(not a JPEG, truncated, impossible or changed size, raw of the wrong length, too large, bad times) costs that image
only, answered at once with its reason, and the stream goes on; a message over the limit ends its own stream with
RESOURCE_EXHAUSTED; junk bytes on a raw socket, a client that never reads its responses (ended after the write
deadline) and raw images from beyond loopback never disturb the good stream that runs alongside every case, and
the server's log holds no traceback."""
from __future__ import annotations

import os
import socket
import threading

import cv2
import grpc
import numpy as np
import pytest

from tests.helpers import LockstepStream, serve_process, wait_until

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
WRITE_DEADLINE_S = 2.0
TOKEN = "Zq8rT2vXk9LmW4nBc7Hs1Jd5"  # beyond loopback a token needs 128 bits (bridge/listeners.py)


@pytest.fixture(scope="module")
def jpeg():
    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg

    return encode_jpeg(cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR))  # 480x360


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", "6", "--write-deadline", str(WRITE_DEADLINE_S),
                       home=home) as (proc, addresses):
        yield proc, addresses[0]
    assert not [line for line in proc.lines if "Traceback" in line], "\n".join(proc.lines[-40:])


@pytest.fixture
def good(server, jpeg):
    stream = LockstepStream(server[1], jpeg, "Good")  # a well-behaved client alongside every case
    stream.start()
    assert stream.keeps_serving(1), stream.failure
    yield stream
    assert stream.keeps_serving(), stream.failure
    stream.close()


def _raw_track(address: str, **options):
    channel = grpc.insecure_channel(address, options=list(options.items()))
    return channel, channel.stream_stream("/facebridge.v1.FaceServeService/Track", request_serializer=None,
                                          response_deserializer=None)


def _status(address):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        return pb_grpc.FaceServeServiceStub(channel).GetServeStatus(pb.GetServeStatusRequest(), timeout=30)


def test_a_stream_whose_first_message_is_not_a_valid_request_is_refused_in_one_line(server, good, jpeg):
    from bridge.grpc.gen import facebridge_pb2 as pb

    address = server[1]
    image = pb.ImageFrame(encoding=pb.ImageFrame.JPEG, data=jpeg)
    cases = [(b"\xff\xff\xff\xff", "is not a facebridge.v1.TrackRequest"),
             (b"\x12\x05ab", "is not a facebridge.v1.TrackRequest"),
             (pb.TrackRequest(subject="NoImage").SerializeToString(), "carries no image"),
             (pb.TrackRequest(subject="Bell\x07", image=image).SerializeToString(), "control characters"),
             (pb.TrackRequest(subject="x" * 200, image=image).SerializeToString(), "the limit is 64")]
    for first, why in cases:
        channel, track = _raw_track(address)
        with pytest.raises(grpc.RpcError) as err:
            list(track(iter([first]), timeout=60))
        channel.close()
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.value.details(), err.value
        assert "\n" not in err.value.details() and "; " in err.value.details()  # one line: the problem; the fix
    assert _status(address).streams_invalid >= len(cases)
    bad = _raw_track(address)
    with pytest.raises(grpc.RpcError) as err:  # the status call too
        bad[0].unary_unary("/facebridge.v1.FaceServeService/GetServeStatus")(b"\xff\xff", timeout=30)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    bad[0].close()


def _sof_size(data: bytes, width: int, height: int) -> bytes:
    """The JPEG with its start-of-frame marker claiming another size (the pixels unchanged)."""
    out = bytearray(data)
    i = 2
    while not (0xC0 <= out[i + 1] <= 0xCF and out[i + 1] not in (0xC4, 0xC8, 0xCC)):
        i += 2 + int.from_bytes(out[i + 2:i + 4], "big")
    out[i + 5:i + 7], out[i + 7:i + 9] = height.to_bytes(2, "big"), width.to_bytes(2, "big")
    return bytes(out)


def test_each_bad_image_costs_that_image_only_and_is_answered_with_its_reason(server, good, jpeg):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import TrackClient, encode_jpeg

    raw, rgb = pb.ImageFrame.RAW_RGB, np.zeros((360, 480, 3), np.uint8).tobytes()
    corrupt = bytearray(jpeg)
    corrupt[2000:6000] = np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes()
    bad = [  # (what is sent, the reason's words)
        (dict(data=b"GIF89a" + os.urandom(100)), "not a baseline JPEG"),
        (dict(data=jpeg[:len(jpeg) // 2]), "truncated"),
        (dict(data=jpeg[:-2]), "truncated"),
        (dict(data=_sof_size(jpeg, 65535, 65535)), "outside 32x32"),
        (dict(data=_sof_size(jpeg, 0, 360)), "outside 32x32"),
        (dict(data=jpeg, width=640, height=480), "but the message says 640x480"),
        (dict(data=rgb[:-1], encoding=raw, width=480, height=360), "needs 518400 bytes, got 518399"),
        (dict(data=b"", encoding=raw, width=0, height=0), "outside 32x32"),
        (dict(data=b"\0" * 30, encoding=raw, width=100000, height=100000), "outside 32x32"),
        (dict(data=b"\0" * 30, encoding=raw, width=2**32 - 1, height=2**32 - 1), "outside 32x32"),
        (dict(data=jpeg, encoding=9), "unknown image encoding 9"),
        (dict(data=b"\xff\xd8" + b"\0" * (8 * 1024 * 1024 - 4000)), "over the"),
        (dict(data=encode_jpeg(np.zeros((480, 640, 3), np.uint8))), "size changed from 480x360 to 640x480"),
        (dict(data=jpeg, frame_rate=float("nan")), "frame_rate nan"),
        (dict(data=jpeg, capture_time=float("inf")), "capture_time inf"),
        (dict(data=jpeg, media_time=-1e300), "media_time"),
    ]
    channel = grpc.insecure_channel(server[1], options=[("grpc.max_send_message_length", 16 << 20)])
    client = TrackClient(server[1], subject="Careless", deadline_ms=600_000, channel=channel)
    try:
        seq = 0

        def send(**fields):
            nonlocal seq
            seq += 1
            client.send_encoded(**{"encoding": pb.ImageFrame.JPEG, "seq": seq, **fields})
            return client.results.get(timeout=240)

        assert send(data=jpeg)[0].face_found  # the stream's size is 480x360
        for fields, why in bad:
            face, _, _ = send(**fields)
            assert face is None and client.refused[-1][0] == seq and why in client.refused[-1][1], \
                (why, client.refused[-1:])
            assert "\n" not in client.refused[-1][1] and "; " in client.refused[-1][1]  # the problem; the fix
            served = send(data=jpeg)[0]  # the very next good image is served
            assert served is not None and served.seq == seq and served.face_found
        face, _, _ = send(data=bytes(corrupt))  # intact markers, garbage inside: decoded as it is, never fatal
        assert client.report.bad_frames == len(bad) and client.error is None
        assert send(data=jpeg)[0].seq == seq
    finally:
        client.close()
        channel.close()


def test_a_stream_of_nothing_but_bad_images_is_ended_with_the_reason(server, good):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import TrackClient
    from bridge.serving.track import MAX_REFUSED_IN_A_ROW

    client = TrackClient(server[1], subject="Broken")
    try:
        for seq in range(MAX_REFUSED_IN_A_ROW + 20):
            client.send_encoded(b"not an image", pb.ImageFrame.JPEG, seq=seq)
        assert wait_until(lambda: client.error is not None, 120, 0.05)
        assert client.error.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert f"the last {MAX_REFUSED_IN_A_ROW} images were all refused" in client.error.details()
        assert "not a baseline JPEG" in client.error.details()
    finally:
        client.close()


def test_a_message_over_the_limit_ends_its_own_stream_only(server, good, jpeg):
    from bridge.grpc.gen import facebridge_pb2 as pb

    channel, track = _raw_track(server[1], **{"grpc.max_send_message_length": 64 << 20})
    huge = pb.TrackRequest(subject="Huge", image=pb.ImageFrame(encoding=pb.ImageFrame.JPEG,
                                                                data=b"\xff\xd8" + b"\0" * (12 << 20)))
    with pytest.raises(grpc.RpcError) as err:
        list(track(iter([huge.SerializeToString()]), timeout=60))
    channel.close()
    assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.value


def test_junk_bytes_on_a_raw_socket_never_reach_the_streams(server, good):
    host, port = server[1].rsplit(":", 1)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    for junk in (os.urandom(4096), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", preface + os.urandom(2048),
                 preface + b"\x00\x00\x06\x04\x00\x00\x00\x00\x00" + b"\x00\x03\x7f\xff\xff\xff"  # SETTINGS
                 + b"\xff\xff\xff\x01\x05\x00\x00\x00\x01" + os.urandom(64)):  # a frame of 16 MB announced
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(junk)
            sock.settimeout(30)
            try:
                while sock.recv(4096):  # the server answers with GOAWAY (or nothing) and closes
                    pass
            except OSError:
                pass
    assert good.keeps_serving()
    assert _status(server[1]).streams >= 1


def test_a_client_that_never_reads_is_ended_after_the_write_deadline_and_frees_its_slot(server, good, jpeg):
    from bridge.grpc.gen import facebridge_pb2 as pb

    before = _status(server[1]).streams_evicted
    channel, track = _raw_track(server[1], **{"grpc.http2.bdp_probe": 0, "grpc.http2.lookahead_bytes": 1024})
    stop = threading.Event()

    def requests():
        seq = 0
        while not stop.is_set():
            seq += 1
            yield pb.TrackRequest(subject="Deaf" if seq == 1 else "", deadline_ms=600_000,
                                  image=pb.ImageFrame(encoding=pb.ImageFrame.JPEG, data=jpeg, seq=seq)
                                  ).SerializeToString()
            stop.wait(0.02)

    responses = track(requests(), timeout=600)  # never read
    try:
        assert wait_until(lambda: _status(server[1]).streams_evicted > before, 300, 0.5)
        assert wait_until(lambda: _status(server[1]).streams == 1, 60, 0.2)  # only the good stream is left
    finally:
        stop.set()
        responses.cancel()
        channel.close()
    lines = [line for line in server[0].lines if "took no response" in line]
    assert lines and "stopped reading" in lines[-1]


def _outside_address() -> str | None:
    """An IPv4 address of this machine that is not loopback (None when it has none)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the outgoing interface
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_raw_images_are_refused_from_beyond_loopback_and_served_on_it(tmp_path, jpeg):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import TrackClient

    outside = _outside_address()
    if outside is None:
        pytest.skip("this machine has no address beyond loopback")
    bgr = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    with serve_process("--grpc", "0.0.0.0:0", "--grpc-token", TOKEN, "--max-streams", "2",
                       home=tmp_path) as (proc, addresses):
        port = addresses[0].rsplit(":", 1)[1]
        far = TrackClient(f"{outside}:{port}", subject="Far", token=TOKEN, deadline_ms=600_000)
        near = TrackClient(f"127.0.0.1:{port}", subject="Near", token=TOKEN, deadline_ms=600_000)
        try:
            for seq, client in enumerate((far, near)):
                client.send_encoded(bgr.tobytes(), pb.ImageFrame.RAW_BGR, 480, 360, seq=seq)
                face, _, _ = client.results.get(timeout=240)
                if client is far:
                    assert face is None and "only from a client on loopback; send JPEG" in far.refused[-1][1]
                    far.send_encoded(jpeg, seq=seq)  # the same stream goes on with JPEG
                    face, _, _ = far.results.get(timeout=240)
                assert face is not None and face.face_found
        finally:
            far.close()
            near.close()
    assert not [line for line in proc.lines if "Traceback" in line]


def test_an_idle_stream_is_ended_after_the_idle_timeout_and_its_slot_goes_to_a_newcomer(tmp_path, jpeg):
    # a client that connects and then sends nothing (its camera stopped) would hold one of --max-streams slots for
    # ever; with --idle-timeout it is told why and the slot is free, while a client waiting for an answer is not idle
    from bridge.serving.client import TrackClient

    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", "1", "--idle-timeout", "2",
                       home=tmp_path / "home") as (proc, addresses):
        idle = TrackClient(addresses[0], subject="Idle", deadline_ms=600_000)
        try:
            idle.send_encoded(jpeg, seq=0)
            first = idle.results.get(timeout=240)
            assert first is not None and first[0] is not None, idle.error  # served, then it sends nothing
            assert wait_until(lambda: idle.error is not None, 120, 0.05)
            assert idle.error.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            assert "no image for 2 s" in idle.error.details() and "open a new stream" in idle.error.details()
        finally:
            idle.close()
        newcomer = LockstepStream(addresses[0], jpeg, "Newcomer")
        newcomer.start()
        try:
            assert newcomer.keeps_serving(3), newcomer.failure  # the one slot is its now
            status = _status(addresses[0])
            assert status.streams == 1 and status.streams_evicted == 1 and status.streams_invalid == 0
        finally:
            newcomer.close()


def test_serve_refuses_a_negative_idle_timeout(tmp_path):
    import subprocess

    from tests.helpers import facebridge_cmd, subprocess_env

    run = subprocess.run(facebridge_cmd("serve", "--idle-timeout", "-1"), capture_output=True, text=True,
                         env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode != 0 and "--idle-timeout -1" in run.stderr and "Traceback" not in run.stderr


def test_frame_sizes_allow_only_the_named_sizes_and_an_image_of_another_costs_only_itself(tmp_path, jpeg):
    # each new size builds a batched service (up to 4 a server): --frame-sizes keeps one client's odd sizes from
    # taking them; the refused image is answered with the reason and the same stream goes on at an allowed size
    from bridge.serving.client import TrackClient, encode_jpeg

    other = encode_jpeg(np.zeros((480, 640, 3), np.uint8))
    with serve_process("--grpc", "127.0.0.1:0", "--frame-sizes", "480x360", home=tmp_path / "home") as (_, addresses):
        client = TrackClient(addresses[0], subject="Sizes", deadline_ms=600_000)
        try:
            client.send_encoded(other, seq=0)
            refused = client.results.get(timeout=240)
            assert refused is not None and refused[0] is None, client.error
            assert client.refused and client.refused[-1][0] == 0
            assert "640x480 is not one of this server's frame sizes (480x360)" in client.refused[-1][1]
            client.send_encoded(jpeg, seq=1)
            served = client.results.get(timeout=240)
            assert served is not None and served[0] is not None and served[0].seq == 1, client.error
        finally:
            client.close()


@pytest.mark.parametrize("sizes, says", [("640", "--frame-sizes size '640' is not WIDTHxHEIGHT"),
                                         ("64x64,96x96,128x128,160x160,192x192", "names 5 sizes")])
def test_serve_refuses_frame_sizes_it_cannot_take(tmp_path, sizes, says):
    import subprocess

    from tests.helpers import facebridge_cmd, subprocess_env

    run = subprocess.run(facebridge_cmd("serve", "--frame-sizes", sizes), capture_output=True, text=True,
                         env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode != 0 and says in run.stderr and "Traceback" not in run.stderr
