"""tools/system_packages.sh, the check `make run` and `make test` start with: run for real on this machine, and as an
unprivileged user (where the suite runs as root) to see the one command such a user is told to run."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.helpers import ROOT

SCRIPT = ROOT / "tools" / "system_packages.sh"
DEBIAN = shutil.which("dpkg-query") is not None and shutil.which("apt-get") is not None


def _script(*args: str, env: dict | None = None, user: str | None = None) -> subprocess.CompletedProcess:
    cmd = ["sh", str(SCRIPT), *args]
    if user is not None:
        cmd = ["runuser", "-u", user, "--", "env", *(f"{k}={v}" for k, v in (env or {}).items()), *cmd]
        env = None
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd="/",
                          env={**os.environ, **(env or {})})


def test_the_package_sets_name_what_the_tests_use():
    listed = _script("--list", "test").stdout.split()
    assert {"espeak-ng", "libportaudio2", "cmake", "libgrpc++-dev", "libgtest-dev", "chromium"} <= set(listed)
    assert _script("--list", "run").stdout.split() == []  # make run needs only Python with venv
    bad = _script("--list", "nonsense")
    assert bad.returncode == 2 and "unknown package set 'nonsense'" in bad.stderr


@pytest.mark.skipif(not DEBIAN, reason="the package check installs with apt-get: Debian or Ubuntu only")
def test_after_make_test_nothing_is_missing_and_the_check_is_silent():
    # make test ran this check before pytest started: every package of the test set is installed now
    done = _script("test", env={"VENV": str(ROOT / ".venv")})
    assert done.returncode == 0 and done.stderr == "", done.stderr


@pytest.mark.skipif(not DEBIAN, reason="the package check installs with apt-get: Debian or Ubuntu only")
def test_a_user_without_root_is_told_the_one_command_to_run(tmp_path):
    # an interpreter that is not there (a machine without Python's venv) is what is missing here: as an
    # unprivileged user the script installs nothing and names the command
    env = {"PYTHON": str(tmp_path / "no-python3"), "VENV": str(tmp_path / "no-venv"), "PATH": os.environ["PATH"]}
    if os.geteuid() == 0:
        if shutil.which("runuser") is None:
            pytest.skip("running as another user needs runuser (util-linux)")
        proc = _script("run", env=env, user="nobody")
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        pytest.skip("this user has password-less sudo: the script would install instead of naming the command")
    else:
        proc = _script("run", env=env)
    assert proc.returncode == 1, proc.stderr
    assert "`make run` needs these Debian packages, not installed: python3 python3-venv" in proc.stderr
    assert "run this once (it needs root), then `make run` again" in proc.stderr
    assert "apt-get update && apt-get install -y --no-install-recommends python3 python3-venv" in proc.stderr
