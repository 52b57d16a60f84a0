"""`fedagent serve-repo` as its own process: only regular files inside the repository are served (a link to
/etc/passwd, a linked folder, `..` and encoded tricks are 404), listings are refused, and 300 half-open
connections neither grow its threads beyond the connection bound nor keep a real client out once they time
out."""
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.helpers import ROOT

MAX_CONNECTIONS = 8
TIMEOUT_S = 2


@pytest.fixture
def repo_server(tmp_path):
    repo = tmp_path / "repo"
    (repo / "metadata").mkdir(parents=True)
    (repo / "metadata" / "timestamp.json").write_text('{"signed": {}}')
    (tmp_path / "secret.txt").write_text("outside the repository")
    (repo / "metadata" / "passwd").symlink_to("/etc/passwd")
    (repo / "metadata" / "secret").symlink_to(tmp_path / "secret.txt")
    (repo / "linked").symlink_to(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "fedagent", "serve-repo", str(repo), "--port", "0",
                             "--max-connections", str(MAX_CONNECTIONS), "--timeout", str(TIMEOUT_S)],
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        url = next(word for word in line.split() if word.startswith("http://"))
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(10)


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


def _threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line.split()[1] for line in f if line.startswith("Threads:")))


def test_only_regular_files_inside_the_repository_are_served(repo_server):
    _, url = repo_server
    assert _get(url + "metadata/timestamp.json") == (200, b'{"signed": {}}')
    for path in ("metadata/passwd", "metadata/secret", "linked/secret.txt", "metadata/../../secret.txt",
                 "metadata/%2e%2e/%2e%2e/secret.txt", "%2fetc/passwd", "metadata/", "", "metadata"):
        status, body = _get(url + path)
        assert status == 404 and b"root:" not in body and b"outside" not in body, path


def test_half_open_connections_are_bounded_and_time_out(repo_server):
    proc, url = repo_server
    host, port = url[len("http://"):].rstrip("/").split(":")
    base = _threads(proc.pid)
    idle = []
    for _ in range(300):
        try:
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            break  # the kernel backlog is full: also a bound
    time.sleep(1.5)
    assert _threads(proc.pid) <= base + MAX_CONNECTIONS + 1, "a thread per half-open connection"
    deadline = time.monotonic() + 60
    while True:  # once the idle ones time out, a real client is served
        try:
            status, _ = _get(url + "metadata/timestamp.json")
        except OSError:
            status = None
        if status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status == 200
    for sock in idle:
        sock.close()
