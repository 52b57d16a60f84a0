"""Helpers the tests share: free ports, a UDP collector, subprocess commands and environments, tools/ scripts."""
import contextlib
import os
import signal
import socket
import sys
import threading
import time
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


def wait_until(condition, timeout: float, step: float = 0.02) -> bool:
    """Polls condition() until it holds or timeout seconds pass (a wait, never an assertion on time)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def default_sigint() -> None:
    """Popen(preexec_fn=...): the child takes Ctrl-C (SIGINT) as a terminal would deliver it, even where the tests
    were started in the background by a non-interactive shell, which starts them with SIGINT ignored (a Python
    started so never raises KeyboardInterrupt)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


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


def onnx_model_with(op: str, tmp_path: Path) -> Path:
    """A two-node ONNX model (Relu, then `op` named det_1) in tmp_path: TensorRT cannot parse some ops."""
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_in"), helper.make_node(op, ["r"], ["y"], name="det_1")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "det.onnx"
    onnx.save(model, str(path))
    return path


def face_frame(seq: int, smile: float = 0.1, found: bool = True):
    """A FaceFrame with every weight 0.1, a given smile and a fixed head pose."""
    import numpy as np

    from bridge.frame import ARKIT_INDEX, NUM_BLENDSHAPES, FaceFrame

    fr = FaceFrame(seq=seq, t_capture=float(seq), t_capture_mono=float(seq), face_found=found)
    fr.blendshapes = np.full(NUM_BLENDSHAPES, 0.1, np.float32)
    fr.blendshapes[ARKIT_INDEX["mouthSmileLeft"]] = smile
    fr.head_rotation = np.array([5.0, -3.0, 1.0], np.float32)
    return fr
