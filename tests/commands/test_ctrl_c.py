"""One Ctrl-C policy for every command, typed on a real terminal (a pty) at set moments: the command stops, keeps
what is done, says so in one line and exits 130, with no traceback (issue 40). The seconds from Ctrl-C to the
exit are bounded loosely (a loaded 2-core machine); the policy is "within a second" on an idle one."""
from __future__ import annotations

import json
import socket
import sys

import pytest

from tests.helpers import facebridge_cmd, pty_run, subprocess_env

STOP_BOUND_S = 15.0  # loose: CI machines are shared; a command that ignores Ctrl-C runs to the test's timeout


def fedagent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedagent.cli", *args]


def _stopped(rc, out, after) -> None:
    assert rc == 130 and "Traceback" not in out, (rc, out[-2000:])
    assert after is not None and after < STOP_BOUND_S, (after, out[-500:])
    assert "stopped (Ctrl-C)" in out, out[-500:]


@pytest.fixture(scope="module")
def take(tmp_path_factory):
    from bridge.frame import FaceFrame
    from bridge.sinks.recorder import TakeRecorder

    path = tmp_path_factory.mktemp("ctrlc") / "take"
    recorder = TakeRecorder(path)
    for i in range(3000):  # long enough that export-usd is still writing when its first progress line shows
        recorder.send(FaceFrame(seq=i, t_capture=1.79e9 + i / 30, t_capture_mono=float(i), subject="Anna",
                                face_found=True, frame_rate=30.0))
    recorder.close()
    return path


RUN = ("run", "--source", "sample", "--monitor", "off", "--vmc", "off", "--updates", "off")


@pytest.mark.parametrize("moment, when", [
    ("while its models load (-v says so)", "bridge.engines"),
    ("once frames flow", "frames 3"),
])
def test_run_stops_on_ctrl_c_and_exits_130(moment, when, tmp_path):
    verbose = ["-v"] if "-v" in moment else []
    rc, out, took = pty_run(facebridge_cmd(*verbose, *RUN, "--llf", "off", "--record", str(tmp_path / "take")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when=when)
    _stopped(rc, out, took)
    if not verbose:  # what was done is kept: the take is closed whole, with the frames sent
        meta = json.loads((tmp_path / "take" / "take.json").read_text())
        assert meta["complete"] is True and meta["frames"] >= 3, meta
        assert "frames sent" in out


def test_replay_stops_on_ctrl_c(take, tmp_path):
    rc, out, took = pty_run(facebridge_cmd("replay", str(take), "--loop", "--vmc", "off"),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="replaying")
    assert rc == 130 and "Traceback" not in out and took is not None and took < STOP_BOUND_S, (rc, out[-1500:])


def test_export_usd_stopped_while_it_writes_leaves_no_file(take, tmp_path):
    out_file = tmp_path / "take.usda"
    rc, out, took = pty_run(facebridge_cmd("export-usd", str(take), str(out_file)), subprocess_env(tmp_path / "h"),
                            ctrl_c_when="export-usd: 1/")
    if rc == 0:  # it finished before the Ctrl-C landed (a fast machine): then the file is whole
        assert out_file.exists() and "wrote" in out
        return
    _stopped(rc, out, took)
    assert not out_file.exists() and not list(tmp_path.glob("*.tmp*")), list(tmp_path.iterdir())


def test_engines_build_stops_on_ctrl_c_instead_of_counting_a_failure(tmp_path):
    pytest.importorskip("tensorrt_rtx_bindings", reason="TensorRT-RTX builds engines ahead of time without a GPU")
    rc, out, took = pty_run(facebridge_cmd("engines", "build", "--cache-dir", str(tmp_path / "engines")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="steps)")
    _stopped(rc, out, took)
    assert "FAILED" not in out and "models ready" not in out, out[-1500:]


def test_bench_soak_keeps_its_samples_as_a_partial_result(tmp_path):
    result = tmp_path / "soak.json"
    rc, out, took = pty_run(facebridge_cmd("bench", "soak", "--minutes", "2", "--interval", "0.5", "--json",
                                           str(result)), subprocess_env(tmp_path / "home"), ctrl_c_when="connections")
    _stopped(rc, out, took)
    doc = json.loads(result.read_text())
    assert doc["partial"] is True and doc["results"]["ended_by"] == "Ctrl-C" and doc["results"]["samples"]
    assert not (tmp_path / "soak.json.partial").exists()


def test_fedagent_serve_repo_stops_on_ctrl_c(tmp_path):
    (tmp_path / "repo" / "metadata").mkdir(parents=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    rc, out, took = pty_run(fedagent_cmd("serve-repo", str(tmp_path / "repo"), "--port", str(port)),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="Ctrl-C stops")
    _stopped(rc, out, took)


@pytest.mark.parametrize("command, when", [
    (("-v", "calibrate", "--source", "sample"), "bridge.engines"),  # while its models load
    (("serve", "--grpc", "127.0.0.1:0", "--quiet"), "listening on"),
])
def test_calibrate_and_serve_stop_on_ctrl_c(command, when, tmp_path):
    rc, out, took = pty_run(facebridge_cmd(*command), subprocess_env(tmp_path / "home"), ctrl_c_when=when,
                            timeout=240)
    _stopped(rc, out, took)
    assert not list((tmp_path / "home").rglob("*.json.tmp*"))  # nothing half-written


def test_fedagent_simulate_stops_on_ctrl_c_and_leaves_no_flower_process(tmp_path):
    import subprocess

    rc, out, took = pty_run(fedagent_cmd("simulate", "--clients", "2", "--rounds", "1", "--work", str(tmp_path / "w")),
                            subprocess_env(tmp_path / "home"), ctrl_c_when="work folder", timeout=240)
    _stopped(rc, out, took)
    left = subprocess.run(["pgrep", "-f", str(tmp_path / "w")], capture_output=True, text=True).stdout.split()
    assert not left, left
