"""A 25 fps and a 60 fps video reach every output at their own rate: the Live Link Face timecode, take.json, the
USD stage and the gRPC header all say 25/1 or 60/1 (before, every source was stamped 30 fps)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import cv2
import grpc
import pytest

from bridge.formats.livelinkface import decode_llf_packet
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.sources.files import SAMPLE_PATH
from tests.grpc.bridge_process import free_tcp_port
from tests.helpers import facebridge_cmd, subprocess_env, udp_collector


def write_video(path, fps: int, seconds: float) -> None:
    cap = cv2.VideoCapture(str(SAMPLE_PATH))
    frames = []
    while len(frames) < 30:
        ok, image = cap.read()
        if not ok:
            break
        frames.append(image)
    cap.release()
    h, w = frames[0].shape[:2]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    for i in range(int(fps * seconds)):
        writer.write(frames[i % len(frames)])
    writer.release()


def first_header(address: str, timeout: float) -> pb.StreamHeader:
    channel = grpc.insecure_channel(address)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                for part in pb_grpc.FaceBridgeServiceStub(channel).Subscribe(pb.SubscribeRequest(), timeout=timeout):
                    if part.WhichOneof("part") == "header":
                        return part.header
            except grpc.RpcError:  # not serving yet
                time.sleep(0.2)
        raise AssertionError("no gRPC header arrived")
    finally:
        channel.close()


@pytest.mark.parametrize("fps", [25, 60])
def test_a_videos_frame_rate_reaches_every_output(fps, tmp_path):
    video, take, usd = tmp_path / f"clip{fps}.mp4", tmp_path / "take", tmp_path / "take.usda"
    write_video(video, fps, seconds=4.0)
    address = f"127.0.0.1:{free_tcp_port()}"
    with udp_collector() as (port, packets):
        proc = subprocess.Popen(facebridge_cmd("run", "--source", str(video), "--llf", f"127.0.0.1:{port}",
                                               "--vmc", "off", "--record", str(take), "--grpc", address, "--quiet"),
                                env=subprocess_env(tmp_path / "home"), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            header = first_header(address, timeout=90)
            out, err = proc.communicate(timeout=120)
        finally:
            proc.kill()
        time.sleep(0.2)
    assert proc.returncode == 0, err
    assert header.frame_rate == fps
    rates = {decode_llf_packet(p)["rate"] for p in packets}
    assert rates == {(fps, 1)}
    assert json.loads((take / "take.json").read_text())["frame_rate"] == fps
    export = subprocess.run(facebridge_cmd("export-usd", str(take), str(usd)), env=subprocess_env(tmp_path / "home"),
                            capture_output=True, text=True, timeout=120)
    assert export.returncode == 0, export.stderr
    from pxr import Usd

    stage = Usd.Stage.Open(str(usd))
    assert stage.GetTimeCodesPerSecond() == fps and stage.GetFramesPerSecond() == fps


def test_ntsc_rates_are_exact_fractions_in_the_timecode():
    from bridge.frame import FaceFrame, rate_fraction

    assert rate_fraction(29.97) == (30000, 1001) and rate_fraction(59.94) == (60000, 1001)
    assert rate_fraction(25.0) == (25, 1) and rate_fraction(float("nan")) == (30, 1)
    frame = FaceFrame(seq=0, t_capture=1001.0, t_capture_mono=0.0, frame_rate=29.97)
    assert frame.timecode()[0] == 30000 and frame.timecode()[2:] == (30000, 1001)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
