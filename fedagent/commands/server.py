"""`fedagent server`: a Flower SuperLink plus the fedagent ServerApp, running rounds once devices are online."""
from __future__ import annotations

import ipaddress
from pathlib import Path

from bridge import ports
from bridge.argparsing import folder_path, port_number
from bridge.errors import FaceBridgeError
from fedagent.app.project import RUN_CONFIG


def add_parser(sub) -> None:
    p = sub.add_parser("server", help="run federated rounds for devices running `fedagent client`",
                       description="Start a Flower SuperLink (in-memory state, no runtime installs), wait for "
                                   "--min-clients devices, run --rounds rounds of SecAgg+ over their adapters, "
                                   "evaluate each new global adapter on --eval-store and publish it when no worse.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; anything wider "
                   "needs --tls-* and --node-auth)")
    p.add_argument("--port", type=port_number, default=ports.port_of(ports.SUPERLINK),
                   help=f"the devices' port: Flower's Fleet API only (default {ports.port_of(ports.SUPERLINK)})")
    control = ports.port_of(ports.SUPERLINK_CONTROL)
    p.add_argument("--control-port", type=port_number, default=control,
                   help="Flower's Control API (flwr run/list/stop, "
                   f"device key registration), always on 127.0.0.1 (default {control}; from elsewhere: an SSH tunnel)")
    p.add_argument("--tls-cert", metavar="PEM", help="server certificate (with the address in its SAN)")
    p.add_argument("--tls-key", metavar="PEM", help="server private key")
    p.add_argument("--tls-ca", metavar="PEM", help="CA that signed --tls-cert (devices use it too)")
    p.add_argument("--node-auth", action="store_true", help="accept only devices whose key was registered")
    p.add_argument("--register-key", action="append", default=[], metavar="PUB",
                   help="register a device's public key (OpenSSH EC); repeatable; implies --node-auth")
    p.add_argument("--eval-store", required=True, metavar="DIR",
                   help="the server's own held-out learning store; a new adapter is published only when no worse")
    p.add_argument("--rounds", type=int, default=RUN_CONFIG["rounds"][0],
                   help=f"federated rounds (default {RUN_CONFIG['rounds'][0]})")
    p.add_argument("--min-clients", type=int, default=RUN_CONFIG["min-clients"][0],
                   help=f"devices a round needs (default {RUN_CONFIG['min-clients'][0]})")
    p.add_argument("--clients-per-round", type=int, default=RUN_CONFIG["clients-per-round"][0],
                   help="devices sampled per round (0: all online)")
    p.add_argument("--state", default="fedagent-server", type=folder_path, metavar="DIR",
                   help="server folder: logs, events, global adapter (default ./fedagent-server)")
    p.add_argument("--keys", metavar="DIR", help="signing keys (fedagent keys init); with --repo, sign releases")
    p.add_argument("--repo", metavar="DIR", help="release repository devices install from")
    p.add_argument("--wait-devices", type=float, default=600.0, help="seconds to wait for --min-clients devices")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a run setting")
    p.set_defaults(func=run)


def run(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.grpc.access import read_pem
    from fedagent.commands.simulate import parse_settings
    from fedagent.local.federation import LocalFederation
    from fedagent.local.processes import Tls, interrupt_on_sigterm
    from fedagent.local.simulation import print_event

    interrupt_on_sigterm()
    tls = None
    if args.tls_cert or args.tls_key or args.tls_ca:
        if not (args.tls_cert and args.tls_key and args.tls_ca):
            raise FaceBridgeError("TLS needs --tls-cert, --tls-key and --tls-ca together", "pass all three")
        for option, path, kind in (("--tls-cert", args.tls_cert, "CERTIFICATE"), ("--tls-key", args.tls_key,
                                   "PRIVATE KEY"), ("--tls-ca", args.tls_ca, "CERTIFICATE")):
            read_pem(path, option, kind)  # a file that is not PEM is named now, not as the SuperLink's exit
        tls = Tls(Path(args.tls_ca).resolve(), Path(args.tls_cert).resolve(), Path(args.tls_key).resolve())
    node_auth = args.node_auth or bool(args.register_key)
    for key in args.register_key:
        if not Path(key).is_file():
            raise FaceBridgeError(f"--register-key {key} is not a file", "pass a device's public key (KEY.pub)")
    try:
        loopback = ipaddress.ip_address(args.host).is_loopback
    except ValueError:
        loopback = args.host == "localhost"
    if not loopback and not (tls and node_auth):
        raise FaceBridgeError(f"listening on {args.host} exposes the server beyond this machine",
                              "add --tls-cert/--tls-key/--tls-ca and --node-auth (with --register-key per device)")
    if args.control_port == args.port:
        raise FaceBridgeError(f"--control-port {args.control_port} is also the devices' --port",
                              "give the Control API a port of its own (--control-port)")
    if args.rounds < 1 or args.min_clients < 1 or args.clients_per_round < 0 or not args.wait_devices > 0:
        raise FaceBridgeError("--rounds and --min-clients must be at least 1, --clients-per-round 0 or more and "
                              "--wait-devices positive", "for example --rounds 2 --min-clients 2")
    if not Path(args.eval_store).is_dir():
        what = "is a file, where a learning-store folder is expected" if Path(args.eval_store).exists() else \
            "does not exist"
        raise FaceBridgeError(f"held-out store {args.eval_store} {what}", "pass a learning-store folder")
    if bool(args.keys) != bool(args.repo):
        raise FaceBridgeError("signed publishing needs both --keys and --repo", "pass both, or neither")
    state = Path(args.state).resolve()
    settings = {"rounds": args.rounds, "min-clients": args.min_clients, "clients-per-round": args.clients_per_round,
                "eval-store": str(Path(args.eval_store).resolve()), **parse_settings(args.set)}
    if args.keys:
        settings.update({"keys-dir": str(Path(args.keys).resolve()), "repo-dir": str(Path(args.repo).resolve())})
    with LocalFederation(state, tls=tls, node_auth=node_auth, host=args.host, port=args.port,
                         control_port=args.control_port) as fed:
        fed.start_link()
        for key in args.register_key:
            print(f"fedagent server: registered device {fed.cli.register(Path(key).resolve())} ({key})")
        print(f"fedagent server: devices connect to {args.host}:{args.port} (Fleet API only); Control API on "
              f"{fed.control_address} (flwr: FLWR_HOME={fed.cli.home} flwr list); waiting for {args.min_clients} "
              "device(s)", flush=True)
        fed.wait_devices(args.min_clients, args.wait_devices)
        outcome = fed.run(settings, timeout=max(600.0, 300.0 * args.rounds), on_event=print_event)
    if not outcome.ok:
        raise FaceBridgeError(f"run {outcome.run_id} ended {outcome.info.get('status')}", f"see {state / 'logs'}")
    print(f"fedagent server: run {outcome.run_id} completed; published rounds "
          f"{[e.round for e in outcome.published()] or 'none'}; state in {state}")
    return 0
