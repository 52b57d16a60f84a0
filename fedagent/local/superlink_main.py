"""Flower's own `flower-superlink`, with devices served on a listener of their own that offers only the Fleet API.

Flower 1.42 serves the Fleet API (what devices use), the Control API (`flwr run`, `flwr list`, `flwr stop`,
`flwr supernode register`: start runs, which pushes a FAB whose ServerApp runs as the server's user, stop them,
register device keys) and the Runtime API (the SuperLink's own ServerApp processes) on one `--host/--port`, and the
Control API has no authentication in open-source Flower. Whoever could reach the device port could therefore run
code on the server and let their own key in, TLS and registered keys or not.

This entry point runs Flower's SuperLink unchanged (Flower parses the arguments, builds the app, runs its
lifespan and SuperExec) but serves that one app on two listeners:
- Flower's `--host/--port`, which must be a loopback address: every API, for the operator's `flwr` commands and
  the SuperLink's own ServerApp (an operator elsewhere reaches it through an SSH tunnel);
- `--fleet-host/--fleet-port`, the device port: only `/v1/fleet/<call>` and `/health`, anything else answered
  404 before it reaches Flower. Key registration under device authentication is a Control call
  (`/v1/control/register-node`; the Fleet's own register-node is refused by Flower when authentication is on).

    python -m fedagent.local.superlink_main --fleet-host HOST --fleet-port PORT [flower-superlink arguments]
"""
from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import ipaddress
import re
import signal
import sys

DEVICE_PATH = re.compile(r"/v1/fleet/[a-z][a-z-]*|/health")


def fleet_only(app):
    """The ASGI app for devices: a Fleet API call (or the health check) goes to Flower, any other HTTP request is
    answered 404 and any WebSocket closed, before Flower sees either."""
    async def front(scope, receive, send):
        if scope["type"] == "http" and DEVICE_PATH.fullmatch(scope["path"]):
            await app(scope, receive, send)
        elif scope["type"] == "http":
            body = b'{"detail":"not served on the device port"}'
            await send({"type": "http.response.start", "status": 404,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
        elif scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})

    return front


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _split_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    ours = argparse.ArgumentParser(add_help=False)
    ours.add_argument("--fleet-host", required=True)
    ours.add_argument("--fleet-port", type=int, required=True)
    return ours.parse_known_args(argv)


async def _serve(servers) -> None:
    """Run every listener until SIGINT/SIGTERM, then stop them all (the first one owns Flower's lifespan)."""
    loop = asyncio.get_running_loop()

    def stop() -> None:
        for server in servers:
            server.should_exit = True

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop)
    await asyncio.gather(*(server.serve() for server in servers))


def main(argv: list[str] | None = None) -> int:
    ours, flower_args = _split_args(sys.argv[1:] if argv is None else argv)

    # optional extra: fed (flwr); the module loads without it
    import uvicorn
    from flwr.supercore.http_logging import get_uvicorn_log_config
    from flwr.supercore.logger import console_handler
    from flwr.superlink.main import create_app

    class Listener(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # _serve handles the signals once for every listener
            yield

    # the module (its package re-exports a function of the same name)
    cli = importlib.import_module("flwr.superlink.cli.flower_superlink")
    sys.argv = ["flower-superlink", *flower_args]
    config = cli._parse_superlink_lifespan_config()  # Flower's own parsing and checks of its arguments
    if not _loopback(config.host):
        print(f"fedagent: the SuperLink's Control API must listen on loopback, not {config.host}; devices use "
              "--fleet-host", file=sys.stderr)
        return 2
    app = create_app(config, cli.SuperLinkLifespan)
    tls = {"ssl_keyfile": config.ssl_keyfile, "ssl_certfile": config.ssl_certfile}
    log_config = get_uvicorn_log_config(console_handler.level)
    control = Listener(uvicorn.Config(app, host=config.host, port=config.port, log_config=log_config, **tls))
    fleet = Listener(uvicorn.Config(fleet_only(app), host=ours.fleet_host, port=ours.fleet_port, lifespan="off",
                                    log_config=log_config, **tls))
    print(f"fedagent: SuperLink Control and Runtime APIs on {config.host}:{config.port} (this machine only), "
          f"Fleet API for devices on {ours.fleet_host}:{ours.fleet_port}", flush=True)
    asyncio.run(_serve([control, fleet]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
