"""`facebridge serve` on Ray Serve: one replica per GPU (or per CPU share), each holding a whole Track server.

Ray places and restarts the replicas; the per-frame path never goes through Ray. Every replica listens on its own
port (direct ingress: Serve's proxy actor cost 11-37 ms a message, docs/reference), the first free one of
`base_port .. base_port + ports - 1` on its node, so the addresses are known in advance (for HAProxy or a
client's list). A face stream is one long-lived gRPC call, so it stays on the replica that accepted it for its
whole life; if that replica dies only its streams end, and their clients reconnect through the ingress to another.

The replica builds its server with the `build` function it is given (bridge.runtime.serve.build_server): serving/
knows no stage, the composition root stays in runtime/.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import socket
import time

from bridge.errors import FaceBridgeError

log = logging.getLogger(__name__)

APP_NAME = "facebridge-serve"
TOKEN_ENV = "FACEBRIDGE_SERVE_TOKEN"
DEPLOY_TIMEOUT_S = 300.0  # a deployment took 12-94 s on the loaded 2-core machine


class FaceServeReplica:
    """The Ray Serve deployment class (wrapped by `deployment()`): a Track server on its own port."""

    def __init__(self, build, config, base_port: int, ports: int) -> None:
        host = config.grpc.rpartition(":")[0]
        if config.token is None and os.environ.get(TOKEN_ENV):  # a cluster's secret, set on the worker nodes
            config = dataclasses.replace(config, token=os.environ[TOKEN_ENV])
        self.server = None
        errors = []
        for port in range(base_port, base_port + ports):
            replica = f"{socket.gethostname()}:{port}"
            try:
                self.server = build(dataclasses.replace(config, grpc=f"{host}:{port}", replica=replica))
                break
            except FaceBridgeError as e:  # the port is taken (another replica on this node): the next one
                errors.append(str(e))
        if self.server is None:
            raise RuntimeError(f"no free port in {base_port}..{base_port + ports - 1}: {errors[-1:]}")
        self.started = time.time()

    def info(self) -> dict:
        """Where this replica listens and what it serves (the driver collects these)."""
        return {"address": self.server.address, "replica": self.server.replica, "pid": os.getpid(),
                "stats": self.server.stats()}

    def __call__(self, request=None) -> dict:
        return self.info()

    def check_health(self) -> None:
        """Ray Serve's health check: a replica whose gRPC server stopped is restarted."""
        if self.server is None or self.server._closed:
            raise RuntimeError("the Track server of this replica is not running")

    def __del__(self) -> None:
        if getattr(self, "server", None) is not None:
            self.server.close()


def deploy(build, config, replicas: int, gpus_per_replica: float, cpus_per_replica: float = 1.0,
           base_port: int | None = None) -> list[dict]:
    """Run `replicas` replicas on the connected Ray cluster; return each one's info once all listen."""
    # optional extra: serve (ray)
    from ray import serve

    base = base_port if base_port is not None else int(config.grpc.rpartition(":")[2])
    options = {"num_cpus": cpus_per_replica}
    if gpus_per_replica:
        options["num_gpus"] = gpus_per_replica
    deployment = serve.deployment(FaceServeReplica, name="FaceServeReplica", num_replicas=replicas,
                                  ray_actor_options=options, max_ongoing_requests=4,
                                  health_check_period_s=10, health_check_timeout_s=30)
    serve.start(http_options={"location": "NoServer"})  # no proxy actor: frames never pass through Ray
    handle = serve.run(deployment.bind(build, config, base, replicas), name=APP_NAME, route_prefix=None,
                       blocking=False)
    end = time.monotonic() + DEPLOY_TIMEOUT_S
    seen: dict[str, dict] = {}
    while len(seen) < replicas and time.monotonic() < end:  # calls land on random replicas: ask until all answer
        try:
            info = handle.info.remote().result(timeout_s=60)
            seen[info["address"]] = info
        except Exception as e:  # noqa: BLE001 - still deploying
            log.debug("replicas not ready yet: %s", e)
            time.sleep(1.0)
    if len(seen) < replicas:
        raise FaceBridgeError(f"only {len(seen)} of {replicas} Ray Serve replicas answered within "
                              f"{DEPLOY_TIMEOUT_S:.0f} s", "check the cluster's resources (`ray status`): each "
                              f"replica needs {gpus_per_replica or 0} GPU and {cpus_per_replica} CPU")
    return sorted(seen.values(), key=lambda i: i["address"])


def shutdown() -> None:
    # optional extra: serve (ray)
    from ray import serve

    try:
        serve.delete(APP_NAME)
        serve.shutdown()
    except Exception as e:  # noqa: BLE001 - the cluster may already be gone
        log.debug("serve shutdown: %s", e)
