"""TLS and device keys with a real SuperLink (marker `flower`): the right device joins, the wrong one gets one line."""
from __future__ import annotations

import signal
import subprocess
import time

import pytest

from bridge.audio.learn_store import LearnStore
from fedagent.local.federation import LocalFederation
from fedagent.local.processes import Tls
from tests.helpers import device_key, fedagent_cmd, learn_window, subprocess_env, tls_files

pytestmark = [pytest.mark.flower, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A SuperLink with TLS and device authentication; device0's key is registered, device1's is not."""
    work = tmp_path_factory.mktemp("secured")
    ca, cert, key = tls_files(work / "tls", "ca")
    other_ca, _, _ = tls_files(work / "tls", "other")
    keys = {name: device_key(work, name) for name in ("device0", "device1")}
    store = LearnStore(work / "learn")
    for seed in range(3):
        store.add(learn_window(seed=seed))
    fed = LocalFederation(work / "federation", tls=Tls(ca, cert, key), node_auth=True)
    fed.start_link()
    registered = fed.cli.register(keys["device0"][1])
    yield {"fed": fed, "ca": ca, "other_ca": other_ca, "keys": keys, "store": store.root, "work": work,
           "registered": registered}
    fed.close()


def client(secured, *extra, ca="ca", key="device0"):
    args = ["client", "--superlink", secured["fed"].address, "--store", str(secured["store"]),
            "--work", str(secured["work"] / f"client-{key}-{ca}"), "--root-certificates", str(secured[ca])]
    if key:
        args += ["--auth-key", str(secured["keys"][key][0])]
    return fedagent_cmd(*args, *extra)


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("fedagent: error: "), stderr
    return lines[0]


def test_a_registered_device_joins_over_tls_and_leaves_cleanly(secured):
    proc = subprocess.Popen(client(secured), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=subprocess_env())
    try:
        line = proc.stdout.readline()
        assert "connected to" in line and f"as device {secured['registered']}" in line, line + proc.stderr.read()
        deadline = time.monotonic() + 60
        while secured["registered"] not in secured["fed"].cli.online_node_ids():
            assert time.monotonic() < deadline
            time.sleep(1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    logs = secured["work"] / "client-device0-ca" / "logs"
    assert (logs / "device-supernode.log").exists()
    assert subprocess.run(["pgrep", "-f", str(logs.parent / "home")], capture_output=True).stdout == b""


def test_a_wrong_certificate_authority_is_one_clear_line(secured):
    out = subprocess.run(client(secured, ca="other_ca"), capture_output=True, text=True, timeout=120,
                         env=subprocess_env())
    assert out.returncode == 1
    assert "does not verify against" in one_line(out.stderr) and "--root-certificates" in out.stderr


def test_an_unregistered_device_key_is_one_clear_line(secured):
    out = subprocess.run(client(secured, key="device1"), capture_output=True, text=True, timeout=180,
                         env=subprocess_env())
    assert out.returncode == 1
    assert "refused this device's key (it is not registered)" in one_line(out.stderr)


def test_a_device_without_a_key_is_told_keys_are_required(secured):
    out = subprocess.run(client(secured, key=None), capture_output=True, text=True, timeout=180,
                         env=subprocess_env())
    assert out.returncode == 1
    assert "requires registered device keys" in one_line(out.stderr)
