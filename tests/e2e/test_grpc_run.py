"""`facebridge run --source sample --grpc` end to end, read by a client generated from proto/ alone."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from bridge.frame import ARKIT_NAMES
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from tests.grpc.bridge_process import running_bridge

CLIENT = Path(__file__).resolve().parents[1] / "grpc" / "standalone_client.py"


def test_run_serves_header_then_frames_to_a_proto_only_client(tmp_path):
    from bridge.calibration import CalibrationProfile
    from tests.helpers import face_frame

    home = tmp_path / "home"
    stored = CalibrationProfile.from_frames("FaceBridge", [face_frame(i) for i in range(10)])
    profile_file = stored.save(home / "profiles")
    before = profile_file.read_bytes()
    with running_bridge(home, token="run-token") as (address, bridge):
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
    assert calibrated.ok and "for this run only" in calibrated.message, calibrated.message
    assert profile_file.read_bytes() == before, "calibrating the sample overwrote the stored profile"
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

    # --monitor off: another bridge on this machine holding the monitor's port would add its warning line
    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "1", "--llf", "off", "--vmc",
                                        "off", "--monitor", "off", "--quiet", "--grpc", "0.0.0.0:0"),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=120)
    assert run.returncode == 1
    assert run.stderr.count("\n") == 1 and "--grpc-token" in run.stderr, run.stderr


def test_a_starting_bridge_says_so_then_serves_and_thirty_calibrations_do_not_race(tmp_path):
    """GetStatus answers 'starting' while the models load; 30 concurrent Calibrate calls: one measures, the rest
    are refused at once with the reason, and nobody's stored profile changes (the source is the sample)."""
    from bridge.calibration import CalibrationProfile
    from tests.grpc.bridge_process import free_tcp_port
    from tests.helpers import ROOT, face_frame, facebridge_cmd, subprocess_env

    home = tmp_path / "home"
    profile_file = CalibrationProfile.from_frames("FaceBridge", [face_frame(i) for i in range(10)]).save(
        home / "profiles")
    before = profile_file.read_bytes()
    address = f"127.0.0.1:{free_tcp_port()}"
    proc = subprocess.Popen(facebridge_cmd("run", "--source", "sample", "--grpc", address, "--llf", "off", "--vmc",
                                           "off", "--quiet"), cwd=ROOT, env=subprocess_env(home),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    states = []
    try:
        # reconnect every 50 ms: gRPC's own backoff grows past a second while the bridge is not yet listening,
        # which on a loaded machine could skip the whole 'starting' window
        channel = grpc.insecure_channel(address, [("grpc.initial_reconnect_backoff_ms", 50),
                                                  ("grpc.min_reconnect_backoff_ms", 50),
                                                  ("grpc.max_reconnect_backoff_ms", 100)])
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and (not states or states[-1] != "running"):
            try:
                states.append(stub.GetStatus(pb.GetStatusRequest(), timeout=2).state)
            except grpc.RpcError:
                pass  # not listening yet
            time.sleep(0.05)
        answers = []

        def calibrate():
            answers.append(stub.Calibrate(pb.CalibrateRequest(subject="FaceBridge"), timeout=120))

        callers = [threading.Thread(target=calibrate) for _ in range(30)]
        for c in callers:
            c.start()
        for c in callers:
            c.join(150)
        channel.close()
        assert proc.poll() is None
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
    assert states and states[0] == "starting" and states[-1] == "running", states
    assert states == sorted(states, key=lambda s: s != "starting")  # starting, then running, never back
    assert f"gRPC stream on {address}" in out  # printed even with --quiet
    measured = [a for a in answers if "already running" not in a.message]
    assert len(answers) == 30 and 1 <= len(measured) <= 2, [a.message for a in measured]
    # the one that measured succeeded, unless a loaded machine delivered too few frames in time (said so)
    assert all(a.ok or "frames arrived within" in a.message for a in measured), [a.message for a in measured]
    assert all(not a.ok for a in answers if a not in measured)
    assert profile_file.read_bytes() == before
    assert "Traceback" not in err
