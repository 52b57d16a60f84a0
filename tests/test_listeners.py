"""The listener policy (bridge/listeners.py) through real servers on this machine: beyond loopback a token needs
128 bits, `auto` makes one and the command prints it, plain HTTP or gRPC beyond loopback says so once, and the
monitor serves https like gRPC does when given a certificate."""
from __future__ import annotations

import base64
import logging
import shutil
import ssl
import subprocess
import urllib.error
import urllib.request

import grpc
import pytest

from bridge.errors import FaceBridgeError
from bridge.grpc.gen import facebridge_pb2 as pb
from bridge.grpc.gen import facebridge_pb2_grpc as pb_grpc
from bridge.grpc.server import GrpcSink
from bridge.listeners import MIN_TOKEN_BITS, listener_token, token_bits
from bridge.monitor.server import MonitorServer
from bridge.stats import RunStats
from tests.helpers import facebridge_cmd, http_get, subprocess_env

STRONG = "Zq8rT2vXk9LmW4nBc7Hs1Jd5"  # 24 letters and digits: about 143 bits


def is_auto_token(token: str) -> bool:
    """What `auto` makes: 32 random bytes as URL-safe base64 (256 bits by construction), which the listeners' own
    strength estimate accepts. (The estimate itself is no measure of it: a random token that happens to hold no
    digit, `-` or `_`, about 1 in 8,000, counts 245 bits there.)"""
    raw = base64.urlsafe_b64decode(token + "=")
    return len(token) == 43 and len(raw) == 32 and token_bits(token) >= MIN_TOKEN_BITS


def test_a_token_beyond_loopback_needs_128_bits_and_auto_makes_one():
    assert token_bits("x") < token_bits("s3cret") < MIN_TOKEN_BITS <= token_bits(STRONG)
    assert token_bits("a" * 200) < MIN_TOKEN_BITS  # long but one character
    for weak in ("x", "s3cret", "password1234", "a" * 200):
        with pytest.raises(FaceBridgeError) as err:
            listener_token("--monitor-token", weak, "0.0.0.0")
        message = str(err.value)
        assert "too weak to guard 0.0.0.0" in message and "--monitor-token auto" in message and "\n" not in message
    assert listener_token("--monitor-token", "x", "127.0.0.1") == "x"  # loopback: any token (or none)
    made = listener_token("--grpc-token", "auto", "0.0.0.0")
    assert made != listener_token("--grpc-token", "auto", "0.0.0.0") and is_auto_token(made)


def test_run_refuses_a_one_character_monitor_token_beyond_loopback_in_one_line(tmp_path):
    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "1", "--llf", "off", "--vmc",
                                        "off", "--quiet", "--monitor", "0.0.0.0:0", "--monitor-token", "x"),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=120)
    errors = [line for line in run.stderr.splitlines() if "error" in line]
    assert run.returncode == 1 and len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert "--monitor-token is too weak" in errors[0] and "--monitor-token auto" in errors[0]


def test_auto_makes_a_monitor_token_that_guards_a_plain_http_monitor_which_says_so_once(caplog):
    with caplog.at_level(logging.WARNING):
        server = MonitorServer("0.0.0.0:0", RunStats(), token="auto")
    try:
        assert server.generated_token and is_auto_token(server.token)
        url = f"http://127.0.0.1:{server.port}/"
        assert http_get(url + "metrics")[0] == 401
        assert http_get(url + "metrics", {"Authorization": f"Bearer {server.token}"})[0] == 200
    finally:
        server.close()
    plain = [r.getMessage() for r in caplog.records if "plain text" in r.getMessage()]
    assert len(plain) == 1 and "--monitor-tls-cert/--monitor-tls-key" in plain[0]


@pytest.fixture
def certificate(tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("openssl command not installed (apt-get install openssl)")
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return cert, key


def test_the_monitor_serves_https_with_a_certificate_and_then_never_warns(certificate, caplog):
    cert, key = certificate
    with caplog.at_level(logging.WARNING):
        server = MonitorServer("0.0.0.0:0", RunStats(), token=STRONG, tls_cert=str(cert), tls_key=str(key))
    try:
        assert server.url.startswith("https://")
        context = ssl.create_default_context(cafile=str(cert))
        request = urllib.request.Request(f"https://localhost:{server.port}/?token={STRONG}")
        with urllib.request.urlopen(request, context=context, timeout=10) as r:
            assert r.status == 200 and "Secure" in r.headers["Set-Cookie"]
        with pytest.raises((urllib.error.URLError, ConnectionError)):  # plain HTTP to a TLS port gets nothing
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
    finally:
        server.close()
    assert not [r for r in caplog.records if "plain text" in r.getMessage()]
    with pytest.raises(FaceBridgeError, match="both a certificate and its private key"):
        MonitorServer("127.0.0.1:0", RunStats(), tls_cert=str(cert))


def test_grpc_beyond_loopback_refuses_a_weak_token_and_auto_makes_one_clients_can_use(caplog):
    with pytest.raises(FaceBridgeError, match="--grpc-token is too weak"):
        GrpcSink("0.0.0.0:0", token="x")
    with caplog.at_level(logging.WARNING):
        sink = GrpcSink("0.0.0.0:0", token="auto")
    try:
        assert sink.generated_token and is_auto_token(sink.token)
        channel = grpc.insecure_channel(f"127.0.0.1:{sink.port}")
        stub = pb_grpc.FaceBridgeServiceStub(channel)
        stub.ListSubjects(pb.ListSubjectsRequest(), metadata=[("authorization", f"Bearer {sink.token}")], timeout=10)
        with pytest.raises(grpc.RpcError) as refused:
            stub.ListSubjects(pb.ListSubjectsRequest(), metadata=[("authorization", "Bearer auto")], timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        channel.close()
    finally:
        sink.close()
    assert len([r for r in caplog.records if "plain text" in r.getMessage()]) == 1


def test_run_prints_the_tokens_auto_made_once_even_when_quiet(tmp_path):
    run = subprocess.run(facebridge_cmd("run", "--source", "sample", "--max-frames", "2", "--llf", "off", "--vmc",
                                        "off", "--quiet", "--monitor", "127.0.0.1:0", "--monitor-token", "auto",
                                        "--grpc", "127.0.0.1:0", "--grpc-token", "auto"),
                         capture_output=True, text=True, env=subprocess_env(tmp_path / "home"), timeout=300)
    assert run.returncode == 0, run.stderr
    monitor = [line for line in run.stdout.splitlines() if "monitor token (made for this run): " in line]
    grpc_line = [line for line in run.stdout.splitlines() if "gRPC token (made for this run): " in line]
    assert len(monitor) == len(grpc_line) == 1, run.stdout
    token = monitor[0].split(": ")[2].split(";")[0]
    assert is_auto_token(token) and f"/?token={token}" in monitor[0]
