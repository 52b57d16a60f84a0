"""`facebridge serve` follows signed releases (a real process, CPU runners, 127.0.0.1, a temporary FACEBRIDGE_HOME):
a release of the emotion model published with the real `fedagent.publisher.publish` and installed by the real installer
while two client streams run is built and checked in the background and swapped in between two passes. Neither
stream loses an image, the FaceFrames name the release in model_versions and show the new model's reading (this
one sees surprise everywhere), the status and the log say so, and a server started afterwards serves the release
from its first frame. A later release fixed at one item (which a one-item smoke test would pass, then break the
server's batches) is refused already by the publisher and by the installer (the model contract keeps the batch
dimension free); the release in use keeps serving. A release
that passes every check and gives NaN on the client's real face is rolled back by the server itself, and the
shipped model serves on."""
from __future__ import annotations

import re

import cv2
import grpc
import numpy as np
import pytest

from fedagent.publisher.publish import PublishError
from tests.helpers import LockstepStream, serve_process, wait_until
from tests.updates.kit import SURPRISE, Publisher, emotion_model

pytest.importorskip("torch")
pytestmark = pytest.mark.slow


class Stream(LockstepStream):
    """One client in lockstep, its FaceFrames read as (seq, emotion version, emotion)."""

    @property
    def frames(self) -> list[tuple]:
        return [(f.seq, f.model_versions.get("emotion", ""), np.array(f.emotion)) for f in list(self.faces)]

    def versions(self) -> list[str]:
        return [v for _, v, _ in self.frames]


def _status(address):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as channel:
        return pb_grpc.FaceServeServiceStub(channel).GetServeStatus(pb.GetServeStatusRequest(), timeout=30)


def test_serve_swaps_in_a_newly_installed_release_without_dropping_streams_and_refuses_a_bad_one(tmp_path):
    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg
    from bridge.updates.install import install

    home = tmp_path / "home"
    state = home / "updates"  # the user's update store under FACEBRIDGE_HOME: what `--updates auto` follows
    publisher = Publisher(tmp_path / "publisher")
    jpeg = encode_jpeg(cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR))
    streams: list[Stream] = []
    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", "4", home=home) as (proc, addresses):
        address = addresses[0]
        shipped = _status(address).model_versions["emotion"]
        try:
            streams = [Stream(address, jpeg, f"Subject{i}") for i in range(2)]
            for stream in streams:
                stream.start()
            assert wait_until(lambda: all(len(s.frames) >= 5 or s.failure for s in streams), 240, 0.05)

            assert publisher.publish(emotion_model(tmp_path / "surprised.onnx"), model="emotion") == 1
            install(str(publisher.repo), state, trust=publisher.trust, models=["emotion"])
            assert wait_until(lambda: all(s.versions()[-5:] and all(v.startswith("r1-") for v in s.versions()[-5:])
                                          or s.failure for s in streams), 300, 0.1)
            assert not [s.failure for s in streams if s.failure]
            status = _status(address)
            assert status.model_versions["emotion"].startswith("r1-") and status.streams == 2
            assert status.release.startswith("emotion r1-") and "serving since" in status.release

            with serve_process("--grpc", "127.0.0.1:0", "--max-streams", "1", home=home) as (_, later):
                first = Stream(later[0], jpeg, "Later")
                first.start()
                assert wait_until(lambda: first.frames or first.failure, 240, 0.05)
                first.close()
                assert first.versions()[0] == status.model_versions["emotion"]  # the release from the first frame

            with pytest.raises(PublishError, match="must stay free"):
                publisher.publish(emotion_model(tmp_path / "one.onnx", fixed_batch=True), model="emotion")
            counts = [len(s.frames) for s in streams]
            assert wait_until(lambda: all(len(s.frames) >= n + 3 or s.failure for s, n in zip(streams, counts)),
                              240, 0.05)
        finally:
            for stream in streams:
                stream.close()
        later = _status(address)
    assert not [s.failure for s in streams if s.failure]
    assert later.model_versions["emotion"] == status.model_versions["emotion"]  # release 1 keeps serving
    for stream in streams:
        seqs = [seq for seq, _, _ in stream.frames]
        assert seqs == list(range(len(seqs)))  # every image answered, in order, through both installs
        versions = stream.versions()
        assert versions[0] == shipped and versions[-1] == status.model_versions["emotion"]
        switch = versions.index(versions[-1])
        assert set(versions[switch:]) == {versions[-1]}  # one switch, never back
        before = np.mean([e[SURPRISE] for _, v, e in stream.frames if v == shipped])
        after = np.mean([e[SURPRISE] for _, v, e in stream.frames[switch + 3:]])
        assert after > before + 0.3, (before, after)  # the new model's reading reaches the frames
    log = "\n".join(proc.lines)
    assert "swap: emotion now runs r1-" in log and "Traceback" not in log


