"""Start `facebridge run --source sample --grpc ...` as a real subprocess and wait until it serves."""
from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]


def free_tcp_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_bridge(home: Path, token: str | None = None, timeout: float = 90.0):
    """Yields (address, process) of a `facebridge run --source sample` serving gRPC; stops it afterwards."""
    address = f"127.0.0.1:{free_tcp_port()}"
    cmd = [sys.executable, "-m", "bridge.cli", "run", "--source", "sample", "--grpc", address,
           "--llf", "off", "--vmc", "off", "--quiet"]
    if token:
        cmd += ["--grpc-token", token]
    env = dict(os.environ, FACEBRIDGE_HOME=str(home), OMP_NUM_THREADS="1",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    log = open(home.parent / "bridge.log", "w+") if home.parent.exists() else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        channel = grpc.insecure_channel(address)
        health = health_pb2_grpc.HealthStub(channel)
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise AssertionError(f"facebridge run exited with {proc.returncode}:\n{log.read()[-3000:]}")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service="facebridge.v1.FaceBridgeService"),
                                     timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    break
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"facebridge run did not serve gRPC on {address} within {timeout:.0f} s")
            time.sleep(0.2)
        channel.close()
        yield address, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not subprocess.DEVNULL:
            log.close()
