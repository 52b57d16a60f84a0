"""The commands a person types: keys, publish, export-adapter, serve-repo (a real process on 127.0.0.1),
update install/status/rollback with --json and the refusal exit codes."""
import json
import os
import socket
import subprocess
import sys
import time

import pytest

from fedagent.cli import main
from tests.helpers import ROOT


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def served(tmp_path, monkeypatch):
    """keys init + export-adapter + publish, and `fedagent serve-repo` running as its own process."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    keys, repo, adapter = tmp_path / "keys", tmp_path / "repo", tmp_path / "adapter.npz"
    assert main(["keys", "init", "--dir", str(keys), "--threshold", "targets=2/2", "--expires", "timestamp=2"]) == 0
    assert main(["export-adapter", str(adapter)]) == 0
    assert main(["publish", "--keys", str(keys), "--repo", str(repo), str(adapter), "--notes", "first"]) == 0
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "fedagent", "serve-repo", str(repo), "--port", str(port)],
                            env=env, stderr=subprocess.PIPE, text=True)
    assert "serving" in proc.stderr.readline()
    url = f"http://127.0.0.1:{port}/"
    for _ in range(50):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    yield {"keys": keys, "repo": repo, "adapter": adapter, "url": url, "state": tmp_path / "state"}
    proc.terminate()
    proc.wait(10)


def test_a_release_goes_from_publish_to_install_status_and_rollback(served, capsys):
    s = served
    capsys.readouterr()
    trust = str(s["keys"] / "trust.json")
    args = ["update", "install", "--from", s["url"], "--state", str(s["state"]), "--trust", trust, "--json"]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert (result["model"], result["status"], result["release"]) == ("lipsync", "installed", 1)
    assert set(result["steps"]) >= {"refresh", "download", "smoke-test", "commit"}
    assert main(["publish", "--keys", str(s["keys"]), "--repo", str(s["repo"]), str(s["adapter"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"lipsync": 2}
    assert main(args[:-3] + ["--json"]) == 0  # no --trust after the first install
    capsys.readouterr()
    assert main(["update", "status", "--state", str(s["state"]), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "lipsync" and report["release"] == 2 and report["previous_release"] == 1
    assert all(len(f["sha256"]) == 64 for f in report["files"].values())
    assert report["last_check"]["result"].startswith("lipsync: installed") and report["last_refusal"] is None
    assert main(["update", "rollback", "--state", str(s["state"]), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["release"] == 1
    assert main(["update", "status", "--state", str(s["state"])]) == 0
    assert "release 1 (adapter)" in capsys.readouterr().out


def test_a_refusal_exits_with_its_code_and_says_why_in_json(served, capsys, tmp_path):
    s = served
    capsys.readouterr()
    code = main(["update", "install", "--from", s["url"], "--state", str(tmp_path / "s2"), "--json"])
    out, err = capsys.readouterr()
    assert code == 27 and json.loads(out)["reason"] == "no-trust-root"
    assert err.count("\n") == 1 and "--trust" in err
    assert main(["update", "rollback", "--state", str(tmp_path / "s2")]) == 28


def test_keys_show_rotate_revoke_and_add(served, capsys):
    keys = str(served["keys"])
    assert main(["keys", "show", "--dir", keys]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["roles"]["targets"]["threshold"] == 2 and shown["root_version"] == 1
    assert main(["keys", "rotate", "--dir", keys, "--role", "timestamp"]) == 0
    victim = shown["roles"]["targets"]["keys"][0]["keyid"]
    assert main(["keys", "revoke", "--dir", keys, victim[:12]]) == 0
    assert main(["keys", "add", "--dir", keys, "--role", "snapshot", "--threshold", "2"]) == 0
    capsys.readouterr()
    main(["keys", "show", "--dir", keys])
    shown = json.loads(capsys.readouterr().out)
    assert shown["root_version"] == 4 and shown["retired_or_revoked"][victim] == "revoked"
    assert main(["keys", "init", "--dir", keys]) == 1  # never overwrites keys


def test_serve_repo_refuses_a_folder_that_is_not_a_repository(tmp_path, capsys):
    assert main(["serve-repo", str(tmp_path), "--port", "0"]) == 1
    assert "not a repository" in capsys.readouterr().err


def test_bench_update_writes_per_step_figures(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    out = tmp_path / "bench.json"
    assert main(["bench-update", "--repeats", "1", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    for case in ("adapter", "model_1mb"):
        steps = result["cases"][case]["median_ms"]
        assert {"refresh", "download", "smoke-test", "commit", "total"} <= set(steps)
    assert result["cases"]["model_1mb"]["main_file_bytes"] > 900_000
