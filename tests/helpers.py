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


def real_corpus(*needed: str) -> Path:
    """The real faces and speech (bridge/paths.py real_data_dir, filled by `make real-data`, which `make test` runs)
    with each of `needed` in it; else the test skips saying so, or fails under CI (CI set), where a skip would
    hide that the real-data tests did not run."""
    from bridge.paths import real_data_dir

    real = real_data_dir()
    missing = [n for n in needed if not (real / n).exists()]
    if missing:
        why = f"the real corpus is not in {real} ({missing[0]} missing): run `make real-data`"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    return real


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


def learn_window(frames: int = 120, seed: int = 0, source: str = "simulated"):
    """A LearnWindow of random log-mel frames and teacher mouth weights (for store and training tests)."""
    import numpy as np

    from bridge.audio.learn_store import LearnWindow

    rng = np.random.default_rng(seed)
    return LearnWindow(mel=rng.normal(-8, 3, (frames, 40)).astype(np.float32),
                       mouth=rng.uniform(0, 1, (frames, 19)).astype(np.float32),
                       trust=np.ones(frames, np.float32), t_start=1.7e9 + seed, source=source)


def speaker_stores(folder: Path, devices: int, held_out: int = 1, utterances: int = 8):
    """(device stores, one server held-out store) of simulated espeak-ng speakers; skips without espeak-ng."""
    espeak_or_skip()
    from fedagent.local.simulation import device_stores, server_eval_store

    return device_stores(devices, utterances, folder), server_eval_store(held_out, utterances, folder)


def tls_files(folder: Path, name: str = "ca", addresses: tuple[str, ...] = ()):
    """A throw-away CA and a server certificate for 127.0.0.1/localhost (and `addresses`) signed by it: (ca, cert,
    key) paths."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, server_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"fedagent test {name}")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=2))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    server = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
              .issuer_name(ca_name).public_key(server_key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")] + [
                  x509.IPAddress(ipaddress.ip_address(a)) for a in ("127.0.0.1", *addresses)]),
                             critical=False).sign(ca_key, hashes.SHA256()))
    paths = folder / f"{name}.pem", folder / f"{name}-server.pem", folder / f"{name}-server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(server.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(server_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                  serialization.NoEncryption()))
    return paths


def device_key(folder: Path, name: str):
    """An EC P-384 device key pair in OpenSSH format (what SuperNode authentication uses): (private, public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = ec.generate_private_key(ec.SECP384R1())
    private, public = folder / name, folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                          serialization.NoEncryption()))
    private.chmod(0o600)
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                     serialization.PublicFormat.OpenSSH))
    return private, public


def fedagent_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "fedagent", *args]


