import os
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def isolated_home(tmp_path, monkeypatch):
    """Calibration profiles and other per-user state go to a temporary folder."""
    monkeypatch.setenv("FACEBRIDGE_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def facebridge_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bridge.cli", *args]


def subprocess_env(home: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if home is not None:
        env["FACEBRIDGE_HOME"] = str(home)
    return env
