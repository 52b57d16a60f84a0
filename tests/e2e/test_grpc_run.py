"""`facebridge run --source sample --grpc` end to end, read by a client generated from proto/ alone."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import grpc

from bridge.frame import ARKIT_NAMES
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from tests.grpc.bridge_process import running_bridge

CLIENT = Path(__file__).resolve().parents[1] / "grpc" / "standalone_client.py"


def test_run_serves_header_then_frames_to_a_proto_only_client(tmp_path):
    with running_bridge(tmp_path / "home", token="run-token") as (address, bridge):
        out = subprocess.run([sys.executable, str(CLIENT), address, "--frames", "15", "--token", "run-token"],
                             capture_output=True, text=True, timeout=120)
        # The pipeline answers status questions through the same server, and refuses a wrong token.
        channel = grpc.insecure_channel(address)
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        status = stub.GetStatus(pb.GetStatusRequest(), metadata=[("authorization", "Bearer run-token")], timeout=10)
        try:
            stub.GetStatus(pb.GetStatusRequest(), metadata=[("authorization", "Bearer nope")], timeout=10)
            refused = None
        except grpc.RpcError as e:
            refused = e.code()
        calibrated = stub.Calibrate(pb.CalibrateRequest(subject="FaceBridge"),
                                    metadata=[("authorization", "Bearer run-token")], timeout=30)
        channel.close()
        assert bridge.poll() is None
    assert calibrated.ok, calibrated.message
    assert list((tmp_path / "home").rglob("FaceBridge*.json")), "the neutral profile was saved"
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert not result["bridge_imported"]
    assert "facebridge.v1.FaceBridgeService" in result["services"]
    assert result["first_part"] == "header"
    assert result["header"]["curve_names"] == list(ARKIT_NAMES)
    assert result["header"]["model_versions"], "the header names the active models"
    assert result["frame_count"] == 15
    assert all(f["curves"] == 52 and f["layout_id"] == result["header"]["layout_id"] for f in result["frames"])
    assert any(f["face_found"] for f in result["frames"]), "the sample clip shows a face"
    assert list(status.sources) and list(status.backends) and status.fps > 0
    assert refused == grpc.StatusCode.UNAUTHENTICATED


def test_run_refuses_to_expose_the_stream_without_a_token(tmp_path):
    from tests.helpers import facebridge_cmd, subprocess_env

    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "1", "--llf", "off", "--vmc",
                                        "off", "--quiet", "--grpc", "0.0.0.0:0"),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "--grpc-token" in run.stderr, run.stderr
