"""`facebridge serve` (a real process, CPU runners) with TLS and a bearer token, as it must run beyond loopback:
a client over TLS with the token is served; a wrong or missing token is refused with UNAUTHENTICATED on Track and
GetServeStatus alike; the health service answers over TLS without a token (probes carry no secrets); a client
without TLS cannot talk to it at all."""
from __future__ import annotations

import subprocess

import cv2
import grpc
import pytest

from tests.helpers import facebridge_cmd, serve_process, subprocess_env, tls_files

pytest.importorskip("torch")
pytestmark = pytest.mark.slow
TOKEN = "s3cret-token"


def _status(channel, token: str | None):
    from bridge.grpc.gen import facebridge_pb2 as pb
    from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc

    metadata = [("authorization", f"Bearer {token}")] if token else None
    return pb_grpc.FaceServeServiceStub(channel).GetServeStatus(pb.GetServeStatusRequest(), timeout=60,
                                                                metadata=metadata)


def test_tls_and_a_token_serve_the_right_client_and_refuse_the_others(tmp_path):
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from bridge.engines.shipped import sample_frames
    from bridge.serving.client import TrackClient, encode_jpeg, open_channel

    ca, cert, key = tls_files(tmp_path / "tls", "serve")
    jpeg = encode_jpeg(cv2.cvtColor(sample_frames(1)[0], cv2.COLOR_RGB2BGR))
    with serve_process("--grpc", "127.0.0.1:0", "--grpc-token", TOKEN, "--grpc-tls-cert", str(cert),
                       "--grpc-tls-key", str(key), "--max-streams", "2", home=tmp_path / "home") as (proc, addresses):
        address = addresses[0]
        good = TrackClient(address, subject="Good", token=TOKEN, tls_ca=str(ca), deadline_ms=600_000)
        wrong = TrackClient(address, subject="Wrong", token="not-the-token", tls_ca=str(ca), deadline_ms=600_000)
        try:
            good.send_encoded(jpeg, seq=0)
            wrong.send_encoded(jpeg, seq=0)
            face, _, _ = good.results.get(timeout=240)
            assert face is not None and face.face_found, good.error
            assert wrong.results.get(timeout=120) is None  # the call ended without a frame
            assert wrong.error is not None and wrong.error.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "bearer token" in wrong.error.details()
        finally:
            good.close()
            wrong.close()
        # `facebridge run --remote` with a refused token stops at once with one line (issue 40), never a warning
        # a frame and a run that does not end
        run = subprocess.run(facebridge_cmd("run", "--remote", address, "--remote-token", "not-the-token",
                                            "--remote-tls-ca", str(ca), "--source", "sample", "--max-frames", "50",
                                            "--llf", "off", "--vmc", "off", "--monitor", "off", "--quiet"),
                             env=subprocess_env(tmp_path / "home"), capture_output=True, text=True, timeout=240)
        errors = [line for line in run.stderr.splitlines() if "error:" in line]
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-2000:]
        assert len(errors) == 1 and "refused the token" in errors[0] and "--remote-token" in errors[0], run.stderr
        assert len(run.stderr.splitlines()) <= 3, run.stderr  # the error, at most a warning or two before it
        with open_channel(address, str(ca)) as channel:
            assert _status(channel, TOKEN).server_version
            with pytest.raises(grpc.RpcError) as err:
                _status(channel, None)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=60)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        with grpc.insecure_channel(address) as plain, pytest.raises(grpc.RpcError) as err:
            _status(plain, TOKEN)
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert not [line for line in proc.lines if "Traceback" in line], "\n".join(proc.lines[-40:])
