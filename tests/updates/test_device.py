"""The device's own troubles during an install: a full disk, a second installer, no trust root yet, and a
crash (os._exit) at every step followed by recovery. The release that served before keeps serving (or the new
one, once committed), nothing half-installed survives the next start, and a newer release installs after."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from bridge.updates.store import StateDir
from tests.helpers import ROOT
from tests.updates.kit import Device, env_for
from tests.updates.test_hostile_metadata import recovers

STEPS_BEFORE_SWITCH = ["refresh", "bundle", "download", "verify", "smoke-test", "promote", "commit"]
STEPS_AFTER_SWITCH = ["cleanup", "done"]


def _run(args, home, **kw):
    env = env_for(home)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=120, **kw)


@pytest.mark.parametrize("step", STEPS_BEFORE_SWITCH + STEPS_AFTER_SWITCH)
def test_a_crash_at_each_install_step_recovers_to_one_consistent_release(publisher, device, server, tmp_path, step):
    release = publisher.publish()
    proc = _run([sys.executable, str(ROOT / "tests" / "updates" / "crash_install.py"), step, server.url,
                 str(device.state)], tmp_path / "home")
    assert proc.returncode == 137, proc.stderr
    expected = 1 if step in STEPS_BEFORE_SWITCH else release
    assert device.release == expected  # readers see one consistent release even before recovery
    results = device.install(server.url)  # the next start recovers, then installs (or finds it installed)
    assert results[0].status == ("installed" if expected == 1 else "up-to-date")
    if step in ("download", "verify", "smoke-test", "promote", "commit"):
        assert results[0].recovered  # the crash left staging or an orphan slot; recover() removed it
    device.assert_intact(release)
    if expected == release:
        assert StateDir(device.state).read().model("lipsync").previous.release == 1
    recovers(publisher, device, server, before=release)


def test_a_second_installer_is_busy(publisher, device, server):
    publisher.publish()
    with StateDir(device.state).lock():
        device.refused(server.url, "busy")
    recovers(publisher, device, server)


def test_an_installer_in_another_process_makes_this_one_busy(publisher, device, server, tmp_path):
    publisher.publish()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom bridge.updates.store import StateDir\n"
         f"with StateDir({str(device.state)!r}).lock():\n    print('locked', flush=True)\n    sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "locked"
        device.refused(server.url, "busy")
    finally:
        holder.stdin.close()
        holder.wait(30)
    recovers(publisher, device, server)


def test_the_first_install_needs_a_trust_root(publisher, device, server, tmp_path):
    fresh = Device(tmp_path / "fresh", None)
    fresh.refused(server.url, "no-trust-root")
    fresh.trust = publisher.trust
    assert fresh.install(server.url)[0].release == 1


def test_a_trust_file_that_is_not_root_metadata_is_malformed(publisher, device, server, tmp_path):
    fresh = Device(tmp_path / "fresh", b'{"not": "a root"}')
    fresh.refused(server.url, "malformed")


def _unshare_or_skip():
    if shutil.which("unshare") is None or os.geteuid() != 0:
        pytest.skip("needs root and unshare(1) to mount a small tmpfs in a private mount namespace")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare -m is not permitted here ({probe.stderr.decode().strip()[:80]})")


@pytest.mark.parametrize("how", ["too little room for the release", "disk completely full"])
def test_a_full_disk_is_no_space_and_a_release_installs_once_there_is_room(publisher, server, tmp_path, how):
    """A real 1 MB tmpfs holds the state (private mount namespace): first refused, then remounted larger."""
    _unshare_or_skip()
    publisher.publish()
    state, trust = tmp_path / "small", tmp_path / "trust.json"
    state.mkdir()
    trust.write_bytes(publisher.trust)
    fill = f"head -c 2000000 /dev/zero > {state}/filler 2>/dev/null; " if how == "disk completely full" else ""
    install = (f"{sys.executable} -m fedagent update install --from {server.url} --state {state}/u "
               f"--trust {trust} --model lipsync --json")
    script = (f"mount -t tmpfs -o size=1m tmpfs {state} && {fill}"
              f"{install}; echo \"rc=$?\"; rm -f {state}/filler; mount -o remount,size=64m {state} && "
              f"{install} > /dev/null; echo \"rc=$?\"; "
              f"{sys.executable} -m fedagent update status --state {state}/u --json")
    proc = _run(["unshare", "-m", "sh", "-c", script], tmp_path / "home")
    out = proc.stdout
    refusal = json.loads(out[:out.index("rc=")])
    assert refusal["reason"] == "no-space" and refusal["exit_code"] == 20, proc.stderr
    assert "rc=20" in out and "rc=0" in out, out + proc.stderr
    status = json.loads(out[out.rindex("rc=0") + 4:])
    assert status["release"] == 1 and status["verified"] and status["orphans"] == []
