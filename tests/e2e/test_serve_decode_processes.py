"""`facebridge serve --front-ends 1 --decode-processes 1` as real processes on 127.0.0.1 with the CPU runners: the
engine's JPEGs are decoded in a process of its own (multistream/decode_process.py) into a shared frame pool, and the
streams get the FaceFrames `facebridge run` gives (the tolerances of tests/e2e/test_serve.py). An image that does not
decode costs only itself; a decode process killed while it holds a frame costs that frame alone (answered as
failed, with the reason), and the stream is served on, by the one started in its place."""
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
    clip,  # noqa: F401 - the sample as JPEG, a fixture
)
from tests.helpers import serve_process, wait_until

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
STREAMS = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", str(STREAMS), "--front-ends", "1",
                       "--decode-processes", "1", "--updates", "off",
                       home=tmp_path_factory.mktemp("home")) as (proc, addresses):
        yield proc, addresses[0]


def _decode_pids(engine_pid: int) -> list[int]:
    """The engine's children that are decode processes."""
    pids = []
    with open(f"/proc/{engine_pid}/task/{engine_pid}/children") as f:
        for pid in f.read().split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as cmd:
                    if b"bridge.multistream.decode_process" in cmd.read():
                        pids.append(int(pid))
            except FileNotFoundError:
                pass
    return pids


def test_two_streams_decoded_in_a_decode_process_get_the_facebridge_run_frames(server, clip):  # noqa: F811
    from bridge.serving.client import TrackClient

    proc, address = server
    listening = next(x for x in proc.lines if "listening on" in x)
    named = re.search(r"in 1 decode process \(pid (\d+)\)", listening)
    assert named and [int(named.group(1))] == _decode_pids(proc.pid), listening
    jpegs, _ = clip
    served: dict[int, list] = {}

    def track(i):  # stream 0 the clip's first half, stream 1 its second
        client = TrackClient(address, subject=f"Subject{i}", deadline_ms=LOCKSTEP_DEADLINE_MS)
        try:
            served[i] = _lockstep(client, jpegs[i * FRAMES:(i + 1) * FRAMES], first_seq=i * FRAMES)
        finally:
            client.close()

    threads = [threading.Thread(target=track, args=(i,)) for i in range(STREAMS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    _served_are_the_run_frames(served, clip, STREAMS)
    # each decoded in one of the decode process's calls (the engine's own decode workers time no call)
    assert all(face.latencies_ms["engine_decode_batch"] > 0 for faces in served.values() for face, _ in faces)


def test_an_image_the_decode_process_cannot_decode_costs_only_itself(server, clip):  # noqa: F811
    from bridge.serving.client import TrackClient

    proc, address = server
    jpegs, _ = clip
    good = jpegs[0]
    headers_only = good[:good.index(b"\xff\xda")] + b"\xff\xd9"  # a start of frame (its size), no scan
    client = TrackClient(address, subject="Careless", deadline_ms=LOCKSTEP_DEADLINE_MS)
    try:
        assert _lockstep(client, [good])[0][0].face_found
        client.send_encoded(headers_only, seq=1)
        assert client.results.get(timeout=240)[0] is None
        face, _ = _lockstep(client, [good], first_seq=2)[0]
        assert face.face_found and face.seq == 2
        assert "decode" in dict(client.refused)[1], client.refused
    finally:
        client.close()
    assert not any("decode process" in x and "ended" in x for x in proc.lines)  # it decoded on


def test_a_killed_decode_process_costs_the_frame_it_held_and_another_takes_its_place(server, clip):  # noqa: F811
    from bridge.serving.client import TrackClient

    proc, address = server
    jpegs, _ = clip
    (doomed,) = _decode_pids(proc.pid)
    client = TrackClient(address, subject="Steady", deadline_ms=LOCKSTEP_DEADLINE_MS)
    try:
        assert _lockstep(client, jpegs[:2])[-1][0].face_found
        os.kill(doomed, signal.SIGSTOP)  # it holds the next frame for certain
        client.send_encoded(jpegs[2], seq=2)
        time.sleep(0.5)
        os.kill(doomed, signal.SIGKILL)
        assert client.results.get(timeout=240)[0] is None
        assert "decode process ended" in dict(client.refused)[2], client.refused
        # the next frames are served (by the engine while the new process starts, then by it)
        for face, _ in _lockstep(client, jpegs[3:6], first_seq=3):
            assert face.face_found
        assert wait_until(lambda: len(_decode_pids(proc.pid)) == 1 and _decode_pids(proc.pid) != [doomed], 120,
                          0.2), "no decode process took the killed one's place"
        assert wait_until(lambda: any("decode process 0" in x and "starting another" in x for x in proc.lines),
                          30, 0.1), proc.lines[-5:]
        time.sleep(1.0)  # its start-up done: the frames go to it again
        for face, _ in _lockstep(client, jpegs[6:9], first_seq=6):
            assert face.face_found and face.latencies_ms["engine_decode_batch"] > 0
        assert client.report.bad_frames == 1
    finally:
        client.close()
    assert proc.poll() is None and not any("Traceback" in x for x in proc.lines)
