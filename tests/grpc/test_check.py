"""`facebridge grpc-check` against a real bridge (issue 40): what a receiver gets, in a few lines, with the
package's own client; a wrong token and a port nothing listens on are each one line and exit 1."""
from __future__ import annotations

import subprocess

from tests.grpc.bridge_process import free_tcp_port, running_bridge
from tests.helpers import facebridge_cmd, subprocess_env


def _check(*args, home):
    return subprocess.run(facebridge_cmd("grpc-check", *args), env=subprocess_env(home), capture_output=True,
                          text=True, timeout=120)


def test_grpc_check_reads_the_header_and_frames_of_a_running_bridge_and_names_a_refused_token(tmp_path):
    with running_bridge(tmp_path / "home", token="s3cret-token-for-the-check") as (address, _proc):
        ok = _check(address, "--token", "s3cret-token-for-the-check", "--frames", "5", home=tmp_path / "h")
        assert ok.returncode == 0, ok.stderr
        lines = ok.stdout.splitlines()
        assert lines[0].startswith(f"grpc-check: {address}: facebridge ") and "FaceBridge" in lines[0], lines
        assert any(line.startswith("grpc-check: header: subject FaceBridge, 52 curves") for line in lines), lines
        assert lines[-1].startswith("grpc-check: 5 frames in ") and "jawOpen" in lines[-1], lines
        wrong = _check(address, "--token", "wrong", home=tmp_path / "h")
        assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
        assert wrong.stderr.strip().splitlines() == [wrong.stderr.strip()] and "refused the token" in wrong.stderr


def test_grpc_check_on_a_port_nothing_listens_on_is_one_line(tmp_path):
    proc = _check(f"127.0.0.1:{free_tcp_port()}", "--timeout", "3", home=tmp_path / "h")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("facebridge: error: nothing answers gRPC on 127.0.0.1:"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
