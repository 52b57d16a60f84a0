"""The fedagent commands refuse bad input with one line that says what to do (no Flower process needed)."""
import json
import subprocess

from bridge.audio.learn_store import LearnStore
from fedagent.local.processes import free_port
from tests.helpers import fedagent_cmd, learn_window, subprocess_env


def fedagent(*args, home=None, timeout=120):
    out = subprocess.run(fedagent_cmd(*args), capture_output=True, text=True, timeout=timeout,
                         env=subprocess_env(home))
    return out.returncode, out.stdout, out.stderr.strip()


def one_line_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert lines[0].startswith("fedagent: error: ")
    return lines[0]


def test_data_stats_clear_and_export(tmp_path):
    store = LearnStore(tmp_path / "learn")
    for seed in range(3):
        store.add(learn_window(seed=seed))
    rc, out, _ = fedagent("data", "--store", str(store.root), "stats", "--json")
    info = json.loads(out)
    assert rc == 0 and info["windows"] == 3 and info["seconds"] == 3.6 and info["mode"] == "0o700"
    rc, out, _ = fedagent("data", "--store", str(store.root), "export", str(tmp_path / "copy"))
    assert rc == 0 and "copied 3 windows" in out
    rc, out, _ = fedagent("data", "--store", str(store.root), "clear", "--yes")
    assert rc == 0 and "deleted 3 windows" in out and store.paths() == []


def test_a_client_with_no_data_is_told_how_to_get_some(tmp_path):
    rc, _, err = fedagent("client", "--store", str(tmp_path / "empty"), home=tmp_path)
    assert rc == 1
    assert "holds 0 window(s)" in one_line_error(err) and "--learn" in err


def test_a_client_whose_superlink_is_down_says_so(tmp_path):
    store = LearnStore(tmp_path / "learn")
    for seed in range(3):
        store.add(learn_window(seed=seed))
    rc, _, err = fedagent("client", "--store", str(store.root), "--superlink", f"127.0.0.1:{free_port()}")
    assert rc == 1
    assert "is not reachable (Connection refused)" in one_line_error(err) and "fedagent server" in err


def test_a_remote_superlink_without_tls_is_refused(tmp_path):
    rc, _, err = fedagent("client", "--store", str(tmp_path), "--superlink", "192.0.2.10:9092")
    assert rc == 1 and "--root-certificates" in one_line_error(err)


def test_a_server_open_beyond_this_machine_needs_tls_and_device_keys(tmp_path):
    rc, _, err = fedagent("server", "--host", "0.0.0.0", "--eval-store", str(tmp_path))
    assert rc == 1 and "--node-auth" in one_line_error(err)


def test_simulate_needs_two_devices():
    rc, _, err = fedagent("simulate", "--clients", "1", "--no-publish")
    assert rc == 1 and "at least 2 devices" in one_line_error(err)