def test_serve_rolls_back_a_release_that_gives_nan_on_the_streams_faces_and_never_runs_it_again(tmp_path):
    """The faulty release (tests/updates/faulty.py) passes the installer's smoke test and the server's batch check,
    then gives NaN on the client's real face: the server rolls it back by itself, the shipped model serves again
    without an image lost, the store marks it, and a new install of it is refused."""
    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import encode_jpeg
    from bridge.updates.install import install
    from bridge.updates.reasons import UpdateRefused
    from bridge.updates.status import status as store_status
    from tests.updates.faulty import nan_on_real_faces_emotion_model

    home = tmp_path / "home"
    state = home / "updates"  # what `--updates auto` follows: nothing is installed there when serve starts
    publisher = Publisher(tmp_path / "publisher")
    jpeg = encode_jpeg(cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR))
    stream = None
    with serve_process("--grpc", "127.0.0.1:0", "--max-streams", "2", home=home) as (proc, addresses):
        address = addresses[0]
        shipped = _status(address).model_versions["emotion"]
        try:
            stream = Stream(address, jpeg, "Subject")
            stream.start()
            assert wait_until(lambda: len(stream.frames) >= 5 or stream.failure, 240, 0.05)
            assert publisher.publish(nan_on_real_faces_emotion_model(tmp_path / "faulty.onnx"), model="emotion") == 1
            install(str(publisher.repo), state, trust=publisher.trust, models=["emotion"])  # its smoke test passes
            assert wait_until(lambda: any(v.startswith("r1-") for v in stream.versions()) or stream.failure, 300, 0.1)
            assert wait_until(lambda: "rolled back emotion r1" in _status(address).release or stream.failure, 300,
                              0.1), "\n".join(proc.lines[-20:])
            assert wait_until(lambda: stream.versions()[-1] == shipped or stream.failure, 240, 0.05)
            assert stream.keeps_serving(10)
            with pytest.raises(UpdateRefused) as refused:  # offered again: refused
                install(str(publisher.repo), state, models=["emotion"])
            assert stream.keeps_serving(5)
        finally:
            if stream is not None:
                stream.close()
        final = _status(address)
    assert stream.failure is None
    assert refused.value.reason == "rollback"
    assert final.model_versions["emotion"] == shipped
    report = store_status(state, "emotion")
    assert report["release"] == 0 and report["rolled_back"] == [1]
    seqs = [seq for seq, _, _ in stream.frames]
    assert seqs == list(range(len(seqs)))  # every image answered, in order, through the release and its rollback
    versions = stream.versions()
    faulty = next(v for v in versions if v.startswith("r1-"))
    start, end = versions.index(faulty), len(versions) - 1 - versions[::-1].index(faulty)
    assert set(versions[:start]) == {shipped} and set(versions[start:end + 1]) == {faulty}
    assert set(versions[end + 1:]) == {shipped}  # back to the shipped model, and the release never again
    assert all(np.isfinite(e).all() for _, v, e in stream.frames[end + 3:])
    log = "\n".join(proc.lines)
    assert "failed in service" in log and "rolled back to the shipped model" in log and "Traceback" not in log
    # the service counted the frames the faulty release gave NaN for, and named the field
    assert re.search(r"frames of a pass of \d+ had non-finite results \(emotion; \d+ so far", log), log[-2000:]
