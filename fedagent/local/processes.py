"""Start, watch and stop the Flower processes fedagent runs: a SuperLink, and SuperNodes with their ClientApp host.

Policy: listeners bind 127.0.0.1 unless told otherwise. Every process runs in its own session and writes to its
own log file; `stop()` sends SIGTERM to the whole session, waits a bounded grace, then SIGKILLs it, so nothing
fedagent started outlives it. Readiness is observed, not slept for: a port that accepts, a SuperNode that logged
its node id, or a process that exited, whose log then gives a one-line reason. Flower's telemetry and update
check are off in every process, and BLAS/OpenMP use one thread (devices are small; CI has two cores).
Two ClientApp modes: `fast` (default) runs the SuperNode with `--isolation process` beside a warm fork host
(fedagent/local/executor.py); `fast=False` is Flower's default `--isolation subprocess` (a fresh `flwr-clientapp`
per message), kept for comparison.
"""
from __future__ import annotations

import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bridge import console, ports
from bridge.child_status import running
from bridge.errors import FaceBridgeError
from bridge.listeners import split_address as split_listener_address

BIN = Path(sys.executable).parent
CTRL_C_GRACE_S = 1.0  # how long Flower processes may take to end after Ctrl-C before they are killed


def flower_env(home: Path | None = None, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "OMP_NUM_THREADS": "1",
                "OPENBLAS_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    if home is not None:
        env["FLWR_HOME"] = str(home)
    env.update(extra or {})
    return env


@dataclass
class Tls:
    """TLS files: the CA every party trusts, and (server side only) the server's certificate and key."""

    ca: Path
    cert: Path | None = None
    key: Path | None = None


class Proc:
    """One started process (and its session). `stop()` is bounded and idempotent."""

    def __init__(self, name: str, cmd: list[str], env: dict, log: Path, nice: int = 0):
        self.name, self.cmd, self.log = name, cmd, Path(log)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self._out = open(self.log, "ab")
        preexec = (lambda: os.nice(nice)) if nice else None
        self.popen = subprocess.Popen(cmd, env=env, stdout=self._out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=preexec)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        """Whether it still runs (bridge/child_status.py: a Ctrl-C in the caller's watch loop never blocks stop())."""
        return running(self.popen)

    def tail(self, lines: int = 30) -> str:
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(re.sub(r"\x1b\[[0-9;]*m", "", text).splitlines()[-lines:])

    def kill_now(self) -> None:
        """SIGKILL the whole session at once (tests use this to make a device drop)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.popen.wait()

    def terminate(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass

    def stop(self, grace: float = 5.0) -> None:
        if self.popen.poll() is None:
            self.terminate()
            try:
                self.popen.wait(max(grace, 0.0))
            except subprocess.TimeoutExpired:
                self.kill_now()
        try:  # children of a session leader that already exited
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._out.close()


def interrupt_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt, so `finally` blocks stop what this process started."""
    def handler(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, handler)


def stop_all(procs: list[Proc], grace: float = 5.0) -> None:
    """SIGTERM every process (devices before the link), then give all of them one shared grace, then SIGKILL.
    After Ctrl-C the grace is at most CTRL_C_GRACE_S: the command stops within about a second (bridge/console.py)."""
    if console.was_interrupted():
        grace = min(grace, CTRL_C_GRACE_S)
    for proc in reversed(procs):
        proc.terminate()
    deadline = time.monotonic() + grace
    for proc in reversed(procs):
        proc.stop(deadline - time.monotonic())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def split_address(address: str) -> tuple[str, int]:
    return split_listener_address(address, "--superlink", ports.SUPERLINK)


def check_superlink(address: str, root_ca: Path | None) -> None:
    """Fail with one line when the SuperLink is down or its certificate is not signed by `root_ca`."""
    host, port = split_address(address)
    try:
        sock = socket.create_connection((host, port), timeout=5)
    except OSError as e:
        raise FaceBridgeError(f"the SuperLink at {address} is not reachable ({e.strerror or e})",
                              "start it with `fedagent server` or fix --superlink") from None
    with sock:
        if root_ca is None:
            return
        ctx = ssl.create_default_context(cafile=str(root_ca))
        try:
            with ctx.wrap_socket(sock, server_hostname=host):
                pass
        except ssl.SSLCertVerificationError as e:
            raise FaceBridgeError(f"the SuperLink's TLS certificate at {address} does not verify against {root_ca} "
                                  f"({e.verify_message})", "pass the CA that signed the server's certificate "
                                  "with --root-certificates") from None
        except (ssl.SSLError, OSError) as e:
            raise FaceBridgeError(f"TLS with the SuperLink at {address} failed ({e})",
                                  "check that the server runs with TLS, or drop --root-certificates") from None


def wait_for(check, timeout: float, what: str, procs: list[Proc] = (), poll: float = 0.2):
    """Poll `check()` until it returns something truthy; fail when a watched process exits or time runs out."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        for proc in procs:
            if not proc.alive():
                raise FaceBridgeError(f"{proc.name} exited (code {proc.popen.returncode}) while waiting for {what}: "
                                      f"{explain(proc)}", f"see its log {proc.log}")
        if time.monotonic() >= deadline:
            raise FaceBridgeError(f"timed out after {timeout:.0f} s waiting for {what}",
                                  "see the logs in the work folder")
        time.sleep(poll)


# Flower's own messages mapped to what a user should read
_REASONS = (
    (r"code: 2004|Failed to activate SuperNode", "the SuperLink refused this device's key (it is not registered)"),
    (r"code: 2001|must be registered via the CLI", "the SuperLink requires registered device keys and none was given"),
    (r"node auth.*TLS|Exit Code: 303", "device authentication needs TLS"),
    (r"CERTIFICATE_VERIFY_FAILED", "the SuperLink's TLS certificate did not verify"),
    (r"Address already in use|error while attempting to bind", "a port it needs is already in use"),
    (r"Exit Code: 302", "the device key file is not a valid private key"),
)


def explain(proc: Proc) -> str:
    text = proc.tail(80)
    for pattern, reason in _REASONS:
        if re.search(pattern, text, re.IGNORECASE):
            return reason
    last = [line for line in text.splitlines() if line.strip()]
    return last[-1].strip()[:200] if last else "no output"


def superlink(home: Path, log_dir: Path, control_port: int, fleet_host: str = "127.0.0.1",
              fleet_port: int = ports.port_of(ports.SUPERLINK), tls: Tls | None = None, node_auth: bool = False,
              nice: int = 0) -> Proc:
    """A SuperLink with in-memory state (its SQLite state failed with 10 devices) and no runtime installs. Its
    Control and Runtime APIs listen on 127.0.0.1:`control_port` only; devices get `fleet_host:fleet_port`, which
    serves nothing but the Fleet API (fedagent/local/superlink_main.py)."""
    cmd = [sys.executable, "-m", "fedagent.local.superlink_main", "--fleet-host", fleet_host, "--fleet-port",
           str(fleet_port), "--host", "127.0.0.1", "--port", str(control_port),
           "--disable-runtime-dependency-installation"]
    if tls is None:
        if node_auth:
            raise FaceBridgeError("device authentication needs TLS", "pass --tls-cert, --tls-key and --tls-ca")
        cmd.append("--insecure")
    else:
        cmd += ["--ssl-ca-certfile", str(tls.ca), "--ssl-certfile", str(tls.cert), "--ssl-keyfile", str(tls.key)]
    if node_auth:
        cmd.append("--enable-supernode-auth")
    # its SuperExec starts the ServerApp of a run; Flower's knob for how often it looks (default 1 s)
    env = flower_env(home, {"FLWR_SUPEREXEC_TASK_POLL_INTERVAL": "0.1"})
    proc = Proc("SuperLink", cmd, env, log_dir / "superlink.log", nice)
    device_host = "127.0.0.1" if fleet_host in ("0.0.0.0", "::") else fleet_host
    wait_for(lambda: port_open("127.0.0.1", control_port) and port_open(device_host, fleet_port), 60,
             f"the SuperLink to listen on 127.0.0.1:{control_port} and {fleet_host}:{fleet_port}", [proc])
    return proc


def supernode(home: Path, log_dir: Path, name: str, superlink_address: str, runtime_port: int,
              node_config: dict, root_ca: Path | None = None, auth_key: Path | None = None, fast: bool = True,
              store: str | None = None, nice: int = 0, extra_env: dict | None = None) -> list[Proc]:
    """A SuperNode (and, in fast mode, its warm ClientApp host). Returns [node, host] or [node]."""
    config = " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in node_config.items())
    # fast: Flower's SuperNode with its fixed 3 s / 0.5 s idle waits shortened (fedagent/local/supernode_main.py)
    node = [sys.executable, "-m", "fedagent.local.supernode_main"] if fast else [str(BIN / "flower-supernode")]
    cmd = [*node, "--superlink", superlink_address, "--port", str(runtime_port),
           "--isolation", "process" if fast else "subprocess", "--node-config", config]
    cmd += ["--root-certificates", str(root_ca)] if root_ca else ["--insecure"]
    if auth_key:
        cmd += ["--auth-supernode-private-key", str(auth_key)]
    env = flower_env(home, extra_env)
    procs = [Proc(f"SuperNode {name}", cmd, env, log_dir / f"{name}-supernode.log", nice)]
    if fast:
        host = [sys.executable, "-m", "fedagent.local.executor", "--runtime-api-address", f"127.0.0.1:{runtime_port}",
                "--parent-pid", str(procs[0].pid)] + (["--store", store] if store else [])
        procs.append(Proc(f"ClientApp host {name}", host, env, log_dir / f"{name}-clientapp.log", nice))
    return procs


def node_id_of(proc: Proc) -> int | None:
    """The node id a SuperNode logged once it connected, or None."""
    match = re.search(r"SuperNode ID: (\d+)", proc.tail(200))
    return int(match.group(1)) if match else None
