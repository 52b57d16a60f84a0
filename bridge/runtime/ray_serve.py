"""`facebridge serve --ray-replicas N`: the same Track server in N Ray Serve replicas (bridge/serving/ray_app.py),
on a local Ray head on 127.0.0.1 or on a cluster (`--ray-address`, KubeRay's RayService on Kubernetes).

Replica i listens on the first free port from --grpc's PORT on its node; with GPU runners each replica takes one
GPU (`--ray-gpus-per-replica` shares one GPU between several replicas, for hosts whose CPU work per frame needs
more processes than there are GPUs). `--haproxy-config` adds one address in front of them.
"""
from __future__ import annotations

import logging
import os
import signal
import threading

from bridge.errors import FaceBridgeError
from bridge.runtime.serve import ServeConfig, build_server
from bridge.serving import ray_app
from bridge.serving.grpc_service import check_listen
from bridge.serving.haproxy import start_haproxy
from bridge.serving.ray_app import FaceServeReplica
from bridge.serving.ray_cluster import LocalRayHead

log = logging.getLogger(__name__)


def _gpus_here() -> int:
    try:
        # optional extra: torch (gpu), about 1.5 s to import
        import torch

        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except ImportError:
        return 0


def serve_on_ray(config: ServeConfig, replicas: int, address: str | None = None, work_dir: str | None = None,
                 haproxy_config: str | None = None, status: bool = True, gpus_per_replica: float | None = None,
                 haproxy_listen: str | None = None) -> int:
    check_listen(config.grpc, config.token, config.tls_cert, config.tls_key)
    head = None
    if address is None:  # before `import ray`: it reads the loopback and token settings on import
        head = LocalRayHead(num_cpus=max(os.cpu_count() or 1, replicas + 1), num_gpus=_gpus_here(),
                            work_dir=work_dir)
    try:
        # optional extra: serve (ray)
        import ray
    except ImportError:
        raise FaceBridgeError("Ray Serve is not installed", "pip install 'facebridge[serve]' (ray[serve] 2.60)") \
            from None

    on_gpu = config.runners != "cpu"
    if gpus_per_replica is None:
        gpus_per_replica = 1.0 if on_gpu else 0.0
    stop = threading.Event()
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
    proxy = None
    try:
        if head is not None:
            address = head.start().address
        ray.init(address=address, namespace="facebridge", log_to_driver=False, logging_level=logging.WARNING)
        if previous is not None:  # ray.init installs a SIGTERM handler that exits at once: ours stops cleanly
            signal.signal(signal.SIGTERM, lambda *_: stop.set())
        infos = ray_app.deploy(build_server, config, replicas, gpus_per_replica,
                               cpus_per_replica=1.0 if not on_gpu else 2.0)
        addresses = [i["address"] for i in infos]
        pids = " ".join(f"pid {i['pid']}" for i in infos)
        if haproxy_config:
            host, _, port = config.grpc.rpartition(":")
            listen = haproxy_listen or f"{host}:{int(port) + replicas}"
            proxy = start_haproxy(haproxy_config, listen, addresses)
            print(f"facebridge serve: haproxy on {listen} ({haproxy_config}) in front of the replicas", flush=True)
        print(f"facebridge serve: listening on {' '.join(addresses)} (Ray Serve, {replicas} replicas of "
              f"{config.runners} runners, {pids})", flush=True)
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if proxy is not None:
            proxy.terminate()
            proxy.wait(10)
        try:
            ray_app.shutdown()
            if ray.is_initialized():
                ray.shutdown()
        finally:
            if head is not None:
                head.stop()
    return 0


def build_app(args: dict):
    """The Serve application for a cluster that runs it itself (KubeRay's RayService `import_path:
    bridge.runtime.ray_serve:build_app`, `args` as in docs/kuberay-rayservice.yaml): replicas with the Track server
    on `port` of their pod, one GPU each by default."""
    # optional extra: serve (ray)
    from ray import serve

    port = int(args.get("port", 50061))
    config = ServeConfig(grpc=f"{args.get('host', '0.0.0.0')}:{port}", runners=args.get("runners", "torch-cuda"),
                         max_streams=int(args.get("max_streams", 1024)),
                         deadline_ms=float(args.get("deadline_ms", 100.0)), token=args.get("token"),
                         tls_cert=args.get("tls_cert"), tls_key=args.get("tls_key"))
    gpus = float(args.get("gpus_per_replica", 1.0 if config.runners != "cpu" else 0.0))
    options = {"num_cpus": float(args.get("cpus_per_replica", 2.0)), **({"num_gpus": gpus} if gpus else {})}
    deployment = serve.deployment(FaceServeReplica, name="FaceServeReplica",
                                  num_replicas=int(args.get("replicas", 1)), ray_actor_options=options,
                                  health_check_period_s=10, health_check_timeout_s=30)
    return deployment.bind(build_server, config, port, int(args.get("ports", 1)))
