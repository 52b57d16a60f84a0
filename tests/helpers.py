"""Helpers the tests share: free ports, a UDP collector, subprocess commands and environments, tools/ scripts."""
import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def udp_collector():
    """A UDP socket on 127.0.0.1 (free port) whose datagrams a thread appends to a list: yields (port, packets)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    sock.settimeout(0.2)
    packets, stop = [], threading.Event()

    def receive():
        while not stop.is_set():
            try:
                packets.append(sock.recv(65536))
            except TimeoutError:
                continue

    reader = threading.Thread(target=receive, daemon=True)
    reader.start()
    try:
        yield sock.getsockname()[1], packets
    finally:
        stop.set()
        reader.join(2)
        sock.close()


def facebridge_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "bridge.cli", *args]


def subprocess_env(home: Path | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if home is not None:
        env["FACEBRIDGE_HOME"] = str(home)
    return env


def tool_module(name: str):
    """A script in tools/ imported as a module (tools are not a package)."""
    import importlib

    if str(ROOT / "tools") not in sys.path:
        sys.path.insert(0, str(ROOT / "tools"))
    return importlib.import_module(name)


def espeak_or_skip():
    """(tools/gen_lipsync_data, an espeak-ng synthesizer), or skip the test where espeak-ng is not installed."""
    gen = tool_module("gen_lipsync_data")
    try:
        return gen, gen.Espeak()
    except gen.EspeakError as e:
        pytest.skip(str(e))
