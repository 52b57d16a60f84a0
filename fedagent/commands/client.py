"""`fedagent client`: this device joins federated rounds (a Flower SuperNode reading the local learning store)."""
from __future__ import annotations

import ipaddress
import time
from pathlib import Path

from bridge import ports
from bridge.argparsing import folder_path
from bridge.errors import FaceBridgeError


def add_parser(sub) -> None:
    p = sub.add_parser("client", help="take part in federated rounds from this device",
                       description="Start a Flower SuperNode that trains the lip-sync adapter on this device's "
                                   "learning store and sends only the SecAgg+-masked update. Your recordings never "
                                   "leave the device; a personalised adapter is kept here.")
    p.add_argument("--superlink", default=ports.SUPERLINK, metavar="HOST:PORT",
                   help=f"the server's SuperLink (default {ports.SUPERLINK})")
    p.add_argument("--root-certificates", metavar="CA.pem", help="CA that signed the server's TLS certificate "
                   "(required for a SuperLink that is not on this machine)")
    p.add_argument("--auth-key", metavar="KEY", help="this device's private key (OpenSSH EC), registered on the "
                   "server with `fedagent server --register-key KEY.pub`")
    p.add_argument("--store", metavar="DIR", help="learning store (default $FACEBRIDGE_HOME/learn)")
    p.add_argument("--personal", metavar="FILE.npz", help="where the personalised adapter is kept")
    p.add_argument("--work", type=folder_path, metavar="DIR", help="Flower home and logs (default: beside the store)")
    p.add_argument("--flower-default", action="store_true",
                   help="start a new ClientApp process per message (Flower's default) instead of a warm host")
    p.add_argument("--connect-timeout", type=float, default=120.0, help="seconds to wait for the SuperLink")
    p.set_defaults(func=run)


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def run(args) -> int:
    # loaded when the command runs: `fedagent --help` stays light (fedagent/cli.py)
    from bridge.grpc.access import read_pem
    from fedagent.app.data_store import load_device_data, open_store
    from fedagent.local.processes import (
        check_superlink,
        explain,
        free_port,
        interrupt_on_sigterm,
        node_id_of,
        split_address,
        stop_all,
        supernode,
        wait_for,
    )

    interrupt_on_sigterm()
    if not args.connect_timeout > 0:
        raise FaceBridgeError(f"--connect-timeout {args.connect_timeout:g} is not positive", "for example 120")
    host, _ = split_address(args.superlink)
    ca = Path(args.root_certificates) if args.root_certificates else None
    if ca is None and not _loopback(host):
        raise FaceBridgeError(f"the SuperLink {args.superlink} is not on this machine and no TLS CA was given",
                              "pass --root-certificates CA.pem (updates must not travel in the clear)")
    if ca is not None:
        read_pem(str(ca), "--root-certificates", "CERTIFICATE")  # named now, not as a failed handshake later
    if args.auth_key and not Path(args.auth_key).is_file():
        what = "is a folder, not a key file" if Path(args.auth_key).is_dir() else "does not exist"
        raise FaceBridgeError(f"device key {args.auth_key} {what}", "create one with ssh-keygen -t ecdsa")
    store = open_store(args.store)
    data = load_device_data(store)  # a clear error now rather than a failed round later
    check_superlink(args.superlink, ca)
    work = Path(args.work) if args.work else store.root.parent / "fedagent-client"
    node_config = {"store": str(store.root)}
    if args.personal:
        node_config["personal"] = str(Path(args.personal).resolve())
    procs = supernode(work / "home", work / "logs", "device", args.superlink, free_port(), node_config, root_ca=ca,
                      auth_key=Path(args.auth_key) if args.auth_key else None, fast=not args.flower_default,
                      store=str(store.root))
    try:
        node_id = wait_for(lambda: node_id_of(procs[0]), args.connect_timeout, "the SuperLink to accept this "
                           "device", procs)
        print(f"fedagent client: connected to {args.superlink} as device {node_id}; training data "
              f"{data.train_windows + data.held_out_windows} windows; logs in {work / 'logs'}; Ctrl-C to leave",
              flush=True)
        while all(p.alive() for p in procs):
            time.sleep(1.0)
        raise FaceBridgeError(f"the device's SuperNode stopped: {explain(procs[0])}", f"see {procs[0].log}")
    finally:
        stop_all(procs)
