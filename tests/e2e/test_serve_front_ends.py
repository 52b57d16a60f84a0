"""`facebridge serve --front-ends 2` as real processes on 127.0.0.1 with the CPU runners: an engine process (runners,
decode, batched passes) and two front-end processes (the gRPC streams, their describe step) sharing frames and
results through shared memory. Eight streams over both wires get the FaceFrames `facebridge run` gives (the
tolerances of tests/e2e/test_serve.py, the one-process server's), and a front end killed with SIGKILL loses only
its streams: the other front end's keep being served, and the one started in its place serves new streams in the
dead one's slots. The engine killed takes the server down: every front end stops, each with one line. The token and
TLS hold on every front end as in one process."""
from __future__ import annotations

import os
import re
import signal
import threading
import time

import pytest

from tests.e2e.test_serve import (
    FRAMES,
    LOCKSTEP_DEADLINE_MS,
    _lockstep,
    _served_are_the_run_frames,
    _status,
    clip,  # noqa: F401 - the sample as JPEG, a fixture
)
from tests.helpers import LockstepStream, serve_process, wait_until

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
STREAMS = 8
PASS_BATCH = 3


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    # --jpeg-batches on: the engine's JPEGs go as they do on a GPU (every image of a message decoded together and
    # handed on together), here with OpenCV; raw images still go to its decode workers. --pass-batch: the eight
    # streams' frames, sent together, go in passes of at most PASS_BATCH, one described while the next runs
    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", str(STREAMS), "--front-ends", "2",
                       "--updates", "off", "--jpeg-batches", "on", "--max-frame-sizes", "2",
                       "--pass-batch", str(PASS_BATCH), home=home) as (proc, addresses):
        yield proc, addresses


def _front_end_pids(proc) -> list[int]:
    line = next(line for line in proc.lines if "listening on" in line)
    return [int(p) for p in re.findall(r"pid (\d+)", line.split("engine pid")[0])]


