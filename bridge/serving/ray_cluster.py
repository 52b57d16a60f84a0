"""A local Ray head on 127.0.0.1 for `facebridge serve --ray-replicas`, started the way that proved reliable on a
loaded 2-core machine (docs/reference: `ray.init()` starting its own cluster aborted there while its node waited
for the dashboard agent).

`ray start --head --block` runs in a new process session with fixed agent ports, no dashboard, its temporary
files and an auth token in a directory of our own, usage stats off; it is stopped by its process group (the ids
we started), never with `ray stop`, which ends every Ray process of the user on the machine.
"""
from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bridge.child_status import running
from bridge.errors import FaceBridgeError

START_TIMEOUT_S = 180.0  # `ray start` took 18-38 s on the loaded 2-core machine


def _free_ports(n: int) -> list[int]:
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        socks.append(s)
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def ray_env(work_dir: Path) -> dict[str, str]:
    """The environment every process of this cluster (head, driver) runs with."""
    return {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(work_dir / "token"), "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class LocalRayHead:
    """`with LocalRayHead(num_cpus, num_gpus) as head:` then `ray.init(address=head.address)`."""

    def __init__(self, num_cpus: int | None = None, num_gpus: int | None = None,
                 work_dir: str | Path | None = None) -> None:
        self._own_dir = work_dir is None
        # short: Ray's unix socket paths under the temp dir must stay below 108 bytes
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="fbray-", dir="/tmp"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.num_cpus, self.num_gpus = num_cpus, num_gpus
        self.process: subprocess.Popen | None = None
        self.address = ""
        # the driver (this process) must present the same token and see itself on loopback; Ray reads these when
        # it is imported, so a head is made before `import ray`
        os.environ.update(ray_env(self.work_dir))

    def start(self) -> LocalRayHead:
        token = self.work_dir / "token"
        if not token.exists():
            token.write_text(secrets.token_hex(32))
            token.chmod(0o600)
        env = {**os.environ, **ray_env(self.work_dir)}
        gcs, agent, agent_grpc, metrics, runtime_env, node_mgr, obj_mgr, client = _free_ports(8)
        cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
               "--node-ip-address=127.0.0.1", f"--port={gcs}", "--include-dashboard=false",
               f"--temp-dir={self.work_dir / 'tmp'}", "--disable-usage-stats",
               f"--dashboard-agent-listen-port={agent}", f"--dashboard-agent-grpc-port={agent_grpc}",
               f"--metrics-export-port={metrics}", f"--runtime-env-agent-port={runtime_env}",
               f"--node-manager-port={node_mgr}", f"--object-manager-port={obj_mgr}",
               f"--ray-client-server-port={client}"]
        if self.num_cpus is not None:
            cmd.append(f"--num-cpus={self.num_cpus}")
        if self.num_gpus is not None:
            cmd.append(f"--num-gpus={self.num_gpus}")
        self._log = open(self.work_dir / "ray-start.log", "w")
        self.process = subprocess.Popen(cmd, env=env, stdout=self._log, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        self.address = f"127.0.0.1:{gcs}"
        end = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < end:
            if not running(self.process):  # (stop() below collects its status)
                lines = (self.work_dir / "ray-start.log").read_text(errors="replace").strip().splitlines()
                self.stop()
                raise FaceBridgeError(f"ray start exited with {self.process.returncode}: "
                                      f"{lines[-1][:300] if lines else 'no output'}", "check that ray[serve] is "
                                      "installed (pip install 'facebridge[serve]') and that 127.0.0.1 ports are free")
            if "Ray runtime started" in (self.work_dir / "ray-start.log").read_text(errors="replace"):
                return self
            time.sleep(0.5)
        self.stop()
        raise FaceBridgeError(f"the local Ray head did not start within {START_TIMEOUT_S:.0f} s",
                              "the machine may be overloaded; try again, or join a running cluster with --ray-address")

    def stop(self) -> None:
        """End the head and every process it started (its process group), then remove our directory."""
        if self.process is not None and self.process.poll() is None:
            # SIGTERM makes Ray drain the node for up to 30 s; a short grace is enough for its logs
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(self.process.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.process.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.process is not None:
            try:  # workers the raylet started stay in the group after `ray start` itself has exited
                os.killpg(self.process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if getattr(self, "_log", None):
            self._log.close()
        if self._own_dir:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalRayHead:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