def free_tcp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_session(config):
    """A BridgeSession opened from `config` and run on a thread until the block ends: yields the session (its
    monitor, stats and control are live). Stops the runner and joins the thread on the way out."""
    from bridge.runtime.session import BridgeSession

    session = BridgeSession(config).open()
    outcome = {}

    def run():
        try:
            outcome["summary"] = session.run()
        except BaseException as e:  # noqa: BLE001 - handed to the test below
            outcome["error"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield session
    finally:
        while session.runner is None and thread.is_alive():
            thread.join(0.05)
        if session.runner is not None:
            session.runner.stop()
        thread.join(30)
        session.close()
    if "error" in outcome:
        raise outcome["error"]


def http_get(url: str, headers: dict | None = None, timeout: float = 10.0) -> tuple[int, dict, bytes]:
    """(status, headers, body) of a GET; an HTTP error status is returned, not raised."""
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def two_face_clip(path: Path, frames: int = 90, second: tuple[int, int] = (15, 75)) -> Path:
    """A 480x300 video of two faces side by side, made from the bundled sample: the left face is the sample, the
    right one the sample half a clip later, mirrored, shown only for frames second[0] <= i < second[1] (a grey
    panel before and after: the second face enters and leaves)."""
    import cv2
    import numpy as np

    cap = cv2.VideoCapture(str(ROOT / "bridge" / "data" / "sample.mp4"))
    clip = []
    while True:
        ok, image = cap.read()
        if not ok:
            break
        clip.append(image[0:300, 113:353])  # a 240x300 crop around the face
    cap.release()
    out = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (480, 300))
    for i in range(frames):
        left = clip[i % len(clip)]
        right = (cv2.flip(clip[(i + len(clip) // 2) % len(clip)], 1) if second[0] <= i < second[1]
                 else np.full_like(left, 128))
        out.write(np.hstack([left, right]))
    out.release()
    return path


@contextlib.contextmanager
def serve_process(*args: str, home: Path | None = None, ready_timeout: float = 240.0):
    """A real `facebridge serve` process (CPU runners unless args say otherwise): yields (process, [addresses])
    once it prints where it listens, and stops it with SIGTERM (its stdout lines are in process.lines)."""
    import re
    import signal
    import subprocess
    import time

    env = subprocess_env(home)
    env["PYTHONUNBUFFERED"] = "1"
    proc = subprocess.Popen(facebridge_cmd("serve", "--quiet", *args), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    proc.lines = []
    addresses: list[str] = []
    reader_done = threading.Event()

    def read():
        for line in proc.stdout:
            proc.lines.append(line.rstrip())
            if "listening on" in line:
                addresses.extend(re.findall(r"\d+\.\d+\.\d+\.\d+:\d+", line.split("listening on", 1)[1]))
        reader_done.set()

    threading.Thread(target=read, daemon=True).start()
    end = time.monotonic() + ready_timeout
    while not addresses and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.1)
    try:
        if not addresses:
            raise AssertionError("facebridge serve did not start:\n" + "\n".join(proc.lines[-30:]))
        yield proc, addresses
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        reader_done.wait(5)


class LockstepStream(threading.Thread):
    """One Track client of a real `facebridge serve` in lockstep: each image sent once the last was answered with
    a FaceFrame (kept in `faces`); the first image lost ends it, saying which in `failure`."""

    def __init__(self, address: str, jpeg: bytes, subject: str) -> None:
        super().__init__(daemon=True)
        from bridge.serving.client import TrackClient

        self.client = TrackClient(address, subject=subject, deadline_ms=600_000)
        self.jpeg, self.faces, self.stop, self.failure = jpeg, [], threading.Event(), None

    def run(self) -> None:
        seq = 0
        while not self.stop.is_set():
            self.client.send_encoded(self.jpeg, seq=seq)
            item = self.client.results.get(timeout=240)
            if item is None or item[0] is None or item[0].seq != seq:
                self.failure = f"{self.client.subject} lost image {seq}: {item} ({self.client.error})"
                return
            self.faces.append(item[0])
            seq += 1

    def keeps_serving(self, more: int = 3) -> bool:
        """Whether `more` further images are answered (within 240 s, the loaded CI box's worst)."""
        start = len(self.faces)
        return wait_until(lambda: len(self.faces) >= start + more or self.failure is not None, 240, 0.05) and \
            self.failure is None

    def close(self) -> None:
        self.stop.set()
        self.join(240)
        self.client.close()


class Terminal:
    """A command on a real terminal: a pty that is its controlling terminal, in its own session, so Ctrl-C typed
    on it (the byte 0x03) reaches it as SIGINT, as in a shell. `until(text)` reads its output until `text`
    shows, `ctrl_c()` types Ctrl-C, `wait()` reads to its end -> (exit status or None, output, seconds since
    Ctrl-C)."""

    def __init__(self, argv: list[str], env: dict, cwd=None) -> None:
        import fcntl
        import pty
        import subprocess
        import termios

        def on_the_terminal():
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
            signal.signal(signal.SIGINT, signal.SIG_DFL)

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, env=env, cwd=cwd,
                                     preexec_fn=on_the_terminal)
        os.close(slave)
        self.out, self.typed_at, self.started, self.ended = b"", None, time.monotonic(), False

    def _read(self, wait_s: float) -> None:
        import select

        ready, _, _ = select.select([self.master], [], [], wait_s)
        if not ready:
            return
        try:
            data = os.read(self.master, 65536)
        except OSError:  # EIO: every holder of the terminal closed it
            data = b""
        self.ended = self.ended or not data
        self.out += data

    def until(self, text: str, timeout: float) -> bool:
        """Read until `text` is in the output (True), or the command ended or `timeout` passed (False)."""
        end = time.monotonic() + timeout
        while text.encode() not in self.out and not self.ended and time.monotonic() < end:
            self._read(0.05)
        return text.encode() in self.out

    def ctrl_c(self) -> None:
        os.write(self.master, b"\x03")
        self.typed_at = time.monotonic()

    @property
    def text(self) -> str:
        return self.out.decode(errors="replace")

    def wait(self, timeout: float) -> tuple[int | None, str, float | None]:
        import subprocess

        end = time.monotonic() + timeout
        try:
            while not self.ended and time.monotonic() < end:
                self._read(0.05)
            try:
                rc = self.proc.wait(max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                rc = None
        finally:
            self.close()
        return rc, self.text, (time.monotonic() - self.typed_at) if self.typed_at else None

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.master is not None:
            os.close(self.master)
            self.master = None


def pty_run(argv: list[str], env: dict, *, ctrl_c_when: str | None = None, ctrl_c_after: float | None = None,
            timeout: float = 120, cwd=None) -> tuple[int | None, str, float | None]:
    """Run a command on a real terminal (`Terminal`) and type Ctrl-C once its output shows `ctrl_c_when`, or
    `ctrl_c_after` seconds after it started. Returns (exit status, everything it printed, seconds from Ctrl-C to
    its exit); the status is None when it outlived `timeout`."""
    term = Terminal(argv, env, cwd)
    try:
        while time.monotonic() - term.started < timeout and not term.ended:
            term._read(0.05)
            shown = ctrl_c_when is not None and ctrl_c_when.encode() in term.out
            late = ctrl_c_after is not None and time.monotonic() - term.started > ctrl_c_after
            if term.typed_at is None and (shown or late):
                term.ctrl_c()
        return term.wait(max(0.1, timeout - (time.monotonic() - term.started)))
    finally:
        term.close()
