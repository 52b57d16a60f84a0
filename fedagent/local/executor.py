"""A warm ClientApp host for a SuperNode started with `--isolation process`: one long-lived Python process that
has already imported Flower, fedagent and numpy and loaded the device's training rows, and forks a child per
task that runs Flower's own ClientApp runtime (`flwr.supernode.runtime.run_clientapp`) unchanged.

Why: with the default `--isolation subprocess`, the SuperNode's SuperExec starts a fresh `flwr-clientapp`
interpreter for every message (4 per SecAgg+ round), each spending about 2 CPU-seconds on imports; a fork of
this host costs milliseconds. `--isolation process` is Flower's mode for a ClientApp process managed outside the
SuperNode; this host speaks the same Runtime API as `flower-superexec` (AcquireTask, then a child with the
task's token) through Flower's own plugin and executor interfaces, and polls for tasks every `poll_s`
(SuperExec's default is 1 s). A child that crashes fails only its task, as with the default. The host keeps no
threads of its own, so forking is safe; it exits when its SuperNode does.

    python -m fedagent.local.executor --runtime-api-address 127.0.0.1:9094 [--store DIR] [--poll 0.05]
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import time

from flwr.proto.runtime_pb2 import AcquireTaskRequest  # noqa: E402  (Flower's generated protobuf)
from flwr.supercore.constant import TaskType
from flwr.supercore.interceptors.http.runtime_version import RuntimeVersionHttpInterceptor
from flwr.supercore.retry import make_simple_http_retry_invoker
from flwr.supercore.runtime import RuntimeHttpClient
from flwr.supercore.superexec.executor import ExecutionSpec, LaunchResult
from flwr.supercore.superexec.plugin.base_exec_plugin import BaseExecPlugin
from flwr.supercore.tls import validate_and_resolve_root_certificates


class ClientAppPlugin(BaseExecPlugin):
    """Flower's base exec plugin, taking ClientApp tasks only."""

    supported_task_types = frozenset({TaskType.CLIENT_APP})


class ForkExecutor:
    """Flower's Executor protocol: `launch` forks this warm process and runs the ClientApp task in the child."""

    def __init__(self):
        self.children: dict[int, float] = {}  # pid -> monotonic start

    def get_eligible_capacity(self, supported_task_types, *, insecure=False, root_certificates_path=None):
        return supported_task_types, set()

    def wait_for_capacity(self, task_type=None, *, fab_hash=None, insecure=False, root_certificates_path=None):
        return None

    def launch(self, spec: ExecutionSpec) -> LaunchResult:
        pid = os.fork()
        if pid == 0:  # child: Flower's ClientApp runtime, then leave without running the parent's exit handlers
            code = 1
            try:
                # optional extra: fed (flwr); the module loads without it
                from flwr.supernode.runtime.run_clientapp import run_clientapp

                signal.signal(signal.SIGTERM, signal.SIG_DFL)
                run_clientapp(runtime_api_address=spec.runtime_api_address, token=spec.token,
                              insecure=spec.insecure,
                              certificates=validate_and_resolve_root_certificates(spec.root_certificates_path,
                                                                                  spec.insecure),
                              parent_pid=spec.parent_pid, runtime_dependency_install=False)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        self.children[pid] = time.monotonic()
        return LaunchResult.accepted()

    def reconcile(self) -> None:
        """Reap finished children."""
        for pid in list(self.children):
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done:
                took = time.monotonic() - self.children.pop(pid)
                print(f"fedagent executor: task process {pid} exited {os.waitstatus_to_exitcode(status)} after "
                      f"{took:.2f} s ({usage.ru_utime + usage.ru_stime:.2f} CPU-s)", file=sys.stderr, flush=True)

    def close(self) -> None:
        for pid in self.children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def preload(store: str | None) -> None:
    """Import what a task needs and load the device's rows, so every forked child starts with them."""
    import flwr.supernode.runtime.run_clientapp  # noqa: F401

    import fedagent.app.client_app as client_app  # noqa: F401  (also imports flwr's ClientApp machinery)

    if store:
        try:
            client_app.device_data(store)
        except Exception as e:  # no data yet: each task reports it clearly
            print(f"fedagent executor: training data not preloaded ({e})", file=sys.stderr, flush=True)


def serve(runtime_api_address: str, insecure: bool = True, root_certificates_path: str | None = None,
          poll_s: float = 0.05, parent_pid: int | None = None) -> None:
    executor = ForkExecutor()
    client = RuntimeHttpClient.from_server_address(
        server_address=runtime_api_address, insecure=insecure,
        root_certificates=validate_and_resolve_root_certificates(root_certificates_path, insecure),
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
        retry_invoker=make_simple_http_retry_invoker())
    plugin = ClientAppPlugin(runtime_api_address=runtime_api_address, insecure=insecure,
                             root_certificates_path=root_certificates_path, runtime_dependency_install=False,
                             executor=executor)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            if parent_pid is not None and os.getppid() != parent_pid and not _alive(parent_pid):
                break
            executor.reconcile()
            types, hashes = executor.get_eligible_capacity(set(plugin.supported_task_types))
            res = client.AcquireTask(AcquireTaskRequest(supported_task_types=types, agentapp_fab_hashes=hashes))
            if res.HasField("task") and res.token:
                plugin.launch_task(token=res.token, task=res.task)
                continue
            time.sleep(poll_s)
    finally:
        executor.close()
        client.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runtime-api-address", required=True)
    p.add_argument("--root-certificates", default=None, help="CA of the SuperNode's Runtime API (TLS)")
    p.add_argument("--store", default=None, help="the device's learning store, preloaded before the first task")
    p.add_argument("--poll", type=float, default=0.05, help="seconds between task polls (SuperExec: 1)")
    p.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the SuperNode) is gone")
    args = p.parse_args(argv)
    preload(args.store)
    serve(args.runtime_api_address, insecure=args.root_certificates is None,
          root_certificates_path=args.root_certificates, poll_s=args.poll, parent_pid=args.parent_pid)
    return 0


if __name__ == "__main__":
    sys.exit(main())