def test_eight_streams_over_both_wires_through_two_front_ends_get_the_facebridge_run_frames(server, clip):  # noqa: F811
    """Four Track calls and two TrackMany calls of two streams, each front end holding four streams (its share of
    --max-streams 8), in the engine's passes of at most PASS_BATCH frames."""
    from bridge.serving.client import TrackClient, TrackManyClient

    proc, addresses = server
    listening = next(x for x in proc.lines if "listening on" in x)
    assert len(addresses) == 2 and "2 front-end processes" in listening and ", batched" in listening
    jpegs, _ = clip
    clips = [jpegs[:FRAMES], jpegs[FRAMES:]]  # even streams one half of the clip, odd streams the other
    served: dict[int, list] = {}

    def track(i):  # streams 0-3: Track, alternating front ends
        client = TrackClient(addresses[i % 2], subject=f"Subject{i}", deadline_ms=LOCKSTEP_DEADLINE_MS)
        try:
            served[i] = _lockstep(client, clips[i % 2], first_seq=(i % 2) * FRAMES)
        finally:
            client.close()

    def many(front_end):  # streams 4-7: one TrackMany call a front end, two streams each (one of each half)
        ids = [4 + 2 * front_end, 5 + 2 * front_end]
        client = TrackManyClient(addresses[front_end])
        try:
            for i in ids:
                served[i] = []
            for k in range(FRAMES):
                seqs = {i: (i % 2) * FRAMES + k for i in ids}
                client.send([client.item(i, clips[i % 2][k], subject=f"Subject{i}", seq=seqs[i],
                                         capture_time=1000.0 + seqs[i] / 30, source_time=seqs[i] / 30,
                                         media_time=seqs[i] / 30, deadline_ms=LOCKSTEP_DEADLINE_MS) for i in ids])
                for i in ids:
                    face, dropped, replica = client.results[i].get(timeout=240)
                    assert face is not None and face.seq == seqs[i] and dropped == 0
                    served[i].append((face, replica))
            assert client.error is None
        finally:
            client.close()

    threads = [threading.Thread(target=track, args=(i,)) for i in range(4)]
    threads += [threading.Thread(target=many, args=(f,)) for f in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    replicas = {i: faces[0][1] for i, faces in served.items()}
    assert {replicas[i] for i in (0, 2, 4, 5)} == {addresses[0]} and {replicas[i] for i in (1, 3, 6, 7)} == \
        {addresses[1]}  # each stream on the front end it connected to
    _served_are_the_run_frames(served, clip, STREAMS)
    # every frame's way through the engine is in its stages (the sum is checked in _served_are_the_run_frames)
    assert all({"to_engine", "engine_decode", "engine_decode_queue", "engine_decode_batch", "engine_hand_on"}
               <= set(face.latencies_ms) for faces in served.values() for face, _ in faces)
    for address in addresses:  # every frame's pass ran in the engine: the front ends saw passes, decoded nothing
        status = _status(address)
        assert status.passes > 0 and status.frames_served >= 4 * FRAMES and status.decoder == "in the engine process"
        assert 1 <= status.mean_batch <= PASS_BATCH  # the engine's passes that held its frames, whole


def test_an_image_the_engine_cannot_decode_or_a_slot_cannot_hold_costs_only_itself(server, clip):  # noqa: F811
    """A JPEG whose header passes the front end's checks but has no image data is refused where it is decoded (the
    engine), a raw frame larger than a ring slot where it is copied (the front end); each answered with one line,
    and the stream's next image is served."""
    import numpy as np

    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.serving.client import TrackClient

    proc, addresses = server
    jpegs, _ = clip
    good = jpegs[0]
    start_of_scan = good.index(b"\xff\xda")
    headers_only = good[:start_of_scan] + b"\xff\xd9"  # a start of frame (its size), no scan: nothing to decode
    client = TrackClient(addresses[0], subject="Careless", deadline_ms=LOCKSTEP_DEADLINE_MS)
    raw_client = TrackClient(addresses[1], subject="Raw", deadline_ms=LOCKSTEP_DEADLINE_MS)  # loopback: raw is fine
    try:
        assert _lockstep(client, [good])[0][0].face_found
        client.send_encoded(headers_only, seq=1)
        assert client.results.get(timeout=240)[0] is None
        face, _ = _lockstep(client, [good], first_seq=2)[0]
        assert face.face_found and face.seq == 2
        assert "image 1" in dict(client.refused)[1] and "decode" in dict(client.refused)[1], client.refused
        assert client.report.bad_frames == 1
        raw = np.zeros((480, 640, 3), np.uint8).tobytes()  # 900 kB: over a 512 KiB slot
        raw_client.send_encoded(raw, encoding=pb.ImageFrame.RAW_RGB, width=640, height=480, seq=7)
        assert raw_client.results.get(timeout=240)[0] is None
        assert "--frame-slot-kib" in dict(raw_client.refused)[7], raw_client.refused
    finally:
        client.close()
        raw_client.close()
    assert not any("Traceback" in x for x in proc.lines)


def test_frame_sizes_no_front_end_uses_are_released_in_the_engine(server):
    """--max-frame-sizes 2 holds over the engine's services while streams of two sizes are open (a third is
    refused with one line), and once they end a new size is served: each front end tells the engine when its last
    stream of a size ends, so short streams of odd sizes on one front end never lock a size out of another."""
    import numpy as np

    from bridge.serving.client import TrackClient, encode_jpeg

    proc, addresses = server

    def image(side: int) -> bytes:
        return encode_jpeg(np.full((side, side, 3), 128, np.uint8))

    def client(front_end: int, side: int) -> TrackClient:
        one = TrackClient(addresses[front_end], subject=f"Size{side}", deadline_ms=LOCKSTEP_DEADLINE_MS)
        one.send_encoded(image(side), seq=0)
        return one

    first, second = client(0, 40), client(1, 48)  # two sizes in use, one on each front end
    third = None
    try:
        assert first.results.get(timeout=240)[0] is not None and second.results.get(timeout=240)[0] is not None
        third = client(0, 56)
        assert third.results.get(timeout=240)[0] is None  # refused, that image only
        assert "already serves 2 frame sizes" in dict(third.refused)[0], third.refused
    finally:
        for one in (first, second, third):
            if one is not None:
                one.close()
    assert wait_until(lambda: all(_status(a).streams == 0 for a in addresses), 60, 0.1)
    # the ends reach the engine on each front end's socket: the next size is served (within a bound under load)
    served, refusals = False, []
    deadline = time.monotonic() + 60
    while not served and time.monotonic() < deadline:
        fourth = client(1, 64)
        try:
            served = fourth.results.get(timeout=240)[0] is not None
            refusals += fourth.refused
        finally:
            fourth.close()
        if not served:
            time.sleep(0.2)
    assert served, refusals
    assert not any("Traceback" in x for x in proc.lines)


def test_a_killed_front_end_loses_only_its_streams(server, clip):  # noqa: F811
    proc, addresses = server
    jpegs, _ = clip
    pids = _front_end_pids(proc)
    survivor = LockstepStream(addresses[0], jpegs[0], "Survivor")
    doomed = LockstepStream(addresses[1], jpegs[1], "Doomed")
    newcomers = []
    try:
        survivor.start()
        doomed.start()
        assert survivor.keeps_serving(2) and doomed.keeps_serving(2)
        os.kill(pids[1], signal.SIGKILL)  # no goodbye: its connections drop with it
        assert wait_until(lambda: doomed.failure is not None, 60, 0.1), "the dead front end's stream went on"
        assert survivor.keeps_serving(3), survivor.failure  # the other front end's stream never noticed
        assert wait_until(lambda: any("front end 1" in x and "killed by SIGKILL" in x for x in proc.lines), 30, 0.1)
        # the front end started in its place listens on the same port; every one of the dead one's slots (its
        # share: 4) serves a new stream, each from detection
        assert wait_until(lambda: _answers(addresses[1]), 240, 0.5), "no front end took the dead one's place"
        assert wait_until(lambda: any("front end 1 serves again" in x for x in proc.lines), 30, 0.1)
        for i in range(STREAMS // 2):
            from bridge.serving.client import TrackClient

            newcomers.append(TrackClient(addresses[1], subject=f"Newcomer{i}", deadline_ms=LOCKSTEP_DEADLINE_MS))
            face, _ = _lockstep(newcomers[-1], jpegs[:1])[0]
            assert face.face_found and face.subject == f"Newcomer{i}"
        assert _status(addresses[1]).streams == STREAMS // 2
        assert survivor.keeps_serving(1), survivor.failure
        assert proc.poll() is None  # the engine served on throughout
    finally:
        survivor.close()
        doomed.close()
        for client in newcomers:
            client.close()


def _answers(address: str) -> bool:
    import grpc

    try:
        return _status(address).max_streams == STREAMS // 2
    except grpc.RpcError:
        return False


def test_the_engine_killed_stops_every_front_end_with_one_line(server):
    """The last test of the module's server: it takes it down."""
    import grpc

    proc, addresses = server
    assert wait_until(lambda: all(_answers(address) for address in addresses), 60, 0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    ended = lambda: sum("the engine process ended" in x for x in proc.lines) == 2  # noqa: E731
    assert wait_until(ended, 120, 0.1), "\n".join(proc.lines[-12:])

    def down(address: str) -> bool:
        try:
            _status(address)
        except grpc.RpcError as e:
            return e.code() == grpc.StatusCode.UNAVAILABLE
        return False

    assert wait_until(lambda: all(down(a) for a in addresses), 60, 0.2), proc.lines[-10:]
    assert not any("Traceback" in x for x in proc.lines), proc.lines


def test_front_ends_take_the_same_token_and_tls_as_one_process(tmp_path, clip):  # noqa: F811
    """The token and TLS reach every front end (sent on its control socket, never on a command line): a client over
    TLS with the token is served, a wrong token refused with UNAUTHENTICATED, as tests/e2e/test_serve_access.py
    checks of one process."""
    import grpc

    from bridge.serving.client import TrackClient
    from tests.e2e.test_serve_access import TOKEN
    from tests.helpers import tls_files

    ca, cert, key = tls_files(tmp_path / "tls", "serve")
    jpegs, _ = clip
    with serve_process("--grpc", "127.0.0.1:0", "--grpc-token", TOKEN, "--grpc-tls-cert", str(cert),
                       "--grpc-tls-key", str(key), "--max-streams", "2", "--front-ends", "1", "--updates", "off",
                       home=tmp_path / "home") as (proc, addresses):
        good = TrackClient(addresses[0], subject="Good", token=TOKEN, tls_ca=str(ca), deadline_ms=600_000)
        wrong = TrackClient(addresses[0], subject="Wrong", token="not-the-token", tls_ca=str(ca), deadline_ms=600_000)
        try:
            good.send_encoded(jpegs[0], seq=0)
            wrong.send_encoded(jpegs[0], seq=0)
            face, _, _ = good.results.get(timeout=240)
            assert face is not None and face.face_found, good.error
            assert wrong.results.get(timeout=120) is None
            assert wrong.error is not None and wrong.error.code() == grpc.StatusCode.UNAUTHENTICATED
        finally:
            good.close()
            wrong.close()
        front_end = _front_end_pids(proc)[0]
        with open(f"/proc/{front_end}/cmdline", "rb") as f:
            assert TOKEN.encode() not in f.read()
    # the context's SIGTERM (a service manager's stop): the engine stops its front end and ends with 0
    assert proc.returncode == 0 and not os.path.exists(f"/proc/{front_end}"), proc.lines[-5:]
    assert proc.lines[-1] == "facebridge serve: stopped (SIGTERM)", proc.lines[-5:]
    assert not any("Traceback" in x for x in proc.lines)
